/*
 * The GPU staging path without a GPU. A fake driver table, installed with
 * gpufile__cuda_override(), makes a host region stand in for device memory:
 * cuPointerGetAttributes calls it device memory of GPU 0, and the
 * asynchronous copies run only when the library synchronises with the
 * stream or an event recorded after them, as on a real GPU. So a bounce
 * buffer reused too early, or a request that returns before its copies
 * ended, shows up as wrong bytes. The fake also counts pinned memory and
 * can fail cuMemHostAlloc and the copies on demand.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#define DEV_SIZE  (40u << 20)
#define FILE_SIZE ((24u << 20) + 123)
#define SEED_FILE 41
#define SEED_DEV  42
#define CANARY    0x3C
#include "fake_cuda.h"

/* ---- helpers ---- */

static size_t peak_reset(void)
{
	size_t live;

	pthread_mutex_lock(&fake_lock);
	live = pinned_peak = pinned_live;
	pthread_mutex_unlock(&fake_lock);
	return live;
}

static size_t peak(void)
{
	size_t p;

	pthread_mutex_lock(&fake_lock);
	p = pinned_peak;
	pthread_mutex_unlock(&fake_lock);
	return p;
}

/* The stagers' bound: a third of gpufile_pinned_bytes_max(), whose rest is
 * for stream-ordered reads staged on a stream (none run here). */
static size_t stagers_max(void)
{
	return gpufile_pinned_bytes_max() / 3;
}

static int live_count(void)
{
	int n;

	pthread_mutex_lock(&fake_lock);
	n = pinned_count + streams_live + events_live;
	pthread_mutex_unlock(&fake_lock);
	return n;
}

static gpufile_stats_t stats(void)
{
	gpufile_stats_t st;

	GPUFILE_INIT(st);
	gpufile_stats_self(&st);
	return st;
}

static int64_t ops_delta(const gpufile_stats_t *a, const gpufile_stats_t *b,
                         gpufile_path_t p, int w)
{
	return (int64_t)(b->path[p][w].ops - a->path[p][w].ops);
}

/* The next copy call *knob counts (fail_batch, fail_to_dev) fails: a read
 * of size bytes fails, naming the fake's error and the file; the next
 * read gets every byte. */
static void read_after_copy_fails(gpufile_t *h, const char *rpath, size_t size,
                                  int *knob)
{
	pthread_mutex_lock(&fake_lock);
	*knob = 1;
	pthread_mutex_unlock(&fake_lock);
	CHECK_EQ(gpufile_pread(h, dev_base, size, 0), GPUFILE_ECUDA);
	CHECK_CONTAINS(gpufile_errmsg(), "CUDA_ERROR_FAKE_COPY");
	CHECK_CONTAINS(gpufile_errmsg(), rpath);
	memset(dev_base, 0, size);
	CHECK_EQ(gpufile_pread(h, dev_base, size, 0), (ssize_t)size);
	CHECK_EQ(test_mismatch(dev_base, size, SEED_FILE, 0), -1);
}

/* ---- tests ---- */

static void test_classify(void)
{
	gpufile_mem_t kind = GPUFILE_MEM_HOST;
	int device = -1;
	unsigned char host[16];

	CHECK_EQ(gpufile_mem_kind(dev_base + 5, &kind, &device), 0);
	CHECK_EQ(kind, GPUFILE_MEM_DEVICE);
	CHECK_EQ(device, 0);
	CHECK_EQ(gpufile_mem_kind(host, &kind, &device), 0);
	CHECK_EQ(kind, GPUFILE_MEM_HOST);
	CHECK_EQ(device, -1);
	CHECK_EQ(gpufile_cuda_device_count(), 1);

	/* gpufile_memcpy through the driver. */
	test_fill(host, sizeof(host), 1, 0);
	CHECK_EQ(gpufile_memcpy(dev_base + 100, host, sizeof(host)), 0);
	CHECK(memcmp(dev_base + 100, host, sizeof(host)) == 0);
	memset(host, 0, sizeof(host));
	CHECK_EQ(gpufile_memcpy(host, dev_base + 100, sizeof(host)), 0);
	CHECK_EQ(test_mismatch(host, sizeof(host), 1, 0), -1);
}

