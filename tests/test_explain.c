/*
 * gpufile_explain() and cufile.json parsing: the tutorial's worked
 * numbers with the default cufile.json, custom files (with NVIDIA's //
 * comments), malformed files, and `gpufile explain --json` through the
 * CLI when it is built.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"
#include "cufile_json.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define GiB (1ull << 30)

/* 1 when this build parses cufile.json (cJSON found at build time). */
static int have_parser;

static void defaults(gpufile_cufile_config_t *c)
{
	/* An empty JSON object: every value is the default. */
	const char *p = test_path("empty.json");
	FILE *f = fopen(p, "w");

	fputs("{}\n", f);
	fclose(f);
	GPUFILE_INIT(*c);
	if (have_parser)
		CHECK_EQ(gpufile_cufile_config_load(p, c), 0);
	else
		gpufile__cufile_defaults(c);
}

static void test_tutorial_numbers(void)
{
	gpufile_cufile_config_t c;
	gpufile_plan_t p;

	defaults(&c);
	CHECK_EQ(c.v[GPUFILE_CUFILE_MAX_IO_THREADS].value, 4);
	CHECK_EQ(c.v[GPUFILE_CUFILE_MAX_REQUEST_PARALLELISM].value, 4);
	CHECK_EQ(c.v[GPUFILE_CUFILE_MIN_IO_THRESHOLD_SIZE_KB].value, 8192);
	CHECK_EQ(c.v[GPUFILE_CUFILE_MAX_DIRECT_IO_SIZE_KB].value, 16384);
	CHECK_EQ(c.v[GPUFILE_CUFILE_MAX_IO_QUEUE_DEPTH].value, 128);
	CHECK_EQ(c.v[GPUFILE_CUFILE_PARALLEL_IO].value, 1);

	/* 1 GiB at the default 4 MiB task size: 256 cuFile requests. */
	GPUFILE_INIT(c);
	GPUFILE_INIT(p);
	CHECK_EQ(gpufile_explain(GiB, 0, 0, 0, &c, &p), 0);
	CHECK_EQ(p.task_size, 4 * MiB);
	CHECK_EQ(p.tasks, 256);
	CHECK_EQ(p.cufile_requests, 256);
	CHECK_EQ(p.nentries, 1);
	CHECK_EQ(p.entries[0].request_size, 4 * MiB);
	CHECK_EQ(p.entries[0].count, 256);
	CHECK_EQ(p.entries[0].parts, 1); /* 4 MiB <= the 8 MiB threshold */
	CHECK_EQ(p.whole_task_size, GiB);

	/* 1 GiB task size: one request, 4 parts of 256 MiB, nvidia-fs
	 * transfers of at most 16 MiB. */
	CHECK_EQ(gpufile_explain(GiB, 0, GiB, 0, &c, &p), 0);
	CHECK_EQ(p.tasks, 1);
	CHECK_EQ(p.cufile_requests, 1);
	CHECK_EQ(p.nentries, 1);
	CHECK_EQ(p.entries[0].parts, 4);
	CHECK_EQ(p.entries[0].part_size, 256 * MiB);
	CHECK_EQ(p.entries[0].max_transfer, 16 * MiB);
	CHECK_EQ(p.entries[0].transfers_per_part, 16);

	/* 16 MiB with the 8 MiB threshold: 2 parts of 8 MiB, not 4 of 4. */
	CHECK_EQ(gpufile_explain(16 * MiB, 0, 16 * MiB, 0, &c, &p), 0);
	CHECK_EQ(p.cufile_requests, 1);
	CHECK_EQ(p.entries[0].parts, 2);
	CHECK_EQ(p.entries[0].part_size, 8 * MiB);
	CHECK_EQ(p.entries[0].max_transfer, 8 * MiB);

	/* ... and cuFile receives it whole only when task_size >= 16 MiB. */
	CHECK_EQ(gpufile_explain(16 * MiB, 0, 0, 0, &c, &p), 0);
	CHECK_EQ(p.tasks, 4);
	CHECK_EQ(p.entries[0].request_size, 4 * MiB);
	CHECK_EQ(p.whole_task_size, 16 * MiB);
	CHECK_EQ(gpufile_explain(16 * MiB, 0, 8 * MiB, 0, &c, &p), 0);
	CHECK_EQ(p.tasks, 2);
	CHECK_EQ(gpufile_explain(16 * MiB, 0, 16 * MiB - 1, 0, &c, &p), 0);
	CHECK(p.tasks > 1);
	CHECK_EQ(gpufile_explain(16 * MiB, 0, 32 * MiB, 0, &c, &p), 0);
	CHECK_EQ(p.tasks, 1);
	CHECK_EQ(p.entries[0].request_size, 16 * MiB);

	/* Registered buffers: gpufile's model uses the same rule. */
	CHECK_EQ(gpufile_explain(GiB, 0, GiB, 1, &c, &p), 0);
	CHECK_EQ(p.registered, 1);
	CHECK_EQ(p.entries[0].parts, 4);
	CHECK(strstr(p.model_note, "registered") != NULL);
}

