/*
 * gpufile bench and load given what a hostile or new user gives them:
 * a URL with a password and a presigned query is never shown with them
 * (text, --json, messages); --size or --file-size below --bs is a usage
 * error, found before a file is laid out; --file-size bounds a block
 * device's region as a file's; an index of many shards is
 * expanded in n log n (pairwise, 200000 shards took minutes of CPU),
 * each shard once in the order the index first names it; an index that
 * is no regular file (a FIFO) is refused, not waited on.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "remote/helpers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[1 << 16];

/* Runs gpufile ARGS; checks exit status want and that the output holds
 * needle. */
static void expect(int want, const char *needle, const char *args)
{
	test_cli_expect(out, sizeof(out), want, needle, "%s", args);
}

static void expect_no_secret(const char *args)
{
	if (strstr(out, "s3cret") || strstr(out, "SECRET")) {
		fprintf(stderr, "gpufile %s shows the secret:\n%s\n", args,
		        out);
		test_failures++;
	}
}

/* bench of a URL with user:password@ and X-Amz-Signature: the report,
 * --json and the messages that name the file show it redacted. */
static void test_bench_url(void)
{
	char url[256], secret_url[512], args[1024];
	const char *port;
	pid_t pid = fault_server_ok(100000, url, sizeof(url));

	if (pid < 0)
		return;
	port = strrchr(url, ':'); /* ":PORT/ok/obj" */
	snprintf(secret_url, sizeof(secret_url),
	         "http://user:s3cret@127.0.0.1%s?X-Amz-Signature=SECRET", port);
	snprintf(args, sizeof(args), "bench '%s' --host --bs 4k --size 8k",
	         secret_url);
	expect(0, "?<query redacted> (region 100000 bytes)", args);
	expect_no_secret(args);
	snprintf(args, sizeof(args),
	         "bench '%s' --host --bs 4k --size 8k --json", secret_url);
	expect(0, "\"file\": \"http://127.0.0.1", args);
	expect_no_secret(args);
	snprintf(args, sizeof(args), "bench '%s' --host --bs 1m", secret_url);
	expect(1, "--bs 1048576 is larger than the region of http://", args);
	expect_no_secret(args);
	/* The object is not the pattern: verify names the offset. */
	snprintf(args, sizeof(args),
	         "bench '%s' --host --bs 4k --size 4k --verify --json",
	         secret_url);
	expect(1, "verify: http://127.0.0.1", args);
	expect_no_secret(args);
	server_stop(pid);
}

static void test_bench_sizes(void)
{
	const char *file = test_path("sizes"), *fresh = test_path("fresh");
	char args[1024];

	CHECK_EQ(test_make_file(file, 65536, 1), 0);
	/* One block of 4096 bytes was moved for --size 1. */
	snprintf(args, sizeof(args), "bench %s --host --bs 4k --size 1", file);
	expect(2, "--size 1 is smaller than --bs 4096", args);
	/* A 1 KiB file was laid out before --bs was found too large. */
	snprintf(args, sizeof(args), "bench %s --host --bs 4k --file-size 1k",
	         fresh);
	expect(2, "--file-size 1024 is smaller than --bs 4096", args);
	CHECK(access(fresh, F_OK) != 0);
	snprintf(args, sizeof(args),
	         "bench %s --host --rw write --bs 4k --file-size 4k", fresh);
	expect(0, "done:     1 I/Os, 4096 bytes", args);
}

/* A block device (a loop device, where this user may make one): writes
 * stay in --file-size (it was passed over: the whole device was the
 * region, written to its end). */
static void test_bench_block_device(void)
{
	const char *img = test_path("loop.img");
	char dev[256] = "", cmd[1024], args[1024];
	unsigned char *data;
	size_t got = 0, i;
	FILE *p;

	CHECK_EQ(test_make_file(img, 4 << 20, 0), 0);
	CHECK(truncate(img, 0) == 0 && truncate(img, 4 << 20) == 0);
	snprintf(cmd, sizeof(cmd), "losetup -f --show %s 2>/dev/null", img);
	p = geteuid() == 0 ? popen(cmd, "r") : NULL;
	if (p) {
		if (!fgets(dev, sizeof(dev), p))
			dev[0] = '\0';
		pclose(p);
	}
	dev[strcspn(dev, "\n")] = '\0';
	if (strncmp(dev, "/dev/loop", 9) != 0) {
		fprintf(stderr, "no loop device (losetup, root): block device "
		                "part skipped\n");
		return;
	}
	snprintf(args, sizeof(args),
	         "bench %s --host --rw write --bs 64k --file-size 1m", dev);
	expect(0, "(region 1048576 bytes)", args);
	CHECK_CONTAINS(out, "done:     16 I/Os, 1048576 bytes");
	snprintf(cmd, sizeof(cmd), "losetup -d %s", dev);
	CHECK(system(cmd) == 0);
	data = test_read_file(img, &got);
	CHECK_EQ(got, (size_t)4 << 20);
	for (i = 1 << 20; data && i < got && data[i] == 0; i++)
		;
	CHECK_EQ(i, got);
	free(data);
}

