/*
 * Live statistics in shared memory: a process reading in a loop is
 * observed from outside (the API and `gpufile stats PID --json`); counts
 * grow and match what it did; the segment is a sealed memfd, mode 0600;
 * a process killed with SIGKILL in the middle of a read leaves nothing
 * (no /dev/shm file, no descriptor or mapping, no listing); a memory
 * limit at creation (injected fallocate failure) gives private counters
 * with the reason, and 64 threads count right in them; more threads than
 * the segment has slots count right too (the shared slot); a forked child
 * counts in its own segment; a process that loaded gpufile but did no
 * I/O is "no I/O yet"; segments of older gpufile versions left in
 * /dev/shm are reported stale and cleaned; NULL out-pointers are
 * -EINVAL; bad PIDs exit 1; the settings' copy into the segment, which
 * reads a bad setting (and so sets a message of its own), leaves the
 * caller's message whole however long (one of over 1024 bytes was cut,
 * through a shared buffer of 1024).
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"
#include "gpufile_private.h"
#include "internal.h"
#include "stats_segment.h"

#include <errno.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BATCH     100
#define READ_SIZE 4096

static const char *file_path;

/* The reader: BATCH reads of 4 KiB per round; after each round it writes
 * one byte to report and waits for one byte to go on (EOF: exit). */
static void reader(int report, int go, int quick_exit)
{
	/* quick_exit 2: after the first round, read on without pause until
	 * killed. */
	gpufile_t *h;
	char buf[READ_SIZE], c = 0;
	gpufile_cufile_gpu_t cu = {.gpu = 0, .nvfs_reads = 256};

	if (gpufile_open(&h, file_path, "r"))
		_exit(3);
	/* What the cuFile backend reports, simulated: one file record and
	 * one GPU's counters. */
	gpufile__stats_file(file_path, GPUFILE_PATH_POSIX,
	                    "test: cuFile not available");
	gpufile__stats_cufile(&cu, 1);
	for (;;) {
		for (int i = 0; i < BATCH; i++)
			if (gpufile_pread(h, buf, sizeof(buf),
			                  (int64_t)i * READ_SIZE) != READ_SIZE)
				_exit(4);
		if (quick_exit != 2 && write(report, &c, 1) != 1)
			_exit(5);
		if (quick_exit == 2) {
			if (c == 0 && write(report, &c, 1) != 1)
				_exit(5);
			c = 1;
			continue;
		}
		if (read(go, &c, 1) != 1)
			break;
	}
	gpufile_close(h);
	if (quick_exit)
		_exit(0); /* no destructor: the segment stays behind */
	exit(0);
}

struct child {
	pid_t pid;
	int report, go;
};

static void start_reader(struct child *ch, int quick_exit)
{
	int r[2], g[2];

	if (pipe(r) || pipe(g)) {
		perror("pipe");
		exit(1);
	}
	ch->pid = fork();
	if (ch->pid == 0) {
		close(r[0]);
		close(g[1]);
		reader(r[1], g[0], quick_exit);
	}
	close(r[1]);
	close(g[0]);
	ch->report = r[0];
	ch->go = g[1];
}

static int wait_round(struct child *ch)
{
	char c;

	return read(ch->report, &c, 1) == 1 ? 0 : -1;
}

static void next_round(struct child *ch)
{
	char c = 0;

	CHECK_EQ(write(ch->go, &c, 1), 1);
}

