/*
 * Errors and how they travel: bad arguments and open modes, files that
 * change under a read, and faults injected through the system-call table
 * (EINTR, EAGAIN, short transfers, EIO at chosen tasks, ENOSPC/EDQUOT),
 * checking the value returned, the message, that the lowest-offset error
 * wins, that nothing writes into the caller's buffer after a failed
 * request has returned, and that the handle still works afterwards.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TS     (64u << 10) /* task size for multi-task requests */
#define NTASKS 16
#define FSIZE  (NTASKS * TS) /* the test file */
#define SEED   21
#define CANARY 0x5A

/* ------------------------------------------------------------------ */
/* Fault injection                                                     */
/* ------------------------------------------------------------------ */

struct fault {
	int64_t at, len; /* a call whose range meets [at, at+len) fails */
	int err;
	long delay_ms; /* sleep before failing */
	int partial;   /* the call starting at at moves half, once */
	int partial_done;
};

static struct {
	pthread_mutex_t lock;
	struct fault f[2];
	int nfaults;
	int eintr;      /* every first attempt fails with EINTR */
	int eagain;     /* every first attempt fails with EAGAIN */
	size_t max_len; /* a call moves at most this many bytes; 0: all */
	long slow_ms;   /* calls that do not fail sleep this long first */
} inj = {.lock = PTHREAD_MUTEX_INITIALIZER};

static atomic_int calls, eintrs, fails;
static _Thread_local int retry_toggle;

static void inject_reset(void)
{
	gpufile__sys_reset();
	pthread_mutex_lock(&inj.lock);
	memset(inj.f, 0, sizeof(inj.f));
	inj.nfaults = 0;
	inj.eintr = inj.eagain = 0;
	inj.max_len = 0;
	inj.slow_ms = 0;
	pthread_mutex_unlock(&inj.lock);
	atomic_store(&calls, 0);
	atomic_store(&eintrs, 0);
	atomic_store(&fails, 0);
}

static void add_fault(int64_t at, int64_t len, int err, long delay_ms,
                      int partial)
{
	pthread_mutex_lock(&inj.lock);
	inj.f[inj.nfaults++] = (struct fault){.at = at,
	                                      .len = len,
	                                      .err = err,
	                                      .delay_ms = delay_ms,
	                                      .partial = partial};
	pthread_mutex_unlock(&inj.lock);
}

/* Decides what a call of len bytes at off does: returns -1 with errno
 * set to fail it, else 0 with *len_out the bytes to move. */
static int decide(size_t len, off_t off, size_t *len_out)
{
	long delay = 0, slow;
	int err = 0;

	atomic_fetch_add(&calls, 1);
	pthread_mutex_lock(&inj.lock);
	if ((inj.eintr || inj.eagain) && !retry_toggle) {
		retry_toggle = 1;
		pthread_mutex_unlock(&inj.lock);
		atomic_fetch_add(&eintrs, 1);
		errno = inj.eintr ? EINTR : EAGAIN;
		return -1;
	}
	retry_toggle = 0;
	*len_out = inj.max_len && len > inj.max_len ? inj.max_len : len;
	for (int i = 0; i < inj.nfaults; i++) {
		struct fault *f = &inj.f[i];

		if (off + (int64_t)len <= f->at || off >= f->at + f->len)
			continue;
		if (f->partial && !f->partial_done && off == f->at) {
			f->partial_done = 1;
			*len_out = len / 2 ? len / 2 : 1;
			break;
		}
		err = f->err;
		delay = f->delay_ms;
		break;
	}
	slow = inj.slow_ms;
	pthread_mutex_unlock(&inj.lock);
	if (err) {
		if (delay)
			test_sleep_ms(delay);
		atomic_fetch_add(&fails, 1);
		errno = err;
		return -1;
	}
	if (slow)
		test_sleep_ms(slow);
	return 0;
}

static ssize_t faulty_pread(int fd, void *buf, size_t len, off_t off)
{
	size_t n;

	if (decide(len, off, &n))
		return -1;
	return pread(fd, buf, n, off);
}

static ssize_t faulty_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	size_t n;

	if (decide(len, off, &n))
		return -1;
	return pwrite(fd, buf, n, off);
}

