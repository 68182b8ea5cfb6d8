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

int gpufile__fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_message, sizeof(last_message), fmt, ap);
	va_end(ap);
	return err;
}

int gpufile__fail_msg(int err, const char *msg)
{
	snprintf(last_message, sizeof(last_message), "%s", msg);
	return err;
}

void gpufile__clear_error(void)
{
	last_message[0] = '\0';
}
