/*
 * gpufile stats --openmetrics and --serve (metrics.h): the counters of
 * every gpufile process in the OpenMetrics text format, read through the
 * public readers (gpufile_stats_list, gpufile_stats_read,
 * gpufile_stats_files, gpufile_stats_remote), as gpufile stats PID reads
 * them.
 *
 * Per-file counters (gpufile_stats_file_counters) carry the file as a
 * label made the same way, and only the paths and directions a file
 * used, so that a process's series stay bounded by its records
 * (GPUFILE_MAX_FILE_COUNTERS).
 *
 * OpenMetrics wants the samples of one family together, so every process
 * is read first (struct proc) and the families are written after, each
 * over every process. A counter of the stats record is one row of a table
 * below (path_counters, process_counters): a field added to the record is
 * one more row.
 *
 * Text that another process chose (its command name, its file names, the
 * reasons its decisions give) reaches a label only through label_value():
 * a URL without its secrets (gpufile_redact_url, as every output of the
 * tool shows it), then bytes that could act on a terminal and bytes that
 * are not UTF-8 as \xHH (text_escape, as gpufile stats shows them), then
 * the OpenMetrics escapes of a label value (\\, \"; a newline cannot be
 * left). So the decoded label is what gpufile stats PID prints.
 */
#define _GNU_SOURCE
#include "metrics.h"
#include "gpufile.h"
#include "measure.h"
#include "msg.h"
#include "text.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- reading every process ---- */

struct proc {
	gpufile_stats_t s;
	gpufile_file_stat_t files[GPUFILE_MAX_FILE_STATS];
	int nfiles;
	/* Per-file counters, and each one's file label value (NULL: merged
	 * into an earlier file shown under the same label). */
	gpufile_file_counters_t *fc;
	char **fc_label;
	int nfc;
	gpufile_remote_stats_t remote;
	int has_remote;
	char *labels; /* pid="N",command="..." */
};

/* The label text of one value (see the head of this file), written to
 * out between quotes by the caller. */
static void label_value(FILE *out, const char *value, int is_path)
{
	char *shown = is_path ? text_shown_path(value) : NULL;
	char *escaped = text_escape_alloc(shown ? shown : is_path ? "" : value);

	free(shown);
	for (const char *c = escaped ? escaped : ""; *c; c++) {
		if (*c == '\\' || *c == '"')
			fputc('\\', out);
		fputc(*c, out);
	}
	free(escaped);
}

static char *process_labels(const gpufile_stats_t *s)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return NULL;
	fprintf(f, "pid=\"%d\",command=\"", (int)s->pid);
	label_value(f, s->command, 0);
	fputc('"', f);
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

/* Adds the counters of b to a (two records shown under one label). */
static void merge_counters(gpufile_file_counters_t *a,
                           const gpufile_file_counters_t *b)
{
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		for (int d = 0; d < 2; d++) {
			a->path[p][d].ops += b->path[p][d].ops;
			a->path[p][d].tasks += b->path[p][d].tasks;
			a->path[p][d].bytes += b->path[p][d].bytes;
			a->path[p][d].errors += b->path[p][d].errors;
		}
	}
	a->inflight_requests += b->inflight_requests;
	a->inflight_tasks += b->inflight_tasks;
	a->pending_bytes += b->pending_bytes;
}

/* Reads process pid's per-file counters into p, with their labels. Two
 * records may show as one label (names that differ only in what
 * redaction removes): a label set appears once in a family, so their
 * counters are summed under the first. Returns 0 or -ENOMEM. */
static int read_file_counters(int pid, struct proc *p)
{
	int n;

	p->fc = calloc(GPUFILE_MAX_FILE_COUNTERS, sizeof(*p->fc));
	p->fc_label = calloc(GPUFILE_MAX_FILE_COUNTERS, sizeof(*p->fc_label));
	if (!p->fc || !p->fc_label)
		return -ENOMEM;
	n = gpufile_stats_file_counters(pid, p->fc, GPUFILE_MAX_FILE_COUNTERS);
	p->nfc = n < 0                           ? 0
	         : n < GPUFILE_MAX_FILE_COUNTERS ? n
	                                         : GPUFILE_MAX_FILE_COUNTERS;
	for (int i = 0; i < p->nfc; i++) {
		size_t len = 0;
		FILE *f = open_memstream(&p->fc_label[i], &len);

		if (!f)
			return -ENOMEM;
		label_value(f, p->fc[i].name, 1);
		if (fclose(f) != 0)
			return -ENOMEM;
		for (int k = 0; k < i; k++) {
			if (p->fc_label[k] &&
			    strcmp(p->fc_label[k], p->fc_label[i]) == 0) {
				merge_counters(&p->fc[k], &p->fc[i]);
				free(p->fc_label[i]);
				p->fc_label[i] = NULL;
				break;
			}
		}
	}
	return 0;
}