/* One device read and one device write of size bytes at file offset off,
 * device address dev_base + mis; checks bytes, canaries and the path
 * counted. */
static void roundtrip_one(gpufile_t *rh, const char *wpath, size_t size,
                          int64_t off, size_t mis, size_t threshold)
{
	const gpufile_path_t want_path =
	    size < threshold ? GPUFILE_PATH_SMALL : GPUFILE_PATH_POSIX;
	unsigned char *dev = dev_base + mis;
	gpufile_stats_t a, b;
	gpufile_t *wh = NULL;
	ssize_t n;

	/* file -> device */
	memset(dev_base, CANARY, mis + size + 4096);
	a = stats();
	n = gpufile_pread(rh, dev, size, off);
	b = stats();
	CHECK_EQ(n, (ssize_t)size);
	if (n != (ssize_t)size ||
	    test_mismatch(dev, size, SEED_FILE, (uint64_t)off) != -1 ||
	    test_mismatch_byte(dev_base, mis, CANARY) != -1 ||
	    test_mismatch_byte(dev + size, 4096, CANARY) != -1) {
		fprintf(stderr,
		        "  device read size=%zu off=%lld mis=%zu: %zd %s\n",
		        size, (long long)off, mis, n,
		        n < 0 ? gpufile_errmsg() : "(bytes differ)");
		test_failures++;
	}
	CHECK_EQ(ops_delta(&a, &b, want_path, 0), 1);
	CHECK_EQ(ops_delta(&a, &b, GPUFILE_PATH_HOST, 0), 0);
	CHECK_EQ(b.path[want_path][0].bytes - a.path[want_path][0].bytes, size);

	/* device -> file */
	test_fill(dev, size, SEED_DEV, (uint64_t)off);
	CHECK_EQ(gpufile_open(&wh, wpath, "w+"), 0);
	if (!wh)
		return;
	a = stats();
	n = gpufile_pwrite(wh, dev, size, off);
	b = stats();
	CHECK_EQ(n, (ssize_t)size);
	if (n < 0)
		fprintf(stderr,
		        "  device write size=%zu off=%lld mis=%zu: %s\n", size,
		        (long long)off, mis, gpufile_errmsg());
	CHECK_EQ(ops_delta(&a, &b, want_path, 1), 1);
	CHECK_EQ(gpufile_close(wh), 0);
	{
		size_t len = 0;
		unsigned char *data = test_read_file(wpath, &len);
		CHECK(data != NULL);
		if (data) {
			CHECK_EQ(len, (size_t)off + size);
			CHECK_EQ(test_mismatch_byte(data, (size_t)off, 0), -1);
			CHECK_EQ(test_mismatch(data + off, size, SEED_DEV,
			                       (uint64_t)off),
			         -1);
			free(data);
		}
	}
}

