/*
 * Batches of small reads (gpufile_batch_*), without a GPU: the fake CUDA
 * driver (tests/fake_cuda.h) stands in for device memory, and its copies
 * run only when the library synchronises, so an entry reported done
 * before its copy landed shows up as wrong bytes. Every case runs on both
 * backends of the batch workers: io_uring, and plain preads (io_uring
 * refused at queue_init, as under a seccomp filter).
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef GPUFILE_HAVE_LIBURING
#include <liburing.h>
#endif

#define DEV_SIZE (40u << 20)
#include "fake_cuda.h"

#define SEED_A  71
#define SEED_B  72
#define SIZE_A  ((6u << 20) + 333)
#define SIZE_B  ((1u << 20) + 17)
#define CANARY  0xA5
#define HOST_SZ (64u << 20) /* 64 KiB kept for 1-byte entries */

static unsigned char *host_base;
static int use_uring;
static const char *path_a, *path_b;

/* ---- injected system calls ---- */

static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hook_cond = PTHREAD_COND_INITIALIZER;
static int64_t fail_offset = -1; /* pread at this offset fails with EIO */
static long fail_index = -1;     /* io_uring read of this entry: EIO */
static int64_t hold_offset = -1; /* pread/entry at this offset blocks */
static long hold_index = -1;
static int held, released;

static void hold_here(void)
{
	pthread_mutex_lock(&hook_lock);
	held = 1;
	pthread_cond_broadcast(&hook_cond);
	while (!released)
		pthread_cond_wait(&hook_cond, &hook_lock);
	pthread_mutex_unlock(&hook_lock);
}

static ssize_t hook_pread(int fd, void *buf, size_t len, off_t off)
{
	if (off == fail_offset) {
		errno = EIO;
		return -1;
	}
	if (off == hold_offset)
		hold_here();
	return pread(fd, buf, len, off);
}

#ifdef GPUFILE_HAVE_LIBURING
static int no_ring(unsigned entries, struct io_uring *ring, unsigned flags)
{
	(void)entries;
	(void)ring;
	(void)flags;
	return -ENOSYS;
}

static int hook_wait_cqe(struct io_uring *ring, struct io_uring_cqe **cqe)
{
	int rc = io_uring_wait_cqe(ring, cqe);

	if (rc == 0 && (long)io_uring_cqe_get_data64(*cqe) == fail_index)
		(*cqe)->res = -EIO;
	if (rc == 0 && (long)io_uring_cqe_get_data64(*cqe) == hold_index)
		hold_here();
	return rc;
}
#endif

static void hooks_reset(void)
{
	gpufile__sys_reset();
	gpufile__uring_reset();
	fail_offset = hold_offset = -1;
	fail_index = hold_index = -1;
	held = released = 0;
	gpufile__sys.pread = hook_pread;
#ifdef GPUFILE_HAVE_LIBURING
	if (use_uring)
		gpufile__uring.wait_cqe = hook_wait_cqe;
	else
		gpufile__uring.queue_init = no_ring;
#endif
}

/* ---- helpers ---- */

static uint64_t rng = 88172645463325252ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Bytes of entry e the file holds. */
static size_t expected(const gpufile_batch_entry_t *e, size_t file_size)
{
	if (e->offset >= (int64_t)file_size)
		return 0;
	return file_size - (size_t)e->offset < e->size
	           ? file_size - (size_t)e->offset
	           : e->size;
}

/* Checks entry i's result and bytes (pattern seed, then canary up to its
 * size). Returns 1 when correct. */
static int entry_ok(gpufile_batch_t *b, unsigned i,
                    const gpufile_batch_entry_t *e, uint64_t seed,
                    size_t file_size)
{
	size_t want = expected(e, file_size);
	ssize_t got = gpufile_batch_result(b, i);

	if (got != (ssize_t)want) {
		fprintf(stderr, "entry %u: result %zd, expected %zu (%s)\n", i,
		        got, want,
		        gpufile_batch_errmsg(b, i) ? gpufile_batch_errmsg(b, i)
		                                   : "");
		return 0;
	}
	if (test_mismatch(e->buf, want, seed, (uint64_t)e->offset) != -1 ||
	    test_mismatch_byte((char *)e->buf + want, e->size - want, CANARY) !=
	        -1) {
		fprintf(stderr,
		        "entry %u: wrong bytes (%zu at %lld) dev=%d mis=%lld "
		        "canary=%lld\n",
		        i, e->size, (long long)e->offset, in_dev(e->buf, 1),
		        test_mismatch(e->buf, want, seed, (uint64_t)e->offset),
		        test_mismatch_byte((char *)e->buf + want,
		                           e->size - want, CANARY));
		return 0;
	}
	return 1;
}

