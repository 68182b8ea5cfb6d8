/*
 * gpufile stats [PID] [--json] [--watch SECONDS] [--clean]: the live
 * counters of a process using gpufile, read from its shared-memory
 * segment (gpufile_stats_read()), gpufile's layer beside cuFile's.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "gpufile.h"
#include "json.h"
#include "measure.h"
#include "metrics.h"
#include "msg.h"
#include "options.h"
#include "stats_files.h"
#include "text.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *const usage =
    "Usage: gpufile stats [PID] [--json] [--watch SECONDS]\n"
    "       gpufile stats [PID] --openmetrics\n"
    "       gpufile stats [PID] --serve [ADDR:]PORT [--timeout SECONDS]\n"
    "       gpufile stats --clean\n"
    "\n"
    "Without PID: lists this user's processes that use gpufile (PID,\n"
    "command, bytes so far), and /dev/shm segments that older gpufile\n"
    "versions left for dead processes (stale; --clean removes them).\n"
    "With PID: that process's counters while it runs: per path (host,\n"
    "posix, cufile, small) and direction, requests, tasks, bytes and\n"
    "errors; cuFile's own per-GPU counters (nvfs, posix, p2p,\n"
    "unaligned) beside gpufile's; every file opened with the path\n"
    "chosen and why; the effective settings; per file (the 128 most\n"
    "recently used files: every file with an open handle, then the\n"
    "closed ones last used), its bytes, tasks and requests per path\n"
    "and direction and what is in flight on it, with how many files'\n"
    "counters were dropped for newer ones. A process that loaded\n"
    "gpufile but has opened nothing yet shows \"no I/O yet\".\n"
    "Text from the process (command, paths) is printed with control\n"
    "bytes and bytes that are not UTF-8 as \\xHH, a backslash as \\\\;\n"
    "in JSON such bytes are \\u00XX.\n"
    "Bytes and tasks count as each task ends (every task_size bytes), so\n"
    "a single large read moves while it runs; \"in flight\" shows the\n"
    "requests and tasks not yet ended and the bytes not yet moved.\n"
    "Collectives: bytes that torch.distributed delivered to and sent\n"
    "from the process for gpufile (load_distributed).\n"
    "\n"
    "  --json            one JSON object; with --watch one per line\n"
    "                    (JSON Lines), each with the interval's rates;\n"
    "                    per-file counters under \"file_counters\"\n"
    "  --watch SECONDS   print again every SECONDS, with rates (GB/s,\n"
    "                    IOPS; per file GB/s) over that interval, until\n"
    "                    the process exits\n"
    "  --openmetrics     every process's counters (PID's alone when\n"
    "                    given) in the OpenMetrics text format: per\n"
    "                    process, path and direction requests, tasks,\n"
    "                    bytes, errors; cuFile's own counters; remote\n"
    "                    HTTP counters; handles per file and fallbacks\n"
    "                    with their reason as labels; per-file bytes,\n"
    "                    tasks, requests, errors and in-flight gauges\n"
    "                    (file labels: URLs without their secrets,\n"
    "                    control bytes as \\xHH)\n"
    "  --serve [ADDR:]PORT  an exporter: answers GET /metrics with the\n"
    "                    --openmetrics text, read anew each time, until\n"
    "                    killed. ADDR defaults to 127.0.0.1 (loopback);\n"
    "                    [::1]:PORT for IPv6; PORT 0 takes a free port.\n"
    "                    Prints the URL it serves on stdout; an ADDR:PORT\n"
    "                    that is not one is a usage error\n"
    "  --timeout SECONDS with --serve: drop a client that has not sent\n"
    "                    its request and taken the answer in this time\n"
    "                    (default 10)\n"
    "  --clean           remove the /dev/shm segments that older gpufile\n"
    "                    versions left for dead processes (today's\n"
    "                    segment is a memfd that goes with its process)\n"
    "  --help            print this help\n"
    "\n"
    "Exit status: 0 ok, 1 when PID does not exist, belongs to another\n"
    "user, or does not use gpufile, or --serve cannot listen (in use,\n"
    "not an address of this machine), 2 usage error.\n";

#define MAX_PROCS 1024
#define MAX_FILES GPUFILE_MAX_FILE_STATS

static int list_processes(int as_json)
{
	gpufile_process_t *procs = calloc(MAX_PROCS, sizeof(*procs));
	int n;

	if (!procs)
		return msg_error("stats", "out of memory");
	n = gpufile_stats_list(procs, MAX_PROCS);
	if (n < 0) {
		free(procs);
		return msg_error("stats", "%s", gpufile_errmsg());
	}
	if (n > MAX_PROCS)
		n = MAX_PROCS;
	if (as_json) {
		struct json j;

		json_init(&j, stdout);
		json_object_begin(&j, NULL);
		json_array_begin(&j, "processes");
		for (int i = 0; i < n; i++) {
			json_object_begin(&j, NULL);
			json_key_i64(&j, "pid", procs[i].pid);
			json_key_str(&j, "command", procs[i].command);
			json_key_u64(&j, "bytes", procs[i].bytes);
			json_key_bool(&j, "stale", procs[i].stale);
			json_object_end(&j);
		}
		json_array_end(&j);
		json_object_end(&j);
	} else if (n == 0) {
		printf("no process of this user uses gpufile\n");
	} else {
		printf("%8s  %-16s %16s  %s\n", "PID", "COMMAND", "BYTES",
		       "STATE");
		for (int i = 0; i < n; i++) {
			char cmd[4 * sizeof(procs[i].command)];
			printf("%8d  %-16s %16" PRIu64 "  %s\n", procs[i].pid,
			       text_escape(procs[i].command, cmd, sizeof(cmd)),
			       procs[i].bytes,
			       procs[i].stale ? "stale (gpufile stats --clean)"
			                      : "running");
		}
	}
	free(procs);
	return EXIT_OK;
}

static void json_hist(struct json *j, const char *key, const uint64_t *h)
{
	json_array_begin(j, key);
	for (int b = 0; b < GPUFILE_HIST_BUCKETS; b++) {
		if (!h[b])
			continue;
		json_object_begin(j, NULL);
		json_key_u64(j, "from", b ? 1ull << b : 0);
		json_key_u64(j, "count", h[b]);
		json_object_end(j);
	}
	json_array_end(j);
}

/* The remote sources' HTTP counters (gpufile_stats_remote), as JSON
 * ("remote_http": null when the process sent no HTTP request) or a line. */
