/*
 * The gpufile tool's usage errors, parsed by one option table: every
 * bad value exits 2 with a message naming the option and the value, and
 * the same fault reads the same way everywhere -- 2^64 - 1 and 2^64 as
 * --size are both "too large", --device -1 is "not a device number".
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <stdio.h>
#include <string.h>

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

static void test_sizes(const char *file)
{
	static const char *const cmds[] = {"read %s", "write %s"};
	char args[1024];

	for (int c = 0; c < 2; c++) {
		char head[600];

		snprintf(head, sizeof(head), cmds[c], file);
		/* 2^64 - 1 fits in 64 bits but not in a file offset; 2^64
		 * fits in neither: one kind of message, one exit code. */
		snprintf(args, sizeof(args), "%s --size 18446744073709551615",
		         head);
		expect(2,
		       "--size \"18446744073709551615\": too large (at most "
		       "9223372036854775807 bytes)",
		       args);
		snprintf(args, sizeof(args), "%s --size 18446744073709551616",
		         head);
		expect(2,
		       "--size \"18446744073709551616\": too large (at most "
		       "9223372036854775807 bytes)",
		       args);
		snprintf(args, sizeof(args), "%s --size 9223372036854775808",
		         head);
		expect(2, "too large", args);
		snprintf(args, sizeof(args), "%s --size abc", head);
		expect(2, "--size \"abc\": not a size", args);
		snprintf(args, sizeof(args), "%s --size 4k --device -1", head);
		expect(2, "--device \"-1\": not a device number", args);
		if (strstr(out, "whole number"))
			CHECK(!"--device -1 called \"not a whole number\"");
		snprintf(args, sizeof(args), "%s --size 4k --device 99999",
		         head);
		expect(2, "--device \"99999\": not a device number", args);
		snprintf(args, sizeof(args), "%s --size 4k --host --device 0",
		         head);
		expect(2, "--host and --device exclude each other", args);
		snprintf(args, sizeof(args), "%s --size", head);
		expect(2, "option --size needs a value", args);
		snprintf(args, sizeof(args), "%s --size 4k --frob", head);
		expect(2, "unknown option --frob", args);
		/* A value to a flag, and a prefix of two options, are no
		 * unknown options: the message says what is wrong. */
		snprintf(args, sizeof(args), "%s --size 4k --json=yes", head);
		expect(2, "option --json takes no value (got \"yes\")", args);
		snprintf(args, sizeof(args), "%s --size 4k --help=1", head);
		expect(2, "option --help takes no value (got \"1\")", args);
		snprintf(args, sizeof(args), "%s --size 4k --h", head);
		expect(2, "option --h is ambiguous (--host, --help)", args);
	}
}

