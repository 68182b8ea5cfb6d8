/*
 * Stream-ordered reads and writes of device memory staged on the caller's
 * stream (stream_stage.c), on the fake driver (fake_cuda.h), whose copies
 * read their source only when the stream runs them: a copy let through
 * before its bytes were read would put the wrong bytes in the destination,
 * and a write's file bytes taken before its copy ran would be wrong.
 *
 * What must hold:
 * - the call returns while the work queued before it has not ended (a
 *   host function that waits for the test); the work after sees the
 *   file's bytes and *n_out; nothing outside the destination is written;
 *   end-of-file as gpufile_pread;
 * - a read larger than one arena (nthreads * bounce_buffers *
 *   bounce_buffer_size) blocks instead, saying why;
 * - reads of one piece each, queued back to back, are read by as many
 *   fillers at once (nthreads);
 * - several streams at once, small reads sharing an arena and large ones
 *   more than two arenas hold (a call then waits for room), are right,
 *   and at most two arenas are held, all given back by
 *   gpufile_bounce_buffer_free();
 * - an I/O error, a file that ends early, and a copy the driver refuses
 *   after the first operation reach *n_out, and the stream goes on
 *   (never left waiting); bytes past a file's early end are zeros, never
 *   stale region bytes; where the event after the copies is refused too,
 *   the arena is left, and later reads get a new one instead of waiting
 *   forever, as where waiting for the copies fails; where the driver
 *   refuses the wait for the end, the call runs the read to its end;
 * - device 1, and device 0 after its primary context was reset: new
 *   pinned memory and flags, nothing of the dead context used; requests
 *   on device 1 in flight while device 0 is reset end;
 * - fork() while a staged read is in flight: the child closes the handle
 *   at once and reads; the parent's read ends right;
 * - a driver refusing the flag wait (CUDA_ERROR_NOT_SUPPORTED) makes the
 *   read block instead, still right;
 * - writes: the call returns while the work before (which fills the
 *   buffer) has not run, and nothing reaches the file before it ran; the
 *   file gets the bytes the work before left, not those the work after
 *   writes; the work after sees *n_out; a write's pieces are written by
 *   the fillers at once, a group's while the next group's copy runs; past the
 * file's end, zero bytes, and one byte over an arena (blocking, saying why); a
 * failed pwrite and a copy the driver refuses midway reach *n_out (the latter
 * writes nothing), and the stream goes on;
 * - a read after a write of the same bytes on one stream, both queued
 *   while the work before them holds the stream, sees the written bytes
 *   (write of device or host memory; a write extending the file, the
 *   read past its new end leaving the destination alone);
 * - a request ending within a piece of INT64_MAX copies exactly its bytes
 *   and gets gpufile_pwrite's and gpufile_pread's results.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEV_SIZE  (64u << 20)
#define FILE_SIZE ((30u << 20) + 333)
#define SEED      91
#define CHUNK     (1u << 20)  /* bounce_buffer_size: a piece */
#define REGION    (24u << 20) /* an arena: nthreads 6 x bounce_buffers 4 */
#include "fake_cuda.h"

static const char *path, *wpath;

/* ---- host functions standing in for kernels ---- */

/* Holds the stream until the test opens it (at most 10 s). */
struct gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int open, ended, timed_out;
};

static void gate_fn(void *arg)
{
	struct gate *g = arg;
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	pthread_mutex_lock(&g->lock);
	while (!g->open)
		if (pthread_cond_timedwait(&g->cond, &g->lock, &until) ==
		    ETIMEDOUT) {
			g->timed_out = 1;
			break;
		}
	g->ended = 1;
	pthread_mutex_unlock(&g->lock);
}

/* Records what the work after the request sees. */
struct after {
	const ssize_t *n_out;
	ssize_t n_seen;
	const unsigned char *buf;
	unsigned char *copy;
	size_t len;
	int ran;
};

static void after_fn(void *arg)
{
	struct after *a = arg;

	a->n_seen = *a->n_out;
	if (a->copy)
		memcpy(a->copy, a->buf, a->len);
	__atomic_store_n(&a->ran, 1, __ATOMIC_SEQ_CST);
}

/* Queues on s the work after a request: it records *n_out and copies
 * [dst, dst + len) into copy (unless NULL). a must live until it ran. */
static void launch_after(CUstream s, struct after *a, const ssize_t *n_out,
                         const unsigned char *dst, unsigned char *copy,
                         size_t len)
{
	*a = (struct after){
	    .n_out = n_out, .buf = dst, .copy = copy, .len = len};
	CHECK_EQ(fake.cuLaunchHostFunc(s, after_fn, a), 0);
}

static CUstream new_stream(void)
{
	CUstream s = NULL;

	CHECK_EQ(fake.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), 0);
	return s;
}

/* Reads size bytes at off into dst on s with the work after recorded; the
 * stream is synchronised. Returns *n_out, after checking that the work
 * after saw it; the destination as the work after saw it is in copy. */
static ssize_t read_on(gpufile_t *h, CUstream s, unsigned char *dst,
                       size_t size, int64_t off, unsigned char *copy)
{
	struct after a = {0};
	ssize_t n = -777;

	CHECK_EQ(gpufile_read_async(h, dst, size, off, s, &n), 0);
	launch_after(s, &a, &n, dst, copy, size);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(a.ran, 1);
	CHECK_EQ(a.n_seen, n);
	/* The stream goes on once the pieces are read; the waiter then
	 * waits for the copies and gives the span back: wait for that too
	 * (gpufile_close would), for the arena counts below. */
	gpufile__handle_wait_idle(h);
	return n;
}

/* ---- the call returns at once; order and bytes ---- */

