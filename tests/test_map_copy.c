/*
 * Warm host reads copied from the handle's map of the file with streaming
 * stores (posix_io.c gpufile__map_read, map_copy.c), and the SIGBUS guard
 * that turns a file cut short during the copy into pread's short read.
 *
 * In forked children first (before this process starts any thread), since
 * they change the process's SIGBUS disposition:
 *   - a handler the program had before gpufile's still gets the SIGBUS
 *     that is not gpufile's;
 *   - with the default disposition, such a SIGBUS still ends the process;
 *   - a handler installed after gpufile's (as Python's faulthandler and
 *     pytest install one): gpufile puts its own back over it at the next
 *     copy, which still copies from the map; a file cut short during the
 *     copy is still the short read, and under a memory-mapped handle -EIO,
 *     the process alive; a SIGBUS that is not gpufile's (a fault, a
 *     raise()) still reaches that handler, every time, whether it jumps
 *     out, returns, or (as faulthandler does) puts back the handler it
 *     displaced and raises the signal again (then the process ends as it
 *     would without gpufile, the handler having run once);
 *   - host_map_copy=off never installs a handler;
 *   - as nobody (from root), where mincore() says every page is cached,
 *     nothing is copied from the map.
 * Then in this process: exact bytes (whole file, unaligned ranges, a range
 * across the end, canaries) with the map copy counted, the same with
 * host_map_copy=off and nothing copied from the map, auto's rule (AVX-512
 * and 8 or more usable CPUs), a buffer the caller cannot write (-EFAULT, not a
 * crash), a memory-mapped handle (the same copy; a file cut short under it is
 * -EIO, not SIGBUS), a gathered read cut short (-EIO naming the first run
 * lost), and last a file cut short between the populate and the copy (the guard
 * catches the fault, or the size check a cut inside the last page; the
 * range is read again, the result is the file's new end).
 */
#define _GNU_SOURCE
#include "gpufile.h"
#include "internal.h"
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB        (1u << 20)
#define SIZE       (24 * MiB)
#define SEED       11
#define CANARY_LEN 4096

static const char *file;
static int cut_during; /* test_cut_short: the file is cut during a copy */

static uint64_t map_bytes(void)
{
	uint64_t b = 0;

	gpufile__stream_copy_counts(&b, NULL);
	return b;
}

static uint64_t faults_caught(void)
{
	uint64_t c = 0;

	gpufile__stream_copy_counts(NULL, &c);
	return c;
}

/* Reads len bytes at off into a fresh buffer between canaries; returns
 * what gpufile_pread returned, with *bad set when a byte or a canary is
 * wrong. */
static ssize_t read_checked(size_t len, int64_t off, size_t file_size, int *bad)
{
	char *m = test_malloc(len + 2 * CANARY_LEN);
	char *buf = m + CANARY_LEN;
	gpufile_t *h = NULL;
	ssize_t n;
	size_t want;

	memset(m, 0xa5, len + 2 * CANARY_LEN);
	*bad = 0;
	if (gpufile_open(&h, file, "r")) {
		fprintf(stderr, "open: %s\n", gpufile_errmsg());
		free(m);
		*bad = 1;
		return -1;
	}
	n = gpufile_pread(h, buf, len, off);
	gpufile_close(h);
	want = (uint64_t)off >= file_size      ? 0
	       : file_size - (size_t)off < len ? file_size - (size_t)off
	                                       : len;
	if (n != (ssize_t)want ||
	    test_mismatch(buf, want, SEED, (uint64_t)off) != -1 ||
	    test_mismatch_byte(buf + len, CANARY_LEN, 0xa5) != -1 ||
	    test_mismatch_byte(m, CANARY_LEN, 0xa5) != -1)
		*bad = 1;
	/* Past the end: untouched, unless the file was cut short during the
	 * copy (test_cut_short), where the bytes the copy had reached may
	 * hold what the file held then. */
	if (!cut_during &&
	    test_mismatch_byte(buf + want, len - want, 0xa5) != -1)
		*bad = 1;
	free(m);
	return n;
}

