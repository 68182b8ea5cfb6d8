/*
 * gpufile check [PATH] [--json]: the platform checks that decide the data
 * path, and for PATH the prediction of each layer's path
 * (gpufile_check()).
 */
#include "commands.h"
#include "gpufile.h"
#include "json.h"
#include "msg.h"
#include "options.h"
#include "run_settings.h"
#include "text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ITEMS 256

static const char *const usage =
    "Usage: gpufile check [PATH | URL] [--json] " RUN_SETTINGS_PATH_USAGE "\n"
    "\n"
    "Checks what decides the data path: libcufile (where, which version)\n"
    "and whether its driver opens, nvidia-fs, GPUs and their PCIe\n"
    "placement, the IOMMU, the cufile.json in effect and its values,\n"
    "CUFILE_* variables, and gpufile's settings. With PATH: its file\n"
    "system and whether GDS supports it, its block device, whether\n"
    "O_DIRECT opens, and the path a device read of it takes at each\n"
    "layer (gpufile: cufile or posix; cuFile: nvfs or posix), with the\n"
    "reason. With an http://, https:// or s3://BUCKET/KEY URL: the\n"
    "endpoint (redacted), whether credentials are present, and the\n"
    "object's size (see gpufile(1), REMOTE OBJECTS). Each check says\n"
    "pass, fail or unknown, and why.\n"
    "\n"
    "  --json         print one JSON object instead of "
    "text\n" RUN_SETTINGS_PATH_HELP "  --help         print this help\n"
    "\n"
    "Exit status: 0 when the checks ran (whatever the platform lacks),\n"
    "1 when PATH cannot be examined or read by this user, or when the\n"
    "cufile.json in effect is malformed (the first line on stderr says\n"
    "which), 2 usage error.\n";

static void print_json(const char *path, const gpufile_check_item_t *items,
                       int n, const int counts[3])
{
	struct json j;

	json_init(&j, stdout);
	json_object_begin(&j, NULL);
	if (path)
		json_key_str(&j, "path", path);
	else
		json_key_null(&j, "path");
	json_array_begin(&j, "checks");
	for (int i = 0; i < n; i++) {
		json_object_begin(&j, NULL);
		json_key_str(&j, "name", items[i].name);
		json_key_str(&j, "status",
		             gpufile_check_status_name(items[i].status));
		json_key_str(&j, "value", items[i].value);
		json_key_str(&j, "why", items[i].why);
		json_object_end(&j);
	}
	json_array_end(&j);
	json_object_begin(&j, "summary");
	json_key_u64(&j, "pass", (uint64_t)counts[0]);
	json_key_u64(&j, "fail", (uint64_t)counts[1]);
	json_key_u64(&j, "unknown", (uint64_t)counts[2]);
	json_object_end(&j);
	json_object_end(&j);
}

static void print_text(const gpufile_check_item_t *items, int n,
                       const int counts[3])
{
	for (int i = 0; i < n; i++) {
		printf("[%-7s] %-38s %s\n",
		       gpufile_check_status_name(items[i].status),
		       items[i].name, items[i].value);
		if (items[i].why[0])
			printf("          %s\n", items[i].why);
	}
	printf("%d pass, %d fail, %d unknown\n", counts[0], counts[1],
	       counts[2]);
}

/* Counts the items per status. Returns 1 when an item about the user's
 * input failed: a file gpufile cannot read and a cufile.json cuFile will
 * reject are errors to fix, not facts of the platform, and scripts must
 * see them in the exit status -- and people on stderr, first, rather than
 * among the platform's lines (msg_error). */
static int count_items(const gpufile_check_item_t *items, int n, int counts[3])
{
	int input_failed = 0;

	for (int i = 0; i < n; i++) {
		if ((unsigned)items[i].status < 3)
			counts[items[i].status]++;
		if ((strcmp(items[i].name, "file") == 0 ||
		     strcmp(items[i].name, "cufile.json") == 0) &&
		    items[i].status == GPUFILE_CHECK_FAIL) {
			msg_error("check", "%s: %s", items[i].value,
			          items[i].why);
			input_failed = 1;
		}
	}
	return input_failed;
}

int cmd_check(int argc, char **argv)
{
	const char *cmd = "check", *path = NULL;
	gpufile_check_item_t *items;
	int as_json = 0, n, counts[3] = {0}, input_failed, rc, first;
	struct run_settings settings = {0};
	const struct opt opts[] = {
	    {.name = "json", .kind = OPT_FLAG, .dest = &as_json},
	    RUN_SETTINGS_PATH_OPTS(&settings),
	};
	const struct opt_spec spec = {
	    cmd, usage, opts, sizeof(opts) / sizeof(opts[0]), "PATH", 0, 1};

	first = opt_parse(&spec, argc, argv, &rc);
	if (first < 0)
		return rc;
	rc = run_settings_apply(cmd, &settings);
	if (rc)
		return rc;
	if (first < argc)
		path = argv[first];
	items = calloc(MAX_ITEMS, sizeof(*items));
	if (!items)
		return msg_error(cmd, "out of memory");
	n = gpufile_check(path, items, MAX_ITEMS);
	if (n < 0) {
		free(items);
		return msg_error(cmd, "%s", gpufile_errmsg());
	}
	if (n > MAX_ITEMS)
		n = MAX_ITEMS;
	input_failed = count_items(items, n, counts);
	if (as_json) {
		/* PATH as the library shows it: a URL redacted. */
		char *shown = path ? text_shown_path(path) : NULL;

		if (path && !shown) {
			free(items);
			return msg_error(cmd, "out of memory");
		}
		print_json(shown, items, n, counts);
		free(shown);
	} else {
		print_text(items, n, counts);
	}
	free(items);
	return input_failed ? EXIT_RUNTIME : EXIT_OK;
}