static void test_returns_at_once(gpufile_t *h)
{
	const size_t size = 20 * CHUNK + 333; /* 21 pieces, 2 copies */
	const int64_t off = 777;
	unsigned char *dst = dev_base + 4096 + 5;
	unsigned char *seen = test_malloc(size);
	struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0,
	                 0, 0};
	struct after a = {0};
	char reason[512];
	ssize_t n = -777;
	CUstream s = new_stream();

	CHECK_EQ(gpufile_stream_info(h, dst, size, 0, reason, sizeof(reason)),
	         0);
	CHECK(strncmp(reason, "staged:", 7) == 0);
	memset(dst - 4096, 0xA5, size + 8192);
	CHECK_EQ(fake.cuLaunchHostFunc(s, gate_fn, &g), 0);
	CHECK_EQ(gpufile_read_async(h, dst, size, off, s, &n), 0);
	/* Back while the work before still waits for us: the call did not
	 * synchronise the stream. (*n_out may already hold the result:
	 * it is stored once the file is read, before the stream gets
	 * there.) */
	pthread_mutex_lock(&g.lock);
	CHECK_EQ(g.ended, 0);
	CHECK_EQ(g.timed_out, 0);
	g.open = 1;
	pthread_cond_broadcast(&g.cond);
	pthread_mutex_unlock(&g.lock);
	launch_after(s, &a, &n, dst, seen, size);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(g.timed_out, 0);
	CHECK_EQ(a.ran, 1);
	CHECK_EQ(a.n_seen, (ssize_t)size);
	CHECK_EQ(n, (ssize_t)size);
	CHECK_EQ(test_mismatch(seen, size, SEED, (uint64_t)off), -1);
	CHECK_EQ(test_mismatch_byte(dst - 4096, 4096, 0xA5), -1);
	CHECK_EQ(test_mismatch_byte(dst + size, 4096, 0xA5), -1);

	/* At end-of-file, and past it. */
	memset(dst, 0xA5, 3 * CHUNK);
	CHECK_EQ(read_on(h, s, dst, 3 * CHUNK, FILE_SIZE - 5000, NULL), 5000);
	CHECK_EQ(test_mismatch(dst, 5000, SEED, FILE_SIZE - 5000), -1);
	CHECK_EQ(test_mismatch_byte(dst + 5000, 3 * CHUNK - 5000, 0xA5), -1);
	memset(dst, 0xA5, 4096);
	CHECK_EQ(read_on(h, s, dst, 4096, FILE_SIZE + 1, NULL), 0);
	CHECK_EQ(test_mismatch_byte(dst, 4096, 0xA5), -1);

	/* Larger than a region (counted from the offset rounded down to a
	 * piece): the call blocks, saying why. */
	CHECK_EQ(gpufile_stream_info(h, dst, REGION - 776, 0, reason,
	                             sizeof(reason)),
	         0);
	CHECK(strncmp(reason, "staged:", 7) == 0);
	CHECK_EQ(gpufile_stream_info(h, dst, REGION, 0, reason, sizeof(reason)),
	         0);
	CHECK(strncmp(reason, "staged:", 7) == 0);
	CHECK_EQ(
	    gpufile_stream_info(h, dst, REGION + 1, 0, reason, sizeof(reason)),
	    0);
	CHECK(strncmp(reason, "blocking:", 9) == 0);
	CHECK_CONTAINS(reason, "larger than one staging arena");
	/* The limit depends on nthreads (the CPUs by default): say it. */
	CHECK_CONTAINS(reason, "6 x 4 x 1048576 = 25165824 bytes");
	n = -777;
	CHECK_EQ(gpufile_read_async(h, dst, REGION + 1, 3, s, &n), 0);
	CHECK_EQ(n, (ssize_t)REGION + 1); /* written before the return */
	CHECK_EQ(test_mismatch(dst, REGION + 1, SEED, 3), -1);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
	free(seen);
}

/* ---- many requests, few buffers ---- */

static void test_many(gpufile_t *h)
{
	enum { STREAMS = 3, PER = 4 };
	const size_t piece = 5 * CHUNK / 2 - 7;
	CUstream s[STREAMS];
	ssize_t n[STREAMS][PER];
	struct after a[STREAMS];

	memset(dev_base, 0, (size_t)STREAMS * PER * piece);
	for (int i = 0; i < STREAMS; i++)
		s[i] = new_stream();
	for (int r = 0; r < PER; r++)
		for (int i = 0; i < STREAMS; i++) {
			const size_t at = ((size_t)i * PER + r) * piece;

			n[i][r] = -1;
			CHECK_EQ(gpufile_read_async(h, dev_base + at, piece,
			                            (int64_t)at, s[i],
			                            &n[i][r]),
			         0);
		}
	for (int i = 0; i < STREAMS; i++)
		launch_after(s[i], &a[i], &n[i][PER - 1], NULL, NULL, 0);
	for (int i = STREAMS - 1; i >= 0; i--) {
		CHECK_EQ(fake.cuStreamSynchronize(s[i]), 0);
		CHECK_EQ(a[i].n_seen, (ssize_t)piece);
		for (int r = 0; r < PER; r++)
			CHECK_EQ(n[i][r], (ssize_t)piece);
		CHECK_EQ(fake.cuStreamDestroy(s[i]), 0);
	}
	CHECK_EQ(
	    test_mismatch(dev_base, (size_t)STREAMS * PER * piece, SEED, 0),
	    -1);

	/* Three reads of 20 pieces back to back: at most two arenas hold
	 * them, and a call that finds no room waits for it (whether one
	 * has to depends on how soon the earlier reads end). */
	{
		const size_t big = 20 * CHUNK;
		ssize_t nb[STREAMS];

		memset(dev_base, 0, STREAMS * big);
		for (int i = 0; i < STREAMS; i++) {
			s[i] = new_stream();
			nb[i] = -1;
			CHECK_EQ(gpufile_read_async(h, dev_base + i * big, big,
			                            (int64_t)i * (5 << 20),
			                            s[i], &nb[i]),
			         0);
		}
		for (int i = 0; i < STREAMS; i++) {
			CHECK_EQ(fake.cuStreamSynchronize(s[i]), 0);
			CHECK_EQ(nb[i], (ssize_t)big);
			CHECK_EQ(test_mismatch(dev_base + i * big, big, SEED,
			                       (uint64_t)i * (5 << 20)),
			         -1);
			CHECK_EQ(fake.cuStreamDestroy(s[i]), 0);
		}
	}
}

/* ---- fillers at once ---- */

/* A meeting of pread or pwrite calls (fillers at once). */
static pthread_mutex_t meet_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t meet_cond = PTHREAD_COND_INITIALIZER;
static int meet_in, meet_want, meet_peak;

/* A call enters the meeting: it waits there (up to 5 s) until meet_want
 * calls have been in it at once. */
