/*
 * The pieces of the gpufile tool's reports that read and write share,
 * in text and in JSON: the settings that shaped a request and what each
 * path served, on the public API (gpufile_config_get, gpufile_stats).
 */
#ifndef GPUFILE_TOOLS_SUMMARY_H
#define GPUFILE_TOOLS_SUMMARY_H

#include "json.h"

struct gpufile_stats;

/* Writes key: {NAME: {"value", "source", "variable"}, ...} for every
 * setting; a setting the environment gave a bad value is written as
 * {"error": MESSAGE}. Returns 0, or GPUFILE_ECONFIG when any was bad. */
int summary_json_settings(struct json *j, const char *key);

/* Writes key: {PATH: {"ops", "tasks", "bytes", "errors"}, ...} for all
 * paths, the counters being after - before in direction dir (0 read,
 * 1 write); for reads then "map_copy_bytes", the host bytes copied from
 * the file's map. */
void summary_json_paths(struct json *j, const char *key,
                        const struct gpufile_stats *before,
                        const struct gpufile_stats *after, int dir);

/* Prints one line per path that served requests in direction dir (0
 * read, 1 write) between before and after, or "(no requests)"; under the
 * host path's reads, how many bytes were copied from the file's map. */
void summary_print_paths(const struct gpufile_stats *before,
                         const struct gpufile_stats *after, int dir);

/* Prints the settings that shape a request's split, in one line. */
void summary_print_settings_line(void);

#endif
