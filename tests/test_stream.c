/*
 * Stream-ordered reads and writes (gpufile_read_async, gpufile_write_async)
 * on the fake CUDA driver (fake_cuda.h), whose streams are queues run when
 * someone synchronises them. Test "kernels" are host functions queued on
 * the caller's stream: one queued before the request must run before
 * gpufile touches the buffer (it sees the buffer untouched, and its own
 * writes are overwritten by the read, or written by the write), one queued
 * after must see the file's bytes and *n_out. Every mechanism is run: the
 * flag wait (cuStreamWaitValue32), the staged read of device memory, the
 * host function where the driver refuses the wait, the blocking fallback
 * without either, and cuFile's
 * own cuFileReadAsync/WriteAsync (libfake_cufile.so). Errors: a failing
 * read reaches *n_out and releases the stream; bad arguments queue
 * nothing.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEV_SIZE  (40u << 20)
#define FILE_SIZE ((6u << 20) + 123)
#define SEED_FILE 61
#define SEED_DEV  62

/* Where check_read, check_write and test_many put their buffers: the
 * fake's device memory (dev_base; a read is staged on the stream, a write
 * blocks: stream.c's runs_gpu_work) or plain host memory (host_base; the
 * stream is held by a flag or a host function while a gpufile thread
 * reads). */
static unsigned char *io_base;
static unsigned char *host_base;
#define BEFORE 0xAB /* what the kernel before writes */
#define AFTER  0xCD /* what the kernel after writes */
#include "fake_cuda.h"

#ifndef FAKE_CUFILE_PATH
#error "FAKE_CUFILE_PATH must name libfake_cufile.so"
#endif

/* ---- "kernels": host functions on the caller's stream ---- */

struct kernel {
	unsigned char *buf;
	size_t len;
	int fill;              /* byte to write, or -1 */
	unsigned char *expect; /* what buf must hold when it runs, or NULL */
	int expect_byte;       /* or: every byte must be this, or -1 */
	const ssize_t *n_out;  /* *n_out when it ran */
	ssize_t n_seen;
	unsigned char *copy;      /* buf as it ran, or NULL */
	const unsigned char *src; /* copied into buf after the checks */
	int ok;                   /* buf held what was expected */
	int ran;
};

static void kernel_fn(void *arg)
{
	struct kernel *k = arg;

	k->ok = 1;
	if (k->expect && memcmp(k->buf, k->expect, k->len) != 0)
		k->ok = 0;
	if (k->expect_byte >= 0 &&
	    test_mismatch_byte(k->buf, k->len, (unsigned char)k->expect_byte) !=
	        -1)
		k->ok = 0;
	if (k->src)
		memcpy(k->buf, k->src, k->len);
	if (k->copy)
		memcpy(k->copy, k->buf, k->len);
	if (k->n_out)
		k->n_seen = *k->n_out;
	if (k->fill >= 0)
		memset(k->buf, k->fill, k->len);
	__atomic_fetch_add(&k->ran, 1, __ATOMIC_SEQ_CST);
}

static struct kernel kernel(unsigned char *buf, size_t len, int fill)
{
	struct kernel k = {0};

	k.buf = buf;
	k.len = len;
	k.fill = fill;
	k.expect_byte = -1;
	k.n_seen = -123456;
	return k;
}

static void launch(CUstream s, struct kernel *k)
{
	CHECK_EQ(fake.cuLaunchHostFunc(s, kernel_fn, k), CUDA_SUCCESS);
}

static size_t queued(CUstream s)
{
	size_t n;

	pthread_mutex_lock(&fake_lock);
	n = s->nops;
	pthread_mutex_unlock(&fake_lock);
	return n;
}

/* ---- reads ---- */

/* A read of size bytes at off between a kernel before (which must find
 * the buffer untouched and then scribbles over it) and a kernel after
 * (which must find the file's bytes and *n_out == want). mech is the
 * word gpufile_stream_info must start with. */
