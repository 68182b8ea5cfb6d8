/*
 * gpufile_pread_gather: runs packed in order whatever their offsets
 * (columns of a matrix, reversed, repeated, crossing task edges), at one
 * and at several threads, copied from a map and preaded; counted as one
 * host request; every bad argument and a file that ends inside a run or
 * fails a read, each named.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#define SEED      17
#define FILE_SIZE ((size_t)4 << 20)

static gpufile_counter_t host_reads(void)
{
	return test_stats_self().path[GPUFILE_PATH_HOST][0];
}

/* The bytes run i should hold: the file's pattern at offsets[i]. */
static void check_packed(const char *out, size_t run, size_t n,
                         const int64_t *offsets, const char *what)
{
	for (size_t i = 0; i < n; i++) {
		long long bad = test_mismatch(out + i * run, run, SEED,
		                              (uint64_t)offsets[i]);
		if (bad >= 0) {
			fprintf(stderr,
			        "%s: run %zu (offset %lld): byte %lld "
			        "differs\n",
			        what, i, (long long)offsets[i], bad);
			test_failures++;
			return;
		}
	}
}

static void gather_and_check(gpufile_t *h, size_t run, size_t n,
                             const int64_t *offsets, const char *what)
{
	char *out = test_malloc(run * n + 1);
	const uint64_t mapped = test_stats_self().map_copy_bytes;
	gpufile_counter_t before = host_reads(), after;

	out[run * n] = 0x5A; /* nothing written past the packed result */
	CHECK_EQ(gpufile_pread_gather(h, out, run, n, offsets),
	         (long long)(run * n));
	check_packed(out, run, n, offsets, what);
	CHECK_EQ((unsigned char)out[run * n], 0x5A);
	after = host_reads();
	CHECK_EQ(after.ops - before.ops, 1);
	CHECK_EQ(after.bytes - before.bytes, (long long)(run * n));
	CHECK_EQ(after.errors - before.errors, 0);
	/* Copied from the map, where the read made one. */
	CHECK_EQ(test_stats_self().map_copy_bytes - mapped,
	         gpufile__gather_map ? (long long)(run * n) : 0);
	free(out);
}

static void test_patterns(gpufile_t *h)
{
	enum { ROWS = 1024, ROW = 4096 };
	int64_t *off = test_malloc(sizeof(*off) * 70000);

	/* A block of 512 columns of a 1024 x 4096-byte matrix. */
	for (int i = 0; i < ROWS; i++)
		off[i] = (int64_t)i * ROW + 1024;
	gather_and_check(h, 512, ROWS, off, "columns");
	/* 1001 runs of 3000 bytes, reversed: at 4 threads the task edges
	 * (every 750,750 bytes) fall inside runs. */
	for (int i = 0; i < 1001; i++)
		off[i] = (int64_t)(1000 - i) * 4000 + 7;
	gather_and_check(h, 3000, 1001, off, "reversed");
	/* The same run again and again, and overlapping ones. */
	for (int i = 0; i < 300; i++)
		off[i] = i % 2 ? 100 : 100 + (int64_t)i;
	gather_and_check(h, 777, 300, off, "repeated");
	/* Many short runs: 65,536 of 16 bytes. */
	for (int i = 0; i < 65536; i++)
		off[i] =
		    (int64_t)((uint64_t)i * 2654435761u % (FILE_SIZE - 16));
	gather_and_check(h, 16, 65536, off, "short");
	/* One run, the whole file; and the last byte. */
	off[0] = 0;
	gather_and_check(h, FILE_SIZE, 1, off, "whole");
	off[0] = FILE_SIZE - 1;
	gather_and_check(h, 1, 1, off, "last byte");
	free(off);
}

static int fail_at_fd = -1;
static ssize_t failing_pread(int fd, void *buf, size_t len, off_t off)
{
	if (fd == fail_at_fd && off >= 3 * 4096 && off < 4 * 4096) {
		errno = EIO;
		return -1;
	}
	return pread(fd, buf, len, off);
}