static ssize_t faulty_preadv2(int fd, const struct iovec *iov, int cnt,
                              off_t off, int flags)
{
	size_t n, len = 0;
	struct iovec one;

	for (int i = 0; i < cnt; i++)
		len += iov[i].iov_len;
	if (decide(len, off, &n))
		return -1;
	if (cnt != 1)
		return preadv2(fd, iov, cnt, off, flags);
	one.iov_base = iov[0].iov_base;
	one.iov_len = n;
	return preadv2(fd, &one, 1, off, flags);
}

static void inject_install(void)
{
	gpufile__sys.pread = faulty_pread;
	gpufile__sys.pwrite = faulty_pwrite;
	gpufile__sys.preadv2 = faulty_preadv2;
}

static gpufile_counter_t counter(int is_write)
{
	gpufile_stats_t st;

	GPUFILE_INIT(st);
	gpufile_stats_self(&st);
	return st.path[GPUFILE_PATH_HOST][is_write];
}

/* A clean read of the whole file through h must return correct bytes. */
static void check_handle_works(gpufile_t *h, const char *what)
{
	unsigned char *buf = test_malloc(FSIZE);
	ssize_t n;

	memset(buf, 0, FSIZE);
	n = gpufile_pread(h, buf, FSIZE, 0);
	CHECK_EQ(n, FSIZE);
	if (n != FSIZE || test_mismatch(buf, FSIZE, SEED, 0) != -1) {
		fprintf(stderr, "  handle broken after %s: %zd, %s\n", what, n,
		        gpufile_errmsg());
		test_failures++;
	}
	free(buf);
}

/* ------------------------------------------------------------------ */
/* A message wrapped in another                                        */
/* ------------------------------------------------------------------ */

static void check_message(const char *want)
{
	CHECK_CONTAINS(gpufile_errmsg(), want);
	CHECK_EQ(strlen(gpufile_errmsg()), strlen(want));
}

/* Callers wrap the thread's message in theirs ("batch entry 0: %s",
 * gpufile_errmsg()); formatting straight into the buffer being read cut
 * the inner message (seen: "batch entry 0: batch entry 0: /m: ..."). */
static void test_wrapped_message(void)
{
	char path[600], want[1024];

	memset(path, 'p', sizeof(path) - 1);
	path[0] = '/';
	path[sizeof(path) - 1] = '\0';
	CHECK_EQ(gpufile__fail(-EIO, "reading %s: disk on fire", path), -EIO);
	CHECK_EQ(gpufile__fail(-EIO, "batch entry 7: %s", gpufile_errmsg()),
	         -EIO);
	snprintf(want, sizeof(want), "batch entry 7: reading %s: disk on fire",
	         path);
	check_message(want);
	/* Wrapped at the end as well as at the start. */
	CHECK_EQ(gpufile__fail(-EIO, "%s (and more)", gpufile_errmsg()), -EIO);
	snprintf(want, sizeof(want),
	         "batch entry 7: reading %s: disk on fire (and more)", path);
	check_message(want);
	/* Set again from itself, and from a part of itself. */
	CHECK_EQ(gpufile__fail_msg(-EIO, gpufile_errmsg()), -EIO);
	check_message(want);
	CHECK_EQ(gpufile__fail_msg(-EIO, gpufile_errmsg() + 15), -EIO);
	check_message(want + 15);
	gpufile__clear_error();
}

/* ------------------------------------------------------------------ */
/* Arguments and open modes                                            */
/* ------------------------------------------------------------------ */