static void check_read(gpufile_t *h, size_t size, int64_t off, ssize_t want,
                       const char *mech)
{
	unsigned char *dev = io_base + 4096 + 1; /* unaligned on purpose */
	unsigned char *seen = test_malloc(size);
	struct kernel before, after;
	char reason[512];
	ssize_t n = -777;
	CUstream s;

	CHECK_EQ(gpufile_stream_info(h, dev, size, 0, reason, sizeof(reason)),
	         0);
	CHECK(strncmp(reason, mech, strlen(mech)) == 0);
	if (strncmp(reason, mech, strlen(mech)) != 0)
		fprintf(stderr, "reason: %s\n", reason);
	test_fill(dev, size, SEED_DEV, 0);
	CHECK_EQ(fake.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), 0);
	before = kernel(dev, size, BEFORE);
	before.expect = test_malloc(size);
	memcpy(before.expect, dev, size);
	launch(s, &before);
	CHECK_EQ(gpufile_read_async(h, dev, size, off, s, &n), 0);
	after = kernel(dev, size, AFTER);
	after.n_out = &n;
	after.copy = seen;
	launch(s, &after);
	/* The fake runs a stream only when someone waits for it: gpufile's
	 * thread must run the kernel before (cuEventSynchronize) before it
	 * reads. Give it the chance, without touching the stream here: a
	 * read that did not wait would now end, and the kernel before
	 * would find the file's bytes. (cuFile queues its read on the
	 * stream, which only this thread runs.) */
	if (strcmp(mech, "cufile:") != 0)
		while (!__atomic_load_n(&before.ran, __ATOMIC_SEQ_CST) &&
		       __atomic_load_n(&n, __ATOMIC_SEQ_CST) == -777)
			sched_yield();
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);

	CHECK_EQ(before.ran, 1);
	CHECK_EQ(before.ok, 1);       /* gpufile waited for it */
	CHECK_EQ(after.ran, 1);       /* the stream was released */
	CHECK_EQ(after.n_seen, want); /* *n_out was set before it ran */
	CHECK_EQ(n, want);
	if (want > 0) {
		/* The read came after the kernel before (its bytes are gone)
		 * and before the kernel after (which saw the file). */
		CHECK_EQ(
		    test_mismatch(seen, (size_t)want, SEED_FILE, (uint64_t)off),
		    -1);
		/* Past end-of-file the buffer keeps the kernel before's
		 * bytes. */
		CHECK_EQ(test_mismatch_byte(seen + want, size - (size_t)want,
		                            BEFORE),
		         -1);
	}
	CHECK_EQ(test_mismatch_byte(dev, size, AFTER), -1);
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
	free(before.expect);
	free(seen);
}

/* ---- writes ---- */

/* A write of size bytes at off: the kernel before fills the buffer with
 * the pattern of seed (the bytes the stream produced), the kernel after
 * scribbles over it; the file must hold the pattern. */
static void check_write(gpufile_t *h, const char *path, size_t size,
                        int64_t off, uint64_t seed)
{
	unsigned char *dev = io_base + 8192 + 3;
	unsigned char *pattern = test_malloc(size);
	struct kernel before, after;
	unsigned char *file;
	void *pinned_src = NULL;
	size_t len = 0;
	ssize_t n = -777;
	CUstream s;

	test_fill(pattern, size, seed, (uint64_t)off);
	memset(dev, 0, size);
	CHECK_EQ(fake.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), 0);
	/* The stream's work before: a check that gpufile has not read the
	 * buffer early would be moot, so it produces the bytes instead: a
	 * copy from pinned memory, queued behind a kernel that finds the
	 * buffer still zero. */
	before = kernel(dev, size, -1);
	before.expect_byte = 0;
	if (io_base == host_base)
		before.src = pattern; /* host memory: the "kernel" writes it */
	launch(s, &before);
	CHECK_EQ(fake.cuMemHostAlloc(&pinned_src, size, 0), 0);
	memcpy(pinned_src, pattern, size);
	if (io_base != host_base)
		CHECK_EQ(fake.cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dev,
		                                pinned_src, size, s),
		         0);
	CHECK_EQ(gpufile_write_async(h, dev, size, off, s, &n), 0);
	after = kernel(dev, size, AFTER); /* must not reach the file */
	after.n_out = &n;
	launch(s, &after);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	fake.cuMemFreeHost(pinned_src);
	CHECK_EQ(before.ran, 1);
	CHECK_EQ(before.ok, 1);
	CHECK_EQ(after.ran, 1);
	CHECK_EQ(after.n_seen, (ssize_t)size);
	CHECK_EQ(n, (ssize_t)size);
	file = test_read_file(path, &len);
	CHECK(file != NULL);
	if (file) {
		CHECK(len >= (size_t)off + size);
		CHECK_EQ(test_mismatch(file + off, size, seed, (uint64_t)off),
		         -1);
		free(file);
	}
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
	free(pattern);
}

