/*
 * Parallel writes read back byte for byte, on every backend (direct_io
 * off, on, auto), on the test file system and on tmpfs (where O_DIRECT is
 * refused and the page cache must be used, with the reason recorded); a
 * 1 GiB round trip; and the semantics of the open modes r, r+, w, w+, a.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const backends[] = {"off", "on", "auto"};
static char shm_dir[256];

static const char *shm_path(const char *name)
{
	static char path[512];

	snprintf(path, sizeof(path), "%s/%s", shm_dir, name);
	return path;
}

struct shape {
	int64_t off;
	size_t size;
	size_t buf_misalign; /* bytes added to the buffer address */
};

static const struct shape shapes[] = {
    {0, 1, 0},
    {0, 4096, 0},
    {1, 4095, 1},
    {4095, 8193, 3},
    {0, (3 << 20) + 17, 0},
    {4096, 1 << 20, 0},
    {12345, (9 << 20) + 1, 5},
    {(4 << 20) - 1, (4 << 20) + 2, 0},
    {(1 << 20) + 512, 5 << 20, 512},
};

/* An open() that refuses O_DIRECT the way tmpfs did before Linux 6.6. */
static int open_refusing_direct(const char *path, int flags, mode_t mode)
{
	if (flags & O_DIRECT) {
		errno = EINVAL;
		return -1;
	}
	return open(path, flags, mode);
}

/* Writes every shape with gpufile_pwrite (after a file of random-ish
 * content), reads it back with gpufile_pread, and checks both the data
 * read and the file's bytes. */
static void roundtrip(const char *path, const char *backend, size_t ts)
{
	const size_t max = (12u << 20) + 4096;
	unsigned char *src = test_malloc(max + 64);
	unsigned char *dst = test_malloc(max + 64);
	gpufile_t *h = NULL;
	int rc;

	CHECK_EQ(gpufile_config_set("direct_io", backend), 0);
	CHECK_EQ(gpufile_set_task_size(ts), 0);
	rc = gpufile_open(&h, path, "w+");
	CHECK_EQ(rc, 0);
	if (rc) {
		fprintf(stderr, "  open %s: %s\n", path, gpufile_errmsg());
		goto out;
	}
	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		const struct shape *s = &shapes[i];
		unsigned char *sb = src + s->buf_misalign;
		unsigned char *db = dst + s->buf_misalign;
		const uint64_t seed = 1000 + i;
		unsigned char *data;
		size_t len = 0;
		ssize_t n;

		CHECK_EQ(truncate(path, 0), 0);
		test_fill(sb, s->size, seed, (uint64_t)s->off);
		n = gpufile_pwrite(h, sb, s->size, s->off);
		CHECK_EQ(n, (ssize_t)s->size);
		if (n != (ssize_t)s->size)
			fprintf(stderr, "  %s %s write %zu@%lld: %s\n", path,
			        backend, s->size, (long long)s->off,
			        gpufile_errmsg());
		CHECK_EQ(gpufile_size(h), s->off + (int64_t)s->size);

		memset(db, 0xEE, s->size + 32);
		n = gpufile_pread(h, db, s->size, s->off);
		CHECK_EQ(n, (ssize_t)s->size);
		CHECK_EQ(test_mismatch(db, s->size, seed, (uint64_t)s->off),
		         -1);
		CHECK_EQ(test_mismatch_byte(db + s->size, 32, 0xEE), -1);

		/* The same bytes through a fresh handle (after an fsync, so an
		 * O_DIRECT read sees what buffered writes left). */
		CHECK_EQ(gpufile_sync(h), 0);
		{
			gpufile_t *h2 = NULL;
			CHECK_EQ(gpufile_open(&h2, path, "r"), 0);
			if (h2) {
				memset(db, 0xEE, s->size);
				CHECK_EQ(gpufile_pread(h2, db, s->size, s->off),
				         (ssize_t)s->size);
				CHECK_EQ(test_mismatch(db, s->size, seed,
				                       (uint64_t)s->off),
				         -1);
				CHECK_EQ(gpufile_close(h2), 0);
			}
		}

		data = test_read_file(path, &len);
		CHECK(data != NULL);
		if (data) {
			CHECK_EQ(len, (size_t)s->off + s->size);
			CHECK_EQ(test_mismatch_byte(data, (size_t)s->off, 0),
			         -1);
			CHECK_EQ(test_mismatch(data + s->off, s->size, seed,
			                       (uint64_t)s->off),
			         -1);
			free(data);
		}
	}
	CHECK_EQ(gpufile_close(h), 0);
out:
	free(src);
	free(dst);
}

/* Whether this kernel's file system under dir accepts O_DIRECT opens
 * (tmpfs does since Linux 6.6). */