static void free_proc(struct proc *p)
{
	for (int i = 0; p->fc_label && i < p->nfc; i++)
		free(p->fc_label[i]);
	free(p->fc_label);
	free(p->fc);
	free(p->labels);
}

/* Reads process pid into p. Returns 0, 1 when the process is to be left
 * out (it ended, belongs to another user, counts privately: its error
 * when strict), or -ENOMEM. */
static int read_proc(int pid, struct proc *p, int strict)
{
	int n, rc;

	GPUFILE_INIT(p->s);
	rc = gpufile_stats_read(pid, &p->s);
	if (rc)
		return strict ? rc : 1;
	n = gpufile_stats_files(pid, p->files, GPUFILE_MAX_FILE_STATS);
	p->nfiles = n > 0 ? n : 0;
	GPUFILE_INIT(p->remote);
	p->has_remote = gpufile_stats_remote(pid, &p->remote) == 0;
	p->labels = process_labels(&p->s);
	if (!p->labels || read_file_counters(pid, p)) {
		free_proc(p);
		memset(p, 0, sizeof(*p));
		return -ENOMEM;
	}
	return 0;
}

/* The processes to show: pid alone, or every one gpufile_stats_list()
 * finds (sized from its count: the list may grow between two calls).
 * Returns how many were read into *out (freed by the caller), or
 * -errno (pid's error as gpufile_stats_read() gives it). */
static int read_procs(int pid, struct proc **out)
{
	gpufile_process_t *list = NULL;
	struct proc *procs;
	int n = 1, nread = 0;

	*out = NULL;
	if (!pid) {
		for (int max = 0;;) {
			n = gpufile_stats_list(list, max);
			if (n < 0) {
				free(list);
				return n;
			}
			if (n <= max)
				break;
			max = n + 16;
			free(list);
			list = calloc((size_t)max, sizeof(*list));
			if (!list)
				return -ENOMEM;
		}
	}
	procs = calloc(n ? (size_t)n : 1, sizeof(*procs));
	if (!procs) {
		free(list);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		int rc;

		if (list && list[i].stale)
			continue;
		rc = read_proc(list ? list[i].pid : pid, &procs[nread], !list);
		if (rc < 0) {
			free(list);
			for (int k = 0; k < nread; k++)
				free_proc(&procs[k]);
			free(procs);
			return rc;
		}
		if (rc == 0)
			nread++;
	}
	free(list);
	*out = procs;
	return nread;
}

/* ---- writing the families ---- */

static void family(FILE *out, const char *name, const char *type,
                   const char *unit, const char *help)
{
	fprintf(out, "# TYPE %s %s\n", name, type);
	if (unit)
		fprintf(out, "# UNIT %s %s\n", name, unit);
	fprintf(out, "# HELP %s %s\n", name, help);
}

static const char *const directions[2] = {"read", "write"};

/* gpufile's own layer: one family per field of gpufile_counter_t, a
 * sample per process, path and direction. */
static const struct {
	const char *name, *unit, *help;
	size_t offset;
} path_counters[] = {
    {"gpufile_requests", NULL,
     "Requests (blocking or async) by the path gpufile took and direction",
     offsetof(gpufile_counter_t, ops)},
    {"gpufile_tasks", NULL, "Tasks those requests were split into",
     offsetof(gpufile_counter_t, tasks)},
    {"gpufile_bytes", "bytes", "Bytes moved by path and direction",
     offsetof(gpufile_counter_t, bytes)},
    {"gpufile_errors", NULL, "Requests that failed",
     offsetof(gpufile_counter_t, errors)},
};

/* Counters of the whole process (gpufile_stats_t fields). */
static const struct {
	const char *name, *unit, *help;
	size_t offset;
} process_counters[] = {
    {"gpufile_direct_io_fallbacks", NULL,
     "Files where O_DIRECT was refused and buffered I/O used instead",
     offsetof(gpufile_stats_t, direct_io_fallbacks)},
    {"gpufile_map_copy_bytes", "bytes",
     "Host-read bytes copied from a map of the file instead of read",
     offsetof(gpufile_stats_t, map_copy_bytes)},
    {"gpufile_map_copy_faults", NULL,
     "Copies from a map that a SIGBUS cut short (the file shrank)",
     offsetof(gpufile_stats_t, map_copy_faults)},
    {"gpufile_files_opened", NULL, "File handles opened",
     offsetof(gpufile_stats_t, files_opened)},
    {"gpufile_collective_calls", NULL,
     "torch.distributed collectives that moved data of this process "
     "(gpufile_stats_add_collective)",
     offsetof(gpufile_stats_t, collective_calls)},
    {"gpufile_collective_received_bytes", "bytes",
     "Bytes this process received in those collectives",
     offsetof(gpufile_stats_t, collective_bytes_received)},
    {"gpufile_collective_sent_bytes", "bytes",
     "Bytes this process sent in those collectives",
     offsetof(gpufile_stats_t, collective_bytes_sent)},
};