static int cpu_has_avx512(void)
{
#if defined(__x86_64__) || defined(__i386__)
	return __builtin_cpu_supports("avx512f");
#else
	return 0;
#endif
}

static atomic_int mincore_calls;

static int counting_mincore(void *addr, size_t len, unsigned char *vec)
{
	atomic_fetch_add(&mincore_calls, 1);
	return test_mincore_all_cached(addr, len, vec);
}

/* The CPUs this process may run on, counted here rather than asked of
 * the library. */
static int usable_cpus(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set))
		return (int)sysconf(_SC_NPROCESSORS_ONLN);
	return CPU_COUNT(&set);
}

/* The map copy takes only ranges in the page cache (mincore); main()
 * tells the library every page is (test_mincore_all_cached), since the
 * kernel may evict the file between this read and the test's: a TSan run
 * among other tests lost its pages, and its reads took pread. Still read
 * in, so that the copies are of cached pages as a user's would be. */
static void warm(void)
{
	size_t len = 0;

	free(test_read_file(file, &len));
}

static size_t cut_to;

static void cut_short(struct gpufile *h, int64_t off, size_t len)
{
	(void)h;
	(void)len;
	/* Only the first task cuts: the count is then decided by it,
	 * whatever the task on the other thread did. */
	if (off == 0 && cut_to && truncate(file, (off_t)cut_to) == 0)
		cut_to = 0;
}

/* ---- children: the process's SIGBUS disposition ---- */

static sigjmp_buf user_env;
static volatile sig_atomic_t user_env_set;
static volatile sig_atomic_t user_handler_ran;

static void user_handler(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)si;
	(void)uc;
	/* A fault of gpufile's copy that reached the program's handler. */
	if (!user_env_set)
		_exit(20);
	user_handler_ran++;
	user_env_set = 0;
	siglongjmp(user_env, 1);
}

static void install_user_handler(void)
{
	struct sigaction act;

	memset(&act, 0, sizeof(act));
	act.sa_sigaction = user_handler;
	act.sa_flags = SA_SIGINFO;
	sigemptyset(&act.sa_mask);
	sigaction(SIGBUS, &act, NULL);
}

/* The disposition in place now. */
static struct sigaction in_place(void)
{
	struct sigaction cur;

	memset(&cur, 0, sizeof(cur));
	sigaction(SIGBUS, NULL, &cur);
	return cur;
}

/* A SIGBUS that is not gpufile's: a page of a map past its file's end. */
static void foreign_sigbus(void)
{
	const char *p = test_path("foreign.bin");
	int fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600);
	volatile char *m;

	if (fd < 0 || ftruncate(fd, 8192))
		_exit(3);
	m = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED || ftruncate(fd, 0))
		_exit(3);
	(void)m[4096];
}

/* One host read that takes the map copy; exits 4 where it did not. */
static void map_read_once(void)
{
	int bad;
	uint64_t before = map_bytes();

	if (read_checked(SIZE, 0, SIZE, &bad) != SIZE || bad)
		_exit(4);
	if (map_bytes() == before)
		_exit(5);
}

static int run_child(void (*fn)(void), int *status)
{
	pid_t pid = fork();

	if (pid < 0)
		return -1;
	if (pid == 0) {
		/* A SIGBUS passed on to nobody would fault again for ever: a
		 * loop that burns CPU, so a bound on CPU time (SIGXCPU) ends
		 * it, however slowly a loaded machine runs the child (a
		 * 60 s alarm killed a sound child under TSan beside two busy
		 * processes). */
		struct rlimit cpu = {.rlim_cur = 60, .rlim_max = 60};

		setrlimit(RLIMIT_CPU, &cpu);
		fn();
		_exit(0);
	}
	return waitpid(pid, status, 0) == pid ? 0 : -1;
}

