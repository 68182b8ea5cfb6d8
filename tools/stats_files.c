/*
 * Per-file counters of gpufile stats PID (stats_files.h). A file's name
 * came from another process: it is shown as every name of gpufile stats
 * is, a URL without its secrets (text_shown_path, over the library's
 * own redaction) and then, in text, with control bytes as \xHH
 * (text_escape), in JSON escaped by json_key_str().
 */
#include "stats_files.h"
#include "measure.h"
#include "text.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int stats_files_read(int pid, struct stats_files *out)
{
	int n;

	if (!out->f) {
		out->f = calloc(GPUFILE_MAX_FILE_COUNTERS, sizeof(*out->f));
		if (!out->f)
			return -ENOMEM;
	}
	out->n = out->total = 0;
	n = gpufile_stats_file_counters(pid, out->f, GPUFILE_MAX_FILE_COUNTERS);
	if (n < 0)
		return n;
	out->total = n;
	out->n = n < GPUFILE_MAX_FILE_COUNTERS ? n : GPUFILE_MAX_FILE_COUNTERS;
	return 0;
}

void stats_files_free(struct stats_files *files)
{
	free(files->f);
	files->f = NULL;
	files->n = files->total = 0;
}

gpufile_counter_t stats_files_dir(const gpufile_file_counters_t *f, int d)
{
	gpufile_counter_t sum = {0, 0, 0, 0};

	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		sum.ops += f->path[p][d].ops;
		sum.tasks += f->path[p][d].tasks;
		sum.bytes += f->path[p][d].bytes;
		sum.errors += f->path[p][d].errors;
	}
	return sum;
}

/* Bytes of f in direction d at the previous sample: its record there (the
 * same id), or 0 when it got its record since (ids only grow, and every
 * record is read). */
static uint64_t prev_bytes(const gpufile_file_counters_t *f,
                           const struct stats_files *prev, int d)
{
	for (int i = 0; i < prev->n; i++)
		if (prev->f[i].id == f->id)
			return stats_files_dir(&prev->f[i], d).bytes;
	return 0;
}

static double rate(const gpufile_file_counters_t *f,
                   const struct stats_files *prev, double seconds, int d)
{
	uint64_t was = prev_bytes(f, prev, d), is = stats_files_dir(f, d).bytes;

	return measure_gbps(is >= was ? is - was : 0, seconds);
}

/* The file's name as shown (see the head of this file), allocated; NULL
 * when out of memory. */
static char *shown_name(const gpufile_file_counters_t *f)
{
	char *shown = text_shown_path(f->name);
	char *escaped = shown ? text_escape_alloc(shown) : NULL;

	free(shown);
	return escaped;
}

static void text_dir(const gpufile_file_counters_t *f, int d)
{
	const gpufile_counter_t c = stats_files_dir(f, d);
	const char *sep = " on ";
	char hb[32];

	if (!c.ops && !c.tasks)
		return;
	printf("; %s %" PRIu64 " bytes (%s) in %" PRIu64 " task%s, %" PRIu64
	       " request%s",
	       d ? "wrote" : "read", c.bytes,
	       measure_human_bytes(c.bytes, hb, sizeof(hb)), c.tasks,
	       c.tasks == 1 ? "" : "s", c.ops, c.ops == 1 ? "" : "s");
	if (c.errors)
		printf(", %" PRIu64 " failed", c.errors);
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		if (!f->path[p][d].ops && !f->path[p][d].tasks)
			continue;
		printf("%s%s", sep, gpufile_path_name((gpufile_path_t)p));
		sep = ", ";
	}
}