static void test_split_shapes(void)
{
	gpufile_cufile_config_t c;
	gpufile_plan_t p;

	defaults(&c);
	/* Unaligned offset: head, middle, tail, as pool.c splits. */
	GPUFILE_INIT(c);
	GPUFILE_INIT(p);
	CHECK_EQ(gpufile_explain(10 * MiB, 1 * MiB, 4 * MiB, 0, &c, &p), 0);
	CHECK_EQ(p.tasks, 3);
	CHECK_EQ(p.ntask_sizes, 3);
	CHECK_EQ(p.task_sizes[0], 3 * MiB);
	CHECK_EQ(p.task_sizes[1], 4 * MiB);
	CHECK_EQ(p.task_sizes[2], 3 * MiB);
	CHECK_EQ(p.nentries, 3);
	CHECK_EQ(p.entries[0].count + p.entries[1].count + p.entries[2].count,
	         3);
	/* Below gds_threshold (16 KiB): nothing reaches cuFile. */
	CHECK_EQ(gpufile_explain(8 * KiB, 0, 0, 0, &c, &p), 0);
	CHECK_EQ(p.tasks, 1);
	CHECK_EQ(p.below_threshold, 1);
	CHECK_EQ(p.cufile_requests, 0);
	CHECK_EQ(p.nentries, 0);
	/* Zero bytes: no task. */
	CHECK_EQ(gpufile_explain(0, 0, 0, 0, &c, &p), 0);
	CHECK_EQ(p.tasks, 0);
	/* Out of range. */
	CHECK_EQ(gpufile_explain(UINT64_MAX, 1, 0, 0, &c, &p), -EINVAL);
}

static const char *write_file(const char *name, const char *text)
{
	const char *p = test_path(name);
	FILE *f = fopen(p, "w");

	fputs(text, f);
	fclose(f);
	return p;
}

