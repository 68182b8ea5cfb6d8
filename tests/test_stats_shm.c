/*
 * Live statistics in shared memory: a process reading in a loop is
 * observed from outside (the API and `gpufile stats PID --json`); counts
 * grow and match what it did; the segment is 0600 and removed at exit;
 * stale, forged and foreign segments are recognised; bad PIDs exit 1.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BATCH     100
#define READ_SIZE 4096

static const char *file_path;

/* The reader: BATCH reads of 4 KiB per round; after each round it writes
 * one byte to report and waits for one byte to go on (EOF: exit). */
static void reader(int report, int go, int quick_exit)
{
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
		if (write(report, &c, 1) != 1)
			_exit(5);
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

static void test_observe(void)
{
	struct child ch;
	gpufile_stats_t s;
	gpufile_file_stat_t files[4];
	char seg[128], cmd[512], out[1 << 16];
	struct stat st;

	start_reader(&ch, 0);
	CHECK_EQ(wait_round(&ch), 0);
	gpufile_stats_segment_path(ch.pid, seg, sizeof(seg));

	/* The segment: a regular file, ours, mode 0600. */
	CHECK_EQ(lstat(seg, &st), 0);
	CHECK(S_ISREG(st.st_mode));
	CHECK_EQ(st.st_mode & 07777, 0600);
	CHECK_EQ(st.st_uid, getuid());

	/* Round 1, through the API. */
	CHECK_EQ(gpufile_stats_read(ch.pid, &s), 0);
	CHECK_EQ(s.pid, ch.pid);
	CHECK_EQ(s.path[GPUFILE_PATH_HOST][0].ops, BATCH);
	CHECK_EQ(s.path[GPUFILE_PATH_HOST][0].bytes, BATCH * READ_SIZE);
	CHECK_EQ(s.path[GPUFILE_PATH_HOST][0].errors, 0);
	CHECK_EQ(s.size_hist[GPUFILE_PATH_HOST][0][12], BATCH); /* 4 KiB */
	CHECK_EQ(s.cufile_ngpus, 1);
	CHECK_EQ(s.cufile[0].nvfs_reads, 256);
	CHECK(s.nsettings > 0);
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
		CHECK(strstr(out, "\"cufile_layer\"") != NULL);
		CHECK(strstr(out, "\"nvfs_reads\": 256") != NULL);
		CHECK(strstr(out, "\"files\"") != NULL);
		CHECK(
		    strstr(out, "\"reason\": \"test: cuFile not available\"") !=
		    NULL);
		CHECK(strstr(out, "\"chosen\": \"posix\"") != NULL);

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

		/* --watch: a second sample with rates. */
		next_round(&ch);
		CHECK_EQ(wait_round(&ch), 0);
		fprintf(stderr, "%s", out);
	} else {
		fprintf(stderr, "no CLI (GPUFILE_CLI): CLI checks skipped\n");
		next_round(&ch);
		CHECK_EQ(wait_round(&ch), 0);
	}
	CHECK_EQ(gpufile_stats_read(ch.pid, &s), 0);
	CHECK_EQ(s.path[GPUFILE_PATH_HOST][0].ops, 3 * BATCH);

	/* Normal exit removes the segment. */
	CHECK_EQ(finish(&ch), 0);
	CHECK(access(seg, F_OK) != 0);
	CHECK_EQ(gpufile_stats_read(ch.pid, &s), -ESRCH);
}