static void meet_enter(void)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	pthread_mutex_lock(&meet_lock);
	if (++meet_in > meet_peak)
		meet_peak = meet_in;
	pthread_cond_broadcast(&meet_cond);
	while (meet_peak < meet_want &&
	       pthread_cond_timedwait(&meet_cond, &meet_lock, &until) == 0)
		;
	pthread_mutex_unlock(&meet_lock);
}

static void meet_leave(void)
{
	pthread_mutex_lock(&meet_lock);
	meet_in--;
	pthread_mutex_unlock(&meet_lock);
}

static ssize_t meeting_pread(int fd, void *buf, size_t len, off_t off)
{
	ssize_t n;

	meet_enter();
	n = pread(fd, buf, len, off);
	meet_leave();
	return n;
}

/* Six reads of one piece each, queued back to back, are read by six
 * fillers at once (nthreads), not one after another. */
static void test_fillers_at_once(gpufile_t *h)
{
	enum { N = 6 };
	ssize_t n[N];
	CUstream s = new_stream();

	meet_want = N;
	meet_peak = 0;
	gpufile__sys.pread = meeting_pread;
	for (int i = 0; i < N; i++) {
		n[i] = -1;
		CHECK_EQ(gpufile_read_async(h, dev_base + (size_t)i * CHUNK,
		                            CHUNK, (int64_t)i * CHUNK, s,
		                            &n[i]),
		         0);
	}
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	gpufile__sys_reset();
	CHECK_EQ(meet_peak, N);
	for (int i = 0; i < N; i++)
		CHECK_EQ(n[i], (ssize_t)CHUNK);
	CHECK_EQ(test_mismatch(dev_base, N * CHUNK, SEED, 0), -1);
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
}

/* ---- failures ---- */

static int64_t fail_from = -1; /* pread fails (eio) or ends (!eio) here */
static int fail_eio;

static ssize_t cut_pread(int fd, void *buf, size_t len, off_t off)
{
	if (fail_from >= 0 && off + (off_t)len > fail_from) {
		if (off >= fail_from) {
			if (fail_eio) {
				errno = EIO;
				return -1;
			}
			return 0;
		}
		len = (size_t)(fail_from - off);
	}
	return pread(fd, buf, len, off);
}

static long copy_fail_at = -1; /* the copy (counted from 0) refused */
static long copies_seen;

static int copy_refused(void)
{
	return __atomic_fetch_add(&copies_seen, 1, __ATOMIC_SEQ_CST) ==
	       copy_fail_at;
}

static CUresult refusing_htod(CUdeviceptr dst, const void *src, size_t size,
                              CUstream s)
{
	if (copy_refused())
		return CUDA_ERROR_INVALID_VALUE;
	return fake.cuMemcpyHtoDAsync(dst, src, size, s);
}

static CUresult refusing_record(CUevent e, CUstream s)
{
	(void)e;
	(void)s;
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult refusing_dtoh(void *dst, CUdeviceptr src, size_t size,
                              CUstream s)
{
	if (copy_refused())
		return CUDA_ERROR_INVALID_VALUE;
	return fake.cuMemcpyDtoHAsync(dst, src, size, s);
}

static long wait_fail_at = -1; /* the wait (counted from 0) refused */
static long waits_seen;

static CUresult refusing_wait(CUstream s, CUdeviceptr addr, unsigned value,
                              unsigned flags)
{
	if (__atomic_fetch_add(&waits_seen, 1, __ATOMIC_SEQ_CST) ==
	    wait_fail_at)
		return CUDA_ERROR_INVALID_VALUE;
	return fake.cuStreamWaitValue32(s, addr, value, flags);
}

static CUresult failing_sync(CUevent e)
{
	(void)e;
	return CUDA_ERROR_INVALID_VALUE;
}

static void test_errors_midway(gpufile_t *h)
{
	const size_t size = 19 * CHUNK; /* 2 copies */
	unsigned char *dst = dev_base + (1u << 20);
	unsigned char *seen = test_malloc(size);
	static struct gpufile__cuda refusing;
	CUstream s = new_stream();
	ssize_t n;

	/* An I/O error in the fourth chunk. */
	gpufile__sys.pread = cut_pread;
	fail_from = 3 * CHUNK + 100;
	fail_eio = 1;
	CHECK_EQ(read_on(h, s, dst, size, 0, NULL), -EIO);
	/* The file ends early (cut since the call): the bytes the file had,
	 * zeros after them. */
	fail_eio = 0;
	memset(dst, 0xA5, size);
	n = read_on(h, s, dst, size, 50, seen);
	CHECK_EQ(n, (ssize_t)(3 * CHUNK + 50));
	CHECK_EQ(test_mismatch(seen, (size_t)n, SEED, 50), -1);
	CHECK_EQ(test_mismatch_byte(seen + n, size - (size_t)n, 0), -1);
	fail_from = -1;
	gpufile__sys_reset();

	/* The driver refuses the second copy while the call queues: the
	 * call has queued the first wait, so the failure goes to n_out,
	 * and the stream is released. */
	refusing = fake;
	refusing.cuMemcpyHtoDAsync = refusing_htod;
	copies_seen = 0;
	copy_fail_at = 1;
	gpufile_bounce_buffer_free();
	gpufile__cuda_override(&refusing);
	CHECK_EQ(read_on(h, s, dst, size, 0, NULL), GPUFILE_ECUDA);
	gpufile__cuda_override(&fake);
	copy_fail_at = -1;
	/* Its span came back (the event after the first copy told when
	 * that copy ended): the arena is idle. */
	CHECK_EQ(gpufile_bounce_buffer_free(), REGION);

	/* The event after the copies queued refused too: nothing tells
	 * when they end, so the span is never given back and its arena is
	 * left (never freed). Twice, for both arenas: a read after them
	 * gets a new arena, rather than waiting forever for room. */
	refusing.cuEventRecord = refusing_record;
	for (int i = 0; i < 2; i++) {
		copies_seen = 0;
		copy_fail_at = 1;
		gpufile__cuda_override(&refusing);
		CHECK_EQ(read_on(h, s, dst, size, 0, NULL), GPUFILE_ECUDA);
		gpufile__cuda_override(&fake);
	}
	copy_fail_at = -1;
	refusing.cuEventRecord = fake.cuEventRecord;
	CHECK_EQ(read_on(h, s, dst, size, 0, NULL), (ssize_t)size);
	/* Only the new arena is idle; the lost ones are not freed. */
	CHECK_EQ(gpufile_bounce_buffer_free(), REGION);

	/* And the next read on the stream is right. */
	CHECK_EQ(read_on(h, s, dst, size, 4096, seen), (ssize_t)size);
	CHECK_EQ(test_mismatch(seen, size, SEED, 4096), -1);

	/* The driver refuses the wait for the end, after the copies (one
	 * group: the first wait, then the end's): nothing would hold the
	 * work queued after the call, so the call runs the read to its
	 * end before it returns. */
	refusing = fake;
	refusing.cuStreamWaitValue32 = refusing_wait;
	waits_seen = 0;
	wait_fail_at = 1;
	memset(dst, 0, 3 * CHUNK);
	n = -777;
	gpufile__cuda_override(&refusing);
	CHECK_EQ(gpufile_read_async(h, dst, 3 * CHUNK, 7, s, &n), 0);
	gpufile__cuda_override(&fake);
	wait_fail_at = -1;
	CHECK_EQ(n, (ssize_t)(3 * CHUNK));
	CHECK_EQ(test_mismatch(dst, 3 * CHUNK, SEED, 7), -1);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);

	/* Waiting for the copies fails: they may still run, so their span
	 * is lost (its arena is not idle), never given to another read.
	 * *n_out is the read's all the same: it was stored, and the stream
	 * let go, once the pieces were read (release_read); a failed copy
	 * is the stream's own error. */
	gpufile_bounce_buffer_free();
	refusing = fake;
	refusing.cuEventSynchronize = failing_sync;
	gpufile__cuda_override(&refusing);
	CHECK_EQ(read_on(h, s, dst, size, 0, NULL), (ssize_t)size);
	gpufile__cuda_override(&fake);
	CHECK_EQ(gpufile_bounce_buffer_free(), 0);
	CHECK_EQ(read_on(h, s, dst, size, 4096, seen), (ssize_t)size);
	CHECK_EQ(test_mismatch(seen, size, SEED, 4096), -1);
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
	free(seen);
}