static int finish(struct child *ch)
{
	int status = 0;

	close(ch->go);
	close(ch->report);
	waitpid(ch->pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* Runs a shell command; returns its exit status and its stdout in out. */
static int run(const char *cmd, char *out, size_t len)
{
	FILE *f = popen(cmd, "r");
	size_t n;
	int status;

	if (!f)
		return -1;
	n = fread(out, 1, len - 1, f);
	out[n] = '\0';
	status = pclose(f);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The number after "key": within the object that follows "paths"/name. */
static long long json_path_field(const char *json, const char *path,
                                 const char *key)
{
	char pat[64];
	const char *p = strstr(json, "\"paths\"");

	if (!p)
		return -1;
	snprintf(pat, sizeof(pat), "\"%s\"", path);
	p = strstr(p, pat);
	if (!p)
		return -1;
	snprintf(pat, sizeof(pat), "\"%s\"", key);
	p = strstr(p, pat);
	if (!p)
		return -1;
	p = strchr(p, ':');
	return p ? atoll(p + 1) : -1;
}

static const char *cli(void)
{
	const char *c = getenv("GPUFILE_CLI");

	return c && access(c, X_OK) == 0 ? c : NULL;
}

/* The descriptor of pid's segment memfd (through /proc/PID/fd), opened
 * read-only, or -1. */
static int open_segment_of(pid_t pid)
{
	char dir[64], path[64 + 256], link[128];
	struct dirent *e;
	int fd = -1;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	while (d && fd < 0 && (e = readdir(d))) {
		ssize_t n;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = '\0';
		if (strcmp(link, "/memfd:" STATS_MEMFD_NAME " (deleted)") == 0)
			fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (d)
		closedir(d);
	return fd;
}

/* How many lines of /proc/self/maps and entries of /proc/self/fd name a
 * gpufile-stats memfd. */
static int own_segment_refs(void)
{
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");
	int n = 0, fd;

	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, "memfd:" STATS_MEMFD_NAME) != NULL;
	if (f)
		fclose(f);
	fd = open_segment_of(getpid());
	if (fd >= 0) {
		n++;
		close(fd);
	}
	return n;
}

/* Whether a '-'-separated word of name is exactly num. */
static int has_word(const char *name, const char *num)
{
	size_t n = strlen(num);

	for (const char *p = name; (p = strstr(p, num)); p++)
		if ((p == name || p[-1] == '-') &&
		    (p[n] == '\0' || p[n] == '-'))
			return 1;
	return 0;
}

/* Whether /dev/shm holds a gpufile name carrying pid as a word of its own
 * (the old gpufile-UID-PID). Not any name with pid's digits in it: tests
 * running in parallel make /dev/shm/gpufile-check-PID of their own PIDs
 * (12345 holds 1234) and gpufile-rt-XXXXXX folders of random letters and
 * digits. Other programs' files are not ours to judge. */
static int dev_shm_has_gpufile(pid_t pid)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	char num[32];
	int found = 0;

	snprintf(num, sizeof(num), "%d", (int)pid);
	while (d && (e = readdir(d)))
		found |= strncmp(e->d_name, "gpufile", 7) == 0 &&
		         has_word(e->d_name, num);
	if (d)
		closedir(d);
	return found;
}

static void test_observe(void)
{
	struct child ch;
	gpufile_stats_t s;
	gpufile_file_stat_t files[4];
	char cmd[512], out[1 << 16];
	struct stat st;
	int fd;

	start_reader(&ch, 0);
	CHECK_EQ(wait_round(&ch), 0);

	/* The segment: a memfd of ours, mode 0600, sealed against
	 * shrinking and growing and against new seals; no file in /dev/shm. */
	fd = open_segment_of(ch.pid);
	CHECK(fd >= 0);
	CHECK_EQ(fstat(fd, &st), 0);
	CHECK(S_ISREG(st.st_mode));
	CHECK_EQ(st.st_mode & 07777, 0600);
	CHECK_EQ(st.st_uid, getuid());
	CHECK_EQ(st.st_size, sizeof(struct stats_seg));
	CHECK_EQ(fcntl(fd, F_GET_SEALS) &
	             (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
	         F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	/* Its memory is reserved: every page is there before it is used. */
	CHECK_EQ(st.st_blocks * 512 >= (long long)sizeof(struct stats_seg), 1);
	close(fd);
	CHECK(!dev_shm_has_gpufile(ch.pid));

	/* Round 1, through the API. */
	GPUFILE_INIT(s);
	CHECK_EQ(gpufile_stats_read(ch.pid, &s), 0);
	CHECK_EQ(s.pid, ch.pid);
	CHECK_EQ(s.path[GPUFILE_PATH_HOST][0].ops, BATCH);
	CHECK_EQ(s.path[GPUFILE_PATH_HOST][0].bytes, BATCH * READ_SIZE);
	CHECK_EQ(s.path[GPUFILE_PATH_HOST][0].errors, 0);
	CHECK_EQ(s.size_hist[GPUFILE_PATH_HOST][0][12], BATCH); /* 4 KiB */
	CHECK_EQ(s.cufile_ngpus, 1);
	CHECK_EQ(s.cufile[0].nvfs_reads, 256);
	CHECK(s.nsettings > 0);
	/* One handle: its record from gpufile_open, completed by the path
	 * decision. */
	CHECK_EQ(s.files_opened, 1);
	CHECK_EQ(gpufile_stats_files(ch.pid, files, 4), 1);
	CHECK(strcmp(files[0].path, file_path) == 0);
	CHECK_EQ(files[0].chosen, GPUFILE_PATH_POSIX);

	/* Round 2: the counts grow, through the CLI. */
	next_round(&ch);
	CHECK_EQ(wait_round(&ch), 0);
	if (cli()) {
		snprintf(cmd, sizeof(cmd), "%s stats %d --json", cli(),
		         (int)ch.pid);
		CHECK_EQ(run(cmd, out, sizeof(out)), 0);
		CHECK_EQ(json_path_field(out, "host", "ops"), 2 * BATCH);
		CHECK_EQ(json_path_field(out, "host", "bytes"),
		         2 * BATCH * READ_SIZE);
		CHECK_EQ(json_path_field(out, "host", "errors"), 0);
		CHECK_EQ(json_path_field(out, "cufile", "ops"), 0);
		/* 4 KiB reads: below host_map_copy's 256 KiB, all pread. */
		CHECK(strstr(out, "\"map_copy_bytes\": 0,") != NULL);
		CHECK(strstr(out, "\"cufile_layer\"") != NULL);
		CHECK(strstr(out, "\"nvfs_reads\": 256") != NULL);
		CHECK(strstr(out, "\"files\"") != NULL);
		CHECK(
		    strstr(out, "\"reason\": \"test: cuFile not available\"") !=
		    NULL);
		CHECK(strstr(out, "\"chosen\": \"posix\"") != NULL);
		/* The text summary lists every path whose requests n counts
		 * (mmap and remote were left out while n included them). */
		snprintf(cmd, sizeof(cmd), "%s stats %d", cli(), (int)ch.pid);
		CHECK_EQ(run(cmd, out, sizeof(out)), 0);
		{
			char want[128];
			snprintf(
			    want, sizeof(want),
			    "reads  gpufile: n=%d cufile=0 (0 tasks) posix=0 "
			    "small=0 host=%d mmap=0 remote=0",
			    2 * BATCH, 2 * BATCH);
			CHECK_CONTAINS(out, want);
		}

		/* The list shows the process and its bytes. */
		snprintf(cmd, sizeof(cmd), "%s stats --json", cli());
		CHECK_EQ(run(cmd, out, sizeof(out)), 0);
		snprintf(cmd, sizeof(cmd), "\"pid\": %d", (int)ch.pid);
		CHECK(strstr(out, cmd) != NULL);

		/* Text output shows both layers side by side. */
		snprintf(cmd, sizeof(cmd), "%s stats %d", cli(), (int)ch.pid);
		CHECK_EQ(run(cmd, out, sizeof(out)), 0);
		CHECK(strstr(out, "nvfs=256") != NULL);
		CHECK(strstr(out, "host=200") != NULL);
		fprintf(stderr, "%s", out);
	} else {
		fprintf(stderr, "no CLI (GPUFILE_CLI): CLI checks skipped\n");
	}
	next_round(&ch);
	CHECK_EQ(wait_round(&ch), 0);
	CHECK_EQ(gpufile_stats_read(ch.pid, &s), 0);
	CHECK_EQ(s.path[GPUFILE_PATH_HOST][0].ops, 3 * BATCH);

	CHECK_EQ(finish(&ch), 0);
	CHECK_EQ(gpufile_stats_read(ch.pid, &s), -ESRCH);
}

/* SIGKILL in the middle of a read, while observed: nothing remains. */
static void test_sigkill(void)
{
	struct child ch;
	gpufile_stats_t s;
	gpufile_process_t procs[64];
	int n, status;

	CHECK_EQ(own_segment_refs(), 0); /* this process: no I/O yet */
	start_reader(&ch, 2);
	CHECK_EQ(wait_round(&ch), 0);
	GPUFILE_INIT(s);
	CHECK_EQ(gpufile_stats_read(ch.pid, &s), 0);
	CHECK(s.path[GPUFILE_PATH_HOST][0].ops >= BATCH);
	n = gpufile_stats_list(procs, 64);
	{
		int listed = 0;
		for (int i = 0; i < n && i < 64; i++)
			listed |= procs[i].pid == ch.pid;
		CHECK(listed);
	}
	CHECK_EQ(kill(ch.pid, SIGKILL), 0);
	waitpid(ch.pid, &status, 0);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	close(ch.go);
	close(ch.report);

	CHECK(!dev_shm_has_gpufile(ch.pid));
	CHECK_EQ(own_segment_refs(), 0); /* the reader kept nothing */
	CHECK_EQ(gpufile_stats_read(ch.pid, &s), -ESRCH);
	n = gpufile_stats_list(procs, 64);
	for (int i = 0; i < n && i < 64; i++)
		CHECK(procs[i].pid != ch.pid);
	gpufile_stats_clean(); /* finds nothing of it either */
	CHECK(!dev_shm_has_gpufile(ch.pid));
}

/* fallocate fails as on a full tmpfs or at a memory cgroup's limit. */
static int fallocate_enospc(int fd, off_t offset, off_t len)
{
	(void)fd;
	(void)offset;
	(void)len;
	errno = ENOSPC;
	return -1;
}

#define THREADS      64
#define THREAD_READS 20

static void *thread_reads(void *arg)
{
	gpufile_t *h = arg;
	char buf[512];

	for (int i = 0; i < THREAD_READS; i++)
		if (gpufile_pread(h, buf, sizeof(buf), i * 512) != 512)
			return (void *)1;
	return NULL;
}

/* 64 threads reading at once; returns 0 when their counts add up. */
static int run_threads(void)
{
	pthread_t t[THREADS];
	gpufile_stats_t s;
	gpufile_t *h;
	int bad = 0;

	if (gpufile_open(&h, file_path, "r"))
		return 10;
	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&t[i], NULL, thread_reads, h))
			return 11;
	for (int i = 0; i < THREADS; i++) {
		void *r;
		pthread_join(t[i], &r);
		bad |= r != NULL;
	}
	gpufile_close(h);
	if (bad)
		return 12;
	GPUFILE_INIT(s);
	gpufile_stats_self(&s);
	return s.path[GPUFILE_PATH_HOST][0].ops == THREADS * THREAD_READS ? 0
	                                                                  : 13;
}

/* A process whose segment cannot be reserved counts privately, says why,
 * and survives 64 threads (no SIGBUS). Forked: the hook and the private
 * counters stay in the child. */
static void test_no_space(void)
{
	int p[2], q[2], status;
	pid_t pid;
	char c;

	CHECK_EQ(pipe(p), 0);
	CHECK_EQ(pipe(q), 0);
	pid = fork();
	if (pid == 0) {
		char why[256];
		int rc;

		close(p[1]);
		close(q[0]);

		gpufile__stats_fallocate = fallocate_enospc;
		rc = run_threads();
		if (rc)
			_exit(rc);
		if (gpufile_stats_backing(why, sizeof(why)) != 0)
			_exit(20);
		fprintf(stderr, "no space: %s\n", why);
		if (!strstr(why, "private") || !strstr(why, "fallocate") ||
		    !strstr(why, strerror(ENOSPC)))
			_exit(21);
		if (own_segment_refs() != 0)
			_exit(22); /* the half-made memfd was closed */
		/* Observed from outside, then done. */
		if (write(q[1], "r", 1) != 1 || read(p[0], &c, 1) != 0)
			_exit(23);
		_exit(0);
	}
	close(p[0]);
	close(q[1]);
	if (read(q[0], &c, 1) == 1) {
		gpufile_stats_t s;
		char cmd[512], out[4096];

		/* Another process learns why, not "no I/O yet". */
		GPUFILE_INIT(s);
		CHECK_EQ(gpufile_stats_read(pid, &s), -ENOENT);
		CHECK_CONTAINS(gpufile_errmsg(), "counts in private memory");
		CHECK_CONTAINS(gpufile_errmsg(), "fallocate");
		if (cli()) {
			snprintf(cmd, sizeof(cmd), "%s stats %d 2>&1", cli(),
			         (int)pid);
			CHECK_EQ(run(cmd, out, sizeof(out)), 1);
			CHECK_CONTAINS(out, "private memory");
			fprintf(stderr, "$ gpufile stats %d\n%s", (int)pid,
			        out);
		}
	}
	close(p[1]);
	close(q[0]);
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status));
	CHECK_EQ(WEXITSTATUS(status), 0);

	/* A real /dev/shm of 32 KiB, full (root, in a mount namespace of
	 * its own): the segment does not live there, counting goes on. */
	if (getuid() != 0)
		return;
	pid = fork();
	if (pid == 0) {
		char why[256];
		int fd, rc;

		if (unshare(CLONE_NEWNS) ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
		    mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=32k"))
			_exit(77);
		fd = open("/dev/shm/fill", O_WRONLY | O_CREAT, 0600);
		while (fd >= 0 && write(fd, why, sizeof(why)) > 0)
			;
		rc = run_threads();
		if (rc)
			_exit(rc);
		if (gpufile_stats_backing(why, sizeof(why)) != 1)
			_exit(30);
		_exit(0);
	}
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status));
	if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
		fprintf(stderr, "cannot mount a small /dev/shm: skipped\n");
	else
		CHECK_EQ(WEXITSTATUS(status), 0);
}