static void test_roundtrips(const char *rpath, const char *wpath,
                            const char *backend)
{
	size_t ts = 0, threshold = 0, bbs = 0;
	unsigned nthreads = 0;
	gpufile_t *h = NULL;

	CHECK_EQ(gpufile_config_set("direct_io", backend), 0);
	CHECK_EQ(gpufile_get_task_size(&ts), 0);
	CHECK_EQ(gpufile_get_gds_threshold(&threshold), 0);
	CHECK_EQ(gpufile_get_nthreads(&nthreads), 0);
	CHECK_EQ(gpufile_get_bounce_buffer_size(&bbs), 0);
	{
		const size_t sizes[] = {
		    1,        4095,           4096,   (16 << 10) - 1,
		    16 << 10, (16 << 10) + 1, ts - 1, ts,
		    ts + 1,   (7u << 20) + 3};
		const int64_t offsets[] = {0, 1, 4097, (int64_t)ts - 5};
		const size_t mis[] = {0, 1, 3};

		CHECK_EQ(gpufile_open(&h, rpath, "r"), 0);
		if (!h)
			return;
		peak_reset();
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
			for (size_t o = 0;
			     o < sizeof(offsets) / sizeof(offsets[0]); o++)
				roundtrip_one(h, wpath, sizes[s], offsets[o],
				              mis[(s + o) % 3], threshold);
	}
	/* Pinned memory stays within the documented bound. */
	CHECK_EQ(gpufile_pinned_bytes_max(),
	         3 * (size_t)nthreads * 2 * (bbs + 4096));
	CHECK(peak() <= stagers_max());
	CHECK(peak() > 0);

	/* A device read crossing end-of-file. */
	{
		const size_t size = 3u << 20;
		const int64_t off = FILE_SIZE - 1000;
		ssize_t n;

		memset(dev_base, CANARY, size + 16);
		n = gpufile_pread(h, dev_base + 1, size, off);
		CHECK_EQ(n, 1000);
		CHECK_EQ(
		    test_mismatch(dev_base + 1, 1000, SEED_FILE, (uint64_t)off),
		    -1);
		CHECK_EQ(
		    test_mismatch_byte(dev_base + 1001, size - 1000, CANARY),
		    -1);
		CHECK_EQ(gpufile_pread(h, dev_base, size, FILE_SIZE + 5), 0);
	}
	/* The whole file, with many tasks in flight. */
	{
		memset(dev_base, 0, FILE_SIZE);
		CHECK_EQ(gpufile_pread(h, dev_base, FILE_SIZE, 0),
		         (ssize_t)FILE_SIZE);
		CHECK_EQ(test_mismatch(dev_base, FILE_SIZE, SEED_FILE, 0), -1);
	}
	/* Asynchronous device requests, several at once. */
	{
		gpufile_future_t *f[6];
		const size_t piece = FILE_SIZE / 6;

		memset(dev_base, 0, FILE_SIZE);
		for (int i = 0; i < 6; i++)
			CHECK_EQ(
			    gpufile_pread_async(h, dev_base + i * piece, piece,
			                        (int64_t)(i * piece), &f[i]),
			    0);
		for (int i = 5; i >= 0; i--) {
			CHECK_EQ(gpufile_future_wait(f[i]), (ssize_t)piece);
			gpufile_future_free(f[i]);
		}
		CHECK_EQ(test_mismatch(dev_base, 6 * piece, SEED_FILE, 0), -1);
	}
	CHECK(peak() <= stagers_max());
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_config_set("direct_io", "auto");
}

/* Several small bounce buffers per worker: each task has many chunks, so
 * the pipeline (read chunk k+1 while chunk k is copied) is exercised. */
static void test_pipeline(const char *rpath, const char *wpath)
{
	long htod_before;
	gpufile_t *h = NULL;

	CHECK_EQ(gpufile_config_set("bounce_buffers", "4"), 0);
	CHECK_EQ(gpufile_set_bounce_buffer_size(64 << 10), 0);
	CHECK_EQ(gpufile_set_task_size(1 << 20), 0);
	CHECK_EQ(gpufile_set_nthreads(3), 0);
	CHECK_EQ(gpufile_pinned_bytes_max(), 3 * 3u * 4 * ((64 << 10) + 4096));
	gpufile_release(); /* start from no pinned memory */
	CHECK_EQ(live_count(), 0);
	peak_reset();
	CHECK_EQ(gpufile_open(&h, rpath, "r"), 0);
	if (!h)
		return;
	pthread_mutex_lock(&fake_lock);
	htod_before = htod_calls + batch_copies;
	pthread_mutex_unlock(&fake_lock);
	memset(dev_base, 0, FILE_SIZE);
	CHECK_EQ(gpufile_pread(h, dev_base + 3, FILE_SIZE - 7, 7),
	         (ssize_t)FILE_SIZE - 7);
	CHECK_EQ(test_mismatch(dev_base + 3, FILE_SIZE - 7, SEED_FILE, 7), -1);
	pthread_mutex_lock(&fake_lock);
	/* At least one copy per chunk, alone or pooled with others. */
	CHECK(htod_calls + batch_copies - htod_before >=
	      (long)(FILE_SIZE / (64 << 10)));
	pthread_mutex_unlock(&fake_lock);
	{
		static const size_t sizes[] = {(64 << 10) - 1, (64 << 10) + 1,
		                               (1 << 20) + 1, (3 << 20) + 4097};
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
			roundtrip_one(h, wpath, sizes[i],
			              (int64_t)(i * 65535 + 1), i % 3,
			              16 << 10);
	}
	CHECK(peak() <= stagers_max());
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_config_reset();
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
}