static void fill_canary(void)
{
	memset(dev_base, CANARY, DEV_SIZE);
	memset(host_base, CANARY, HOST_SZ);
}

/* Pinned buffers, streams and events the fake driver holds. */
static int live_count_batch(void)
{
	int n;

	pthread_mutex_lock(&fake_lock);
	n = pinned_count + streams_live + events_live;
	pthread_mutex_unlock(&fake_lock);
	return n;
}

/* ---- cases ---- */

static void test_invalid(gpufile_t *a)
{
	gpufile_batch_t *b = NULL;
	gpufile_batch_entry_t e[3];
	gpufile_t *w = NULL;
	char buf[16];

	CHECK_EQ(gpufile_batch_create(NULL, 4), -EINVAL);
	CHECK_EQ(gpufile_batch_create(&b, 0), -EINVAL);
	CHECK(b == NULL);
	CHECK_CONTAINS(gpufile_errmsg(), "capacity 0");
	CHECK_EQ(gpufile_batch_create(&b, GPUFILE_BATCH_MAX + 1u), -EINVAL);
	CHECK_EQ(gpufile_batch_submit(NULL, e, 1), -EINVAL);
	CHECK_EQ(gpufile_batch_poll(NULL), -EINVAL);
	CHECK_EQ(gpufile_batch_wait(NULL, -1), -EINVAL);
	CHECK_EQ(gpufile_batch_result(NULL, 0), -EINVAL);
	CHECK(gpufile_batch_errmsg(NULL, 0) == NULL);
	gpufile_batch_free(NULL);

	CHECK_EQ(gpufile_batch_create(&b, 2), 0);
	for (int i = 0; i < 3; i++)
		e[i] = (gpufile_batch_entry_t){a, buf, sizeof(buf), 0};
	CHECK_EQ(gpufile_batch_submit(b, e, 3), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "capacity of 2");
	CHECK_EQ(gpufile_batch_submit(b, NULL, 2), -EINVAL);
	e[1].file = NULL;
	CHECK_EQ(gpufile_batch_submit(b, e, 2), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "batch entry 1: handle is NULL");
	e[1] = (gpufile_batch_entry_t){a, NULL, 8, 0};
	CHECK_EQ(gpufile_batch_submit(b, e, 2), -EFAULT);
	CHECK_CONTAINS(gpufile_errmsg(), "batch entry 1");
	CHECK_CONTAINS(gpufile_errmsg(), "buffer is NULL");
	e[1] = (gpufile_batch_entry_t){a, buf, 8, -5};
	CHECK_EQ(gpufile_batch_submit(b, e, 2), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "offset -5");
	CHECK_CONTAINS(gpufile_errmsg(), path_a);
	CHECK_EQ(gpufile_open(&w, test_path("batch-wo"), "w"), 0);
	e[1] = (gpufile_batch_entry_t){w, buf, 8, 0};
	CHECK_EQ(gpufile_batch_submit(b, e, 2), -EBADF);
	CHECK_CONTAINS(gpufile_errmsg(), "not opened for reading");
	CHECK_EQ(gpufile_close(w), 0);
	/* A refused submit left nothing in flight. */
	CHECK_EQ(gpufile_batch_wait(b, 0), 0);
	CHECK_EQ(gpufile_batch_result(b, 0), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "out of range");
	gpufile_batch_free(b);
}

static void test_empty(void)
{
	gpufile_batch_t *b = NULL;

	CHECK_EQ(gpufile_batch_create(&b, 8), 0);
	/* Never submitted: complete, nothing done. */
	CHECK_EQ(gpufile_batch_wait(b, 0), 0);
	CHECK_EQ(gpufile_batch_submit(b, NULL, 0), 0);
	CHECK_EQ(gpufile_batch_poll(b), 0);
	CHECK_EQ(gpufile_batch_wait(b, 0), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), 0);
	gpufile_batch_free(b);
}

/* Random entries, sizes 1 B .. 1 MiB (and a few over the 2 MiB slot),
 * random offsets (some past the end), host and device buffers, two
 * files; some device entries packed one after another. */