static void test_arguments(void)
{
	const char *path = test_path("args");
	const char *missing = test_path("does-not-exist");
	unsigned char buf[64];
	gpufile_future_t *f = (gpufile_future_t *)buf;
	gpufile_t *h = (gpufile_t *)buf, *w = NULL;
	gpufile_counter_t before, after;

	CHECK_EQ(test_make_file(path, 1000, SEED), 0);

	CHECK_EQ(gpufile_open(&h, missing, "r"), -ENOENT);
	CHECK(h == NULL);
	CHECK_CONTAINS(gpufile_errmsg(), missing);
	CHECK_EQ(gpufile_open(&h, test_dir(), "r"), -EISDIR);
	CHECK(h == NULL);
	CHECK_CONTAINS(gpufile_errmsg(), test_dir());
	CHECK_EQ(gpufile_open(&h, test_dir(), "r+"), -EISDIR);
	CHECK_EQ(gpufile_open(&h, test_dir(), "w"), -EISDIR);
	{
		static const char *const bad[] = {"rw", "x",  "",  "rb", "r+w",
		                                  "wa", " r", "R", "a+"};
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			h = (gpufile_t *)buf;
			CHECK_EQ(gpufile_open(&h, path, bad[i]),
			         GPUFILE_EFLAGS);
			CHECK(h == NULL);
			CHECK_CONTAINS(gpufile_errmsg(), path);
		}
		CHECK_EQ(gpufile_open(&h, path, NULL), GPUFILE_EFLAGS);
		CHECK(h == NULL);
		CHECK_EQ(gpufile_open(&h, missing, "x"), GPUFILE_EFLAGS);
		CHECK(access(missing, F_OK) != 0);
	}
	CHECK(strcmp(gpufile_strerror(GPUFILE_EFLAGS), "invalid open flags") ==
	      0);
	CHECK(strcmp(gpufile_strerror(-ENOENT), strerror(ENOENT)) == 0);
	CHECK(gpufile_strerror(-999999) != NULL);
	CHECK_EQ(gpufile_open(NULL, path, "r"), -EINVAL);
	CHECK_EQ(gpufile_open(&h, NULL, "r"), -EINVAL);
	CHECK_EQ(gpufile_close(NULL), 0);

	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	CHECK_EQ(gpufile_open(&w, test_path("args-w"), "w"), 0);
	if (!h || !w)
		return;

	before = counter(0);
	/* Wrong direction. */
	CHECK_EQ(gpufile_pread(w, buf, 10, 0), -EBADF);
	CHECK_CONTAINS(gpufile_errmsg(), test_path("args-w"));
	CHECK_EQ(gpufile_pwrite(h, buf, 10, 0), -EBADF);
	CHECK_CONTAINS(gpufile_errmsg(), path);
	CHECK_EQ(gpufile_pread_async(w, buf, 10, 0, &f), -EBADF);
	CHECK(f == NULL);
	f = (gpufile_future_t *)buf;
	CHECK_EQ(gpufile_pwrite_async(h, buf, 10, 0, &f), -EBADF);
	CHECK(f == NULL);
	/* NULL buffer, bad offsets and sizes. */
	CHECK_EQ(gpufile_pread(h, NULL, 10, 0), -EFAULT);
	CHECK_EQ(gpufile_pread(h, NULL, 0, 0), 0);
	CHECK_EQ(gpufile_pwrite(w, NULL, 10, 0), -EFAULT);
	CHECK_EQ(gpufile_pread(h, buf, 10, -1), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "-1");
	CHECK_EQ(gpufile_pwrite(w, buf, 10, INT64_MIN), -EINVAL);
	CHECK_EQ(gpufile_pread(h, buf, 100, INT64_MAX - 10), -EINVAL);
	CHECK_EQ(gpufile_pread(h, buf, SIZE_MAX, 0), -EINVAL);
	CHECK_EQ(gpufile_pread(h, buf, (size_t)INT64_MAX + 1, 0), -EINVAL);
	CHECK_EQ(gpufile_pwrite(w, buf, 2, INT64_MAX - 1), -EINVAL);
	CHECK_EQ(gpufile_pread_async(h, buf, 10, -5, &f), -EINVAL);
	CHECK(f == NULL);
	CHECK_EQ(gpufile_pread_async(h, buf, 10, 0, NULL), -EINVAL);
	CHECK_EQ(gpufile_pread(NULL, buf, 10, 0), -EINVAL);
	CHECK_EQ(gpufile_pwrite(NULL, buf, 10, 0), -EINVAL);
	CHECK(gpufile_size(NULL) < 0);
	CHECK(gpufile_sync(NULL) < 0);
	CHECK(gpufile_path_info(NULL, NULL, NULL, 0) < 0);
	/* Reading at INT64_MAX - size is fine: past EOF, 0 bytes. */
	CHECK_EQ(gpufile_pread(h, buf, 10, INT64_MAX - 10), 0);
	after = counter(0);
	/* Rejected arguments never reach the counters as requests. */
	CHECK_EQ(after.errors - before.errors, 0);

	CHECK_EQ(gpufile_close(h), 0);
	CHECK_EQ(gpufile_close(w), 0);
}

