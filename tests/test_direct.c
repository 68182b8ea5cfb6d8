/*
 * O_DIRECT: reads and writes with direct_io=on at unaligned offsets,
 * sizes and buffer addresses (heads, tails, misaligned buffers, task edges
 * that are not block edges), reads crossing end-of-file, the auto mode's
 * choice between page cache and O_DIRECT, and the fallbacks: a file system
 * that refuses O_DIRECT at open (tmpfs before Linux 6.6) or at I/O time,
 * with the reason recorded and direct_io_fallbacks counted.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#define SEED_A    3
#define SEED_B    4
#define CANARY    0xC3
#define FILE_SIZE ((4u << 20) + 1234)

static atomic_int direct_reads, direct_writes, buffered_reads;
static atomic_int einval_on_direct; /* direct calls fail with EINVAL */

static int is_direct(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl >= 0 && (fl & O_DIRECT);
}

static ssize_t counting_pread(int fd, void *buf, size_t len, off_t off)
{
	if (is_direct(fd)) {
		atomic_fetch_add(&direct_reads, 1);
		if (atomic_load(&einval_on_direct)) {
			errno = EINVAL;
			return -1;
		}
		/* What the kernel demands of O_DIRECT (4 KiB covers every
		 * logical block size in use). */
		if (((uintptr_t)buf | (uint64_t)off | len) & 511) {
			fprintf(stderr,
			        "unaligned O_DIRECT pread(%p, %zu, %lld)\n",
			        buf, len, (long long)off);
			test_failures++;
		}
	} else {
		atomic_fetch_add(&buffered_reads, 1);
	}
	return pread(fd, buf, len, off);
}

static ssize_t counting_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	if (is_direct(fd)) {
		atomic_fetch_add(&direct_writes, 1);
		if (atomic_load(&einval_on_direct)) {
			errno = EINVAL;
			return -1;
		}
		if (((uintptr_t)buf | (uint64_t)off | len) & 511) {
			fprintf(stderr,
			        "unaligned O_DIRECT pwrite(%p, %zu, %lld)\n",
			        buf, len, (long long)off);
			test_failures++;
		}
	}
	return pwrite(fd, buf, len, off);
}

static ssize_t counting_preadv2(int fd, const struct iovec *iov, int n,
                                off_t off, int flags)
{
	atomic_fetch_add(&buffered_reads, 1);
	return preadv2(fd, iov, n, off, flags);
}

static void counting_install(void)
{
	atomic_store(&direct_reads, 0);
	atomic_store(&direct_writes, 0);
	atomic_store(&buffered_reads, 0);
	gpufile__sys.pread = counting_pread;
	gpufile__sys.pwrite = counting_pwrite;
	gpufile__sys.preadv2 = counting_preadv2;
}

static unsigned char *aligned_buffer(size_t len)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, len + 8192)) {
		fprintf(stderr, "out of memory\n");
		exit(1);
	}
	return p;
}

static const int64_t offsets[] = {0, 1, 511, 4095, 4096, 4097, 8191, 65553};
static const size_t sizes[] = {1,    511,      4095,  4096,
                               4097, 3 * 4096, 12345, (256 << 10) + 3};
static const size_t misaligns[] = {0, 1, 512, 4095};

/* Reads every offset x size x buffer misalignment with direct_io=on and
 * checks the bytes and the canary behind them. */