/* ---- device 1; a reset primary context ---- */

/* A staged read of 20 MiB + 3 into device dev, on a stream of its
 * context. 0 when right. */
static int read_device(gpufile_t *h, int dev)
{
	const size_t size = 20 * CHUNK + 3;
	unsigned char *dst = fake_dev_base(dev) + (2u << 20) + 9;
	unsigned char *seen = test_malloc(size);
	char reason[512];
	CUstream s;
	ssize_t n;
	int bad;

	fake_cur = fake_ctx_of(dev);
	s = new_stream();
	CHECK_EQ(gpufile_stream_info(h, dst, size, 0, reason, sizeof(reason)),
	         0);
	CHECK(strncmp(reason, "staged:", 7) == 0);
	n = read_on(h, s, dst, size, 5, seen);
	bad = n != (ssize_t)size || test_mismatch(seen, size, SEED, 5) != -1;
	if (bad)
		fprintf(stderr, "  device %d: %zd\n", dev, n);
	fake.cuStreamDestroy(s);
	fake_cur = fake_ctx_of(0);
	free(seen);
	return bad;
}

/* Requests on a stream of device 1, waiting behind its work before,
 * while device 0's primary context is reset: their flags are device
 * 1's, and the stream is released (a hang here fails by alarm()). */
static void test_reset_other_device(gpufile_t *h)
{
	const size_t size = 3 * CHUNK + 5;
	unsigned char *dst = fake_dev_base(1) + 4096;
	unsigned char *host = test_malloc(size);
	struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0,
	                 0, 0};
	ssize_t nd = -777, nh = -777;
	CUcontext ctx;
	CUstream s;

	fake_cur = fake_ctx_of(0);
	s = new_stream();
	CHECK_EQ(read_on(h, s, dev_base + 4096, 4096, 0, NULL),
	         4096); /* device 0 has flags */
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
	fake_cur = fake_ctx_of(1);
	s = new_stream();
	/* Device 1's first request needs flags of its own: where they
	 * cannot be allocated, the error names the file. */
	pthread_mutex_lock(&fake_lock);
	fail_hostalloc = 1;
	pthread_mutex_unlock(&fake_lock);
	CHECK_EQ(gpufile_read_async(h, host, size, 11, s, &nh), GPUFILE_ECUDA);
	CHECK_CONTAINS(gpufile_errmsg(), "stream flags");
	CHECK_CONTAINS(gpufile_errmsg(), path);
	CHECK_EQ(nh, -777);
	CHECK_EQ(fake.cuLaunchHostFunc(s, gate_fn, &g), 0);
	CHECK_EQ(gpufile_read_async(h, dst, size, 7, s, &nd), 0);
	CHECK_EQ(gpufile_read_async(h, host, size, 11, s, &nh), 0);
	fake_ctx_reset(0);
	pthread_mutex_lock(&g.lock);
	g.open = 1;
	pthread_cond_broadcast(&g.cond);
	pthread_mutex_unlock(&g.lock);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(g.timed_out, 0);
	CHECK_EQ(nd, (ssize_t)size);
	CHECK_EQ(nh, (ssize_t)size);
	CHECK_EQ(test_mismatch(dst, size, SEED, 7), -1);
	CHECK_EQ(test_mismatch(host, size, SEED, 11), -1);
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
	fake_cur = fake_ctx_of(0);
	CHECK_EQ(fake.cuDevicePrimaryCtxRetain(&ctx, 0), 0);
	free(host);
}

static void test_contexts(gpufile_t *h)
{
	CUcontext ctx;
	long allocs;

	CHECK_EQ(read_device(h, 1), 0);
	CHECK_EQ(read_device(h, 0), 0);
	allocs = fake_read_long(&hostalloc_calls);
	/* Device 0's buffers and flags end with its context, device 1's
	 * do not: the read into device 1 (before device 0's context lives
	 * again) uses its own, the read into device 0 then gets new ones. */
	fake_ctx_reset(0);
	CHECK_EQ(read_device(h, 1), 0);
	CHECK_EQ(fake_read_long(&hostalloc_calls), allocs);
	CHECK_EQ(fake.cuDevicePrimaryCtxRetain(&ctx, 0), 0);
	CHECK_EQ(read_device(h, 0), 0);
	CHECK(fake_read_long(&hostalloc_calls) > allocs);
	fake_ctx_reset(0);
	CHECK_EQ(fake.cuDevicePrimaryCtxRetain(&ctx, 0), 0);
	CHECK_EQ(read_device(h, 0), 0);
	CHECK_EQ(fake_read_int(&stale_uses), 0);
	CHECK_EQ(fake_read_int(&bad_copies), 0);
	CHECK(fake_dead_intact());
	CHECK_EQ(fake_read_int(&ctx_mismatches), 0);
}