/* A device read of fewer tasks than workers, from the page cache, is cut
 * into smaller tasks, halving task_size down to 512 KiB (file.c); writes,
 * reads of as many tasks as workers, and cold reads (O_DIRECT would read
 * them) keep task_size. The library is told what is cached (mincore):
 * the test's file could be evicted at any time. */
static void test_small_reads_split(const char *rpath, const char *wpath)
{
	static const struct {
		size_t size;
		int64_t off;
		uint64_t tasks;
		int is_write; /* 2: a read of a range not cached */
	} cases[] = {
	    {4u << 20, 0, 8, 0},                   /* 8 x 512 KiB */
	    {(4u << 20) + 1, (4 << 20) - 1, 9, 0}, /* 512 KiB edges */
	    {2u << 20, 0, 4, 0},                   /* 512 KiB is the least */
	    {1u << 20, 0, 2, 0},
	    {300u << 10, 5, 1, 0},      /* below 2 x 512 KiB */
	    {16u << 20, 0, 8, 0},       /* 8 x 2 MiB */
	    {(20u << 20) + 5, 3, 6, 0}, /* 6 of 4 MiB: already 6 */
	    {4u << 20, 0, 1, 1},        /* a write: one task */
	    {4u << 20, 0, 1, 2},        /* cold: one task */
	};
	gpufile_t *h = NULL, *wh = NULL;

	CHECK_EQ(gpufile_set_task_size(4u << 20), 0);
	CHECK_EQ(gpufile_set_nthreads(8), 0);
	CHECK_EQ(gpufile_open(&h, rpath, "r"), 0);
	CHECK_EQ(gpufile_open(&wh, wpath, "w+"), 0);
	if (!h || !wh)
		return;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const size_t size = cases[i].size;
		const int64_t off = cases[i].off;
		const int w = cases[i].is_write == 1;
		gpufile_stats_t a, b;
		ssize_t n;

		gpufile__sys.mincore = cases[i].is_write == 2
		                           ? test_mincore_none_cached
		                           : test_mincore_all_cached;
		gpufile__sys.cachestat = cases[i].is_write == 2
		                             ? test_cachestat_none_cached
		                             : test_cachestat_all_cached;
		a = stats();

		if (cases[i].size == (20u << 20) + 5)
			CHECK_EQ(gpufile_set_nthreads(6), 0);
		memset(dev_base, CANARY, size + 4096);
		n = w ? gpufile_pwrite(wh, dev_base, size, off)
		      : gpufile_pread(h, dev_base, size, off);
		b = stats();
		CHECK_EQ(n, (ssize_t)size);
		if (!w)
			CHECK_EQ(test_mismatch(dev_base, size, SEED_FILE,
			                       (uint64_t)off),
			         -1);
		CHECK_EQ(test_mismatch_byte(dev_base + size, 4096, CANARY), -1);
		CHECK_EQ(b.path[GPUFILE_PATH_POSIX][w].tasks -
		             a.path[GPUFILE_PATH_POSIX][w].tasks,
		         cases[i].tasks);
	}
	gpufile__sys_reset();
	gpufile_close(h);
	gpufile_close(wh);
	gpufile_config_reset();
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
}

/* Driver failures: an error naming the call, then later requests work. */
/* Pooled copies (staging.c): the warm reader's copies go to the GPU
 * several to a cuMemcpyBatchAsync; a send that fails fails the read whose
 * copies it held, and no other. */
static sem_t gate;
static atomic_int gate_armed;

/* pread that holds its first call after gate_armed until gate is
 * posted. */
static ssize_t gated_pread(int fd, void *buf, size_t len, off_t off)
{
	if (atomic_exchange(&gate_armed, 0))
		sem_wait(&gate);
	return pread(fd, buf, len, off);
}