static void test_reads(const char *path, size_t ts, int expect_direct)
{
	unsigned char *base = aligned_buffer(FILE_SIZE + 8192);
	gpufile_t *h = NULL;

	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_set_task_size(ts), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h) {
		free(base);
		return;
	}
	counting_install();
	for (size_t o = 0; o < sizeof(offsets) / sizeof(offsets[0]); o++) {
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			for (size_t m = 0;
			     m < sizeof(misaligns) / sizeof(misaligns[0]);
			     m++) {
				unsigned char *buf = base + misaligns[m];
				ssize_t n;

				memset(buf, CANARY, sizes[s] + 64);
				n = gpufile_pread(h, buf, sizes[s], offsets[o]);
				CHECK_EQ(n, (ssize_t)sizes[s]);
				if (n != (ssize_t)sizes[s] ||
				    test_mismatch(buf, sizes[s], SEED_A,
				                  (uint64_t)offsets[o]) != -1 ||
				    test_mismatch_byte(buf + sizes[s], 64,
				                       CANARY) != -1) {
					fprintf(
					    stderr,
					    "  direct read ts=%zu off=%lld "
					    "size=%zu misalign=%zu: %zd %s\n",
					    ts, (long long)offsets[o], sizes[s],
					    misaligns[m], n,
					    n < 0 ? gpufile_errmsg() : "");
					test_failures++;
				}
			}
		}
	}
	/* Large, misaligned: more than the 1 MiB scratch buffer. */
	for (size_t m = 0; m < sizeof(misaligns) / sizeof(misaligns[0]); m++) {
		unsigned char *buf = base + misaligns[m];
		const size_t size = (3u << 20) + 5;

		memset(buf, CANARY, size + 64);
		CHECK_EQ(gpufile_pread(h, buf, size, 7), (ssize_t)size);
		CHECK_EQ(test_mismatch(buf, size, SEED_A, 7), -1);
		CHECK_EQ(test_mismatch_byte(buf + size, 64, CANARY), -1);
	}
	/* Crossing end-of-file, and past it. */
	{
		static const struct {
			int64_t back; /* offset = FILE_SIZE - back */
			size_t size;
		} cross[] = {
		    {100, 4096},
		    {5000, 10000},
		    {1, 1},
		    {1, 2},
		    {1234, 1235},
		    {1235, 4096},
		    {4096, 8192},
		    {0, 10},
		    {(1 << 20) + 3, 2u << 20},
		    /* Aligned offset, size and buffer: the block holding
		     * end-of-file must not be read straight into buf. */
		    {1234, 4096},
		    {1234 + 8192, 3 * 4096},
		    {1234 + 8192, 4u << 20},
		};
		for (size_t i = 0; i < sizeof(cross) / sizeof(cross[0]); i++) {
			for (size_t m = 0; m < 2; m++) {
				const int64_t off = FILE_SIZE - cross[i].back;
				const size_t size = cross[i].size;
				const size_t want = (size_t)cross[i].back < size
				                        ? (size_t)cross[i].back
				                        : size;
				unsigned char *buf = base + misaligns[m * 3];
				ssize_t n;

				memset(buf, CANARY, size + 64);
				n = gpufile_pread(h, buf, size, off);
				CHECK_EQ(n, (ssize_t)want);
				CHECK_EQ(test_mismatch(buf, want, SEED_A,
				                       (uint64_t)off),
				         -1);
				CHECK_EQ(test_mismatch_byte(buf + want,
				                            size - want + 64,
				                            CANARY),
				         -1);
			}
		}
		memset(base, CANARY, 8192);
		CHECK_EQ(gpufile_pread(h, base, 8192, FILE_SIZE + 4096), 0);
		CHECK_EQ(test_mismatch_byte(base, 8192, CANARY), -1);
	}
	if (expect_direct)
		CHECK(atomic_load(&direct_reads) > 0);
	else
		CHECK_EQ(atomic_load(&direct_reads), 0);
	gpufile__sys_reset();
	CHECK_EQ(gpufile_close(h), 0);
	free(base);
	gpufile_config_reset();
}

/* Writes every shape with direct_io=on into a file that holds pattern A
 * and checks the file against a model after each. */
