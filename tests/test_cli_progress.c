/*
 * gpufile write, read and load of large files draw a progress line
 * (bytes, percentage, rate, ETA; files and tensors for load) on stderr
 * when stderr is a terminal, moving at least every 64 MiB -- and never
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

/* How many times s draws a line starting with prefix ("\rread "). */
static int draws(const char *s, const char *prefix)
{
	int n = 0;

	for (const char *at = s; (at = strstr(at, prefix)); at++)
		n++;
	return n;
}

/* A safetensors file of 4 U8 tensors of 16 MiB each (64 MiB of data). */
static int make_checkpoint(const char *path)
{
	const size_t t = 16u << 20;
	char header[512];
	uint64_t len;
	int n = 0, rc;
	FILE *f = fopen(path, "wb");

	if (!f)
		return -1;
	n += snprintf(header + n, sizeof(header) - (size_t)n, "{");
	for (int i = 0; i < 4; i++)
		n += snprintf(header + n, sizeof(header) - (size_t)n,
		              "%s\"t%d\":{\"dtype\":\"U8\",\"shape\":[%zu],"
		              "\"data_offsets\":[%zu,%zu]}",
		              i ? "," : "", i, t, i * t, (i + 1) * t);
	n += snprintf(header + n, sizeof(header) - (size_t)n, "}");
	while (n % 8) /* the data section starts 8-byte aligned */
		header[n++] = ' ';
	len = (uint64_t)n;
	rc = fwrite(&len, 8, 1, f) == 1 && fwrite(header, 1, len, f) == len &&
	             ftruncate(fileno(f), (off_t)(8 + len + 4 * t)) == 0
	         ? 0
	         : -1;
	return fclose(f) || rc ? -1 : 0;
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
	/* test_path's buffer rotates: each path kept in a buffer here. */
	char big[512], small[512], big256[512], ck[512];
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
	snprintf(big, sizeof(big), "%s", test_path("big"));
	snprintf(small, sizeof(small), "%s", test_path("small"));
	snprintf(big256, sizeof(big256), "%s", test_path("big256"));
	snprintf(ck, sizeof(ck), "%s", test_path("ck.safetensors"));

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

	/* 256 MiB: the line moves at least every 64 MiB, whatever the
	 * speed (the read's window goes as 64 MiB requests, each drawn as it
	 * ends; the write's chunks too): the first line, one per 64 MiB and
	 * the last at least. */
	snprintf(args, sizeof(args),
	         "write %s --size 256m --pattern zero --chunk 64m --host",
	         big256);
	CHECK_EQ(run_on_tty(args), 0);
	CHECK(draws(tty_out, "\rwrote ") >= 6);
	CHECK_CONTAINS(tty_out, "wrote 64 MiB of 256 MiB ( 25%)");
	CHECK_CONTAINS(tty_out, "wrote 256 MiB of 256 MiB (100%)");
	snprintf(args, sizeof(args), "read %s --host", big256);
	CHECK_EQ(run_on_tty(args), 0);
	if (draws(tty_out, "\rread ") < 6) {
		fprintf(stderr, "read of 256 MiB drew %d lines:\n%s\n",
		        draws(tty_out, "\rread "), tty_out);
		test_failures++;
	}
	CHECK_CONTAINS(tty_out, "ETA");
	CHECK_CONTAINS(tty_out, "read 256 MiB of 256 MiB (100%)");
	CHECK_CONTAINS(std_out, "read:     268435456 bytes");
	check_no_progress("read 256 MiB stdout", std_out);

	/* load: the line names the file and the tensors done. */
	CHECK_EQ(make_checkpoint(ck), 0);
	snprintf(args, sizeof(args), "load %s --host", ck);
	CHECK_EQ(run_on_tty(args), 0);
	CHECK_CONTAINS(tty_out, "load 0 B of 64 MiB (  0%)");
	CHECK_CONTAINS(tty_out, "file 1/1, tensors 0 done");
	CHECK_CONTAINS(tty_out, "load 64 MiB of 64 MiB (100%)");
	CHECK_CONTAINS(tty_out, "file 1/1, tensors 4 done");
	check_no_progress("load stdout", std_out);
	snprintf(args, sizeof(args), "load %s --host --no-progress", ck);
	CHECK_EQ(run_on_tty(args), 0);
	check_no_progress("load --no-progress", tty_out);

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
