/*
 * A hostile environment: a symlink planted where an older gpufile put a
 * process's statistics segment is never touched; a segment (memfd) owned
 * by another user, with a wrong mode, magic, version or size, or not
 * sealed against shrinking, is refused with a message naming it; a writer
 * that truncates or scribbles over its segment while a reader loops never
 * crashes the reader (and its truncation fails: the seal); gpufile stats
 * (the CLI, GPUFILE_CLI) on a corrupt segment exits with an error, never
 * a crash; running out of file descriptors or of pinned memory gives a
 * clear error naming the file.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "stats_segment.h"
#define DEV_SIZE (4u << 20)
#include "fake_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *file;

static void reap(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* What a forged segment differs in. */
struct forgery {
	uint64_t magic;
	uint32_t version;
	size_t size;
	uid_t owner;
	mode_t mode;
	int garbage;  /* body of pattern bytes */
	int unsealed; /* no F_SEAL_SHRINK */
	int truncate; /* 1: shrink and regrow it in a loop (unsealed) */
};

/* A child that holds a forged segment memfd (named as gpufile's) and
 * waits to be killed. Returns its PID once the segment is in place. */
static pid_t forge(const struct forgery *f)
{
	int p[2];
	pid_t pid;
	char c;

	CHECK_EQ(pipe(p), 0);
	pid = fork();
	if (pid == 0) {
		struct stats_seg *s = calloc(1, sizeof(*s));
		size_t n = f->size < sizeof(*s) ? f->size : sizeof(*s);
		int fd = memfd_create(STATS_MEMFD_NAME,
		                      MFD_CLOEXEC | MFD_ALLOW_SEALING);

		if (!s || fd < 0)
			_exit(2);
		if (f->garbage)
			test_fill(s, sizeof(*s), 99, 0);
		s->magic = f->magic;
		s->version = f->version;
		s->size = sizeof(*s);
		s->pid = getpid();
		s->uid = (uint32_t)getuid();
		if (fchmod(fd, f->mode) || write(fd, s, n) != (ssize_t)n ||
		    ftruncate(fd, (off_t)f->size) ||
		    (f->owner != getuid() && fchown(fd, f->owner, (gid_t)-1)) ||
		    (!f->unsealed &&
		     fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW)))
			_exit(3);
		if (write(p[1], "r", 1) != 1)
			_exit(4);
		for (;;) {
			if (!f->truncate) {
				pause();
				continue;
			}
			/* Shrink and regrow under any reader that mapped it:
			 * without the seal check this kills it (SIGBUS). */
			if (ftruncate(fd, 0) || ftruncate(fd, (off_t)f->size) ||
			    pwrite(fd, s, n, 0) != (ssize_t)n)
				_exit(5);
		}
	}
	close(p[1]);
	CHECK_EQ(read(p[0], &c, 1), 1);
	close(p[0]);
	return pid;
}

/* Runs the CLI's stats on pid; returns its exit code, or 128+signal. */
static int cli_stats(pid_t pid, char *out, size_t len)
{
	const char *cli = getenv("GPUFILE_CLI");
	char cmd[1024];
	FILE *p;
	size_t n;
	int st;

	if (!cli || !*cli)
		return -1;
	snprintf(cmd, sizeof(cmd), "%s stats %d 2>&1", cli, (int)pid);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	n = fread(out, 1, len - 1, p);
	out[n] = '\0';
	{
		char rest[4096]; /* read it all: no SIGPIPE for the tool */
		while (fread(rest, 1, sizeof(rest), p) > 0)
			;
	}
	st = pclose(p);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	/* sh reports a crashed child as 128+signal */
	return WEXITSTATUS(st);
}

