/*
 * gpufile cache FILE [--offset N] [--size N] [--drop] [--json]: how much
 * of FILE the page cache holds (gpufile_page_cache_info()) and, with
 * --drop, the same after flushing and dropping it
 * (gpufile_drop_page_cache()).
 */
#include "commands.h"
#include "gpufile.h"
#include "json.h"
#include "measure.h"
#include "msg.h"
#include "options.h"
#include "text.h"

#include <stdio.h>
#include <stdlib.h>

static const char *const usage =
    "Usage: gpufile cache FILE [--offset N] [--size N] [--drop] [--json]\n"
    "\n"
    "Prints how many bytes of FILE (or of [offset, offset+size); size 0\n"
    "or none: to the end) are in the page cache. With --drop, flushes the\n"
    "file's dirty pages, drops the range from the page cache (no root\n"
    "needed) and prints the count again.\n"
    "\n"
    "  --offset N     first byte of the range (default 0)\n"
    "  --size N       bytes of the range (default 0: to the end)\n"
    "  --drop         drop the range from the page cache, then count again\n"
    "  --json         print one JSON object instead of text\n"
    "  --help         print this help\n"
    "\n"
    "Sizes accept bytes (B) or a number with k, m, g, t, KiB, MiB, GiB,\n"
    "TiB, KB, MB, GB or TB (any case; all binary).\n"
    "Exit status: 0 ok, 1 when FILE cannot be examined or dropped, 2\n"
    "usage error.\n";

struct count {
	uint64_t cached, total;
};

static void print_count(const char *what, const struct count *c)
{
	char a[32], b[32];

	printf("%-7s %s of %s in the page cache (%.1f%%; %llu of %llu bytes)\n",
	       what, measure_human_bytes(c->cached, a, sizeof(a)),
	       measure_human_bytes(c->total, b, sizeof(b)),
	       c->total ? 100.0 * (double)c->cached / (double)c->total : 0.0,
	       (unsigned long long)c->cached, (unsigned long long)c->total);
}

static void json_count(struct json *j, const char *key, const struct count *c)
{
	json_object_begin(j, key);
	json_key_u64(j, "cached_bytes", c->cached);
	json_key_u64(j, "total_bytes", c->total);
	json_object_end(j);
}

int cmd_cache(int argc, char **argv)
{
	const char *cmd = "cache", *path;
	uint64_t offset = 0, size = 0;
	struct count before, after;
	int as_json = 0, drop = 0, first, rc;
	const struct opt opts[] = {
	    {.name = "offset",
	     .kind = OPT_SIZE,
	     .dest = &offset,
	     .max = INT64_MAX},
	    {.name = "size",
	     .kind = OPT_SIZE,
	     .dest = &size,
	     .max = UINT64_MAX},
	    {.name = "drop", .kind = OPT_FLAG, .dest = &drop},
	    {.name = "json", .kind = OPT_FLAG, .dest = &as_json},
	};
	const struct opt_spec spec = {
	    cmd, usage, opts, sizeof(opts) / sizeof(opts[0]), "FILE", 1, 1};

	first = opt_parse(&spec, argc, argv, &rc);
	if (first < 0)
		return rc;
	path = argv[first];
	if (gpufile_page_cache_info(NULL, path, (int64_t)offset, (size_t)size,
	                            &before.cached, &before.total) < 0)
		return msg_error(cmd, "%s", gpufile_errmsg());
	if (drop) {
		gpufile_t *h;

		/* Read-only is enough: fdatasync and fadvise need no
		 * write access. */
		if (gpufile_open(&h, path, "r") < 0)
			return msg_error(cmd, "%s", gpufile_errmsg());
		rc = gpufile_drop_page_cache(h, (int64_t)offset, (size_t)size);
		if (rc == 0)
			rc = gpufile_page_cache_info(
			    h, NULL, (int64_t)offset, (size_t)size,
			    &after.cached, &after.total);
		if (rc < 0) {
			msg_error(cmd, "%s", gpufile_errmsg());
			gpufile_close(h);
			return EXIT_RUNTIME;
		}
		gpufile_close(h);
	}
	if (as_json) {
		struct json j;

		json_init(&j, stdout);
		json_object_begin(&j, NULL);
		json_key_str(&j, "path", path);
		json_key_u64(&j, "offset", offset);
		json_count(&j, "before", &before);
		if (drop)
			json_count(&j, "after_drop", &after);
		else
			json_key_null(&j, "after_drop");
		json_object_end(&j);
	} else {
		text_put(stdout, path);
		putchar('\n');
		print_count(drop ? "before" : "now", &before);
		if (drop)
			print_count("after", &after);
	}
	return EXIT_OK;
}