static int open_emfile(const char *path, int flags, mode_t mode)
{
	(void)path;
	(void)flags;
	(void)mode;
	errno = EMFILE;
	return -1;
}

static int fstat_eio(int fd, struct stat *st)
{
	(void)fd;
	(void)st;
	errno = EIO;
	return -1;
}

static void test_open_faults(void)
{
	const char *path = test_path("args");
	gpufile_t *h = NULL;
	int fds_before = 0, fds_after = 0;

	for (int fd = 0; fd < 256; fd++)
		fds_before += fcntl(fd, F_GETFD) >= 0;
	gpufile__sys.open = open_emfile;
	CHECK_EQ(gpufile_open(&h, path, "r"), -EMFILE);
	CHECK(h == NULL);
	CHECK_CONTAINS(gpufile_errmsg(), path);
	gpufile__sys_reset();
	gpufile__sys.fstat = fstat_eio;
	CHECK_EQ(gpufile_open(&h, path, "r"), -EIO);
	CHECK(h == NULL);
	CHECK_CONTAINS(gpufile_errmsg(), path);
	gpufile__sys_reset();
	for (int fd = 0; fd < 256; fd++)
		fds_after += fcntl(fd, F_GETFD) >= 0;
	CHECK_EQ(fds_after, fds_before); /* a failed open leaks nothing */
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	CHECK_EQ(gpufile_close(h), 0);
}

/* ------------------------------------------------------------------ */
/* A file truncated under a read                                       */
/* ------------------------------------------------------------------ */

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_open, gate_blocked;
static int64_t gate_from; /* calls at or after this offset wait */

static ssize_t gated_pread(int fd, void *buf, size_t len, off_t off)
{
	if (off >= gate_from) {
		pthread_mutex_lock(&gate_lock);
		gate_blocked++;
		pthread_cond_broadcast(&gate_cond);
		while (!gate_open)
			pthread_cond_wait(&gate_cond, &gate_lock);
		pthread_mutex_unlock(&gate_lock);
	}
	return pread(fd, buf, len, off);
}

static void test_truncation(void)
{
	const char *path = test_path("truncate");
	unsigned char *buf = test_malloc(FSIZE + 64);
	const int64_t new_size = 300000;
	gpufile_future_t *f = NULL;
	gpufile_t *h = NULL;
	ssize_t n;
	int fd;

	CHECK_EQ(gpufile_set_task_size(TS), 0);
	CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);

	/* Between reads. */
	CHECK_EQ(test_make_file(path, FSIZE, SEED), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		goto out;
	CHECK_EQ(gpufile_pread(h, buf, FSIZE, 0), FSIZE);
	CHECK_EQ(truncate(path, new_size), 0);
	memset(buf, CANARY, FSIZE + 64);
	n = gpufile_pread(h, buf, FSIZE, 0);
	CHECK_EQ(n, new_size);
	CHECK_EQ(test_mismatch(buf, (size_t)new_size, SEED, 0), -1);
	CHECK_EQ(
	    test_mismatch_byte(buf + new_size, FSIZE - new_size + 64, CANARY),
	    -1);
	CHECK_EQ(gpufile_pread(h, buf, TS, 2 * new_size), 0);
	CHECK_EQ(gpufile_size(h), new_size);
	/* Asynchronously too. */
	memset(buf, CANARY, FSIZE);
	CHECK_EQ(gpufile_pread_async(h, buf, FSIZE, 1, &f), 0);
	CHECK_EQ(gpufile_future_wait(f), new_size - 1);
	gpufile_future_free(f);
	CHECK_EQ(test_mismatch(buf, (size_t)new_size - 1, SEED, 1), -1);
	CHECK_EQ(test_mismatch_byte(buf + new_size - 1, FSIZE - new_size + 1,
	                            CANARY),
	         -1);
	CHECK_EQ(gpufile_close(h), 0);

	/* While a read runs: tasks from 512 KiB on wait until the file has
	 * been truncated; tasks before may run before or after. */
	for (int round = 0; round < 4; round++) {
		CHECK_EQ(test_make_file(path, FSIZE, SEED), 0);
		CHECK_EQ(gpufile_open(&h, path, "r"), 0);
		if (!h)
			goto out;
		pthread_mutex_lock(&gate_lock);
		gate_open = 0;
		gate_blocked = 0;
		gate_from = 512 << 10;
		pthread_mutex_unlock(&gate_lock);
		gpufile__sys.pread = gated_pread;
		memset(buf, CANARY, FSIZE);
		CHECK_EQ(gpufile_pread_async(h, buf, FSIZE, 0, &f), 0);
		pthread_mutex_lock(&gate_lock);
		while (gate_blocked == 0)
			pthread_cond_wait(&gate_cond, &gate_lock);
		pthread_mutex_unlock(&gate_lock);
		fd = open(path, O_WRONLY);
		CHECK(fd >= 0);
		CHECK_EQ(ftruncate(fd, new_size - round * 1000), 0);
		close(fd);
		pthread_mutex_lock(&gate_lock);
		gate_open = 1;
		pthread_cond_broadcast(&gate_cond);
		pthread_mutex_unlock(&gate_lock);
		n = gpufile_future_wait(f);
		gpufile_future_free(f);
		gpufile__sys_reset();
		CHECK(n >= new_size - round * 1000 && n <= (512 << 10));
		if (n > 0)
			CHECK_EQ(test_mismatch(buf, (size_t)n, SEED, 0), -1);
		CHECK_EQ(gpufile_close(h), 0);
	}
out:
	gpufile__sys_reset();
	free(buf);
	gpufile_config_reset();
}