static void test_writes(const char *path, size_t ts, int expect_direct)
{
	unsigned char *model = test_malloc(FILE_SIZE + (2u << 20));
	unsigned char *base = aligned_buffer((1u << 20) + 8192);
	size_t model_len = FILE_SIZE;
	gpufile_t *h = NULL;
	int k = 0;

	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED_A), 0);
	test_fill(model, FILE_SIZE, SEED_A, 0);
	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_set_task_size(ts), 0);
	CHECK_EQ(gpufile_open(&h, path, "r+"), 0);
	if (!h)
		goto out;
	counting_install();
	for (size_t o = 0; o < sizeof(offsets) / sizeof(offsets[0]); o++) {
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
			const size_t m = misaligns[(o + s) % 4];
			const int64_t off =
			    offsets[o] * 37 % (FILE_SIZE - sizes[s]);
			const uint64_t seed = 100 + (uint64_t)k++;
			unsigned char *buf = base + m;
			ssize_t n;

			test_fill(buf, sizes[s], seed, (uint64_t)off);
			n = gpufile_pwrite(h, buf, sizes[s], off);
			CHECK_EQ(n, (ssize_t)sizes[s]);
			memcpy(model + off, buf, sizes[s]);
			if (n != (ssize_t)sizes[s])
				fprintf(stderr, "  direct write %zu@%lld: %s\n",
				        sizes[s], (long long)off,
				        gpufile_errmsg());
		}
		/* Check the file after each row. */
		{
			size_t len = 0;
			unsigned char *data = test_read_file(path, &len);
			CHECK(data && len == model_len &&
			      memcmp(data, model, len) == 0);
			free(data);
		}
	}
	/* A write that ends past end-of-file with unaligned head and tail. */
	{
		const int64_t off = FILE_SIZE - 100;
		const size_t size = (1u << 20) + 4097;
		unsigned char *buf = base + 1;
		size_t len = 0;
		unsigned char *data;

		test_fill(buf, size, 999, (uint64_t)off);
		CHECK_EQ(gpufile_pwrite(h, buf, size, off), (ssize_t)size);
		memcpy(model + off, buf, size);
		model_len = (size_t)off + size;
		CHECK_EQ(gpufile_size(h), (int64_t)model_len);
		data = test_read_file(path, &len);
		CHECK(data && len == model_len &&
		      memcmp(data, model, len) == 0);
		free(data);
		/* And read back through O_DIRECT. */
		{
			unsigned char *back = aligned_buffer(model_len);
			CHECK_EQ(gpufile_pread(h, back + 3, model_len, 0),
			         (ssize_t)model_len);
			CHECK(memcmp(back + 3, model, model_len) == 0);
			free(back);
		}
	}
	if (expect_direct)
		CHECK(atomic_load(&direct_writes) > 0);
	else
		CHECK_EQ(atomic_load(&direct_writes), 0);
	gpufile__sys_reset();
	CHECK_EQ(gpufile_close(h), 0);
out:
	free(model);
	free(base);
	gpufile_config_reset();
}

/* direct_io=auto takes cached ranges from the page cache and reads cold
 * ones with O_DIRECT. */
static void test_auto(const char *path)
{
	unsigned char *buf = aligned_buffer(FILE_SIZE);
	gpufile_t *h = NULL;
	int fd;

	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED_A), 0);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	fsync(fd);
	CHECK_EQ(gpufile_config_set("direct_io", "auto"), 0);
	CHECK_EQ(gpufile_set_task_size(1 << 20), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h || fd < 0)
		goto out;

	/* Cold: dropped from the page cache. */
	CHECK_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
	counting_install();
	memset(buf, 0, FILE_SIZE);
	CHECK_EQ(gpufile_pread(h, buf + 1, FILE_SIZE - 1, 1),
	         (ssize_t)FILE_SIZE - 1);
	CHECK_EQ(test_mismatch(buf + 1, FILE_SIZE - 1, SEED_A, 1), -1);
	if (atomic_load(&direct_reads) == 0)
		fprintf(stderr, "note: auto read no cold range with O_DIRECT "
		                "(page cache not dropped?)\n");

	/* Warm: read into the page cache first; then no O_DIRECT. The
	 * library is told the pages are cached: they may be evicted before
	 * the read (test_mincore_all_cached). */
	{
		size_t len = 0;
		free(test_read_file(path, &len));
	}
	counting_install();
	gpufile__sys.mincore = test_mincore_all_cached;
	gpufile__sys.cachestat = test_cachestat_all_cached;
	memset(buf, 0, FILE_SIZE);
	CHECK_EQ(gpufile_pread(h, buf, FILE_SIZE, 0), (ssize_t)FILE_SIZE);
	CHECK_EQ(test_mismatch(buf, FILE_SIZE, SEED_A, 0), -1);
	CHECK_EQ(atomic_load(&direct_reads), 0);
	CHECK(atomic_load(&buffered_reads) > 0);
	gpufile__sys_reset();
