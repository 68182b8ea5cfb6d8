/*
 * gpufile explain: the plan of one read before it runs -- gpufile's split
 * into tasks and cuFile's schedule of each request (gpufile_explain()).
 */
#include "commands.h"
#include "gpufile.h"
#include "json.h"
#include "msg.h"
#include "options.h"
#include "text.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char *const usage =
    "Usage: gpufile explain --size N [--task-size N] [--offset N]\n"
    "                       [--registered] [--cufile-json FILE] [--json]\n"
    "\n"
    "Prints how a read of N bytes would run, without running it: how\n"
    "gpufile splits it into tasks (task_size, gds_threshold), and how\n"
    "cuFile schedules each request it receives under cufile.json's\n"
    "execution settings and properties.max_direct_io_size_kb.\n"
    "\n"
    "  --size N          bytes to read (required)\n"
    "  --task-size N     gpufile's task size (default: the setting)\n"
    "  --offset N        file offset of the read (default 0)\n"
    "  --registered      plan for a buffer registered with cuFile\n"
    "  --cufile-json F   read cuFile's settings from F (default:\n"
    "                    $CUFILE_ENV_PATH_JSON, else /etc/cufile.json)\n"
    "  --json            print one JSON object instead of text\n"
    "  --help            print this help\n"
    "\n"
    "Sizes accept bytes (B) or a number with k, m, g, t, KiB, MiB, GiB,\n"
    "TiB, KB, MB, GB or TB (any case; all binary).\n"
    "Exit status: 0 ok, 1 when the cufile.json given cannot be read or\n"
    "the plan cannot be made, 2 usage error.\n";

/* "4 MiB" when bytes is a whole number of a binary unit, else "N B". */
static const char *exact(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	unsigned u = 0;

	while (u + 1 < 5 && bytes && bytes % 1024 == 0) {
		bytes /= 1024;
		u++;
	}
	snprintf(buf, len, "%" PRIu64 " %s", bytes, units[u]);
	return buf;
}

static void print_config_text(const gpufile_cufile_config_t *c)
{
	if (c->path[0]) {
		printf("cuFile configuration: ");
		text_put(stdout, c->path);
		printf(" (from %s)%s\n", c->path_source,
		       c->parsed ? ""
		                 : " NOT parsed: gpufile's model of the "
		                   "cuFile 1.15 defaults");
	} else
		printf("cuFile configuration: no cufile.json "
		       "(CUFILE_ENV_PATH_JSON unset, /etc/cufile.json absent): "
		       "gpufile's model of the cuFile 1.15 defaults\n");
	for (int i = 0; i < GPUFILE_CUFILE_NKEYS; i++) {
		const gpufile_cufile_value_t *v = &c->v[i];
		char val[32];

		if (v->is_bool)
			snprintf(val, sizeof(val), "%s",
			         v->value ? "true" : "false");
		else
			snprintf(val, sizeof(val), "%" PRId64, v->value);
		printf("  %-38s %-10s (%s)\n", v->key, val,
		       v->from_file ? "file" : "default");
	}
}

/* Tasks of a read of size bytes at offset, split at multiples of ts. */
static uint64_t tasks_at(uint64_t offset, uint64_t size, uint64_t ts)
{
	const uint64_t base = offset - offset % ts;

	return size ? (offset + size - base + ts - 1) / ts : 0;
}

/* The task size of a device read through the bounce buffers from the page
 * cache, as file.c's split_small_read cuts one of fewer tasks than
 * workers: task_size halved while a half is at least 512 KiB and the read
 * has fewer tasks than workers. Whether it is cut depends on the tasks
 * that result, not on the read's size: a 600 KiB read, or 100 KiB
 * across a multiple of 512 KiB, becomes 2 tasks. */
static uint64_t split_task_size(const gpufile_plan_t *p)
{
	uint64_t ts = p->task_size;

	if (tasks_at(p->offset, p->read_size, ts) >= p->nthreads)
		return ts;
	while (ts / 2 >= (512u << 10) && ts % 2 == 0 &&
	       tasks_at(p->offset, p->read_size, ts) < p->nthreads)
		ts /= 2;
	return ts;
}