static void remote_counters(struct json *j, int pid)
{
	static const char *const cls[GPUFILE_REMOTE_STATUS_CLASSES] = {
	    "none", "1xx", "2xx", "3xx", "4xx", "5xx"};
	gpufile_remote_stats_t r;

	GPUFILE_INIT(r);
	if (gpufile_stats_remote(pid, &r) || !r.requests) {
		if (j)
			json_key_null(j, "remote_http");
		return;
	}
	if (!j) {
		printf("remote HTTP: requests=%" PRIu64 " ranges=%" PRIu64
		       " bytes=%" PRIu64 " retries=%" PRIu64
		       " failed_ranges=%" PRIu64 " connects=%" PRIu64
		       " in_flight_max=%" PRIu64 " status:",
		       r.requests, r.ranges, r.bytes, r.retries, r.failures,
		       r.connects, r.in_flight_max);
		for (int i = 0; i < GPUFILE_REMOTE_STATUS_CLASSES; i++)
			printf(" %s=%" PRIu64, cls[i], r.status[i]);
		printf("\n");
		return;
	}
	json_object_begin(j, "remote_http");
	json_key_u64(j, "requests", r.requests);
	json_key_u64(j, "ranges", r.ranges);
	json_key_u64(j, "bytes", r.bytes);
	json_key_u64(j, "retries", r.retries);
	json_key_u64(j, "failed_ranges", r.failures);
	json_key_u64(j, "connects", r.connects);
	json_key_u64(j, "in_flight_max", r.in_flight_max);
	json_object_begin(j, "status");
	for (int i = 0; i < GPUFILE_REMOTE_STATUS_CLASSES; i++)
		json_key_u64(j, cls[i], r.status[i]);
	json_object_end(j);
	json_object_end(j);
}

static const char *const dirs[] = {"read", "write"};

/* Path p's object: its totals, each direction's counters (and rates
 * since prev, seconds ago, when given) and histograms. */
