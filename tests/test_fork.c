/*
 * fork() while the library is busy (issue 10 item 2): threads of the
 * parent read in a loop (sync, async, and into fake device memory, so the
 * pool, its request locks and the bounce-buffer stagers are in use) while
 * the main thread forks NFORKS times, each time with an async request of
 * its own in flight. Each child must, without deadlock:
 *   - see the parent's in-flight request end (its bytes, or -ECANCELED
 *     with a message naming fork: the child has no thread moving them);
 *   - read the file synchronously and asynchronously (polling
 *     gpufile_future_done until done, so the pool must start workers
 *     again), on the parent's handle and on a new one, bytes checked;
 *   - get GPUFILE_ENOCUDA naming fork for a device allocation (CUDA
 *     cannot be used in a child of a process that initialised it);
 *   - close the handles (the parent's requests no longer count on them).
 * A child that deadlocks is killed by its alarm and the parent reports
 * it; the parent's own watchdog catches a parent that hangs.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "fake_cuda.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
/* TSan refuses to start threads in a child of a multi-threaded process
 * unless told to: the child here starts the pool's workers again. (GCC's
 * libtsan.so looks the function up dynamically: default visibility.) */
__attribute__((visibility("default"))) const char *__tsan_default_options(void)
{
	return "die_after_fork=0";
}
#endif

#define FSIZE    ((3u << 20) + 12345u) /* several tasks, ragged end */
#define TS       (256u << 10)
#define SEED     7
#define NFORKS   12
#define NREADERS 3
#define DEVSLOT  (4u << 20) /* fake device bytes per device reader */

static const char *path;
static gpufile_t *shared_h;
static atomic_int stop, parent_errors;

static void *host_reader(void *arg)
{
	const int use_async = (int)(intptr_t)arg;
	unsigned char *buf = test_malloc(FSIZE);

	while (!atomic_load(&stop)) {
		ssize_t n;

		memset(buf, 0, FSIZE);
		if (use_async) {
			gpufile_future_t *f = NULL;
			if (gpufile_pread_async(shared_h, buf, FSIZE, 0, &f)) {
				atomic_fetch_add(&parent_errors, 1);
				break;
			}
			n = gpufile_future_wait(f);
			gpufile_future_free(f);
		} else {
			n = gpufile_pread(shared_h, buf, FSIZE, 0);
		}
		if (n != (ssize_t)FSIZE ||
		    test_mismatch(buf, FSIZE, SEED, 0) >= 0)
			atomic_fetch_add(&parent_errors, 1);
	}
	free(buf);
	return NULL;
}

/* Reads into fake device memory: the staged path, with stagers held. */
static void *device_reader(void *arg)
{
	unsigned char *dev = dev_base + (size_t)(intptr_t)arg * DEVSLOT;

	while (!atomic_load(&stop)) {
		ssize_t n = gpufile_pread(shared_h, dev, FSIZE, 0);
		if (n != (ssize_t)FSIZE ||
		    test_mismatch(dev, FSIZE, SEED, 0) >= 0)
			atomic_fetch_add(&parent_errors, 1);
	}
	return NULL;
}

static void child_read(gpufile_t *h, unsigned char *buf)
{
	gpufile_future_t *f = NULL;

	memset(buf, 0, FSIZE);
	CHECK_EQ(gpufile_pread(h, buf, FSIZE, 0), FSIZE);
	CHECK_EQ(test_mismatch(buf, FSIZE, SEED, 0), -1);

	memset(buf, 0, FSIZE);
	CHECK_EQ(gpufile_pread_async(h, buf, FSIZE, 0, &f), 0);
	if (!f)
		return;
	/* Polling only: nothing but the pool's workers can finish it. */
	while (!gpufile_future_done(f))
		sched_yield();
	CHECK_EQ(gpufile_future_wait(f), FSIZE);
	CHECK_EQ(test_mismatch(buf, FSIZE, SEED, 0), -1);
	gpufile_future_free(f);
}

