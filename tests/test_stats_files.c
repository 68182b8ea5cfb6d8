/*
 * Per-file counters (gpufile_stats_file_counters, issue 35): a file's
 * tasks and bytes are credited as each task ends, with what is in flight
 * on it, and a process keeps them for a bounded number of files.
 *
 * 1. A read of 16 tasks is held half-way, as in test_stats_live (the
 *    pool's task hook stops every task of its upper half until
 *    released): its file shows half its bytes and tasks, and the rest in
 *    flight, through gpufile_stats_file_counters() and, from another
 *    process, `gpufile stats PID` (text and --json); after it, all of
 *    them and nothing in flight.
 * 2. More files than records (GPUFILE_MAX_FILE_COUNTERS), each opened,
 *    read and closed in turn: the records stay bounded, the oldest files
 *    go (counted as dropped), the newest stay, and the tool's outputs
 *    say the list is partial.
 * 3. More files open at once than records: the files beyond get none
 *    (counted as untracked), and every open file keeps its record.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "testlib.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TS      (1u << 20)
#define NTASKS  16
#define SIZE    ((size_t)NTASKS * TS)
#define HALF    (SIZE / 2)
#define WORKERS 2
#define MAXF    GPUFILE_MAX_FILE_COUNTERS
#define EXTRA   12 /* files beyond the records */

static gpufile_file_counters_t files[MAXF];
static char out[1 << 20];

/* The record of the file named name among this process's, or NULL. */
static const gpufile_file_counters_t *find(const char *name, int *total)
{
	int n = gpufile_stats_file_counters(0, files, MAXF);

	CHECK(n >= 0 && n <= MAXF);
	if (total)
		*total = n;
	for (int i = 0; i < n && i < MAXF; i++)
		if (strcmp(files[i].name, name) == 0)
			return &files[i];
	return NULL;
}

static uint64_t read_of(const gpufile_file_counters_t *f, int field)
{
	uint64_t n = 0;

	for (int p = 0; p < GPUFILE_PATH_COUNT; p++)
		n += field == 0   ? f->path[p][0].bytes
		     : field == 1 ? f->path[p][0].tasks
		                  : f->path[p][0].ops;
	return n;
}

/* The JSON object of file name in `gpufile stats PID --json`, from its
 * "name" on (its read counters come first), or NULL. */
static const char *json_file(const char *json, const char *name)
{
	char pattern[4200];

	snprintf(pattern, sizeof(pattern), "\"name\": \"%s\"", name);
	return strstr(json, pattern);
}

