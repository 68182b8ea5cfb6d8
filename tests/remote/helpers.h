/* Helpers of the remote tests (tests/test_remote*.c): start a local test
 * server that prints "PORT <n>", stop it, check a destination byte by
 * byte with canaries around it, and read a whole object and a part of
 * it. Header-only: the tests are one .c each. */
#ifndef GPUFILE_TEST_REMOTE_HELPERS_H
#define GPUFILE_TEST_REMOTE_HELPERS_H

#define _GNU_SOURCE
#include <gpufile.h>
#include <libgen.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testlib.h"

/* The folder of this header (tests/remote), found through __FILE__. */
static inline const char *remote_dir(void)
{
	static char dir[4096];

	if (!dir[0]) {
		char tmp[4096];
		snprintf(tmp, sizeof(tmp), "%s", __FILE__);
		snprintf(dir, sizeof(dir), "%s", dirname(tmp));
	}
	return dir;
}

/* Runs argv with its stdout on a pipe and reads its first line (which
 * starts "PORT n") into line (len bytes). Returns the child's pid or -1
 * when it did not start. */
static inline pid_t server_start_line(char *const argv[], char *line,
                                      size_t len)
{
	int fds[2];
	pid_t pid;
	FILE *f;

	if (pipe(fds) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		execvp(argv[0], argv);
		_exit(127);
	}
	close(fds[1]);
	f = fdopen(fds[0], "r");
	if (!f || !fgets(line, (int)len, f) || strncmp(line, "PORT ", 5)) {
		if (f)
			fclose(f);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -1;
	}
	fclose(f);
	return pid;
}

/* server_start_line() for a server whose line is "PORT n". */
static inline pid_t server_start(char *const argv[], int *port)
{
	char line[256];
	pid_t pid = server_start_line(argv, line, sizeof(line));

	if (pid > 0 && sscanf(line, "PORT %d", port) != 1) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -1;
	}
	return pid;
}

/* Starts fault_server.py with an object of size bytes, its /stall/ paths
 * stalling stall_s seconds (0: the server's default); *port gets its
 * port. Returns its pid, or -1 when it did not start (said on stderr). */
static inline pid_t fault_server_start(size_t size, int stall_s, int *port)
{
	char server[4200], bytes[32], stall[16];
	char *argv[] = {"python3", server, bytes, stall_s > 0 ? stall : NULL,
	                NULL};
	pid_t pid;

	snprintf(server, sizeof(server), "%s/fault_server.py", remote_dir());
	snprintf(bytes, sizeof(bytes), "%zu", size);
	snprintf(stall, sizeof(stall), "%d", stall_s);
	pid = server_start(argv, port);
	if (pid < 0)
		fprintf(stderr, "cannot start %s: FAILED\n", server);
	return pid;
}

/* Starts fault_server.py with an object of size bytes and writes its
 * /ok/obj URL into url (len bytes). Returns the server's pid, or -1 when
 * this build lacks remote reads (a skip of the remote part, a failure
 * under CI: test_missing) or the server did not start (a failure: it is
 * ours); said on stderr, the failures counted. */
static inline pid_t fault_server_ok(size_t size, char *url, size_t len)
{
	int port = 0;
	pid_t pid;

	if (!strstr(gpufile_features(), "remote")) {
		if (test_missing("remote part", "libcurl (built without it)") ==
		    1)
			test_failures++;
		return -1;
	}
	pid = fault_server_start(size, 0, &port);
	if (pid < 0) {
		test_failures++;
		return -1;
	}
	snprintf(url, len, "http://127.0.0.1:%d/ok/obj", port);
	return pid;
}

static inline void server_stop(pid_t pid)
{
	if (pid > 0) {
		kill(pid, SIGTERM);
		waitpid(pid, NULL, 0);
	}
}

/* Byte i of fault_server.py's and s3_server.py's object. */
static inline unsigned char object_byte(uint64_t i)
{
	return (unsigned char)((i * 131 + (i >> 9)) & 255);
}

#define CANARY     0xA5
#define CANARY_LEN 4096

/* A destination of len bytes with CANARY_LEN canary bytes on each side. */
static inline unsigned char *dest_new(size_t len)
{
	unsigned char *p = malloc(len + 2 * CANARY_LEN);

	if (p)
		memset(p, CANARY, len + 2 * CANARY_LEN);
	return p ? p + CANARY_LEN : NULL;
}

static inline void dest_free(unsigned char *d)
{
	if (d)
		free(d - CANARY_LEN);
}

/* Counts bytes out of place: canaries changed, and (want_all) bytes of
 * [0, len) not equal to object byte off + i, or (!want_all, after a
 * failed request) bytes that are neither untouched nor the right byte:
 * a failed request may leave whole ranges, never misplaced ones. */
static inline size_t dest_bad(const unsigned char *d, size_t len, uint64_t off,
                              int want_all)
{
	size_t bad = 0;

	for (size_t i = 0; i < CANARY_LEN; i++)
		bad += (d[-1 - (long)i] != CANARY) + (d[len + i] != CANARY);
	for (size_t i = 0; i < len; i++) {
		unsigned char want = object_byte(off + i);
		if (d[i] != want && (want_all || d[i] != CANARY))
			bad++;
	}
	return bad;
}

/* Opens url, checks its size and name, reads the whole object (size
 * bytes) into host memory and then part bytes at offset at, each checked
 * byte by byte with its canaries. Returns the number of failures, each
 * printed with the url. */
static inline int read_whole_and_part(const char *url, size_t size, size_t part,
                                      uint64_t at)
{
	gpufile_t *h = NULL;
	unsigned char *d = dest_new(size);
	char shown[4096];
	int failed = 0;

	/* The handle's name: the URL as the redaction shows it (no query). */
	gpufile_redact_url(url, shown, sizeof(shown));
	if (!d || gpufile_open(&h, url, "r")) {
		fprintf(stderr, "  %s: %s\n", url,
		        d ? gpufile_errmsg() : "no memory");
		dest_free(d);
		return 1;
	}
#define WHOLE_PART_CHECK(cond)                                                 \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "  %s: failed: %s\n", url, #cond);     \
			failed++;                                              \
		}                                                              \
	} while (0)
	WHOLE_PART_CHECK(gpufile_size(h) == (int64_t)size);
	WHOLE_PART_CHECK(strcmp(gpufile_filename(h), shown) == 0);
	WHOLE_PART_CHECK(gpufile_pread(h, d, size, 0) == (ssize_t)size);
	WHOLE_PART_CHECK(dest_bad(d, size, 0, 1) == 0);
	memset(d - CANARY_LEN, CANARY, size + 2 * CANARY_LEN);
	WHOLE_PART_CHECK(gpufile_pread(h, d, part, (off_t)at) == (ssize_t)part);
	WHOLE_PART_CHECK(dest_bad(d, part, at, 1) == 0);
#undef WHOLE_PART_CHECK
	gpufile_close(h);
	dest_free(d);
	return failed;
}

#endif