/* ---- fork() with a staged read in flight ---- */

/* The child has none of the parent's threads: the staged read in flight
 * (its stream held by a gate) is not counted on the handle there, which
 * closes at once, and the child's own host reads work; the parent's read
 * ends right once the gate opens. */
static void test_fork_in_flight(gpufile_t *h)
{
	const size_t size = 6 * CHUNK + 5;
	unsigned char *dst = dev_base + (8u << 20);
	unsigned char *seen = test_malloc(size);
	struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0,
	                 0, 0};
	struct after a = {0};
	ssize_t n = -777;
	CUstream s = new_stream();
	int status = 0;
	pid_t pid;

	CHECK_EQ(fake.cuLaunchHostFunc(s, gate_fn, &g), 0);
	CHECK_EQ(gpufile_read_async(h, dst, size, 3, s, &n), 0);
	launch_after(s, &a, &n, dst, seen, size);
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		char buf[4096];
		gpufile_t *c = NULL;

		alarm(30); /* a child stuck in close ends here */
		test_failures = 0;
		CHECK_EQ(gpufile_close(h), 0);
		CHECK_EQ(gpufile_open(&c, path, "r"), 0);
		if (c) {
			CHECK_EQ(gpufile_pread(c, buf, sizeof(buf), 4096),
			         (ssize_t)sizeof(buf));
			CHECK_EQ(test_mismatch(buf, sizeof(buf), SEED, 4096),
			         -1);
			gpufile_close(c);
		}
		_exit(test_failures ? 1 : 0);
	}
	CHECK(pid > 0);
	pthread_mutex_lock(&g.lock);
	CHECK_EQ(g.ended, 0); /* the read was in flight at the fork */
	g.open = 1;
	pthread_cond_broadcast(&g.cond);
	pthread_mutex_unlock(&g.lock);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(a.n_seen, (ssize_t)size);
	CHECK_EQ(n, (ssize_t)size);
	CHECK_EQ(test_mismatch(seen, size, SEED, 3), -1);
	if (pid > 0) {
		CHECK_EQ(waitpid(pid, &status, 0), pid);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
	free(seen);
}

/* ---- a driver that refuses flag waits ---- */

static void test_wait_refused(gpufile_t *h)
{
	unsigned char *dst = dev_base + 4096;
	char reason[512];
	ssize_t n = -777;
	CUstream s = new_stream();

	fake_wait_refused = 1;
	/* Not known yet: the read tries the staged way, then blocks. */
	CHECK_EQ(gpufile_read_async(h, dst, 3 * CHUNK, 11, s, &n), 0);
	CHECK_EQ(n, (ssize_t)(3 * CHUNK)); /* written before the return */
	CHECK_EQ(test_mismatch(dst, 3 * CHUNK, SEED, 11), -1);
	CHECK_EQ(
	    gpufile_stream_info(h, dst, 3 * CHUNK, 0, reason, sizeof(reason)),
	    0);
	CHECK(strncmp(reason, "blocking:", 9) == 0);
	CHECK_CONTAINS(reason, "cuStreamWaitValue32");
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
	fake_wait_refused = 0;
}

/* ---- writes ---- */

/* The work before a write: fills the buffer with the pattern of the file
 * offset it goes to, once the gate opens. */
struct produce {
	struct gate *gate;
	unsigned char *dst;
	size_t len;
	uint64_t seed, off;
};

static void produce_fn(void *arg)
{
	struct produce *p = arg;

	if (p->gate)
		gate_fn(p->gate);
	test_fill(p->dst, p->len, p->seed, p->off);
}

/* The work after a write: records *n_out, then overwrites the buffer
 * (which must not reach the file). */
static void scribble_fn(void *arg)
{
	struct after *a = arg;

	a->n_seen = *a->n_out;
	memset((void *)a->buf, 0x5A, a->len);
	__atomic_store_n(&a->ran, 1, __ATOMIC_SEQ_CST);
}

/* Writes size bytes of the pattern (seed, off) from dst at off on s: the
 * work before fills dst, the work after scribbles over it. Returns
 * *n_out, after checking that the work after saw it. */
static ssize_t write_on(gpufile_t *w, CUstream s, unsigned char *dst,
                        size_t size, int64_t off, uint64_t seed)
{
	struct produce p = {NULL, dst, size, seed, (uint64_t)off};
	struct after a = {.buf = dst, .len = size};
	ssize_t n = -777;

	memset(dst, 0, size);
	CHECK_EQ(fake.cuLaunchHostFunc(s, produce_fn, &p), 0);
	CHECK_EQ(gpufile_write_async(w, dst, size, off, s, &n), 0);
	a.n_out = &n;
	CHECK_EQ(fake.cuLaunchHostFunc(s, scribble_fn, &a), 0);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(a.ran, 1);
	CHECK_EQ(a.n_seen, n);
	return n;
}

/* 0 when the file at wpath holds the pattern (seed, off) over [off, off +
 * len). */
static int file_holds(int64_t off, size_t len, uint64_t seed)
{
	unsigned char *buf = test_malloc(len);
	int fd = open(wpath, O_RDONLY);
	int bad = fd < 0 || pread(fd, buf, len, off) != (ssize_t)len ||
	          test_mismatch(buf, len, seed, (uint64_t)off) != -1;

	if (fd >= 0)
		close(fd);
	free(buf);
	return bad;
}

/* pwrite that waits (up to 5 s) until want calls are in it at once. */
static ssize_t meeting_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	ssize_t n;

	meet_enter();
	n = pwrite(fd, buf, len, off);
	meet_leave();
	return n;
}

static int64_t pwrite_fail_from = -1; /* pwrite fails with EIO here */

