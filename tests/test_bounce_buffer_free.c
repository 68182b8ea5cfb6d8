/*
 * gpufile_bounce_buffer_free(): frees every pinned bounce buffer, stream
 * and event, returns exactly the pinned bytes freed, and leaves the worker
 * pool running; buffers that a request in flight uses are freed when it
 * ends, before the call returns. Without a GPU: the fake CUDA driver
 * counts pinned memory.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <unistd.h>

#define DEV_SIZE  (16u << 20)
#define FILE_SIZE ((8u << 20) + 77)
#define SEED      17
#include "fake_cuda.h"

static size_t live_pinned(void)
{
	size_t n;

	pthread_mutex_lock(&fake_lock);
	n = pinned_live;
	pthread_mutex_unlock(&fake_lock);
	return n;
}

static int live_objects(void)
{
	int n;

	pthread_mutex_lock(&fake_lock);
	n = pinned_count + streams_live + events_live;
	pthread_mutex_unlock(&fake_lock);
	return n;
}

static long allocs(void)
{
	long n;

	pthread_mutex_lock(&fake_lock);
	n = hostalloc_calls;
	pthread_mutex_unlock(&fake_lock);
	return n;
}

static int thread_count(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

int main(void)
{
	const char *path = test_path("bbf.bin");
	const size_t per_buf = (1u << 20) + GPUFILE_ALIGN;
	/* A stager's buffers (bounce_buffers: 2) are one allocation. */
	const size_t per_alloc = 2 * per_buf;
	gpufile_future_t *f = NULL;
	gpufile_t *h = NULL;
	size_t held, freed;
	int threads;
	long a0;

	if (fake_install())
		return 1;
	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED), 0);
	CHECK_EQ(gpufile_set_nthreads(4), 0);
	CHECK_EQ(gpufile_set_task_size(1u << 20), 0);
	CHECK_EQ(gpufile_set_bounce_buffer_size(1u << 20), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return test_finish("test_bounce_buffer_free");

	/* Nothing held yet. */
	CHECK_EQ(gpufile_bounce_buffer_free(), 0);

	CHECK_EQ(gpufile_pread(h, dev_base, FILE_SIZE, 0), FILE_SIZE);
	CHECK_EQ(test_mismatch(dev_base, FILE_SIZE, SEED, 0), -1);
	held = live_pinned();
	CHECK(held > 0);
	CHECK_EQ(held % per_buf, 0);
	threads = thread_count();
	CHECK(threads > 1); /* the pool's workers */

	freed = gpufile_bounce_buffer_free();
	CHECK_EQ(freed, held);
	CHECK_EQ(live_objects(), 0);       /* buffers, streams and events */
	CHECK_EQ(thread_count(), threads); /* the pool still runs */
	CHECK_EQ(gpufile_bounce_buffer_free(), 0);

	/* The next request allocates again and reads right. */
	memset(dev_base, 0, FILE_SIZE);
	CHECK_EQ(gpufile_pread(h, dev_base, FILE_SIZE, 0), FILE_SIZE);
	CHECK_EQ(test_mismatch(dev_base, FILE_SIZE, SEED, 0), -1);
	held = live_pinned();
	CHECK(held > 0);

	/* With a request in flight: whatever it holds at the call is freed
	 * once it ends, the rest by a second call; together every byte
	 * allocated since, and nothing stays pinned. */
	CHECK_EQ(gpufile_bounce_buffer_free(), held);
	a0 = allocs();
	memset(dev_base, 0, FILE_SIZE);
	CHECK_EQ(gpufile_pread_async(h, dev_base, FILE_SIZE, 0, &f), 0);
	freed = gpufile_bounce_buffer_free();
	CHECK_EQ(gpufile_future_wait(f), FILE_SIZE);
	gpufile_future_free(f);
	CHECK_EQ(test_mismatch(dev_base, FILE_SIZE, SEED, 0), -1);
	freed += gpufile_bounce_buffer_free();
	CHECK_EQ(freed, (size_t)(allocs() - a0) * per_alloc);
	CHECK_EQ(live_objects(), 0);

	CHECK_EQ(gpufile_close(h), 0);
	gpufile_release();
	gpufile__cuda_override(NULL);
	gpufile_config_reset();
	CHECK_EQ(bad_copies, 0);
	free(dev_base);
	test_cleanup();
	return test_finish("test_bounce_buffer_free");
}