static void json_path(struct json *j, const gpufile_stats_t *s, int p,
                      const gpufile_stats_t *prev, double seconds)
{
	gpufile_counter_t total = {0, 0, 0, 0};

	for (int d = 0; d < 2; d++) {
		total.ops += s->path[p][d].ops;
		total.tasks += s->path[p][d].tasks;
		total.bytes += s->path[p][d].bytes;
		total.errors += s->path[p][d].errors;
	}
	json_object_begin(j, gpufile_path_name((gpufile_path_t)p));
	json_key_u64(j, "ops", total.ops);
	json_key_u64(j, "tasks", total.tasks);
	json_key_u64(j, "bytes", total.bytes);
	json_key_u64(j, "errors", total.errors);
	for (int d = 0; d < 2; d++) {
		stats_json_counter(j, dirs[d], &s->path[p][d]);
		if (prev && seconds > 0) {
			char key[32];
			uint64_t db =
			    s->path[p][d].bytes - prev->path[p][d].bytes;
			uint64_t dop = s->path[p][d].ops - prev->path[p][d].ops;
			snprintf(key, sizeof(key), "%s_gbps", dirs[d]);
			json_key_double(j, key, measure_gbps(db, seconds));
			snprintf(key, sizeof(key), "%s_iops", dirs[d]);
			json_key_double(j, key, (double)dop / seconds);
		}
	}
	json_object_begin(j, "latency_ns");
	for (int d = 0; d < 2; d++)
		json_hist(j, dirs[d], s->latency_hist[p][d]);
	json_object_end(j);
	json_object_begin(j, "request_bytes");
	for (int d = 0; d < 2; d++)
		json_hist(j, dirs[d], s->size_hist[p][d]);
	json_object_end(j);
	json_object_end(j);
}

/* cuFile's own counters per GPU, or null where they are not known. */
static void json_cufile_layer(struct json *j, const gpufile_stats_t *s)
{
	if (s->cufile_ngpus < 0) {
		json_key_null(j, "cufile_layer");
		return;
	}
	json_array_begin(j, "cufile_layer");
	for (int g = 0; g < s->cufile_ngpus; g++) {
		const gpufile_cufile_gpu_t *c = &s->cufile[g];
		json_object_begin(j, NULL);
		json_key_i64(j, "gpu", c->gpu);
		json_key_u64(j, "nvfs_reads", c->nvfs_reads);
		json_key_u64(j, "posix_reads", c->posix_reads);
		json_key_u64(j, "p2p_reads", c->p2p_reads);
		json_key_u64(j, "unaligned_reads", c->unaligned_reads);
		json_key_u64(j, "nvfs_writes", c->nvfs_writes);
		json_key_u64(j, "posix_writes", c->posix_writes);
		json_key_u64(j, "p2p_writes", c->p2p_writes);
		json_key_u64(j, "unaligned_writes", c->unaligned_writes);
		json_object_end(j);
	}
	json_array_end(j);
}

/* The file records and the settings in force. */
static void json_files_settings(struct json *j, const gpufile_stats_t *s,
                                const gpufile_file_stat_t *f, int nfiles)
{
	json_array_begin(j, "files");
	for (int i = 0; i < nfiles; i++) {
		json_object_begin(j, NULL);
		json_key_str(j, "path", f[i].path);
		json_key_str(j, "chosen", gpufile_path_name(f[i].chosen));
		json_key_str(j, "reason", f[i].reason);
		json_object_end(j);
	}
	json_array_end(j);
	json_object_begin(j, "settings");
	for (int i = 0; i < s->nsettings; i++) {
		json_object_begin(j, s->settings[i].name);
		json_key_str(j, "value", s->settings[i].value);
		json_key_str(j, "source", s->settings[i].source);
		json_object_end(j);
	}
	json_object_end(j);
}

/* Bytes moved in direction d on every path. */
static uint64_t dir_bytes(const gpufile_stats_t *s, int d)
{
	uint64_t n = 0;

	for (int p = 0; p < GPUFILE_PATH_COUNT; p++)
		n += s->path[p][d].bytes;
	return n;
}

/* What is in flight now, and the bytes collectives moved (with their
 * rate since prev, seconds ago, when given). */