static void child_main(gpufile_future_t *inherited, unsigned char *ibuf)
{
	unsigned char *buf = test_malloc(FSIZE);
	gpufile_t *h = NULL;
	void *dev = NULL;
	ssize_t n;

	alarm(60); /* a deadlock ends here, as SIGALRM */
	test_failures = 0;

	n = gpufile_future_wait(inherited);
	if (n == -ECANCELED)
		CHECK_CONTAINS(gpufile_errmsg(), "fork");
	else {
		CHECK_EQ(n, FSIZE);
		CHECK_EQ(test_mismatch(ibuf, FSIZE, SEED, 0), -1);
	}
	gpufile_future_free(inherited);

	child_read(shared_h, buf);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (h) {
		child_read(h, buf);
		CHECK_EQ(gpufile_close(h), 0);
	}

	CHECK_EQ(gpufile_device_alloc(0, 4096, &dev), GPUFILE_ENOCUDA);
	CHECK_CONTAINS(gpufile_errmsg(), "fork");
	/* Memory the child cannot touch (as a parent's device pointer would
	 * be): an error naming fork, not a crash. */
	{
		size_t len = 1u << 20;
		void *none = mmap(NULL, len, PROT_NONE,
		                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(none != MAP_FAILED);
		if (none != MAP_FAILED) {
			CHECK_EQ(gpufile_pread(shared_h, none, len, 0),
			         -EFAULT);
			CHECK_CONTAINS(gpufile_errmsg(), "forked after CUDA");
			munmap(none, len);
		}
	}

	CHECK_EQ(gpufile_close(shared_h), 0);
	free(buf);
	_exit(test_failures ? 1
	                    : 0); /* not exit(): the test dir is the parent's */
}

int main(void)
{
	if (TEST_ASAN_FORK_UNSAFE) {
		fprintf(stderr,
		        "test_fork: skipped: this build's AddressSanitizer "
		        "does not lock its allocator across fork() "
		        "(see testlib.h); the plain and TSan builds run "
		        "it\n");
		return TEST_SKIP;
	}
	pthread_t readers[NREADERS + 1];
	unsigned char *ibuf = test_malloc(FSIZE);
	unsigned char *mem = calloc(1, DEV_SIZE);

	alarm(300);
	path = test_path("fork");
	CHECK_EQ(test_make_file(path, FSIZE, SEED), 0);
	CHECK_EQ(gpufile_set_task_size(TS), 0);
	CHECK_EQ(gpufile_set_nthreads(4), 0);
	CHECK_EQ(gpufile_config_set("gds_threshold", "0"), 0);
	CHECK_EQ(gpufile_config_set("compat_mode", "on"), 0);
	dev_base = mem;
	gpufile__cuda_override(&fake);
	CHECK_EQ(gpufile_open(&shared_h, path, "r"), 0);
	if (!shared_h || !mem)
		return test_finish("test_fork");

	pthread_create(&readers[0], NULL, host_reader, (void *)0);
	pthread_create(&readers[1], NULL, host_reader, (void *)0);
	pthread_create(&readers[2], NULL, host_reader, (void *)1);
	pthread_create(&readers[3], NULL, device_reader, (void *)0);

	for (int i = 0; i < NFORKS; i++) {
		gpufile_future_t *f = NULL;
		int status = 0;
		pid_t pid;

		memset(ibuf, 0, FSIZE);
		CHECK_EQ(gpufile_pread_async(shared_h, ibuf, FSIZE, 0, &f), 0);
		pid = fork();
		if (pid == 0)
			child_main(f, ibuf);
		CHECK(pid > 0);
		CHECK_EQ(gpufile_future_wait(f), FSIZE);
		CHECK_EQ(test_mismatch(ibuf, FSIZE, SEED, 0), -1);
		gpufile_future_free(f);
		if (pid < 0)
			break;
		CHECK_EQ(waitpid(pid, &status, 0), pid);
		if (WIFSIGNALED(status))
			fprintf(stderr, "child %d died of signal %d%s\n", i,
			        WTERMSIG(status),
			        WTERMSIG(status) == SIGALRM ? " (deadlock)"
			                                    : "");
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}

	atomic_store(&stop, 1);
	for (int i = 0; i < NREADERS + 1; i++)
		pthread_join(readers[i], NULL);
	CHECK_EQ(atomic_load(&parent_errors), 0);
	CHECK_EQ(gpufile_close(shared_h), 0);
	gpufile_release();
	gpufile__cuda_override(NULL);
	free(mem);
	free(ibuf);
	return test_finish("test_fork");
}
