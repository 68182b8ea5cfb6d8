/*
 * fork() after CUDA was initialised, on a real GPU (issue 10 item 2): a
 * thread of the parent reads into device memory in a loop (bounce
 * buffers, streams, the cuFile driver when present) while the main thread
 * forks. CUDA may not be used in such a child, so each child must:
 *   - get GPUFILE_ENOCUDA naming fork for a device allocation, without a
 *     CUDA call that could hang or crash it;
 *   - read host memory through the parent's handle and a new one, bytes
 *     checked;
 *   - leave through exit(), so atexit handlers run (cuFile's driver must
 *     not be closed from the child).
 * The parent's device reads go on, bytes checked, during and after.
 * Skips (77) without a GPU.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
/* TSan refuses to start threads in a child of a multi-threaded process
 * unless told to: the children here read, so the pool starts its workers
 * again (as in test_fork.c). */
__attribute__((visibility("default"))) const char *__tsan_default_options(void)
{
	return "die_after_fork=0";
}
#endif

#define FSIZE  ((64u << 20) + 4321u)
#define SEED   61
#define NFORKS 8

static const char *path;
static gpufile_t *h;
static void *dev;
static atomic_int stop, parent_errors, device_reads;

static void *device_reader(void *arg)
{
	unsigned char *host = test_malloc(FSIZE);

	(void)arg;
	while (!atomic_load(&stop)) {
		ssize_t n = gpufile_pread(h, dev, FSIZE, 0);
		memset(host, 0, FSIZE);
		if (n != (ssize_t)FSIZE || gpufile_memcpy(host, dev, FSIZE) ||
		    test_mismatch(host, FSIZE, SEED, 0) >= 0) {
			fprintf(stderr, "parent device read: %zd %s\n", n,
			        n < 0 ? gpufile_errmsg() : "");
			atomic_fetch_add(&parent_errors, 1);
		}
		atomic_fetch_add(&device_reads, 1);
	}
	free(host);
	return NULL;
}

static void child_main(void)
{
	unsigned char *buf = test_malloc(FSIZE);
	gpufile_t *h2 = NULL;
	void *d = NULL;

	alarm(60);
	test_failures = 0;
	CHECK_EQ(gpufile_device_alloc(0, 1 << 20, &d), GPUFILE_ENOCUDA);
	CHECK_CONTAINS(gpufile_errmsg(), "fork");
	CHECK_EQ(gpufile_pread(h, buf, FSIZE, 0), FSIZE);
	CHECK_EQ(test_mismatch(buf, FSIZE, SEED, 0), -1);
	CHECK_EQ(gpufile_open(&h2, path, "r"), 0);
	if (h2) {
		memset(buf, 0, FSIZE);
		CHECK_EQ(gpufile_pread(h2, buf, FSIZE, 0), FSIZE);
		CHECK_EQ(test_mismatch(buf, FSIZE, SEED, 0), -1);
		CHECK_EQ(gpufile_close(h2), 0);
	}
	CHECK_EQ(gpufile_close(h), 0);
	free(buf);
	fflush(NULL);
	exit(test_failures ? 1 : 0);
}

int main(void)
{
	pthread_t reader;

	alarm(600);
	if (TEST_ASAN_FORK_UNSAFE) {
		fprintf(stderr,
		        "test_fork_gpu: skipped: this build's AddressSanitizer "
		        "does not lock its allocator across fork() (see "
		        "testlib.h), and the children's exit reports the "
		        "reader thread's buffer as leaked; the plain and TSan "
		        "builds run it\n");
		return TEST_SKIP;
	}
	if (gpufile_cuda_device_count() <= 0) {
		fprintf(stderr, "test_fork_gpu: no GPU; skipped\n");
		return TEST_SKIP;
	}
	path = test_path("fork-gpu");
	CHECK_EQ(test_make_file(path, FSIZE, SEED), 0);
	CHECK_EQ(gpufile_device_alloc(0, FSIZE, &dev), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!dev || !h)
		return test_finish("test_fork_gpu");
	pthread_create(&reader, NULL, device_reader, NULL);
	while (atomic_load(&device_reads) == 0)
		usleep(1000); /* CUDA, stagers and cuFile are set up */

	for (int i = 0; i < NFORKS; i++) {
		int status = 0;
		pid_t pid = fork();

		if (pid == 0)
			child_main();
		CHECK(pid > 0);
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
	/* The parent still reads into the GPU after the children. */
	{
		int before = atomic_load(&device_reads);
		while (atomic_load(&device_reads) < before + 2)
			usleep(1000);
	}
	atomic_store(&stop, 1);
	pthread_join(reader, NULL);
	CHECK_EQ(atomic_load(&parent_errors), 0);
	CHECK_EQ(gpufile_close(h), 0);
	CHECK_EQ(gpufile_device_free(dev), 0);
	return test_finish("test_fork_gpu");
}