/* Gauges of the whole process: what is in flight when it is read. */
static const struct {
	const char *name, *unit, *help;
	size_t offset;
} process_gauges[] = {
    {"gpufile_inflight_requests", NULL,
     "Requests of the worker pool started and not yet ended",
     offsetof(gpufile_stats_t, inflight_requests)},
    {"gpufile_inflight_tasks", NULL, "Tasks of those requests not yet ended",
     offsetof(gpufile_stats_t, inflight_tasks)},
    {"gpufile_pending_bytes", "bytes",
     "Bytes those requests asked for that no task has moved yet",
     offsetof(gpufile_stats_t, pending_bytes)},
};

static uint64_t field(const void *base, size_t offset)
{
	uint64_t v;

	memcpy(&v, (const char *)base + offset, sizeof(v));
	return v;
}

static void write_process_info(FILE *out, const struct proc *p, int n)
{
	family(out, "gpufile_process", "info", NULL,
	       "A process using gpufile, with its owner");
	for (int i = 0; i < n; i++)
		fprintf(out, "gpufile_process_info{%s,uid=\"%u\"} 1\n",
		        p[i].labels, (unsigned)p[i].s.uid);
	family(out, "gpufile_process_start_time_seconds", "gauge", "seconds",
	       "When the process began counting (Unix time)");
	for (int i = 0; i < n; i++)
		fprintf(out,
		        "gpufile_process_start_time_seconds{%s} %" PRIu64
		        ".%09" PRIu64 "\n",
		        p[i].labels, p[i].s.start_time_ns / 1000000000u,
		        p[i].s.start_time_ns % 1000000000u);
}

static void write_counters(FILE *out, const struct proc *p, int n)
{
	for (size_t c = 0; c < sizeof(path_counters) / sizeof(path_counters[0]);
	     c++) {
		family(out, path_counters[c].name, "counter",
		       path_counters[c].unit, path_counters[c].help);
		for (int i = 0; i < n; i++)
			for (int path = 0; path < GPUFILE_PATH_COUNT; path++)
				for (int d = 0; d < 2; d++)
					fprintf(
					    out,
					    "%s_total{%s,path=\"%s\","
					    "direction=\"%s\"} %" PRIu64 "\n",
					    path_counters[c].name, p[i].labels,
					    gpufile_path_name(
					        (gpufile_path_t)path),
					    directions[d],
					    field(&p[i].s.path[path][d],
					          path_counters[c].offset));
	}
	for (size_t c = 0;
	     c < sizeof(process_counters) / sizeof(process_counters[0]); c++) {
		family(out, process_counters[c].name, "counter",
		       process_counters[c].unit, process_counters[c].help);
		for (int i = 0; i < n; i++)
			fprintf(out, "%s_total{%s} %" PRIu64 "\n",
			        process_counters[c].name, p[i].labels,
			        field(&p[i].s, process_counters[c].offset));
	}
	for (size_t c = 0;
	     c < sizeof(process_gauges) / sizeof(process_gauges[0]); c++) {
		family(out, process_gauges[c].name, "gauge",
		       process_gauges[c].unit, process_gauges[c].help);
		for (int i = 0; i < n; i++)
			fprintf(out, "%s{%s} %" PRIu64 "\n",
			        process_gauges[c].name, p[i].labels,
			        field(&p[i].s, process_gauges[c].offset));
	}
}

/* cuFile's own counters (the second layer), where gpufile recorded any. */
static void write_cufile_layer(FILE *out, const struct proc *p, int n)
{
	static const char *const kinds[] = {"nvfs", "posix", "p2p",
	                                    "unaligned"};

	family(out, "gpufile_cufile_layer_recorded", "gauge", NULL,
	       "1 when cuFile's own counters were recorded (cuFile used, its "
	       "stats level 3), else 0");
	for (int i = 0; i < n; i++)
		fprintf(out, "gpufile_cufile_layer_recorded{%s} %d\n",
		        p[i].labels, p[i].s.cufile_ngpus >= 0);
	family(out, "gpufile_cufile_layer_requests", "counter", NULL,
	       "cuFile's own per-GPU counts of how it moved requests (nvfs: "
	       "GDS, posix: its compatibility path, p2p, unaligned)");
	for (int i = 0; i < n; i++) {
		for (int g = 0; g < p[i].s.cufile_ngpus; g++) {
			const gpufile_cufile_gpu_t *c = &p[i].s.cufile[g];
			const uint64_t v[2][4] = {
			    {c->nvfs_reads, c->posix_reads, c->p2p_reads,
			     c->unaligned_reads},
			    {c->nvfs_writes, c->posix_writes, c->p2p_writes,
			     c->unaligned_writes}};

			for (int d = 0; d < 2; d++)
				for (int k = 0; k < 4; k++)
					fprintf(
					    out,
					    "gpufile_cufile_layer_requests_"
					    "total{%s,gpu=\"%d\",kind=\"%s\","
					    "direction=\"%s\"} %" PRIu64 "\n",
					    p[i].labels, c->gpu, kinds[k],
					    directions[d], v[d][k]);
		}
	}
}