static void print_text(const gpufile_plan_t *p, const char *ts_source)
{
	const uint64_t split_ts = split_task_size(p);
	const uint64_t split = tasks_at(p->offset, p->read_size, split_ts);
	char a[32], b[32], c[32];

	printf("read of %s (%" PRIu64 " bytes) at offset %" PRIu64 "\n",
	       exact(p->read_size, a, sizeof(a)), p->read_size, p->offset);
	print_config_text(&p->cufile);

	printf("\ngpufile's layer: task_size %s (%s), gds_threshold %s\n",
	       exact(p->task_size, a, sizeof(a)), ts_source,
	       exact(p->gds_threshold, b, sizeof(b)));
	printf("  %" PRIu64 " task%s:", p->tasks, p->tasks == 1 ? "" : "s");
	for (int i = 0; i < p->ntask_sizes; i++)
		printf("%s %" PRIu64 " x %s", i ? "," : "", p->task_counts[i],
		       exact(p->task_sizes[i], a, sizeof(a)));
	printf("\n");
	/* file.c: device reads through the bounce buffers of fewer tasks
	 * than workers are split finer, down to 512 KiB tasks. */
	if (split > p->tasks)
		printf("  where the read takes gpufile's bounce buffers "
		       "instead of cuFile and the page\n  cache holds it, "
		       "fewer tasks than the %u workers are cut finer:\n"
		       "  task_size halved, down to 512 KiB, until there are "
		       "%u (here %" PRIu64 " task%s of at most %s)\n",
		       p->nthreads, p->nthreads, split, split == 1 ? "" : "s",
		       exact(split_ts, a, sizeof(a)));
	if (p->below_threshold)
		printf("  the read is below gds_threshold: every task takes "
		       "gpufile's POSIX path (\"small\"); cuFile receives "
		       "nothing\n");
	else
		printf("  %" PRIu64 " request%s cuFile (the read is at "
		       "least gds_threshold; a task shorter than it still goes "
		       "to cuFile)\n",
		       p->cufile_requests,
		       p->cufile_requests == 1 ? " reaches" : "s reach");
	/* At an offset, whole_task_size (offset + size) is enough but not
	 * the least: a smaller task_size with no multiple inside the read
	 * also gives one task (2 MiB at 3 MiB: 2 tasks at 4 MiB, 1 at 3). */
	if (p->tasks > 1 && !p->offset)
		printf("  cuFile receives the read whole only with task_size "
		       ">= %s\n",
		       exact(p->whole_task_size, a, sizeof(a)));
	else if (p->tasks > 1)
		printf("  cuFile receives the read whole with any task_size "
		       ">= %s, or a smaller one with no\n  multiple of it "
		       "inside the read\n",
		       exact(p->whole_task_size, a, sizeof(a)));

	printf("\ncuFile's layer (%s buffer):\n",
	       p->registered ? "registered" : "unregistered");
	for (int i = 0; i < p->nentries; i++) {
		const gpufile_plan_entry_t *e = &p->entries[i];

		/* An uneven split: parts of part_size and one byte less. */
		const int uneven = e->parts && e->request_size % e->parts;

		printf("  %" PRIu64 " request%s of %s -> %" PRIu64
		       " part%s of %s%s; nvidia-fs moves each part in %" PRIu64
		       " transfer%s of at most %s\n",
		       e->count, e->count == 1 ? "" : "s",
		       exact(e->request_size, a, sizeof(a)), e->parts,
		       e->parts == 1 ? "" : "s",
		       exact(e->part_size, b, sizeof(b)),
		       uneven ? " or a byte less (split evenly)" : "",
		       e->transfers_per_part,
		       e->transfers_per_part == 1 ? "" : "s",
		       exact(e->max_transfer, c, sizeof(c)));
		printf("    why: %s\n", e->why);
	}
	if (p->nentries) {
		int64_t depth =
		    p->cufile.v[GPUFILE_CUFILE_MAX_IO_QUEUE_DEPTH].value;
		printf("  with %u gpufile workers at most %" PRIu64
		       " parts are queued at once; max_io_queue_depth %" PRId64
		       ": %s\n",
		       p->nthreads, p->parts_in_flight, depth,
		       (int64_t)p->parts_in_flight <= depth
		           ? "within it"
		           : "exceeded, later parts wait");
	}
	printf("  model: %s\n", p->model_note);
	printf("  %s buffers: the same plan under gpufile's model (%s)\n",
	       p->registered ? "unregistered" : "registered",
	       p->registered ? "run without --registered"
	                     : "run with --registered");
}