/* A forked child counts in a segment of its own; the parent's counts do
 * not move. */
static void test_fork(void)
{
	gpufile_stats_t before, after, child;
	gpufile_t *h;
	char buf[READ_SIZE], c;
	int p[2], q[2], status;
	pid_t pid;

	CHECK_EQ(gpufile_open(&h, file_path, "r"), 0);
	CHECK_EQ(gpufile_pread(h, buf, sizeof(buf), 0), READ_SIZE);
	GPUFILE_INIT(before);
	CHECK_EQ(gpufile_stats_self(&before), 0);
	CHECK_EQ(pipe(p), 0);
	CHECK_EQ(pipe(q), 0);
	pid = fork();
	if (pid == 0) {
		close(p[1]);
		close(q[0]);
		for (int i = 0; i < 3; i++)
			if (gpufile_pread(h, buf, sizeof(buf), 0) != READ_SIZE)
				_exit(2);
		if (write(q[1], "r", 1) != 1 || read(p[0], &c, 1) != 0)
			_exit(3);
		_exit(0);
	}
	close(p[0]);
	close(q[1]);
	CHECK_EQ(read(q[0], &c, 1), 1);
	GPUFILE_INIT(child);
	CHECK_EQ(gpufile_stats_read(pid, &child), 0);
	CHECK_EQ(child.pid, pid);
	CHECK_EQ(child.path[GPUFILE_PATH_HOST][0].ops, 3);
	{
		/* One segment among its descriptors, its own. */
		int fd = open_segment_of(pid);
		gpufile_stats_t t;
		CHECK(fd >= 0);
		CHECK_EQ(gpufile__stats_read_fd(fd, getuid(), &t, NULL, 0), 0);
		CHECK_EQ(t.pid, pid);
		close(fd);
	}
	close(p[1]);
	close(q[0]);
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	GPUFILE_INIT(after);
	CHECK_EQ(gpufile_stats_self(&after), 0);
	CHECK_EQ(after.path[GPUFILE_PATH_HOST][0].ops,
	         before.path[GPUFILE_PATH_HOST][0].ops);
	gpufile_close(h);
}