static void test_other_values(const char *file)
{
	char args[1024];

	snprintf(args, sizeof(args), "read %s --offset 18446744073709551616",
	         file);
	expect(2, "--offset \"18446744073709551616\": too large", args);
	snprintf(args, sizeof(args), "read %s --window 1", file);
	expect(2, "--window \"1\": use 4 KiB to", args);
	snprintf(args, sizeof(args), "read %s --repeat 0", file);
	expect(2, "--repeat \"0\": out of range [1, 1000000]", args);
	snprintf(args, sizeof(args), "read %s --repeat x", file);
	expect(2, "--repeat \"x\": not a whole number", args);
	snprintf(args, sizeof(args), "write %s --size 1m --pattern stripes",
	         file);
	expect(2, "--pattern \"stripes\": use random, zero or sequence", args);
	snprintf(args, sizeof(args), "write %s --size 1m --chunk 1", file);
	expect(2, "--chunk \"1\": use 4 KiB to 1 GiB", args);
	snprintf(args, sizeof(args), "write %s", file);
	expect(2, "--size is required", args);
	snprintf(args, sizeof(args), "write %s --size 1m --d", file);
	expect(2, "option --d is ambiguous (--direct, --device)", args);
	snprintf(args, sizeof(args), "write %s --size 1m --di=1", file);
	expect(2, "option --direct takes no value (got \"1\")", args);
	expect(2, "--task-size \"0\": must be at least",
	       "explain --size 1m --task-size 0");
	expect(2, "--size is required", "explain");
	/* Options with no limit but 64 bits: 2^64 does not fit, and the
	 * message says so instead of quoting a bound of 0 or a minimum. */
	expect(2,
	       "--size \"18446744073709551616\": too large (does not fit in "
	       "64 bits)",
	       "explain --size 18446744073709551616");
	expect(2,
	       "--offset \"99999999999999999999\": too large (does not fit "
	       "in 64 bits)",
	       "explain --size 1g --offset 99999999999999999999");
	expect(2,
	       "--task-size \"18446744073709551616\": too large (does not "
	       "fit in 64 bits)",
	       "explain --size 1g --task-size 18446744073709551616");
	/* A read past the largest file offset is a usage error too, however
	 * it gets there (it was exit 1, from the library's -EINVAL). */
	expect(2,
	       "--offset 0 with --size 18446744073709551615: the read ends "
	       "past the largest file offset (9223372036854775807)",
	       "explain --size 18446744073709551615");
	expect(2, "--offset 9223372036854775807 with --size 1: the read ends",
	       "explain --size 1 --offset 9223372036854775807");
	expect(0, "read of 1 B",
	       "explain --size 1 --offset 9223372036854775806");
	expect(2, "--watch \"0\": not a number of seconds", "stats --watch 0");
	expect(2, "--watch \"soon\": not a number of seconds",
	       "stats --watch soon");
	expect(2, "\"abc\" is not a PID", "stats abc");
	/* stats options that do not go together are refused, not ignored
	 * (--clean --json printed text; --watch with no PID, the list). */
	expect(2, "--clean takes no --json", "stats --clean --json");
	expect(2, "--clean takes no PID", "stats --clean 1");
	expect(2, "--clean takes no --watch", "stats --clean --watch 1");
	expect(2, "--watch needs a PID", "stats --watch 1");
	expect(2, "--watch needs a PID", "stats --json --watch 1");
	snprintf(args, sizeof(args), "cache %s --offset 9223372036854775808",
	         file);
	expect(2, "--offset \"9223372036854775808\": too large", args);
	snprintf(args, sizeof(args), "cache %s --size 18446744073709551616",
	         file);
	expect(2,
	       "--size \"18446744073709551616\": too large (does not fit in "
	       "64 bits)",
	       args);
	snprintf(args, sizeof(args), "cache %s --size abc", file);
	expect(2, "--size \"abc\": not a size", args);
	snprintf(args, sizeof(args), "load %s --device -1", file);
	expect(2, "--device \"-1\": not a device number", args);
	snprintf(args, sizeof(args), "load %s --device 99999", file);
	expect(2, "--device \"99999\": not a device number", args);
	snprintf(args, sizeof(args), "load %s --host --device 0", file);
	expect(2, "--host and --device exclude each other", args);
	snprintf(args, sizeof(args), "load %s --device", file);
	expect(2, "option --device needs a value", args);
}

static void test_arguments(const char *file)
{
	char args[1024];

	expect(2, "no FILE given", "read");
	snprintf(args, sizeof(args), "read %s other", file);
	expect(2, "one FILE only (got \"other\" too)", args);
	expect(2, "unexpected argument \"b\"", "check a b");
	expect(2, "unexpected argument \"x\"", "config x");
	expect(2, "unexpected argument \"x\"", "explain --size 1m x");
	expect(2, "no FILE given", "cache");
	snprintf(args, sizeof(args), "cache %s other", file);
	expect(2, "one FILE only (got \"other\" too)", args);
	snprintf(args, sizeof(args), "cache %s --frob", file);
	expect(2, "unknown option --frob", args);
	expect(2, "no FILE given", "load");
	expect(2, "no FILE given", "load --host");
	snprintf(args, sizeof(args), "load %s --frob", file);
	expect(2, "unknown option --frob", args);
	/* Every subcommand answers --help and -h on stdout, exit 0. */
	static const char *const cmds[] = {"read",  "write", "config",
	                                   "stats", "check", "explain",
	                                   "cache", "load"};
	for (int i = 0; i < 8; i++) {
		snprintf(args, sizeof(args), "%s --help", cmds[i]);
		expect(0, "sage: gpufile", args);
		snprintf(args, sizeof(args), "%s -h", cmds[i]);
		expect(0, "sage: gpufile", args);
		snprintf(args, sizeof(args), "help %s", cmds[i]);
		expect(0, "sage: gpufile", args);
	}
	/* help is in the list of commands, and answers as they do. */
	expect(0, "Usage: gpufile COMMAND", "help");
	expect(0, "Usage: gpufile COMMAND", "help --help");
	expect(0, "Usage: gpufile COMMAND", "help -h");
	expect(0, "Usage: gpufile COMMAND", "help help");
	expect(2, "unknown command \"frob\"", "help frob");
}

int main(void)
{
	const char *file = test_path("f");

	if (!test_cli_path()) {
		fprintf(stderr, "no CLI (GPUFILE_CLI): skipped\n");
		return TEST_SKIP;
	}
	CHECK_EQ(test_make_file(file, 4096, 1), 0);
	test_sizes(file);
	test_other_values(file);
	test_arguments(file);
	test_cleanup();
	return test_finish("test_cli_usage");
}