/* ------------------------------------------------------------------ */
/* Injected faults                                                     */
/* ------------------------------------------------------------------ */

/* Reads (or writes) [off, off+size) with the faults installed and checks
 * the data; the request must succeed. */
static void expect_ok(gpufile_t *h, int is_write, size_t size, int64_t off,
                      const char *what)
{
	unsigned char *buf = test_malloc(size + 1);
	ssize_t n;

	if (is_write) {
		test_fill(buf, size, SEED, (uint64_t)off);
		inject_install();
		n = gpufile_pwrite(h, buf, size, off);
		inject_reset();
		CHECK_EQ(n, (ssize_t)size);
		memset(buf, 0, size);
		CHECK_EQ(gpufile_pread(h, buf, size, off), (ssize_t)size);
	} else {
		memset(buf, 0, size);
		inject_install();
		n = gpufile_pread(h, buf, size, off);
		inject_reset();
		CHECK_EQ(n, (ssize_t)size);
	}
	if (n != (ssize_t)size ||
	    test_mismatch(buf, size, SEED, (uint64_t)off) != -1) {
		fprintf(stderr, "  %s %s %zu@%lld: %zd (%s)\n", what,
		        is_write ? "write" : "read", size, (long long)off, n,
		        n < 0 ? gpufile_errmsg() : "data differs");
		test_failures++;
	}
	free(buf);
}

static void test_retries(gpufile_t *h, int direct_on)
{
	static const struct {
		size_t size;
		int64_t off;
	} shapes[] = {
	    {1, 0}, {4095, 1}, {TS, 0}, {3 * TS + 17, 5}, {FSIZE, 0},
	};

	for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
		for (int w = 0; w < 2; w++) {
			inj.eintr = 1;
			expect_ok(h, w, shapes[i].size, shapes[i].off, "EINTR");
			inj.eagain = 1;
			expect_ok(h, w, shapes[i].size, shapes[i].off,
			          "EAGAIN");
			if (direct_on) {
				/* O_DIRECT moves whole blocks, or stops at
				 * end-of-file. */
				inj.max_len = 8192;
				expect_ok(h, w, shapes[i].size, shapes[i].off,
				          "8 KiB transfers");
				continue;
			}
			if (shapes[i].size <= 3 * TS + 17) {
				inj.max_len = 1;
				expect_ok(h, w, shapes[i].size, shapes[i].off,
				          "1-byte transfers");
			}
			inj.max_len = 4095;
			expect_ok(h, w, shapes[i].size, shapes[i].off,
			          "4095-byte transfers");
			inj.max_len = 4095;
			inj.eintr = 1;
			expect_ok(h, w, shapes[i].size, shapes[i].off,
			          "EINTR and short transfers");
		}
	}
	/* Every first attempt was interrupted and retried. */
	inj.eintr = 1;
	inject_install();
	{
		unsigned char *buf = test_malloc(FSIZE);
		CHECK_EQ(gpufile_pread(h, buf, FSIZE, 0), FSIZE);
		CHECK(atomic_load(&eintrs) >= NTASKS);
		CHECK_EQ(atomic_load(&calls), 2 * atomic_load(&eintrs));
		free(buf);
	}
	inject_reset();
}