/* A segment left in /dev/shm by an older gpufile for a dead PID: stale,
 * listed, and removed by gpufile_stats_clean. */
static void test_old_leftover(void)
{
	gpufile_process_t procs[64];
	gpufile_stats_t s;
	char seg[128];
	pid_t gone = fork();
	int fd, n, found = 0;

	if (gone == 0)
		_exit(0);
	waitpid(gone, NULL, 0);
	snprintf(seg, sizeof(seg), "/dev/shm/gpufile-%u-%d", (unsigned)getuid(),
	         (int)gone);
	fd = open(seg, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (fd < 0) {
		fprintf(stderr, "cannot write %s: skipped\n", seg);
		return;
	}
	close(fd);
	GPUFILE_INIT(s);
	CHECK_EQ(gpufile_stats_read(gone, &s), -ESTALE);
	CHECK_CONTAINS(gpufile_errmsg(), seg);
	n = gpufile_stats_list(procs, 64);
	for (int i = 0; i < n && i < 64; i++)
		if (procs[i].pid == gone) {
			found = 1;
			CHECK_EQ(procs[i].stale, 1);
		}
	CHECK(found);
	CHECK(gpufile_stats_clean() >= 1);
	CHECK(access(seg, F_OK) != 0);
}

/* NULL out-pointers: -EINVAL with a message naming the function. */
static void test_null(void)
{
	CHECK_EQ(gpufile_stats_read(0, NULL), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "gpufile_stats_read");
	CHECK_EQ(gpufile_stats_self(NULL), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "gpufile_stats_self");
	CHECK_EQ(gpufile_stats_files(0, NULL, 4), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "gpufile_stats_files");
	CHECK_EQ(gpufile_stats_files(0, NULL, 0), 0);
	CHECK_EQ(gpufile_stats_list(NULL, 4), -EINVAL);
	CHECK(gpufile_stats_list(NULL, 0) >= 0);
	CHECK_EQ(gpufile_stats_backing(NULL, 10), -EINVAL);
	CHECK_EQ(gpufile_stats_segment_path(0, NULL, 10), -EINVAL);
}

/* gpufile_stats_files(pid, out, max) copies the newest max handles,
 * oldest first (it used to copy the oldest max), also once the ring of
 * GPUFILE_MAX_FILE_STATS has wrapped. */
static void test_recent_files(void)
{
	enum { NOPEN = GPUFILE_MAX_FILE_STATS + 6 };
	static gpufile_file_stat_t out[GPUFILE_MAX_FILE_STATS];
	char path[700], want[32];
	gpufile_t *h;

	/* Not test_path(): its 8 rotating buffers hold file_path too. */
	for (int i = 0; i < NOPEN; i++) {
		snprintf(path, sizeof(path), "%s/recent%03d", test_dir(), i);
		CHECK_EQ(test_make_file(path, 1, 1), 0);
		CHECK_EQ(gpufile_open(&h, path, "r"), 0);
		CHECK_EQ(gpufile_close(h), 0);
	}
	CHECK_EQ(gpufile_stats_files(0, out, 3), 3);
	for (int i = 0; i < 3; i++) {
		snprintf(want, sizeof(want), "/recent%03d", NOPEN - 3 + i);
		CHECK_CONTAINS(out[i].path, want);
	}
	CHECK_EQ(gpufile_stats_files(0, out, GPUFILE_MAX_FILE_STATS),
	         GPUFILE_MAX_FILE_STATS);
	snprintf(want, sizeof(want), "/recent%03d",
	         NOPEN - GPUFILE_MAX_FILE_STATS);
	CHECK_CONTAINS(out[0].path, want);
	snprintf(want, sizeof(want), "/recent%03d", NOPEN - 1);
	CHECK_CONTAINS(out[GPUFILE_MAX_FILE_STATS - 1].path, want);
}

/* A process that loaded gpufile (the shared library beside the CLI) but
 * did no I/O: zero counters, "no I/O yet" -- not "does not use gpufile". */
static void test_no_io_yet(void)
{
	char lib[1024], cmd[1200], out[4096];
	const char *slash;
	gpufile_stats_t s;
	int p[2], status;
	pid_t pid;
	char c;

	if (!cli() || !(slash = strrchr(cli(), '/')))
		return;
	snprintf(lib, sizeof(lib), "%.*s/libgpufile.so", (int)(slash - cli()),
	         cli());
	CHECK_EQ(pipe(p), 0);
	pid = fork();
	if (pid == 0) {
		close(p[0]);
		if (!dlopen(lib, RTLD_NOW | RTLD_LOCAL))
			_exit(2);
		if (write(p[1], "r", 1) != 1)
			_exit(3);
		for (;;)
			pause();
	}
	close(p[1]);
	if (read(p[0], &c, 1) != 1) {
		fprintf(stderr, "cannot load %s: no-I/O check skipped\n", lib);
		waitpid(pid, NULL, 0);
		close(p[0]);
		return;
	}
	close(p[0]);
	GPUFILE_INIT(s);
	CHECK_EQ(gpufile_stats_read(pid, &s), 0);
	CHECK_EQ(s.pid, pid);
	CHECK_EQ(s.files_opened, 0);
	CHECK_EQ(s.path[GPUFILE_PATH_HOST][0].ops, 0);
	snprintf(cmd, sizeof(cmd), "%s stats %d 2>&1", cli(), (int)pid);
	CHECK_EQ(run(cmd, out, sizeof(out)), 0);
	CHECK_CONTAINS(out, "no I/O yet");
	fprintf(stderr, "$ gpufile stats %d\n%s", (int)pid, out);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
}

/* A process that did I/O and then closed every descriptor (a daemon
 * after startup) still counts, in a segment no other process can reach:
 * -EBADF, and gpufile stats says so (exit 1) -- it used to report zero
 * counters and "no I/O yet". */
static void test_closed_descriptor(void)
{
	char cmd[1200], out[4096], buf[READ_SIZE];
	gpufile_stats_t s;
	int p[2], status;
	pid_t pid;
	char c;

	CHECK_EQ(pipe(p), 0);
	pid = fork();
	if (pid == 0) {
		gpufile_t *h;

		close(p[0]);
		if (gpufile_open(&h, file_path, "r") ||
		    gpufile_pread(h, buf, sizeof(buf), 0) != READ_SIZE)
			_exit(2);
		for (int fd = 3; fd < 1024; fd++)
			if (fd != p[1])
				close(fd);
		if (write(p[1], "r", 1) != 1)
			_exit(3);
		for (;;)
			pause();
	}
	close(p[1]);
	CHECK_EQ(read(p[0], &c, 1), 1);
	close(p[0]);
	GPUFILE_INIT(s);
	CHECK_EQ(gpufile_stats_read(pid, &s), -EBADF);
	CHECK_CONTAINS(gpufile_errmsg(), "has closed the descriptor");
	if (cli()) {
		snprintf(cmd, sizeof(cmd), "%s stats %d 2>&1", cli(), (int)pid);
		CHECK_EQ(run(cmd, out, sizeof(out)), 1);
		CHECK_CONTAINS(out, "other processes cannot reach them");
		CHECK(!strstr(out, "no I/O yet"));
	}
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
}

/* The largest number that follows key ("read_iops": 12.5) in text. */
static double max_after(const char *text, const char *key)
{
	double best = 0;

	for (const char *p = strstr(text, key); p; p = strstr(p + 1, key)) {
		double v = strtod(p + strlen(key), NULL);

		if (v > best)
			best = v;
	}
	return best;
}

/* gpufile stats --watch across an exec(): the PID then names another
 * segment whose counters start again. The rates of that sample used to
 * be the wrapped difference (about 1.8e19 requests per second); now the
 * sample has none, and a note says why. */
/* Appends lines of w to out (len bytes, n used) until they hold want,
 * the stream ends or limit_s seconds have passed; returns the new n. */
static size_t read_until(FILE *w, char *out, size_t len, size_t n,
                         const char *want, int limit_s)
{
	struct timespec t0, now;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	out[n] = '\0';
	while (w && !strstr(out, want) && n + 1 < len &&
	       fgets(out + n, (int)(len - n), w)) {
		n += strlen(out + n);
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec > limit_s)
			break;
	}
	return n;
}