/* ---- errors ---- */

static ssize_t failing_pread(int fd, void *buf, size_t len, off_t off)
{
	(void)fd;
	(void)buf;
	(void)len;
	(void)off;
	errno = EIO;
	return -1;
}

static ssize_t failing_preadv2(int fd, const struct iovec *iov, int n,
                               off_t off, int flags)
{
	(void)fd;
	(void)iov;
	(void)n;
	(void)off;
	(void)flags;
	errno = EIO;
	return -1;
}

static CUresult capturing(CUstream s, int *status)
{
	(void)s;
	*status = 1; /* CU_STREAM_CAPTURE_STATUS_ACTIVE */
	return CUDA_SUCCESS;
}

static CUresult refuse_record(CUevent e, CUstream s)
{
	(void)e;
	(void)s;
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult refuse_host_func(CUstream s, CUhostFn fn, void *data)
{
	(void)s;
	(void)fn;
	(void)data;
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult refuse_wait(CUstream s, CUdeviceptr addr, unsigned value,
                            unsigned flags)
{
	(void)s;
	(void)addr;
	(void)value;
	(void)flags;
	return CUDA_ERROR_INVALID_HANDLE;
}

static CUresult refuse_sync(CUstream s)
{
	(void)s;
	return CUDA_ERROR_INVALID_HANDLE;
}

/* The driver refuses what each mechanism queues at the call: an error
 * naming the file and the call, n_out alone, nothing queued but (where
 * the hold was refused) the event recorded before it, which waits for
 * nothing. */
static void refused_at_call(gpufile_t *h, CUstream s,
                            const struct gpufile__cuda *table, const char *what)
{
	size_t before = queued(s);
	ssize_t n = -777;

	gpufile__cuda_override(table);
	CHECK_EQ(gpufile_read_async(h, host_base, 4096, 0, s, &n),
	         GPUFILE_ECUDA);
	CHECK_CONTAINS(gpufile_errmsg(), what);
	CHECK_CONTAINS(gpufile_errmsg(), gpufile_filename(h));
	CHECK_EQ(n, -777);
	CHECK(queued(s) <= before + 1);
	gpufile__cuda_override(&fake);
}

static void test_errors(gpufile_t *h, gpufile_t *ro)
{
	unsigned char *dev = dev_base + 4096;
	ssize_t n = -777;
	CUstream s;
	size_t before;

	CHECK_EQ(fake.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), 0);
	before = queued(s);
	/* Errors found at the call queue nothing and leave n_out alone. */
	CHECK_EQ(gpufile_read_async(h, dev, 4096, 0, s, NULL), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "n_out");
	CHECK_EQ(gpufile_read_async(NULL, dev, 4096, 0, s, &n), -EINVAL);
	CHECK_EQ(gpufile_read_async(h, NULL, 4096, 0, s, &n), -EFAULT);
	CHECK_EQ(gpufile_read_async(h, dev, 4096, -1, s, &n), -EINVAL);
	CHECK_EQ(gpufile_write_async(ro, dev, 4096, 0, s, &n), -EBADF);
	CHECK_CONTAINS(gpufile_errmsg(), "not opened for writing");
	CHECK_EQ(n, -777);
	CHECK_EQ(queued(s), before);
	/* An append's size too (its offset is placed when it runs): it
	 * used to be queued, and fail only in n_out. */
	{
		gpufile_t *a = NULL;

		CHECK_EQ(gpufile_open(&a, test_path("stream-append"), "a"), 0);
		CHECK_EQ(gpufile_write_async(a, host_base,
		                             (size_t)INT64_MAX + 1, 0, s, &n),
		         -EINVAL);
		CHECK_CONTAINS(gpufile_errmsg(), "out of range");
		CHECK_EQ(n, -777);
		CHECK_EQ(queued(s), before);
		/* Its path, said as for any other handle: host memory is
		 * written in place (it said "posix"). */
		{
			char reason[1024];

			CHECK_EQ(gpufile_stream_info(a, host_base, 4096, 1,
			                             reason, sizeof(reason)),
			         0);
			CHECK_CONTAINS(reason, "wait-value:");
			CHECK_CONTAINS(reason, "through the host path");
		}
		CHECK_EQ(gpufile_close(a), 0);
	}

	/* An I/O error reaches *n_out, and the stream goes on. */
	{
		struct kernel after = kernel(dev, 4096, -1);
		after.n_out = &n;
		gpufile__sys.pread = failing_pread;
		gpufile__sys.preadv2 = failing_preadv2;
		CHECK_EQ(gpufile_read_async(h, dev, 1u << 20, 0, s, &n), 0);
		launch(s, &after);
		CHECK_EQ(fake.cuStreamSynchronize(s), 0);
		CHECK_EQ(after.ran, 1);
		CHECK_EQ(after.n_seen, -EIO);
		CHECK_EQ(n, -EIO);
		gpufile__sys_reset();
	}
	/* The driver refuses the event recorded before anything else
	 * (host memory): an error naming it, n_out alone. */
	{
		static struct gpufile__cuda broken;
		broken = fake;
		broken.cuEventRecord = refuse_record;
		gpufile__cuda_override(&broken);
		n = -777;
		before = queued(s);
		CHECK_EQ(gpufile_read_async(h, host_base, 4096, 0, s, &n),
		         GPUFILE_ECUDA);
		CHECK_CONTAINS(gpufile_errmsg(), "cuEventRecord");
		CHECK_CONTAINS(gpufile_errmsg(), gpufile_filename(h));
		CHECK_EQ(n, -777);
		CHECK_EQ(queued(s), before);
		/* A staged read (device memory) has queued its first wait
		 * by then: the failure reaches n_out, and the stream goes
		 * on. */
		{
			struct kernel after = kernel(dev, 4096, -1);
			after.n_out = &n;
			CHECK_EQ(gpufile_read_async(h, dev, 4096, 0, s, &n), 0);
			launch(s, &after);
			CHECK_EQ(fake.cuStreamSynchronize(s), 0);
			CHECK_EQ(after.ran, 1);
			CHECK_EQ(after.n_seen, GPUFILE_ECUDA);
			CHECK_EQ(n, GPUFILE_ECUDA);
			n = -777;
		}
		gpufile__cuda_override(&fake);
	}
	/* The hold refused: the wait (wait-value), the host function
	 * (host-func), the synchronisation (blocking). */
	{
		static struct gpufile__cuda broken;

		broken = fake;
		broken.cuStreamWaitValue32 = refuse_wait;
		refused_at_call(h, s, &broken, "cuStreamWaitValue32");
		broken = fake;
		broken.cuStreamWaitValue32 = NULL;
		broken.cuLaunchHostFunc = refuse_host_func;
		refused_at_call(h, s, &broken, "cuLaunchHostFunc");
		broken.cuLaunchHostFunc = NULL;
		broken.cuStreamSynchronize = refuse_sync;
		refused_at_call(h, s, &broken, "cuStreamSynchronize");
	}
	/* A stream capturing a graph: refused, naming it. */
	{
		static struct gpufile__cuda graph;
		graph = fake;
		graph.cuStreamIsCapturing = capturing;
		gpufile__cuda_override(&graph);
		before = queued(s);
		CHECK_EQ(gpufile_read_async(h, dev, 4096, 0, s, &n), -EINVAL);
		CHECK_CONTAINS(gpufile_errmsg(), "capturing a CUDA graph");
		CHECK_EQ(n, -777);
		CHECK_EQ(queued(s), before);
		gpufile__cuda_override(&fake);
	}
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
}

/* Many requests in flight on several streams at once: every flag slot is
 * handed out, released and reused. */
static void test_many(gpufile_t *h)
{
	enum { STREAMS = 4, PER = 16, PIECE = 64u << 10 };
	CUstream s[STREAMS];
	ssize_t n[STREAMS][PER];
	struct kernel after[STREAMS];

	memset(io_base, 0, (size_t)STREAMS * PER * PIECE);
	for (int i = 0; i < STREAMS; i++)
		CHECK_EQ(fake.cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING), 0);
	for (int r = 0; r < PER; r++)
		for (int i = 0; i < STREAMS; i++) {
			size_t at = ((size_t)i * PER + r) * PIECE;
			n[i][r] = -1;
			CHECK_EQ(gpufile_read_async(h, io_base + at, PIECE,
			                            (int64_t)at, s[i],
			                            &n[i][r]),
			         0);
		}
	for (int i = 0; i < STREAMS; i++) {
		after[i] = kernel(io_base, 1, -1);
		after[i].n_out = &n[i][PER - 1];
		launch(s[i], &after[i]);
	}
	for (int i = STREAMS - 1; i >= 0; i--) {
		CHECK_EQ(fake.cuStreamSynchronize(s[i]), 0);
		CHECK_EQ(after[i].n_seen, PIECE);
		for (int r = 0; r < PER; r++)
			CHECK_EQ(n[i][r], PIECE);
		CHECK_EQ(fake.cuStreamDestroy(s[i]), 0);
	}
	CHECK_EQ(
	    test_mismatch(io_base, (size_t)STREAMS * PER * PIECE, SEED_FILE, 0),
	    -1);
}

