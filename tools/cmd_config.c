/*
 * gpufile config: every setting, its effective value, where the value
 * came from and what it means.
 */
#include "commands.h"
#include "gpufile.h"
#include "json.h"
#include "msg.h"
#include "options.h"
#include "summary.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* One line of the table; a bad value has its message in error
 * (malloc'd; NULL when that failed too). */
struct row {
	const char *name, *help;
	char value[512], source[192];
	int bad;
	char *error;
};

static void row_fill(struct row *r, int i)
{
	char variable[128];
	gpufile_source_t src = GPUFILE_SOURCE_DEFAULT;

	r->name = gpufile_config_name(i);
	r->help = gpufile_config_help(i);
	if (gpufile_config_get(r->name, r->value, sizeof(r->value), &src,
	                       variable, sizeof(variable))) {
		snprintf(r->value, sizeof(r->value), "(bad)");
		snprintf(r->source, sizeof(r->source),
		         "environment (see errors below)");
		r->bad = 1;
		r->error = strdup(gpufile_errmsg());
	} else if (variable[0]) {
		snprintf(r->source, sizeof(r->source), "%s %s",
		         gpufile_source_name(src), variable);
	} else {
		snprintf(r->source, sizeof(r->source), "%s",
		         gpufile_source_name(src));
	}
}

static const char *row_error(const struct row *r)
{
	return r->error ? r->error
	                : "a bad value (no memory left for the message)";
}

static int width(int w, const char *s)
{
	const int n = (int)strlen(s);

	return n > w ? n : w;
}

/* The table, its columns as wide as their widest entry; then the notes
 * (clamps, environment warnings: config.c) and the errors, which also go
 * to stderr. */
static int config_text(void)
{
	const int n = gpufile_config_count();
	struct row *rows = calloc(n > 0 ? (size_t)n : 1, sizeof(*rows));
	int wname = 0, wvalue = 0, wsource = 0, bad = 0;

	if (!rows)
		return msg_error("config", "out of memory");
	wname = width(wname, "SETTING");
	wvalue = width(wvalue, "VALUE");
	wsource = width(wsource, "SOURCE");
	for (int i = 0; i < n; i++) {
		row_fill(&rows[i], i);
		wname = width(wname, rows[i].name);
		wvalue = width(wvalue, rows[i].value);
		wsource = width(wsource, rows[i].source);
	}
	printf("%-*s  %-*s  %-*s  %s\n", wname, "SETTING", wvalue, "VALUE",
	       wsource, "SOURCE", "MEANING");
	for (int i = 0; i < n; i++)
		printf("%-*s  %-*s  %-*s  %s\n", wname, rows[i].name, wvalue,
		       rows[i].value, wsource, rows[i].source, rows[i].help);
	for (int i = 0; i < gpufile_config_warning_count(); i++) {
		char w[512];
		if (gpufile_config_warning(i, w, sizeof(w)) == 0)
			printf("%s %s\n", i ? "        " : "\nnotes:", w);
	}
	for (int i = 0; i < n; i++) {
		if (!rows[i].bad)
			continue;
		printf("%s %s\n",
		       bad ? "        " : "\nerrors:", row_error(&rows[i]));
		bad = 1;
	}
	if (bad) /* the errors on stderr after the table, not amid it */
		fflush(stdout);
	for (int i = 0; i < n; i++) {
		if (rows[i].bad)
			msg_error("config", "%s", row_error(&rows[i]));
		free(rows[i].error);
	}
	free(rows);
	return bad ? EXIT_RUNTIME : EXIT_OK;
}

static int config_json(void)
{
	struct json j;
	int bad;

	json_init(&j, stdout);
	json_object_begin(&j, NULL);
	bad = summary_json_settings(&j, "settings");
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
		return msg_error("config", "%s", gpufile_errmsg());
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
