/*
 * A hostile environment: a symlink planted where a process's statistics
 * segment will be created is not followed; a segment owned by another
 * user, or with a wrong magic, version or size, is refused with a message
 * naming it; gpufile stats (the CLI, GPUFILE_CLI) on a corrupt segment
 * exits with an error, never a crash; running out of file descriptors or
 * of pinned memory gives a clear error naming the file.
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
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *file;

/* A child that does no I/O and waits to be killed. */
static pid_t sleeper(void)
{
	pid_t pid = fork();

	if (pid == 0) {
		for (;;)
			pause();
	}
	return pid;
}

static void reap(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* Writes a segment file for pid at its name; valid unless told. */
static void forge(pid_t pid, const char *seg, uint64_t magic, uint32_t version,
                  size_t size, uid_t owner, int garbage)
{
	struct stats_seg *s = calloc(1, sizeof(*s));
	int fd;

	unlink(seg);
	if (garbage)
		test_fill(s, sizeof(*s), 99, 0);
	s->magic = magic;
	s->version = version;
	s->size = sizeof(*s);
	s->pid = pid;
	s->uid = (uint32_t)getuid();
	s->proc_start = 0;
	fd = open(seg, O_RDWR | O_CREAT | O_EXCL, 0600);
	CHECK(fd >= 0);
	CHECK_EQ(write(fd, s, size < sizeof(*s) ? size : sizeof(*s)),
	         (long long)(size < sizeof(*s) ? size : sizeof(*s)));
	if (size > sizeof(*s))
		CHECK_EQ(ftruncate(fd, (off_t)size), 0);
	if (owner != getuid())
		CHECK_EQ(fchown(fd, owner, (gid_t)-1), 0);
	close(fd);
	free(s);
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
	pid_t pid = sleeper();
	char seg[128], out[8192];
	gpufile_stats_t st;
	const size_t size = sizeof(struct stats_seg);
	struct {
		const char *what;
		uint64_t magic;
		uint32_t version;
		size_t size;
		uid_t owner;
	} bad[] = {
	    {"another user's", STATS_SEG_MAGIC, STATS_SEG_VERSION, size, 12345},
	    {"wrong magic", 0x4141414141414141ull, STATS_SEG_VERSION, size,
	     getuid()},
	    {"wrong version", STATS_SEG_MAGIC, STATS_SEG_VERSION + 7, size,
	     getuid()},
	    {"too short", STATS_SEG_MAGIC, STATS_SEG_VERSION, 100, getuid()},
	    {"too long", STATS_SEG_MAGIC, STATS_SEG_VERSION, size + 4096,
	     getuid()},
	};

	gpufile_stats_segment_path(pid, seg, sizeof(seg));
	/* A valid forged segment reads: the checks below are about what
	 * differs, not about forging. */
	forge(pid, seg, STATS_SEG_MAGIC, STATS_SEG_VERSION, size, getuid(), 0);
	CHECK_EQ(gpufile_stats_read(pid, &st), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc;

		forge(pid, seg, bad[i].magic, bad[i].version, bad[i].size,
		      bad[i].owner, 0);
		rc = gpufile_stats_read(pid, &st);
		printf("%-16s segment: %d %s\n", bad[i].what, rc,
		       gpufile_errmsg());
		CHECK(rc < 0);
		CHECK_CONTAINS(gpufile_errmsg(), seg);
		rc = cli_stats(pid, out, sizeof(out));
		if (rc >= 0) {
			CHECK_EQ(rc, 1);
			CHECK_CONTAINS(out, seg);
		}
	}
	/* A valid header over garbage: the reader clamps what it reads. */
	forge(pid, seg, STATS_SEG_MAGIC, STATS_SEG_VERSION, size, getuid(), 1);
	{
		int rc = cli_stats(pid, out, sizeof(out));
		printf("garbage body: CLI exit %d\n", rc);
		CHECK(rc == 0 || rc == 1); /* an answer, not a crash */
		gpufile_file_stat_t files[GPUFILE_MAX_FILE_STATS];
		rc = gpufile_stats_files(pid, files, GPUFILE_MAX_FILE_STATS);
		CHECK(rc >= 0 && rc <= GPUFILE_MAX_FILE_STATS);
	}
	/* A symbolic link at the segment's name is refused, not followed. */
	unlink(seg);
	CHECK_EQ(symlink(file, seg), 0);
	CHECK(gpufile_stats_read(pid, &st) < 0);
	CHECK_CONTAINS(gpufile_errmsg(), "symbolic link");
	if (cli_stats(pid, out, sizeof(out)) >= 0)
		CHECK_CONTAINS(out, "symbolic link");
	unlink(seg);
	reap(pid);
}

/* A symlink planted at a future segment name: the process does not write
 * through it (it counts privately), and the target is untouched. */
static void test_symlink_planted(void)
{
	const char *target = test_path("victim");
	char seg[128];
	int p[2];
	pid_t pid;
	struct stat st;
	int status;

	CHECK_EQ(test_make_file(target, 1000, 3), 0);
	CHECK_EQ(pipe(p), 0);
	pid = fork();
	if (pid == 0) {
		char c, buf[4096];
		gpufile_t *h;

		close(p[1]);
		if (read(p[0], &c, 1) != 1)
			_exit(2);
		if (gpufile_open(&h, file, "r") ||
		    gpufile_pread(h, buf, sizeof(buf), 0) != sizeof(buf))
			_exit(3);
		gpufile_close(h);
		_exit(0);
	}
	close(p[0]);
	gpufile_stats_segment_path(pid, seg, sizeof(seg));
	unlink(seg); /* a stale one of an earlier process with this PID */
	CHECK_EQ(symlink(target, seg), 0);
	CHECK_EQ(write(p[1], "x", 1), 1);
	close(p[1]);
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_EQ(stat(target, &st), 0);
	CHECK_EQ(st.st_size, 1000);
	CHECK(st.st_mode & 0044); /* its mode untouched too */
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
	CHECK_CONTAINS(gpufile_errmsg(), "cuMemHostAlloc");
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
	test_symlink_planted();
	test_no_fds();
	test_no_pinned();
	return test_finish("test_hostile");
}