static int accepts_o_direct(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0644);

	if (fd < 0)
		return 0;
	close(fd);
	unlink(path);
	return 1;
}

/* tmpfs: the handle must work whether or not O_DIRECT is accepted, and
 * when it is refused, say why and count it. */
static void tmpfs_reason(int refuse)
{
	const int accepts = !refuse && accepts_o_direct(shm_path("probe"));

	for (size_t b = 0; b < sizeof(backends) / sizeof(backends[0]); b++) {
		gpufile_stats_t before, after;
		gpufile_path_t p = GPUFILE_PATH_COUNT;
		char reason[512] = "";
		unsigned char buf[3 * 4096 + 5];
		gpufile_t *h = NULL;

		CHECK_EQ(gpufile_config_set("direct_io", backends[b]), 0);
		GPUFILE_INIT(before);
		gpufile_stats_self(&before);
		if (refuse)
			gpufile__sys.open = open_refusing_direct;
		CHECK_EQ(gpufile_open(&h, shm_path("reason"), "w+"), 0);
		if (!h) {
			gpufile__sys_reset();
			continue;
		}
		/* The O_DIRECT descriptor is opened at its first use: here,
		 * by gpufile_path_info. */
		CHECK_EQ(gpufile_path_info(h, &p, reason, sizeof(reason)), 0);
		gpufile__sys_reset();
		GPUFILE_INIT(after);
		gpufile_stats_self(&after);
		CHECK(p < GPUFILE_PATH_COUNT);
		if (strcmp(backends[b], "off") == 0) {
			CHECK_EQ(after.direct_io_fallbacks -
			             before.direct_io_fallbacks,
			         0);
			CHECK_CONTAINS(reason, "direct_io=off");
		} else if (accepts) {
			CHECK_EQ(after.direct_io_fallbacks -
			             before.direct_io_fallbacks,
			         0);
			CHECK_CONTAINS(reason, "O_DIRECT available");
		} else {
			CHECK_EQ(after.direct_io_fallbacks -
			             before.direct_io_fallbacks,
			         1);
			CHECK_CONTAINS(reason, "O_DIRECT refused");
			CHECK_CONTAINS(reason, "tmpfs");
		}
		/* And the handle works. */
		test_fill(buf, sizeof(buf), 5, 1);
		CHECK_EQ(gpufile_pwrite(h, buf, sizeof(buf), 1),
		         (ssize_t)sizeof(buf));
		memset(buf, 0, sizeof(buf));
		CHECK_EQ(gpufile_pread(h, buf, sizeof(buf), 1),
		         (ssize_t)sizeof(buf));
		CHECK_EQ(test_mismatch(buf, sizeof(buf), 5, 1), -1);
		CHECK_EQ(gpufile_close(h), 0);
	}
	gpufile_config_reset();
}

static void test_backends(void)
{
	static const size_t task_sizes[] = {4u << 20, 64u << 10};

	for (size_t b = 0; b < sizeof(backends) / sizeof(backends[0]); b++) {
		for (size_t t = 0; t < 2; t++) {
			roundtrip(test_path("roundtrip-disk"), backends[b],
			          task_sizes[t]);
			if (!shm_dir[0])
				continue;
			roundtrip(shm_path("roundtrip-shm"), backends[b],
			          task_sizes[t]);
			/* As on kernels whose tmpfs refuses O_DIRECT. */
			gpufile__sys.open = open_refusing_direct;
			roundtrip(shm_path("roundtrip-shm"), backends[b],
			          task_sizes[t]);
			gpufile__sys_reset();
		}
	}
	gpufile_config_reset();
}

static void test_tmpfs_reason(void)
{
	if (!shm_dir[0])
		return;
	tmpfs_reason(0);
	tmpfs_reason(1);
	/* On the test file system O_DIRECT normally works (ext4, xfs); where
	 * it does, the reason says so. */
	if (accepts_o_direct(test_path("odirect-probe"))) {
		gpufile_t *h = NULL;
		char reason[512] = "";

		CHECK_EQ(test_make_file(test_path("odirect-probe"), 1, 1), 0);
		CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
		CHECK_EQ(gpufile_open(&h, test_path("odirect-probe"), "r"), 0);
		CHECK_EQ(gpufile_path_info(h, NULL, reason, sizeof(reason)), 0);
		CHECK_CONTAINS(reason, "O_DIRECT available");
		gpufile_close(h);
	}
	gpufile_config_reset();
}