static void write_remote(FILE *out, const struct proc *p, int n)
{
	static const struct {
		const char *name, *unit, *help;
		size_t offset;
	} rows[] = {
	    {"gpufile_remote_http_requests", NULL,
	     "HTTP requests sent, retries included",
	     offsetof(gpufile_remote_stats_t, requests)},
	    {"gpufile_remote_http_ranges", NULL, "Ranges that arrived whole",
	     offsetof(gpufile_remote_stats_t, ranges)},
	    {"gpufile_remote_http_bytes", "bytes", "Bytes of those ranges",
	     offsetof(gpufile_remote_stats_t, bytes)},
	    {"gpufile_remote_http_retries", NULL,
	     "Attempts repeated after a retryable failure",
	     offsetof(gpufile_remote_stats_t, retries)},
	    {"gpufile_remote_http_failed_ranges", NULL,
	     "Ranges that failed after every attempt",
	     offsetof(gpufile_remote_stats_t, failures)},
	    {"gpufile_remote_http_connects", NULL,
	     "Connections opened (the rest were reused)",
	     offsetof(gpufile_remote_stats_t, connects)},
	};
	static const char *const cls[GPUFILE_REMOTE_STATUS_CLASSES] = {
	    "none", "1xx", "2xx", "3xx", "4xx", "5xx"};

	for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
		family(out, rows[r].name, "counter", rows[r].unit,
		       rows[r].help);
		for (int i = 0; i < n; i++)
			if (p[i].has_remote)
				fprintf(out, "%s_total{%s} %" PRIu64 "\n",
				        rows[r].name, p[i].labels,
				        field(&p[i].remote, rows[r].offset));
	}
	family(out, "gpufile_remote_http_responses", "counter", NULL,
	       "HTTP responses by status class (none: a transfer error)");
	for (int i = 0; i < n; i++)
		for (int c = 0;
		     p[i].has_remote && c < GPUFILE_REMOTE_STATUS_CLASSES; c++)
			fprintf(out,
			        "gpufile_remote_http_responses_total{%s,class="
			        "\"%s\"} %" PRIu64 "\n",
			        p[i].labels, cls[c], p[i].remote.status[c]);
	/* A high-water mark, not a count of events: a gauge. */
	family(out, "gpufile_remote_http_in_flight_max", "gauge", NULL,
	       "The most ranges one remote handle had in flight at once "
	       "(http_max_in_flight bounds it)");
	for (int i = 0; i < n; i++)
		if (p[i].has_remote)
			fprintf(out,
			        "gpufile_remote_http_in_flight_max{%s} %" PRIu64
			        "\n",
			        p[i].labels, p[i].remote.in_flight_max);
}

/* The label text of a file name (label_value's), or NULL out of memory. */
static char *file_label(const char *path)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return NULL;
	label_value(f, path, 1);
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

/* Records a, b name the same label set (file as shown, path, reason):
 * two names that differ only in what is not shown (a URL's secrets) are
 * one label set, else the family would hold a label set twice, which the
 * format forbids. */
static int same_record(const gpufile_file_stat_t *a,
                       const gpufile_file_stat_t *b, int with_file)
{
	char *la, *lb;
	int same;

	if (a->chosen != b->chosen || strcmp(a->reason, b->reason) != 0)
		return 0;
	if (!with_file || strcmp(a->path, b->path) == 0)
		return 1;
	la = file_label(a->path);
	lb = file_label(b->path);
	same = la && lb && strcmp(la, lb) == 0;
	free(la);
	free(lb);
	return same;
}

/* The kept file records of each process, as handles counted per label
 * set (two handles of one file with one decision are one sample: a label
 * set appears once). with_file 0: the fallbacks, records whose device
 * requests go through gpufile's posix path instead of cuFile, by reason. */