static void test_watch_exec(void)
{
	char cmd[1200], out[1 << 16], one[1];
	int ready[2], go[2], status;
	pid_t pid;
	FILE *w;
	size_t n;

	if (!cli())
		return;
	CHECK_EQ(pipe(ready), 0);
	CHECK_EQ(pipe(go), 0);
	pid = fork();
	if (pid == 0) {
		gpufile_t *h;

		close(ready[0]);
		close(go[1]);
		/* More requests than the exec()ed reader makes in a sample,
		 * so that its counts are below these. */
		if (gpufile_open(&h, file_path, "r"))
			_exit(2);
		for (int i = 0; i < 100000; i++)
			if (gpufile_pread(h, one, 1, 0) != 1)
				_exit(3);
		if (write(ready[1], "r", 1) != 1 || read(go[0], one, 1) != 1)
			_exit(4);
		if (!freopen("/dev/null", "w", stdout))
			_exit(6);
		execl(cli(), "gpufile", "read", file_path, "--host", "--repeat",
		      "1000000", (char *)NULL);
		_exit(5);
	}
	close(ready[1]);
	close(go[0]);
	CHECK_EQ(read(ready[0], one, 1), 1);
	snprintf(cmd, sizeof(cmd), "%s stats %d --watch 0.1 --json 2>&1", cli(),
	         (int)pid);
	w = popen(cmd, "r");
	CHECK(w != NULL);
	/* Samples of the first image (its rates seen), then the exec, then
	 * samples until the watcher has seen the new image: read as they
	 * come, not after fixed sleeps (600 ms was too short for the exec
	 * under ASan on a loaded machine). At most 120 s: a watcher that
	 * never says so fails below instead of hanging. */
	n = read_until(w, out, sizeof(out), 0, "\"read_iops\": ", 120);
	CHECK_EQ(write(go[1], "g", 1), 1);
	n = read_until(w, out, sizeof(out), n, "is a new process (or exec()ed)",
	               120);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	if (w)
		pclose(w);
	close(ready[0]);
	close(go[1]);
	CHECK_CONTAINS(out, "is a new process (or exec()ed)");
	CHECK(max_after(out, "\"read_iops\": ") < 1e9);
	CHECK(max_after(out, "\"read_gbps\": ") < 1e6);
}