static void test_segments(void)
{
	char where[64], out[8192];
	gpufile_stats_t st;
	const size_t size = sizeof(struct stats_seg);
	const struct forgery good = {
	    STATS_SEG_MAGIC, STATS_SEG_VERSION, size, getuid(), 0600, 0, 0, 0};
	struct {
		const char *what;
		struct forgery f;
	} bad[] = {
	    {"another user's", good}, {"wrong magic", good},
	    {"wrong version", good},  {"too short", good},
	    {"too long", good},       {"mode 0644", good},
	    {"not sealed", good},     {"truncated in a loop", good},
	};
	pid_t pid;

	bad[0].f.owner = 12345;
	bad[1].f.magic = 0x4141414141414141ull;
	bad[2].f.version = STATS_SEG_VERSION + 7;
	bad[3].f.size = 100;
	bad[4].f.size = size + 4096;
	bad[5].f.mode = 0644;
	bad[6].f.unsealed = 1;
	bad[7].f.unsealed = 1;
	bad[7].f.truncate = 1;
	/* A valid forged segment reads: the checks below are about what
	 * differs, not about forging. */
	pid = forge(&good);
	GPUFILE_INIT(st);
	CHECK_EQ(gpufile_stats_read(pid, &st), 0);
	CHECK_EQ(st.pid, pid);
	reap(pid);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc;

		if (bad[i].f.owner != getuid() && getuid() != 0)
			continue; /* only root can give a file away */
		pid = forge(&bad[i].f);
		snprintf(where, sizeof(where), "/proc/%d/fd/", (int)pid);
		/* Many reads: the truncating writer races each of them. */
		for (int k = 0; k < (bad[i].f.truncate ? 2000 : 1); k++) {
			GPUFILE_INIT(st);
			rc = gpufile_stats_read(pid, &st);
			CHECK_EQ(rc, -EPROTO);
		}
		printf("%-20s segment: %d %s\n", bad[i].what, rc,
		       gpufile_errmsg());
		CHECK_CONTAINS(gpufile_errmsg(), where);
		if (bad[i].f.unsealed)
			CHECK_CONTAINS(gpufile_errmsg(), "F_SEAL_SHRINK");
		rc = cli_stats(pid, out, sizeof(out));
		if (rc >= 0) {
			CHECK_EQ(rc, 1);
			CHECK_CONTAINS(out, where);
		}
		reap(pid);
	}
	/* A valid header over garbage: the reader clamps what it reads. */
	{
		struct forgery g = good;
		gpufile_file_stat_t files[GPUFILE_MAX_FILE_STATS];
		int rc;

		g.garbage = 1;
		pid = forge(&g);
		rc = cli_stats(pid, out, sizeof(out));
		printf("garbage body: CLI exit %d\n", rc);
		CHECK(rc == 0 || rc == 1); /* an answer, not a crash */
		rc = gpufile_stats_files(pid, files, GPUFILE_MAX_FILE_STATS);
		CHECK(rc >= 0 && rc <= GPUFILE_MAX_FILE_STATS);
		reap(pid);
	}
}

/* A segment its writer is still creating: the memfd is among the
 * process's descriptors from memfd_create() on, but its mode is not
 * 0600 yet (or it is sealed) and its magic is not stored yet. A reader
 * in that moment sees no counters yet, as before the first I/O: not an
 * error (gpufile stats --watch of a process starting its first I/O, or
 * across an exec, used to stop on it). Each state of the creation,
 * frozen: the kernel's mode, empty; sized; sealed; mode 0600. */
static void test_being_created(void)
{
	char out[8192];
	gpufile_stats_t st;
	const size_t size = sizeof(struct stats_seg);
	const struct forgery states[] = {
	    {0, 0, 0, getuid(), 0777, 0, 1, 0},
	    {0, 0, size, getuid(), 0777, 0, 1, 0},
	    {0, 0, size, getuid(), 0666, 0, 0, 0},
	    {0, 0, size, getuid(), 0600, 0, 0, 0},
	};

	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
		pid_t pid = forge(&states[i]);
		int rc;

		GPUFILE_INIT(st);
		rc = gpufile_stats_read(pid, &st);
		printf("being created (state %zu): %d %s\n", i, rc,
		       rc ? gpufile_errmsg() : "no counters yet");
		CHECK_EQ(rc, 0);
		CHECK_EQ(st.start_time_ns, 0);
		CHECK_EQ(st.files_opened, 0);
		rc = cli_stats(pid, out, sizeof(out));
		if (rc >= 0) {
			CHECK_EQ(rc, 0);
			CHECK_CONTAINS(out, "no I/O yet");
		}
		reap(pid);
	}
}

/* A real segment whose own process turns hostile: it cannot shrink or
 * grow it (the seals), and what it scribbles into it while a reader
 * loops gives answers or refusals, never a crash. */