static void child_handler_before(void)
{
	install_user_handler();
	map_read_once();
	user_env_set = 1;
	if (sigsetjmp(user_env, 1) == 0)
		foreign_sigbus();
	_exit(user_handler_ran ? 0 : 6);
}

static void child_default(void)
{
	struct rlimit no_core = {0, 0};

	setrlimit(RLIMIT_CORE, &no_core);
	map_read_once();
	foreign_sigbus();
	_exit(0); /* survived: the default disposition was lost */
}

/* A SIGBUS sent by raise() (si_code <= 0), not a fault: no instruction
 * takes it again when gpufile's handler returns, so the handler must
 * restore the default and send it again, or it is lost. */
static void child_default_raised(void)
{
	struct rlimit no_core = {0, 0};

	setrlimit(RLIMIT_CORE, &no_core);
	map_read_once();
	raise(SIGBUS);
	_exit(0); /* survived: the signal was swallowed */
}

/* In a child, on a copy of the file of its own (the parent reads its
 * file after the children), the file cut short under each mapped read:
 * a small read (memcpy under the guard) of a memory-mapped handle after
 * the cut, -EIO (else exits code); a host read (one task) cut during its
 * copy from the map, past the copy's first page, which returns the new
 * end with the right bytes, the fault caught (code + 1); a gathered read
 * cut during its copies, -EIO naming the first run lost (code + 2). */
static void cut_during_copy(int code)
{
	enum { RUNS = 512, RUN = 4096, STRIDE = 8192 };
	const size_t end = 2 * MiB + 7;
	int64_t offsets[RUNS];
	char *runs = test_malloc((size_t)RUNS * RUN);
	gpufile_mmap_t *m = NULL;
	gpufile_t *h = NULL;
	char small[4096];
	uint64_t caught = faults_caught();
	int bad;

	file = strdup(test_path("map_copy_child.bin"));
	if (!file || test_make_file(file, SIZE, SEED) ||
	    gpufile_mmap_open(&m, file, "r", 0, 0) ||
	    truncate(file, (off_t)end))
		_exit(3);
	if (gpufile_mmap_pread(m, small, sizeof(small), 3 * MiB) != -EIO ||
	    !strstr(gpufile_errmsg(), "shrank"))
		_exit(code);
	gpufile_mmap_close(m);

	if (test_make_file(file, SIZE, SEED))
		_exit(3);
	warm();
	cut_to = end;
	cut_during = 1;
	gpufile__map_read_hook = cut_short;
	if (read_checked(4 * MiB, 0, end, &bad) != (ssize_t)end || bad ||
	    cut_to != 0 || faults_caught() == caught)
		_exit(code + 1);

	if (test_make_file(file, SIZE, SEED) || gpufile_open(&h, file, "r"))
		_exit(3);
	for (int i = 0; i < RUNS; i++)
		offsets[i] = (int64_t)i * STRIDE;
	cut_to = 10 * STRIDE + 100; /* inside run 10, the first task's */
	if (gpufile_pread_gather(h, runs, RUN, RUNS, offsets) != -EIO ||
	    !strstr(gpufile_errmsg(), "run 10 "))
		_exit(code + 2);
	gpufile__map_read_hook = NULL;
	cut_during = 0;
	gpufile_close(h);
	free(runs);
	/* Whole again, for the child's next reads. */
	if (test_make_file(file, SIZE, SEED))
		_exit(3);
	warm();
}

