/*
 * Any bytes in a file name or in another process's segment: `read
 * --json`, `check --json` and `stats PID --json` stay valid UTF-8 JSON
 * (python3 -m json.tool parses them; a byte that is not UTF-8 is \u00XX,
 * a control byte \u00XX, a quote \"), and the text output of `gpufile
 * stats PID` carries no raw control byte or invalid UTF-8 to the
 * terminal (\xHH instead). The file name holds 0x01, 0xff, a quote and
 * an ESC sequence; the process lists it although it only read into host
 * memory.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NAME "a\x01\xff\"b\x1b[31m"

static const char *cli;

/* Runs cmd through sh; returns its exit status, its stdout in out. */
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

/* A Python check of the JSON on stdin: it must parse, and hold the file
 * name, its bad byte read as U+00FF, somewhere in a string. */
static const char *const check_py =
    "import json, sys\n"
    "raw = sys.stdin.buffer.read()\n"
    "text = raw.decode('utf-8')  # strict: invalid UTF-8 fails\n"
    "doc = json.loads(text)\n"
    "want = 'a\\x01\\xff\"b\\x1b[31m'\n"
    "def walk(v):\n"
    "    if isinstance(v, str):\n"
    "        return want in v\n"
    "    if isinstance(v, dict):\n"
    "        return any(walk(x) for x in v.values())\n"
    "    if isinstance(v, list):\n"
    "        return any(walk(x) for x in v)\n"
    "    return False\n"
    "sys.exit(0 if walk(doc) else 3)\n";

static void check_json(const char *what, const char *args, const char *py)
{
	char cmd[2048], out[256];
	int rc;

	/* The name has no single quote: '...' quotes it for sh. */
	snprintf(cmd, sizeof(cmd), "%s %s | python3 %s; echo \" $?\"", cli,
	         args, py);
	rc = run(cmd, out, sizeof(out));
	CHECK_EQ(rc, 0);
	CHECK_CONTAINS(out, " 0\n");
	fprintf(stderr, "%-14s JSON: python3 says%s", what, out);
}

int main(void)
{
	char file[512], py[512], args[1024], cmd[1024], out[1 << 16];
	int p[2], q[2], status;
	pid_t pid;
	char c;
	FILE *f;

	cli = getenv("GPUFILE_CLI");
	if (!cli || access(cli, X_OK) != 0) {
		fprintf(stderr, "no CLI (GPUFILE_CLI): skipped\n");
		return TEST_SKIP;
	}
	if (system("python3 -c 1 2>/dev/null") != 0) {
		fprintf(stderr, "no python3: skipped\n");
		return TEST_SKIP;
	}
	snprintf(file, sizeof(file), "%s", test_path(NAME));
	snprintf(py, sizeof(py), "%s", test_path("check.py"));
	if (test_make_file(file, 100000, 4) || !(f = fopen(py, "w")))
		return 1;
	fputs(check_py, f);
	fclose(f);

	snprintf(args, sizeof(args), "read '%s' --host --json", file);
	check_json("read --json", args, py);
	snprintf(args, sizeof(args), "check '%s' --json", file);
	check_json("check --json", args, py);

	/* A process that opened it and read into host memory. */
	CHECK_EQ(pipe(p), 0);
	CHECK_EQ(pipe(q), 0);
	pid = fork();
	if (pid == 0) {
		char buf[4096];
		gpufile_t *h;

		close(p[1]);
		close(q[0]);
		if (gpufile_open(&h, file, "r") ||
		    gpufile_pread(h, buf, sizeof(buf), 0) != sizeof(buf))
			_exit(2);
		if (write(q[1], "r", 1) != 1 || read(p[0], &c, 1) != 0)
			_exit(3);
		_exit(0);
	}
	close(p[0]);
	close(q[1]);
	CHECK_EQ(read(q[0], &c, 1), 1);

	snprintf(args, sizeof(args), "stats %d --json", (int)pid);
	check_json("stats --json", args, py);

	snprintf(cmd, sizeof(cmd), "%s stats %d", cli, (int)pid);
	CHECK_EQ(run(cmd, out, sizeof(out)), 0);
	fprintf(stderr, "$ gpufile stats %d (escaped)\n", (int)pid);
	{
		char shown[1 << 16];
		size_t o = 0;
		/* Show it without raw bytes even if the check fails. */
		for (const unsigned char *s = (const unsigned char *)out;
		     *s && o + 5 < sizeof(shown); s++) {
			if (*s == '\n' || (*s >= 0x20 && *s < 0x7f))
				shown[o++] = (char)*s;
			else
				o += (size_t)snprintf(shown + o, 5, "<%02x>",
				                      *s);
		}
		shown[o] = '\0';
		fprintf(stderr, "%s", shown);
	}
	/* Host reads list the file too (issue 11 item 3). */
	CHECK_CONTAINS(out, "files opened: 1");
	CHECK_CONTAINS(out, "a\\x01\\xff\"b\\x1b[31m");
	CHECK(strchr(out, '\x01') == NULL);
	CHECK(strchr(out, '\x1b') == NULL);
	CHECK(strchr(out, '\xff') == NULL);

	close(p[1]);
	close(q[0]);
	waitpid(pid, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	test_cleanup();
	return test_finish("test_json_bytes");
}