/* 1 GiB written with gpufile_pwrite and read back. */
static void test_one_gib(void)
{
	const size_t size = 1u << 30;
	const char *path = test_path("roundtrip-1g");
	unsigned char *src = test_malloc(size);
	unsigned char *dst = test_malloc(size);
	gpufile_stats_t before, after;
	gpufile_t *h = NULL;
	ssize_t n;

	test_fill(src, size, 77, 0);
	gpufile_config_reset();
	CHECK_EQ(gpufile_open(&h, path, "w+"), 0);
	if (!h)
		goto out;
	GPUFILE_INIT(before);
	gpufile_stats_self(&before);
	n = gpufile_pwrite(h, src, size, 0);
	CHECK_EQ(n, (ssize_t)size);
	memset(dst, 0, size);
	n = gpufile_pread(h, dst, size, 0);
	GPUFILE_INIT(after);
	gpufile_stats_self(&after);
	CHECK_EQ(n, (ssize_t)size);
	CHECK(memcmp(src, dst, size) == 0);
	/* 1 GiB at 4 MiB is 256 tasks each way. */
	CHECK_EQ(after.path[GPUFILE_PATH_HOST][1].tasks -
	             before.path[GPUFILE_PATH_HOST][1].tasks,
	         256);
	CHECK_EQ(after.path[GPUFILE_PATH_HOST][0].tasks -
	             before.path[GPUFILE_PATH_HOST][0].tasks,
	         256);
	CHECK_EQ(after.path[GPUFILE_PATH_HOST][0].bytes -
	             before.path[GPUFILE_PATH_HOST][0].bytes,
	         size);

	/* Read it again through O_DIRECT, at an unaligned offset. */
	CHECK_EQ(gpufile_sync(h), 0);
	CHECK_EQ(gpufile_close(h), 0);
	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (h) {
		memset(dst, 0, size);
		n = gpufile_pread(h, dst, size - 4097, 4097);
		CHECK_EQ(n, (ssize_t)(size - 4097));
		CHECK(memcmp(src + 4097, dst, size - 4097) == 0);
		CHECK_EQ(gpufile_close(h), 0);
	}
	gpufile_config_reset();
out:
	unlink(path);
	free(src);
	free(dst);
}

static void check_file(const char *path, const unsigned char *want,
                       size_t want_len)
{
	size_t len = 0;
	unsigned char *data = test_read_file(path, &len);

	CHECK(data != NULL);
	if (!data)
		return;
	CHECK_EQ(len, want_len);
	CHECK(len == want_len && memcmp(data, want, len) == 0);
	free(data);
}

