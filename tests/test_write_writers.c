/*
 * How many threads write a blocking gpufile_pwrite from host memory
 * (file.c, one_writer): a buffered write runs every task in the calling
 * thread, one at a time (buffered writes into one file take turns on its
 * inode lock: more writers only wait on it); an O_DIRECT write
 * (direct_io=on, where the file system takes it) is the workers' too.
 * The tasks' threads are seen through the pool's task hook; nothing here
 * depends on timing.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TASK   (64u << 10)
#define NTASKS 64
#define SIZE   (TASK * NTASKS)

static pthread_t caller;
static atomic_int tasks, off_caller;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t worker_ran = PTHREAD_COND_INITIALIZER;
static long hold_ms; /* the caller's first task waits for a worker's */
static int caller_gave_up;

static void record(struct gpufile__request *r, int64_t off)
{
	(void)r;
	(void)off;
	atomic_fetch_add(&tasks, 1);
	pthread_mutex_lock(&lock);
	if (!pthread_equal(pthread_self(), caller)) {
		atomic_fetch_add(&off_caller, 1);
		pthread_cond_broadcast(&worker_ran);
	} else if (hold_ms && !caller_gave_up) {
		/* The wait ends when a worker runs a task, which it does at
		 * once where the request is the pool's; the deadline ends it
		 * where no worker ever would (once: later tasks do not wait).
		 * What the test asserts does not depend on how long it was. */
		struct timespec deadline;

		clock_gettime(CLOCK_REALTIME, &deadline);
		deadline.tv_sec += hold_ms / 1000;
		deadline.tv_nsec += hold_ms % 1000 * 1000000L;
		if (deadline.tv_nsec >= 1000000000L) {
			deadline.tv_sec++;
			deadline.tv_nsec -= 1000000000L;
		}
		while (!atomic_load(&off_caller) && !caller_gave_up)
			if (pthread_cond_timedwait(&worker_ran, &lock,
			                           &deadline) == ETIMEDOUT)
				caller_gave_up = 1;
	}
	pthread_mutex_unlock(&lock);
}

static void reset(long hold)
{
	atomic_store(&tasks, 0);
	atomic_store(&off_caller, 0);
	hold_ms = hold;
	caller_gave_up = 0;
	caller = pthread_self();
}

static void check_file(const char *path, uint64_t seed)
{
	size_t len = 0;
	unsigned char *back = test_read_file(path, &len);

	CHECK_EQ(len, (size_t)SIZE);
	if (back)
		CHECK_EQ(test_mismatch(back, len, seed, 0), -1);
	free(back);
}

/* A buffered write of 64 tasks with 4 workers: all 64 run in the calling
 * thread. Its first task gives a worker 2 s to run one (where the write
 * was the pool's, one would). */
static void test_buffered_one_writer(void)
{
	const char *path = test_path("writers_buffered.bin");
	unsigned char *buf = test_malloc(SIZE);
	gpufile_t *h = NULL;

	test_fill(buf, SIZE, 11, 0);
	CHECK_EQ(gpufile_config_set("direct_io", "auto"), 0);
	CHECK_EQ(gpufile_open(&h, path, "w"), 0);
	reset(2000);
	gpufile__pool_task_hook = record;
	CHECK_EQ(gpufile_pwrite(h, buf, SIZE, 0), (ssize_t)SIZE);
	gpufile__pool_task_hook = NULL;
	CHECK_EQ(atomic_load(&tasks), NTASKS);
	CHECK_EQ(atomic_load(&off_caller), 0);
	CHECK_EQ(gpufile_close(h), 0);
	check_file(path, 11);
	free(buf);
}

/* An O_DIRECT write of 64 tasks: the workers write too (the caller's
 * first task waits until one has). Skipped where the file system refuses
 * O_DIRECT (the write then went through the page cache, one writer). */
static void test_direct_parallel(void)
{
	const char *path = test_path("writers_direct.bin");
	unsigned char *buf = test_malloc(SIZE);
	gpufile_t *h = NULL;

	test_fill(buf, SIZE, 12, 0);
	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_open(&h, path, "w"), 0);
	reset(120000);
	gpufile__pool_task_hook = record;
	CHECK_EQ(gpufile_pwrite(h, buf, SIZE, 0), (ssize_t)SIZE);
	gpufile__pool_task_hook = NULL;
	CHECK_EQ(atomic_load(&tasks), NTASKS);
	if (atomic_load(&h->direct_refused)) {
		fprintf(stderr,
		        "test_write_writers: O_DIRECT refused in %s: "
		        "the parallel case is not checked\n",
		        test_dir());
	} else {
		CHECK_EQ(caller_gave_up, 0);
		CHECK(atomic_load(&off_caller) > 0);
	}
	CHECK_EQ(gpufile_close(h), 0);
	check_file(path, 12);
	free(buf);
	gpufile_config_set("direct_io", "auto");
}

static int (*real_open)(const char *path, int flags, mode_t mode);

static int open_no_direct(const char *path, int flags, mode_t mode)
{
	if (flags & O_DIRECT) {
		errno = EINVAL; /* as a file system without O_DIRECT says */
		return -1;
	}
	return real_open(path, flags, mode);
}

/* direct_io=on where the O_DIRECT descriptor cannot be opened: once the
 * first write has found that out (its tasks went through the page cache),
 * the next buffered write is one writer's again. */
static void test_direct_unavailable(void)
{
	const char *path = test_path("writers_nodirect.bin");
	unsigned char *buf = test_malloc(SIZE);
	gpufile_t *h = NULL;

	test_fill(buf, SIZE, 13, 0);
	real_open = gpufile__sys.open;
	gpufile__sys.open = open_no_direct;
	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_open(&h, path, "w"), 0);
	CHECK_EQ(gpufile_pwrite(h, buf, SIZE, 0), (ssize_t)SIZE);
	CHECK(!gpufile__direct_fd_possible(h));
	reset(2000);
	gpufile__pool_task_hook = record;
	CHECK_EQ(gpufile_pwrite(h, buf, SIZE, 0), (ssize_t)SIZE);
	gpufile__pool_task_hook = NULL;
	CHECK_EQ(atomic_load(&tasks), NTASKS);
	CHECK_EQ(atomic_load(&off_caller), 0);
	CHECK_EQ(gpufile_close(h), 0);
	gpufile__sys.open = real_open;
	check_file(path, 13);
	free(buf);
	gpufile_config_set("direct_io", "auto");
}

int main(void)
{
	alarm(300); /* a hang fails the test */
	CHECK_EQ(gpufile_set_nthreads(4), 0);
	CHECK_EQ(gpufile_set_task_size(TASK), 0);
	test_buffered_one_writer();
	test_direct_parallel();
	test_direct_unavailable();
	gpufile_config_reset();
	gpufile_release();
	return test_finish("test_write_writers");
}
