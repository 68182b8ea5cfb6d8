/*
 * The threads that run stream-ordered requests into host memory (the
 * wait-value and host-func mechanisms of stream.c), on the fake CUDA
 * driver (fake_cuda.h):
 *   - reused: 200 requests one after another start no more than a few
 *     threads, not one each;
 *   - not serialised: a request whose read is stuck (a gated pread) does
 *     not hold up a later request on another stream; nor does one whose
 *     stream is held by a long kernel, queued back to back with the
 *     other while one waiter was idle;
 *   - closing a handle waits for its request in flight and is woken by
 *     its end;
 *   - fork: a child forked while a request is stuck can still close the
 *     handle (the request's count on it is dropped in the child, where no
 *     thread will ever end it), and the parent's request still ends.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEV_SIZE  (4u << 20)
#define FILE_SIZE (8u << 20)
#define SEED      71
#include "fake_cuda.h"

/* ---- a pread that waits at a gate, for one descriptor ---- */

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gated_fd = -1, gate_open = 1, gate_waiting;
static ssize_t (*real_pread)(int fd, void *buf, size_t len, off_t off);

static ssize_t gated_pread(int fd, void *buf, size_t len, off_t off)
{
	pthread_mutex_lock(&gate_lock);
	if (fd == gated_fd) {
		gate_waiting++;
		pthread_cond_broadcast(&gate_cond);
		while (!gate_open)
			pthread_cond_wait(&gate_cond, &gate_lock);
		gate_waiting--;
	}
	pthread_mutex_unlock(&gate_lock);
	return real_pread(fd, buf, len, off);
}

static void gate_close(int fd)
{
	pthread_mutex_lock(&gate_lock);
	gated_fd = fd;
	gate_open = 0;
	pthread_mutex_unlock(&gate_lock);
}

/* Waits until a read is stuck at the gate. */
static void gate_wait_stuck(void)
{
	pthread_mutex_lock(&gate_lock);
	while (gate_waiting == 0)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
}

static void gate_release(void)
{
	pthread_mutex_lock(&gate_lock);
	gate_open = 1;
	gated_fd = -1;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

static ssize_t load(const ssize_t *n)
{
	return __atomic_load_n(n, __ATOMIC_SEQ_CST);
}

/* ---- the cases ---- */

static void test_reused(gpufile_t *h, unsigned char *buf)
{
	enum { N = 200, PIECE = 64u << 10 };
	unsigned long before = gpufile__stream_waiters_started();
	CUstream s;

	CHECK_EQ(fake.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), 0);
	for (int i = 0; i < N; i++) {
		int64_t off = (int64_t)(i % (FILE_SIZE / PIECE)) * PIECE;
		ssize_t n = -777;

		CHECK_EQ(gpufile_read_async(h, buf, PIECE, off, s, &n), 0);
		CHECK_EQ(fake.cuStreamSynchronize(s), 0);
		CHECK_EQ(n, PIECE);
		CHECK_EQ(test_mismatch(buf, PIECE, SEED, (uint64_t)off), -1);
	}
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
	fprintf(stderr, "  %d requests in turn: %lu waiter threads started\n",
	        N, gpufile__stream_waiters_started() - before);
	CHECK(gpufile__stream_waiters_started() - before <= 2);
}

static void test_not_serialised(gpufile_t *stuck, gpufile_t *free_h,
                                unsigned char *buf)
{
	CUstream a, b;
	ssize_t na = -777, nb = -777;

	CHECK_EQ(fake.cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), 0);
	CHECK_EQ(fake.cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), 0);
	gate_close(gpufile_fd(stuck, 0));
	CHECK_EQ(gpufile_read_async(stuck, buf, 1u << 20, 0, a, &na), 0);
	gate_wait_stuck();
	CHECK_EQ(gpufile_read_async(free_h, buf + (2u << 20), 1u << 20, 4096, b,
	                            &nb),
	         0);
	CHECK_EQ(fake.cuStreamSynchronize(b), 0); /* ends while a is stuck */
	CHECK_EQ(nb, 1 << 20);
	CHECK_EQ(load(&na), -777);
	CHECK_EQ(test_mismatch(buf + (2u << 20), 1u << 20, SEED, 4096), -1);
	gate_release();
	CHECK_EQ(fake.cuStreamSynchronize(a), 0);
	CHECK_EQ(na, 1 << 20);
	CHECK_EQ(test_mismatch(buf, 1u << 20, SEED, 0), -1);
	CHECK_EQ(fake.cuStreamDestroy(a), 0);
	CHECK_EQ(fake.cuStreamDestroy(b), 0);
}

/* A "kernel" that holds its stream until the test opens the gate. */
static pthread_mutex_t kernel_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t kernel_cond = PTHREAD_COND_INITIALIZER;
static int kernel_open;

static void long_kernel(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&kernel_lock);
	while (!kernel_open)
		pthread_cond_wait(&kernel_cond, &kernel_lock);
	pthread_mutex_unlock(&kernel_lock);
}

/* One waiter idle; a request behind a long kernel on stream a, then at
 * once one on the free stream b: b's must not wait for a's kernel (a
 * hang here fails by alarm()). The idle waiter, signalled for a's job,
 * counts as idle until it wakes, and b's job used to go to it too. */
