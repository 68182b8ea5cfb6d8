/*
 * Settings and path counters in the gpufile tool's reports (see
 * summary.h).
 */
#include "summary.h"
#include "gpufile.h"

#include <inttypes.h>
#include <stdio.h>

/* ---- JSON ---- */

int summary_json_settings(struct json *j, const char *key)
{
	int bad = 0;

	json_object_begin(j, key);
	for (int i = 0; i < gpufile_config_count(); i++) {
		const char *name = gpufile_config_name(i);
		char value[512], variable[128];
		gpufile_source_t source = GPUFILE_SOURCE_DEFAULT;
		int rc = gpufile_config_get(name, value, sizeof(value), &source,
		                            variable, sizeof(variable));

		json_object_begin(j, name);
		if (rc) {
			json_key_str(j, "error", gpufile_errmsg());
			bad = rc;
		} else {
			json_key_str(j, "value", value);
			json_key_str(j, "source", gpufile_source_name(source));
			if (variable[0])
				json_key_str(j, "variable", variable);
			else
				json_key_null(j, "variable");
		}
		json_object_end(j);
	}
	json_object_end(j);
	return bad;
}

void summary_json_paths(struct json *j, const char *key,
                        const struct gpufile_stats *before,
                        const struct gpufile_stats *after, int dir)
{
	json_object_begin(j, key);
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		const gpufile_counter_t *a = &after->path[p][dir];
		const gpufile_counter_t *b = &before->path[p][dir];

		json_object_begin(j, gpufile_path_name((gpufile_path_t)p));
		json_key_u64(j, "ops", a->ops - b->ops);
		json_key_u64(j, "tasks", a->tasks - b->tasks);
		json_key_u64(j, "bytes", a->bytes - b->bytes);
		json_key_u64(j, "errors", a->errors - b->errors);
		json_object_end(j);
	}
	json_object_end(j);
	/* Reads: of the host path's bytes, those copied from the file's
	 * map (host_map_copy, gathered reads) rather than by pread. */
	if (dir == 0)
		json_key_u64(j, "map_copy_bytes",
		             after->map_copy_bytes - before->map_copy_bytes);
}

/* ---- text ---- */

void summary_print_paths(const struct gpufile_stats *before,
                         const struct gpufile_stats *after, int dir)
{
	int shown = 0;

	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		const gpufile_counter_t *a = &after->path[p][dir];
		const gpufile_counter_t *b = &before->path[p][dir];

		if (a->ops == b->ops)
			continue;
		printf("  %-8s %" PRIu64 " ops, %" PRIu64 " tasks, %" PRIu64
		       " bytes, %" PRIu64 " errors\n",
		       gpufile_path_name((gpufile_path_t)p), a->ops - b->ops,
		       a->tasks - b->tasks, a->bytes - b->bytes,
		       a->errors - b->errors);
		if (dir == 0 && p == GPUFILE_PATH_HOST &&
		    after->map_copy_bytes != before->map_copy_bytes) {
			uint64_t m =
			    after->map_copy_bytes - before->map_copy_bytes;

			printf("           of those, %" PRIu64
			       " copied from the file's map "
			       "(host_map_copy), "
			       "%" PRIu64 " read by the kernel (pread, "
			       "O_DIRECT)\n",
			       m, a->bytes - b->bytes - m);
		}
		shown = 1;
	}
	if (!shown)
		printf("  (no requests)\n");
}

void summary_print_settings_line(void)
{
	static const char *const names[] = {"nthreads", "task_size",
	                                    "direct_io", "compat_mode"};

	printf("settings:");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char value[64];

		if (gpufile_config_get(names[i], value, sizeof(value), NULL,
		                       NULL, 0) == 0)
			printf(" %s=%s", names[i], value);
	}
	printf("  (all: gpufile config)\n");
}
