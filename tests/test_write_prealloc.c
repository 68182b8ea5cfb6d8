/*
 * write_prealloc (file.c, preallocate): the blocks of a blocking buffered
 * write that reaches 4 MiB or more past a local file's end are reserved
 * before it is written, with fallocate(FALLOC_FL_KEEP_SIZE) over the part
 * past the end only, and not past RLIMIT_FSIZE: auto on ext4, on on any
 * file system but those in memory, off never. fallocate and fstatfs are
 * replaced through the system-call table, so what is asserted does not
 * depend on the file system the test runs on; the last cases look at the
 * real kernel's blocks where the test folder is on ext4.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/magic.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define MiB (1ll << 20)

struct call {
	int mode;
	int64_t off, len;
};

static struct call calls[16];
static int ncalls;
static int fail_errno;   /* fallocate fails with it when nonzero */
static long fs_magic;    /* what fstatfs says, or 0: the real answer */
static int nstatfs;      /* fstatfs calls */
static int statfs_errno; /* fstatfs fails with it when nonzero */

static int (*real_fstatfs)(int fd, struct statfs *st);
static int (*real_fallocate)(int fd, int mode, off_t off, off_t len);
static ssize_t (*real_pwrite)(int fd, const void *buf, size_t len, off_t off);
static int64_t fail_from = -1; /* pwrite fails at this offset and after */

static int record_fallocate(int fd, int mode, off_t off, off_t len)
{
	if (ncalls < (int)(sizeof(calls) / sizeof(calls[0])))
		calls[ncalls] = (struct call){mode, (int64_t)off, (int64_t)len};
	ncalls++;
	if (fail_errno) {
		errno = fail_errno;
		return -1;
	}
	return real_fallocate(fd, mode, off, len);
}

static int say_fs(int fd, struct statfs *st)
{
	int rc;

	nstatfs++;
	if (statfs_errno) {
		errno = statfs_errno;
		return -1;
	}
	rc = real_fstatfs(fd, st);
	if (rc == 0 && fs_magic)
		st->f_type = fs_magic;
	return rc;
}

static ssize_t pwrite_failing(int fd, const void *buf, size_t len, off_t off)
{
	if (fail_from >= 0 && (int64_t)off + (int64_t)len > fail_from) {
		errno = EIO;
		return -1;
	}
	return real_pwrite(fd, buf, len, off);
}

static void reset(long magic, const char *mode)
{
	ncalls = 0;
	nstatfs = 0;
	statfs_errno = 0;
	fail_errno = 0;
	fs_magic = magic;
	memset(calls, 0, sizeof(calls));
	CHECK_EQ(gpufile_config_set("write_prealloc", mode), 0);
}

static void check_call(int i, int64_t off, int64_t len)
{
	CHECK(ncalls > i);
	if (ncalls <= i)
		return;
	CHECK_EQ(calls[i].mode, FALLOC_FL_KEEP_SIZE);
	CHECK_EQ(calls[i].off, off);
	CHECK_EQ(calls[i].len, len);
}

/* The file at path holds size bytes of seed's pattern. */
static void check_file(const char *path, size_t size, uint64_t seed)
{
	size_t len = 0;
	unsigned char *back = test_read_file(path, &len);

	CHECK_EQ(len, size);
	if (back)
		CHECK_EQ(test_mismatch(back, len, seed, 0), -1);
	free(back);
}

/* size bytes of seed's pattern, to be freed. */
static unsigned char *filled(size_t size, uint64_t seed)
{
	unsigned char *buf = test_malloc(size);

	test_fill(buf, size, seed, 0);
	return buf;
}

/* The setting and the fakes reset (reset()), path opened "w". */
static gpufile_t *opened(const char *path, long magic, const char *mode)
{
	gpufile_t *h = NULL;

	reset(magic, mode);
	CHECK_EQ(gpufile_open(&h, path, "w"), 0);
	return h;
}