#define MANY_SHARDS 200000

/* An index that is a FIFO is refused, not opened: load blocked in open()
 * for a writer that never came (timeout ends that, as a failure). */
static void test_load_fifo_index(void)
{
	const char *fifo = test_path("fifo.index.json");
	char cmd[2048];
	size_t n;
	FILE *p;
	int status;

	CHECK(mkfifo(fifo, 0600) == 0);
	snprintf(cmd, sizeof(cmd), "timeout 60 %s load %s --host 2>&1",
	         test_cli_path(), fifo);
	p = popen(cmd, "r");
	CHECK(p != NULL);
	if (!p)
		return;
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	status = pclose(p);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 1);
	CHECK_CONTAINS(out, "fifo.index.json: not a regular file");
	unlink(fifo);
}

static void test_load_index(void)
{
	char dir[512], p[1024], args[2048];
	struct rlimit old, cpu;
	FILE *f;
	int rc;

	snprintf(dir, sizeof(dir), "%s", test_path("index"));
	CHECK(mkdir(dir, 0700) == 0);
	/* b before a, b again twice: loaded b, a, each once. */
	snprintf(p, sizeof(p), "%s/a.safetensors", dir);
	test_make_st_u8(p, "ta", 0);
	snprintf(p, sizeof(p), "%s/b.safetensors", dir);
	test_make_st_u8(p, "tb", 0);
	snprintf(p, sizeof(p), "%s/order.index.json", dir);
	f = fopen(p, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs("{\"weight_map\": {\"x\": \"b.safetensors\", \"y\": "
	      "\"a.safetensors\", \"z\": \"./b.safetensors\", \"w\": "
	      "\"b.safetensors\"}}",
	      f);
	CHECK(fclose(f) == 0);
	snprintf(args, sizeof(args), "load %s --host", p);
	expect(0, "total: 2 files, 2 tensors", args);
	CHECK(strstr(out, "/b.safetensors:") &&
	      strstr(out, "/b.safetensors:") < strstr(out, "/a.safetensors:"));

	/* MANY_SHARDS shards, the first missing: named after the index is
	 * expanded. Pairwise that was ~2e10 comparisons of names sharing a
	 * 40-byte prefix (minutes); sorted, about a second. A limit on CPU
	 * time (not wall time: CI machines are loaded) of 60 s tells them
	 * apart: SIGXCPU ends the tool. */
	snprintf(p, sizeof(p), "%s/many.index.json", dir);
	f = fopen(p, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs("{\"weight_map\": {", f);
	for (int i = 0; i < MANY_SHARDS; i++)
		fprintf(f, "%s\"t%d\": \"%040d.safetensors\"", i ? ", " : "", i,
		        i);
	fputs("}}", f);
	CHECK(fclose(f) == 0);
	CHECK(getrlimit(RLIMIT_CPU, &old) == 0);
	cpu = old;
	if (old.rlim_max == RLIM_INFINITY || old.rlim_max > 60)
		cpu.rlim_cur = 60;
	CHECK(setrlimit(RLIMIT_CPU, &cpu) == 0);
	snprintf(args, sizeof(args), "load %s --host", p);
	rc = test_cli_run(out, sizeof(out), "%s", args);
	CHECK(setrlimit(RLIMIT_CPU, &old) == 0);
	CHECK_EQ(rc, 1);
	CHECK_CONTAINS(out, "0000000000000000000000000000000000000000."
	                    "safetensors");
}

int main(void)
{
	if (!test_cli_path()) {
		fprintf(stderr, "no CLI (GPUFILE_CLI): skipped\n");
		return TEST_SKIP;
	}
	test_bench_sizes();
	test_bench_block_device();
	if (system("python3 -c 1 2>/dev/null") == 0)
		test_bench_url(); /* its server is python3's */
	else if (test_missing("test_cli_hostile URL part", "python3") == 1)
		test_failures++;
	test_load_index();
	test_load_fifo_index();
	test_cleanup();
	return test_finish("test_cli_hostile");
}