static void child_handler_after(void)
{
	map_read_once();
	install_user_handler();
	/* Still copied from the map (map_read_once exits 5 where not), under
	 * gpufile's handler, put back in place. */
	map_read_once();
	if (in_place().sa_sigaction == user_handler)
		_exit(10);
	cut_during_copy(30);
	/* The program's handler gets what is not gpufile's: a fault, a
	 * raise(), and again after the next copy. */
	user_env_set = 1;
	if (sigsetjmp(user_env, 1) == 0)
		foreign_sigbus();
	if (user_handler_ran != 1)
		_exit(6);
	user_env_set = 1;
	if (sigsetjmp(user_env, 1) == 0)
		raise(SIGBUS);
	if (user_handler_ran != 2)
		_exit(13);
	map_read_once();
	user_env_set = 1;
	if (sigsetjmp(user_env, 1) == 0)
		foreign_sigbus();
	_exit(user_handler_ran == 3 ? 0 : 14);
}

/* A handler installed after gpufile's that deals with a raise() and
 * returns: called each time, and gpufile's goes back over it after each. */
static volatile sig_atomic_t returned_count;

static void returning_handler(int sig)
{
	(void)sig;
	returned_count++;
}

static void child_handler_returns(void)
{
	struct sigaction act;

	map_read_once();
	memset(&act, 0, sizeof(act));
	act.sa_handler = returning_handler;
	sigemptyset(&act.sa_mask);
	sigaction(SIGBUS, &act, NULL);
	map_read_once();
	raise(SIGBUS);
	if (returned_count != 1)
		_exit(15);
	if (in_place().sa_handler == returning_handler)
		_exit(16);
	raise(SIGBUS);
	if (returned_count != 2)
		_exit(17);
	map_read_once();
	_exit(0);
}

/* Python's faulthandler: installed after gpufile's (SA_NODEFER), it
 * writes its report, puts back the handler it displaced (gpufile's) and
 * raises the signal again. reports: the pipe the child writes to. */
static int reports = -1;
static int fh_flags;
static struct sigaction fh_displaced;

static void fh_like(int sig)
{
	if (write(reports, "H", 1) != 1)
		_exit(21);
	sigaction(sig, &fh_displaced, NULL);
	raise(sig);
}

static void child_restore_and_raise(void)
{
	struct rlimit no_core = {0, 0};
	struct sigaction act;

	setrlimit(RLIMIT_CORE, &no_core);
	map_read_once();
	memset(&act, 0, sizeof(act));
	act.sa_handler = fh_like;
	act.sa_flags = fh_flags;
	sigemptyset(&act.sa_mask);
	sigaction(SIGBUS, &act, &fh_displaced);
	cut_during_copy(30);
	if (write(reports, "R", 1) != 1)
		_exit(3);
	foreign_sigbus();
	_exit(0); /* survived: the default disposition was lost */
}

/* Runs child_restore_and_raise with the handler's flags; returns 1 where
 * it read, then died of the foreign SIGBUS after one report. */
static int restore_and_raise(int flags)
{
	int fds[2], st = 0, ok;
	char got[64];
	ssize_t n;

	if (pipe(fds))
		return 0;
	reports = fds[1];
	fh_flags = flags;
	ok = run_child(child_restore_and_raise, &st) == 0;
	close(fds[1]);
	n = read(fds[0], got, sizeof(got) - 1);
	close(fds[0]);
	got[n > 0 ? n : 0] = 0;
	fprintf(stderr,
	        "  faulthandler-like handler (flags 0x%x): %s, status 0x%x\n",
	        flags, got, st);
	ok = ok && strcmp(got, "RH") == 0;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	return ok && !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
#else
	return ok && WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS;
#endif
}

static void child_off(void)
{
	struct sigaction before, cur;
	int bad;

	/* The default, or a sanitizer's handler: whatever it is, it stays. */
	sigaction(SIGBUS, NULL, &before);
	gpufile_config_set("host_map_copy", "off");
	if (read_checked(SIZE, 0, SIZE, &bad) != SIZE || bad)
		_exit(4);
	if (map_bytes() != 0)
		_exit(7);
	if (sigaction(SIGBUS, NULL, &cur) ||
	    cur.sa_handler != before.sa_handler)
		_exit(8);
	_exit(0);
}