static void json_inflight_collectives(struct json *j, const gpufile_stats_t *s,
                                      const gpufile_stats_t *prev,
                                      double seconds)
{
	json_object_begin(j, "inflight");
	json_key_u64(j, "requests", s->inflight_requests);
	json_key_u64(j, "tasks", s->inflight_tasks);
	json_key_u64(j, "pending_bytes", s->pending_bytes);
	json_object_end(j);
	json_object_begin(j, "collectives");
	json_key_u64(j, "calls", s->collective_calls);
	json_key_u64(j, "bytes_received", s->collective_bytes_received);
	json_key_u64(j, "bytes_sent", s->collective_bytes_sent);
	if (prev && seconds > 0)
		json_key_double(
		    j, "received_gbps",
		    measure_gbps(s->collective_bytes_received -
		                     prev->collective_bytes_received,
		                 seconds));
	json_object_end(j);
}

static void print_json(const gpufile_stats_t *s, const gpufile_file_stat_t *f,
                       int nfiles, const struct stats_files *fc,
                       const gpufile_stats_t *prev,
                       const struct stats_files *prev_fc, double seconds,
                       int one_line)
{
	struct json j;

	json_init(&j, stdout);
	j.one_line = one_line;
	json_object_begin(&j, NULL);
	json_key_i64(&j, "pid", s->pid);
	json_key_str(&j, "command", s->command);
	json_key_u64(&j, "uid", s->uid);
	json_key_u64(&j, "start_time_ns", s->start_time_ns);
	if (prev && seconds > 0) {
		/* The interval the rates below cover, and every path's. */
		json_key_double(&j, "interval_s", seconds);
		json_key_double(
		    &j, "read_gbps",
		    measure_gbps(dir_bytes(s, 0) - dir_bytes(prev, 0),
		                 seconds));
		json_key_double(
		    &j, "write_gbps",
		    measure_gbps(dir_bytes(s, 1) - dir_bytes(prev, 1),
		                 seconds));
	}
	json_key_u64(&j, "read_bytes", dir_bytes(s, 0));
	json_key_u64(&j, "write_bytes", dir_bytes(s, 1));
	json_inflight_collectives(&j, s, prev, seconds);
	json_object_begin(&j, "paths");
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++)
		json_path(&j, s, p, prev, seconds);
	json_object_end(&j);
	json_key_u64(&j, "direct_io_fallbacks", s->direct_io_fallbacks);
	json_key_u64(&j, "map_copy_bytes", s->map_copy_bytes);
	json_key_u64(&j, "map_copy_faults", s->map_copy_faults);
	json_cufile_layer(&j, s);
	json_key_u64(&j, "files_opened", s->files_opened);
	remote_counters(&j, s->pid);
	json_files_settings(&j, s, f, nfiles);
	stats_files_json(&j, s, fc, prev ? prev_fc : NULL, seconds);
	json_object_end(&j);
	fflush(stdout);
}

/* "reads   gpufile: n=.. cufile=..(.. tasks) posix=.. small=.. host=..
 *          mmap=.. remote=.. | cuFile: n=.. nvfs=.. posix=.. p2p=..
 *          unaligned=.." (n is the sum of the paths listed) */
static void print_layers(const gpufile_stats_t *s, int d)
{
	uint64_t n = 0, nvfs = 0, posix = 0, p2p = 0, unal = 0;

	for (int p = 0; p < GPUFILE_PATH_COUNT; p++)
		n += s->path[p][d].ops;
	printf("%-6s gpufile: n=%" PRIu64 " cufile=%" PRIu64 " (%" PRIu64
	       " tasks) posix=%" PRIu64 " small=%" PRIu64 " host=%" PRIu64
	       " mmap=%" PRIu64 " remote=%" PRIu64,
	       d ? "writes" : "reads", n, s->path[GPUFILE_PATH_CUFILE][d].ops,
	       s->path[GPUFILE_PATH_CUFILE][d].tasks,
	       s->path[GPUFILE_PATH_POSIX][d].ops,
	       s->path[GPUFILE_PATH_SMALL][d].ops,
	       s->path[GPUFILE_PATH_HOST][d].ops,
	       s->path[GPUFILE_PATH_MMAP][d].ops,
	       s->path[GPUFILE_PATH_REMOTE][d].ops);
	if (s->cufile_ngpus < 0) {
		printf(" | cuFile: no counters (cuFile not used, or its "
		       "stats not enabled)\n");
		return;
	}
	for (int g = 0; g < s->cufile_ngpus; g++) {
		const gpufile_cufile_gpu_t *c = &s->cufile[g];
		nvfs += d ? c->nvfs_writes : c->nvfs_reads;
		posix += d ? c->posix_writes : c->posix_reads;
		p2p += d ? c->p2p_writes : c->p2p_reads;
		unal += d ? c->unaligned_writes : c->unaligned_reads;
	}
	printf(" | cuFile: n=%" PRIu64 " nvfs=%" PRIu64 " posix=%" PRIu64
	       " p2p=%" PRIu64 " unaligned=%" PRIu64 "\n",
	       nvfs + posix + p2p, nvfs, posix, p2p, unal);
}

