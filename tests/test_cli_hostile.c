/*
 * gpufile load given what a hostile or new user gives it: an index of
 * many shards is
 * expanded in n log n (pairwise, 200000 shards took minutes of CPU),
 * each shard once in the order the index first names it.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static char out[1 << 16];

/* Runs gpufile ARGS; checks exit status want and that the output holds
 * needle. */
static void expect(int want, const char *needle, const char *args)
{
	int rc = test_cli_run(out, sizeof(out), "%s", args);

	if (rc != want || !strstr(out, needle)) {
		fprintf(stderr,
		        "gpufile %s: exit %d (want %d), output:\n%s\n"
		        "wanted it to contain: %s\n",
		        args, rc, want, out, needle);
		test_failures++;
	}
}

/* A safetensors file of one U8 tensor of 8 bytes. */
static void make_st(const char *path, const char *name)
{
	char header[256];
	unsigned char data[8] = {0};
	uint64_t len;
	FILE *f = fopen(path, "wb");

	snprintf(header, sizeof(header),
	         "{\"%s\":{\"dtype\":\"U8\",\"shape\":[8],"
	         "\"data_offsets\":[0,8]}}",
	         name);
	while (strlen(header) % 8)
		strcat(header, " ");
	len = strlen(header);
	CHECK(f != NULL);
	if (!f)
		return;
	CHECK(fwrite(&len, 8, 1, f) == 1);
	CHECK(fwrite(header, 1, len, f) == len);
	CHECK(fwrite(data, 1, 8, f) == 8);
	CHECK(fclose(f) == 0);
}

#define MANY_SHARDS 200000

static void test_load_index(void)
{
	char dir[512], p[1024], args[2048];
	struct rlimit old, cpu;
	FILE *f;
	int rc;

	snprintf(dir, sizeof(dir), "%s", test_path("index"));
	CHECK(mkdir(dir, 0700) == 0);
	/* b before a, b again: loaded b, a, each once. */
	snprintf(p, sizeof(p), "%s/a.safetensors", dir);
	make_st(p, "ta");
	snprintf(p, sizeof(p), "%s/b.safetensors", dir);
	make_st(p, "tb");
	snprintf(p, sizeof(p), "%s/order.index.json", dir);
	f = fopen(p, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs("{\"weight_map\": {\"x\": \"b.safetensors\", \"y\": "
	      "\"a.safetensors\", \"z\": \"./b.safetensors\"}}",
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
	test_load_index();
	test_cleanup();
	return test_finish("test_cli_hostile");
}