static void test_random(gpufile_t *a, gpufile_t *bb, unsigned n)
{
	gpufile_batch_entry_t *e = test_malloc(n * sizeof(*e));
	uint64_t *seed = test_malloc(n * sizeof(*seed));
	size_t *fsize = test_malloc(n * sizeof(*fsize));
	size_t dev_used = 0, host_used = 0;
	gpufile_batch_t *b = NULL;
	unsigned ndev = 0, nhost = 0, bad = 0;

	fill_canary();
	for (unsigned i = 0; i < n; i++) {
		int on_b = next_rand() % 3 == 0;
		size_t fs = on_b ? SIZE_B : SIZE_A;
		unsigned shift = (unsigned)(next_rand() % 21); /* 1 B..1 MiB */
		size_t size = 1 + (size_t)(next_rand() % (1u << shift));
		int device = next_rand() % 2;
		int64_t off = (int64_t)(next_rand() % (fs + 4096));

		if (i % 197 == 5)
			size = (3u << 20) + 11; /* over a slot */
		if (i % 50 == 7)
			off = (int64_t)fs - 10; /* short */
		if (device && dev_used + size + 64 > DEV_SIZE)
			device = 0;
		if (!device && host_used + size + 64 > HOST_SZ - (64u << 10)) {
			/* Both full: a 1-byte entry, in the room kept. */
			size = 1;
			device = dev_used + size + 64 <= DEV_SIZE;
		}
		e[i].file = on_b ? bb : a;
		e[i].size = size;
		e[i].offset = off;
		if (device) {
			/* Every third device entry right after the last
			 * one: their copies coalesce. */
			dev_used += i % 3 ? 64 : 0;
			e[i].buf = dev_base + dev_used;
			dev_used += size;
			ndev++;
		} else {
			e[i].buf = host_base + host_used;
			host_used += size + 64;
			nhost++;
		}
		seed[i] = on_b ? SEED_B : SEED_A;
		fsize[i] = fs;
	}
	CHECK_EQ(gpufile_batch_create(&b, n), 0);
	CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
	CHECK_EQ(gpufile_batch_poll(b), (int)n);
	for (unsigned i = 0; i < n; i++)
		bad += !entry_ok(b, i, &e[i], seed[i], fsize[i]);
	CHECK_EQ(bad, 0);
	/* The same batch again, reused, gives the same bytes. */
	fill_canary();
	CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
	bad = 0;
	for (unsigned i = 0; i < n; i++)
		bad += !entry_ok(b, i, &e[i], seed[i], fsize[i]);
	CHECK_EQ(bad, 0);
	gpufile_batch_free(b);
	CHECK(ndev > 0 && nhost > 0);
	free(e);
	free(seed);
	free(fsize);
}

/* 4,096 reads of 4 KiB into one device buffer, one after another: a
 * handful of copies, not one per entry. */
static void test_coalesced(gpufile_t *a)
{
	const unsigned n = 4096;
	gpufile_batch_entry_t *e = test_malloc(n * sizeof(*e));
	gpufile_batch_t *b = NULL;
	gpufile_stats_t s0, s1;
	long calls, attrs;
	unsigned bad = 0;

	fill_canary();
	for (unsigned i = 0; i < n; i++)
		e[i] = (gpufile_batch_entry_t){
		    a, dev_base + (size_t)i * 4096, 4096,
		    (int64_t)(next_rand() % (SIZE_A / 4096 - 1)) * 4096};
	CHECK_EQ(gpufile_batch_create(&b, n), 0);
	pthread_mutex_lock(&fake_lock);
	calls = htod_calls;
	attrs = attr_calls;
	pthread_mutex_unlock(&fake_lock);
	GPUFILE_INIT(s0);
	gpufile_stats_self(&s0);
	CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
	pthread_mutex_lock(&fake_lock);
	calls = htod_calls - calls;
	attrs = attr_calls - attrs;
	pthread_mutex_unlock(&fake_lock);
	/* The buffer is classified once (and its range asked once), not
	 * once per entry. */
	if (attrs > 4) {
		fprintf(stderr, "%ld pointer queries for %u entries\n", attrs,
		        n);
		test_failures++;
	}
	/* One request on the path of 4 KiB device reads (below
	 * gds_threshold: "small"), its tasks the entries. */
	GPUFILE_INIT(s1);
	gpufile_stats_self(&s1);
	CHECK_EQ(s1.path[GPUFILE_PATH_SMALL][0].ops -
	             s0.path[GPUFILE_PATH_SMALL][0].ops,
	         1);
	CHECK_EQ(s1.path[GPUFILE_PATH_SMALL][0].tasks -
	             s0.path[GPUFILE_PATH_SMALL][0].tasks,
	         n);
	CHECK_EQ(s1.path[GPUFILE_PATH_SMALL][0].bytes -
	             s0.path[GPUFILE_PATH_SMALL][0].bytes,
	         (uint64_t)n * 4096);
	for (unsigned i = 0; i < n; i++)
		bad += !entry_ok(b, i, &e[i], SEED_A, SIZE_A);
	CHECK_EQ(bad, 0);
	/* A round holds at most 256 entries: 16 rounds, one copy each. */
	if (calls > 16) {
		fprintf(stderr, "%ld copies for %u contiguous entries\n", calls,
		        n);
		test_failures++;
	}
	gpufile_batch_free(b);
	free(e);
}