/* mincore() tells a process that neither owns nor may write the file that
 * every page is cached: there the map copy is not used (cold pages would
 * be faulted in one by one). Root drops to nobody with the handle open. */
static void child_not_owner(void)
{
	char *buf = test_malloc(SIZE);
	gpufile_t *h = NULL;
	uint64_t before;

	if (chmod(file, 0644) || gpufile_open(&h, file, "r"))
		_exit(3);
	if (test_become_nobody())
		_exit(9);
	before = map_bytes();
	if (gpufile_pread(h, buf, SIZE, 0) != SIZE ||
	    test_mismatch(buf, SIZE, SEED, 0) != -1)
		_exit(4);
	if (map_bytes() != before)
		_exit(7);
	/* The handle's reason says why direct_io=auto cannot tell cold
	 * ranges here, rather than "O_DIRECT available". */
	{
		char why[1024];

		if (gpufile_path_info(h, NULL, why, sizeof(why)) ||
		    !strstr(why, "O_DIRECT available, but direct_io=auto "
		                 "reads every range through the page cache: "
		                 "this process neither owns the file nor may "
		                 "write it"))
			_exit(8);
	}
	_exit(0);
}

static void test_children(void)
{
	int st = 0;

	CHECK_EQ(run_child(child_handler_before, &st), 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	fprintf(stderr, "  handler before gpufile's: status 0x%x\n", st);
	CHECK_EQ(run_child(child_default, &st), 0);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	/* Without gpufile, the sanitizer's own handler reports it and
	 * exits (1 for ASan, 66 for TSan). */
	CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0));
#else
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS);
#endif
	fprintf(stderr, "  default disposition: status 0x%x\n", st);
	CHECK_EQ(run_child(child_default_raised, &st), 0);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0));