static ssize_t failing_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	if (pwrite_fail_from >= 0 && off + (off_t)len > pwrite_fail_from) {
		errno = EIO;
		return -1;
	}
	return pwrite(fd, buf, len, off);
}

/* A write of two groups: the waiter's first event wait must be for the
 * first group's copy alone (a copy follows its event on the stream), and
 * by its second wait a pwrite must have started (the first group's
 * pieces went out before the second group's copy was waited for). */
static int sync_calls, first_wait_early, overlap_seen;
static int pwrites_started;

static ssize_t counting_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	pthread_mutex_lock(&meet_lock);
	pwrites_started++;
	pthread_cond_broadcast(&meet_cond);
	pthread_mutex_unlock(&meet_lock);
	return pwrite(fd, buf, len, off);
}

static CUresult overlap_event_sync(CUevent e)
{
	const int call = __atomic_add_fetch(&sync_calls, 1, __ATOMIC_SEQ_CST);

	if (call == 1 && e->stream) {
		pthread_mutex_lock(&fake_lock);
		for (size_t i = e->seq; i < e->stream->nops; i++)
			if (e->stream->ops[i].kind == OP_COPY)
				first_wait_early = 1;
		pthread_mutex_unlock(&fake_lock);
	} else if (call == 2) {
		struct timespec until;

		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 5;
		pthread_mutex_lock(&meet_lock);
		while (!pwrites_started &&
		       pthread_cond_timedwait(&meet_cond, &meet_lock, &until) ==
		           0)
			;
		overlap_seen = first_wait_early && pwrites_started > 0;
		pthread_mutex_unlock(&meet_lock);
	}
	return fake.cuEventSynchronize(e);
}

/* Fails the second event wait (a write's second group): the waiter then
 * still waits for the first group's pieces, and does not hang. */
static CUresult failing_second_sync(CUevent e)
{
	if (__atomic_add_fetch(&sync_calls, 1, __ATOMIC_SEQ_CST) == 2)
		return CUDA_ERROR_INVALID_VALUE;
	return fake.cuEventSynchronize(e);
}

static void test_writes(gpufile_t *w)
{
	const size_t size = 20 * CHUNK + 333; /* 21 pieces, 2 copies */
	const int64_t off = 777;
	unsigned char *dst = dev_base + 4096 + 5;
	struct gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0,
	                 0, 0};
	struct produce p = {&g, dst, size, SEED + 1, (uint64_t)off};
	struct after a = {.buf = dst, .len = size};
	static struct gpufile__cuda refusing;
	char reason[512];
	ssize_t n = -777;
	CUstream s = new_stream();

	CHECK_EQ(gpufile_stream_info(w, dst, size, 1, reason, sizeof(reason)),
	         0);
	CHECK(strncmp(reason, "staged:", 7) == 0);
	CHECK_CONTAINS(reason, "written them to the file");
	memset(dst, 0, size);
	CHECK_EQ(fake.cuLaunchHostFunc(s, produce_fn, &p), 0);
	CHECK_EQ(gpufile_write_async(w, dst, size, off, s, &n), 0);
	a.n_out = &n;
	CHECK_EQ(fake.cuLaunchHostFunc(s, scribble_fn, &a), 0);
	/* Back while the work before still waits; and (50 ms later) the
	 * file has nothing yet: the pieces wait for the copies. */
	test_sleep_ms(50);
	pthread_mutex_lock(&g.lock);
	CHECK_EQ(g.ended, 0);
	CHECK_EQ(g.timed_out, 0);
	CHECK_EQ(gpufile_size(w), 0);
	g.open = 1;
	pthread_cond_broadcast(&g.cond);
	pthread_mutex_unlock(&g.lock);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(g.timed_out, 0);
	CHECK_EQ(a.ran, 1);
	CHECK_EQ(a.n_seen, (ssize_t)size);
	CHECK_EQ(n, (ssize_t)size);
	CHECK_EQ(file_holds(off, size, SEED + 1), 0);
	CHECK_EQ(gpufile_size(w), off + (int64_t)size);

	/* Six pieces written by six fillers at once. */
	meet_want = 6;
	meet_peak = 0;
	gpufile__sys.pwrite = meeting_pwrite;
	CHECK_EQ(write_on(w, s, dst, 6 * CHUNK, 0, SEED + 2), 6 * CHUNK);
	gpufile__sys_reset();
	CHECK_EQ(meet_peak, 6);
	CHECK_EQ(file_holds(0, 6 * CHUNK, SEED + 2), 0);

	/* Two groups (16 MiB each): the first's pieces are written while
	 * the second's copy is waited for. */
	refusing = fake;
	refusing.cuEventSynchronize = overlap_event_sync;
	sync_calls = pwrites_started = overlap_seen = first_wait_early = 0;
	gpufile__sys.pwrite = counting_pwrite;
	gpufile__cuda_override(&refusing);
	CHECK_EQ(write_on(w, s, dst, 20 * CHUNK, 0, SEED + 7), 20 * CHUNK);
	gpufile__cuda_override(&fake);
	gpufile__sys_reset();
	CHECK(sync_calls >= 2);
	CHECK_EQ(overlap_seen, 1);
	CHECK_EQ(file_holds(0, 20 * CHUNK, SEED + 7), 0);

	/* The wait for the second group's copy fails: n_out has the
	 * failure, once the first group's pieces are written. */
	refusing.cuEventSynchronize = failing_second_sync;
	sync_calls = 0;
	gpufile__cuda_override(&refusing);
	CHECK_EQ(write_on(w, s, dst, 20 * CHUNK, 0, SEED + 8), GPUFILE_ECUDA);
	gpufile__cuda_override(&fake);
	CHECK_EQ(file_holds(0, 16 * CHUNK, SEED + 8), 0);

	/* Past the file's end (it grows), and nothing at all. */
	CHECK_EQ(write_on(w, s, dst, CHUNK + 1, (int64_t)(40 * CHUNK), SEED),
	         CHUNK + 1);
	CHECK_EQ(file_holds((int64_t)(40 * CHUNK), CHUNK + 1, SEED), 0);
	CHECK_EQ(write_on(w, s, dst, 0, 5, SEED), 0);

	/* One byte over an arena: blocking, saying why. */
	CHECK_EQ(
	    gpufile_stream_info(w, dst, REGION + 1, 1, reason, sizeof(reason)),
	    0);
	CHECK(strncmp(reason, "blocking:", 9) == 0);
	CHECK_CONTAINS(reason, "write is larger than one staging arena");
	CHECK_CONTAINS(reason, "6 x 4 x 1048576 = 25165824 bytes");
	CHECK_EQ(write_on(w, s, dst, REGION + 1, 3, SEED + 3), REGION + 1);
	CHECK_EQ(file_holds(3, REGION + 1, SEED + 3), 0);

	/* An I/O error in the fourth piece. */
	gpufile__sys.pwrite = failing_pwrite;
	pwrite_fail_from = 3 * CHUNK + 100;
	CHECK_EQ(write_on(w, s, dst, 19 * CHUNK, 0, SEED), -EIO);
	pwrite_fail_from = -1;
	gpufile__sys_reset();
	/* The stream went on; the next write is whole. */
	CHECK_EQ(write_on(w, s, dst, 19 * CHUNK, 0, SEED + 6), 19 * CHUNK);
	CHECK_EQ(file_holds(0, 19 * CHUNK, SEED + 6), 0);

	/* The driver refuses the second copy while the call queues: the
	 * failure goes to n_out, nothing is written, and the stream goes
	 * on. */
	refusing = fake;
	refusing.cuMemcpyDtoHAsync = refusing_dtoh;
	copies_seen = 0;
	copy_fail_at = 1;
	gpufile__cuda_override(&refusing);
	CHECK_EQ(write_on(w, s, dst, 19 * CHUNK, 0, SEED + 4), GPUFILE_ECUDA);
	gpufile__cuda_override(&fake);
	copy_fail_at = -1;
	CHECK_EQ(file_holds(0, 19 * CHUNK, SEED + 6), 0);

	/* The next write on the stream is right, and a read after it on
	 * the same stream sees it. */
	CHECK_EQ(write_on(w, s, dst, 19 * CHUNK, 4096, SEED + 5), 19 * CHUNK);
	CHECK_EQ(file_holds(4096, 19 * CHUNK, SEED + 5), 0);
	memset(dst, 0, 19 * CHUNK);
	CHECK_EQ(read_on(w, s, dst, 19 * CHUNK, 4096, NULL), 19 * CHUNK);
	CHECK_EQ(test_mismatch(dst, 19 * CHUNK, SEED + 5, 4096), -1);
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
}