/* One entry's read fails with EIO; the others are still right. */
static void test_eio(gpufile_t *a, gpufile_t *bb)
{
	const unsigned n = 300, victim = 137;
	gpufile_batch_entry_t e[300];
	gpufile_batch_t *b = NULL;
	unsigned bad = 0;
	char needle[64];

	fill_canary();
	for (unsigned i = 0; i < n; i++) {
		gpufile_t *h = i % 2 ? bb : a;
		char *base = (char *)(i % 3 ? dev_base : host_base);
		e[i] = (gpufile_batch_entry_t){h, base + (size_t)i * 8192,
		                               1000 + i, (int64_t)i * 3001 + 5};
	}
	if (use_uring)
		fail_index = victim;
	else
		fail_offset = e[victim].offset;
	CHECK_EQ(gpufile_batch_create(&b, n), 0);
	CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
	CHECK_EQ(gpufile_batch_result(b, victim), -EIO);
	snprintf(needle, sizeof(needle), "batch entry %u: reading", victim);
	CHECK_CONTAINS(gpufile_batch_errmsg(b, victim), needle);
	CHECK_CONTAINS(gpufile_batch_errmsg(b, victim), path_b);
	CHECK(gpufile_batch_errmsg(b, victim - 1) == NULL);
	for (unsigned i = 0; i < n; i++)
		if (i != victim)
			bad += !entry_ok(b, i, &e[i], i % 2 ? SEED_B : SEED_A,
			                 i % 2 ? SIZE_B : SIZE_A);
	CHECK_EQ(bad, 0);
	gpufile_batch_free(b);
	hooks_reset();
}

/* A driver without cuMemcpyBatchAsync: the same table without it. */
static struct gpufile__cuda fake_nobatch;

/* Checks that entry i's message names the file, its offset and why. */
static void check_msg(gpufile_batch_t *b, unsigned i,
                      const gpufile_batch_entry_t *e, const char *path,
                      const char *why)
{
	char needle[512];

	snprintf(needle, sizeof(needle),
	         "batch entry %u: reading %s at offset %lld (%zu bytes): ", i,
	         path, (long long)e->offset, e->size);
	CHECK_CONTAINS(gpufile_batch_errmsg(b, i), needle);
	CHECK_CONTAINS(gpufile_batch_errmsg(b, i), why);
}

/* A copy to the GPU fails: the entries it carried fail with
 * GPUFILE_ECUDA, every other entry is right. A batch slot's pinned
 * memory cannot be allocated: the entries of that round fail, the
 * others are right. Each failure's message names the file and offset.
 * Then a batch copy is refused: the copies are made one by one, and
 * every entry is right. */