static void test_cufile_json(void)
{
	gpufile_cufile_config_t c;
	gpufile_plan_t p;
	const char *path;

	/* NVIDIA's style: // and block comments, other sections. */
	path = write_file("nv.json",
	                  "{\n"
	                  "  // logging\n"
	                  "  \"logging\": { \"dir\": \"/tmp//x\", \"level\": "
	                  "\"ERROR\" },\n"
	                  "  /* execution\n     settings */\n"
	                  "  \"execution\": {\n"
	                  "    \"max_io_queue_depth\": 64,\n"
	                  "    \"max_io_threads\": 8, // threads\n"
	                  "    \"parallel_io\": true,\n"
	                  "    \"min_io_threshold_size_kb\": 1024,\n"
	                  "    \"max_request_parallelism\": 2\n"
	                  "  },\n"
	                  "  \"properties\": { \"max_direct_io_size_kb\": "
	                  "4096, \"allow_compat_mode\": false },\n"
	                  "  \"denylist\": { \"filesystems\": [\"lustre\", "
	                  "\"nfs\"] }\n"
	                  "}\n");
	GPUFILE_INIT(c);
	CHECK_EQ(gpufile_cufile_config_load(path, &c), 0);
	CHECK_EQ(c.parsed, 1);
	CHECK_EQ(c.v[GPUFILE_CUFILE_MAX_IO_THREADS].value, 8);
	CHECK_EQ(c.v[GPUFILE_CUFILE_MAX_IO_THREADS].from_file, 1);
	CHECK_EQ(c.v[GPUFILE_CUFILE_MAX_REQUEST_PARALLELISM].value, 2);
	CHECK_EQ(c.v[GPUFILE_CUFILE_MAX_IO_QUEUE_DEPTH].value, 64);
	CHECK_EQ(c.v[GPUFILE_CUFILE_MAX_DIRECT_IO_SIZE_KB].value, 4096);
	CHECK_EQ(c.v[GPUFILE_CUFILE_ALLOW_COMPAT_MODE].value, 0);
	CHECK_EQ(c.v[GPUFILE_CUFILE_USE_POLL_MODE].from_file, 0);
	CHECK(strcmp(c.denied_filesystems, "lustre nfs") == 0);
	CHECK(strcmp(c.path_source, "argument") == 0);
	/* 16 MiB, one request: min(8, 2) = 2 parts of 8 MiB, in 4 MiB
	 * transfers. */
	GPUFILE_INIT(p);
	CHECK_EQ(gpufile_explain(16 * MiB, 0, 16 * MiB, 0, &c, &p), 0);
	CHECK_EQ(p.entries[0].parts, 2);
	CHECK_EQ(p.entries[0].max_transfer, 4 * MiB);
	CHECK_EQ(p.entries[0].transfers_per_part, 2);

	/* parallel_io false: one part. */
	path = write_file("serial.json",
	                  "{\"execution\": {\"parallel_io\": false}}");
	CHECK_EQ(gpufile_cufile_config_load(path, &c), 0);
	CHECK_EQ(gpufile_explain(GiB, 0, GiB, 0, &c, &p), 0);
	CHECK_EQ(p.entries[0].parts, 1);

	/* CUFILE_ENV_PATH_JSON overrides /etc/cufile.json. */
	setenv("CUFILE_ENV_PATH_JSON", path, 1);
	CHECK_EQ(gpufile_cufile_config_load(NULL, &c), 0);
	CHECK(strcmp(c.path_source, "CUFILE_ENV_PATH_JSON") == 0);
	CHECK_EQ(c.v[GPUFILE_CUFILE_PARALLEL_IO].value, 0);
	CHECK_EQ(gpufile_explain(GiB, 0, GiB, 0, NULL, &p), 0);
	CHECK_EQ(p.entries[0].parts, 1);
	unsetenv("CUFILE_ENV_PATH_JSON");

	/* Malformed: the message names the file and the line. */
	path = write_file("bad.json", "{\n  \"execution\": {\n"
	                              "    \"max_io_threads\": 4,,\n  }\n}\n");
	CHECK_EQ(gpufile_cufile_config_load(path, &c), GPUFILE_ECONFIG);
	fprintf(stderr, "malformed: %s\n", gpufile_errmsg());
	CHECK(strstr(gpufile_errmsg(), "bad.json:3:") != NULL);
	CHECK_EQ(c.v[GPUFILE_CUFILE_MAX_IO_THREADS].value, 4); /* defaults */
	CHECK_EQ(c.parsed, 0);

	/* Wrong type: the message names the key. */
	path = write_file("type.json",
	                  "{\"execution\": {\"max_io_threads\": \"4\"}}");
	CHECK_EQ(gpufile_cufile_config_load(path, &c), GPUFILE_ECONFIG);
	fprintf(stderr, "wrong type: %s\n", gpufile_errmsg());
	CHECK(strstr(gpufile_errmsg(), "execution.max_io_threads") != NULL);
	path = write_file("range.json",
	                  "{\"execution\": {\"max_io_threads\": -1}}");
	CHECK_EQ(gpufile_cufile_config_load(path, &c), GPUFILE_ECONFIG);
	CHECK(strstr(gpufile_errmsg(), "execution.max_io_threads") != NULL);
	path = write_file("sect.json", "{\"execution\": 3}");
	CHECK_EQ(gpufile_cufile_config_load(path, &c), GPUFILE_ECONFIG);
	CHECK(strstr(gpufile_errmsg(), "execution") != NULL);
	/* A key or a section given twice: which one cuFile takes is not
	 * known, so no plan is guessed (the first was taken silently). */
	path =
	    write_file("dupkey.json", "{\"execution\": {\"max_io_threads\": 4, "
	                              "\"max_io_threads\": 16}}");
	CHECK_EQ(gpufile_cufile_config_load(path, &c), GPUFILE_ECONFIG);
	CHECK_CONTAINS(gpufile_errmsg(), "dupkey.json");
	CHECK_CONTAINS(gpufile_errmsg(), "\"max_io_threads\" is given twice "
	                                 "in \"execution\"");
	path = write_file("dupsect.json",
	                  "{\"execution\": {\"max_io_threads\": 4}, "
	                  "\"execution\": {\"parallel_io\": false}}");
	CHECK_EQ(gpufile_cufile_config_load(path, &c), GPUFILE_ECONFIG);
	CHECK_CONTAINS(gpufile_errmsg(), "\"execution\" is given twice in "
	                                 "the top");
	path = write_file("dupdeep.json",
	                  "{\"fs\": {\"generic\": {\"posix_unaligned_writes\":"
	                  " false}, \"lustre\": {\"a\": 1, \"a\": 2}}}");
	CHECK_EQ(gpufile_cufile_config_load(path, &c), GPUFILE_ECONFIG);
	CHECK_CONTAINS(gpufile_errmsg(), "\"a\" is given twice in \"lustre\"");
	/* The same name in two objects is no repetition. */
	path = write_file("samename.json",
	                  "{\"execution\": {\"max_io_threads\": 8}, "
	                  "\"x\": {\"max_io_threads\": 2}}");
	CHECK_EQ(gpufile_cufile_config_load(path, &c), 0);
	CHECK_EQ(c.v[GPUFILE_CUFILE_MAX_IO_THREADS].value, 8);
	/* Truncated, and unterminated comment. */
	path = write_file("trunc.json", "{\"execution\": {");
	CHECK_EQ(gpufile_cufile_config_load(path, &c), GPUFILE_ECONFIG);
	path = write_file("comment.json", "{ /* never closed ");
	CHECK_EQ(gpufile_cufile_config_load(path, &c), GPUFILE_ECONFIG);
	/* Missing explicit file: -ENOENT, message names it. */
	CHECK_EQ(gpufile_cufile_config_load(test_path("none.json"), &c),
	         -ENOENT);
	CHECK(strstr(gpufile_errmsg(), "none.json") != NULL);
}

