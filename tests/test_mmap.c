/*
 * Memory-mapped handles: reads of every part of a mapped range into host
 * memory (inline and split into tasks, sync and async) and into device
 * memory (the fake CUDA driver: through the bounce buffers), counted as the
 * "mmap" path; and the clear errors: write flags, ranges outside the file
 * or the map, a missing file, NULL handles, a file that shrank.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEV_SIZE  (16u << 20)
#define FILE_SIZE ((6u << 20) + 333)
#define SEED      23
#include "fake_cuda.h"

static gpufile_counter_t counter(gpufile_path_t p)
{
	gpufile_stats_t st;

	GPUFILE_INIT(st);
	gpufile_stats_self(&st);
	return st.path[p][0];
}

static void test_host(const char *path)
{
	const int64_t moff = 12345; /* not page aligned */
	const size_t msize = FILE_SIZE - 20000;
	char *buf = test_malloc(FILE_SIZE);
	gpufile_counter_t m0 = counter(GPUFILE_PATH_MMAP),
	                  h0 = counter(GPUFILE_PATH_HOST), m1;
	gpufile_mmap_t *m = NULL;
	gpufile_future_t *f = NULL;
	int64_t off;
	size_t size;

	CHECK_EQ(gpufile_set_task_size(1u << 20), 0);
	CHECK_EQ(gpufile_mmap_open(&m, path, "r", moff, msize), 0);
	if (!m)
		return;
	CHECK_EQ(gpufile_mmap_file_size(m), FILE_SIZE);
	CHECK_EQ(gpufile_mmap_range(m, &off, &size), 0);
	CHECK_EQ(off, moff);
	CHECK_EQ(size, msize);

	/* The whole map: several tasks. */
	CHECK_EQ(gpufile_mmap_pread(m, buf, msize, moff), (long long)msize);
	CHECK_EQ(test_mismatch(buf, msize, SEED, (uint64_t)moff), -1);
	/* A piece in the middle, across a task edge, and the last byte. */
	memset(buf, 0, 5000);
	CHECK_EQ(gpufile_mmap_pread(m, buf, 5000, (1 << 20) - 100), 5000);
	CHECK_EQ(test_mismatch(buf, 5000, SEED, (1 << 20) - 100), -1);
	CHECK_EQ(gpufile_mmap_pread(m, buf, 1, moff + (int64_t)msize - 1), 1);
	CHECK_EQ(test_mismatch(buf, 1, SEED, moff + msize - 1), -1);
	CHECK_EQ(gpufile_mmap_pread(m, buf, 0, moff), 0);

	/* Async. */
	memset(buf, 0, FILE_SIZE);
	CHECK_EQ(gpufile_mmap_pread_async(m, buf, 3u << 20, moff + 7, &f), 0);
	CHECK_EQ(gpufile_future_wait(f), 3u << 20);
	gpufile_future_free(f);
	CHECK_EQ(test_mismatch(buf, 3u << 20, SEED, (uint64_t)moff + 7), -1);

	/* Counted as mmap, not host: 5 requests (the empty one too). */
	m1 = counter(GPUFILE_PATH_MMAP);
	CHECK_EQ(m1.ops - m0.ops, 5);
	CHECK_EQ(m1.bytes - m0.bytes, msize + 5000 + 1 + (3u << 20));
	CHECK(m1.tasks - m0.tasks >= 6 + 1 + 1 + 3);
	CHECK_EQ(counter(GPUFILE_PATH_HOST).ops, h0.ops);

	/* Outside the mapped range: before, after, across its end. */
	CHECK_EQ(gpufile_mmap_pread(m, buf, 10, moff - 1), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "outside the mapped range");
	CHECK_CONTAINS(gpufile_errmsg(), "map.bin");
	CHECK_EQ(gpufile_mmap_pread(m, buf, 2, moff + (int64_t)msize - 1),
	         -EINVAL);
	CHECK_EQ(gpufile_mmap_pread(m, buf, 1, moff + (int64_t)msize), -EINVAL);
	CHECK_EQ(gpufile_mmap_pread(m, buf, SIZE_MAX, moff), -EINVAL);
	CHECK_EQ(gpufile_mmap_pread(m, NULL, 10, moff), -EFAULT);
	CHECK_EQ(gpufile_mmap_pread_async(m, buf, 1, 0, &f), -EINVAL);
	CHECK(f == NULL);
	CHECK_EQ(gpufile_mmap_close(m), 0);

	/* size 0 maps to the end; offset at the end maps nothing. */
	CHECK_EQ(gpufile_mmap_open(&m, path, "r", 4096, 0), 0);
	CHECK_EQ(gpufile_mmap_range(m, &off, &size), 0);
	CHECK_EQ(size, FILE_SIZE - 4096);
	CHECK_EQ(gpufile_mmap_pread(m, buf, size, 4096), (long long)size);
	CHECK_EQ(test_mismatch(buf, size, SEED, 4096), -1);
	CHECK_EQ(gpufile_mmap_close(m), 0);
	CHECK_EQ(gpufile_mmap_open(&m, path, "r", FILE_SIZE, 0), 0);
	CHECK_EQ(gpufile_mmap_pread(m, buf, 0, FILE_SIZE), 0);
	CHECK_EQ(gpufile_mmap_pread(m, buf, 1, FILE_SIZE), -EINVAL);
	CHECK_EQ(gpufile_mmap_close(m), 0);
	gpufile_config_reset();
	free(buf);
}

