/*
 * The gpufile tool's messages on stderr (see msg.h).
 */
#define _GNU_SOURCE
#include "msg.h"
#include "text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* The message goes through text_put() whole: its arguments are often the
 * library's messages, which quote tensor names, metadata keys and paths
 * as the file or the command line gave them. */
static void vreport(const char *cmd, const char *fmt, va_list ap)
{
	char *msg = NULL;

	fprintf(stderr, "gpufile%s%s: ", cmd ? " " : "", cmd ? cmd : "");
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	text_put(stderr, msg ? msg : "out of memory for a message");
	free(msg);
	fputc('\n', stderr);
}

void msg_warn(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(cmd, fmt, ap);
	va_end(ap);
}

int msg_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(cmd, fmt, ap);
	va_end(ap);
	fprintf(stderr, "Try 'gpufile%s%s --help'.\n", cmd ? " " : "",
	        cmd ? cmd : "");
	return EXIT_USAGE;
}

int msg_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(cmd, fmt, ap);
	va_end(ap);
	return EXIT_RUNTIME;
}
