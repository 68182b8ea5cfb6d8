/*
 * The gpufile tool's standard output: output that cannot be written (a
 * full disk, here /dev/full) is an error, exit 1 with a message saying
 * so, for every command -- it used to exit 0 with the output lost. A
 * usage error keeps its own exit code, and output that was written still
 * exits 0.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[1 << 16];

/* Runs gpufile ARGS with stdout sent to dest and stderr into out.
 * Returns the exit status, or -1. */
static int run_to(const char *dest, const char *args)
{
	char cmd[4096];
	size_t n = 0;
	FILE *p;
	int status;

	/* stderr first, to the pipe; then stdout, to dest. The limit ends
	 * a command that loops on a failing stdout (stats --watch). */
	snprintf(cmd, sizeof(cmd), "timeout 20 %s %s 2>&1 >%s", test_cli_path(),
	         args, dest);
	fflush(NULL);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (n + 1 < sizeof(out)) {
		size_t got = fread(out + n, 1, sizeof(out) - 1 - n, p);
		if (got == 0)
			break;
		n += got;
	}
	out[n] = '\0';
	status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* gpufile ARGS > /dev/full: exit 1, and the message names the command
 * (when there is one) and what failed. */
static void expect_full(const char *args, const char *cmd)
{
	char want[128];
	int rc = run_to("/dev/full", args);

	snprintf(want, sizeof(want),
	         "gpufile%s%s: writing to standard output failed: ",
	         cmd ? " " : "", cmd ? cmd : "");
	if (rc != 1 || !strstr(out, want)) {
		fprintf(stderr,
		        "gpufile %s > /dev/full: exit %d (want 1), stderr:\n"
		        "%s\nwanted: %s\n",
		        args, rc, out, want);
		test_failures++;
	}
}

/* A safetensors file at path: one F32 tensor "w" of 4 elements. */
static int make_safetensors(const char *path)
{
	static const char header[] =
	    "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
	unsigned char len[8] = {sizeof(header) - 1};
	char data[16] = {0};
	FILE *f = fopen(path, "wb");
	int ok;

	if (!f)
		return -1;
	ok = fwrite(len, 1, 8, f) == 8 &&
	     fwrite(header, 1, sizeof(header) - 1, f) == sizeof(header) - 1 &&
	     fwrite(data, 1, sizeof(data), f) == sizeof(data);
	return fclose(f) == 0 && ok ? 0 : -1;
}

/* gpufile load's text: each file's device path once, as the reason
 * names it ("posix: ..."); it used to print the name twice, "device
 * path: posix: posix: ...". */
static void test_load_text(const char *st)
{
	char path_line[64];

	CHECK_EQ(test_cli_run(out, sizeof(out), "load %s --host", st), 0);
	CHECK_CONTAINS(out, "1 tensors, 16 bytes");
	snprintf(path_line, sizeof(path_line), "  device path: %s: ", "posix");
	CHECK_CONTAINS(out, path_line);
	CHECK(!strstr(out, "posix: posix:"));
}

int main(void)
{
	const char *file = test_path("f"), *st = test_path("st");
	char args[1024];
	gpufile_t *h;

	if (!test_cli_path()) {
		fprintf(stderr, "no CLI (GPUFILE_CLI): skipped\n");
		return TEST_SKIP;
	}
	if (access("/dev/full", W_OK) != 0) {
		fprintf(stderr, "no /dev/full: skipped\n");
		return TEST_SKIP;
	}
	CHECK_EQ(test_make_file(file, 64 << 10, 1), 0);
	CHECK_EQ(make_safetensors(st), 0);
	test_load_text(st);

	expect_full("config --json", "config");
	/* The errno of the failed write, where no earlier fflush took it. */
	CHECK_CONTAINS(out, "No space left on device");
	expect_full("config", "config");
	snprintf(args, sizeof(args), "read %s --host --json", file);
	expect_full(args, "read");
	snprintf(args, sizeof(args), "explain --size 1m");
	expect_full(args, "explain");
	expect_full("--version", NULL);
	expect_full("help read", "read");

	/* A watch whose output cannot be written stops, and says why; this
	 * process (with a handle open) is the one watched. */
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	snprintf(args, sizeof(args), "stats %d --watch 0.05", (int)getpid());
	expect_full(args, "stats");
	gpufile_close(h);

	/* A usage error keeps exit 2; written output still exits 0. */
	CHECK_EQ(run_to("/dev/full", "config --frob"), 2);
	CHECK_CONTAINS(out, "unknown option --frob");
	CHECK_EQ(run_to("/dev/null", "config --json"), 0);
	CHECK_EQ(out[0], '\0');

	test_cleanup();
	return test_finish("test_cli_output");
}
