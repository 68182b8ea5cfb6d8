/*
 * What the gpufile tool says on stderr when a command cannot go on or
 * wants to be heard, and the exit codes that go with it: every message is
 * "gpufile CMD: MESSAGE", escaped as text_put() escapes (text.h).
 */
#ifndef GPUFILE_TOOLS_MSG_H
#define GPUFILE_TOOLS_MSG_H

/* Exit codes of every subcommand. */
enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* Prints "gpufile CMD: MESSAGE" and a hint to run --help on stderr.
 * Returns EXIT_USAGE. */
int msg_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints "gpufile CMD: MESSAGE" on stderr. Returns EXIT_RUNTIME. The
 * message (of this and msg_usage_error()) is escaped as text_escape()
 * escapes: a newline in it prints as \x0a. */
int msg_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints "gpufile CMD: MESSAGE" on stderr, as msg_error() does, for a
 * warning that does not end the command. */
void msg_warn(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