static void test_pooled_copies(const char *rpath)
{
	const size_t chunk = 64u << 10;
	gpufile_t *h = NULL;
	gpufile_future_t *fa = NULL, *fb = NULL;
	long calls, copies, htod;

	gpufile_release();
	CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);
	CHECK_EQ(gpufile_set_bounce_buffer_size(chunk), 0);
	CHECK_EQ(gpufile_set_task_size(1u << 20), 0);
	CHECK_EQ(gpufile_set_nthreads(4), 0); /* 4 x 2 buffers: 2 a call */
	CHECK_EQ(gpufile_open(&h, rpath, "r"), 0);
	if (!h)
		return;
	gpufile__sys.mincore = test_mincore_none_cached; /* pread, no map */

	/* Several copies a call, every byte in place: fewer copy calls than
	 * chunks, and copies for every chunk. */
	htod = fake_read_long(&htod_calls);
	calls = fake_read_long(&batch_copy_calls);
	copies = fake_read_long(&batch_copies);
	memset(dev_base, CANARY, FILE_SIZE + 4096);
	CHECK_EQ(gpufile_pread(h, dev_base + 1, FILE_SIZE - 9, 9),
	         (ssize_t)FILE_SIZE - 9);
	CHECK_EQ(test_mismatch(dev_base + 1, FILE_SIZE - 9, SEED_FILE, 9), -1);
	CHECK_EQ(dev_base[0], CANARY);
	CHECK_EQ(test_mismatch_byte(dev_base + FILE_SIZE - 8, 4096, CANARY),
	         -1);
	calls = fake_read_long(&batch_copy_calls) - calls;
	copies = fake_read_long(&batch_copies) - copies;
	htod = fake_read_long(&htod_calls) - htod;
	CHECK(calls > 0);
	CHECK(htod + calls < (long)(FILE_SIZE / chunk) * 3 / 4);
	CHECK(htod + copies >= (long)(FILE_SIZE / chunk));

	/* Off (one copy a call): no batch. */
	gpufile__pool_copies = 1;
	calls = fake_read_long(&batch_copy_calls);
	memset(dev_base, 0, FILE_SIZE);
	CHECK_EQ(gpufile_pread(h, dev_base, FILE_SIZE, 0), (ssize_t)FILE_SIZE);
	CHECK_EQ(test_mismatch(dev_base, FILE_SIZE, SEED_FILE, 0), -1);
	CHECK_EQ(fake_read_long(&batch_copy_calls) - calls, 0);
	gpufile__pool_copies = 8;

	/* A send fails. */
	read_after_copy_fails(h, rpath, FILE_SIZE, &fail_batch);

	/* One worker with 8 buffers (2 a call), tasks of 8 chunks. Read A's
	 * first send fails; A's task ends deferred, and the worker's next
	 * task, read B's, finds the failure when it reuses A's first buffer:
	 * A fails, B reads every byte. */
	gpufile_release();
	CHECK_EQ(gpufile_set_nthreads(1), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffers", "8"), 0);
	CHECK_EQ(gpufile_set_task_size(8 * chunk), 0);
	CHECK_EQ(sem_init(&gate, 0, 0), 0);
	gpufile__sys.pread = gated_pread;
	atomic_store(&gate_armed, 1);
	pthread_mutex_lock(&fake_lock);
	fail_batch = 1;
	pthread_mutex_unlock(&fake_lock);
	memset(dev_base, 0, 16 * chunk);
	CHECK_EQ(gpufile_pread_async(h, dev_base, 8 * chunk, 0, &fa), 0);
	CHECK_EQ(gpufile_pread_async(h, dev_base + 8 * chunk, 8 * chunk,
	                             (int64_t)(8 * chunk), &fb),
	         0);
	sem_post(&gate); /* both queued: the worker goes on */
	if (fa && fb) {
		CHECK_EQ(gpufile_future_wait(fa), GPUFILE_ECUDA);
		CHECK_EQ(gpufile_future_wait(fb), (ssize_t)(8 * chunk));
		CHECK_EQ(test_mismatch(dev_base + 8 * chunk, 8 * chunk,
		                       SEED_FILE, 8 * chunk),
		         -1);
	}
	gpufile_future_free(fa);
	gpufile_future_free(fb);
	sem_destroy(&gate);
	gpufile__sys_reset();
	CHECK_EQ(bad_copies, 0);
	gpufile_close(h);
	gpufile_config_reset();
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
}