/* Runs the CLI (GPUFILE_CLI) and checks the JSON holds each needle. */
static void cli_expect(const char *args, const char *const *needles)
{
	const char *cli = getenv("GPUFILE_CLI");
	char cmd[1024], out[65536];
	size_t n;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "env -u CUFILE_ENV_PATH_JSON %s explain %s",
	         cli, args);
	f = popen(cmd, "r");
	CHECK(f != NULL);
	if (!f)
		return;
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	CHECK_EQ(pclose(f), 0);
	for (; *needles; needles++) {
		/* Compare without spaces so that layout does not matter. */
		char squeezed[65536];
		size_t k = 0;
		for (size_t i = 0; out[i]; i++)
			if (out[i] != ' ' && out[i] != '\n')
				squeezed[k++] = out[i];
		squeezed[k] = '\0';
		if (!strstr(squeezed, *needles)) {
			fprintf(stderr, "gpufile explain %s: no %s in:\n%s\n",
			        args, *needles, out);
			test_failures++;
		}
	}
}

static void test_cli(void)
{
	const char *cli = getenv("GPUFILE_CLI");
	char cmd[1024];

	if (!cli || access(cli, X_OK) != 0) {
		fprintf(stderr, "no CLI (GPUFILE_CLI): CLI part skipped\n");
		return;
	}
	{
		const char *const n[] = {
		    "\"tasks\":256", "\"cufile_requests\":256",
		    "\"request_size\":4194304", "\"parts\":1", NULL};
		cli_expect("--size 1GiB --json", n);
	}
	{
		const char *const n[] = {"\"tasks\":1",
		                         "\"cufile_requests\":1",
		                         "\"request_size\":1073741824",
		                         "\"parts\":4",
		                         "\"part_size\":268435456",
		                         "\"max_transfer\":16777216",
		                         NULL};
		cli_expect("--size 1GiB --task-size 1GiB --json", n);
	}
	{
		const char *const n[] = {"\"parts\":2", "\"part_size\":8388608",
		                         NULL};
		cli_expect("--size 16MiB --task-size 16MiB --json", n);
	}
	{
		const char *const n[] = {"\"tasks\":4",
		                         "\"request_size\":4194304",
		                         "\"whole_task_size\":16777216", NULL};
		cli_expect("--size 16MiB --json", n);
	}
	/* Usage errors exit 2; a bad cufile.json exits 1. */
	snprintf(cmd, sizeof(cmd), "%s explain --json >/dev/null 2>&1", cli);
	CHECK_EQ(WEXITSTATUS(system(cmd)), 2);
	snprintf(cmd, sizeof(cmd),
	         "%s explain --size 1g --cufile-json %s >/dev/null 2>&1", cli,
	         test_path("bad.json"));
	CHECK_EQ(WEXITSTATUS(system(cmd)), 1);
}

/* A request the parts cannot split into equal sizes: the plan says its
 * parts differ by a byte at most (none below the threshold), not that a
 * last part is whatever is left (33554433 B in 4: 8388609 then 3 bytes
 * short, below 8 MiB). */
