/*
 * gpufile write and read of large files draw a progress line (bytes,
 * percentage, rate, ETA) on stderr when stderr is a terminal -- and never
 * with --json, --no-progress, for small files, on stdout, or when stderr
 * is a pipe. The terminal is a pseudo-terminal made here.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char tty_out[1 << 16], std_out[1 << 16];

/* Runs `gpufile ARGS` with stderr on a new pseudo-terminal and stdout to
 * a file; fills tty_out and std_out. Returns the exit status, or -1. */
static int run_on_tty(const char *args)
{
	const char *out_path = test_path("stdout");
	char cmd[2048];
	size_t n = 0;
	int master, status, fd;
	pid_t pid;

	snprintf(cmd, sizeof(cmd), "exec %s %s >%s", test_cli_path(), args,
	         out_path);
	master = posix_openpt(O_RDWR | O_NOCTTY);
	if (master < 0 || grantpt(master) || unlockpt(master))
		return -1;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		int slave;

		setsid();
		slave = open(ptsname(master), O_RDWR);
		if (slave < 0)
			_exit(126);
		dup2(slave, STDERR_FILENO);
		close(slave);
		close(master);
		execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
		_exit(127);
	}
	/* Read until the slave side is closed (EIO on Linux). */
	for (;;) {
		ssize_t got =
		    read(master, tty_out + n, sizeof(tty_out) - 1 - n);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0 || n + (size_t)got >= sizeof(tty_out) - 1) {
			if (got > 0)
				n += (size_t)got;
			break;
		}
		n += (size_t)got;
	}
	tty_out[n] = '\0';
	close(master);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	std_out[0] = '\0';
	fd = open(out_path, O_RDONLY);
	if (fd >= 0) {
		ssize_t got = read(fd, std_out, sizeof(std_out) - 1);

		std_out[got > 0 ? got : 0] = '\0';
		close(fd);
	}
	return WEXITSTATUS(status);
}

/* No trace of a progress line in s. */
static void check_no_progress(const char *what, const char *s)
{
	if (strchr(s, '\r') || strstr(s, "ETA") || strstr(s, "(100%)")) {
		fprintf(stderr, "%s: progress where none belongs:\n%s\n", what,
		        s);
		test_failures++;
	}
}

int main(void)
{
	const char *big = test_path("big"), *small = test_path("small");
	char args[1024], out[1 << 16];
	int probe;

	if (!test_cli_path()) {
		fprintf(stderr, "no CLI (GPUFILE_CLI): skipped\n");
		return TEST_SKIP;
	}
	probe = posix_openpt(O_RDWR | O_NOCTTY);
	if (probe < 0) {
		fprintf(stderr, "no pseudo-terminals: skipped\n");
		return TEST_SKIP;
	}
	close(probe);

	/* write, 64 MiB (the threshold) on a terminal: the line is drawn
	 * and ends at 100%; stdout has the report only. */
	snprintf(args, sizeof(args),
	         "write %s --size 64m --pattern zero "
	         "--chunk 8m --host",
	         big);
	CHECK_EQ(run_on_tty(args), 0);
	CHECK_CONTAINS(tty_out, "wrote 0 B of 64 MiB (  0%)");
	CHECK_CONTAINS(tty_out, "wrote 64 MiB of 64 MiB (100%)");
	/* The sync after the last byte is named while it runs. */
	CHECK_CONTAINS(tty_out, "syncing to storage");
	CHECK_CONTAINS(tty_out, "GB/s");
	CHECK_CONTAINS(std_out, "wrote:    67108864 bytes");
	check_no_progress("write stdout", std_out);

	/* read, on a terminal: the same, and the ETA while it runs. */
	snprintf(args, sizeof(args), "read %s --host --window 8m", big);
	CHECK_EQ(run_on_tty(args), 0);
	CHECK_CONTAINS(tty_out, "read 0 B of 64 MiB (  0%)  0.00 GB/s  ETA");
	CHECK_CONTAINS(tty_out, "read 64 MiB of 64 MiB (100%)");
	CHECK_CONTAINS(std_out, "read:     67108864 bytes");
	check_no_progress("read stdout", std_out);

	/* --json on a terminal: no progress anywhere. */
	snprintf(args, sizeof(args), "read %s --host --json", big);
	CHECK_EQ(run_on_tty(args), 0);
	check_no_progress("read --json stderr", tty_out);
	check_no_progress("read --json stdout", std_out);
	CHECK_CONTAINS(std_out, "\"bytes\": 67108864");
	snprintf(args, sizeof(args),
	         "write %s --size 64m --pattern zero --host --json", big);
	CHECK_EQ(run_on_tty(args), 0);
	check_no_progress("write --json stderr", tty_out);

	/* --no-progress on a terminal. */
	snprintf(args, sizeof(args), "read %s --host --no-progress", big);
	CHECK_EQ(run_on_tty(args), 0);
	check_no_progress("read --no-progress", tty_out);

	/* A small file on a terminal: over before a display would help. */
	CHECK_EQ(test_make_file(small, 1 << 20, 3), 0);
	snprintf(args, sizeof(args), "read %s --host", small);
	CHECK_EQ(run_on_tty(args), 0);
	check_no_progress("small read", tty_out);

	/* stderr a pipe, not a terminal. */
	CHECK_EQ(test_cli_run(out, sizeof(out), "read %s --host", big), 0);
	check_no_progress("read, stderr a pipe", out);
	CHECK_CONTAINS(out, "read:     67108864 bytes");

	test_cleanup();
	return test_finish("test_cli_progress");
}
