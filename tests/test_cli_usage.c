/*
 * The gpufile tool's usage errors, parsed by one option table: every
 * bad value exits 2 with a message naming the option and the value, and
 * the same fault reads the same way everywhere -- 2^64 - 1 and 2^64 as
 * --size are both "too large", --device -1 is "not a device number".
 * Help and messages read alike: every help begins "Usage: gpufile CMD"
 * and lists --help and the exit status; a size error lists exactly the
 * suffixes the parser accepts (1T was accepted, not listed), as do the
 * settings' message and every help that mentions sizes; check says why
 * PATH failed first, on stderr; config's columns line up and its "see
 * below" has something below; explain --registered does not send the
 * reader to --registered.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile_private.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[1 << 16];

/* Runs gpufile ARGS; checks exit status want and that the output holds
 * needle. */
static void expect(int want, const char *needle, const char *args)
{
	test_cli_expect(out, sizeof(out), want, needle, "%s", args);
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
	expect(2, "option --d is ambiguous (--device, --direct)", args);
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
	                                   "cache", "load",  "bench"};
	for (int i = 0; i < 9; i++) {
		snprintf(args, sizeof(args), "%s --help", cmds[i]);
		expect(0, "Usage: gpufile", args);
		snprintf(args, sizeof(args), "%s -h", cmds[i]);
		expect(0, "Usage: gpufile", args);
		snprintf(args, sizeof(args), "help %s", cmds[i]);
		expect(0, "Usage: gpufile", args);
	}
	/* help is in the list of commands, and answers as they do. */
	expect(0, "Usage: gpufile COMMAND", "help");
	expect(0, "Usage: gpufile COMMAND", "help --help");
	expect(0, "Usage: gpufile COMMAND", "help -h");
	expect(0, "Usage: gpufile COMMAND", "help help");
	expect(2, "unknown command \"frob\"", "help frob");
}

/* Reads the file at path into out (NUL-terminated, cut to fit). */
static void slurp(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, len - 1, f) : 0;

	buf[n] = '\0';
	if (f)
		fclose(f);
}

static char err[1 << 16];

/* Runs gpufile ARGS with its stdout into out and its stderr into err
 * (apart: test_cli_run mixes them). Returns the exit status or -1. */