static void test_back_to_back(gpufile_t *h, unsigned char *buf)
{
	CUstream a, b;
	ssize_t na = -777, nb = -777;

	CHECK_EQ(fake.cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), 0);
	CHECK_EQ(fake.cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), 0);
	CHECK_EQ(gpufile_read_async(h, buf, 4096, 0, b, &nb), 0);
	CHECK_EQ(fake.cuStreamSynchronize(b), 0);
	CHECK_EQ(nb, 4096);
	CHECK_EQ(gpufile__stream_waiters_started(), 1);
	while (gpufile__stream_waiters_idle() != 1)
		sched_yield();
	nb = -777;
	CHECK_EQ(fake.cuLaunchHostFunc(a, long_kernel, NULL), 0);
	CHECK_EQ(gpufile_read_async(h, buf, 4096, 0, a, &na), 0);
	CHECK_EQ(gpufile_read_async(h, buf + (2u << 20), 4096, 4096, b, &nb),
	         0);
	CHECK_EQ(fake.cuStreamSynchronize(b), 0);
	CHECK_EQ(nb, 4096);
	CHECK_EQ(load(&na), -777);
	CHECK_EQ(test_mismatch(buf + (2u << 20), 4096, SEED, 4096), -1);
	pthread_mutex_lock(&kernel_lock);
	kernel_open = 1;
	pthread_cond_broadcast(&kernel_cond);
	pthread_mutex_unlock(&kernel_lock);
	CHECK_EQ(fake.cuStreamSynchronize(a), 0);
	CHECK_EQ(na, 4096);
	CHECK_EQ(test_mismatch(buf, 4096, SEED, 0), -1);
	CHECK_EQ(fake.cuStreamDestroy(a), 0);
	CHECK_EQ(fake.cuStreamDestroy(b), 0);
}

/* gpufile_close() of a handle with a request in flight waits for it, and
 * is woken when it ends (the request's end is what wakes the closer). */
static void test_close_waits(const char *path, unsigned char *buf)
{
	struct test_closer c = {0};
	ssize_t n = -777;
	pthread_t t;
	CUstream s;

	CHECK_EQ(gpufile_open(&c.h, path, "r"), 0);
	CHECK_EQ(fake.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), 0);
	gate_close(gpufile_fd(c.h, 0));
	CHECK_EQ(gpufile_read_async(c.h, buf, 1u << 20, 0, s, &n), 0);
	gate_wait_stuck();
	CHECK_EQ(pthread_create(&t, NULL, test_close_thread, &c), 0);
	test_sleep_ms(50);
	CHECK_EQ(__atomic_load_n(&c.done, __ATOMIC_SEQ_CST), 0);
	gate_release();
	pthread_join(t, NULL); /* alarm() in main: a lost wake-up fails */
	CHECK_EQ(c.rc, 0);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(n, 1 << 20);
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
}

static void test_fork(const char *path, unsigned char *buf)
{
	gpufile_t *h = NULL;
	ssize_t n = -777;
	CUstream s;
	pid_t pid;
	int st = 0;

	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	CHECK_EQ(fake.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), 0);
	gate_close(gpufile_fd(h, 0));
	CHECK_EQ(gpufile_read_async(h, buf, 1u << 20, 0, s, &n), 0);
	gate_wait_stuck();
	pid = fork();
	if (pid == 0) {
		/* The stuck request's thread is not here: closing must not
		 * wait for it. */
		alarm(20);
		_exit(gpufile_close(h) == 0 ? 0 : 3);
	}
	CHECK(pid > 0);
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	fprintf(stderr, "  child closed the handle: status 0x%x\n", st);
	gate_release();
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(n, 1 << 20);
	CHECK_EQ(test_mismatch(buf, 1u << 20, SEED, 0), -1);
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
	gpufile_close(h);
}

int main(void)
{
	const char *path = test_path("waiters.bin");
	unsigned char *buf = test_malloc(4u << 20);
	gpufile_t *h = NULL, *h2 = NULL;

	if (fake_install())
		return 1;
	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED), 0);
	/* Every read through pread (the gate): no O_DIRECT, no map copy. */
	CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);
	CHECK_EQ(gpufile_config_set("host_map_copy", "off"), 0);
	real_pread = gpufile__sys.pread;
	gpufile__sys.pread = gated_pread;
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	CHECK_EQ(gpufile_open(&h2, path, "r"), 0);
	if (!h || !h2)
		return test_finish("test_stream_waiters");

	alarm(120); /* a hang is a failure, not a stuck test */
	/* First: no waiter exists yet. */
	test_back_to_back(h, buf);
	test_reused(h, buf);
	test_not_serialised(h, h2, buf);
	test_close_waits(path, buf);
	if (TEST_ASAN_FORK_UNSAFE)
		fprintf(stderr, "  fork case skipped under ASan (testlib.h)\n");
	else
		test_fork(path, buf);

	gpufile_close(h);
	gpufile_close(h2);
	gpufile__sys.pread = real_pread;
	gpufile_release();
	gpufile__cuda_override(NULL);
	test_cleanup();
	free(dev_base);
	free(buf);
	return test_finish("test_stream_waiters");
}
