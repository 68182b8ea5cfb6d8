/*
 * The per-file counters of gpufile stats PID (gpufile_stats_file_counters):
 * read with a sample, shown as text or JSON, with each file's rates over
 * a --watch interval.
 */
#ifndef GPUFILE_TOOLS_STATS_FILES_H
#define GPUFILE_TOOLS_STATS_FILES_H

#include "gpufile.h"
#include "json.h"

/* The files of one sample. */
struct stats_files {
	gpufile_file_counters_t *f; /* the most recently used first */
	int n;                      /* in f */
	int total;                  /* files with a record (n, or more) */
};

/* Reads process pid's per-file counters into *out (its array allocated
 * once, GPUFILE_MAX_FILE_COUNTERS records). Returns 0 or an error as
 * gpufile_stats_file_counters(). */
int stats_files_read(int pid, struct stats_files *out);
void stats_files_free(struct stats_files *files);

/* The files as text, after the process's counters: a heading with how
 * many are kept and dropped, then a line per file. With prev (a sample
 * seconds ago), each file's read and write rates over that interval. */
void stats_files_text(const gpufile_stats_t *s, const struct stats_files *now,
                      const struct stats_files *prev, double seconds);

/* The same as the JSON object "file_counters" of j. */
void stats_files_json(struct json *j, const gpufile_stats_t *s,
                      const struct stats_files *now,
                      const struct stats_files *prev, double seconds);

/* Sums of one file's counters over every path, direction d. */
/* One counter as a JSON object under key: ops, tasks, bytes, errors (the
 * per-path rows of gpufile stats --json and the per-file ones alike). */
void stats_json_counter(struct json *j, const char *key,
                        const gpufile_counter_t *c);
gpufile_counter_t stats_files_dir(const gpufile_file_counters_t *f, int d);

#endif