static void test_driver_failures(const char *rpath, const char *wpath)
{
	const size_t size = (5u << 20) + 11;
	gpufile_t *h = NULL, *wh = NULL;
	gpufile_stats_t a, b;
	ssize_t n;

	CHECK_EQ(gpufile_open(&h, rpath, "r"), 0);
	CHECK_EQ(gpufile_open(&wh, wpath, "w+"), 0);
	if (!h || !wh)
		goto out;

	/* cuMemHostAlloc fails: nothing is allocated yet after release. */
	gpufile_release();
	CHECK_EQ(live_count(), 0);
	pthread_mutex_lock(&fake_lock);
	fail_hostalloc = 1000;
	pthread_mutex_unlock(&fake_lock);
	a = stats();
	n = gpufile_pread(h, dev_base, size, 0);
	b = stats();
	CHECK_EQ(n, GPUFILE_ECUDA);
	/* The call that pinned them: registration, or cuMemHostAlloc where
	 * the driver registers none (pinned.c). */
	CHECK_CONTAINS(gpufile_errmsg(), "bounce buffers");
	CHECK(strstr(gpufile_errmsg(), "cuMemHostRegister of") ||
	      strstr(gpufile_errmsg(), "cuMemHostAlloc of"));
	CHECK_CONTAINS(gpufile_errmsg(), "CUDA_ERROR_OUT_OF_MEMORY");
	CHECK_EQ(b.path[GPUFILE_PATH_POSIX][0].errors -
	             a.path[GPUFILE_PATH_POSIX][0].errors,
	         1);
	n = gpufile_pwrite(wh, dev_base, size, 0);
	CHECK_EQ(n, GPUFILE_ECUDA);
	n = gpufile_pread(h, dev_base, 100, 0); /* small path too */
	CHECK_EQ(n, GPUFILE_ECUDA);
	pthread_mutex_lock(&fake_lock);
	fail_hostalloc = 0;
	pthread_mutex_unlock(&fake_lock);
	memset(dev_base, 0, size);
	CHECK_EQ(gpufile_pread(h, dev_base, size, 0), (ssize_t)size);
	CHECK_EQ(test_mismatch(dev_base, size, SEED_FILE, 0), -1);

	/* One failing allocation among several. */
	gpufile_release();
	pthread_mutex_lock(&fake_lock);
	fail_hostalloc = 1;
	pthread_mutex_unlock(&fake_lock);
	n = gpufile_pread(h, dev_base, size, 0);
	CHECK_EQ(n, GPUFILE_ECUDA);
	memset(dev_base, 0, size);
	CHECK_EQ(gpufile_pread(h, dev_base, size, 0), (ssize_t)size);
	CHECK_EQ(test_mismatch(dev_base, size, SEED_FILE, 0), -1);

	/* A copy to the GPU fails (alone or pooled with others: which, the
	 * timing of the workers decides). */
	read_after_copy_fails(h, rpath, size, &fail_to_dev);
	/* ... in a small request. */
	pthread_mutex_lock(&fake_lock);
	fail_to_dev = 1;
	pthread_mutex_unlock(&fake_lock);
	CHECK_EQ(gpufile_pread(h, dev_base, 1000, 0), GPUFILE_ECUDA);
	CHECK(gpufile_errmsg()[0] != '\0');

	/* A copy from the GPU fails. */
	pthread_mutex_lock(&fake_lock);
	fail_dtoh = 1;
	pthread_mutex_unlock(&fake_lock);
	test_fill(dev_base, size, SEED_DEV, 0);
	n = gpufile_pwrite(wh, dev_base, size, 0);
	CHECK_EQ(n, GPUFILE_ECUDA);
	CHECK_CONTAINS(gpufile_errmsg(), "CUDA_ERROR_FAKE_COPY");
	CHECK_EQ(gpufile_pwrite(wh, dev_base, size, 0), (ssize_t)size);
	{
		size_t len = 0;
		unsigned char *data = test_read_file(wpath, &len);
		CHECK(data && len == size &&
		      test_mismatch(data, len, SEED_DEV, 0) == -1);
		free(data);
	}
	CHECK_EQ(gpufile_pread(h, dev_base, size, 0), (ssize_t)size);
	CHECK_EQ(test_mismatch(dev_base, size, SEED_FILE, 0), -1);
out:
	gpufile_close(h);
	gpufile_close(wh);
}

/* After nthreads shrinks, the pinned memory held must shrink to the new
 * bound once the pool is idle. */