static void write_files(FILE *out, const struct proc *p, int n, int with_file)
{
	const char *name =
	    with_file ? "gpufile_file_handles" : "gpufile_fallbacks";

	if (with_file)
		family(out, name, "gauge", NULL,
		       "Handles among the latest opened, by file (URLs "
		       "without their secrets), the path device requests take "
		       "and why");
	else
		family(out, name, "gauge", NULL,
		       "Handles among the latest opened whose device requests "
		       "do not go to cuFile, by the path taken and why");
	for (int i = 0; i < n; i++) {
		const gpufile_file_stat_t *f = p[i].files;

		for (int a = 0; a < p[i].nfiles; a++) {
			int count = 0, seen = 0;

			if (!with_file && f[a].chosen != GPUFILE_PATH_POSIX)
				continue;
			for (int b = 0; b < p[i].nfiles && !seen; b++) {
				if (!same_record(&f[a], &f[b], with_file))
					continue;
				if (b < a)
					seen = 1;
				else
					count++;
			}
			if (seen)
				continue;
			fprintf(out, "%s{%s,", name, p[i].labels);
			if (with_file) {
				fputs("file=\"", out);
				label_value(out, f[a].path, 1);
				fputs("\",", out);
			}
			fprintf(out, "path=\"%s\",reason=\"",
			        gpufile_path_name(f[a].chosen));
			label_value(out, f[a].reason, 0);
			fprintf(out, "\"} %d\n", count);
		}
	}
}

/* Per-file counters: one family per field of gpufile_counter_t, a
 * sample per process, file, path and direction that the file used; and
 * the file's in-flight gauges. */
static const struct {
	const char *name, *unit, *help;
	size_t offset;
} file_counters[] = {
    {"gpufile_file_requests", NULL,
     "Requests on a file (URLs without their secrets) by path and "
     "direction",
     offsetof(gpufile_counter_t, ops)},
    {"gpufile_file_tasks", NULL, "Tasks of those requests that ended",
     offsetof(gpufile_counter_t, tasks)},
    {"gpufile_file_bytes", "bytes",
     "Bytes moved to or from a file by path and direction, as each task "
     "ends",
     offsetof(gpufile_counter_t, bytes)},
    {"gpufile_file_errors", NULL, "Requests on a file that failed",
     offsetof(gpufile_counter_t, errors)},
};

static const struct {
	const char *name, *unit, *help;
	size_t offset;
} file_gauges[] = {
    {"gpufile_file_inflight_requests", NULL,
     "Requests on a file started and not yet ended",
     offsetof(gpufile_file_counters_t, inflight_requests)},
    {"gpufile_file_inflight_tasks", NULL,
     "Tasks of those requests not yet ended",
     offsetof(gpufile_file_counters_t, inflight_tasks)},
    {"gpufile_file_pending_bytes", "bytes",
     "Bytes those requests asked for that no task has moved yet",
     offsetof(gpufile_file_counters_t, pending_bytes)},
};

static void write_file_counters(FILE *out, const struct proc *p, int n)
{
	for (size_t c = 0; c < sizeof(file_counters) / sizeof(file_counters[0]);
	     c++) {
		family(out, file_counters[c].name, "counter",
		       file_counters[c].unit, file_counters[c].help);
		for (int i = 0; i < n; i++) {
			for (int k = 0; k < p[i].nfc; k++) {
				const gpufile_file_counters_t *f = &p[i].fc[k];

				if (!p[i].fc_label[k])
					continue;
				for (int path = 0; path < GPUFILE_PATH_COUNT;
				     path++) {
					for (int d = 0; d < 2; d++) {
						const gpufile_counter_t *v =
						    &f->path[path][d];
						if (!v->ops && !v->tasks)
							continue;
						fprintf(
						    out,
						    "%s_total{%s,file=\"%s\","
						    "path=\"%s\",direction="
						    "\"%s\"} %" PRIu64 "\n",
						    file_counters[c].name,
						    p[i].labels,
						    p[i].fc_label[k],
						    gpufile_path_name(
						        (gpufile_path_t)path),
						    directions[d],
						    field(v, file_counters[c]
						                 .offset));
					}
				}
			}
		}
	}
	for (size_t c = 0; c < sizeof(file_gauges) / sizeof(file_gauges[0]);
	     c++) {
		family(out, file_gauges[c].name, "gauge", file_gauges[c].unit,
		       file_gauges[c].help);
		for (int i = 0; i < n; i++)
			for (int k = 0; k < p[i].nfc; k++)
				if (p[i].fc_label[k])
					fprintf(out,
					        "%s{%s,file=\"%s\"} %" PRIu64
					        "\n",
					        file_gauges[c].name,
					        p[i].labels, p[i].fc_label[k],
					        field(&p[i].fc[k],
					              file_gauges[c].offset));
	}
	family(out, "gpufile_file_counters_dropped", "counter", NULL,
	       "Files whose per-file counters were dropped to make room for "
	       "another file (the least recently used closed file first)");
	for (int i = 0; i < n; i++)
		fprintf(out,
		        "gpufile_file_counters_dropped_total{%s} %" PRIu64 "\n",
		        p[i].labels, p[i].s.file_counters_dropped);
	family(out, "gpufile_file_counters_untracked", "counter", NULL,
	       "Files opened while every per-file record was held by an open "
	       "handle: counted per path only");
	for (int i = 0; i < n; i++)
		fprintf(out,
		        "gpufile_file_counters_untracked_total{%s} %" PRIu64
		        "\n",
		        p[i].labels, p[i].s.file_counters_untracked);
}