static void held_read(void)
{
	const char *path = test_path("held.bin");
	const gpufile_file_counters_t *f;
	gpufile_future_t *fut = NULL;
	gpufile_t *h = NULL;
	char *buf = test_malloc(SIZE), line[4400];

	CHECK_EQ(test_make_file(path, SIZE, 35), 0);
	CHECK_EQ(gpufile_set_task_size(TS), 0);
	CHECK_EQ(gpufile_set_nthreads(WORKERS), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return;
	f = find(path, NULL);
	CHECK(f != NULL);
	if (f) {
		CHECK_EQ(read_of(f, 0), 0);
		CHECK_EQ(f->handles, 1);
		CHECK_EQ(f->name_len, strlen(path));
	}

	test_hold_tasks_from((int64_t)HALF);
	CHECK_EQ(gpufile_pread_async(h, buf, SIZE, 0, &fut), 0);
	test_wait_held(WORKERS);

	/* Half-way: half its bytes and tasks credited, the request not yet
	 * ended, the rest in flight. */
	f = find(path, NULL);
	CHECK(f != NULL);
	if (f) {
		CHECK_EQ(read_of(f, 0), HALF);
		CHECK_EQ(read_of(f, 1), NTASKS / 2);
		CHECK_EQ(read_of(f, 2), 0);
		CHECK_EQ(f->path[GPUFILE_PATH_HOST][0].bytes, HALF);
		CHECK_EQ(f->inflight_requests, 1);
		CHECK_EQ(f->inflight_tasks, NTASKS / 2);
		CHECK_EQ(f->pending_bytes, SIZE - HALF);
	}
	/* The same from another process, as a user would look. */
	if (test_cli_path()) {
		const char *j;

		CHECK_EQ(test_cli_run(out, sizeof(out), "stats %d --json",
		                      (int)getpid()),
		         0);
		j = json_file(out, path);
		CHECK(j != NULL);
		if (j) {
			uint64_t bytes = test_json_number(j, "bytes");

			CHECK(bytes > 0 && bytes < SIZE);
			CHECK_EQ(bytes, HALF);
			CHECK_EQ(test_json_number(j, "pending_bytes"),
			         SIZE - HALF);
		}
		CHECK_EQ(
		    test_cli_run(out, sizeof(out), "stats %d", (int)getpid()),
		    0);
		snprintf(line, sizeof(line),
		         "  %s: 1 handle open; read 8388608 bytes (8 MiB) in 8 "
		         "tasks, 0 requests on host; in flight: 1 request, 8 "
		         "tasks, 8388608 bytes pending (8 MiB)\n",
		         path);
		CHECK_CONTAINS(out, line);
	} else {
		fprintf(stderr, "no CLI (GPUFILE_CLI): its part skipped\n");
	}

	test_release_tasks();
	CHECK_EQ(gpufile_future_wait(fut), (ssize_t)SIZE);
	gpufile_future_free(fut);
	gpufile__pool_task_hook = NULL;

	/* Ended: everything credited once, nothing in flight. */
	f = find(path, NULL);
	CHECK(f != NULL);
	if (f) {
		CHECK_EQ(read_of(f, 0), SIZE);
		CHECK_EQ(read_of(f, 1), NTASKS);
		CHECK_EQ(read_of(f, 2), 1);
		CHECK_EQ(f->inflight_requests, 0);
		CHECK_EQ(f->inflight_tasks, 0);
		CHECK_EQ(f->pending_bytes, 0);
	}
	if (test_cli_path()) {
		CHECK_EQ(test_cli_run(out, sizeof(out), "stats %d --json",
		                      (int)getpid()),
		         0);
		CHECK_EQ(test_json_number(json_file(out, path), "bytes"), SIZE);
	}
	/* A read past the end of the file: what no task moved leaves the
	 * file's gauges when it ends. */
	CHECK_EQ(gpufile_pread(h, buf, SIZE, (int64_t)HALF), (ssize_t)HALF);
	gpufile_close(h);
	f = find(path, NULL);
	CHECK(f != NULL);
	if (f) {
		CHECK_EQ(read_of(f, 0), SIZE + HALF);
		CHECK_EQ(read_of(f, 2), 2);
		CHECK_EQ(f->handles, 0);
		CHECK_EQ(f->inflight_requests, 0);
		CHECK_EQ(f->inflight_tasks, 0);
		CHECK_EQ(f->pending_bytes, 0);
	}
	free(buf);
}

/* 2: MAXF + EXTRA more files, one after the other. */
static void many_files(void)
{
	const int nfiles = MAXF + EXTRA;
	gpufile_stats_t before, after;
	char name[64], *paths[MAXF + EXTRA];
	char buf[16];
	int total = 0, lines = 0;

	GPUFILE_INIT(before);
	CHECK_EQ(gpufile_stats_self(&before), 0);
	for (int i = 0; i < nfiles; i++) {
		gpufile_t *h = NULL;

		snprintf(name, sizeof(name), "many-%03d.bin", i);
		paths[i] = strdup(test_path(name));
		CHECK_EQ(test_make_file(paths[i], sizeof(buf), (uint64_t)i), 0);
		CHECK_EQ(gpufile_open(&h, paths[i], "r"), 0);
		CHECK_EQ(gpufile_pread(h, buf, sizeof(buf), 0),
		         (ssize_t)sizeof(buf));
		gpufile_close(h);
	}
	GPUFILE_INIT(after);
	CHECK_EQ(gpufile_stats_self(&after), 0);
	/* The records held the file of part 1 and the first MAXF - 1 of
	 * these: every one after took the least recently used. */
	CHECK_EQ(after.file_counters_dropped - before.file_counters_dropped,
	         (uint64_t)(nfiles - (MAXF - 1)));
	CHECK_EQ(after.file_counters_untracked, 0);
	CHECK(find(paths[0], &total) == NULL);
	CHECK_EQ(total, MAXF);
	CHECK(find(paths[nfiles - MAXF - 1], NULL) == NULL);
	for (int i = nfiles - MAXF; i < nfiles; i++) {
		const gpufile_file_counters_t *f = find(paths[i], NULL);

		CHECK(f != NULL);
		if (f)
			CHECK_EQ(read_of(f, 0), sizeof(buf));
	}
	/* The newest first. */
	CHECK_EQ(gpufile_stats_file_counters(0, files, 1), MAXF);
	CHECK_EQ(strcmp(files[0].name, paths[nfiles - 1]), 0);

	if (test_cli_path()) {
		CHECK_EQ(
		    test_cli_run(out, sizeof(out), "stats %d", (int)getpid()),
		    0);
		snprintf(name, sizeof(name), "files counted: %d (", MAXF);
		CHECK_CONTAINS(out, name);
		snprintf(name, sizeof(name), "; %d dropped for newer ones",
		         nfiles - (MAXF - 1));
		CHECK_CONTAINS(out, name);
		for (const char *p = strstr(out, "files counted: ");
		     p && (p = strchr(p, '\n')); p++)
			lines += strncmp(p + 1, "  ", 2) == 0;
		CHECK_EQ(lines, MAXF);
		CHECK_EQ(test_cli_run(out, sizeof(out), "stats %d --json",
		                      (int)getpid()),
		         0);
		CHECK_EQ(test_json_number(out, "counted"), MAXF);
		CHECK_EQ(test_json_number(out, "dropped"),
		         (uint64_t)(nfiles - (MAXF - 1)));
		CHECK_CONTAINS(out, "\"partial\": true");
		CHECK(json_file(out, paths[0]) == NULL);
		CHECK(json_file(out, paths[nfiles - 1]) != NULL);
	}
	for (int i = 0; i < nfiles; i++)
		free(paths[i]);
}

/* 3: MAXF + EXTRA files open at once. */
static void open_at_once(void)
{
	const int nfiles = MAXF + EXTRA;
	gpufile_t *h[MAXF + EXTRA];
	gpufile_stats_t st;
	char name[64];

	for (int i = 0; i < nfiles; i++) {
		snprintf(name, sizeof(name), "open-%03d.bin", i);
		CHECK_EQ(test_make_file(test_path(name), 8, (uint64_t)i), 0);
		CHECK_EQ(gpufile_open(&h[i], test_path(name), "r"), 0);
	}
	GPUFILE_INIT(st);
	CHECK_EQ(gpufile_stats_self(&st), 0);
	CHECK_EQ(st.file_counters_untracked, EXTRA);
	for (int i = 0; i < nfiles; i++) {
		const gpufile_file_counters_t *f;

		snprintf(name, sizeof(name), "open-%03d.bin", i);
		f = find(test_path(name), NULL);
		CHECK(i < MAXF ? f != NULL : f == NULL);
		if (f)
			CHECK_EQ(f->handles, 1);
	}
	for (int i = 0; i < nfiles; i++)
		gpufile_close(h[i]);
	/* Closed, their records may go to the next files. */
	{
		gpufile_t *g = NULL;

		CHECK_EQ(gpufile_open(&g, test_path("open-000.bin"), "r"), 0);
		GPUFILE_INIT(st);
		CHECK_EQ(gpufile_stats_self(&st), 0);
		CHECK_EQ(st.file_counters_untracked, EXTRA);
		CHECK(find(test_path("open-000.bin"), NULL) != NULL);
		gpufile_close(g);
	}
	/* Bad arguments. */
	CHECK_EQ(gpufile_stats_file_counters(0, NULL, 1), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "out is NULL");
	CHECK_EQ(gpufile_stats_file_counters(0, NULL, 0), MAXF);
}

int main(void)
{
	alarm(600); /* a hold that never ends fails instead of hanging */
	held_read();
	many_files();
	open_at_once();
	test_cleanup();
	return test_finish("test_stats_files");
}