static void test_bound_after_shrink(const char *rpath)
{
	gpufile_t *h = NULL;
	size_t live;

	gpufile_release();
	CHECK_EQ(gpufile_set_nthreads(8), 0);
	CHECK_EQ(gpufile_set_task_size(1 << 20), 0);
	CHECK_EQ(gpufile_open(&h, rpath, "r"), 0);
	if (!h)
		return;
	CHECK_EQ(gpufile_pread(h, dev_base, FILE_SIZE, 0), (ssize_t)FILE_SIZE);
	CHECK_EQ(gpufile_set_nthreads(2), 0);
	CHECK_EQ(gpufile_pread(h, dev_base, FILE_SIZE, 0), (ssize_t)FILE_SIZE);
	CHECK_EQ(test_mismatch(dev_base, FILE_SIZE, SEED_FILE, 0), -1);
	live = peak_reset();
	if (live > stagers_max()) {
		fprintf(stderr,
		        "pinned memory held (%zu bytes) exceeds the stagers' "
		        "third of gpufile_pinned_bytes_max() (%zu) after "
		        "nthreads 8 -> 2\n",
		        live, stagers_max());
		test_failures++;
	}
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_config_reset();
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
}

/* Issue 34: a bounce buffer below 64 KiB, and not a multiple of 4 KiB,
 * is used as given (KvikIO honours any positive size): chunks of that
 * many bytes, each in a page-aligned buffer with room for its O_DIRECT
 * window, through the page cache and through O_DIRECT. */
static void test_small_bounce(const char *rpath, const char *wpath)
{
	static const size_t bounce[] = {3, 1000, 4097};
	static const size_t sizes[] = {1, 4095, 4096, 9001};
	static const int64_t offsets[] = {0, 1, 4097};
	static const char *const backends[] = {"off", "on"};
	size_t bbs = 0;
	gpufile_t *h = NULL;

	CHECK_EQ(gpufile_set_nthreads(2), 0);
	CHECK_EQ(gpufile_set_gds_threshold(0), 0); /* every size is staged */
	for (size_t b = 0; b < sizeof(bounce) / sizeof(bounce[0]); b++) {
		CHECK_EQ(gpufile_set_bounce_buffer_size(bounce[b]), 0);
		CHECK_EQ(gpufile_get_bounce_buffer_size(&bbs), 0);
		CHECK_EQ(bbs, bounce[b]);
		gpufile_release(); /* no buffers of the size before */
		peak_reset();
		CHECK_EQ(gpufile_pinned_bytes_max(),
		         3 * 2u * 2 *
		             (((bounce[b] + 4095) & ~(size_t)4095) + 4096));
		for (size_t d = 0; d < 2; d++) {
			CHECK_EQ(gpufile_config_set("direct_io", backends[d]),
			         0);
			CHECK_EQ(gpufile_open(&h, rpath, "r"), 0);
			if (!h)
				return;
			for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]);
			     s++)
				for (size_t o = 0;
				     o < sizeof(offsets) / sizeof(offsets[0]);
				     o++)
					roundtrip_one(h, wpath, sizes[s],
					              offsets[o], (s + o) % 3,
					              0);
			CHECK(peak() <= stagers_max());
			CHECK_EQ(gpufile_close(h), 0);
		}
	}
	gpufile_config_reset();
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
}

int main(void)
{
	const char *rpath = test_path("staging-src");
	const char *wpath = test_path("staging-dst");

	if (fake_install())
		return 1;
	CHECK_EQ(test_make_file(rpath, FILE_SIZE, SEED_FILE), 0);

	test_classify();
	test_roundtrips(rpath, wpath, "auto");
	test_roundtrips(rpath, wpath, "on");
	test_pipeline(rpath, wpath);
	test_small_reads_split(rpath, wpath);
	test_driver_failures(rpath, wpath);
	test_pooled_copies(rpath);
	test_bound_after_shrink(rpath);
	test_small_bounce(rpath, wpath);

	/* release frees every pinned buffer, stream and event. */
	gpufile_release();
	CHECK_EQ(live_count(), 0);
	CHECK_EQ(bad_copies, 0);
	gpufile__cuda_override(NULL);
	gpufile_config_reset();
	free(dev_base);
	return test_finish("test_staging_fake");
}