static void test_uneven_parts(void)
{
	static char out[16384];
	gpufile_plan_t p;
	gpufile_cufile_config_t c;
	int rc;

	gpufile__cufile_defaults(&c);
	GPUFILE_INIT(p);
	CHECK_EQ(gpufile_explain(32 * MiB + 1, 0, GiB, 0, &c, &p), 0);
	CHECK_EQ(p.entries[0].parts, 4);
	CHECK_EQ(p.entries[0].part_size, 8 * MiB + 1);
	CHECK(p.entries[0].request_size / p.entries[0].parts >= 8 * MiB);
	rc = test_cli_run(out, sizeof(out),
	                  "explain --size 33554433 --task-size 1GiB");
	if (rc == -1)
		return; /* no CLI in this build */
	CHECK_EQ(rc, 0);
	CHECK_CONTAINS(out, "4 parts of 8388609 B or a byte less (split "
	                    "evenly)");
	rc = test_cli_run(out, sizeof(out),
	                  "explain --size 33554432 --task-size 1GiB");
	CHECK_EQ(rc, 0);
	CHECK_CONTAINS(out, "4 parts of 8 MiB;");
}

/* The note on device reads through the bounce buffers cut finer
 * (file.c's split_small_read) is printed where the cut changes the task
 * count, which depends on the tasks, not on the read being 1 MiB or more:
 * 600 KiB, and 100 KiB across a multiple of 512 KiB, run as 2 tasks
 * on the page-cache path, and were printed as 1 task with no note. */
static void test_split_note(void)
{
	static char out[16384];
	int rc;

	/* The cut depends on the worker count, which defaults to the
	 * machine's cores: set it, so the figures below hold everywhere. */
	setenv("GPUFILE_NTHREADS", "4", 1);
	rc = test_cli_run(out, sizeof(out), "explain --size 600k");
	if (rc == -1) {
		unsetenv("GPUFILE_NTHREADS");
		return; /* no CLI in this build */
	}
	CHECK_EQ(rc, 0);
	CHECK_CONTAINS(out, "cut finer");
	CHECK_CONTAINS(out, "(here 2 tasks of at most 512 KiB)");
	rc =
	    test_cli_run(out, sizeof(out), "explain --size 100k --offset 500k");
	CHECK_EQ(rc, 0);
	CHECK_CONTAINS(out, "(here 2 tasks of at most 512 KiB)");
	rc = test_cli_run(out, sizeof(out), "explain --size 4m");
	CHECK_EQ(rc, 0);
	CHECK_CONTAINS(out, "(here 4 tasks of at most 1 MiB)");
	setenv("GPUFILE_NTHREADS", "16", 1);
	rc = test_cli_run(out, sizeof(out), "explain --size 4m");
	CHECK_EQ(rc, 0);
	CHECK_CONTAINS(out, "(here 8 tasks of at most 512 KiB)");
	setenv("GPUFILE_NTHREADS", "4", 1);
	/* At an offset, offset + size is enough for one task, not the
	 * least (3 MiB gives one here): no "only with". */
	rc = test_cli_run(out, sizeof(out),
	                  "explain --size 2m --offset 3m --task-size 4m");
	CHECK_EQ(rc, 0);
	CHECK(strstr(out, "only with") == NULL);
	CHECK_CONTAINS(out, "with any task_size >= 5 MiB");
	rc = test_cli_run(out, sizeof(out),
	                  "explain --size 2m --offset 3m --task-size 3m");
	CHECK_EQ(rc, 0);
	CHECK_CONTAINS(out, "1 task: 1 x 2 MiB");
	/* Within one 512 KiB piece: nothing to cut. */
	rc = test_cli_run(out, sizeof(out), "explain --size 100k");
	CHECK_EQ(rc, 0);
	CHECK(strstr(out, "cut finer") == NULL);
	unsetenv("GPUFILE_NTHREADS");
}

int main(void)
{
	gpufile_cufile_config_t c;

	unsetenv("CUFILE_ENV_PATH_JSON");
	gpufile__cufile_defaults(&c);
	have_parser = gpufile__cufile_json_parse("{}", 2, "probe", &c) == 0;
	if (!have_parser)
		fprintf(stderr, "built without cJSON: parser tests skipped\n");
	test_tutorial_numbers();
	test_split_shapes();
	test_uneven_parts();
	test_split_note();
	if (have_parser) {
		test_cufile_json();
		test_cli();
	}
	test_cleanup();
	return test_finish("test_explain");
}