#else
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS);
#endif
	fprintf(stderr, "  raise(SIGBUS), default disposition: status 0x%x\n",
	        st);
	CHECK_EQ(run_child(child_handler_after, &st), 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	fprintf(stderr, "  handler after gpufile's: status 0x%x\n", st);
	CHECK_EQ(run_child(child_handler_returns, &st), 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	fprintf(stderr, "  handler after gpufile's that returns: status 0x%x\n",
	        st);
	CHECK(restore_and_raise(SA_NODEFER));
	CHECK(restore_and_raise(0));
	CHECK_EQ(run_child(child_off, &st), 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	fprintf(stderr, "  host_map_copy=off: status 0x%x\n", st);
	if (geteuid() == 0) {
		CHECK_EQ(run_child(child_not_owner, &st), 0);
		CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
		fprintf(stderr, "  not the owner: status 0x%x\n", st);
	} else {
		fprintf(stderr, "  not-the-owner case needs root to drop to "
		                "nobody: skipped\n");
	}
}

/* ---- this process ---- */

static void test_bytes(void)
{
	static const struct {
		size_t len;
		int64_t off;
	} cases[] = {
	    {SIZE, 0},
	    {SIZE - 4097, 4097},
	    {5 * MiB + 123, 3 * MiB + 7},
	    {8 * MiB, SIZE - 3 * MiB - 11}, /* across the end */
	    {300 << 10, 1},                 /* just above the minimum */
	    {100 << 10, 5},                 /* below it: pread */
	};
	int bad;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ssize_t n =
		    read_checked(cases[i].len, cases[i].off, SIZE, &bad);

		if (bad)
			fprintf(stderr, "case %zu: %zd bytes\n", i, n);
		CHECK(!bad);
	}
}

static void test_counted(void)
{
	uint64_t before = map_bytes();
	gpufile_stats_t s0 = test_stats_self(), s1;
	int bad;

	CHECK_EQ(read_checked(SIZE, 0, SIZE, &bad), SIZE);
	CHECK(!bad);
	CHECK_EQ(map_bytes() - before, SIZE);
	/* The statistics say it too: all of the host path's bytes. */
	s1 = test_stats_self();
	CHECK_EQ(s1.map_copy_bytes - s0.map_copy_bytes, SIZE);
	CHECK_EQ(s1.path[GPUFILE_PATH_HOST][0].bytes -
	             s0.path[GPUFILE_PATH_HOST][0].bytes,
	         SIZE);
	/* And gpufile stats, seen from another process. */
	if (test_cli_path()) {
		char out[1 << 16], want[160];

		CHECK_EQ(test_cli_run(out, sizeof(out), "stats %d --json",
		                      (int)getpid()),
		         0);
		snprintf(want, sizeof(want), "\"map_copy_bytes\": %llu",
		         (unsigned long long)s1.map_copy_bytes);
		CHECK_CONTAINS(out, want);
		CHECK_EQ(
		    test_cli_run(out, sizeof(out), "stats %d", (int)getpid()),
		    0);
		snprintf(
		    want, sizeof(want),
		    "host reads copied from the file's map (host_map_copy, "
		    "gathered reads): %llu of %llu host-read bytes",
		    (unsigned long long)s1.map_copy_bytes,
		    (unsigned long long)s1.path[GPUFILE_PATH_HOST][0].bytes);
		CHECK_CONTAINS(out, want);
	}
	/* off: the same bytes, none from the map. */
	CHECK_EQ(gpufile_config_set("host_map_copy", "off"), 0);
	before = map_bytes();
	s0 = test_stats_self();
	CHECK_EQ(read_checked(SIZE, 0, SIZE, &bad), SIZE);
	CHECK(!bad);
	CHECK_EQ(map_bytes(), before);
	s1 = test_stats_self();
	CHECK_EQ(s1.map_copy_bytes, s0.map_copy_bytes);
	CHECK_EQ(s1.path[GPUFILE_PATH_HOST][0].bytes -
	             s0.path[GPUFILE_PATH_HOST][0].bytes,
	         SIZE);
	/* auto: the map only where the CPU has AVX-512's 64-byte stores and
	 * the process may run on 8 CPUs or more (on 2, pread: the map copy
	 * ran at half its speed there). */
	CHECK_EQ(gpufile_config_set("host_map_copy", "auto"), 0);
	before = map_bytes();
	CHECK_EQ(read_checked(SIZE, 0, SIZE, &bad), SIZE);
	CHECK(!bad);
	CHECK_EQ(map_bytes() - before,
	         cpu_has_avx512() && usable_cpus() >= 8 ? SIZE : 0);
	/* Where auto's rule takes pread, a read does not look its range
	 * up in the page cache for a copy it will not make (direct_io=off:
	 * its own lookup, for O_DIRECT, aside). */
	if (!(cpu_has_avx512() && usable_cpus() >= 8)) {
		CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);
		mincore_calls = 0;
		gpufile__sys.mincore = counting_mincore;
		CHECK_EQ(read_checked(SIZE, 0, SIZE, &bad), SIZE);
		CHECK(!bad);
		gpufile__sys.mincore = test_mincore_all_cached;
		CHECK_EQ(atomic_load(&mincore_calls), 0);
		CHECK_EQ(gpufile_config_set("direct_io", "auto"), 0);
	}
	CHECK_EQ(gpufile_config_set("host_map_copy", "on"), 0);
}

/* The file cut short to end inside the first task, after its range was
 * populated and before it is copied: the copy faults partway (or, within
 * its last page, reads zeros), the guard or the size check after the copy
 * sees it, and pread reads the range again to the new end. Read once as
 * six tasks and once as that one task alone. */