static void test_errors(gpufile_t *h, const char *path)
{
	int64_t off[8] = {0, 4096, 8192, 12288, 16384, 20480, 24576, 28672};
	char buf[8 * 4096], canary[sizeof(buf)];
	gpufile_t *w = NULL;

	CHECK_EQ(gpufile_pread_gather(NULL, buf, 16, 1, off), -EINVAL);
	CHECK_EQ(gpufile_pread_gather(h, NULL, 16, 1, off), -EFAULT);
	CHECK_CONTAINS(gpufile_errmsg(), path);
	CHECK_EQ(gpufile_pread_gather(h, buf, 16, 1, NULL), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "offsets is NULL");
	/* Nothing to read: 0, with NULL pointers allowed. */
	CHECK_EQ(gpufile_pread_gather(h, NULL, 16, 0, NULL), 0);
	CHECK_EQ(gpufile_pread_gather(h, NULL, 0, 5, NULL), 0);
	/* A size that overflows, a negative offset, a run past INT64_MAX. */
	CHECK_EQ(gpufile_pread_gather(h, buf, SIZE_MAX / 2, 3, off), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "out of range");
	off[2] = -1;
	CHECK_EQ(gpufile_pread_gather(h, buf, 16, 3, off), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "run 2: offset -1");
	off[2] = INT64_MAX - 8;
	CHECK_EQ(gpufile_pread_gather(h, buf, 16, 3, off), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "run 2");
	off[2] = 8192;

	/* A run the file ends inside, and one wholly past the end: -EIO
	 * naming the run and where the file ends, never a short count. */
	off[5] = FILE_SIZE - 100;
	CHECK_EQ(gpufile_pread_gather(h, buf, 4096, 8, off), -EIO);
	CHECK_CONTAINS(gpufile_errmsg(), "run 5 (4096 bytes at offset");
	CHECK_CONTAINS(gpufile_errmsg(), "the file ends at 4194304");
	CHECK_CONTAINS(gpufile_errmsg(), "inside the run");
	off[5] = FILE_SIZE + 4096;
	CHECK_EQ(gpufile_pread_gather(h, buf, 4096, 8, off), -EIO);
	CHECK_CONTAINS(gpufile_errmsg(), "run 5");
	CHECK_CONTAINS(gpufile_errmsg(), "the file ends at 4194304, before");
	off[5] = 20480;

	/* A read error of run 3 is the call's, with the run named; the
	 * runs before it are in place. With the map (the file holds every
	 * run), no pread is made and the same call succeeds. */
	fail_at_fd = gpufile_fd(h, 0);
	CHECK(fail_at_fd >= 0);
	gpufile__sys.pread = failing_pread;
	gpufile__gather_map = 0;
	memset(buf, 0, sizeof(buf));
	CHECK_EQ(gpufile_pread_gather(h, buf, 4096, 8, off), -EIO);
	CHECK_CONTAINS(gpufile_errmsg(), "run 3 (4096 bytes at offset 12288)");
	CHECK_CONTAINS(gpufile_errmsg(), path);
	CHECK_EQ(test_mismatch(buf, 3 * 4096, SEED, 0), -1);
	gpufile__gather_map = 1;
	CHECK_EQ(gpufile_pread_gather(h, buf, 4096, 8, off), 8 * 4096);
	CHECK_EQ(test_mismatch(buf, sizeof(buf), SEED, 0), -1);
	gpufile__sys_reset();

	/* A handle opened for writing only. */
	memset(canary, 0x33, sizeof(canary));
	memcpy(buf, canary, sizeof(buf));
	CHECK_EQ(gpufile_open(&w, test_path("w.bin"), "w"), 0);
	CHECK_EQ(gpufile_pread_gather(w, buf, 16, 1, off), -EBADF);
	CHECK_CONTAINS(gpufile_errmsg(), "not opened for reading");
	CHECK(memcmp(buf, canary, sizeof(buf)) == 0);
	gpufile_close(w);
}

int main(void)
{
	const char *path = test_path("gather.bin");
	gpufile_t *h = NULL;

	if (test_make_file(path, FILE_SIZE, SEED) != 0) {
		fprintf(stderr, "cannot write %s\n", path);
		return 1;
	}
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return test_finish("test_gather");
	/* One thread, then several, from the map and with pread: the same
	 * bytes, one request each. */
	for (int map = 1; map >= 0; map--) {
		gpufile__gather_map = map;
		CHECK_EQ(gpufile_set_nthreads(1), 0);
		test_patterns(h);
		CHECK_EQ(gpufile_set_nthreads(4), 0);
		test_patterns(h);
	}
	gpufile__gather_map = 1;
	test_errors(h, path);
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_release();
	test_cleanup();
	return test_finish("test_gather");
}