/* Set: expect_fail's writes are gpufile_pwrite_async, the pool's (a
 * blocking buffered write runs every task in the caller, one at a time). */
static int write_async;

/* A request with the faults installed must fail with err, naming the file
 * and the offset of the failing task, and the handle must work after. */
static void expect_fail(gpufile_t *h, const char *path, int is_write,
                        size_t size, int64_t off, int err, int64_t err_off,
                        const char *what)
{
	unsigned char *buf = test_malloc(size + 1);
	gpufile_counter_t before, after;
	char offset_text[64];
	ssize_t n;

	test_fill(buf, size, SEED, (uint64_t)off);
	before = counter(is_write);
	inject_install();
	if (is_write && write_async) {
		gpufile_future_t *f = NULL;

		n = gpufile_pwrite_async(h, buf, size, off, &f);
		if (n == 0)
			n = gpufile_future_wait(f);
		gpufile_future_free(f);
	} else {
		n = is_write ? gpufile_pwrite(h, buf, size, off)
		             : gpufile_pread(h, buf, size, off);
	}
	inject_reset();
	after = counter(is_write);
	CHECK_EQ(n, err);
	if (n != err)
		fprintf(stderr, "  %s: %zd (%s), want %d\n", what, n,
		        gpufile_errmsg(), err);
	CHECK_CONTAINS(gpufile_errmsg(), path);
	snprintf(offset_text, sizeof(offset_text), "offset %lld",
	         (long long)err_off);
	CHECK_CONTAINS(gpufile_errmsg(), offset_text);
	CHECK_EQ(after.errors - before.errors, 1);
	CHECK_EQ(after.ops - before.ops, 1);
	/* Bytes count as each task ends: every task below the failing one
	 * ran whole (the error kept is the lowest-offset one), the failing
	 * one adds none, tasks above it may have run or not. */
	CHECK(after.bytes - before.bytes >= (uint64_t)(err_off - off));
	CHECK(after.bytes - before.bytes < size);

	if (is_write) {
		/* Put the file back. */
		CHECK_EQ(gpufile_pwrite(h, buf, size, off), (ssize_t)size);
	}
	check_handle_works(h, what);
	free(buf);
}

static void test_task_faults(gpufile_t *h, const char *path)
{
	static const int tasks[] = {0, 7, NTASKS - 1};

	for (size_t i = 0; i < sizeof(tasks) / sizeof(tasks[0]); i++) {
		const int64_t at = (int64_t)tasks[i] * TS;

		/* Whole-file request: the task's start fails. */
		add_fault(at, 1, EIO, 0, 0);
		expect_fail(h, path, 0, FSIZE, 0, -EIO, at, "EIO read");
		/* The failing byte in the middle of the task. */
		add_fault(at + TS / 2, 1, EIO, 0, 0);
		expect_fail(h, path, 0, FSIZE, 0, -EIO, at,
		            "EIO mid-task read");
		/* Unaligned request: the first task starts at its offset. */
		add_fault(at, TS, EIO, 0, 0);
		expect_fail(h, path, 0, FSIZE - 3, 3, -EIO, at ? at : 3,
		            "EIO unaligned read");
		/* Writes. */
		add_fault(at, 1, ENOSPC, 0, 0);
		expect_fail(h, path, 1, FSIZE, 0, -ENOSPC, at, "ENOSPC write");
		add_fault(at, TS, EDQUOT, 0, 1);
		expect_fail(h, path, 1, FSIZE, 0, -EDQUOT, at,
		            "EDQUOT after a short write");
		add_fault(at, 1, EIO, 0, 0);
		expect_fail(h, path, 1, FSIZE, 0, -EIO, at, "EIO write");
	}
	/* Single-task requests (run in the caller's thread). */
	add_fault(TS, 1, EIO, 0, 0);
	expect_fail(h, path, 0, 100, TS, -EIO, TS, "EIO small read");
	add_fault(TS, TS, ENOSPC, 0, 1);
	expect_fail(h, path, 1, 100, TS, -ENOSPC, TS, "ENOSPC small write");

	/* A failure in the second task of a write that starts one byte
	 * before it: an error, never the count of the first task. */
	add_fault(2 * TS, 1, EDQUOT, 0, 0);
	expect_fail(h, path, 1, TS + 1, 2 * TS - 1, -EDQUOT, 2 * TS,
	            "EDQUOT second task");

	/* Two failures: the lower offset's error is returned, even when it
	 * comes last. */
	add_fault(2 * TS, 1, EIO, 150, 0);
	add_fault(12 * TS, 1, ENXIO, 0, 0);
	expect_fail(h, path, 0, FSIZE, 0, -EIO, 2 * TS,
	            "two faults, lower last");
	add_fault(12 * TS, 1, ENXIO, 150, 0);
	add_fault(2 * TS, 1, EIO, 0, 0);
	expect_fail(h, path, 0, FSIZE, 0, -EIO, 2 * TS,
	            "two faults, lower first");
	add_fault(5 * TS, 1, ENOSPC, 150, 0);
	add_fault(9 * TS, 1, EDQUOT, 0, 0);
	expect_fail(h, path, 1, FSIZE, 0, -ENOSPC, 5 * TS, "two write faults");
}

