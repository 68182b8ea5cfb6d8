/*
 * The cuFile stats level gpufile asks for before cuFileDriverOpen, with
 * the fake cuFile (tests/fake_cufile): 3 when the user chose nothing (so
 * that cuFile's per-GPU nvfs/posix counters are there without
 * preparation); the user's level when one was chosen through the
 * cufile_stats setting (variable or setter) or CUFILE_STATS_LEVEL; and
 * cuFile's own when cufile.json's profile.cufile_stats is nonzero (not
 * overridden). NVIDIA's shipped cufile.json says 0: that is no choice.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include "cufile_shim.h"
#include "fake_cufile.h"
#include "gpufile.h"
#include "internal.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef FAKE_CUFILE_PATH
#error "FAKE_CUFILE_PATH must name libfake_cufile.so"
#endif

/* The level the fake was given (-1 when it cannot be asked), after
 * gpufile opened cuFile afresh in this process. */
static int level_after_open(int *reported)
{
	struct fake_cufile_counts c;
	fake_cufile_counts_fn counts;
	gpufile_cufile_info_t info;
	void *fake;
	int err, status;

	/* Settings read the environment once; read it again. */
	gpufile_config_reset();
	gpufile__cufile_reset();
	/* Kept loaded (never closed) across resets, so that the fake's
	 * level stays what it was when gpufile does not set it. */
	fake = dlopen(FAKE_CUFILE_PATH, RTLD_NOW | RTLD_GLOBAL);
	counts = fake ? (fake_cufile_counts_fn)dlsym(fake, "fake_cufile_counts")
	              : NULL;
	if (!counts)
		return -2;
	if (!gpufile__cufile_open(NULL, &err, &status)) {
		fprintf(stderr, "cuFile open: %s\n", gpufile_errmsg());
		return -3;
	}
	counts(&c);
	GPUFILE_INIT(info);
	gpufile_cufile_info(&info);
	*reported = info.stats_level;
	return c.stats_level;
}

static const char *json_file(const char *name, const char *text)
{
	const char *path = test_path(name);
	FILE *f = fopen(path, "w");

	if (!f)
		exit(1);
	fputs(text, f);
	fclose(f);
	return path;
}

int main(void)
{
	const char *shipped, *chosen;
	int reported = -1;

	unsetenv("CUFILE_STATS_LEVEL");
	unsetenv("GPUFILE_CUFILE_STATS");
	unsetenv("KVIKIO_CUFILE_STATS");
	setenv("GPUFILE_CUFILE_LIBRARY", FAKE_CUFILE_PATH, 1);
	/* What NVIDIA ships, comments and all: 0 is no choice. */
	shipped =
	    json_file("shipped.json",
	              "{\n  // cufile stats level(0-3)\n"
	              "  \"profile\": {\n    \"cufile_stats\": 0\n  },\n"
	              "  /* \"cufile_stats\": 2 in a comment */\n"
	              "  \"logging\": {\"dir\": \"cufile_stats: 1\"}\n}\n");
	chosen = json_file("chosen.json",
	                   "{ \"profile\": { \"cufile_stats\" : 2 } }\n");

	/* Nothing chosen (no cufile.json where we point): 3. */
	setenv("CUFILE_ENV_PATH_JSON", test_path("absent.json"), 1);
	CHECK_EQ(level_after_open(&reported), 3);
	CHECK_EQ(reported, 3);

	setenv("CUFILE_ENV_PATH_JSON", shipped, 1);
	CHECK_EQ(level_after_open(&reported), 3);
	CHECK_EQ(reported, 3);

	/* The user's CUFILE_STATS_LEVEL, even 0. */
	setenv("CUFILE_STATS_LEVEL", "1", 1);
	CHECK_EQ(level_after_open(&reported), 1);
	CHECK_EQ(reported, 1);
	setenv("CUFILE_STATS_LEVEL", "2", 1);
	CHECK_EQ(level_after_open(&reported), 2);
	unsetenv("CUFILE_STATS_LEVEL");

	/* gpufile's own setting: a variable, then a setter. */
	setenv("GPUFILE_CUFILE_STATS", "1", 1);
	CHECK_EQ(level_after_open(&reported), 1);
	CHECK_EQ(reported, 1);
	unsetenv("GPUFILE_CUFILE_STATS");
	CHECK_EQ(level_after_open(&reported), 3);
	{
		/* A setter: survives the cuFile reset, not a settings one. */
		int err, status;
		gpufile__cufile_reset();
		CHECK_EQ(gpufile_config_set("cufile_stats", "2"), 0);
		CHECK(gpufile__cufile_open(NULL, &err, &status) != NULL);
		gpufile_cufile_info_t info;
		GPUFILE_INIT(info);
		gpufile_cufile_info(&info);
		CHECK_EQ(info.stats_level, 2);
	}

	/* cufile.json's nonzero level is cuFile's to apply: gpufile does
	 * not call cuFileSetStatsLevel (the fake keeps its level, 1, set
	 * just before) and reports the file's. */
	setenv("CUFILE_STATS_LEVEL", "1", 1);
	CHECK_EQ(level_after_open(&reported), 1);
	unsetenv("CUFILE_STATS_LEVEL");
	setenv("CUFILE_ENV_PATH_JSON", chosen, 1);
	CHECK_EQ(level_after_open(&reported), 1);
	CHECK_EQ(reported, 2);
	/* A quote escaped in an earlier string does not end it (the scan
	 * lost step there and missed the level, then set 3 over it). */
	setenv("CUFILE_STATS_LEVEL", "1", 1);
	CHECK_EQ(level_after_open(&reported), 1);
	unsetenv("CUFILE_STATS_LEVEL");
	setenv("CUFILE_ENV_PATH_JSON",
	       json_file("escaped.json",
	                 "{ \"logging\": { \"dir\": \"/tmp/a\\\"b\" },\n"
	                 "  \"profile\": { \"cufile_stats\": 2 } }\n"),
	       1);
	CHECK_EQ(level_after_open(&reported), 1);
	CHECK_EQ(reported, 2);

	gpufile__cufile_reset();
	test_cleanup();
	return test_finish("test_cufile_stats_level");
}