int metrics_write(FILE *out, int pid)
{
	struct proc *procs;
	int n = read_procs(pid, &procs);

	if (n < 0)
		return n;
	write_process_info(out, procs, n);
	write_counters(out, procs, n);
	write_cufile_layer(out, procs, n);
	write_remote(out, procs, n);
	write_files(out, procs, n, 1);
	write_files(out, procs, n, 0);
	write_file_counters(out, procs, n);
	fputs("# EOF\n", out);
	for (int i = 0; i < n; i++)
		free_proc(&procs[i]);
	free(procs);
	return fflush(out) == 0 && !ferror(out) ? 0 : -EIO;
}

int metrics_print(const char *cmd, int pid)
{
	int rc = metrics_write(stdout, pid);

	if (rc == -EIO)
		return EXIT_RUNTIME; /* main() says why stdout failed */
	if (rc < 0)
		return msg_error(cmd, "%s",
		                 pid && rc != -ENOMEM ? gpufile_errmsg()
		                                      : strerror(-rc));
	return EXIT_OK;
}

/* ---- the exporter ---- */

#define SERVE_CLIENTS     64    /* served side by side; more wait in backlog */
#define SERVE_REQUEST_MAX 16384 /* a request's head, at most */

struct client {
	int fd;        /* -1: a free entry */
	char *in;      /* the request's head so far */
	size_t in_len; /* bytes in in (SERVE_REQUEST_MAX + 1 allocated) */
	char *out;     /* the whole answer, once the head has come */
	size_t out_len, out_off;
	double deadline; /* measure_now() after which it is dropped */
};

/* Splits addr into host and port (pointers into the copy *buf, freed by
 * the caller). Returns 0, or -EINVAL after a message naming what is
 * wrong. */
static int split_addr(const char *cmd, const char *addr, char **buf,
                      const char **host, const char **port)
{
	char *a = strdup(addr), *colon, *end;
	unsigned long v;

	*buf = a;
	if (!a)
		return msg_error(cmd, "out of memory"), -ENOMEM;
	if (a[0] == '[') {
		end = strchr(a, ']');
		if (!end || end[1] != ':') {
			msg_usage_error(cmd,
			                "--serve \"%s\": an IPv6 address is "
			                "written [ADDR]:PORT",
			                addr);
			return -EINVAL;
		}
		*end = '\0';
		*host = a + 1;
		*port = end + 2;
	} else if ((colon = strrchr(a, ':'))) {
		if (strchr(a, ':') != colon) {
			msg_usage_error(cmd,
			                "--serve \"%s\": an IPv6 address is "
			                "written in brackets, [ADDR]:PORT",
			                addr);
			return -EINVAL;
		}
		*colon = '\0';
		*host = a;
		*port = colon + 1;
	} else {
		*host = "";
		*port = a;
	}
	/* No host: the loopback address, not every interface. */
	if (!**host)
		*host = "127.0.0.1";
	errno = 0;
	v = strtoul(*port, &end, 10);
	if (!**port || *end || **port == '-' || **port == '+' || errno ||
	    v > 65535) {
		msg_usage_error(cmd,
		                "--serve \"%s\": the port \"%s\" is not a "
		                "number from 0 to 65535 (0: any free port)",
		                addr, *port);
		return -EINVAL;
	}
	return 0;
}

/* A listening socket for addr, or -1 after a message (*usage set when
 * the address itself is wrong). */
static int listen_on(const char *cmd, const char *addr, int *usage)
{
	struct addrinfo hints = {0}, *res = NULL;
	const char *host, *port;
	char *buf;
	int rc, fd = -1, err = 0;

	*usage = 1;
	if (split_addr(cmd, addr, &buf, &host, &port)) {
		free(buf);
		return -1;
	}
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc) {
		msg_usage_error(cmd,
		                "--serve \"%s\": \"%s\" is not an address "
		                "of this machine (%s)",
		                addr, host, gai_strerror(rc));
		free(buf);
		return -1;
	}
	*usage = 0;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
		int one = 1;

		fd = socket(ai->ai_family,
		            ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
		            ai->ai_protocol);
		if (fd < 0) {
			err = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
		    listen(fd, 128) != 0) {
			err = errno;
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0)
		msg_error(cmd,
		          "--serve \"%s\": cannot listen on %s port %s: %s",
		          addr, host, port, strerror(err));
	free(buf);
	return fd;
}