static void test_open_errors(const char *path)
{
	static const char *const bad[] = {"w", "r+", "a", "w+", "", "rw"};
	gpufile_mmap_t *m = (gpufile_mmap_t *)1;
	char reason[512];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char want[16];

		CHECK_EQ(gpufile_mmap_open(&m, path, bad[i], 0, 0),
		         GPUFILE_EFLAGS);
		CHECK(m == NULL);
		snprintf(want, sizeof(want), "flags \"%s\"", bad[i]);
		CHECK_CONTAINS(gpufile_errmsg(), want);
	}
	CHECK_EQ(gpufile_mmap_open(&m, path, NULL, 0, 0), GPUFILE_EFLAGS);
	/* Not regular files: a clear error, and no wait for a FIFO writer. */
	CHECK_EQ(mkfifo(test_path("fifo"), 0600), 0);
	CHECK_EQ(gpufile_mmap_open(&m, test_path("fifo"), "r", 0, 0), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "not a regular file");
	CHECK_EQ(gpufile_mmap_open(&m, test_dir(), "r", 0, 0), -EINVAL);
	CHECK_EQ(gpufile_mmap_open(&m, test_path("absent.bin"), "r", 0, 0),
	         -ENOENT);
	CHECK_CONTAINS(gpufile_errmsg(), "absent.bin");
	CHECK_EQ(gpufile_mmap_open(&m, path, "r", FILE_SIZE + 1, 0), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "map.bin");
	CHECK_EQ(gpufile_mmap_open(&m, path, "r", 10, FILE_SIZE), -EINVAL);
	CHECK_EQ(gpufile_mmap_open(&m, path, "r", -1, 0), -EINVAL);
	/* A URL is no file to map; its secrets stay out of the message. */
	CHECK_EQ(gpufile_mmap_open(&m,
	                           "http://u:hunter2@127.0.0.1:9/o.bin"
	                           "?X-Amz-Signature=SECRETSIG",
	                           "r", 0, 0),
	         -ENOTSUP);
	CHECK(m == NULL);
	CHECK_CONTAINS(gpufile_errmsg(), "http://127.0.0.1:9/o.bin?<query");
	CHECK(strstr(gpufile_errmsg(), "hunter2") == NULL);
	CHECK(strstr(gpufile_errmsg(), "SECRETSIG") == NULL);
	CHECK_EQ(gpufile_mmap_open(NULL, path, "r", 0, 0), -EINVAL);
	CHECK_EQ(gpufile_mmap_close(NULL), 0);
	CHECK_EQ(gpufile_mmap_pread(NULL, reason, 1, 0), -EINVAL);
	CHECK_EQ(gpufile_mmap_file_size(NULL), -EINVAL);
	CHECK_EQ(gpufile_mmap_path_info(NULL, reason, sizeof(reason)), -EINVAL);
	CHECK_EQ(gpufile_mmap_open(&m, path, "r", 0, 0), 0);
	CHECK_EQ(gpufile_mmap_path_info(m, reason, sizeof(reason)),
	         GPUFILE_PATH_MMAP);
	CHECK_CONTAINS(reason, "bounce-buffer pipeline");
	CHECK_EQ(gpufile_mmap_close(m), 0);
	CHECK(strcmp(gpufile_path_name(GPUFILE_PATH_MMAP), "mmap") == 0);
}

/* Device memory through the fake driver: bytes right, counted as mmap,
 * and a file that shrank after the map is -EIO, not a short count. */
