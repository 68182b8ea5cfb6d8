/*
 * The settings users change per run, as options of the gpufile tool
 * (--threads, --task-size, --direct, --no-direct, --compat) on read,
 * write, load, bench and (the path ones) check, shown as set in the
 * report; gpufile load of a checkpoint folder and of an index
 * (model.safetensors.index.json), as Python's load_checkpoint accepts
 * them; URLs named in the helps of read, load and check; and read
 * --repeat over a file that shrinks between repeats: each repeat's rate
 * from its own bytes and time, and a warning (the last repeat's bytes
 * over the fastest repeat's time printed 53 GB/s).
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char out[1 << 16];

/* Runs gpufile ARGS; checks exit status want and that the output holds
 * needle. */
static void expect(int want, const char *needle, const char *args)
{
	test_cli_expect(out, sizeof(out), want, needle, "%s", args);
}

/* Checks that the --json output of gpufile ARGS reports the settings the
 * flags set, from the setter. */
static void expect_settings(const char *args, int with_split)
{
	char cmd[2048];

	snprintf(cmd, sizeof(cmd), "%s --json 2>/dev/null", args);
	expect(0,
	       "\"compat_mode\": {\n      \"value\": \"on\",\n"
	       "      \"source\": \"setter\"",
	       cmd);
	CHECK_CONTAINS(out, "\"direct_io\": {\n      \"value\": \"off\",\n"
	                    "      \"source\": \"setter\"");
	if (!with_split)
		return;
	CHECK_CONTAINS(out, "\"nthreads\": {\n      \"value\": \"3\",\n"
	                    "      \"source\": \"setter\"");
	CHECK_CONTAINS(out, "\"task_size\": {\n      \"value\": \"65536\",\n"
	                    "      \"source\": \"setter\"");
}

static void test_settings(const char *file, const char *st)
{
	static const char *const flags =
	    "--threads 3 --task-size 64k --no-direct --compat on";
	char args[2048];

	snprintf(args, sizeof(args), "read %s --host %s", file, flags);
	expect_settings(args, 1);
	snprintf(args, sizeof(args), "write %s.w --host --size 64k %s", file,
	         flags);
	expect_settings(args, 1);
	snprintf(args, sizeof(args), "load %s --host %s", st, flags);
	expect_settings(args, 1);
	snprintf(args, sizeof(args), "bench %s --host --bs 4k --size 16k %s",
	         file, flags);
	expect_settings(args, 1);
	/* check takes the path ones: its settings item shows them. */
	snprintf(args, sizeof(args), "check %s --no-direct --compat on", file);
	expect(0, "gpufile.compat_mode                    on", args);
	CHECK_CONTAINS(out, "gpufile.direct_io                      off");
	/* --direct sets direct_io=on. */
	snprintf(args, sizeof(args), "read %s --host --direct --json", file);
	expect(0, "\"direct_io\": {\n      \"value\": \"on\"", args);
	/* Bad values name the option and the value. */
	snprintf(args, sizeof(args), "read %s --threads 0", file);
	expect(2, "--threads \"0\": out of range [1, 1024]", args);
	snprintf(args, sizeof(args), "write %s --size 4k --threads 2000", file);
	expect(2, "--threads \"2000\": out of range [1, 1024]", args);
	snprintf(args, sizeof(args), "read %s --task-size 0", file);
	expect(2, "--task-size \"0\": use 1 B to 1 TiB", args);
	snprintf(args, sizeof(args), "load %s --compat maybe", st);
	expect(2, "--compat \"maybe\": use auto, on or off", args);
	snprintf(args, sizeof(args), "check %s --compat x", file);
	expect(2, "--compat \"x\": use auto, on or off", args);
	snprintf(args, sizeof(args), "read %s --direct --no-direct", file);
	expect(2, "--direct and --no-direct exclude each other", args);
	snprintf(args, sizeof(args), "%s.w", file);
	unlink(args);
}

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	CHECK(f != NULL);
	if (!f)
		return;
	fputs(text, f);
	CHECK(fclose(f) == 0);
}