/* Prints the URL fd serves, with the port bound (port 0 took a free one),
 * and a warning when it is not a loopback address. */
static void announce(const char *cmd, int fd)
{
	struct sockaddr_storage sa;
	socklen_t len = sizeof(sa);
	char host[INET6_ADDRSTRLEN] = "?";
	int port = 0, loopback = 0, v6 = 0;

	if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0) {
		if (sa.ss_family == AF_INET) {
			struct sockaddr_in *in = (struct sockaddr_in *)&sa;

			inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
			port = ntohs(in->sin_port);
			loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
		} else if (sa.ss_family == AF_INET6) {
			struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&sa;

			inet_ntop(AF_INET6, &in6->sin6_addr, host,
			          sizeof(host));
			port = ntohs(in6->sin6_port);
			loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
			v6 = 1;
		}
	}
	if (!loopback)
		msg_warn(cmd,
		         "serving on %s, which other machines may reach: the "
		         "metrics name processes and files",
		         host);
	printf("serving OpenMetrics at http://%s%s%s:%d/metrics\n",
	       v6 ? "[" : "", host, v6 ? "]" : "", port);
	fflush(stdout);
}

static void drop(struct client *c)
{
	close(c->fd);
	free(c->in);
	free(c->out);
	*c = (struct client){.fd = -1};
}

/* The answer to the request head in c->in, into c->out. Returns 0 or
 * -ENOMEM. */