static void test_device(const char *path)
{
	const char *spath = test_path("shrink.bin");
	gpufile_counter_t m0, m1;
	gpufile_mmap_t *m = NULL;
	gpufile_future_t *f = NULL;

	if (fake_install()) {
		test_failures++;
		return;
	}
	CHECK_EQ(gpufile_set_task_size(1u << 20), 0);
	m0 = counter(GPUFILE_PATH_MMAP);
	CHECK_EQ(gpufile_mmap_open(&m, path, "r", 0, 0), 0);
	memset(dev_base, 0, DEV_SIZE);
	CHECK_EQ(gpufile_mmap_pread(m, dev_base, FILE_SIZE, 0), FILE_SIZE);
	CHECK_EQ(test_mismatch(dev_base, FILE_SIZE, SEED, 0), -1);
	memset(dev_base, 0, DEV_SIZE);
	CHECK_EQ(gpufile_mmap_pread_async(m, dev_base + 1, 1u << 20, 4095, &f),
	         0);
	CHECK_EQ(gpufile_future_wait(f), 1u << 20);
	gpufile_future_free(f);
	CHECK_EQ(test_mismatch(dev_base + 1, 1u << 20, SEED, 4095), -1);
	CHECK_EQ(test_mismatch_byte(dev_base, 1, 0), -1);
	m1 = counter(GPUFILE_PATH_MMAP);
	CHECK_EQ(m1.ops - m0.ops, 2);
	CHECK_EQ(m1.bytes - m0.bytes, FILE_SIZE + (1u << 20));
	CHECK_EQ(gpufile_mmap_close(m), 0);

	CHECK_EQ(test_make_file(spath, 3u << 20, SEED), 0);
	CHECK_EQ(gpufile_mmap_open(&m, spath, "r", 0, 0), 0);
	CHECK_EQ(truncate(spath, 1u << 20), 0);
	CHECK_EQ(gpufile_mmap_pread(m, dev_base, 3u << 20, 0), -EIO);
	CHECK_CONTAINS(gpufile_errmsg(), "shrank");
	/* Asynchronous reads too, and the message names the end the file
	 * has now, also for a read that starts past it. */
	CHECK_EQ(gpufile_mmap_pread_async(m, dev_base, 3u << 20, 0, &f), 0);
	CHECK_EQ(gpufile_future_wait(f), -EIO);
	gpufile_future_free(f);
	CHECK_EQ(gpufile_mmap_pread(m, dev_base, 1u << 20, 2u << 20), -EIO);
	CHECK_CONTAINS(gpufile_errmsg(), "the file ends at 1048576");
	CHECK_EQ(gpufile_mmap_close(m), 0);
	/* Cut inside the last task only: its copy may be left running (a
	 * deferred task), whose short count must still be the error. */
	for (int sync = 0; sync < 2; sync++) {
		CHECK_EQ(test_make_file(spath, 3u << 20, SEED), 0);
		CHECK_EQ(gpufile_mmap_open(&m, spath, "r", 0, 0), 0);
		CHECK_EQ(truncate(spath, (5u << 20) / 2), 0);
		if (sync) {
			CHECK_EQ(gpufile_mmap_pread(m, dev_base, 3u << 20, 0),
			         -EIO);
		} else {
			CHECK_EQ(gpufile_mmap_pread_async(m, dev_base, 3u << 20,
			                                  0, &f),
			         0);
			CHECK_EQ(gpufile_future_wait(f), -EIO);
			gpufile_future_free(f);
		}
		CHECK_EQ(gpufile_mmap_close(m), 0);
	}

	gpufile_release();
	CHECK_EQ(bad_copies, 0);
	gpufile__cuda_override(NULL);
	gpufile_config_reset();
	free(dev_base);
}

/* A file cut under the map: host reads of the lost bytes are -EIO, never
 * zeros or a SIGBUS, whatever the task sizes (host_map_copy auto and on:
 * both install the guard); memory the caller cannot write is -EFAULT. */
static void test_host_shrink(void)
{
	const char *spath = test_path("cut.bin");
	const char *modes[] = {"auto", "on"};
	const size_t size = (3u << 20) + 8192;
	char *buf = test_malloc(size);
	char *ro =
	    mmap(NULL, 1u << 20, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	gpufile_mmap_t *m = NULL;

	CHECK_EQ(gpufile_set_task_size(1u << 20), 0);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(gpufile_config_set("host_map_copy", modes[i]), 0);
		/* Cut inside the last page: no fault, the tail reads as
		 * zeros; only the size after the copy tells. */
		CHECK_EQ(test_make_file(spath, size, SEED), 0);
		CHECK_EQ(gpufile_mmap_open(&m, spath, "r", 0, 0), 0);
		CHECK_EQ(truncate(spath, size - 100), 0);
		CHECK_EQ(gpufile_mmap_pread(m, buf, size, 0), -EIO);
		CHECK_CONTAINS(gpufile_errmsg(), "ends at 3153820");
		/* Whole pages lost, in a last task of 8 KiB and in a small
		 * read of its own (both copied by memcpy): a fault caught. */
		CHECK_EQ(truncate(spath, 3u << 20), 0);
		CHECK_EQ(gpufile_mmap_pread(m, buf, size, 0), -EIO);
		CHECK_CONTAINS(gpufile_errmsg(), "shrank");
		CHECK_EQ(gpufile_mmap_pread(m, buf, 4096, 3u << 20), -EIO);
		CHECK_CONTAINS(gpufile_errmsg(), "ends at 3145728");
		/* What the file still holds reads right. */
		CHECK_EQ(gpufile_mmap_pread(m, buf, 3u << 20, 0), 3u << 20);
		CHECK_EQ(test_mismatch(buf, 3u << 20, SEED, 0), -1);
		CHECK(ro != MAP_FAILED);
		CHECK_EQ(gpufile_mmap_pread(m, ro, 4096, 0), -EFAULT);
		CHECK_CONTAINS(gpufile_errmsg(), "cannot be written");
		CHECK_EQ(gpufile_mmap_close(m), 0);
	}
	gpufile_config_reset();
	munmap(ro, 1u << 20);
	free(buf);
}

int main(void)
{
	const char *path = test_path("map.bin");

	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED), 0);
	test_host(path);
	test_open_errors(path);
	test_host_shrink();
	test_device(path);
	test_cleanup();
	return test_finish("test_mmap");
}
