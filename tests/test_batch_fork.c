/*
 * A batch used across fork(): the child's copy has none of the parent's
 * threads, so without its own handling a submit in the child would wait
 * forever for workers that do not exist, and entries in flight at the
 * fork would never end. The child must be able to wait (those entries
 * end with -ECANCELED), submit again and get the right bytes; the parent
 * is untouched. A watchdog (alarm) turns a hang in the child into a
 * failure. Host buffers: a forked child of a process that used CUDA
 * cannot use CUDA.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_THREAD__)
/* The child starts the batch's workers again (see test_fork.c). */
__attribute__((visibility("default"))) const char *__tsan_default_options(void)
{
	return "die_after_fork=0";
}
#endif

#define SEED     33
#define FSIZE    ((2u << 20) + 77)
#define N        64
#define WATCHDOG 120

static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hook_cond = PTHREAD_COND_INITIALIZER;
static int64_t hold_offset = -1;
static int held, released;

/* Holds the pread at hold_offset until released (io_uring is refused so
 * that every read goes through the pread table). */
static ssize_t hook_pread(int fd, void *buf, size_t len, off_t off)
{
	if (off == hold_offset) {
		pthread_mutex_lock(&hook_lock);
		held = 1;
		pthread_cond_broadcast(&hook_cond);
		while (!released)
			pthread_cond_wait(&hook_cond, &hook_lock);
		pthread_mutex_unlock(&hook_lock);
	}
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
#endif

static char bufs[N][4096];

static void fill_entries(gpufile_batch_entry_t *e, gpufile_t *h, int shift)
{
	memset(bufs, 0, sizeof(bufs));
	for (int i = 0; i < N; i++)
		e[i] = (gpufile_batch_entry_t){
		    h, bufs[i], 4096, (int64_t)(i + shift) * 20000 + 11};
}

static int entries_ok(gpufile_batch_t *b, const gpufile_batch_entry_t *e,
                      int skip)
{
	for (int i = 0; i < N; i++) {
		if (i == skip)
			continue;
		if (gpufile_batch_result(b, (unsigned)i) != 4096 ||
		    test_mismatch(e[i].buf, 4096, SEED,
		                  (uint64_t)e[i].offset) != -1) {
			fprintf(stderr, "pid %d: entry %d wrong (%zd)\n",
			        (int)getpid(), i,
			        gpufile_batch_result(b, (unsigned)i));
			return 0;
		}
	}
	return 1;
}

/* Submits the N entries of h with entry 5 held inside its read, and
 * returns once it is. */
static void submit_held(gpufile_batch_t *b, gpufile_batch_entry_t *e,
                        gpufile_t *h)
{
	fill_entries(e, h, 0);
	pthread_mutex_lock(&hook_lock);
	held = released = 0;
	pthread_mutex_unlock(&hook_lock);
	hold_offset = e[5].offset;
	CHECK_EQ(gpufile_batch_submit(b, e, N), 0);
	pthread_mutex_lock(&hook_lock);
	while (!held)
		pthread_cond_wait(&hook_cond, &hook_lock);
	pthread_mutex_unlock(&hook_lock);
}

static void release_held(void)
{
	pthread_mutex_lock(&hook_lock);
	released = 1;
	pthread_cond_broadcast(&hook_cond);
	pthread_mutex_unlock(&hook_lock);
}

/* In the child: submit again, wait, check; exit 0 when right. */
static void child_resubmit(gpufile_batch_t *b, gpufile_t *h)
{
	gpufile_batch_entry_t e[N];

	fill_entries(e, h, 3);
	if (gpufile_batch_submit(b, e, N) != 0 ||
	    gpufile_batch_wait(b, -1) != N || !entries_ok(b, e, -1))
		_exit(1);
	gpufile_batch_free(b);
	/* Every entry's count on the handle is gone, none twice. */
	if (atomic_load(&h->inflight) != 0 || gpufile_close(h) != 0)
		_exit(5);
	_exit(0);
}

static int child_status(pid_t pid)
{
	int st = 0;

	if (waitpid(pid, &st, 0) != pid)
		return -1;
	if (WIFSIGNALED(st))
		fprintf(stderr, "child killed by signal %d (hung?)\n",
		        WTERMSIG(st));
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(void)
{
	if (TEST_ASAN_FORK_UNSAFE) {
		fprintf(
		    stderr,
		    "test_batch_fork: skipped: this build's AddressSanitizer "
		    "does not lock its allocator across fork() "
		    "(see testlib.h); the plain build runs it (TSan "
		    "cannot follow it either)\n");
		return TEST_SKIP;
	}
	const char *path = test_path("batch-fork");
	gpufile_batch_entry_t e[N];
	gpufile_batch_t *b = NULL;
	gpufile_t *h = NULL;
	char needle[512];
	pid_t pid;

#if defined(__SANITIZE_THREAD__)
	/* glibc hands a child the stacks of the parent's threads for reuse,
	 * so the child's new workers get the pthread ids of threads TSan
	 * still counts as alive ("dup thread with used id"): TSan cannot
	 * follow this test. The plain build runs it (the ASan build skips
	 * it too: testlib.h's TEST_ASAN_FORK_UNSAFE). */
	fprintf(stderr, "test_batch_fork: not under TSan (dup thread ids "
	                "after fork): skipped\n");
	(void)path;
	(void)e;
	(void)b;
	(void)h;
	(void)pid;
	(void)needle;
	return TEST_SKIP;
#endif
	CHECK_EQ(test_make_file(path, FSIZE, SEED), 0);
	gpufile__sys.pread = hook_pread;
#ifdef GPUFILE_HAVE_LIBURING
	gpufile__uring.queue_init = no_ring;
#endif
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	CHECK_EQ(gpufile_batch_create(&b, N), 0);

	/* 1. Fork after a completed batch: the child's batch works. */
	fill_entries(e, h, 0);
	CHECK_EQ(gpufile_batch_submit(b, e, N), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), N);
	CHECK(entries_ok(b, e, -1));
	pid = fork();
	if (pid == 0) {
		alarm(WATCHDOG);
		child_resubmit(b, h);
	}
	CHECK_EQ(child_status(pid), 0);

	/* 2. Fork while entry 5 is held inside its read: in the child the
	 * entry ends with -ECANCELED, the others done before the fork keep
	 * their results, and the batch can be used again. */
	submit_held(b, e, h);
	pid = fork();
	if (pid == 0) {
		alarm(WATCHDOG);
		hold_offset = -1;
		/* errmsg, the child's first call, sees the entry ended. */
		if (!gpufile_batch_errmsg(b, 5))
			_exit(3);
		if (gpufile_batch_wait(b, -1) != N ||
		    gpufile_batch_result(b, 5) != -ECANCELED ||
		    !gpufile_batch_errmsg(b, 5) ||
		    !strstr(gpufile_batch_errmsg(b, 5), "forked"))
			_exit(2);
		/* The message names the file and the offset. */
		snprintf(needle, sizeof(needle), "reading %s at offset %lld",
		         path, (long long)e[5].offset);
		if (!strstr(gpufile_batch_errmsg(b, 5), needle)) {
			fprintf(stderr, "child: \"%s\" lacks \"%s\"\n",
			        gpufile_batch_errmsg(b, 5), needle);
			_exit(4);
		}
		child_resubmit(b, h);
	}
	CHECK_EQ(child_status(pid), 0);
	release_held();
	/* The parent's batch was untouched by the child. */
	CHECK_EQ(gpufile_batch_wait(b, -1), N);
	CHECK(entries_ok(b, e, -1));

	/* 3. Fork while entry 5 is held, and the child's first call closes
	 * the handle: the entry in flight is the parent's to end, so the
	 * close must not wait for it (it used to hang until the watchdog:
	 * the child's copy of the batch was repaired only at its next batch
	 * call). The batch still says what happened to the entry. */
	submit_held(b, e, h);
	pid = fork();
	if (pid == 0) {
		alarm(WATCHDOG);
		hold_offset = -1;
		if (gpufile_close(h) != 0)
			_exit(6);
		if (gpufile_batch_wait(b, -1) != N ||
		    gpufile_batch_result(b, 5) != -ECANCELED)
			_exit(7);
		gpufile_batch_free(b);
		_exit(0);
	}
	CHECK_EQ(child_status(pid), 0);
	release_held();
	CHECK_EQ(gpufile_batch_wait(b, -1), N);
	CHECK(entries_ok(b, e, -1));

	gpufile_batch_free(b);
	CHECK_EQ(gpufile_close(h), 0);
	gpufile__sys_reset();
	gpufile__uring_reset();
	return test_finish("test_batch_fork");
}