static void test_cut_short(size_t end, int faults)
{
	unsigned nthreads = 0;

	CHECK_EQ(gpufile_get_nthreads(&nthreads), 0);
	for (int alone = 0; alone < 2; alone++) {
		const size_t len = alone ? 4 * MiB : SIZE;
		const uint64_t caught = faults_caught();
		const gpufile_stats_t s0 = test_stats_self();
		int bad;

		if (test_make_file(file, SIZE, SEED)) {
			CHECK(0);
			return;
		}
		warm();
		gpufile_release();
		CHECK_EQ(gpufile_set_nthreads(1), 0);
		cut_to = end;
		cut_during = 1;
		gpufile__map_read_hook = cut_short;
		CHECK_EQ(read_checked(len, 0, end, &bad), end);
		CHECK(!bad);
		gpufile__map_read_hook = NULL;
		cut_during = 0;
		gpufile_release();
		CHECK_EQ(cut_to, 0);
		/* The first task's own copy faults when the cut is before
		 * its last page; a task copied on the other thread at the
		 * time may fault too, so only "at least one" is certain. */
		if (faults)
			CHECK(faults_caught() - caught >= 1);
		/* Every fault caught is in the statistics. */
		CHECK_EQ(test_stats_self().map_copy_faults - s0.map_copy_faults,
		         faults_caught() - caught);
		/* The task that cut was read again by pread: alone, no byte
		 * counts as copied from the map. (Among six, a task on the
		 * other thread may have copied its range before the cut.) */
		if (alone)
			CHECK_EQ(test_stats_self().map_copy_bytes,
			         s0.map_copy_bytes);
		fprintf(stderr,
		        "  cut to %zu bytes during the copy, %s: caught "
		        "%llu\n",
		        end, alone ? "one task" : "six tasks",
		        (unsigned long long)(faults_caught() - caught));
	}
	CHECK_EQ(gpufile_set_nthreads(nthreads), 0);
}

/* Memory-mapped handles take the same guarded copy: counted, exact, and
 * a file cut short under the map is -EIO naming it, not a SIGBUS. */
static void test_mmap_handle(void)
{
	char *buf = test_malloc(SIZE);
	char *ro =
	    mmap(NULL, 8 * MiB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	gpufile_mmap_t *m = NULL;
	uint64_t before = map_bytes();

	CHECK_EQ(gpufile_mmap_open(&m, file, "r", 0, 0), 0);
	CHECK_EQ(gpufile_mmap_pread(m, buf, SIZE, 0), SIZE);
	CHECK_EQ(test_mismatch(buf, SIZE, SEED, 0), -1);
	CHECK_EQ(map_bytes() - before, SIZE);
	CHECK_EQ(gpufile_mmap_pread(m, ro, 8 * MiB, 0), -EFAULT);
	CHECK_CONTAINS(gpufile_errmsg(), "cannot be written");
	CHECK_EQ(truncate(file, 3 * MiB), 0);
	CHECK_EQ(gpufile_mmap_pread(m, buf, SIZE, 0), -EIO);
	CHECK_CONTAINS(gpufile_errmsg(), "shrank");
	CHECK_CONTAINS(gpufile_errmsg(), file);
	gpufile_mmap_close(m);
	munmap(ro, 8 * MiB);
	free(buf);
	CHECK_EQ(test_make_file(file, SIZE, SEED), 0);
	warm();
}

/* A gathered read (gpufile_pread_gather) copies its runs from a map of
 * their span under the same guard: the file cut short before the first
 * task's copies (the hook) is -EIO naming the first run it lost, found by
 * pread from where the fault stopped the copies. */
static void test_gather_cut(void)
{
	enum { RUNS = 512, RUN = 4096, STRIDE = 8192 };
	/* Inside run 10, which the first task holds whatever nthreads is
	 * (a task is at least 64 KiB: 16 runs). The cut used to be in run
	 * 100: with 16 threads (128 KiB tasks) that is the fourth task's,
	 * which may have copied it before the first task cut the file:
	 * the gather then returned every byte (seen once on the 16-core
	 * GPU machine). Run with 16 threads here too. */
	const size_t cut = 10 * STRIDE + 100;
	int64_t offsets[RUNS];
	char *buf = test_malloc((size_t)RUNS * RUN);
	uint64_t caught = faults_caught();
	gpufile_t *h = NULL;
	unsigned nthreads = 0;
	ssize_t n;

	CHECK_EQ(gpufile_get_nthreads(&nthreads), 0);
	CHECK_EQ(gpufile_set_nthreads(16), 0);
	for (int i = 0; i < RUNS; i++)
		offsets[i] = (int64_t)i * STRIDE;
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread_gather(h, buf, RUN, RUNS, offsets), RUNS * RUN);
	CHECK_EQ(test_mismatch(buf + 7 * RUN, RUN, SEED, 7 * STRIDE), -1);
	cut_to = cut;
	cut_during = 1;
	gpufile__map_read_hook = cut_short;
	n = gpufile_pread_gather(h, buf, RUN, RUNS, offsets);
	gpufile__map_read_hook = NULL;
	cut_during = 0;
	CHECK_EQ(n, -EIO);
	CHECK_CONTAINS(gpufile_errmsg(), "run 10 ");
	CHECK_CONTAINS(gpufile_errmsg(), file);
	CHECK(faults_caught() - caught >= 1);
	fprintf(stderr, "  gather cut short: %s\n", gpufile_errmsg());
	gpufile_close(h);
	CHECK_EQ(gpufile_set_nthreads(nthreads), 0);
	free(buf);
	CHECK_EQ(test_make_file(file, SIZE, SEED), 0);
	warm();
}