/* ---- a read after a write, in stream order ---- */

static void gate_open_now(struct gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->open = 1;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

/* A write, then a read of the same bytes, on one stream held at the
 * call by work before both (a gate): the read sees what the write wrote,
 * as cuFile would give it, though gpufile reads ahead of the stream
 * where no write to the file is pending. The read goes through another
 * handle of the file. Where the read reaches past the file's end at the
 * call (the write extends the file), it still gets the written bytes,
 * and the destination past the file's new end keeps its bytes. */
static void test_read_after_write(gpufile_t *w)
{
	const size_t size = 3 * CHUNK + 17;
	unsigned char *src = dev_base + 4096;
	unsigned char *dst = dev_base + 8 * CHUNK;
	unsigned char *host = test_malloc(size);
	struct gate g1 = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
	                  0, 0, 0};
	struct gate g2 = g1, g3 = g1;
	struct produce p = {&g1, src, size, SEED + 7, 100};
	gpufile_t *r = NULL;
	ssize_t nw = -777, nr = -777;
	const int64_t end = gpufile_size(w);
	CUstream s = new_stream();

	CHECK_EQ(gpufile_open(&r, wpath, "r"), 0);
	if (!r)
		return;
	CHECK(end > (int64_t)(100 + size));
	/* A staged write (device memory) before a staged read. */
	memset(dst, 0, size);
	CHECK_EQ(fake.cuLaunchHostFunc(s, produce_fn, &p), 0);
	CHECK_EQ(gpufile_write_async(w, src, size, 100, s, &nw), 0);
	CHECK_EQ(gpufile_read_async(r, dst, size, 100, s, &nr), 0);
	gate_open_now(&g1);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(g1.timed_out, 0);
	CHECK_EQ(nw, (ssize_t)size);
	CHECK_EQ(nr, (ssize_t)size);
	CHECK_EQ(test_mismatch(dst, size, SEED + 7, 100), -1);

	/* A write of host memory (the flag wait) before a staged read. */
	test_fill(host, size, SEED + 8, 100);
	memset(dst, 0, size);
	nw = nr = -777;
	CHECK_EQ(fake.cuLaunchHostFunc(s, gate_fn, &g2), 0);
	CHECK_EQ(gpufile_write_async(w, host, size, 100, s, &nw), 0);
	CHECK_EQ(gpufile_read_async(r, dst, size, 100, s, &nr), 0);
	gate_open_now(&g2);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(nw, (ssize_t)size);
	CHECK_EQ(nr, (ssize_t)size);
	CHECK_EQ(test_mismatch(dst, size, SEED + 8, 100), -1);

	/* The write extends the file; the read asks for a piece more. */
	p = (struct produce){&g3, src, size, SEED + 9, (uint64_t)end};
	memset(dst, 0xA5, size + CHUNK);
	nw = nr = -777;
	CHECK_EQ(fake.cuLaunchHostFunc(s, produce_fn, &p), 0);
	CHECK_EQ(gpufile_write_async(w, src, size, end, s, &nw), 0);
	CHECK_EQ(gpufile_read_async(r, dst, size + CHUNK, end, s, &nr), 0);
	gate_open_now(&g3);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(nw, (ssize_t)size);
	CHECK_EQ(nr, (ssize_t)size);
	CHECK_EQ(test_mismatch(dst, size, SEED + 9, (uint64_t)end), -1);
	CHECK_EQ(test_mismatch_byte(dst + size, CHUNK, 0xA5), -1);

	/* No write pending: read ahead as before, right. */
	memset(dst, 0, size);
	CHECK_EQ(read_on(r, s, dst, size, 100, NULL), (ssize_t)size);
	CHECK_EQ(test_mismatch(dst, size, SEED + 8, 100), -1);
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
	CHECK_EQ(gpufile_close(r), 0);
	free(host);
}

/* ---- offsets within a piece of INT64_MAX ---- */

static size_t longest_copy; /* of the copies queued since reset */