static void test_open_modes(const char *dir_kind)
{
	char path[600], missing[600];
	unsigned char a[10000], b[3000], c[5], expect[32768];
	gpufile_t *h = NULL;
	gpufile_future_t *f1 = NULL, *f2 = NULL;

	snprintf(path, sizeof(path), "%s",
	         strcmp(dir_kind, "shm") == 0 ? shm_path("modes")
	                                      : test_path("modes"));
	snprintf(missing, sizeof(missing), "%s",
	         strcmp(dir_kind, "shm") == 0 ? shm_path("missing")
	                                      : test_path("missing"));
	test_fill(a, sizeof(a), 1, 0);
	test_fill(b, sizeof(b), 2, 0);
	test_fill(c, sizeof(c), 3, 0);

	/* r and r+ need the file. */
	unlink(missing);
	CHECK_EQ(gpufile_open(&h, missing, "r"), -ENOENT);
	CHECK(h == NULL);
	CHECK_CONTAINS(gpufile_errmsg(), missing);
	CHECK_EQ(gpufile_open(&h, missing, "r+"), -ENOENT);
	CHECK(access(missing, F_OK) != 0);

	/* a: created when missing; two appends land one after the other,
	 * whatever file_offset says. */
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	CHECK_EQ(gpufile_pwrite(h, a, sizeof(a), 0), (ssize_t)sizeof(a));
	CHECK_EQ(gpufile_pwrite(h, b, sizeof(b), 0), (ssize_t)sizeof(b));
	CHECK_EQ(gpufile_pread(h, expect, 1, 0), -EBADF);
	CHECK_EQ(gpufile_close(h), 0);
	memcpy(expect, a, sizeof(a));
	memcpy(expect + sizeof(a), b, sizeof(b));
	check_file(path, expect, sizeof(a) + sizeof(b));

	/* a on an existing file appends after its end; async appends land in
	 * submission order. */
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	CHECK_EQ(gpufile_pwrite(h, c, sizeof(c), 123456), (ssize_t)sizeof(c));
	CHECK_EQ(gpufile_pwrite_async(h, b, sizeof(b), 0, &f1), 0);
	CHECK_EQ(gpufile_pwrite_async(h, a, sizeof(a), 0, &f2), 0);
	CHECK_EQ(gpufile_future_wait(f1), (ssize_t)sizeof(b));
	CHECK_EQ(gpufile_future_wait(f2), (ssize_t)sizeof(a));
	gpufile_future_free(f1);
	gpufile_future_free(f2);
	CHECK_EQ(gpufile_close(h), 0);
	memcpy(expect + sizeof(a) + sizeof(b), c, sizeof(c));
	memcpy(expect + sizeof(a) + sizeof(b) + sizeof(c), b, sizeof(b));
	memcpy(expect + sizeof(a) + 2 * sizeof(b) + sizeof(c), a, sizeof(a));
	check_file(path, expect, 2 * sizeof(a) + 2 * sizeof(b) + sizeof(c));

	/* r+: not truncated; writes in place; reads back. */
	CHECK_EQ(gpufile_open(&h, path, "r+"), 0);
	CHECK_EQ(gpufile_size(h),
	         (int64_t)(2 * sizeof(a) + 2 * sizeof(b) + sizeof(c)));
	CHECK_EQ(gpufile_pwrite(h, c, sizeof(c), 100), (ssize_t)sizeof(c));
	{
		unsigned char back[200];
		CHECK_EQ(gpufile_pread(h, back, sizeof(back), 0),
		         (ssize_t)sizeof(back));
		CHECK(memcmp(back, a, 100) == 0);
		CHECK(memcmp(back + 100, c, sizeof(c)) == 0);
		CHECK(memcmp(back + 105, a + 105, 95) == 0);
	}
	CHECK_EQ(gpufile_close(h), 0);
	memcpy(expect + 100, c, sizeof(c));
	check_file(path, expect, 2 * sizeof(a) + 2 * sizeof(b) + sizeof(c));

	/* r: reads, never writes. */
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	CHECK_EQ(gpufile_pwrite(h, c, sizeof(c), 0), -EBADF);
	CHECK_EQ(gpufile_close(h), 0);

	/* w: truncates to 0, write only. */
	CHECK_EQ(gpufile_open(&h, path, "w"), 0);
	CHECK_EQ(gpufile_size(h), 0);
	CHECK_EQ(gpufile_pread(h, expect, 1, 0), -EBADF);
	CHECK_EQ(gpufile_pwrite(h, c, sizeof(c), 0), (ssize_t)sizeof(c));
	CHECK_EQ(gpufile_close(h), 0);
	check_file(path, c, sizeof(c));

	/* w+: truncates, and reads what it wrote. */
	CHECK_EQ(gpufile_open(&h, path, "w+"), 0);
	CHECK_EQ(gpufile_size(h), 0);
	{
		unsigned char back[sizeof(b)];
		CHECK_EQ(gpufile_pread(h, back, sizeof(back), 0), 0);
		CHECK_EQ(gpufile_pwrite(h, b, sizeof(b), 7),
		         (ssize_t)sizeof(b));
		CHECK_EQ(gpufile_pread(h, back, sizeof(back), 7),
		         (ssize_t)sizeof(b));
		CHECK(memcmp(back, b, sizeof(b)) == 0);
	}
	CHECK_EQ(gpufile_size(h), 7 + (int64_t)sizeof(b));
	CHECK_EQ(gpufile_close(h), 0);

	/* w and a create missing files, w+ too. */
	unlink(missing);
	CHECK_EQ(gpufile_open(&h, missing, "w"), 0);
	CHECK_EQ(gpufile_close(h), 0);
	CHECK(access(missing, F_OK) == 0);
	unlink(missing);
	CHECK_EQ(gpufile_open(&h, missing, "w+"), 0);
	CHECK_EQ(gpufile_close(h), 0);
	CHECK(access(missing, F_OK) == 0);
	CHECK(gpufile_filename(NULL) == NULL);
	unlink(missing);
	unlink(path);
}

int main(void)
{
	snprintf(shm_dir, sizeof(shm_dir), "/dev/shm/gpufile-rt-XXXXXX");
	if (!mkdtemp(shm_dir)) {
		fprintf(stderr, "no /dev/shm: tmpfs cases skipped\n");
		shm_dir[0] = '\0';
	}
	test_open_modes("disk");
	for (size_t b = 0; b < sizeof(backends) / sizeof(backends[0]); b++) {
		CHECK_EQ(gpufile_config_set("direct_io", backends[b]), 0);
		test_open_modes("disk");
		if (shm_dir[0])
			test_open_modes("shm");
	}
	gpufile_config_reset();
	test_tmpfs_reason();
	test_backends();
	test_one_gib();
	if (shm_dir[0]) {
		unlink(shm_path("roundtrip-shm"));
		unlink(shm_path("reason"));
		unlink(shm_path("modes"));
		unlink(shm_path("missing"));
		rmdir(shm_dir);
	}
	gpufile_release();
	return test_finish("test_roundtrip");
}