static void print_text(const gpufile_stats_t *s, const gpufile_file_stat_t *f,
                       int nfiles, const struct stats_files *fc,
                       const gpufile_stats_t *prev,
                       const struct stats_files *prev_fc, double seconds)
{
	char hb[32], t1[4 * 256], t2[4 * 256];
	uint64_t ops = 0;

	for (int p = 0; p < GPUFILE_PATH_COUNT; p++)
		ops += s->path[p][0].ops + s->path[p][1].ops;
	printf("PID %d (%s)\n", s->pid,
	       text_escape(s->command, t1, sizeof(t1)));
	if (!ops && !s->files_opened)
		printf("no I/O yet: gpufile is loaded; its counters start at "
		       "its first gpufile_open or request\n");
	print_layers(s, 0);
	print_layers(s, 1);
	if (prev && seconds > 0)
		printf(
		    "over %.2f s: read %.3f GB/s, write %.3f GB/s\n", seconds,
		    measure_gbps(dir_bytes(s, 0) - dir_bytes(prev, 0), seconds),
		    measure_gbps(dir_bytes(s, 1) - dir_bytes(prev, 1),
		                 seconds));
	printf("in flight: %" PRIu64 " request%s, %" PRIu64 " task%s, %" PRIu64
	       " bytes pending (%s)\n",
	       s->inflight_requests, s->inflight_requests == 1 ? "" : "s",
	       s->inflight_tasks, s->inflight_tasks == 1 ? "" : "s",
	       s->pending_bytes,
	       measure_human_bytes(s->pending_bytes, hb, sizeof(hb)));
	printf("%-6s %-6s %12s %12s %16s %8s", "dir", "path", "requests",
	       "tasks", "bytes", "errors");
	if (prev)
		printf(" %10s %10s", "GB/s", "IOPS");
	printf("\n");
	for (int d = 0; d < 2; d++) {
		for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
			const gpufile_counter_t *c = &s->path[p][d];

			/* A request in flight has tasks and bytes before
			 * it ends and counts as one. */
			if (!c->ops && !c->tasks)
				continue;
			printf("%-6s %-6s %12" PRIu64 " %12" PRIu64
			       " %16" PRIu64 " %8" PRIu64,
			       dirs[d], gpufile_path_name((gpufile_path_t)p),
			       c->ops, c->tasks, c->bytes, c->errors);
			if (prev && seconds > 0)
				printf(" %10.3f %10.0f",
				       measure_gbps(c->bytes -
				                        prev->path[p][d].bytes,
				                    seconds),
				       (double)(c->ops - prev->path[p][d].ops) /
				           seconds);
			printf("  (%s)\n",
			       measure_human_bytes(c->bytes, hb, sizeof(hb)));
		}
	}
	remote_counters(NULL, s->pid);
	if (s->collective_calls)
		printf("collectives (torch.distributed): %" PRIu64
		       " calls, %" PRIu64 " bytes received (%s), %" PRIu64
		       " bytes sent\n",
		       s->collective_calls, s->collective_bytes_received,
		       measure_human_bytes(s->collective_bytes_received, hb,
		                           sizeof(hb)),
		       s->collective_bytes_sent);
	if (s->direct_io_fallbacks)
		printf("O_DIRECT refused on %" PRIu64 " file(s)\n",
		       s->direct_io_fallbacks);
	if (s->map_copy_bytes)
		printf("host reads copied from the file's map (host_map_copy, "
		       "gathered reads): %" PRIu64 " of %" PRIu64
		       " host-read bytes (%s)\n",
		       s->map_copy_bytes, s->path[GPUFILE_PATH_HOST][0].bytes,
		       measure_human_bytes(s->map_copy_bytes, hb, sizeof(hb)));
	if (s->map_copy_faults)
		printf("copies from a map that a SIGBUS cut short (the file "
		       "shrank): %" PRIu64 "\n",
		       s->map_copy_faults);
	printf("files opened: %" PRIu64 "%s\n", s->files_opened,
	       s->files_opened > (uint64_t)nfiles ? " (latest shown)" : "");
	for (int i = 0; i < nfiles; i++)
		printf("  %s: %s: %s\n", text_escape(f[i].path, t1, sizeof(t1)),
		       gpufile_path_name(f[i].chosen),
		       text_escape(f[i].reason, t2, sizeof(t2)));
	stats_files_text(s, fc, prev ? prev_fc : NULL, seconds);
	if (s->nsettings) {
		printf("settings:");
		for (int i = 0; i < s->nsettings; i++) {
			const gpufile_setting_value_t *v = &s->settings[i];
			int dflt = strcmp(v->source, "default") == 0;
			char t3[4 * sizeof(v->source)];

			printf(" %s=%s", text_escape(v->name, t1, sizeof(t1)),
			       text_escape(v->value, t2, sizeof(t2)));
			if (!dflt)
				printf(" (%s)",
				       text_escape(v->source, t3, sizeof(t3)));
		}
		printf("\n");
	}
	fflush(stdout);
}