/* One JSON sample of a watch from fd into out (len bytes), a byte at a
 * time so that nothing of the next is taken: one line (--watch --json
 * writes one object per line). Returns its length (0 at the end of the
 * stream). */
static size_t read_sample(int fd, char *out, size_t len)
{
	size_t n = 0;

	while (n + 1 < len && read(fd, out + n, 1) == 1) {
		n++;
		if (out[n - 1] == '\n')
			break;
	}
	out[n] = '\0';
	return n;
}

/* gpufile stats --watch into a reader that takes its time: a rate is the
 * bytes between two samples over the time between them. It was over the
 * sleep alone, so that with a slow reader (a pager, a full pipe) every
 * rate came out as many times too high as the wait was longer than
 * --watch (11x at --watch 0.2 read every 2 s). Here the watcher's stdout
 * is a pipe smaller than one sample; once it has taken sample B (its
 * first bytes arrive) it waits to print the rest, this process reads the
 * file and then nothing for a second: the rate of sample C is at most
 * the file's bytes per second, with no bound on how long anything took. */
static void test_watch_slow_reader(void)
{
	static char a[1 << 16], b[1 << 16], c[1 << 16];
	const size_t size = BATCH * READ_SIZE;
	char pid_arg[32], *buf = test_malloc(size);
	struct pollfd pfd;
	gpufile_t *h[8];
	long long grown;
	int fds[2], cap, status;
	double gbps;
	pid_t pid;

	if (!cli()) {
		free(buf);
		return;
	}
	/* Eight file records: a sample several times the pipe's size. */
	for (int i = 0; i < 8; i++)
		CHECK_EQ(gpufile_open(&h[i], file_path, "r"), 0);
	CHECK_EQ(pipe(fds), 0);
	cap = fcntl(fds[1], F_SETPIPE_SZ, 4096);
	snprintf(pid_arg, sizeof(pid_arg), "%d", (int)getpid());
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], STDOUT_FILENO);
		close(fds[0]);
		close(fds[1]);
		execl(cli(), "gpufile", "stats", pid_arg, "--watch", "0.05",
		      "--json", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	CHECK(read_sample(fds[0], a, sizeof(a)) > (size_t)cap);
	pfd = (struct pollfd){.fd = fds[0], .events = POLLIN};
	CHECK_EQ(poll(&pfd, 1, 120000), 1);
	CHECK_EQ(gpufile_pread(h[0], buf, size, 0), (long long)size);
	sleep(1);
	read_sample(fds[0], b, sizeof(b));
	read_sample(fds[0], c, sizeof(c));
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	close(fds[0]);
	for (int i = 0; i < 8; i++)
		gpufile_close(h[i]);
	free(buf);
	/* The read fell between samples B and C, and C's rate spans more
	 * than the second in between (6 digits printed: a little slack). */
	grown = json_path_field(c, "host", "bytes") -
	        json_path_field(b, "host", "bytes");
	CHECK_EQ(grown, (long long)size);
	gbps = max_after(c, "\"read_gbps\": ");
	fprintf(stderr, "slow reader: %lld bytes, %g GB/s (at most %g)\n",
	        grown, gbps, (double)size / 1e9);
	CHECK(gbps > 0 && gbps <= (double)size / 1e9 * 1.0001);
}

/* gpufile stats --watch of a process that becomes unreadable while it is
 * watched (prctl(PR_SET_DUMPABLE, 0); an exec of a setuid program does
 * the same): exit 1 with the message. On that path the watcher freed the
 * one of its two sample buffers that it was using as the latest, which
 * after an odd number of samples is not the one allocated, and glibc
 * aborted it ("free(): invalid pointer", exit 134, no message). Sample 2
 * is made to be in print (its first bytes read, the rest waiting on a
 * one-page pipe) when the process turns unreadable, so that sample 3
 * fails after one swap. As root, both children are nobody: root reads
 * any process. */
static void test_watch_unreadable(void)
{
	static char sample[1 << 16];
	const int root = geteuid() == 0;
	int ctl[2], ack[2], out[2], cap, status = 0;
	pid_t watched, watcher;
	char pid_arg[32], c, copy[128];
	const char *tool = cli(), *path = file_path;
	struct pollfd pfd;

	if (!tool)
		return;
	/* As root both children are nobody: the file and the tool must be
	 * theirs to reach wherever the checkout lies. */
	if (root) {
		const char *d = test_nobody_dir();

		tool = test_nobody_cli();
		CHECK(d && tool);
		if (!d || !tool)
			return;
		snprintf(copy, sizeof(copy), "%s/watched", d);
		CHECK_EQ(test_make_file(copy, BATCH * READ_SIZE, 7), 0);
		CHECK_EQ(chmod(copy, 0644), 0);
		path = copy;
	}
	CHECK(pipe(ctl) == 0 && pipe(ack) == 0 && pipe(out) == 0);
	cap = fcntl(out[1], F_SETPIPE_SZ, 4096);
	fflush(NULL);
	watched = fork();
	if (watched == 0) {
		gpufile_t *h[8];
		char buf[READ_SIZE];

		close(ctl[1]);
		close(ack[0]);
		close(out[0]);
		close(out[1]);
		/* A change of uid clears the dumpable flag: set it again,
		 * so that a watcher of the same uid may read the process. */
		if ((root && test_become_nobody()) ||
		    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0))
			_exit(2);
		/* Eight file records: a sample larger than the pipe. */
		for (int i = 0; i < 8; i++)
			if (gpufile_open(&h[i], path, "r"))
				_exit(3);
		if (gpufile_pread(h[0], buf, sizeof(buf), 0) != READ_SIZE ||
		    write(ack[1], "r", 1) != 1 || read(ctl[0], &c, 1) != 1 ||
		    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) ||
		    write(ack[1], "u", 1) != 1)
			_exit(4);
		while (read(ctl[0], &c, 1) > 0) /* until the test is done */
			;
		_exit(0);
	}
	close(ctl[0]);
	close(ack[1]);
	CHECK_EQ(read(ack[0], &c, 1), 1);
	snprintf(pid_arg, sizeof(pid_arg), "%d", (int)watched);
	watcher = fork();
	if (watcher == 0) {
		dup2(out[1], STDOUT_FILENO);
		close(out[0]);
		close(out[1]);
		if (root && test_become_nobody())
			_exit(126);
		execl(tool, "gpufile", "stats", pid_arg, "--watch", "0.05",
		      "--json", (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	/* Sample 1 whole, then the first bytes of sample 2. */
	CHECK(read_sample(out[0], sample, sizeof(sample)) > (size_t)cap);
	pfd = (struct pollfd){.fd = out[0], .events = POLLIN};
	CHECK_EQ(poll(&pfd, 1, 120000), 1);
	CHECK(write(ctl[1], "g", 1) == 1 && read(ack[0], &c, 1) == 1);
	while (read_sample(out[0], sample, sizeof(sample)) > 0)
		;
	CHECK(waitpid(watcher, &status, 0) == watcher);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 1)
		fprintf(stderr, "watcher: %s %d (want exit 1)\n",
		        WIFEXITED(status) ? "exit" : "signal",
		        WIFEXITED(status) ? WEXITSTATUS(status)
		                          : WTERMSIG(status));
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1);
	close(out[0]);
	close(ctl[1]);
	close(ack[0]);
	waitpid(watched, NULL, 0);
}