static void test_stale(void)
{
	struct child ch, live;
	gpufile_stats_t s;
	gpufile_process_t procs[64];
	char seg[128], forged[128], cmd[512], out[4096];
	int n, found = 0;

	start_reader(&ch, 1);
	CHECK_EQ(wait_round(&ch), 0);
	gpufile_stats_segment_path(ch.pid, seg, sizeof(seg));
	CHECK_EQ(finish(&ch), 0);
	CHECK_EQ(access(seg, F_OK), 0); /* _exit: left behind */

	CHECK_EQ(gpufile_stats_read(ch.pid, &s), -ESTALE);
	fprintf(stderr, "stale: %s\n", gpufile_errmsg());
	n = gpufile_stats_list(procs, 64);
	for (int i = 0; i < n && i < 64; i++)
		if (procs[i].pid == ch.pid) {
			found = 1;
			CHECK_EQ(procs[i].stale, 1);
			CHECK_EQ(procs[i].bytes, BATCH * READ_SIZE);
		}
	CHECK(found);
	if (cli()) {
		snprintf(cmd, sizeof(cmd), "%s stats %d 2>&1", cli(),
		         (int)ch.pid);
		CHECK_EQ(run(cmd, out, sizeof(out)), 1);
		CHECK(strstr(out, "stale") != NULL);
	}

	/* A segment under a live PID written by another process (the PID
	 * reused): a copy of the stale one under a running child's name. */
	start_reader(&live, 0); /* keeps running between rounds */
	CHECK_EQ(wait_round(&live), 0);
	gpufile_stats_segment_path(live.pid, forged, sizeof(forged));
	{
		/* Move the live segment aside, put the dead one there. */
		char aside[160];
		snprintf(aside, sizeof(aside), "%s.aside", forged);
		CHECK_EQ(rename(forged, aside), 0);
		snprintf(cmd, sizeof(cmd), "cp -p %s %s", seg, forged);
		CHECK_EQ(system(cmd), 0);
		CHECK_EQ(gpufile_stats_read(live.pid, &s), -ESTALE);
		fprintf(stderr, "reused pid: %s\n", gpufile_errmsg());

		/* Wrong mode: refused. */
		chmod(forged, 0644);
		CHECK_EQ(gpufile_stats_read(live.pid, &s), -EPROTO);
		fprintf(stderr, "mode 0644: %s\n", gpufile_errmsg());
		/* Bad magic: refused. */
		{
			int fd = open(forged, O_WRONLY);
			CHECK_EQ(pwrite(fd, "XXXXXXXX", 8, 0), 8);
			close(fd);
			chmod(forged, 0600);
		}
		CHECK_EQ(gpufile_stats_read(live.pid, &s), -EPROTO);
		fprintf(stderr, "bad magic: %s\n", gpufile_errmsg());
		/* Wrong size: refused. */
		CHECK_EQ(truncate(forged, 100), 0);
		CHECK_EQ(gpufile_stats_read(live.pid, &s), -EPROTO);
		fprintf(stderr, "bad size: %s\n", gpufile_errmsg());
		/* A symbolic link: refused, not followed. */
		unlink(forged);
		CHECK_EQ(symlink(aside, forged), 0);
		CHECK_EQ(gpufile_stats_read(live.pid, &s), -EPROTO);
		fprintf(stderr, "symlink: %s\n", gpufile_errmsg());
		unlink(forged);
		CHECK_EQ(rename(aside, forged), 0);
		CHECK_EQ(gpufile_stats_read(live.pid, &s), 0);
	}
	CHECK_EQ(finish(&live), 0);

	/* Cleaning removes the stale one. */
	CHECK(gpufile_stats_clean() >= 1);
	CHECK(access(seg, F_OK) != 0);
}

/* A symlink planted at a process's future segment name is not followed:
 * the process counts privately, the target is untouched. */
static void test_symlink_planted(void)
{
	const char *target = test_path("target");
	int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	int p[2];
	pid_t pid;
	struct stat st;
	char seg[128];

	close(fd);
	CHECK_EQ(pipe(p), 0);
	pid = fork();
	if (pid == 0) {
		char c;
		gpufile_t *h;
		char buf[READ_SIZE];
		gpufile_stats_t s;

		close(p[1]);
		if (read(p[0], &c, 1) != 1)
			_exit(2);
		if (gpufile_open(&h, file_path, "r") ||
		    gpufile_pread(h, buf, sizeof(buf), 0) != READ_SIZE)
			_exit(3);
		gpufile_close(h);
		gpufile_stats_self(&s);
		_exit(s.path[GPUFILE_PATH_HOST][0].ops == 1 ? 0 : 4);
	}
	close(p[0]);
	gpufile_stats_segment_path(pid, seg, sizeof(seg));
	CHECK_EQ(symlink(target, seg), 0);
	CHECK_EQ(write(p[1], "x", 1), 1);
	close(p[1]);
	{
		int status;
		waitpid(pid, &status, 0);
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	CHECK_EQ(stat(target, &st), 0);
	CHECK_EQ(st.st_size, 0);
	CHECK_EQ(lstat(seg, &st), 0);
	CHECK(S_ISLNK(st.st_mode)); /* left as it was */
	unlink(seg);
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
		if (getuid() == 0 && access("/usr/bin/setpriv", X_OK) == 0) {
			snprintf(cmd, sizeof(cmd),
			         "setpriv --reuid=65534 --regid=65534 "
			         "--clear-groups %s stats %d 2>&1",
			         cli(), (int)sleeper);
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

	CHECK_EQ(gpufile_stats_self(&a), 0);
	CHECK_EQ(a.pid, getpid());
	CHECK_EQ(gpufile_open(&h, file_path, "r"), 0);
	CHECK_EQ(gpufile_pread(h, buf, sizeof(buf), 0), READ_SIZE);
	gpufile_close(h);
	CHECK_EQ(gpufile_stats_self(&b), 0);
	CHECK_EQ(b.path[GPUFILE_PATH_HOST][0].ops -
	             a.path[GPUFILE_PATH_HOST][0].ops,
	         1);
	CHECK_EQ(gpufile_stats_read(getpid(), &b), 0);
	CHECK(b.path[GPUFILE_PATH_HOST][0].ops >= 1);
}

int main(void)
{
	file_path = test_path("data");
	if (test_make_file(file_path, BATCH * READ_SIZE, 7)) {
		fprintf(stderr, "cannot create %s\n", file_path);
		return 1;
	}
	if (access("/dev/shm", W_OK) != 0) {
		fprintf(stderr, "/dev/shm is not writable: skipped\n");
		return TEST_SKIP;
	}
	test_observe();
	test_stale();
	test_symlink_planted();
	test_bad_pids();
	test_self();
	test_cleanup();
	return test_finish("test_stats_shm");
}
