/*
 * One option parser for every subcommand: a subcommand describes its
 * options in a table (name, kind, where the value goes, its range) and
 * opt_parse() does the rest -- getopt_long, value parsing with the same
 * messages everywhere, --help, and the count of positional arguments.
 */
#ifndef GPUFILE_TOOLS_OPTIONS_H
#define GPUFILE_TOOLS_OPTIONS_H

#include <stdint.h>

enum opt_kind {
	OPT_FLAG,    /* no value; *(int *)dest = 1 */
	OPT_SIZE,    /* bytes with k/m/g suffixes; *(uint64_t *)dest */
	OPT_COUNT,   /* whole number; *(uint64_t *)dest */
	OPT_DEVICE,  /* GPU number in [0, 1023]; *(int *)dest */
	OPT_SECONDS, /* positive decimal number of seconds; *(double *)dest */
	OPT_STRING,  /* any text; *(const char **)dest */
	OPT_CHOICE,  /* one of choices (any case); *(int *)dest = its index */
};

struct opt {
	const char *name; /* long name without "--" */
	enum opt_kind kind;
	void *dest;
	int *given;   /* when not NULL, set to 1 when the option is given */
	uint64_t min; /* OPT_SIZE, OPT_COUNT: accepted range; max 0 means */
	uint64_t max; /* no limit (OPT_SECONDS: max in seconds, min unused) */
	const char *const *choices; /* OPT_CHOICE: NULL-terminated names */
};

struct opt_spec {
	const char *cmd;   /* subcommand name, for messages */
	const char *usage; /* printed on stdout by --help and -h */
	const struct opt *opts;
	int nopts;
	const char *arg_name; /* positional argument, e.g. "FILE" */
	int min_args, max_args;
};

/* At most this many options per subcommand (besides --help). */
#define OPT_MAX 24

/* Parses a non-negative decimal integer as option values are parsed (a
 * positional one, such as a PID). Returns 0, -EINVAL or -ERANGE. */
int opt_parse_count(const char *text, uint64_t *out);

/*
 * Parses argv[1..argc) against spec. Returns the index in argv of the
 * first positional argument (between min_args and max_args of them
 * follow) when the subcommand should go on. Returns -1 when it must exit
 * with *exit_code instead: EXIT_OK after printing the usage for --help,
 * EXIT_USAGE after a message naming the option and value at fault.
 */
int opt_parse(const struct opt_spec *spec, int argc, char **argv,
              int *exit_code);

#endif