/* auto on ext4: a new file's 8 MiB write reserves its 8 MiB, the next
 * 8 MiB after it its own; a rewrite inside the file, or one reaching
 * less than 4 MiB past the end, reserves nothing; one that starts past
 * the end reserves from where it starts. */
static void test_reserves_the_part_past_the_end(void)
{
	const char *path = test_path("prealloc_ext4.bin");
	unsigned char *buf = filled(16 * MiB, 21);
	gpufile_t *h = opened(path, EXT4_SUPER_MAGIC, "auto");

	CHECK_EQ(gpufile_pwrite(h, buf, 8 * MiB, 0), (ssize_t)(8 * MiB));
	CHECK_EQ(ncalls, 1);
	check_call(0, 0, 8 * MiB);
	CHECK_EQ(gpufile_pwrite(h, buf + 8 * MiB, 8 * MiB, 8 * MiB),
	         (ssize_t)(8 * MiB));
	CHECK_EQ(ncalls, 2);
	check_call(1, 8 * MiB, 8 * MiB);
	/* Inside the file (16 MiB): nothing. */
	CHECK_EQ(gpufile_pwrite(h, buf, 16 * MiB, 0), (ssize_t)(16 * MiB));
	/* 3 MiB past the end: below the 4 MiB that pays for the calls. */
	CHECK_EQ(gpufile_pwrite(h, buf + 5 * MiB, 8 * MiB, 11 * MiB),
	         (ssize_t)(8 * MiB));
	/* Writes of less than 4 MiB: nothing, wherever they are. */
	CHECK_EQ(gpufile_pwrite(h, buf, 2 * MiB, 19 * MiB), (ssize_t)(2 * MiB));
	CHECK_EQ(ncalls, 2);
	/* From 21 MiB (the end) to 27: the 6 MiB past the end. */
	CHECK_EQ(gpufile_pwrite(h, buf, 8 * MiB, 19 * MiB), (ssize_t)(8 * MiB));
	CHECK_EQ(ncalls, 3);
	check_call(2, 21 * MiB, 6 * MiB);
	CHECK_EQ(gpufile_close(h), 0);
	free(buf);
}

/* A write that starts past the end reserves from its own start (the hole
 * before it stays a hole). */
static void test_a_write_past_the_end_reserves_from_its_start(void)
{
	const char *path = test_path("prealloc_sparse.bin");
	unsigned char *buf = filled(4 * MiB, 22);
	gpufile_t *h = opened(path, EXT4_SUPER_MAGIC, "auto");
	struct stat st;

	CHECK_EQ(gpufile_pwrite(h, buf, 4 * MiB, 100 * MiB),
	         (ssize_t)(4 * MiB));
	CHECK_EQ(ncalls, 1);
	check_call(0, 100 * MiB, 4 * MiB);
	CHECK_EQ(gpufile_close(h), 0);
	CHECK_EQ(stat(path, &st), 0);
	CHECK_EQ((int64_t)st.st_size, 104 * MiB);
	free(buf);
}

/* auto reserves only on ext4 (where it was measured); on on any file
 * system but those in memory (where a reservation is zeroed memory); off
 * never. */
static void test_the_setting(void)
{
	static const struct {
		long magic;
		const char *mode;
		int calls;
	} cases[] = {
	    {TMPFS_MAGIC, "auto", 0},       {XFS_SUPER_MAGIC, "auto", 0},
	    {TMPFS_MAGIC, "on", 0},         {RAMFS_MAGIC, "on", 0},
	    {HUGETLBFS_MAGIC, "on", 0},     {XFS_SUPER_MAGIC, "on", 1},
	    {EXT4_SUPER_MAGIC, "off", 0},   {EXT4_SUPER_MAGIC, "auto", 1},
	    {BTRFS_SUPER_MAGIC, "auto", 0}, {NFS_SUPER_MAGIC, "on", 1},
	};
	unsigned char *buf = filled(8 * MiB, 23);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *path = test_path("prealloc_setting.bin");
		gpufile_t *h = opened(path, cases[i].magic, cases[i].mode);

		CHECK_EQ(gpufile_pwrite(h, buf, 8 * MiB, 0),
		         (ssize_t)(8 * MiB));
		CHECK_EQ(gpufile_close(h), 0);
		if (ncalls != cases[i].calls)
			fprintf(stderr, "case %zu: %s on magic %lx: %d calls\n",
			        i, cases[i].mode, (unsigned long)cases[i].magic,
			        ncalls);
		CHECK_EQ(ncalls, cases[i].calls);
		if (cases[i].calls)
			check_call(0, 0, 8 * MiB);
		check_file(path, 8 * MiB, 23);
	}
	free(buf);
}

