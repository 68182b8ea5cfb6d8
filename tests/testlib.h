/* Small helpers shared by the test programs. Exit codes: 0 pass, 1 fail,
 * 77 skip. */
#ifndef GPUFILE_TESTLIB_H
#define GPUFILE_TESTLIB_H

/* Tests may use the unstable helpers (gpufile_config_reset, ...). */
#include "gpufile_private.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_SKIP 77

/*
 * True in an ASan build. GCC 12's AddressSanitizer (Debian 12) does not
 * hold its allocator's locks across fork(): a child forked while another
 * thread is inside malloc or free waits forever on the allocator's region
 * lock. Seen in test_fork's ASan stage, one run in about three: gdb on the
 * stuck child shows every thread in
 * SizeClassAllocator64::GetFromAllocator -> Mutex::Lock, none in
 * gpufile. Tests that fork while threads allocate, on purpose, skip in
 * that build; their plain and TSan builds run the same cases.
 */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN_FORK_UNSAFE 1
#else
#define TEST_ASAN_FORK_UNSAFE 0
/* A gate for the pool's tasks (gpufile__pool_task_hook): from
 * test_hold_tasks_from(off), every task at or above file offset off
 * stops until test_release_tasks(). A worker reaches a task of the held
 * part only after ending the task it ran before (host tasks end where
 * they run) and tasks are claimed in order, so once test_wait_held(n)
 * returns for n workers, every task below off has ended and none at or
 * above it has run. */
void test_hold_tasks_from(int64_t off);
void test_wait_held(int n);
void test_release_tasks(void);

/* The unsigned number after "key": in the JSON text j, or UINT64_MAX. */
uint64_t test_json_number(const char *j, const char *key);

#endif

extern int test_failures;

/* Records a failure (with file and line) when cond is false. */
#define CHECK(cond)                                                            \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, \
			        __LINE__, #cond);                              \
			test_failures++;                                       \
		}                                                              \
	} while (0)

