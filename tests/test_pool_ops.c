/*
 * The pool runs a request's tasks through the request's ops and knows
 * nothing of staging (issue 12 item 2), yet keeps the cross-task overlap:
 * a worker leaves a task's last copy to the GPU running while it reads its
 * next task, and the task ends only once that copy has finished.
 *
 * With the fake driver (tests/fake_cuda.h) a copy runs only when the
 * library synchronises with it, so the overlap is visible without timing:
 * at the first file read of each task but the first, the previous task's
 * last chunk must not be in "device" memory yet. At the end every byte
 * must be there, and the request must have ended only after its copies
 * (its result counts every byte).
 */
#define _GNU_SOURCE
#include "testlib.h"

#include "fake_cuda.h"

#include "gpufile.h"
#include "internal.h"

#include <string.h>

#define KiB    1024u
#define TASK   (256 * KiB)
#define CHUNK  (64 * KiB)
#define NTASKS 8

static unsigned char *want; /* the file's bytes */
static int boundaries, overlapped;
static ssize_t (*real_pread)(int, void *, size_t, off_t);

static ssize_t spy_pread(int fd, void *buf, size_t len, off_t off)
{
	if (off > 0 && off % TASK == 0) {
		const size_t last = (size_t)off - CHUNK;

		pthread_mutex_lock(&fake_lock);
		boundaries++;
		if (memcmp(dev_base + last, want + last, CHUNK) != 0)
			overlapped++;
		pthread_mutex_unlock(&fake_lock);
	}
	return real_pread(fd, buf, len, off);
}

static void read_once(const char *file, int nthreads)
{
	char n[16];
	gpufile_t *h;

	snprintf(n, sizeof(n), "%d", nthreads);
	memset(dev_base, 0xAA, NTASKS * TASK);
	boundaries = overlapped = 0;
	CHECK_EQ(gpufile_config_set("nthreads", n), 0);
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread(h, dev_base, NTASKS * TASK, 0),
	         (ssize_t)(NTASKS * TASK));
	CHECK(memcmp(dev_base, want, NTASKS * TASK) == 0);
	CHECK_EQ(gpufile_close(h), 0);
}

int main(void)
{
	const char *file = test_path("pool_ops.bin");
	FILE *f;

	if (test_make_file(file, NTASKS * TASK, 5))
		return 1;
	want = malloc(NTASKS * TASK);
	f = fopen(file, "rb");
	if (!want || !f || fread(want, 1, NTASKS * TASK, f) != NTASKS * TASK)
		return 1;
	fclose(f);
	dev_base = aligned_alloc(4096, DEV_SIZE);
	if (!dev_base)
		return 1;
	gpufile__cuda_override(&fake);
	CHECK_EQ(gpufile_config_set("compat_mode", "on"), 0);
	CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);
	CHECK_EQ(gpufile_config_set("task_size", "256KiB"), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffer_size", "64KiB"), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffers", "2"), 0);
	real_pread = gpufile__sys.pread;
	gpufile__sys.pread = spy_pread;

	/* One worker takes every task in order: each task boundary must
	 * find the previous task's last copy still pending. */
	read_once(file, 1);
	CHECK_EQ(boundaries, NTASKS - 1);
	CHECK_EQ(overlapped, NTASKS - 1);
	/* Several workers: the bytes and the result stay right. */
	read_once(file, 4);
	read_once(file, 1);
	CHECK_EQ(overlapped, NTASKS - 1);

	gpufile__sys_reset();
	gpufile_release();
	gpufile_config_reset();
	gpufile__cuda_override(NULL);
	free(dev_base);
	free(want);
	test_cleanup();
	return test_finish("test_pool_ops");
}