static int answer(struct client *c, int pid)
{
	const char *status = "200 OK",
	           *type = "application/openmetrics-text; version=1.0.0; "
	                   "charset=utf-8";
	char *body = NULL, *target, *sp;
	size_t body_len = 0;
	FILE *f;
	int head = 0, rc = 0;

	c->in[c->in_len] = '\0';
	sp = strchr(c->in, ' ');
	target = sp ? sp + 1 : NULL;
	sp = target ? strchr(target, ' ') : NULL;
	f = open_memstream(&body, &body_len);
	if (!f)
		return -ENOMEM;
	if (c->in_len > SERVE_REQUEST_MAX || !sp || sp == target) {
		status = c->in_len > SERVE_REQUEST_MAX
		             ? "431 Request Header Fields Too Large"
		             : "400 Bad Request";
		type = "text/plain; charset=utf-8";
		fputs("gpufile stats: GET /metrics\n", f);
	} else if (strncmp(c->in, "GET ", 4) && strncmp(c->in, "HEAD ", 5)) {
		status = "405 Method Not Allowed";
		type = "text/plain; charset=utf-8";
		fputs("gpufile stats: GET /metrics\n", f);
	} else {
		size_t len = (size_t)(sp - target);

		head = c->in[0] == 'H';
		if ((len == 8 || (len > 8 && target[8] == '?')) &&
		    memcmp(target, "/metrics", 8) == 0) {
			rc = metrics_write(f, pid);
		} else {
			status = "404 Not Found";
			type = "text/plain; charset=utf-8";
			fputs("gpufile stats: GET /metrics\n", f);
		}
	}
	if (fclose(f) != 0 || rc == -ENOMEM) {
		free(body);
		return -ENOMEM;
	}
	if (rc < 0) { /* a process that PID named is gone: say so */
		free(body);
		body = NULL;
		f = open_memstream(&body, &body_len);
		if (!f)
			return -ENOMEM;
		status = "503 Service Unavailable";
		type = "text/plain; charset=utf-8";
		fputs("gpufile stats: ", f);
		text_put(f, gpufile_errmsg());
		fputc('\n', f);
		if (fclose(f) != 0) {
			free(body);
			return -ENOMEM;
		}
	}
	f = open_memstream(&c->out, &c->out_len);
	if (!f) {
		free(body);
		return -ENOMEM;
	}
	fprintf(f,
	        "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
	        "%sConnection: close\r\n\r\n",
	        status, type, body_len,
	        strncmp(status, "405", 3) == 0 ? "Allow: GET, HEAD\r\n" : "");
	if (!head)
		fwrite(body, 1, body_len, f);
	free(body);
	if (fclose(f) != 0) {
		free(c->out);
		c->out = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* Reads what client c sent; once its request head is whole (or too long),
 * makes the answer. Returns 0 to go on, -1 to drop the client. */
static int client_read(struct client *c, int pid)
{
	ssize_t n = recv(c->fd, c->in + c->in_len,
	                 SERVE_REQUEST_MAX + 1 - c->in_len, 0);

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	if (n == 0)
		return -1; /* closed before its request was whole */
	c->in_len += (size_t)n;
	c->in[c->in_len] = '\0';
	if (!strstr(c->in, "\r\n\r\n") && !strstr(c->in, "\n\n") &&
	    c->in_len <= SERVE_REQUEST_MAX)
		return 0;
	return answer(c, pid) == 0 ? 0 : -1;
}

/* Sends what is left of the answer. Returns 0 to go on, 1 when all is
 * sent, -1 to drop the client. */
static int client_write(struct client *c)
{
	ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
	                 MSG_NOSIGNAL);

	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -1;
	c->out_off += (size_t)n;
	return c->out_off == c->out_len;
}

/* Accepts the clients waiting, as many as there are free entries.
 * Returns 0, or -errno when out of descriptors or memory (the listener
 * would stay readable: the caller waits before it tries again, instead of
 * spinning). */
static int accept_clients(int lfd, struct client *cl, double timeout)
{
	for (int i = 0; i < SERVE_CLIENTS; i++) {
		int fd;

		if (cl[i].fd >= 0)
			continue;
		fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return errno == EMFILE || errno == ENFILE ||
			               errno == ENOBUFS || errno == ENOMEM
			           ? -errno
			           : 0; /* EAGAIN, or the client already left */
		cl[i] = (struct client){.fd = fd,
		                        .in = malloc(SERVE_REQUEST_MAX + 2),
		                        .deadline = measure_now() + timeout};
		if (!cl[i].in)
			drop(&cl[i]);
	}
	return 0;
}

int metrics_serve(const char *cmd, int pid, const char *addr, double timeout)
{
	struct client cl[SERVE_CLIENTS];
	/* pfd[0] the listener, then the clients being served (which[k]
	 * names pfd[k]'s): only those, as poll() refuses more entries than
	 * RLIMIT_NOFILE allows descriptors (EINVAL). */
	struct pollfd pfd[SERVE_CLIENTS + 1];
	int which[SERVE_CLIENTS + 1];
	int usage, lfd = listen_on(cmd, addr, &usage);
	double accept_after = 0; /* after a failed accept: not before then */

	if (lfd < 0)
		return usage ? EXIT_USAGE : EXIT_RUNTIME;
	for (int i = 0; i < SERVE_CLIENTS; i++)
		cl[i] = (struct client){.fd = -1};
	announce(cmd, lfd);
	for (;;) {
		double now = measure_now(), next = -1;
		int n = 1, wait_ms;

		for (int i = 0; i < SERVE_CLIENTS; i++) {
			if (cl[i].fd < 0)
				continue;
			if (now >= cl[i].deadline) {
				drop(&cl[i]); /* too slow: never held up */
				continue;
			}
			which[n] = i;
			pfd[n++] = (struct pollfd){
			    .fd = cl[i].fd,
			    .events = cl[i].out ? POLLOUT : POLLIN};
			if (next < 0 || cl[i].deadline < next)
				next = cl[i].deadline;
		}
		/* At SERVE_CLIENTS, new clients wait in the backlog. */
		pfd[0] = (struct pollfd){
		    .fd = n <= SERVE_CLIENTS && now >= accept_after ? lfd : -1,
		    .events = POLLIN};
		if (now < accept_after && (next < 0 || accept_after < next))
			next = accept_after;
		wait_ms = next < 0 ? -1 : (int)((next - now) * 1000) + 1;
		if (poll(pfd, (nfds_t)n, wait_ms) < 0) {
			if (errno == EINTR)
				continue;
			msg_error(cmd, "poll: %s", strerror(errno));
			break;
		}
		for (int k = 1; k < n; k++) {
			struct client *c = &cl[which[k]];
			int rc = 0;

			if (!pfd[k].revents)
				continue;
			if (c->out)
				rc = client_write(c);
			else if (client_read(c, pid) < 0)
				rc = -1;
			if (rc != 0)
				drop(c);
		}
		if (pfd[0].revents) {
			int rc = accept_clients(lfd, cl, timeout);

			if (rc < 0) {
				msg_warn(cmd,
				         "cannot take a client: %s; trying "
				         "again in a second",
				         strerror(-rc));
				accept_after = measure_now() + 1;
			}
		}
	}
	for (int i = 0; i < SERVE_CLIENTS; i++)
		if (cl[i].fd >= 0)
			drop(&cl[i]);
	close(lfd);
	return EXIT_RUNTIME;
}