/* ---- cuFile's own stream-ordered calls (libfake_cufile.so) ---- */

static int launch_for_cufile(void *stream, void (*fn)(void *), void *data)
{
	return fake.cuLaunchHostFunc(stream, fn, data) == CUDA_SUCCESS ? 0 : -1;
}

/* A request cuFile queued holds its handle until the stream has run it:
 * gpufile_close() waits (it deregisters the cuFile handle the request
 * reads through), and is woken by the request's end; a forked child,
 * where the request never ends, can close at once. Where the driver
 * refuses the host function that ends the request, the call waits for
 * the stream itself. *n_out is written once, with gpufile's code. */
static void test_cufile_close(const char *rpath)
{
	unsigned char *dev = dev_base + 4096;
	struct test_closer c = {0};
	ssize_t n = -777;
	pthread_t t;
	CUstream s;

	CHECK_EQ(fake.cuStreamCreate(&s, 0), 0);
	CHECK_EQ(gpufile_open(&c.h, rpath, "r"), 0);
	memset(dev, 0, 1u << 20);
	CHECK_EQ(gpufile_read_async(c.h, dev, 1u << 20, 64, s, &n), 0);
	if (!TEST_ASAN_FORK_UNSAFE) {
		pid_t pid = fork();
		int st = 0;

		if (pid == 0) {
			alarm(20); /* a child stuck in close ends here */
			_exit(gpufile_close(c.h) == 0 ? 0 : 3);
		}
		CHECK(pid > 0);
		CHECK_EQ(waitpid(pid, &st, 0), pid);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	CHECK_EQ(pthread_create(&t, NULL, test_close_thread, &c), 0);
	/* The fake runs the stream only here: the closer must wait. */
	test_sleep_ms(50);
	CHECK_EQ(__atomic_load_n(&c.done, __ATOMIC_SEQ_CST), 0);
	CHECK_EQ(__atomic_load_n(&n, __ATOMIC_SEQ_CST), -777);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	pthread_join(t, NULL); /* alarm() in main: a lost wake-up fails */
	CHECK_EQ(c.rc, 0);
	CHECK_EQ(n, 1 << 20);
	CHECK_EQ(test_mismatch(dev, 1u << 20, SEED_FILE, 64), -1);

	/* The host function after cuFile's request is refused. */
	{
		static struct gpufile__cuda no_fn;
		gpufile_t *h = NULL;

		no_fn = fake;
		no_fn.cuLaunchHostFunc = refuse_host_func;
		CHECK_EQ(gpufile_open(&h, rpath, "r"), 0);
		gpufile__cuda_override(&no_fn);
		n = -777;
		memset(dev, 0, 1u << 20);
		CHECK_EQ(gpufile_read_async(h, dev, 1u << 20, 8192, s, &n), 0);
		CHECK_EQ(n, 1 << 20); /* the stream ran in the call */
		CHECK_EQ(test_mismatch(dev, 1u << 20, SEED_FILE, 8192), -1);
		gpufile__cuda_override(&fake);
		CHECK_EQ(gpufile_close(h), 0);
	}
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
}

static void test_cufile(const char *rpath, const char *wpath)
{
	void (*set_launcher)(int (*)(void *, void (*)(void *), void *));
	uint64_t (*async_calls)(void);
	gpufile_t *h = NULL, *w = NULL;
	void *lib;

	CHECK_EQ(gpufile_config_set("cufile_library", FAKE_CUFILE_PATH), 0);
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_OFF), 0);
	lib = dlopen(FAKE_CUFILE_PATH, RTLD_NOW);
	CHECK(lib != NULL);
	if (!lib)
		return;
	*(void **)&set_launcher = dlsym(lib, "fake_cufile_set_launcher");
	*(void **)&async_calls = dlsym(lib, "fake_cufile_async_calls");
	CHECK(set_launcher && async_calls);
	if (!set_launcher || !async_calls)
		return;
	set_launcher(launch_for_cufile);
	CHECK_EQ(gpufile_open(&h, rpath, "r"), 0);
	CHECK_EQ(gpufile_open(&w, wpath, "r+"), 0);
	if (h && w) {
		check_read(h, (1u << 20) + 5, 4096, (1u << 20) + 5, "cufile:");
		check_read(h, 1u << 20, FILE_SIZE - 100, 100, "cufile:");
		CHECK_EQ(async_calls(), 2);
		check_write(w, wpath, (1u << 20) + 7, 1000, 71);
		CHECK_EQ(async_calls(), 3);
		test_cufile_close(rpath);

		/* cuFile refuses to queue (no launcher: the fake answers
		 * CU_FILE_PLATFORM_NOT_SUPPORTED): with compat_mode=off
		 * that is an error naming it, nothing queued. */
		set_launcher(NULL);
		{
			ssize_t n = -777;
			CUstream s;
			CHECK_EQ(fake.cuStreamCreate(&s, 0), 0);
			CHECK_EQ(
			    gpufile_read_async(h, dev_base, 1u << 20, 0, s, &n),
			    GPUFILE_ECUFILE);
			CHECK_CONTAINS(gpufile_errmsg(),
			               "CU_FILE_PLATFORM_NOT_SUPPORTED");
			CHECK_EQ(queued(s), 0);
			CHECK_EQ(n, -777);
			CHECK_EQ(fake.cuStreamDestroy(s), 0);
		}
		/* With compat_mode=auto the posix side keeps the order
		 * (stream_info still names cuFile: it cannot know that
		 * cuFile will refuse to queue). */
		CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_AUTO), 0);
		CHECK_EQ(gpufile_config_set("cufile_accel_only", "off"), 0);
		check_read(h, 1u << 20, 0, 1u << 20, "cufile:");
	}
	gpufile_close(h);
	gpufile_close(w);
	gpufile_set_compat_mode(GPUFILE_COMPAT_ON);
}