/* The thread that claimed the lower failing task starts it only once the
 * higher task has failed: the lower error must still win. Under load this
 * order happened by chance (issue 11 item 12: "two faults, lower last:
 * -6 ... want -5" once in ~22 ASan runs, because a failure made every
 * task not yet started skip, lower ones included); here a hook forces it.
 * Needs a second thread to take the higher task: nthreads >= 2. */
static _Atomic int64_t late_at = -1; /* fires once, then -1 */

static void late_hook(struct gpufile__request *r, int64_t off)
{
	int64_t at = off;

	if (!atomic_compare_exchange_strong(&late_at, &at, -1))
		return;
	while (!atomic_load(&r->failed))
		test_sleep_ms(1);
}

static void test_lower_task_late(gpufile_t *h, const char *path)
{
	unsigned nthreads = 0;

	CHECK_EQ(gpufile_get_nthreads(&nthreads), 0);
	CHECK_EQ(gpufile_set_nthreads(nthreads < 2 ? 2 : nthreads), 0);
	atomic_store(&late_at, 2 * TS);
	gpufile__pool_task_hook = late_hook;
	add_fault(2 * TS, 1, EIO, 0, 0);
	add_fault(12 * TS, 1, ENXIO, 0, 0);
	expect_fail(h, path, 0, FSIZE, 0, -EIO, 2 * TS,
	            "two faults, lower task started after the higher failed");
	add_fault(5 * TS, 1, ENOSPC, 0, 0);
	add_fault(9 * TS, 1, EDQUOT, 0, 0);
	atomic_store(&late_at, 5 * TS);
	write_async = 1; /* a blocking one has no second thread */
	expect_fail(h, path, 1, FSIZE, 0, -ENOSPC, 5 * TS,
	            "two write faults, lower task started after the higher "
	            "failed");
	write_async = 0;
	gpufile__pool_task_hook = NULL;
	CHECK_EQ(gpufile_set_nthreads(nthreads), 0);
}

/* An error above the end of file is not a read's result: the read ends
 * at the end of file, whether the failing task ran before the end was
 * found (forced here: the task at the end waits for the failure) or was
 * skipped because it had been. */
static void test_error_past_eof(gpufile_t *h)
{
	unsigned char *buf = test_malloc(FSIZE + 4 * TS);
	unsigned nthreads = 0;

	CHECK_EQ(gpufile_get_nthreads(&nthreads), 0);
	CHECK_EQ(gpufile_set_nthreads(nthreads < 2 ? 2 : nthreads), 0);
	for (int forced = 0; forced < 2; forced++) {
		if (forced) {
			atomic_store(&late_at, FSIZE);
			gpufile__pool_task_hook = late_hook;
		}
		add_fault(FSIZE + TS, 1, EIO, 0, 0);
		inject_install();
		CHECK_EQ(gpufile_pread(h, buf, FSIZE + 4 * TS, 0), FSIZE);
		CHECK_EQ(test_mismatch(buf, FSIZE, SEED, 0), -1);
		inject_reset();
		gpufile__pool_task_hook = NULL;
	}
	CHECK_EQ(gpufile_set_nthreads(nthreads), 0);
	free(buf);
}