static void test_load_checkpoint(void)
{
	char dir[512], plain[512], p[1024], args[2048];

	snprintf(dir, sizeof(dir), "%s", test_path("ckpt"));
	snprintf(plain, sizeof(plain), "%s", test_path("shards"));
	CHECK(mkdir(dir, 0700) == 0 && mkdir(plain, 0700) == 0);
	/* An index naming s1 twice (once as ./s1) and s2 once; a shard
	 * the index does not name is not loaded. */
	snprintf(p, sizeof(p), "%s/s1.safetensors", dir);
	test_make_st_u8(p, "a", 1);
	snprintf(p, sizeof(p), "%s/s2.safetensors", dir);
	test_make_st_u8(p, "b", 2);
	snprintf(p, sizeof(p), "%s/unnamed.safetensors", dir);
	test_make_st_u8(p, "z", 3);
	snprintf(p, sizeof(p), "%s/model.safetensors.index.json", dir);
	write_text(p, "{\"metadata\": {\"total_size\": 24}, \"weight_map\": "
	              "{\"a\": \"s1.safetensors\", \"c\": "
	              "\"./s1.safetensors\", \"b\": \"s2.safetensors\"}}");
	snprintf(args, sizeof(args), "load %s --host --json", dir);
	expect(0, "\"tensors\": 2,", args);
	CHECK_CONTAINS(out, "s1.safetensors\"");
	CHECK_CONTAINS(out, "s2.safetensors\"");
	CHECK(!strstr(out, "unnamed"));
	CHECK(strstr(out, "s1.safetensors") < strstr(out, "s2.safetensors"));
	snprintf(args, sizeof(args), "load %s --host --json", p);
	expect(0, "\"tensors\": 2,", args);
	CHECK(!strstr(out, "unnamed"));

	/* A folder without an index: its shards in name order. */
	snprintf(p, sizeof(p), "%s/b.safetensors", plain);
	test_make_st_u8(p, "b", 2);
	snprintf(p, sizeof(p), "%s/a.safetensors", plain);
	test_make_st_u8(p, "a", 1);
	snprintf(args, sizeof(args), "load %s --host", plain);
	expect(0, "total: 2 files, 2 tensors", args);
	CHECK(strstr(out, "a.safetensors") < strstr(out, "b.safetensors"));

	/* What cannot be loaded is named. */
	snprintf(p, sizeof(p), "%s/bad.safetensors.index.json", plain);
	write_text(p, "{\"weight_map\": {\"a\": \"../x.safetensors\"}}");
	snprintf(args, sizeof(args), "load %s", p);
	expect(1,
	       "weight_map names shard \"../x.safetensors\" outside the "
	       "folder",
	       args);
	write_text(p, "{\"weight\": 1}");
	expect(1, "no \"weight_map\" object", args);
	write_text(p, "{not json");
	expect(1, "not a valid JSON index", args);
	snprintf(args, sizeof(args), "load %s", plain); /* the bad index */
	expect(1, "bad.safetensors.index.json", args);
	unlink(p);
	snprintf(p, sizeof(p), "%s/empty", plain);
	CHECK(mkdir(p, 0700) == 0);
	snprintf(args, sizeof(args), "load %s", p);
	expect(1, "no *.safetensors.index.json and no *.safetensors file",
	       args);
}

/* read, load and check say that they take URLs. */
static void test_url_help(void)
{
	static const char *const cmds[] = {"read", "load", "check"};

	for (int i = 0; i < 3; i++) {
		char args[64];

		snprintf(args, sizeof(args), "%s --help", cmds[i]);
		expect(0, "http://, https:// or s3://BUCKET/KEY", args);
	}
}

/* The file shrinks from 64 KiB to 32 KiB right after the last 4 KiB
 * window of the first repeat (tests/cli_shim's preload library). */
static void test_repeat(void)
{
	const char *file = test_path("shrinks");
	char shim[1024], *slash, cmd[4096];
	FILE *p;
	size_t n;

	snprintf(shim, sizeof(shim), "%s", test_cli_path());
	slash = strrchr(shim, '/');
	if (slash)
		snprintf(slash, sizeof(shim) - (size_t)(slash - shim),
		         "/tests/cli_shim/libshrink_preload.so");
	if (!slash || access(shim, R_OK) != 0) {
		fprintf(stderr, "no %s: the repeat part skipped\n", shim);
		return;
	}
	CHECK_EQ(test_make_file(file, 65536, 7), 0);
	/* Each window one pread of the host path: no map copy, no
	 * O_DIRECT. The JSON's sums are checked by python3. */
	snprintf(
	    cmd, sizeof(cmd),
	    "SHRINK_FILE=%s SHRINK_AT=61440 SHRINK_TO=32768 "
	    "LD_PRELOAD=%s ASAN_OPTIONS=verify_asan_link_order=0 "
	    "GPUFILE_HOST_MAP_COPY=off %s read %s --host --no-direct "
	    "--window 4k --repeat 2 --json 2>&1 >%s.json | cat; python3 "
	    "-c 'import json,sys; d=json.load(open(sys.argv[1]));"
	    "each=[b/s/1e9 for b,s in zip(d[\"bytes_each\"],"
	    "d[\"seconds_each\"])];"
	    "assert d[\"bytes_each\"]==[65536,32768], d[\"bytes_each\"];"
	    "assert all(abs(a-b)<=1e-5*a for a,b in zip(each,"
	    "d[\"gbps_each\"])), (each, d[\"gbps_each\"]);"
	    "assert abs(d[\"gbps\"]-max(each))<=1e-5*max(each), d;"
	    "t=sum(d[\"seconds_each\"]);"
	    "assert abs(d[\"gbps_mean\"]-98304/t/1e9)<=1e-5*d[\"gbps_mean\"]"
	    ";print(\"sums ok\")' %s.json 2>&1",
	    file, shim, test_cli_path(), file, file, file);
	fflush(NULL);
	p = popen(cmd, "r");
	CHECK(p != NULL);
	if (!p)
		return;
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	pclose(p);
	CHECK_CONTAINS(out, "gpufile read: the repeats read different amounts "
	                    "(repeat 1: 65536 bytes, repeat 2: 32768 bytes)");
	CHECK_CONTAINS(out, "sums ok");
	if (test_failures)
		fprintf(stderr, "read --repeat over a shrinking file:\n%s\n",
		        out);
}

int main(void)
{
	const char *file = test_path("f");
	char st[512];

	if (!test_cli_path()) {
		fprintf(stderr, "no CLI (GPUFILE_CLI): skipped\n");
		return TEST_SKIP;
	}
	if (system("python3 -c 1 2>/dev/null") != 0)
		return test_missing("test_cli_flags", "python3");
	CHECK_EQ(test_make_file(file, 65536, 1), 0);
	snprintf(st, sizeof(st), "%s", test_path("one.safetensors"));
	test_make_st_u8(st, "t", 5);
	test_settings(file, st);
	test_load_checkpoint();
	test_url_help();
	test_repeat();
	test_cleanup();
	return test_finish("test_cli_flags");
}