/* The file system is asked once per handle, whatever the number of
 * writes; nothing but a write that may reserve asks it. */
static void test_the_file_system_is_asked_once(void)
{
	const char *path = test_path("prealloc_once.bin");
	unsigned char *buf = filled(8 * MiB, 26);
	gpufile_t *h = NULL;

	reset(NFS_SUPER_MAGIC, "auto");
	CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);
	CHECK_EQ(gpufile_open(&h, path, "w"), 0);
	CHECK_EQ(gpufile_pwrite(h, buf, 1 * MiB, 0), (ssize_t)(1 * MiB));
	CHECK_EQ(nstatfs, 0);
	for (int i = 0; i < 4; i++)
		CHECK_EQ(gpufile_pwrite(h, buf, 8 * MiB, (int64_t)i * 8 * MiB),
		         (ssize_t)(8 * MiB));
	CHECK_EQ(nstatfs, 1);
	CHECK_EQ(ncalls, 0);
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_config_set("direct_io", "auto");
	free(buf);
}

/* Not past RLIMIT_FSIZE (tmpfs and f2fs raise SIGXFSZ for a reservation
 * past it, before any byte is written): a write to 16 MiB under a limit
 * of 12 reserves to 12, one to 14 under it reserves nothing (2 MiB). */
static void test_not_past_the_file_size_limit(void)
{
	const char *path = test_path("prealloc_rlimit.bin");
	unsigned char *buf = filled(8 * MiB, 27);
	struct rlimit old, lim;
	gpufile_t *h = opened(path, EXT4_SUPER_MAGIC, "auto");
	void (*old_handler)(int);

	CHECK_EQ(gpufile_pwrite(h, buf, 8 * MiB, 0), (ssize_t)(8 * MiB));
	CHECK_EQ(ncalls, 1);
	CHECK_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = 12 * MiB;
	old_handler = signal(SIGXFSZ, SIG_IGN);
	CHECK_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
	ncalls = 0;
	/* The write itself stops at the limit (a short count, or EFBIG). */
	(void)gpufile_pwrite(h, buf, 8 * MiB, 8 * MiB);
	CHECK_EQ(ncalls, 1);
	check_call(0, 8 * MiB, 4 * MiB);
	lim.rlim_cur = 14 * MiB;
	CHECK_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
	ncalls = 0;
	(void)gpufile_pwrite(h, buf, 8 * MiB, 12 * MiB);
	CHECK_EQ(ncalls, 0);
	CHECK_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, old_handler);
	CHECK_EQ(gpufile_close(h), 0);
	free(buf);
}

/* Only blocking buffered writes reserve: not a request only prepared (what
 * gpufile_stream_info does), not gpufile_pwrite_async (its caller would
 * wait on the file's lock), not an O_DIRECT write (direct_io=on where the
 * file system takes it). */