static void print_json(const gpufile_plan_t *p, const char *ts_source)
{
	struct json j;

	json_init(&j, stdout);
	json_object_begin(&j, NULL);
	json_key_u64(&j, "size", p->read_size);
	json_key_u64(&j, "offset", p->offset);
	json_key_u64(&j, "task_size", p->task_size);
	json_key_str(&j, "task_size_source", ts_source);
	json_key_u64(&j, "gds_threshold", p->gds_threshold);
	json_key_bool(&j, "registered", p->registered);
	json_key_u64(&j, "tasks", p->tasks);
	json_array_begin(&j, "task_sizes");
	for (int i = 0; i < p->ntask_sizes; i++) {
		json_object_begin(&j, NULL);
		json_key_u64(&j, "size", p->task_sizes[i]);
		json_key_u64(&j, "count", p->task_counts[i]);
		json_object_end(&j);
	}
	json_array_end(&j);
	json_key_bool(&j, "below_threshold", p->below_threshold);
	json_key_u64(&j, "cufile_requests", p->cufile_requests);
	json_key_u64(&j, "whole_task_size", p->whole_task_size);
	json_array_begin(&j, "cufile_plan");
	for (int i = 0; i < p->nentries; i++) {
		const gpufile_plan_entry_t *e = &p->entries[i];

		json_object_begin(&j, NULL);
		json_key_u64(&j, "request_size", e->request_size);
		json_key_u64(&j, "count", e->count);
		json_key_u64(&j, "parts", e->parts);
		json_key_u64(&j, "part_size", e->part_size);
		json_key_u64(&j, "max_transfer", e->max_transfer);
		json_key_u64(&j, "transfers_per_part", e->transfers_per_part);
		json_key_str(&j, "why", e->why);
		json_object_end(&j);
	}
	json_array_end(&j);
	json_key_u64(&j, "nthreads", p->nthreads);
	json_key_u64(&j, "parts_in_flight", p->parts_in_flight);
	json_object_begin(&j, "cufile_config");
	if (p->cufile.path[0])
		json_key_str(&j, "path", p->cufile.path);
	else
		json_key_null(&j, "path");
	json_key_str(&j, "path_source", p->cufile.path_source);
	json_key_bool(&j, "parsed", p->cufile.parsed);
	json_object_begin(&j, "values");
	for (int i = 0; i < GPUFILE_CUFILE_NKEYS; i++) {
		const gpufile_cufile_value_t *v = &p->cufile.v[i];

		json_object_begin(&j, v->key);
		if (v->is_bool)
			json_key_bool(&j, "value", (int)v->value);
		else
			json_key_i64(&j, "value", v->value);
		json_key_str(&j, "source", v->from_file ? "file" : "default");
		json_object_end(&j);
	}
	json_object_end(&j);
	json_object_end(&j);
	json_key_str(&j, "model", p->model_note);
	json_object_end(&j);
}

int cmd_explain(int argc, char **argv)
{
	const char *cmd = "explain", *json_path = NULL;
	uint64_t size = 0, task_size = 0, offset = 0;
	int have_size = 0, registered = 0, as_json = 0, rc;
	gpufile_cufile_config_t cfg;
	gpufile_plan_t plan;
	const struct opt opts[] = {
	    {.name = "size",
	     .kind = OPT_SIZE,
	     .dest = &size,
	     .given = &have_size},
	    {.name = "task-size",
	     .kind = OPT_SIZE,
	     .dest = &task_size,
	     .min = 1},
	    {.name = "offset", .kind = OPT_SIZE, .dest = &offset},
	    {.name = "registered", .kind = OPT_FLAG, .dest = &registered},
	    {.name = "cufile-json", .kind = OPT_STRING, .dest = &json_path},
	    {.name = "json", .kind = OPT_FLAG, .dest = &as_json},
	};
	const struct opt_spec spec = {
	    cmd, usage, opts, sizeof(opts) / sizeof(opts[0]), NULL, 0, 0};

	if (opt_parse(&spec, argc, argv, &rc) < 0)
		return rc;
	if (!have_size)
		return msg_usage_error(cmd, "--size is required");
	/* A read no file offset can hold is a fault of the arguments (exit
	 * 2, as read's --size), not of the run: gpufile_explain() would
	 * refuse it with -EINVAL, which read as exit 1. */
	if (size > INT64_MAX || offset > INT64_MAX - size)
		return msg_usage_error(cmd,
		                       "--offset %" PRIu64
		                       " with --size %" PRIu64
		                       ": the read ends past the largest file "
		                       "offset (%" PRId64 ")",
		                       offset, size, INT64_MAX);
	GPUFILE_INIT(cfg);
	rc = gpufile_cufile_config_load(json_path, &cfg);
	if (rc == -ENOTSUP)
		msg_warn(cmd, "warning: %s", gpufile_errmsg());
	else if (rc)
		return msg_error(cmd, "%s", gpufile_errmsg());
	GPUFILE_INIT(plan);
	rc = gpufile_explain(size, offset, task_size, registered, &cfg, &plan);
	if (rc)
		return msg_error(cmd, "%s", gpufile_errmsg());
	if (as_json)
		print_json(&plan, task_size ? "--task-size" : "setting");
	else
		print_text(&plan, task_size ? "--task-size" : "setting");
	return EXIT_OK;
}