static void test_hostile_writer(void)
{
	int p[2];
	pid_t pid;
	char c;
	int status, refused = 0, read_ok = 0;

	CHECK_EQ(pipe(p), 0);
	pid = fork();
	if (pid == 0) {
		char buf[4096], link[64], path[64];
		gpufile_t *h;
		unsigned char *m;
		int fd = -1;

		close(p[0]);
		if (gpufile_open(&h, file, "r") ||
		    gpufile_pread(h, buf, sizeof(buf), 0) != sizeof(buf))
			_exit(2);
		for (int i = 0; i < 1024 && fd < 0; i++) {
			ssize_t n;
			snprintf(path, sizeof(path), "/proc/self/fd/%d", i);
			n = readlink(path, link, sizeof(link) - 1);
			if (n > 0) {
				link[n] = '\0';
				if (strstr(link, "memfd:" STATS_MEMFD_NAME))
					fd = i;
			}
		}
		if (fd < 0)
			_exit(3);
		/* The seals hold against the process itself. */
		if (ftruncate(fd, 0) == 0 || errno != EPERM)
			_exit(4);
		if (ftruncate(fd, 1 << 20) == 0 || errno != EPERM)
			_exit(5);
		if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE) == 0)
			_exit(6); /* F_SEAL_SEAL: no more seals */
		m = mmap(NULL, sizeof(struct stats_seg), PROT_READ | PROT_WRITE,
		         MAP_SHARED, fd, 0);
		if (m == MAP_FAILED)
			_exit(7);
		if (write(p[1], "r", 1) != 1)
			_exit(8);
		/* Scribble over everything behind the header (a bad header
		 * is refused; the forgeries above show that). */
		for (uint64_t k = 0;; k++)
			m[offsetof(struct stats_seg, nslots) +
			  (k * 7919) % (sizeof(struct stats_seg) -
			                offsetof(struct stats_seg, nslots))] =
			    (unsigned char)(k * 31);
	}
	close(p[1]);
	if (read(p[0], &c, 1) != 1) {
		waitpid(pid, &status, 0);
		CHECK(!"hostile writer failed");
		printf("hostile writer: exit %d\n",
		       WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		close(p[0]);
		return;
	}
	close(p[0]);
	for (int k = 0; k < 2000; k++) {
		gpufile_stats_t st;
		gpufile_file_stat_t files[GPUFILE_MAX_FILE_STATS];
		GPUFILE_INIT(st);
		int rc = gpufile_stats_read(pid, &st);

		CHECK(rc == 0 || rc == -EPROTO);
		if (rc == 0) {
			read_ok++;
			CHECK(strlen(st.command) < sizeof(st.command));
			CHECK(st.nsettings <= GPUFILE_MAX_SETTINGS);
		} else {
			refused++;
		}
		rc = gpufile_stats_files(pid, files, GPUFILE_MAX_FILE_STATS);
		CHECK(rc == -EPROTO ||
		      (rc >= 0 && rc <= GPUFILE_MAX_FILE_STATS));
	}
	printf("hostile writer: %d reads answered, %d refused, no crash\n",
	       read_ok, refused);
	reap(pid);
}

/* A symlink planted where an older gpufile put a segment
 * (/dev/shm/gpufile-UID-PID): the process never touches that name (its
 * segment is a memfd), the link and its target stay as they were, and the
 * process is observable. */
static void test_symlink_planted(void)
{
	const char *target = test_path("victim");
	char seg[128];
	int p[2], q[2];
	pid_t pid;
	struct stat st;
	gpufile_stats_t s;
	int status;
	char c;

	CHECK_EQ(test_make_file(target, 1000, 3), 0);
	CHECK_EQ(pipe(p), 0);
	CHECK_EQ(pipe(q), 0);
	pid = fork();
	if (pid == 0) {
		char buf[4096];
		gpufile_t *h;

		close(p[1]);
		close(q[0]);
		if (read(p[0], &c, 1) != 1)
			_exit(2);
		if (gpufile_open(&h, file, "r") ||
		    gpufile_pread(h, buf, sizeof(buf), 0) != sizeof(buf))
			_exit(3);
		gpufile_close(h);
		if (write(q[1], "r", 1) != 1 || read(p[0], &c, 1) != 0)
			_exit(4);
		_exit(0);
	}
	close(p[0]);
	close(q[1]);
	snprintf(seg, sizeof(seg), "/dev/shm/gpufile-%u-%d", (unsigned)getuid(),
	         (int)pid);
	unlink(seg);
	CHECK_EQ(symlink(target, seg), 0);
	CHECK_EQ(write(p[1], "x", 1), 1);
	CHECK_EQ(read(q[0], &c, 1), 1);
	GPUFILE_INIT(s);
	CHECK_EQ(gpufile_stats_read(pid, &s), 0);
	CHECK_EQ(s.path[GPUFILE_PATH_HOST][0].ops, 1);
	close(p[1]);
	close(q[0]);
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_EQ(stat(target, &st), 0);
	CHECK_EQ(st.st_size, 1000);
	CHECK(st.st_mode & 0044); /* its mode untouched too */
	CHECK_EQ(lstat(seg, &st), 0);
	CHECK(S_ISLNK(st.st_mode));
	{
		size_t len;
		unsigned char *b = test_read_file(target, &len);
		CHECK(b && test_mismatch(b, 1000, 3, 0) == -1);
		free(b);
	}
	unlink(seg);
}