/* One sample: the process's counters and its files'. */
struct sample {
	gpufile_stats_t s;
	struct stats_files files;
};

/* as_json: 1 an indented object, 2 one object per line (--watch). */
static int show(int pid, int as_json, const struct sample *prev_sample,
                double seconds, struct sample *now_sample)
{
	const gpufile_stats_t *prev = prev_sample ? &prev_sample->s : NULL;
	gpufile_stats_t *now = &now_sample->s;
	gpufile_file_stat_t *files = calloc(MAX_FILES, sizeof(*files));
	int nfiles, rc;

	if (!files)
		return msg_error("stats", "out of memory");
	GPUFILE_INIT(*now);
	rc = gpufile_stats_read(pid, now);
	if (rc == -ENOENT && prev && kill(pid, 0) == 0) {
		/* A watched process that uses no gpufile now: it exec()ed,
		 * and its new image has not loaded the library yet (or never
		 * will). Not an end: no counters, a new process, and the
		 * watch goes on. */
		GPUFILE_INIT(*now);
		now->pid = (int32_t)pid;
		now->cufile_ngpus = -1;
		rc = 0;
	}
	nfiles = rc ? rc : gpufile_stats_files(pid, files, MAX_FILES);
	if (nfiles == -ENOENT && prev && kill(pid, 0) == 0)
		nfiles = 0;
	if (nfiles >= 0)
		rc = stats_files_read(pid, &now_sample->files);
	if (rc == -ENOENT && prev && kill(pid, 0) == 0)
		rc = 0;
	if (nfiles >= 0 && rc < 0)
		nfiles = rc;
	if (nfiles < 0) {
		free(files);
		return nfiles;
	}
	/* Another segment (or none yet) under the same PID: the PID was
	 * reused, or the process exec()ed. Its counters began again, and
	 * rates against the old ones wrapped around to absurd values. From
	 * no segment (0, "no I/O yet") to one, counting from 0 is right. */
	if (prev && prev->start_time_ns &&
	    prev->start_time_ns != now->start_time_ns) {
		fprintf(stderr,
		        "gpufile stats: PID %d is a new process (or exec()ed): "
		        "its counters started again; rates resume at the "
		        "next sample\n",
		        pid);
		prev = NULL;
	}
	if (as_json)
		print_json(now, files, nfiles, &now_sample->files, prev,
		           prev ? &prev_sample->files : NULL, seconds,
		           as_json == 2);
	else
		print_text(now, files, nfiles, &now_sample->files, prev,
		           prev ? &prev_sample->files : NULL, seconds);
	free(files);
	return 0;
}

static void free_samples(struct sample *samples)
{
	stats_files_free(&samples[0].files);
	stats_files_free(&samples[1].files);
	free(samples);
}