static void test_copy_failure(gpufile_t *a)
{
	const unsigned n = 64;
	gpufile_batch_entry_t e[64];
	gpufile_batch_t *b = NULL;
	unsigned failed = 0, bad = 0;

	fill_canary();
	for (unsigned i = 0; i < n; i++)
		e[i] = (gpufile_batch_entry_t){a, dev_base + (size_t)i * 65536,
		                               5000, (int64_t)i * 7777};
	gpufile__cuda_override(&fake_nobatch);
	pthread_mutex_lock(&fake_lock);
	fail_htod = 1;
	pthread_mutex_unlock(&fake_lock);
	CHECK_EQ(gpufile_batch_create(&b, n), 0);
	CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
	for (unsigned i = 0; i < n; i++) {
		if (gpufile_batch_result(b, i) == GPUFILE_ECUDA) {
			failed++;
			check_msg(b, i, &e[i], path_a,
			          "copying to the GPU: cuMemcpyHtoDAsync");
		} else {
			bad += !entry_ok(b, i, &e[i], SEED_A, SIZE_A);
		}
	}
	CHECK_EQ(failed, 1); /* not contiguous: one entry per copy */
	CHECK_EQ(bad, 0);
	pthread_mutex_lock(&fake_lock);
	fail_htod = 0;
	pthread_mutex_unlock(&fake_lock);
	gpufile_batch_free(b);
	gpufile__cuda_override(&fake);

	/* A new batch: its workers allocate their slots at their first
	 * round; the first allocation fails. */
	fill_canary();
	failed = bad = 0;
	pthread_mutex_lock(&fake_lock);
	fail_hostalloc = 1;
	pthread_mutex_unlock(&fake_lock);
	CHECK_EQ(gpufile_batch_create(&b, n), 0);
	CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
	for (unsigned i = 0; i < n; i++) {
		if (gpufile_batch_result(b, i) == GPUFILE_ECUDA) {
			failed++;
			check_msg(b, i, &e[i], path_a, "cuMemHostAlloc");
		} else {
			bad += !entry_ok(b, i, &e[i], SEED_A, SIZE_A);
		}
	}
	CHECK(failed >= 1);
	CHECK_EQ(bad, 0);
	pthread_mutex_lock(&fake_lock);
	CHECK_EQ(fail_hostalloc, 0); /* the failure happened */
	fail_hostalloc = 0;
	pthread_mutex_unlock(&fake_lock);
	gpufile_batch_free(b);

	fill_canary();
	pthread_mutex_lock(&fake_lock);
	fail_batch = 1;
	pthread_mutex_unlock(&fake_lock);
	CHECK_EQ(gpufile_batch_create(&b, n), 0);
	CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
	bad = 0;
	for (unsigned i = 0; i < n; i++)
		bad += !entry_ok(b, i, &e[i], SEED_A, SIZE_A);
	CHECK_EQ(bad, 0);
	pthread_mutex_lock(&fake_lock);
	CHECK_EQ(fail_batch, 0); /* the refusal happened */
	fail_batch = 0;
	pthread_mutex_unlock(&fake_lock);
	gpufile_batch_free(b);
}

/* 4,096 reads of 4 KiB to scattered places of the device buffer: with
 * cuMemcpyBatchAsync, a few batch calls and no single copies; without
 * it, one copy per entry. The bytes are right either way. */
static void test_scattered(gpufile_t *a)
{
	const unsigned n = 4096;
	gpufile_batch_entry_t *e = test_malloc(n * sizeof(*e));
	gpufile_batch_t *b = NULL;
	long htod0, batch0, htod1, batch1;

	for (int with = 1; with >= 0; with--) {
		unsigned bad = 0;

		gpufile__cuda_override(with ? &fake : &fake_nobatch);
		fill_canary();
		for (unsigned i = 0; i < n; i++)
			e[i] = (gpufile_batch_entry_t){
			    a, dev_base + (size_t)i * 8192 + (i % 7), 4096,
			    (int64_t)(next_rand() % (SIZE_A - 4096))};
		pthread_mutex_lock(&fake_lock);
		htod0 = htod_calls;
		batch0 = batch_copy_calls;
		pthread_mutex_unlock(&fake_lock);
		CHECK_EQ(gpufile_batch_create(&b, n), 0);
		CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
		CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
		pthread_mutex_lock(&fake_lock);
		htod1 = htod_calls - htod0;
		batch1 = batch_copy_calls - batch0;
		pthread_mutex_unlock(&fake_lock);
		for (unsigned i = 0; i < n; i++)
			bad += !entry_ok(b, i, &e[i], SEED_A, SIZE_A);
		CHECK_EQ(bad, 0);
		if (with) {
			CHECK_EQ(htod1, 0);
			CHECK(batch1 >= 1 && batch1 <= 16);
		} else {
			CHECK_EQ(htod1, n);
			CHECK_EQ(batch1, 0);
		}
		gpufile_batch_free(b);
	}
	gpufile__cuda_override(&fake);
	free(e);
}

/* A new batch of e[0..n) submitted, returned once entry held_entry is
 * held inside its read by the hook (by index under io_uring, else by
 * offset). */
static gpufile_batch_t *submit_holding(const gpufile_batch_entry_t *e,
                                       unsigned n, unsigned held_entry)
{
	gpufile_batch_t *b = NULL;

	if (use_uring)
		hold_index = held_entry;
	else
		hold_offset = e[held_entry].offset;
	CHECK_EQ(gpufile_batch_create(&b, n), 0);
	CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
	pthread_mutex_lock(&hook_lock);
	while (!held)
		pthread_cond_wait(&hook_cond, &hook_lock);
	pthread_mutex_unlock(&hook_lock);
	return b;
}

/* poll and wait while one entry is held inside its read: no timing, the
 * hook decides when it ends. */
