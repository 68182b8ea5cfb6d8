/*
 * The gpufile command-line tool: main and the table of subcommands, each
 * in its own tools/cmd_*.c. It uses only the public API (gpufile.h), so
 * everything it shows a user can also be had from the library.
 */
#include "commands.h"
#include "gpufile.h"
#include "msg.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static const struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} commands[] = {
    {"read", cmd_read, "read a file into GPU or host memory, timed"},
    {"write", cmd_write, "create a test file of a given size"},
    {"config", cmd_config, "print every setting, its value and source"},
    {"stats", cmd_stats, "print the path counters of a running process"},
    {"check", cmd_check, "check the platform and predict a file's path"},
    {"explain", cmd_explain, "print the split plan of a request"},
    {"cache", cmd_cache, "show or drop a file's pages in the page cache"},
    {"load", cmd_load, "load safetensors checkpoints into GPU memory, timed"},
    {"bench", cmd_bench, "measure a workload (fio/gdsio-like) and its paths"},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *out)
{
	fprintf(out, "Usage: gpufile COMMAND [ARGS...]\n"
	             "       gpufile COMMAND --help\n"
	             "       gpufile --version\n"
	             "\n"
	             "Reads files into GPU (and host) memory and tells which "
	             "data path carried\nthe bytes, and why.\n\nCommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(out, "  %-9s %s\n", commands[i].name,
		        commands[i].summary);
	fprintf(out, "  %-9s %s\n", "help", "print this help, or a command's");
	fprintf(out, "\nExit status: 0 ok, 1 I/O or runtime error, 2 usage "
	             "error.\n");
}

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

static int run(int argc, char **argv)
{
	const struct command *c;

	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(stdout);
		return EXIT_OK;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
		printf("gpufile %s (%s)\n", gpufile_version(),
		       gpufile_features());
		return EXIT_OK;
	}
	if (strcmp(argv[1], "help") == 0) {
		char help[] = "--help";
		char *args[] = {argc > 2 ? argv[2] : NULL, help, NULL};

		/* "help" is a command of the list too: its help is this. */
		if (argc < 3 || strcmp(argv[2], "help") == 0 ||
		    strcmp(argv[2], "--help") == 0 ||
		    strcmp(argv[2], "-h") == 0) {
			usage(stdout);
			return EXIT_OK;
		}
		c = find_command(argv[2]);
		if (!c)
			return msg_usage_error(NULL, "unknown command \"%s\"",
			                       argv[2]);
		return c->run(2, args);
	}
	c = find_command(argv[1]);
	if (!c)
		return msg_usage_error(NULL, "unknown command \"%s\"", argv[1]);
	return c->run(argc - 1, argv + 1);
}

/*
 * printf() to a full disk or a broken file keeps its error in the stream:
 * without this check "gpufile config --json > /dev/full" printed nothing
 * and exited 0. Checked once here, after any command, so that no command
 * can forget. cmd names the command for the message (NULL: none).
 */
static int finish_stdout(const char *cmd, int rc)
{
	int failed, err;

	errno = 0;
	failed = fflush(stdout) != 0;
	err = errno;
	failed |= ferror(stdout) != 0;
	/* EBADF from fclose alone: stdout was closed (">&-") and nothing
	 * was written to it, so nothing was lost. */
	if (fclose(stdout) != 0 && !failed && errno != EBADF) {
		failed = 1;
		err = errno;
	}
	if (!failed)
		return rc;
	msg_error(cmd, "writing to standard output failed: %s",
	          err ? strerror(err) : "an earlier write failed");
	return rc == EXIT_OK ? EXIT_RUNTIME : rc;
}

int main(int argc, char **argv)
{
	const char *cmd = NULL;

	if (argc > 1 && find_command(argv[1]))
		cmd = argv[1];
	else if (argc > 2 && strcmp(argv[1], "help") == 0 &&
	         find_command(argv[2]))
		cmd = argv[2];
	return finish_stdout(cmd, run(argc, argv));
}