int cmd_stats(int argc, char **argv)
{
	const char *cmd = "stats";
	int as_json = 0, clean = 0, openmetrics = 0, timeout_given = 0, rc,
	    first;
	double watch = 0, sampled, timeout = 10;
	const char *serve = NULL;
	uint64_t pid = 0;
	struct sample *samples, *a, *b;
	const struct opt opts[] = {
	    {.name = "json", .kind = OPT_FLAG, .dest = &as_json},
	    {.name = "watch",
	     .kind = OPT_SECONDS,
	     .dest = &watch,
	     .max = 86400},
	    {.name = "clean", .kind = OPT_FLAG, .dest = &clean},
	    {.name = "openmetrics", .kind = OPT_FLAG, .dest = &openmetrics},
	    {.name = "serve", .kind = OPT_STRING, .dest = &serve},
	    {.name = "timeout",
	     .kind = OPT_SECONDS,
	     .dest = &timeout,
	     .given = &timeout_given,
	     .max = 3600},
	};
	const struct opt_spec spec = {
	    cmd, usage, opts, sizeof(opts) / sizeof(opts[0]), "PID", 0, 1};

	first = opt_parse(&spec, argc, argv, &rc);
	if (first < 0)
		return rc;
	/* Each of these was ignored without a word: --clean --json printed
	 * text, and --watch without a PID printed the list once. */
	if (clean && (as_json || watch > 0 || first < argc))
		return msg_usage_error(cmd, "--clean takes no %s",
		                       first < argc ? "PID"
		                       : as_json    ? "--json"
		                                    : "--watch");
	if ((openmetrics || serve) && (clean || as_json || watch > 0))
		return msg_usage_error(cmd, "--%s takes no %s",
		                       serve ? "serve" : "openmetrics",
		                       clean     ? "--clean"
		                       : as_json ? "--json"
		                                 : "--watch");
	if (openmetrics && serve)
		return msg_usage_error(cmd, "--openmetrics and --serve: one "
		                            "or the other (--serve answers "
		                            "with the --openmetrics text)");
	if (timeout_given && !serve)
		return msg_usage_error(cmd, "--timeout goes with --serve");
	if (watch > 0 && first == argc)
		return msg_usage_error(cmd, "--watch needs a PID");
	if (clean) {
		rc = gpufile_stats_clean();
		printf("removed %d stale segment%s\n", rc, rc == 1 ? "" : "s");
		return EXIT_OK;
	}
	if (first < argc && (opt_parse_count(argv[first], &pid) || pid == 0 ||
	                     pid > 0x7fffffff))
		return msg_usage_error(cmd, "\"%s\" is not a PID", argv[first]);
	if (openmetrics)
		return metrics_print(cmd, (int)pid);
	if (serve)
		return metrics_serve(cmd, (int)pid, serve, timeout);
	if (!pid)
		return list_processes(as_json);
	/* A stream of objects is read line by line (JSON Lines). */
	if (as_json && watch > 0)
		as_json = 2;

	/* a is the latest sample, b the next; they swap after each. */
	samples = calloc(2, sizeof(*samples));
	if (!samples)
		return msg_error(cmd, "out of memory");
	a = samples;
	b = samples + 1;
	/* Rates are over the time between two samples, not the sleep
	 * alone: printing a sample waits as long as the reader of stdout
	 * does (a pager, a full pipe), and the counters go on meanwhile. */
	sampled = measure_now();
	rc = show((int)pid, as_json, NULL, 0, a);
	if (rc) {
		free_samples(samples);
		return msg_error(cmd, "%s", gpufile_errmsg());
	}
	while (watch > 0) {
		struct timespec ts = {
		    (time_t)watch,
		    (long)((watch - (double)(time_t)watch) * 1e9)};
		double now;
		struct sample *t;

		nanosleep(&ts, NULL);
		if (!as_json)
			printf("\n");
		now = measure_now();
		rc = show((int)pid, as_json, a, now - sampled, b);
		sampled = now;
		if (rc == -ESRCH || rc == -ESTALE || rc == -ENOENT) {
			fprintf(stderr, "gpufile stats: process %d has ended\n",
			        (int)pid);
			rc = 0;
			break;
		}
		if (rc) {
			free_samples(samples);
			return msg_error(cmd, "%s", gpufile_errmsg());
		}
		t = a;
		a = b;
		b = t;
		/* Output that cannot be written ends the watch; main says
		 * why. */
		if (ferror(stdout))
			break;
	}
	free_samples(samples);
	return EXIT_OK;
}