static CUresult spy_dtoh(void *dst, CUdeviceptr src, size_t size, CUstream s)
{
	if (size > longest_copy)
		longest_copy = size;
	return fake.cuMemcpyDtoHAsync(dst, src, size, s);
}

static CUresult spy_htod(CUdeviceptr dst, const void *src, size_t size,
                         CUstream s)
{
	if (size > longest_copy)
		longest_copy = size;
	return fake.cuMemcpyHtoDAsync(dst, src, size, s);
}

static int (*real_fstat)(int fd, struct stat *st);

/* Sparse files on XFS can be this large. */
static int huge_fstat(int fd, struct stat *st)
{
	const int rc = real_fstat(fd, st);

	if (rc == 0)
		st->st_size = INT64_MAX;
	return rc;
}

/* A request ending within one piece of INT64_MAX: the piece's end
 * (base + piece) is past INT64_MAX, and must not wrap. The copies move
 * exactly the request's bytes, nothing past the destination is written,
 * and the results are gpufile_pwrite's and gpufile_pread's. */
static void test_huge_offsets(gpufile_t *w)
{
	const int64_t off = INT64_MAX - CHUNK + 1; /* a multiple of CHUNK */
	const size_t size = 4096;
	unsigned char *buf = dev_base + CHUNK;
	static struct gpufile__cuda spy;
	ssize_t n = -777, want;
	CUstream s = new_stream();

	spy = fake;
	spy.cuMemcpyDtoHAsync = spy_dtoh;
	spy.cuMemcpyHtoDAsync = spy_htod;
	gpufile__cuda_override(&spy);
	want = gpufile_pwrite(w, buf, size, off);
	CHECK(want < 0); /* no file system takes that offset */
	longest_copy = 0;
	CHECK_EQ(gpufile_write_async(w, buf, size, off, s, &n), 0);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(longest_copy, size);
	CHECK_EQ(n, want);

	real_fstat = gpufile__sys.fstat;
	gpufile__sys.fstat = huge_fstat;
	memset(buf, 0xA5, 2 * CHUNK);
	want = gpufile_pread(w, buf, size, off);
	CHECK_EQ(test_mismatch_byte(buf, 2 * CHUNK, 0xA5), -1);
	longest_copy = 0;
	n = -777;
	CHECK_EQ(gpufile_read_async(w, buf, size, off, s, &n), 0);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(longest_copy, size);
	CHECK_EQ(n, want);
	CHECK_EQ(test_mismatch_byte(buf + size, 2 * CHUNK - size, 0xA5), -1);
	gpufile__sys.fstat = real_fstat;
	gpufile__cuda_override(&fake);
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
}

/* Issue 34: a bounce_buffer_size below 64 KiB and not a multiple of
 * 4 KiB (KvikIO honours any positive size) is the piece size of staged
 * reads and writes: many pieces of 1000 bytes, in arena units of 1000. */
static void test_small_pieces(gpufile_t *h, gpufile_t *w)
{
	const size_t size = 9001;
	const int64_t off = 4097;
	unsigned char *dst = dev_base + 3;
	ssize_t n = -1;
	size_t bbs = 0;
	CUstream s = new_stream();

	CHECK_EQ(gpufile_config_set("bounce_buffer_size", "1000"), 0);
	CHECK_EQ(gpufile_get_bounce_buffer_size(&bbs), 0);
	CHECK_EQ(bbs, 1000);
	memset(dev_base, 0, size + 6);
	CHECK_EQ(gpufile_read_async(h, dst, size, off, s, &n), 0);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(n, (ssize_t)size);
	CHECK_EQ(test_mismatch(dst, size, SEED, (uint64_t)off), -1);
	CHECK_EQ(test_mismatch_byte(dev_base, 3, 0), -1);
	CHECK_EQ(test_mismatch_byte(dst + size, 3, 0), -1);

	test_fill(dst, size, SEED + 2, (uint64_t)off);
	n = -1;
	CHECK_EQ(gpufile_write_async(w, dst, size, off, s, &n), 0);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(n, (ssize_t)size);
	CHECK_EQ(file_holds(off, size, SEED + 2), 0);
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffer_size", "1MiB"), 0);
}

int main(void)
{
	gpufile_t *h = NULL, *w = NULL;
	size_t freed;

	if (fake_install_devices(2) != 0)
		return 1;
	fake_cur = fake_ctx_of(0);
	alarm(300); /* a hang is a failure, not a stuck test */
	path = test_path("stream-stage.bin");
	wpath = test_path("stream-stage-w.bin");
	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED), 0);
	/* Regions of 24 pieces of 1 MiB, 6 fillers; reads through the
	 * page cache (the injected failures replace pread). */
	CHECK_EQ(gpufile_set_nthreads(6), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffers", "4"), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffer_size", "1MiB"), 0);
	CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	CHECK_EQ(gpufile_open(&w, wpath, "w+"), 0);
	if (!h || !w)
		return test_finish("test_stream_stage");

	/* First: no filler exists yet. */
	test_fillers_at_once(h);
	test_returns_at_once(h);
	CHECK(gpufile_bounce_buffer_free() >= REGION);
	CHECK_EQ(gpufile_bounce_buffer_free(), 0);
	test_many(h);
	/* Only staged reads ran since: their arenas, at most two, which
	 * is what is promised. Whether a second was needed depends on
	 * whether an earlier read still held its span when a later one
	 * asked: on a loaded machine the first of the large reads may end
	 * before the second starts, and one arena serves all three. */
	freed = gpufile_bounce_buffer_free();
	CHECK(freed == REGION || freed == 2 * REGION);
	CHECK_EQ(gpufile_bounce_buffer_free(), 0);
	test_errors_midway(h);
	/* Before test_contexts, while every flag is device 0's. */
	test_reset_other_device(h);
	test_contexts(h);
	test_fork_in_flight(h);
	test_writes(w);
	test_read_after_write(w);
	test_huge_offsets(w);
	test_small_pieces(h, w);
	/* Last: a refused wait is remembered for the process. */
	test_wait_refused(h);
	gpufile_close(w);
	gpufile_close(h);
	gpufile_release();
	CHECK_EQ(fake_read_int(&stale_uses), 0);
	CHECK_EQ(fake_read_int(&bad_copies), 0);
	CHECK(fake_dead_intact());
	fake_uninstall();
	return test_finish("test_stream_stage");
}
