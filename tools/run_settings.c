/*
 * Per-run settings as options (see run_settings.h).
 */
#include "run_settings.h"
#include "gpufile.h"
#include "msg.h"

#include <inttypes.h>
#include <stdio.h>

const char *const run_settings_modes[] = {"auto", "on", "off", NULL};

int run_settings_check(const char *cmd, const struct run_settings *s)
{
	if (s->direct && s->no_direct)
		return msg_usage_error(cmd, "--direct and --no-direct exclude "
		                            "each other");
	return 0;
}

/* Sets setting name to value, for option opt. */
static int set(const char *cmd, const char *opt, const char *name,
               const char *value)
{
	if (gpufile_config_set(name, value) == 0)
		return 0;
	return msg_usage_error(cmd, "--%s \"%s\": %s", opt, value,
	                       gpufile_errmsg());
}

int run_settings_apply(const char *cmd, const struct run_settings *s)
{
	char value[32];
	int rc = run_settings_check(cmd, s);

	if (rc == 0 && s->have_threads) {
		snprintf(value, sizeof(value), "%" PRIu64, s->threads);
		rc = set(cmd, "threads", "nthreads", value);
	}
	if (rc == 0 && s->have_task_size) {
		snprintf(value, sizeof(value), "%" PRIu64, s->task_size);
		rc = set(cmd, "task-size", "task_size", value);
	}
	if (rc == 0 && (s->direct || s->no_direct))
		rc = set(cmd, s->direct ? "direct" : "no-direct", "direct_io",
		         s->direct ? "on" : "off");
	if (rc == 0 && s->have_compat)
		rc = set(cmd, "compat", "compat_mode",
		         run_settings_modes[s->compat]);
	return rc;
}

int run_settings_use(const char *cmd, const struct run_settings *s)
{
	int rc = run_settings_apply(cmd, s);

	if (rc == 0 && gpufile_config_check())
		rc = msg_error(cmd, "%s", gpufile_errmsg());
	return rc;
}
