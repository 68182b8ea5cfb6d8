/*
 * The settings a user changes per run, as options of every command they
 * apply to (read, write, load, bench; check takes the path ones): one
 * table of options and one place that hands them to the library
 * (gpufile_config_set), so that --threads means the same everywhere and
 * the report's settings show "setter" for what a flag set. gpufile(1)
 * documents them once, under RUN SETTINGS.
 */
#ifndef GPUFILE_TOOLS_RUN_SETTINGS_H
#define GPUFILE_TOOLS_RUN_SETTINGS_H

#include "options.h"

#include <stdint.h>

struct run_settings {
	uint64_t threads, task_size;
	int compat; /* index in run_settings_modes */
	int direct, no_direct;
	int have_threads, have_task_size, have_compat;
};

/* "auto", "on", "off": compat_mode's values, for --compat. */
extern const char *const run_settings_modes[];

/* The options that choose the path: --direct, --no-direct, --compat. */
#define RUN_SETTINGS_PATH_OPTS(s)                                              \
	{.name = "direct", .kind = OPT_FLAG, .dest = &(s)->direct},            \
	    {.name = "no-direct", .kind = OPT_FLAG, .dest = &(s)->no_direct},  \
	{                                                                      \
		.name = "compat", .kind = OPT_CHOICE, .dest = &(s)->compat,    \
		.given = &(s)->have_compat, .choices = run_settings_modes      \
	}

/* All of them: the path ones and --threads, --task-size (the settings'
 * own ranges). */
#define RUN_SETTINGS_OPTS(s)                                                   \
	RUN_SETTINGS_PATH_OPTS(s),                                             \
	    {.name = "threads",                                                \
	     .kind = OPT_COUNT,                                                \
	     .dest = &(s)->threads,                                            \
	     .given = &(s)->have_threads,                                      \
	     .min = 1,                                                         \
	     .max = 1024},                                                     \
	{                                                                      \
		.name = "task-size", .kind = OPT_SIZE,                         \
		.dest = &(s)->task_size, .given = &(s)->have_task_size,        \
		.min = 1, .max = 1ull << 40                                    \
	}

/* The usage line's words and the help's lines for them. */
#define RUN_SETTINGS_USAGE                                                     \
	"[--threads N] [--task-size B] [--direct | --no-direct] "              \
	"[--compat MODE]"
#define RUN_SETTINGS_PATH_USAGE "[--direct | --no-direct] [--compat MODE]"
#define RUN_SETTINGS_PATH_HELP                                                 \
	"  --direct       O_DIRECT where the file system takes it "            \
	"(direct_io=on)\n"                                                     \
	"  --no-direct    through the page cache (direct_io=off)\n"            \
	"  --compat MODE  auto, on (never cuFile) or off (cuFile or an "       \
	"error)\n"
#define RUN_SETTINGS_HELP                                                      \
	"  --threads N    worker threads (nthreads, 1 to 1024)\n"              \
	"  --task-size B  bytes per task (task_size)\n" RUN_SETTINGS_PATH_HELP

/* Checks that the options do not contradict each other (--direct with
 * --no-direct). Returns 0, or EXIT_USAGE after the message. */
int run_settings_check(const char *cmd, const struct run_settings *s);

/* Sets what was given (nthreads, task_size, direct_io, compat_mode) in
 * the library, over the environment. Returns 0, or EXIT_USAGE after a
 * message naming the option and the value. */
int run_settings_apply(const char *cmd, const struct run_settings *s);

/* run_settings_apply(), then the whole configuration checked
 * (gpufile_config_check: the environment and the config file with them),
 * as a command does before it opens a file. Returns 0, EXIT_USAGE, or
 * EXIT_RUNTIME after the library's message. */
int run_settings_use(const char *cmd, const struct run_settings *s);

#endif
