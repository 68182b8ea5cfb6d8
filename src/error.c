/* Error codes, their descriptions, and the per-thread detailed message. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char last_message[1024];

const char *gpufile_strerror(int err)
{
	switch (err) {
#define GPUFILE_X_CASE(name, value, text)                                      \
	case name:                                                             \
		return text;
		GPUFILE_ERRORS(GPUFILE_X_CASE)
#undef GPUFILE_X_CASE
	case 0:
		return "success";
	default:
		break;
	}
	if (err < 0 && err > -4096)
		return strerror(-err);
	return "unknown error";
}

const char *gpufile_errmsg(void)
{
	return last_message;
}

/* Both format into a local buffer first: callers wrap the message before
 * theirs ("batch entry 0: %s", gpufile_errmsg()), and formatting straight
 * into last_message overwrote it while vsnprintf was still reading it
 * (the path in the inner message came out cut or repeated). */
int gpufile__fail(int err, const char *fmt, ...)
{
	char text[sizeof(last_message)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	memcpy(last_message, text, strlen(text) + 1);
	return err;
}

int gpufile__fail_msg(int err, const char *msg)
{
	char text[sizeof(last_message)];

	snprintf(text, sizeof(text), "%s", msg);
	memcpy(last_message, text, strlen(text) + 1);
	return err;
}

void gpufile__clear_error(void)
{
	last_message[0] = '\0';
}