static void test_poll_wait(gpufile_t *a)
{
	const unsigned n = 40, held_entry = 3;
	gpufile_batch_entry_t e[40], again[1];
	gpufile_batch_t *b = NULL;
	int done;

	fill_canary();
	for (unsigned i = 0; i < n; i++)
		e[i] = (gpufile_batch_entry_t){
		    a, (i % 2 ? dev_base : host_base) + (size_t)i * 4096, 4096,
		    (int64_t)i * 4096};
	b = submit_holding(e, n, held_entry);
	done = gpufile_batch_poll(b);
	CHECK(done >= 0 && done < (int)n);
	CHECK_EQ(gpufile_batch_result(b, held_entry), -EINPROGRESS);
	CHECK_EQ(gpufile_batch_wait(b, 0), -ETIMEDOUT);
	CHECK_CONTAINS(gpufile_errmsg(), "entries done");
	CHECK_EQ(gpufile_batch_wait(b, 20), -ETIMEDOUT);
	again[0] = e[0];
	CHECK_EQ(gpufile_batch_submit(b, again, 1), -EBUSY);
	CHECK_CONTAINS(gpufile_errmsg(), "still in flight");
	pthread_mutex_lock(&hook_lock);
	released = 1;
	pthread_cond_broadcast(&hook_cond);
	pthread_mutex_unlock(&hook_lock);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
	CHECK_EQ(gpufile_batch_poll(b), (int)n);
	for (unsigned i = 0; i < n; i++)
		CHECK(entry_ok(b, i, &e[i], SEED_A, SIZE_A));
	gpufile_batch_free(b);
	hooks_reset();
}

static int at_complete, complete_go;

static void hold_complete(gpufile_batch_t *b)
{
	(void)b;
	pthread_mutex_lock(&hook_lock);
	at_complete = 1;
	pthread_cond_broadcast(&hook_cond);
	while (!complete_go)
		pthread_cond_wait(&hook_cond, &hook_lock);
	pthread_mutex_unlock(&hook_lock);
}

/* poll counting n means the batch is complete: held between its last
 * entry's end and its completion, every entry is done but poll says
 * n - 1, like wait (0) and submit; once poll says n, both go at once.
 * (poll said n there, and a caller resubmitting on it got -EBUSY.) */
static void test_poll_complete(gpufile_t *a)
{
	const unsigned n = 16;
	gpufile_batch_entry_t e[16];
	gpufile_batch_t *b = NULL;

	fill_canary();
	for (unsigned i = 0; i < n; i++)
		e[i] = (gpufile_batch_entry_t){
		    a, (i % 2 ? dev_base : host_base) + (size_t)i * 4096, 4096,
		    (int64_t)i * 4096};
	CHECK_EQ(gpufile_batch_create(&b, n), 0);
	at_complete = complete_go = 0;
	gpufile__batch_complete_hook = hold_complete;
	CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
	pthread_mutex_lock(&hook_lock);
	while (!at_complete)
		pthread_cond_wait(&hook_cond, &hook_lock);
	pthread_mutex_unlock(&hook_lock);
	for (unsigned i = 0; i < n; i++)
		CHECK(entry_ok(b, i, &e[i], SEED_A, SIZE_A));
	CHECK_EQ(gpufile_batch_poll(b), (int)n - 1);
	CHECK_EQ(gpufile_batch_wait(b, 0), -ETIMEDOUT);
	CHECK_EQ(gpufile_batch_submit(b, e, n), -EBUSY);
	gpufile__batch_complete_hook = NULL;
	pthread_mutex_lock(&hook_lock);
	complete_go = 1;
	pthread_cond_broadcast(&hook_cond);
	pthread_mutex_unlock(&hook_lock);
	while (gpufile_batch_poll(b) != (int)n)
		sched_yield();
	CHECK_EQ(gpufile_batch_wait(b, 0), (int)n);
	CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
	gpufile_batch_free(b);
}

/* Waits until thread tid sleeps in futex(2), as pthread_cond_wait does,
 * reading /proc/self/task/TID/syscall: a state, not a time. Where that
 * file cannot be read, a pause has to do. */
static void wait_thread_asleep(pid_t tid)
{
	char path[64], line[64];

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
	for (;;) {
		FILE *f = fopen(path, "r");
		int ok = f && fgets(line, sizeof(line), f);

		if (f)
			fclose(f);
		if (!ok) {
			test_sleep_ms(100);
			return;
		}
		if (atol(line) == SYS_futex)
			return;
		sched_yield();
	}
}

struct closer {
	gpufile_t *h;
	atomic_int tid, done;
	int rc;
};

static void *close_it(void *arg)
{
	struct closer *c = arg;

	atomic_store(&c->tid, (int)syscall(SYS_gettid));
	c->rc = gpufile_close(c->h);
	atomic_store(&c->done, 1);
	return NULL;
}