out:
	if (fd >= 0)
		close(fd);
	gpufile_close(h);
	free(buf);
	gpufile_config_reset();
}

/* direct_io=auto on a handle that writes the file, then reads it: ranges
 * the handle wrote past the file's first read (which mapped the file as it
 * was then) are cold reads like any other. They were read through the page
 * cache: past the handle's map of the file, every range was taken as
 * cached. The page cache is said to hold nothing (mincore, with no
 * cachestat), so that every range must be read with O_DIRECT. */
static void test_auto_after_writes(const char *path)
{
	unsigned char *data = aligned_buffer(FILE_SIZE);
	unsigned char *buf = aligned_buffer(FILE_SIZE);
	const size_t first = 512u << 10;
	gpufile_t *h = NULL;

	test_fill(data, FILE_SIZE, SEED_B, 0);
	CHECK_EQ(gpufile_config_set("direct_io", "auto"), 0);
	CHECK_EQ(gpufile_set_task_size(1 << 20), 0);
	unlink(path);
	CHECK_EQ(gpufile_open(&h, path, "w+"), 0);
	if (!h)
		goto out;
	gpufile__sys.mincore = test_mincore_none_cached;
	/* The map and its mincore() are what this is about: as on a kernel
	 * without cachestat (which asks the file, not a map). */
	gpufile__sys.cachestat = test_cachestat_missing;
	CHECK_EQ(gpufile_pwrite(h, data, first, 0), (ssize_t)first);
	CHECK_EQ(gpufile_pread(h, buf, first, 0), (ssize_t)first);
	CHECK_EQ(gpufile_pwrite(h, data + first, FILE_SIZE - first, first),
	         (ssize_t)(FILE_SIZE - first));
	/* Tasks of 1 MiB: each large enough for O_DIRECT. */
	counting_install();
	memset(buf, 0, FILE_SIZE);
	CHECK_EQ(gpufile_pread(h, buf, 4u << 20, 0), 4 << 20);
	CHECK_EQ(test_mismatch(buf, 4u << 20, SEED_B, 0), -1);
	CHECK(atomic_load(&direct_reads) > 0);
	CHECK_EQ(atomic_load(&buffered_reads), 0);
	gpufile__sys_reset();
out:
	gpufile_close(h);
	free(data);
	free(buf);
	gpufile_config_reset();
}

static int open_refusing_direct(const char *path, int flags, mode_t mode)
{
	if (flags & O_DIRECT) {
		errno = EINVAL;
		return -1;
	}
	return open(path, flags, mode);
}

/* A file system that refuses O_DIRECT at open: the page cache is used,
 * the reason recorded, and the fallback counted once per file, when the
 * O_DIRECT descriptor is first wanted (here by gpufile_path_info): it is
 * opened at its first use, not by gpufile_open. */