static void test_bad_pids(void)
{
	char cmd[512], out[4096];
	pid_t gone, sleeper;

	gone = fork();
	if (gone == 0)
		_exit(0);
	waitpid(gone, NULL, 0);
	{
		gpufile_stats_t s;
		GPUFILE_INIT(s);
		CHECK_EQ(gpufile_stats_read(gone, &s), -ESRCH);
	}

	sleeper = fork();
	if (sleeper == 0) {
		execlp("sleep", "sleep", "30", (char *)NULL);
		_exit(127);
	}
	usleep(100000);
	{
		gpufile_stats_t s;
		GPUFILE_INIT(s);
		CHECK_EQ(gpufile_stats_read(sleeper, &s), -ENOENT);
		fprintf(stderr, "no segment: %s\n", gpufile_errmsg());
	}
	if (cli()) {
		snprintf(cmd, sizeof(cmd), "%s stats %d 2>&1", cli(),
		         (int)gone);
		CHECK_EQ(run(cmd, out, sizeof(out)), 1);
		CHECK(strstr(out, "no process") != NULL);
		fprintf(stderr, "$ gpufile stats %d\n%s", (int)gone, out);
		snprintf(cmd, sizeof(cmd), "%s stats %d --json 2>&1", cli(),
		         (int)sleeper);
		CHECK_EQ(run(cmd, out, sizeof(out)), 1);
		CHECK(strstr(out, "does not use gpufile") != NULL);
		fprintf(stderr, "$ gpufile stats %d --json\n%s", (int)sleeper,
		        out);
		snprintf(cmd, sizeof(cmd), "%s stats notapid 2>&1", cli());
		CHECK_EQ(run(cmd, out, sizeof(out)), 2);
		/* Another user's process: run the CLI as nobody against
		 * our (root's) sleeper. */
		/* The tool copied where nobody can run it, wherever the
		 * checkout lies. */
		if (getuid() == 0 && access("/usr/bin/setpriv", X_OK) == 0 &&
		    test_nobody_cli()) {
			snprintf(cmd, sizeof(cmd),
			         "setpriv --reuid=65534 --regid=65534 "
			         "--clear-groups %s stats %d 2>&1",
			         test_nobody_cli(), (int)sleeper);
			int rc = run(cmd, out, sizeof(out));
			if (strstr(out, "ermission denied") || rc == 126 ||
			    rc == 127) {
				fprintf(stderr, "nobody cannot run the CLI: "
				                "other-user check skipped\n");
			} else {
				CHECK_EQ(rc, 1);
				CHECK(strstr(out, "another user") != NULL);
				fprintf(stderr,
				        "$ (as nobody) gpufile stats "
				        "%d\n%s",
				        (int)sleeper, out);
			}
		}
	}
	kill(sleeper, SIGKILL);
	waitpid(sleeper, NULL, 0);
}

static void test_self(void)
{
	gpufile_stats_t a, b;
	gpufile_t *h;
	char buf[READ_SIZE];

	GPUFILE_INIT(a);
	CHECK_EQ(gpufile_stats_self(&a), 0);
	CHECK_EQ(a.pid, getpid());
	CHECK_EQ(gpufile_open(&h, file_path, "r"), 0);
	CHECK_EQ(gpufile_pread(h, buf, sizeof(buf), 0), READ_SIZE);
	gpufile_close(h);
	GPUFILE_INIT(b);
	CHECK_EQ(gpufile_stats_self(&b), 0);
	CHECK_EQ(b.path[GPUFILE_PATH_HOST][0].ops -
	             a.path[GPUFILE_PATH_HOST][0].ops,
	         1);
	CHECK_EQ(gpufile_stats_read(getpid(), &b), 0);
	CHECK(b.path[GPUFILE_PATH_HOST][0].ops >= 1);
}

/* A file record copies the settings into the segment; with a bad
 * setting that copy fails to read one, which sets this thread's message:
 * the message the caller had must come back, whole. */