/* gpufile_close of a handle with batch entries in flight waits for them
 * and returns once they end: the closer, asleep before the held entry
 * ends, must be woken by it (it slept for ever when entries lowered the
 * handle's count with a bare decrement). The alarm makes a hang a
 * failure. */
static void test_close_waits(void)
{
	const unsigned n = 8, held_entry = 5;
	gpufile_batch_entry_t e[8];
	struct closer c = {0};
	gpufile_batch_t *b = NULL;
	pthread_t t;

	fill_canary();
	CHECK_EQ(gpufile_open(&c.h, path_a, "r"), 0);
	for (unsigned i = 0; i < n; i++)
		e[i] = (gpufile_batch_entry_t){
		    c.h, (i % 2 ? dev_base : host_base) + (size_t)i * 4096,
		    4096, (int64_t)i * 4096};
	b = submit_holding(e, n, held_entry);
	alarm(60);
	CHECK_EQ(pthread_create(&t, NULL, close_it, &c), 0);
	while (!atomic_load(&c.tid))
		sched_yield();
	wait_thread_asleep((pid_t)atomic_load(&c.tid));
	CHECK_EQ(atomic_load(&c.done), 0);
	pthread_mutex_lock(&hook_lock);
	released = 1;
	pthread_cond_broadcast(&hook_cond);
	pthread_mutex_unlock(&hook_lock);
	pthread_join(t, NULL);
	alarm(0);
	CHECK_EQ(c.rc, 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
	for (unsigned i = 0; i < n; i++)
		CHECK(entry_ok(b, i, &e[i], SEED_A, SIZE_A));
	gpufile_batch_free(b);
	hooks_reset();
}

/* The file records (gpufile_stats_files): one per gpufile_open, whatever
 * the batches do. A submit used to add a record of its own once the
 * handle's was written, so files_opened counted submits and 64 of them
 * pushed every open handle's record out. A host submit leaves the
 * handle's device path undecided; the first device entry decides it, and
 * the record says why. */
static void test_records(void)
{
	const char *pc = test_path("batch-rec-c"),
	           *pd = test_path("batch-rec-d");
	gpufile_file_stat_t files[GPUFILE_MAX_FILE_STATS];
	gpufile_batch_entry_t e;
	gpufile_batch_t *b = NULL;
	gpufile_stats_t st;
	gpufile_t *h = NULL, *other = NULL;
	uint64_t opened;
	int n;

	CHECK_EQ(test_make_file(pc, 1u << 20, SEED_A), 0);
	CHECK_EQ(test_make_file(pd, 1u << 20, SEED_B), 0);
	GPUFILE_INIT(st);
	CHECK_EQ(gpufile_stats_self(&st), 0);
	opened = st.files_opened;
	CHECK_EQ(gpufile_open(&other, pd, "r"), 0);
	CHECK_EQ(gpufile_open(&h, pc, "r"), 0);
	CHECK_EQ(gpufile_batch_create(&b, 1), 0);
	e = (gpufile_batch_entry_t){h, host_base, 4096, 0};
	for (int i = 0; i < 2 * GPUFILE_MAX_FILE_STATS; i++) {
		if (i == GPUFILE_MAX_FILE_STATS) {
			/* Still pending: says "batch", device path open. */
			n = gpufile_stats_files(0, files,
			                        GPUFILE_MAX_FILE_STATS);
			CHECK(n >= 2);
			if (n >= 2) {
				CHECK_EQ(strcmp(files[n - 1].path, pc), 0);
				CHECK_CONTAINS(files[n - 1].reason, "batch");
			}
			/* Device entries from here, above gds_threshold. */
			e.buf = dev_base;
			e.size = 64u << 10;
		}
		CHECK_EQ(gpufile_batch_submit(b, &e, 1), 0);
		CHECK_EQ(gpufile_batch_wait(b, -1), 1);
	}
	CHECK_EQ(gpufile_stats_self(&st), 0);
	CHECK_EQ(st.files_opened, opened + 2);
	n = gpufile_stats_files(0, files, GPUFILE_MAX_FILE_STATS);
	CHECK(n >= 2);
	if (n >= 2) {
		CHECK_EQ(strcmp(files[n - 2].path, pd), 0);
		CHECK_CONTAINS(files[n - 2].reason, "opened");
		CHECK_EQ(strcmp(files[n - 1].path, pc), 0);
		CHECK_EQ(files[n - 1].chosen, GPUFILE_PATH_POSIX);
		CHECK_CONTAINS(files[n - 1].reason, "compat_mode=on");
	}
	gpufile_batch_free(b);
	CHECK_EQ(gpufile_close(h), 0);
	CHECK_EQ(gpufile_close(other), 0);
}

/* An entry's message is whole however long the file's path: one of over
 * 600 bytes makes a message of over 700 (cut at 512 before). */
static void test_long_message(void)
{
	char path[1024], want[1200], part[201];
	gpufile_batch_entry_t e[2];
	gpufile_batch_t *b = NULL;
	gpufile_t *h = NULL;
	const char *msg;

	memset(part, 'd', sizeof(part) - 1);
	part[sizeof(part) - 1] = '\0';
	snprintf(path, sizeof(path), "%s", test_path("long"));
	CHECK(mkdir(path, 0700) == 0 || errno == EEXIST);
	for (int i = 0; i < 3; i++) {
		size_t at = strlen(path);

		snprintf(path + at, sizeof(path) - at, "/%s", part);
		CHECK(mkdir(path, 0700) == 0 || errno == EEXIST);
	}
	strncat(path, "/f", sizeof(path) - strlen(path) - 1);
	CHECK_EQ(test_make_file(path, 8192, SEED_A), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return;
	e[0] = (gpufile_batch_entry_t){h, host_base, 1000, 0};
	e[1] = (gpufile_batch_entry_t){h, host_base + 4096, 1000, 4096};
	if (use_uring)
		fail_index = 1;
	else
		fail_offset = 4096;
	CHECK_EQ(gpufile_batch_create(&b, 2), 0);
	CHECK_EQ(gpufile_batch_submit(b, e, 2), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), 2);
	CHECK_EQ(gpufile_batch_result(b, 0), 1000);
	CHECK_EQ(gpufile_batch_result(b, 1), -EIO);
	snprintf(want, sizeof(want),
	         "batch entry 1: reading %s at offset 4096 (1000 bytes): %s",
	         path, strerror(EIO));
	CHECK(strlen(want) > 700);
	msg = gpufile_batch_errmsg(b, 1);
	CHECK(msg != NULL);
	if (msg && strcmp(msg, want) != 0) {
		fprintf(stderr, "message of %zu bytes:\n%s\nwanted %zu:\n%s\n",
		        strlen(msg), msg, strlen(want), want);
		test_failures++;
	}
	gpufile_batch_free(b);
	CHECK_EQ(gpufile_close(h), 0);
	hooks_reset();
}

static void run_all(gpufile_t *a, gpufile_t *bb)
{
	hooks_reset();
	test_invalid(a);
	test_empty();
	test_random(a, bb, 800);
	test_coalesced(a);
	test_eio(a, bb);
	test_long_message();
	test_copy_failure(a);
	test_scattered(a);
	test_poll_wait(a);
	test_close_waits();
	test_poll_complete(a);
	gpufile__sys_reset();
	gpufile__uring_reset();
}

int main(void)
{
	gpufile_t *a = NULL, *bb = NULL;
	void *mem = NULL;

	path_a = test_path("batch-a");
	path_b = test_path("batch-b");
	if (posix_memalign(&mem, 4096, DEV_SIZE)) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	dev_base = mem;
	host_base = test_malloc(HOST_SZ);
	CHECK_EQ(test_make_file(path_a, SIZE_A, SEED_A), 0);
	CHECK_EQ(test_make_file(path_b, SIZE_B, SEED_B), 0);
	fake_nobatch = fake;
	fake_nobatch.cuMemcpyBatchAsync = NULL;
	gpufile__cuda_override(&fake);
	/* Never hand the fake's "device memory" to a real cuFile. */
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
	CHECK_EQ(gpufile_open(&a, path_a, "r"), 0);
	CHECK_EQ(gpufile_open(&bb, path_b, "r"), 0);

	use_uring = 0;
	fprintf(stderr, "-- preads\n");
	run_all(a, bb);
#ifdef GPUFILE_HAVE_LIBURING
	use_uring = 1;
	fprintf(stderr, "-- io_uring\n");
	run_all(a, bb);
#endif
	test_records();
	CHECK_EQ(gpufile_close(a), 0);
	CHECK_EQ(gpufile_close(bb), 0);
	gpufile_release();
	/* Every batch freed its slots and streams. */
	CHECK_EQ(live_count_batch(), 0);
	CHECK_EQ(bad_copies, 0);
	gpufile__cuda_override(NULL);
	gpufile_config_reset();
	free(dev_base);
	free(host_base);
	return test_finish("test_batch");
}
