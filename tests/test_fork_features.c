/*
 * fork() while another thread is inside gpufile_features(): that call
 * dlopen()ed libcuda and libcufile on every call, outside any lock the
 * fork handlers hold, and glibc's loader is not safe to fork in the middle
 * of: children crashed in the loader (SIGSEGV in _dl_load_cache_lookup,
 * 12 to 23 of 1,000 here). A thread loops on gpufile_features() while the
 * main thread forks NFORKS times; each child calls gpufile_features() and
 * exits 0, and every child must. gpufile_features() now remembers what it
 * found per library, so after its first call it searches no more; the
 * second round makes it search on every call (a cufile_library setting of
 * a new missing name each time), to show that the searches themselves are
 * held off across fork(). An alarm in each child is a watchdog only: a
 * child that deadlocks is killed and counted, instead of hanging the test.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#define NFORKS 1000

static atomic_int stop, calls;

/* arg: whether each call names a new cufile library (a search each). */
static void *features_loop(void *arg)
{
	const int new_names = (int)(intptr_t)arg;
	char name[64];

	while (!atomic_load(&stop)) {
		if (new_names) {
			snprintf(name, sizeof(name),
			         "libgpufile-test-missing-%d.so",
			         atomic_load(&calls));
			gpufile_config_set("cufile_library", name);
		}
		(void)gpufile_features();
		atomic_fetch_add(&calls, 1);
	}
	return NULL;
}

/* NFORKS children forked while features_loop(new_names) runs. */
static void fork_round(int new_names)
{
	int crashed = 0, hung = 0, failed = 0;
	pthread_t t;

	atomic_store(&stop, 0);
	atomic_store(&calls, 0);
	CHECK_EQ(pthread_create(&t, NULL, features_loop,
	                        (void *)(intptr_t)new_names),
	         0);
	/* The thread is in its loop before the first fork. */
	while (atomic_load(&calls) == 0)
		sched_yield();
	for (int i = 0; i < NFORKS; i++) {
		int status = 0;
		pid_t pid = fork();

		if (pid == 0) {
			const char *words;

			alarm(10);
			words = gpufile_features();
			_exit(words ? 0 : 1);
		}
		CHECK(pid > 0);
		if (pid < 0 || waitpid(pid, &status, 0) != pid)
			break;
		if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
			hung++;
		else if (WIFSIGNALED(status))
			crashed++;
		else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed++;
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	fprintf(stderr,
	        "%s: %d forks: %d children crashed, %d hung, %d failed\n",
	        new_names ? "a search per call" : "the same libraries", NFORKS,
	        crashed, hung, failed);
	CHECK_EQ(crashed, 0);
	CHECK_EQ(hung, 0);
	CHECK_EQ(failed, 0);
	gpufile_config_reset();
}

int main(void)
{
	if (TEST_ASAN_FORK_UNSAFE) {
		fprintf(stderr, "ASan build: its allocator is not fork-safe "
		                "while another thread allocates; skipped\n");
		return TEST_SKIP;
	}
	fork_round(0);
	fork_round(1);
	return test_finish("test_fork_features");
}
