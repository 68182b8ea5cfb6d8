/*
 * gpufile config: every setting, its effective value, where the value
 * came from and what it means.
 */
#include "commands.h"
#include "gpufile.h"
#include "options.h"
#include "util.h"

#include <stdio.h>

static const char usage[] =
    "Usage: gpufile config [--json]\n"
    "\n"
    "Prints every setting: its effective value (sizes in bytes), where the\n"
    "value came from (default, environment GPUFILE_<NAME>, KvikIO's\n"
    "KVIKIO_<NAME>, or a setter) and what it means. A GPUFILE_ variable\n"
    "wins over its KVIKIO_ twin.\n"
    "\n"
    "  --json         print one JSON object instead of text\n"
    "  --help         print this help\n"
    "\n"
    "Exit status: 0 ok, 1 when a variable holds a bad value (the message\n"
    "names it), 2 usage error.\n";

static int config_text(void)
{
	int bad = 0;

	printf("%-20s %-12s %-34s %s\n", "SETTING", "VALUE", "SOURCE",
	       "MEANING");
	for (int i = 0; i < gpufile_config_count(); i++) {
		const char *name = gpufile_config_name(i);
		char value[512], variable[128], source[192];
		gpufile_source_t src = GPUFILE_SOURCE_DEFAULT;

		if (gpufile_config_get(name, value, sizeof(value), &src,
		                       variable, sizeof(variable))) {
			printf("%-20s %-12s %-34s %s\n", name, "(bad)",
			       "environment (see below)",
			       gpufile_config_help(i));
			util_error("config", "%s", gpufile_errmsg());
			bad = 1;
			continue;
		}
		if (variable[0])
			snprintf(source, sizeof(source), "%s %s",
			         gpufile_source_name(src), variable);
		else
			snprintf(source, sizeof(source), "%s",
			         gpufile_source_name(src));
		printf("%-20s %-12s %-34s %s\n", name, value, source,
		       gpufile_config_help(i));
	}
	/* Clamps and environment warnings (config.c). */
	for (int i = 0; i < gpufile_config_warning_count(); i++) {
		char w[512];
		if (gpufile_config_warning(i, w, sizeof(w)) == 0)
			printf("%s %s\n", i ? "        " : "\nnotes:", w);
	}
	return bad ? EXIT_RUNTIME : EXIT_OK;
}

static int config_json(void)
{
	struct json j;
	int bad;

	json_init(&j, stdout);
	json_object_begin(&j, NULL);
	bad = util_json_settings(&j, "settings");
	json_array_begin(&j, "help");
	for (int i = 0; i < gpufile_config_count(); i++) {
		json_object_begin(&j, NULL);
		json_key_str(&j, "name", gpufile_config_name(i));
		json_key_str(&j, "help", gpufile_config_help(i));
		json_object_end(&j);
	}
	json_array_end(&j);
	/* Clamps and environment warnings (config.c). */
	json_array_begin(&j, "warnings");
	for (int i = 0; i < gpufile_config_warning_count(); i++) {
		char w[512];
		if (gpufile_config_warning(i, w, sizeof(w)) == 0)
			json_key_str(&j, NULL, w);
	}
	json_array_end(&j);
	json_key_str(&j, "version", gpufile_version());
	json_key_str(&j, "features", gpufile_features());
	json_object_end(&j);
	if (bad) {
		gpufile_config_check();
		return util_error("config", "%s", gpufile_errmsg());
	}
	return EXIT_OK;
}

int cmd_config(int argc, char **argv)
{
	int json = 0, rc;
	const struct opt opts[] = {
	    {.name = "json", .kind = OPT_FLAG, .dest = &json},
	};
	const struct opt_spec spec = {"config", usage, opts, 1, NULL, 0, 0};

	if (opt_parse(&spec, argc, argv, &rc) < 0)
		return rc;
	return json ? config_json() : config_text();
}