int main(void)
{
	const char *rpath = test_path("stream-src");
	const char *wpath = test_path("stream-dst");
	gpufile_t *h = NULL, *w = NULL, *ro = NULL;
	void *mem = NULL;

	if (posix_memalign(&mem, 4096, DEV_SIZE)) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	dev_base = mem;
	if (posix_memalign(&mem, 4096, DEV_SIZE)) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	host_base = mem;
	io_base = dev_base;
	alarm(300); /* a hang is a failure, not a stuck test */
	CHECK_EQ(test_make_file(rpath, FILE_SIZE, SEED_FILE), 0);
	gpufile__cuda_override(&fake);
	/* Never hand the fake's "device memory" to a real cuFile. */
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
	CHECK_EQ(gpufile_config_set("task_size", "1MiB"), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffer_size", "256KiB"), 0);
	/* A staging region of 4 x 2 x 256 KiB = 2 MiB, on any machine. */
	CHECK_EQ(gpufile_set_nthreads(4), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffers", "2"), 0);
	/* Page-cache reads only: the injected EIO goes through pread. */
	CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);
	CHECK_EQ(gpufile_open(&h, rpath, "r"), 0);
	CHECK_EQ(gpufile_open(&ro, rpath, "r"), 0);
	CHECK_EQ(gpufile_open(&w, wpath, "w+"), 0);
	if (!h || !w || !ro)
		return test_finish("test_stream");

	/* Device memory: a read of up to one region (here 2 MiB) is
	 * staged on the stream: one wait and one copy per 16 MiB, and a
	 * wait for the end (test_stream_stage has the details); a write
	 * too: a wait the flag already passes, its copies, and the wait
	 * for the end. A larger read or write synchronises the stream and
	 * runs the request through the bounce buffers, with no flag
	 * wait. */
	io_base = dev_base;
	check_read(h, (1u << 20) + 777, 5, (1u << 20) + 777, "staged:");
	check_read(h, 8192, FILE_SIZE - 4000, 4000, "staged:"); /* EOF */
	check_read(h, 4096, FILE_SIZE + 10, 0, "staged:");
	test_many(h);
	CHECK_EQ(wait_ops, 2 + 2 + 1 + 64 * 2);
	check_read(h, (3u << 20) + 777, 5, (3u << 20) + 777, "blocking:");
	check_write(w, wpath, (2u << 20) + 11, 3, 67);
	CHECK_EQ(wait_ops, 2 + 2 + 1 + 64 * 2);
	check_write(w, wpath, (1u << 20) + 11, 3, 68);
	CHECK_EQ(wait_ops, 2 + 2 + 1 + 64 * 2 + 2);

	/* Host memory: the flag wait holds the stream while a gpufile
	 * thread reads. */
	io_base = host_base;
	check_read(h, (3u << 20) + 777, 5, (3u << 20) + 777, "wait-value:");
	check_read(h, 8192, FILE_SIZE - 4000, 4000, "wait-value:"); /* EOF */
	check_read(h, 4096, FILE_SIZE + 10, 0, "wait-value:");
	CHECK(wait_ops >= 3);
	check_write(w, wpath, (2u << 20) + 11, 3, 65);
	test_many(h);
	io_base = dev_base;
	test_errors(h, ro);

	/* The driver refuses stream memory operations: a host function
	 * holds the stream (host memory). */
	io_base = host_base;
	fake_wait_refused = 1;
	{
		long hostfn_before = hostfn_ops;
		check_read(h, (2u << 20) + 1, 100, (2u << 20) + 1,
		           "wait-value:"); /* not refused yet: tried first */
		check_read(h, (2u << 20) + 1, 100, (2u << 20) + 1,
		           "host-func:");
		check_write(w, wpath, (1u << 20) + 1, 4096 * 3, 66);
		CHECK(hostfn_ops - hostfn_before >= 3 * 2 + 3);
	}
	io_base = dev_base;

	/* Neither: the call blocks, and n_out is set when it returns. */
	{
		static struct gpufile__cuda old;
		old = fake;
		old.cuStreamWaitValue32 = NULL;
		old.cuLaunchHostFunc = NULL;
		gpufile__cuda_override(&old);
		{
			unsigned char *dev = dev_base + 12288;
			char reason[512];
			ssize_t n = -777;
			CUstream s;

			CHECK_EQ(gpufile_stream_info(h, dev, 1u << 20, 0,
			                             reason, sizeof(reason)),
			         0);
			CHECK_CONTAINS(reason, "blocking:");
			CHECK_EQ(fake.cuStreamCreate(&s, 0), 0);
			memset(dev, 0, 1u << 20);
			CHECK_EQ(
			    gpufile_read_async(h, dev, 1u << 20, 64, s, &n), 0);
			CHECK_EQ(n, 1 << 20);
			CHECK_EQ(test_mismatch(dev, 1u << 20, SEED_FILE, 64),
			         -1);
			CHECK_EQ(fake.cuStreamDestroy(s), 0);
		}
		gpufile__cuda_override(&fake);
	}
	gpufile_close(h);
	gpufile_close(ro);
	gpufile_close(w);

	test_cufile(rpath, wpath);
	gpufile_release();
	gpufile__cuda_override(NULL);
	test_cleanup();
	free(dev_base);
	free(host_base);
	return test_finish("test_stream");
}