/* No descriptor left: the error names the file and the cause. */
static void test_no_fds(void)
{
	struct rlimit old, low;
	gpufile_t *h = NULL;
	int fds[64], n = 0, rc;

	CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
	/* Use up every descriptor below a small limit. */
	low = old;
	low.rlim_cur = 64;
	CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
	while (n < 64) {
		int fd = open("/dev/null", O_RDONLY);
		if (fd < 0)
			break;
		fds[n++] = fd;
	}
	rc = gpufile_open(&h, file, "r");
	printf("out of descriptors: %d %s\n", rc, gpufile_errmsg());
	CHECK_EQ(rc, -EMFILE);
	CHECK(h == NULL);
	CHECK_CONTAINS(gpufile_errmsg(), file);
	CHECK_CONTAINS(gpufile_errmsg(), "Too many open files");
	/* One descriptor free: the buffered open succeeds and the O_DIRECT
	 * one is refused, which must not fail the handle. */
	close(fds[--n]);
	rc = gpufile_open(&h, file, "r");
	if (rc == 0) {
		char buf[4096];
		CHECK_EQ(gpufile_pread(h, buf, sizeof(buf), 0), sizeof(buf));
		gpufile_close(h);
	} else {
		CHECK_CONTAINS(gpufile_errmsg(), file);
	}
	while (n > 0)
		close(fds[--n]);
	CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
	rc = gpufile_open(&h, file, "r");
	CHECK_EQ(rc, 0);
	gpufile_close(h);
}

/* No pinned memory: a device read fails with a message naming the cause
 * and the file, and works once memory is back. */
static void test_no_pinned(void)
{
	gpufile_t *h;
	ssize_t n;

	dev_base = aligned_alloc(4096, DEV_SIZE);
	gpufile__cuda_override(&fake);
	gpufile_config_set("compat_mode", "on");
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	pthread_mutex_lock(&fake_lock);
	fail_hostalloc = 1 << 20;
	pthread_mutex_unlock(&fake_lock);
	n = gpufile_pread(h, dev_base, 1 << 20, 0);
	printf("out of pinned memory: %zd %s\n", n, gpufile_errmsg());
	CHECK_EQ(n, GPUFILE_ECUDA);
	/* The call that pinned them: registration, or cuMemHostAlloc where
	 * the driver registers none (pinned.c). */
	CHECK_CONTAINS(gpufile_errmsg(), "bounce buffers");
	CHECK(strstr(gpufile_errmsg(), "cuMemHostRegister of") ||
	      strstr(gpufile_errmsg(), "cuMemHostAlloc of"));
	CHECK_CONTAINS(gpufile_errmsg(), "CUDA_ERROR_OUT_OF_MEMORY");
	CHECK_CONTAINS(gpufile_errmsg(), file);
	pthread_mutex_lock(&fake_lock);
	fail_hostalloc = 0;
	pthread_mutex_unlock(&fake_lock);
	CHECK_EQ(gpufile_pread(h, dev_base, 1 << 20, 0), 1 << 20);
	CHECK_EQ(test_mismatch(dev_base, 1 << 20, 5, 0), -1);
	gpufile_close(h);
	gpufile_release();
	pthread_mutex_lock(&fake_lock);
	CHECK_EQ(pinned_count, 0);
	pthread_mutex_unlock(&fake_lock);
	gpufile__cuda_override(NULL);
	free(dev_base);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	file = test_path("hostile.bin");
	if (test_make_file(file, 2 << 20, 5))
		return 1;
	test_segments();
	test_being_created();
	test_hostile_writer();
	test_symlink_planted();
	test_no_fds();
	test_no_pinned();
	return test_finish("test_hostile");
}