#define CHECK_EQ(a, b)                                                         \
	do {                                                                   \
		long long _a = (long long)(a), _b = (long long)(b);            \
		if (_a != _b) {                                                \
			fprintf(stderr,                                        \
			        "%s:%d: %s == %s failed: %lld != %lld\n",      \
			        __FILE__, __LINE__, #a, #b, _a, _b);           \
			test_failures++;                                       \
		}                                                              \
	} while (0)

/* This process's statistics (gpufile_stats_self), counted as a failed
 * check when they cannot be read. */
gpufile_stats_t test_stats_self(void);

/* Drops this process (root) to user and group nobody (65534), with no
 * supplementary groups. Returns 0, or -1 when it could not. */
int test_become_nobody(void);

/* Whether this runs under CI (CI set, and not "", "0" or "false"; .ci/run
 * runs with CI=true). */
int test_in_ci(void);
/* A test (or a part of one, named by test) needs what (a program, a module
 * or a build feature) that scripts/deps.sh or scripts/test.sh installs,
 * and it is missing. Prints which. Returns the test's exit code: 77
 * (skipped), or under CI, where it must be there, 1 (failed). */
int test_missing(const char *test, const char *what);

/* A fresh folder under /tmp that user nobody can enter (mode 0711), for
 * the files and programs of checks run as nobody: GPUFILE_TEST_DIR sits
 * in the checkout, which may lie below a folder only its owner can enter
 * (root's /root, a 0700 home, a mktemp -d folder). Removed by
 * test_cleanup(). NULL, the reason printed, when it cannot be made. */
const char *test_nobody_dir(void);
/* The gpufile tool (GPUFILE_CLI) as nobody can run it: a copy of the
 * program and of the libgpufile.so.0 beside it in test_nobody_dir(),
 * started by a script there that points LD_LIBRARY_PATH at the copy.
 * NULL when there is no tool, or (the reason printed) no copy. */
const char *test_nobody_cli(void);

/* A fresh directory for the test's files (GPUFILE_TEST_DIR or /tmp),
 * removed by test_cleanup(). Returns its path. */
const char *test_dir(void);
/* Path of name inside test_dir(), in a static rotating buffer. */
const char *test_path(const char *name);
/* Fills buf with a pattern that depends on seed and each byte's offset. */
void test_fill(void *buf, size_t len, uint64_t seed, uint64_t offset);
/* Writes len pattern bytes (seed) to path; returns 0 or -1. */
int test_make_file(const char *path, size_t len, uint64_t seed);
/* Writes path as a safetensors file of one U8 tensor name of 8 bytes,
 * each value; a failure is counted. */
void test_make_st_u8(const char *path, const char *name, int value);
/* A mincore(2) that says every page is in the page cache: for
 * gpufile__sys.mincore in tests whose reads must find their file cached.
 * Reading a file in does not keep it there: the kernel may evict it at
 * any time, and on CI's machines under other tests' memory pressure it
 * did, even pages locked with mlock(2). A page said cached that is not is
 * read in when touched: the same bytes, only slower. */
int test_mincore_all_cached(void *addr, size_t len, unsigned char *vec);
/* The other side: no page is cached. */
int test_mincore_none_cached(void *addr, size_t len, unsigned char *vec);
/* The same for gpufile__sys.cachestat, which direct_io=auto asks before
 * mincore: every page of the range cached, none, or (as on a kernel
 * before 6.5) no cachestat at all, so that mincore answers. */
int test_cachestat_all_cached(int fd, uint64_t off, uint64_t len,
                              uint64_t *cached);
int test_cachestat_none_cached(int fd, uint64_t off, uint64_t len,
                               uint64_t *cached);
int test_cachestat_missing(int fd, uint64_t off, uint64_t len,
                           uint64_t *cached);
/* Removes test_dir() and everything in it. */
void test_cleanup(void);
/* Prints "N passed, M failed" style summary and returns the exit code. */
int test_finish(const char *name);

/* Records a failure when the string hay does not contain needle. */
#define CHECK_CONTAINS(hay, needle)                                            \
	do {                                                                   \
		const char *_h = (hay), *_n = (needle);                        \
		if (!_h || !_n || !strstr(_h, _n)) {                           \
			fprintf(stderr,                                        \
			        "%s:%d: \"%s\" does not contain \"%s\"\n",     \
			        __FILE__, __LINE__, _h ? _h : "(null)",        \
			        _n ? _n : "(null)");                           \
			test_failures++;                                       \
		}                                                              \
	} while (0)

/* Index of the first byte of buf that differs from the pattern test_fill
 * (seed, offset) would write, or -1 when all len bytes match. */
long long test_mismatch(const void *buf, size_t len, uint64_t seed,
                        uint64_t offset);
/* Index of the first byte of buf that is not c, or -1. */
long long test_mismatch_byte(const void *buf, size_t len, unsigned char c);
/* malloc that exits the test (code 1) when memory runs out. */
void *test_malloc(size_t len);
/* Reads the whole of path into a new buffer (test_malloc); *len receives
 * its size. Returns NULL when it cannot be read. */
void *test_read_file(const char *path, size_t *len);
/* Sleeps ms milliseconds. */
void test_sleep_ms(long ms);

/* A gpufile_close() run by a thread of its own (pthread_create with
 * test_close_thread and a struct test_closer): rc is its result, done is
 * set (atomically) once it has returned, for tests of closes that wait. */
struct test_closer {
	gpufile_t *h;
	int rc, done;
};
void *test_close_thread(void *arg);

/* ---- the gpufile tool ($GPUFILE_CLI, set by ctest) ---- */

/* The path of the gpufile tool, or NULL when there is none to run. */
const char *test_cli_path(void);
/* Runs `gpufile ARGS` (ARGS as printf formats them, through /bin/sh) with
 * stdout and stderr captured together in out (NUL-terminated, cut at
 * len - 1). Returns its exit status, 128 + N for signal N, or -1 when
 * there is no CLI or it cannot be started. */
int test_cli_run(char *out, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Makes the tool's runs that follow load the fake driver built beside it
 * (tests/fake_libcuda/lib, put on LD_LIBRARY_PATH). Returns 0 with the
 * variable's value before in *saved (allocated; NULL when it was unset)
 * for test_cli_fake_driver_end(), or -1 when there is no fake driver,
 * said on stderr ("no ...: PART part skipped"). */
int test_cli_fake_driver_begin(const char *part, char **saved);
/* Puts LD_LIBRARY_PATH back as saved (unset when NULL) and frees saved. */
void test_cli_fake_driver_end(char *saved);
/* test_cli_run() of ARGS, and a failure (printed with ARGS and the
 * output) unless the tool exits want with needle in its output. Returns
 * the exit status. */
int test_cli_expect(char *out, size_t len, int want, const char *needle,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* A gate for the pool's tasks (gpufile__pool_task_hook): from
 * test_hold_tasks_from(off), every task at or above file offset off
 * stops until test_release_tasks(). A worker reaches a task of the held
 * part only after ending the task it ran before (host tasks end where
 * they run) and tasks are claimed in order, so once test_wait_held(n)
 * returns for n workers, every task below off has ended and none at or
 * above it has run. */
void test_hold_tasks_from(int64_t off);
void test_wait_held(int n);
void test_release_tasks(void);

/* The unsigned number after "key": in the JSON text j, or UINT64_MAX. */
uint64_t test_json_number(const char *j, const char *key);

#endif