void stats_files_text(const gpufile_stats_t *s, const struct stats_files *now,
                      const struct stats_files *prev, double seconds)
{
	char hb[32];

	printf("files counted: %d (a record each for the %d most recently "
	       "used; %" PRIu64 " dropped for newer ones, %" PRIu64
	       " opened while every record was held, not counted per "
	       "file)%s\n",
	       now->total, GPUFILE_MAX_FILE_COUNTERS, s->file_counters_dropped,
	       s->file_counters_untracked,
	       now->total > now->n ? " (latest shown)" : "");
	for (int i = 0; i < now->n; i++) {
		const gpufile_file_counters_t *f = &now->f[i];
		char *name = shown_name(f);

		printf("  %s", name ? name : "(out of memory)");
		free(name);
		if (f->name_len >= sizeof(f->name))
			printf(" [name cut: %" PRIu32 " bytes]", f->name_len);
		printf(": %" PRIu32 " handle%s open", f->handles,
		       f->handles == 1 ? "" : "s");
		text_dir(f, 0);
		text_dir(f, 1);
		if (f->inflight_requests || f->inflight_tasks ||
		    f->pending_bytes)
			printf("; in flight: %" PRIu64 " request%s, %" PRIu64
			       " task%s, %" PRIu64 " bytes pending (%s)",
			       f->inflight_requests,
			       f->inflight_requests == 1 ? "" : "s",
			       f->inflight_tasks,
			       f->inflight_tasks == 1 ? "" : "s",
			       f->pending_bytes,
			       measure_human_bytes(f->pending_bytes, hb,
			                           sizeof(hb)));
		if (prev && seconds > 0)
			printf("; read %.3f GB/s, write %.3f GB/s",
			       rate(f, prev, seconds, 0),
			       rate(f, prev, seconds, 1));
		printf("\n");
	}
}

void stats_json_counter(struct json *j, const char *key,
                        const gpufile_counter_t *c)
{
	json_object_begin(j, key);
	json_key_u64(j, "ops", c->ops);
	json_key_u64(j, "tasks", c->tasks);
	json_key_u64(j, "bytes", c->bytes);
	json_key_u64(j, "errors", c->errors);
	json_object_end(j);
}

static void json_file(struct json *j, const gpufile_file_counters_t *f,
                      const struct stats_files *prev, double seconds)
{
	static const char *const dirs[2] = {"read", "write"};
	char *shown = text_shown_path(f->name);

	json_object_begin(j, NULL);
	json_key_str(j, "name", shown ? shown : "(out of memory)");
	free(shown);
	json_key_bool(j, "name_cut", f->name_len >= sizeof(f->name));
	json_key_u64(j, "name_len", f->name_len);
	json_key_u64(j, "id", f->id);
	json_key_u64(j, "handles", f->handles);
	for (int d = 0; d < 2; d++) {
		const gpufile_counter_t c = stats_files_dir(f, d);

		stats_json_counter(j, dirs[d], &c);
		if (prev && seconds > 0) {
			char key[16];

			snprintf(key, sizeof(key), "%s_gbps", dirs[d]);
			json_key_double(j, key, rate(f, prev, seconds, d));
		}
	}
	json_object_begin(j, "paths");
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		if (!f->path[p][0].ops && !f->path[p][0].tasks &&
		    !f->path[p][1].ops && !f->path[p][1].tasks)
			continue;
		json_object_begin(j, gpufile_path_name((gpufile_path_t)p));
		for (int d = 0; d < 2; d++)
			stats_json_counter(j, dirs[d], &f->path[p][d]);
		json_object_end(j);
	}
	json_object_end(j);
	json_object_begin(j, "inflight");
	json_key_u64(j, "requests", f->inflight_requests);
	json_key_u64(j, "tasks", f->inflight_tasks);
	json_key_u64(j, "pending_bytes", f->pending_bytes);
	json_object_end(j);
	json_object_end(j);
}

void stats_files_json(struct json *j, const gpufile_stats_t *s,
                      const struct stats_files *now,
                      const struct stats_files *prev, double seconds)
{
	json_object_begin(j, "file_counters");
	json_key_u64(j, "counted", (uint64_t)now->total);
	json_key_u64(j, "max", GPUFILE_MAX_FILE_COUNTERS);
	json_key_u64(j, "dropped", s->file_counters_dropped);
	json_key_u64(j, "untracked", s->file_counters_untracked);
	/* Some file's bytes are not in the list (its record dropped, or it
	 * never got one), or the list was cut. */
	json_key_bool(j, "partial",
	              s->file_counters_dropped || s->file_counters_untracked ||
	                  now->total > now->n);
	json_array_begin(j, "files");
	for (int i = 0; i < now->n; i++)
		json_file(j, &now->f[i], prev, seconds);
	json_array_end(j);
	json_object_end(j);
}