static int run_split(const char *args)
{
	const char *o = test_path("cli.stdout"), *e = test_path("cli.stderr");
	char cmd[4096];
	int status;

	snprintf(cmd, sizeof(cmd), "%s %s >%s 2>%s", test_cli_path(), args, o,
	         e);
	fflush(NULL);
	status = system(cmd);
	slurp(o, out, sizeof(out));
	slurp(e, err, sizeof(err));
	unlink(o);
	unlink(e);
	return status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* text with every run of white space made one space. */
static void squeeze(char *text)
{
	char *w = text;

	for (const char *r = text; *r; r++)
		if (!isspace((unsigned char)*r))
			*w++ = *r;
		else if (w > text && w[-1] != ' ')
			*w++ = ' ';
	*w = '\0';
}

/* Every help: "Usage: gpufile CMD" first, --help listed, the exit status
 * with its usage error; no "usage:" in lower case anywhere. */
static void test_help_form(void)
{
	static const char *const cmds[] = {"read",  "write", "config",
	                                   "stats", "check", "explain",
	                                   "cache", "load",  "bench"};
	char want[64];

	for (int i = 0; i < 9; i++) {
		CHECK_EQ(test_cli_run(out, sizeof(out), "%s --help", cmds[i]),
		         0);
		snprintf(want, sizeof(want), "Usage: gpufile %s ", cmds[i]);
		if (strncmp(out, want, strlen(want)) != 0) {
			fprintf(stderr, "gpufile %s --help begins:\n%.80s\n",
			        cmds[i], out);
			test_failures++;
		}
		CHECK_CONTAINS(out, "\n  --help ");
		CHECK_CONTAINS(out, "\nExit status: 0 ");
		CHECK(!strstr(out, "usage:"));
		squeeze(out);
		CHECK_CONTAINS(out, " 2 usage error.");
	}
	CHECK_EQ(test_cli_run(out, sizeof(out), "check --frob"), 2);
	CHECK(!strstr(out, "usage:"));
}

/* The suffixes gpufile_parse_size accepts, the size error's list, the
 * settings' message and the helps: all the same. */
static void test_size_forms(const char *file)
{
	static const char *const units[] = {"k", "m", "g", "t", "p", "e"};
	static const char *const tails[] = {"", "b", "ib"};
	char forms[512], words[512], *at, *end;

	CHECK_EQ(test_cli_run(out, sizeof(out), "read %s --size 1x", file), 2);
	at = strstr(out, "not a size; use ");
	CHECK(at != NULL);
	if (!at)
		return;
	at += strlen("not a size; use ");
	end = strchr(at, '\n');
	snprintf(forms, sizeof(forms), "%.*s",
	         (int)(end ? end - at : (long)strlen(at)), at);
	/* The list's words, lower case, each between spaces. */
	words[0] = ' ';
	for (size_t i = 0; forms[i] && i + 2 < sizeof(words); i++)
		words[i + 1] = isalnum((unsigned char)forms[i])
		                   ? (char)tolower((unsigned char)forms[i])
		                   : ' ';
	words[strlen(forms) + 1] = ' ';
	words[strlen(forms) + 2] = '\0';
	CHECK_EQ(gpufile_parse_size("1b", &(uint64_t){0}), 0);
	CHECK(strstr(words, " b ") != NULL);
	for (int u = 0; u < 6; u++)
		for (int t = 0; t < 3; t++) {
			char suffix[8], text[16], word[12];
			uint64_t v;
			int accepted, listed;

			snprintf(suffix, sizeof(suffix), "%s%s", units[u],
			         tails[t]);
			snprintf(text, sizeof(text), "1%s", suffix);
			snprintf(word, sizeof(word), " %s ", suffix);
			accepted = gpufile_parse_size(text, &v) == 0;
			listed = strstr(words, word) != NULL;
			if (accepted != listed) {
				fprintf(
				    stderr,
				    "suffix \"%s\": %s by the parser, %s in "
				    "\"%s\"\n",
				    suffix, accepted ? "accepted" : "refused",
				    listed ? "listed" : "not listed", forms);
				test_failures++;
			}
		}
	/* A setting's bad size says the same. */
	setenv("GPUFILE_TASK_SIZE", "1x", 1);
	CHECK_EQ(test_cli_run(out, sizeof(out), "config"), 1);
	unsetenv("GPUFILE_TASK_SIZE");
	CHECK_CONTAINS(out, forms);
	/* And every help of a command that takes sizes. */
	static const char *const cmds[] = {"read", "write", "explain", "cache",
	                                   "bench"};
	for (int i = 0; i < 5; i++) {
		test_cli_run(out, sizeof(out), "%s --help", cmds[i]);
		squeeze(out);
		if (!strstr(out, forms)) {
			fprintf(stderr,
			        "gpufile %s --help does not say \"Sizes "
			        "accept %s\"\n",
			        cmds[i], forms);
			test_failures++;
		}
	}
}

/* gpufile check of a file that is not there: exit 1, and the reason is
 * the first line on stderr (it was only on stdout, after the platform's
 * forty lines). */
static void test_check_missing(void)
{
	const char *missing = test_path("no-such-file");
	char args[600], want[600];

	unlink(missing);
	snprintf(args, sizeof(args), "check %s", missing);
	CHECK_EQ(run_split(args), 1);
	snprintf(want, sizeof(want), "gpufile check: %s: ", missing);
	if (strncmp(err, want, strlen(want)) != 0) {
		fprintf(stderr,
		        "gpufile check MISSING: stderr:\n%s\nwanted it to "
		        "begin: %s\n",
		        err, want);
		test_failures++;
	}
	CHECK_CONTAINS(err, "No such file or directory");
	snprintf(args, sizeof(args), "check %s --json", missing);
	CHECK_EQ(run_split(args), 1);
	CHECK_CONTAINS(err, want);
	CHECK_CONTAINS(out, "\"summary\""); /* the JSON is whole */
}

/* Whether line has a column starting at col: a space before, none at. */
static int column_at(const char *line, size_t len, size_t col)
{
	return col < len && col > 0 && line[col - 1] == ' ' && line[col] != ' ';
}

/* gpufile config: columns that line up whatever their widths (a long
 * value pushed the rest of its row), and a bad value's "see below" that
 * has its error below, on stdout; the error also goes to stderr. */
static void test_config_text(void)
{
	const char *table = out;
	size_t cols[3];
	int rows = 0;

	setenv("GPUFILE_TASK_SIZE", "1x", 1);
	setenv("GPUFILE_CUFILE_LIBRARY",
	       "/opt/a/rather/long/directory/of/libraries/libcufile.so.0", 1);
	CHECK_EQ(run_split("config"), 1);
	unsetenv("GPUFILE_TASK_SIZE");
	unsetenv("GPUFILE_CUFILE_LIBRARY");
	CHECK_CONTAINS(err, "gpufile config: GPUFILE_TASK_SIZE=\"1x\": ");
	if (strncmp(table, "SETTING ", 8) != 0) {
		fprintf(stderr, "config's table:\n%s\n", table);
		test_failures++;
		return;
	}
	cols[0] = (size_t)(strstr(table, "VALUE") - table);
	cols[1] = (size_t)(strstr(table, "SOURCE") - table);
	cols[2] = (size_t)(strstr(table, "MEANING") - table);
	for (const char *line = strchr(table, '\n') + 1; *line && *line != '\n';
	     rows++) {
		const char *nl = strchr(line, '\n');
		const size_t len = nl ? (size_t)(nl - line) : strlen(line);

		for (int c = 0; c < 3; c++)
			if (!column_at(line, len, cols[c])) {
				fprintf(stderr,
				        "config: column %d (at %zu) not lined "
				        "up in: %.*s\n",
				        c + 2, cols[c], (int)len, line);
				test_failures++;
				break;
			}
		if (!nl)
			break;
		line = nl + 1;
	}
	CHECK(rows > 10);
	CHECK_CONTAINS(table, "(see errors below)");
	CHECK_CONTAINS(table, "\nerrors: GPUFILE_TASK_SIZE=\"1x\": not a size");
	CHECK(strstr(table, "errors:") > strstr(table, "task_size"));
}

/* explain --registered names the other plan by how to get it, not by the
 * option already given. */
static void test_explain_other_plan(void)
{
	CHECK_EQ(test_cli_run(out, sizeof(out), "explain --size 1m"), 0);
	CHECK_CONTAINS(out, "registered buffers: the same plan under "
	                    "gpufile's model (run with --registered)");
	CHECK_EQ(
	    test_cli_run(out, sizeof(out), "explain --size 1m --registered"),
	    0);
	CHECK_CONTAINS(out, "unregistered buffers: the same plan under "
	                    "gpufile's model (run without --registered)");
	CHECK(!strstr(out, "(see --registered)"));
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
	test_help_form();
	test_size_forms(file);
	test_check_missing();
	test_config_text();
	test_explain_other_plan();
	test_cleanup();
	return test_finish("test_cli_usage");
}