static void test_message_kept(void)
{
	enum { LEN = 3000 };
	char *want = test_malloc(LEN + 1);

	memset(want, 'm', LEN);
	memcpy(want, "reading /", 9);
	want[LEN] = '\0';
	setenv("GPUFILE_TASK_SIZE", "bogus", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile__fail(-EIO, "%s", want), -EIO);
	CHECK_EQ(strlen(gpufile_errmsg()), (size_t)LEN);
	gpufile__stats_file_open(file_path);
	CHECK_EQ(strlen(gpufile_errmsg()), (size_t)LEN);
	CHECK(strcmp(gpufile_errmsg(), want) == 0);
	/* No message before: none after (not the setting's). */
	gpufile__clear_error();
	gpufile__stats_file_open(file_path);
	CHECK_EQ(gpufile_errmsg()[0], '\0');
	unsetenv("GPUFILE_TASK_SIZE");
	gpufile_config_reset();
	gpufile__clear_error();
	free(want);
}

/* The value of setting name in this process's segment, into value (""
 * when it is not there). */
static void segment_setting(const char *name, char *value, size_t len)
{
	gpufile_stats_t s;

	value[0] = '\0';
	GPUFILE_INIT(s);
	CHECK_EQ(gpufile_stats_self(&s), 0);
	for (int i = 0; i < s.nsettings; i++)
		if (strcmp(s.settings[i].name, name) == 0)
			snprintf(value, len, "%s (%s)", s.settings[i].value,
			         s.settings[i].source);
}

/* A file record copies the settings into the segment only when one
 * changed since the last copy (the settings' generation): a set, a reset
 * of the environment. What the segment shows follows every change. */
static void test_settings_follow_changes(void)
{
	char value[160];
	gpufile_t *h = NULL;

	CHECK_EQ(gpufile_set_nthreads(3), 0);
	CHECK_EQ(gpufile_open(&h, file_path, "r"), 0);
	gpufile_close(h);
	segment_setting("nthreads", value, sizeof(value));
	CHECK(strcmp(value, "3 (setter)") == 0);
	/* Opens without a change: the copy stands. */
	CHECK_EQ(gpufile_open(&h, file_path, "r"), 0);
	gpufile_close(h);
	segment_setting("nthreads", value, sizeof(value));
	CHECK(strcmp(value, "3 (setter)") == 0);
	CHECK_EQ(gpufile_set_nthreads(5), 0);
	CHECK_EQ(gpufile_open(&h, file_path, "r"), 0);
	gpufile_close(h);
	segment_setting("nthreads", value, sizeof(value));
	CHECK(strcmp(value, "5 (setter)") == 0);
	setenv("GPUFILE_NTHREADS", "6", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_open(&h, file_path, "r"), 0);
	gpufile_close(h);
	segment_setting("nthreads", value, sizeof(value));
	CHECK(strcmp(value, "6 (GPUFILE_NTHREADS)") == 0);
	unsetenv("GPUFILE_NTHREADS");
	gpufile_config_reset();
}

/* More threads than the segment has slots (STATS_SEG_SLOTS): the ones
 * beyond count in its shared slot, which every snapshot adds in (the
 * process's own and a reader's). Each thread reads (a host read of one
 * task runs in the calling thread, so it counts in that thread's slot),
 * then waits for all the others: the slots are given back only when a
 * thread exits, so at least OVER_SLOTS threads count in the shared one. */
#define OVER_SLOTS   8
#define OVER_THREADS (STATS_SEG_SLOTS + OVER_SLOTS)

static pthread_barrier_t all_read;

static void *read_then_wait(void *arg)
{
	gpufile_t *h = arg;
	char buf[READ_SIZE];
	ssize_t n = gpufile_pread(h, buf, sizeof(buf), 0);

	pthread_barrier_wait(&all_read);
	return n == READ_SIZE ? NULL : (void *)1;
}

static void test_more_threads_than_slots(void)
{
	static pthread_t t[OVER_THREADS];
	gpufile_stats_t a, b, c;
	const gpufile_counter_t *before, *after;
	gpufile_t *h;
	int started = 0, bad = 0;

	CHECK_EQ(gpufile_open(&h, file_path, "r"), 0);
	CHECK_EQ(pthread_barrier_init(&all_read, NULL, OVER_THREADS), 0);
	GPUFILE_INIT(a);
	CHECK_EQ(gpufile_stats_self(&a), 0);
	for (; started < OVER_THREADS; started++)
		if (pthread_create(&t[started], NULL, read_then_wait, h))
			break;
	CHECK_EQ(started, OVER_THREADS);
	if (started < OVER_THREADS) {
		/* The barrier would never open: fail (the process ends). */
		fprintf(stderr, "cannot start %d threads\n", OVER_THREADS);
		exit(1);
	}
	for (int i = 0; i < started; i++) {
		void *r;
		pthread_join(t[i], &r);
		bad |= r != NULL;
	}
	CHECK_EQ(bad, 0);
	pthread_barrier_destroy(&all_read);
	gpufile_close(h);
	GPUFILE_INIT(b);
	CHECK_EQ(gpufile_stats_self(&b), 0);
	before = &a.path[GPUFILE_PATH_HOST][0];
	after = &b.path[GPUFILE_PATH_HOST][0];
	CHECK_EQ(after->ops - before->ops, OVER_THREADS);
	CHECK_EQ(after->bytes - before->bytes,
	         (uint64_t)OVER_THREADS * READ_SIZE);
	/* A reader of the segment sees them too. */
	GPUFILE_INIT(c);
	CHECK_EQ(gpufile_stats_read(getpid(), &c), 0);
	CHECK_EQ(c.path[GPUFILE_PATH_HOST][0].bytes, after->bytes);
}

int main(void)
{
	file_path = test_path("data");
	if (test_make_file(file_path, BATCH * READ_SIZE, 7)) {
		fprintf(stderr, "cannot create %s\n", file_path);
		return 1;
	}
	test_sigkill(); /* first: this process has no segment yet */
	test_observe();
	test_no_space();
	test_bad_pids();
	test_no_io_yet();
	test_closed_descriptor();
	test_watch_exec();
	test_old_leftover();
	test_null();
	test_self();
	test_more_threads_than_slots();
	test_watch_slow_reader();
	test_watch_unreadable();
	test_recent_files();
	test_message_kept();
	test_settings_follow_changes();
	test_fork();
	test_cleanup();
	return test_finish("test_stats_shm");
}