static void test_only_blocking_buffered_writes_reserve(void)
{
	const char *path = test_path("prealloc_kinds.bin");
	unsigned char *buf = filled(8 * MiB, 28);
	struct gpufile__request r;
	gpufile_future_t *f = NULL;
	gpufile_t *h = opened(path, EXT4_SUPER_MAGIC, "auto");
	int buffered;

	CHECK_EQ(gpufile__request_prepare(&r, h, buf, 8 * MiB, 0, 1), 0);
	gpufile__request_destroy(&r);
	CHECK_EQ(ncalls, 0);
	CHECK_EQ(gpufile_pwrite_async(h, buf, 8 * MiB, 0, &f), 0);
	CHECK_EQ(gpufile_future_wait(f), (ssize_t)(8 * MiB));
	gpufile_future_free(f);
	CHECK_EQ(ncalls, 0);
	CHECK_EQ(gpufile_close(h), 0);
	reset(EXT4_SUPER_MAGIC, "auto");
	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_open(&h, test_path("prealloc_direct.bin"), "w"), 0);
	/* The first write finds out whether the file system takes
	 * O_DIRECT (the descriptor is opened at its first use). */
	CHECK_EQ(gpufile_pwrite(h, buf, 8 * MiB, 0), (ssize_t)(8 * MiB));
	buffered =
	    atomic_load(&h->direct_refused) || !gpufile__direct_fd_possible(h);
	ncalls = 0;
	CHECK_EQ(gpufile_pwrite(h, buf, 8 * MiB, 8 * MiB), (ssize_t)(8 * MiB));
	/* Where it refused O_DIRECT, the write was buffered. */
	CHECK_EQ(ncalls, buffered ? 1 : 0);
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_config_set("direct_io", "auto");
	free(buf);
}

/* fallocate refused (no space, or not supported): the write is made as it
 * would have been, whole. A file that takes no reservation (EOPNOTSUPP,
 * as ext4's files without extents say, or ENOSYS) is not asked again; one
 * short of space is, at its next write (space may have been freed). */
static void test_a_refused_reservation_leaves_the_write_alone(void)
{
	static const struct {
		int err, calls_after_two;
	} cases[] = {{ENOSPC, 2}, {EOPNOTSUPP, 1}, {ENOSYS, 1}, {EINVAL, 2}};
	unsigned char *buf = filled(16 * MiB, 24);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *path = test_path("prealloc_refused.bin");
		gpufile_t *h = NULL;

		reset(EXT4_SUPER_MAGIC, "on");
		fail_errno = cases[i].err;
		CHECK_EQ(gpufile_open(&h, path, "w"), 0);
		CHECK_EQ(gpufile_pwrite(h, buf, 8 * MiB, 0),
		         (ssize_t)(8 * MiB));
		CHECK_EQ(ncalls, 1);
		CHECK_EQ(gpufile_pwrite(h, buf + 8 * MiB, 8 * MiB, 8 * MiB),
		         (ssize_t)(8 * MiB));
		CHECK_EQ(ncalls, cases[i].calls_after_two);
		CHECK_EQ(gpufile_close(h), 0);
		check_file(path, 16 * MiB, 24);
	}
	free(buf);
}

/* A failed fstatfs costs that write its reservation, not the handle's
 * later writes: the file system is asked again. */
static void test_a_failed_statfs_is_asked_again(void)
{
	const char *path = test_path("prealloc_statfs.bin");
	unsigned char *buf = filled(16 * MiB, 30);
	gpufile_t *h = NULL;

	reset(EXT4_SUPER_MAGIC, "auto");
	statfs_errno = EIO;
	CHECK_EQ(gpufile_open(&h, path, "w"), 0);
	CHECK_EQ(gpufile_pwrite(h, buf, 8 * MiB, 0), (ssize_t)(8 * MiB));
	CHECK_EQ(nstatfs, 1);
	CHECK_EQ(ncalls, 0);
	statfs_errno = 0;
	CHECK_EQ(gpufile_pwrite(h, buf + 8 * MiB, 8 * MiB, 8 * MiB),
	         (ssize_t)(8 * MiB));
	CHECK_EQ(nstatfs, 2);
	CHECK_EQ(ncalls, 1);
	check_call(0, 8 * MiB, 8 * MiB);
	CHECK_EQ(gpufile_close(h), 0);
	check_file(path, 16 * MiB, 30);
	free(buf);
}

/* Whether the test folder is on ext4 (the real kernel's cases below);
 * says so on stderr where it is not. */