static void test_refused_at_open(const char *path, int inject)
{
	gpufile_stats_t before, after;
	char reason[512] = "";
	unsigned char *buf = aligned_buffer(FILE_SIZE);
	gpufile_t *h = NULL;

	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED_A), 0);
	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_set_task_size(64 << 10), 0);
	GPUFILE_INIT(before);
	gpufile_stats_self(&before);
	if (inject)
		gpufile__sys.open = open_refusing_direct;
	CHECK_EQ(gpufile_open(&h, path, "r+"), 0);
	GPUFILE_INIT(after);
	gpufile_stats_self(&after);
	if (!h) {
		gpufile__sys_reset();
		goto out;
	}
	CHECK_EQ(after.direct_io_fallbacks - before.direct_io_fallbacks, 0);
	CHECK_EQ(gpufile_path_info(h, NULL, reason, sizeof(reason)), 0);
	gpufile__sys_reset();
	gpufile_stats_self(&after);
	CHECK_EQ(after.direct_io_fallbacks - before.direct_io_fallbacks, 1);
	CHECK_CONTAINS(reason, "O_DIRECT refused");
	if (strncmp(path, "/dev/shm/", 9) == 0)
		CHECK_CONTAINS(reason, "tmpfs");

	counting_install();
	memset(buf, 0, FILE_SIZE);
	CHECK_EQ(gpufile_pread(h, buf + 1, FILE_SIZE - 5, 3),
	         (ssize_t)FILE_SIZE - 5);
	CHECK_EQ(test_mismatch(buf + 1, FILE_SIZE - 5, SEED_A, 3), -1);
	test_fill(buf + 1, 100000, SEED_B, 4097);
	CHECK_EQ(gpufile_pwrite(h, buf + 1, 100000, 4097), 100000);
	memset(buf, 0, 100002);
	CHECK_EQ(gpufile_pread(h, buf, 100000, 4097), 100000);
	CHECK_EQ(test_mismatch(buf, 100000, SEED_B, 4097), -1);
	CHECK_EQ(atomic_load(&direct_reads), 0);
	CHECK_EQ(atomic_load(&direct_writes), 0);
	gpufile__sys_reset();
	/* Counted once, at the first use, not per request. */
	gpufile_stats_self(&before);
	CHECK_EQ(after.direct_io_fallbacks, before.direct_io_fallbacks);
	CHECK_EQ(gpufile_close(h), 0);
out:
	free(buf);
	gpufile_config_reset();
}

/* O_DIRECT accepted at open but refused at I/O time (some FUSE and
 * network file systems): the handle falls back, once, and says why. */
static void test_refused_at_io(const char *path, int is_write)
{
	gpufile_stats_t before, after;
	char reason[512] = "";
	unsigned char *buf = aligned_buffer(FILE_SIZE);
	gpufile_t *h = NULL;

	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED_A), 0);
	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_set_task_size(1 << 20), 0);
	CHECK_EQ(gpufile_open(&h, path, "r+"), 0);
	if (!h)
		goto out;
	CHECK_EQ(gpufile_path_info(h, NULL, reason, sizeof(reason)), 0);
	CHECK_CONTAINS(reason, "O_DIRECT available");
	GPUFILE_INIT(before);
	gpufile_stats_self(&before);
	counting_install();
	atomic_store(&einval_on_direct, 1);
	if (is_write) {
		test_fill(buf, FILE_SIZE, SEED_B, 0);
		CHECK_EQ(gpufile_pwrite(h, buf, FILE_SIZE, 0),
		         (ssize_t)FILE_SIZE);
	} else {
		memset(buf, 0, FILE_SIZE);
		CHECK_EQ(gpufile_pread(h, buf, FILE_SIZE, 0),
		         (ssize_t)FILE_SIZE);
		CHECK_EQ(test_mismatch(buf, FILE_SIZE, SEED_A, 0), -1);
	}
	CHECK(atomic_load(&direct_reads) + atomic_load(&direct_writes) > 0);
	GPUFILE_INIT(after);
	gpufile_stats_self(&after);
	CHECK_EQ(after.direct_io_fallbacks - before.direct_io_fallbacks, 1);
	CHECK_EQ(gpufile_path_info(h, NULL, reason, sizeof(reason)), 0);
	CHECK_CONTAINS(reason, "EINVAL");
	/* The operation that was refused, in its own words. */
	CHECK_CONTAINS(reason, is_write ? "O_DIRECT write at offset"
	                                : "O_DIRECT read at offset");
	CHECK_CONTAINS(reason, is_write ? "writing through the page cache"
	                                : "reading through the page cache");

	/* From now on the handle does not try O_DIRECT. */
	counting_install();
	memset(buf, 0, FILE_SIZE);
	CHECK_EQ(gpufile_pread(h, buf, FILE_SIZE, 0), (ssize_t)FILE_SIZE);
	CHECK_EQ(test_mismatch(buf, FILE_SIZE, is_write ? SEED_B : SEED_A, 0),
	         -1);
	CHECK_EQ(atomic_load(&direct_reads), 0);
	atomic_store(&einval_on_direct, 0);
	gpufile__sys_reset();
	CHECK_EQ(gpufile_close(h), 0);
	if (is_write) {
		size_t len = 0;
		unsigned char *data = test_read_file(path, &len);
		CHECK(data && len == FILE_SIZE &&
		      test_mismatch(data, len, SEED_B, 0) == -1);
		free(data);
	}