/* Async requests fail the same way. */
static void test_async_faults(gpufile_t *h, const char *path)
{
	unsigned char *buf = test_malloc(FSIZE);
	gpufile_future_t *f = NULL;
	char text[64];

	add_fault(4 * TS, 1, EIO, 0, 0);
	inject_install();
	CHECK_EQ(gpufile_pread_async(h, buf, FSIZE, 0, &f), 0);
	CHECK_EQ(gpufile_future_wait(f), -EIO);
	CHECK_CONTAINS(gpufile_errmsg(), path);
	snprintf(text, sizeof(text), "offset %lld", (long long)(4 * TS));
	CHECK_CONTAINS(gpufile_errmsg(), text);
	gpufile__clear_error();
	CHECK_EQ(gpufile_future_wait(f), -EIO); /* again: same, message too */
	CHECK_CONTAINS(gpufile_errmsg(), text);
	gpufile_future_free(f);
	inject_reset();

	add_fault(0, 1, ENOSPC, 0, 0);
	inject_install();
	CHECK_EQ(gpufile_pwrite_async(h, buf, TS, 0, &f), 0);
	CHECK_EQ(gpufile_future_wait(f), -ENOSPC);
	gpufile_future_free(f);
	inject_reset();
	/* Put the first task back. */
	test_fill(buf, TS, SEED, 0);
	CHECK_EQ(gpufile_pwrite(h, buf, TS, 0), TS);
	check_handle_works(h, "async faults");
	free(buf);
}

/* After a failed request returns, nothing may write into its buffer: the
 * other tasks are slow, so they would still be running if the request
 * had returned early. */
static void test_canary(gpufile_t *h)
{
	static const int tasks[] = {0, 7, NTASKS - 1};
	unsigned char *buf = test_malloc(FSIZE);
	unsigned char *snap = test_malloc(FSIZE);

	for (size_t i = 0; i < sizeof(tasks) / sizeof(tasks[0]); i++) {
		for (int async = 0; async < 2; async++) {
			gpufile_future_t *f = NULL;
			ssize_t n;

			memset(buf, CANARY, FSIZE);
			add_fault((int64_t)tasks[i] * TS, 1, EIO, 0, 0);
			inj.slow_ms = 60;
			inject_install();
			if (async) {
				CHECK_EQ(
				    gpufile_pread_async(h, buf, FSIZE, 0, &f),
				    0);
				n = gpufile_future_wait(f);
			} else {
				n = gpufile_pread(h, buf, FSIZE, 0);
			}
			memcpy(snap, buf, FSIZE);
			CHECK_EQ(n, -EIO);
			test_sleep_ms(250);
			if (memcmp(snap, buf, FSIZE) != 0) {
				fprintf(stderr,
				        "buffer changed after a failed %s read "
				        "(fault at task %d) returned\n",
				        async ? "async" : "blocking", tasks[i]);
				test_failures++;
			}
			gpufile_future_free(f);
			inject_reset();
		}
	}
	free(buf);
	free(snap);
}

static void run_faults(const char *backend)
{
	const char *path = test_path("faults");
	gpufile_t *h = NULL;

	CHECK_EQ(test_make_file(path, FSIZE, SEED), 0);
	CHECK_EQ(gpufile_config_set("direct_io", backend), 0);
	CHECK_EQ(gpufile_set_task_size(TS), 0);
	CHECK_EQ(gpufile_open(&h, path, "r+"), 0);
	if (!h)
		return;
	test_retries(h, strcmp(backend, "on") == 0);
	test_task_faults(h, path);
	test_lower_task_late(h, path);
	test_error_past_eof(h);
	test_async_faults(h, path);
	test_canary(h);
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_config_reset();
}

int main(void)
{
	static const char *const backends[] = {"off", "on", "auto"};

	alarm(300);
	test_wrapped_message();
	test_arguments();
	test_open_faults();
	test_truncation();
	for (size_t b = 0; b < sizeof(backends) / sizeof(backends[0]); b++)
		run_faults(backends[b]);
	gpufile_release();
	return test_finish("test_errors");
}