static int on_ext4(void)
{
	struct statfs sfs;
	int fd = open(test_dir(), O_RDONLY | O_DIRECTORY), ext4;

	CHECK(fd >= 0);
	ext4 = fd >= 0 && real_fstatfs(fd, &sfs) == 0 &&
	       (long)sfs.f_type == (long)EXT4_SUPER_MAGIC;
	if (fd >= 0)
		close(fd);
	if (!ext4)
		fprintf(stderr,
		        "test_write_prealloc: %s is not on ext4: the real "
		        "kernel's blocks are not checked\n",
		        test_dir());
	return ext4;
}

/* The real kernel, where the test folder is on ext4: a 16 MiB write cut
 * short after its first 4 MiB leaves a file of 4 MiB (no byte nobody
 * wrote is shown) whose blocks, with the reservation, still cover the 16
 * MiB (the documented cost of a write that fails: du counts them until
 * the file is cut or removed); without it (off), only what was written. */
static void test_a_write_cut_short_shows_only_its_bytes(void)
{
	const char *path = test_path("prealloc_cut.bin");
	unsigned char *buf;

	if (!on_ext4())
		return;
	buf = filled(16 * MiB, 25);
	for (int prealloc = 1; prealloc >= 0; prealloc--) {
		gpufile_t *h = NULL;
		struct stat st;
		ssize_t n;

		reset(0, prealloc ? "auto" : "off");
		unlink(path);
		CHECK_EQ(gpufile_open(&h, path, "w"), 0);
		fail_from = 4 * MiB;
		gpufile__sys.pwrite = pwrite_failing;
		n = gpufile_pwrite(h, buf, 16 * MiB, 0);
		gpufile__sys.pwrite = real_pwrite;
		fail_from = -1;
		CHECK(n == -EIO || n == (ssize_t)(4 * MiB));
		CHECK_EQ(ncalls, prealloc);
		CHECK_EQ(fstat(h->fd, &st), 0);
		CHECK_EQ((int64_t)st.st_size, 4 * MiB);
		if (prealloc)
			CHECK((int64_t)st.st_blocks * 512 >= 16 * MiB);
		else
			CHECK((int64_t)st.st_blocks * 512 < 8 * MiB);
		CHECK_EQ(gpufile_close(h), 0);
		check_file(path, 4 * MiB, 25);
	}
	free(buf);
}

/* An "a" handle's appends reserve nothing: after a failure, append.c's cut
 * back must not guess whose blocks lie past the end. */
static void test_appends_reserve_nothing(void)
{
	const char *path = test_path("prealloc_append.bin");
	unsigned char *buf = filled(8 * MiB, 29);
	gpufile_t *h = NULL;

	reset(EXT4_SUPER_MAGIC, "on");
	unlink(path);
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	CHECK_EQ(gpufile_pwrite(h, buf, 8 * MiB, 0), (ssize_t)(8 * MiB));
	CHECK_EQ(ncalls, 0);
	CHECK_EQ(gpufile_close(h), 0);
	check_file(path, 8 * MiB, 29);
	free(buf);
}

int main(void)
{
	alarm(300); /* a hang fails the test */
	real_fstatfs = gpufile__sys.fstatfs;
	real_fallocate = gpufile__sys.fallocate;
	real_pwrite = gpufile__sys.pwrite;
	gpufile__sys.fstatfs = say_fs;
	gpufile__sys.fallocate = record_fallocate;
	CHECK_EQ(gpufile_set_task_size(4 * MiB), 0);
	test_reserves_the_part_past_the_end();
	test_a_write_past_the_end_reserves_from_its_start();
	test_the_setting();
	test_the_file_system_is_asked_once();
	test_not_past_the_file_size_limit();
	test_only_blocking_buffered_writes_reserve();
	test_a_refused_reservation_leaves_the_write_alone();
	test_a_failed_statfs_is_asked_again();
	test_a_write_cut_short_shows_only_its_bytes();
	test_appends_reserve_nothing();
	gpufile__sys_reset();
	gpufile_config_reset();
	gpufile_release();
	return test_finish("test_write_prealloc");
}