out:
	atomic_store(&einval_on_direct, 0);
	gpufile__sys_reset();
	free(buf);
	gpufile_config_reset();
}

/* A read whose last block would end past INT64_MAX cannot be made with
 * O_DIRECT: it is read through the page cache (here: 0 bytes, past the
 * end), and the handle keeps O_DIRECT for its other reads. Before, the
 * kernel's EINVAL for that block was taken as O_DIRECT refused, for good. */
static void test_read_at_the_top(const char *path)
{
	unsigned char *buf = aligned_buffer(FILE_SIZE);
	char reason[512] = "";
	gpufile_t *h = NULL;

	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED_A), 0);
	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (h) {
		CHECK_EQ(gpufile_pread(h, buf, 100, INT64_MAX - 100), 0);
		CHECK_EQ(gpufile_pread(h, buf, 5000, INT64_MAX - 5000), 0);
		CHECK_EQ(gpufile_path_info(h, NULL, reason, sizeof(reason)), 0);
		CHECK(!strstr(reason, "EINVAL"));
		counting_install();
		CHECK_EQ(gpufile_pread(h, buf, 1 << 20, 0), 1 << 20);
		CHECK_EQ(test_mismatch(buf, 1 << 20, SEED_A, 0), -1);
		CHECK(atomic_load(&direct_reads) > 0);
		gpufile__sys_reset();
		CHECK_EQ(gpufile_close(h), 0);
	}
	free(buf);
	gpufile_config_reset();
}

static int accepts_o_direct(const char *dir)
{
	char path[600];
	int fd;

	snprintf(path, sizeof(path), "%s/probe-o-direct", dir);
	fd = open(path, O_RDWR | O_CREAT | O_DIRECT, 0644);
	if (fd < 0)
		return 0;
	close(fd);
	unlink(path);
	return 1;
}

int main(void)
{
	static const size_t task_sizes[] = {4u << 20, 64u << 10, 10000};
	const char *disk = test_path("direct");
	char shm_dir[64] = "/dev/shm/gpufile-direct-XXXXXX";
	char shm[128];
	int disk_direct = accepts_o_direct(test_dir());
	int have_shm = mkdtemp(shm_dir) != NULL;

	snprintf(shm, sizeof(shm), "%s/direct", shm_dir);
	if (!disk_direct)
		fprintf(stderr,
		        "note: %s refuses O_DIRECT; testing the "
		        "fallback there\n",
		        test_dir());
	CHECK_EQ(test_make_file(disk, FILE_SIZE, SEED_A), 0);
	for (size_t t = 0; t < sizeof(task_sizes) / sizeof(task_sizes[0]);
	     t++) {
		test_reads(disk, task_sizes[t], disk_direct);
		test_writes(disk, task_sizes[t], disk_direct);
		CHECK_EQ(test_make_file(disk, FILE_SIZE, SEED_A), 0);
	}
	if (disk_direct) {
		test_auto(disk);
		test_auto_after_writes(disk);
		test_refused_at_io(disk, 0);
		test_refused_at_io(disk, 1);
		test_read_at_the_top(disk);
	}
	test_refused_at_open(disk, 1);
	if (have_shm) {
		int shm_direct = accepts_o_direct(shm_dir);

		CHECK_EQ(test_make_file(shm, FILE_SIZE, SEED_A), 0);
		test_reads(shm, 64 << 10, shm_direct);
		test_writes(shm, 10000, shm_direct);
		if (!shm_direct)
			test_refused_at_open(shm, 0);
		test_refused_at_open(shm, 1);
		unlink(shm);
		rmdir(shm_dir);
	}
	gpufile_release();
	return test_finish("test_direct");
}