/* A range not in the page cache is left to pread (whose readahead reads
 * it in better than the copy's faults would): the same bytes, none from
 * the map. */
static void test_uncached(void)
{
	const uint64_t before = map_bytes();
	int bad;

	gpufile__sys.mincore = test_mincore_none_cached;
	gpufile__sys.cachestat = test_cachestat_none_cached;
	CHECK_EQ(read_checked(SIZE, 0, SIZE, &bad), SIZE);
	CHECK(!bad);
	CHECK_EQ(map_bytes(), before);
	gpufile__sys.mincore = test_mincore_all_cached;
	gpufile__sys.cachestat = test_cachestat_all_cached;
}

static void test_unwritable(void)
{
	char *ro =
	    mmap(NULL, 8 * MiB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	gpufile_t *h = NULL;

	CHECK(ro != MAP_FAILED);
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread(h, ro, 8 * MiB, 0), -EFAULT);
	gpufile_close(h);
	munmap(ro, 8 * MiB);
}

int main(void)
{
	gpufile__sys.mincore = test_mincore_all_cached;
	gpufile__sys.cachestat = test_cachestat_all_cached;
	file = test_path("map_copy.bin");
	if (test_make_file(file, SIZE, SEED))
		return 1;
	warm();
	/* The library's own rule (map_copy.c): streaming stores need AVX2.
	 * Asked here rather than of the library, whose first answer would
	 * install its handler before the children start. */
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	if (!__builtin_cpu_supports("avx2"))
#endif
	{
		fprintf(stderr, "test_map_copy: this CPU has no streaming "
		                "stores gpufile uses (AVX2)\n");
		test_cleanup();
		return TEST_SKIP;
	}
	/* on: the copy with AVX2's stores too, which auto leaves to pread
	 * (test_counted checks auto's rule). */
	CHECK_EQ(gpufile_config_set("host_map_copy", "on"), 0);
	test_children();
	test_bytes();
	test_counted();
	test_uncached();
	test_unwritable();
	test_mmap_handle();
	test_gather_cut();
	/* Last: they cut the file short. Inside the first task, past its
	 * first page: the copy faults. Inside the last page of the first
	 * task: no fault (the page's tail reads as zeros), and only the
	 * size checked after the copy sees it. */
	test_cut_short(2 * MiB + 7, 1);
	test_cut_short(4 * MiB - 100, 0);
	return test_finish("test_map_copy");
}
