/*
 * gpufile read FILE: reads a file (or a range of it) into GPU or host
 * memory through a bounded window, timed, and reports which data path
 * carried the bytes.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "gpufile.h"
#include "json.h"
#include "measure.h"
#include "msg.h"
#include "options.h"
#include "progress.h"
#include "run_settings.h"
#include "summary.h"
#include "target.h"
#include "text.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * The default window. A file larger than host or GPU memory cannot be
 * read into one buffer, so a read goes through a window read again and
 * again. 1 GiB is large enough that the extra calls cost nothing
 * measurable (at 25 GB/s one window takes 40 ms, against microseconds to
 * start a request, and it is hundreds of tasks of the default task_size,
 * so the worker pool stays full) and small enough to fit beside other
 * work on any GPU and host this runs on. Host windows are further capped
 * at half the memory the kernel reports available, so that the read
 * never pushes the machine into swap.
 */
#define DEFAULT_WINDOW (1ull << 30)
#define MIN_WINDOW     4096ull

static const char usage[] =
    "Usage: gpufile read FILE [--host | --device N] [--offset B] "
    "[--size B]\n"
    "                         [--window B] [--repeat K] [--json]\n"
    "                         [--no-progress]\n"
    "                         " RUN_SETTINGS_USAGE "\n"
    "\n"
    "Reads SIZE bytes of FILE at OFFSET into a fresh buffer, K times, and\n"
    "reports the time, the throughput (GB/s, 1 GB = 1e9 bytes) of the best\n"
    "and the mean repeat, and which data path carried the bytes. FILE may\n"
    "be an http://, https:// or s3://BUCKET/KEY URL (see gpufile(1),\n"
    "REMOTE OBJECTS). Each repeat's rate is its own bytes over its own\n"
    "time; a warning says when repeats read different amounts (the file\n"
    "changed during the run).\n"
    "\n"
    "The buffer is device memory of GPU 0 when a GPU is usable, else host\n"
    "memory (4096-byte aligned, touched before timing); the report says\n"
    "which and why. The worker pool and bounce buffers are started before\n"
    "timing (gpufile_warmup). A read larger than the window goes through\n"
    "it one window at a time, so files larger than memory can be read.\n"
    "\n"
    "  --host         read into host memory even when a GPU is usable\n"
    "  --device N     read into device memory of GPU N (error if unusable)\n"
    "  --offset B     file offset to start at (default 0)\n"
    "  --size B       bytes to read (default: to the end of the file); a\n"
    "                 size beyond the end is reported as a short read\n"
    "  --window B     largest buffer to read into (default 1 GiB, for host\n"
    "                 memory at most half of the available memory)\n"
    "  --repeat K     read K times (default 1)\n"
    "  --json         print one JSON object instead of text\n"
    "  --no-progress  no progress line (it is shown on stderr only when\n"
    "                 stderr is a terminal and the read is >= 64 "
    "MiB)\n" RUN_SETTINGS_HELP "  --help         print this help\n"
    "\n"
    "Sizes accept bytes (B) or a number with k, m, g, t, KiB, MiB, GiB,\n"
    "TiB, KB, MB, GB or TB (any case; all binary). Settings come from\n"
    "GPUFILE_* variables (see gpufile config); the options above set\n"
    "theirs over them (gpufile(1), RUN SETTINGS).\n"
    "Exit status: 0 ok (a short read included), 1 I/O or runtime error,\n"
    "2 usage error.\n";

struct read_options {
	const char *file;
	uint64_t offset, size, window, repeat;
	int have_size, have_window, want_host, want_device, json, quiet;
	struct run_settings settings;
};

struct read_result {
	int64_t file_size;
	uint64_t bytes;   /* read by the last repeat */
	uint64_t window;  /* buffer size used */
	uint64_t windows; /* pread calls per repeat */
	double best, mean, *seconds;
	uint64_t *bytes_each;       /* read by repeat i */
	uint64_t best_bytes, total; /* of the fastest repeat; of all */
	gpufile_stats_t before, after;
	gpufile_path_t device_path;
	char path_reason[512];
	const char *window_why;
};

static int parse(int argc, char **argv, struct read_options *o)
{
	const struct opt opts[] = {
	    {.name = "host", .kind = OPT_FLAG, .dest = &o->want_host},
	    {.name = "device", .kind = OPT_DEVICE, .dest = &o->want_device},
	    {.name = "offset",
	     .kind = OPT_SIZE,
	     .dest = &o->offset,
	     .max = INT64_MAX},
	    {.name = "size",
	     .kind = OPT_SIZE,
	     .dest = &o->size,
	     .given = &o->have_size,
	     .max = INT64_MAX},
	    {.name = "window",
	     .kind = OPT_SIZE,
	     .dest = &o->window,
	     .given = &o->have_window,
	     .min = MIN_WINDOW,
	     .max = SIZE_MAX / 2},
	    {.name = "repeat",
	     .kind = OPT_COUNT,
	     .dest = &o->repeat,
	     .min = 1,
	     .max = 1000000},
	    {.name = "json", .kind = OPT_FLAG, .dest = &o->json},
	    {.name = "no-progress", .kind = OPT_FLAG, .dest = &o->quiet},
	    RUN_SETTINGS_OPTS(&o->settings),
	};
	const struct opt_spec spec = {
	    "read", usage, opts, sizeof(opts) / sizeof(opts[0]), "FILE", 1, 1};
	int rc, first = opt_parse(&spec, argc, argv, &rc);

	if (first < 0)
		return rc;
	rc = target_check_options("read", o->want_host, o->want_device,
	                          &o->settings);
	if (rc)
		return rc;
	o->file = argv[first];
	return 0;
}

/* The window: what --window says, else DEFAULT_WINDOW capped for host
 * memory; never more than the read needs. */
static uint64_t choose_window(const struct read_options *o,
                              const struct target *t, uint64_t available,
                              const char **why)
{
	uint64_t w = o->window;

	*why = "--window given";
	if (!o->have_window) {
		long pages = sysconf(_SC_AVPHYS_PAGES);
		long page = sysconf(_SC_PAGESIZE);
		uint64_t half = pages > 0 && page > 0
		                    ? (uint64_t)pages * (uint64_t)page / 2
		                    : DEFAULT_WINDOW;

		w = DEFAULT_WINDOW;
		*why = "default";
		if (t->device < 0 && half < w) {
			w = half > MIN_WINDOW ? half & ~(MIN_WINDOW - 1)
			                      : MIN_WINDOW;
			*why = "default, capped at half the available memory";
		}
	}
	/* Past the end of the file nothing is read: a window larger than
	 * what is there would only be allocated and touched. */
	if (w > o->size)
		w = o->size;
	if (w > available)
		w = available;
	return w ? w : 1;
}

/* Reads len bytes at off into buf as gpufile_pread does. With a progress
 * line, as pieces of PROGRESS_STEP bytes submitted at once (the pool runs
 * their tasks back to back, as it would one request's) and waited for in
 * order, so that the line moves as each piece ends, base bytes before
 * them done. On error, *err is the message of the lowest piece that
 * failed (to free). */
static ssize_t read_window(gpufile_t *h, char *buf, size_t len, int64_t off,
                           struct progress *p, uint64_t base, char **err)
{
	const size_t step = PROGRESS_STEP;
	size_t npieces = len / step + (len % step != 0), submitted = 0;
	gpufile_future_t **f;
	ssize_t total = 0, rc = 0;
	int short_read = 0;

	*err = NULL;
	if (!p->on || npieces < 2 || !(f = calloc(npieces, sizeof(*f)))) {
		ssize_t n = gpufile_pread(h, buf, len, off);
		if (n < 0)
			*err = strdup(gpufile_errmsg());
		return n;
	}
	for (; submitted < npieces; submitted++) {
		size_t at = submitted * step;
		size_t n = len - at < step ? len - at : step;
		int sub = gpufile_pread_async(h, buf + at, n, off + (int64_t)at,
		                              &f[submitted]);
		if (sub) {
			rc = sub;
			*err = strdup(gpufile_errmsg());
			break;
		}
	}
	/* Every piece submitted is waited for: none may still write into
	 * buf when this returns. */
	for (size_t i = 0; i < submitted; i++) {
		ssize_t n = gpufile_future_wait(f[i]);
		size_t want = len - i * step < step ? len - i * step : step;

		if (n < 0 && rc >= 0) {
			free(*err);
			rc = n;
			*err = strdup(gpufile_errmsg());
		} else if (n >= 0 && rc >= 0 && !short_read) {
			total += n;
			short_read = (size_t)n < want;
			progress_update(p, base + (uint64_t)total);
		}
		gpufile_future_free(f[i]);
	}
	free(f);
	return rc < 0 ? rc : total;
}

/* Reads [offset, offset + size) once, a window at a time. Stops early
 * at the end of the file. Returns 0 or EXIT_RUNTIME. */
static int read_once(gpufile_t *h, const struct target *t,
                     const struct read_options *o, struct read_result *r,
                     struct progress *p, uint64_t base)
{
	uint64_t done = 0, calls = 0;
	int rc;

	do {
		size_t len =
		    (size_t)(o->size - done < r->window ? o->size - done
		                                        : r->window);
		char *err;
		ssize_t n =
		    read_window(h, t->buf, len, (int64_t)(o->offset + done), p,
		                base + done, &err);

		if (n < 0) {
			progress_end(p); /* the message on a line of its own */
			rc = msg_error("read", "%s",
			               err ? err : gpufile_strerror((int)n));
			free(err);
			return rc;
		}
		calls++;
		done += (uint64_t)n;
		progress_update(p, base + done);
		if ((size_t)n < len)
			break; /* the end of the file */
	} while (done < o->size);
	r->bytes = done;
	r->windows = calls;
	return 0;
}

/*
 * The best repeat is the one of the highest rate, each rate its own bytes
 * over its own time, and the mean rate all bytes over all time: where the
 * file changed between repeats, the last repeat's bytes over the fastest
 * repeat's time printed 53 GB/s for a file that shrank mid-run. Warns
 * when the repeats read different amounts.
 */
static void rate_repeats(const struct read_options *o, struct read_result *r)
{
	uint64_t i, best = 0, odd = 0;

	r->total = 0;
	for (i = 0; i < o->repeat; i++) {
		r->total += r->bytes_each[i];
		if (measure_gbps(r->bytes_each[i], r->seconds[i]) >
		    measure_gbps(r->bytes_each[best], r->seconds[best]))
			best = i;
		if (r->bytes_each[i] != r->bytes_each[0] && odd == 0)
			odd = i;
	}
	r->best = r->seconds[best];
	r->best_bytes = r->bytes_each[best];
	if (odd)
		msg_warn("read",
		         "the repeats read different amounts (repeat 1: "
		         "%" PRIu64 " bytes, repeat %" PRIu64 ": %" PRIu64
		         " bytes): the file changed during the run; each "
		         "repeat's rate is its own bytes over its own time",
		         r->bytes_each[0], odd + 1, r->bytes_each[odd]);
}

static int run_reads(gpufile_t *h, const struct target *t,
                     const struct read_options *o, struct read_result *r)
{
	/* What the repeats will read: the end of the file cuts --size. */
	uint64_t avail = (uint64_t)r->file_size - o->offset;
	uint64_t once = o->size < avail ? o->size : avail;
	uint64_t expected =
	    once > UINT64_MAX / o->repeat ? UINT64_MAX : once * o->repeat;
	uint64_t base = 0;
	struct progress p;
	double total = 0;

	GPUFILE_INIT(r->before);
	gpufile_stats_self(&r->before);
	progress_start(&p, "read", expected, !o->json && !o->quiet);
	for (uint64_t i = 0; i < o->repeat; i++) {
		double t0 = measure_now(), dt;

		if (read_once(h, t, o, r, &p, base))
			return EXIT_RUNTIME;
		dt = measure_now() - t0;
		base += r->bytes;
		r->seconds[i] = dt;
		r->bytes_each[i] = r->bytes;
		total += dt;
	}
	progress_end(&p);
	GPUFILE_INIT(r->after);
	gpufile_stats_self(&r->after);
	r->mean = total / (double)o->repeat;
	rate_repeats(o, r);
	return 0;
}

static void report_text(const struct read_options *o,
                        const struct read_result *r, const struct target *t)
{
	char human[32], target[32];

	printf("file:     ");
	text_put(stdout, o->file);
	printf(" (%" PRId64 " bytes)\n", r->file_size);
	printf("target:   %s: ", target_name(t, 0, target, sizeof(target)));
	text_put(stdout, t->reason);
	putchar('\n');
	printf("read:     %" PRIu64 " bytes (%s) at offset %" PRIu64
	       ", %" PRIu64 " time%s\n",
	       r->bytes, measure_human_bytes(r->bytes, human, sizeof(human)),
	       o->offset, o->repeat, o->repeat == 1 ? "" : "s");
	if (r->bytes < o->size)
		printf("short:    %" PRIu64 " bytes requested, %" PRIu64
		       " read: the file ends at %" PRId64 "\n",
		       o->size, r->bytes, r->file_size);
	if (r->window < o->size &&
	    r->window < (uint64_t)r->file_size - o->offset)
		printf("window:   %" PRIu64 " bytes (%s), %" PRIu64
		       " reads per repeat (%s)\n",
		       r->window,
		       measure_human_bytes(r->window, human, sizeof(human)),
		       r->windows, r->window_why);
	printf("best:     %.6f s  %.3f GB/s\n", r->best,
	       measure_gbps(r->best_bytes, r->best));
	printf("mean:     %.6f s  %.3f GB/s\n", r->mean,
	       measure_gbps(r->total, r->mean * (double)o->repeat));
	printf("paths (this command's reads, all repeats):\n");
	summary_print_paths(&r->before, &r->after, 0);
	printf("device buffers: ");
	text_put(stdout, r->path_reason);
	putchar('\n');
	summary_print_settings_line();
}

static void report_json(const struct read_options *o,
                        const struct read_result *r, const struct target *t)
{
	struct json j;
	char target[32];

	json_init(&j, stdout);
	json_object_begin(&j, NULL);
	json_key_str(&j, "file", o->file);
	json_key_i64(&j, "file_size", r->file_size);
	json_key_u64(&j, "offset", o->offset);
	json_key_u64(&j, "requested", o->size);
	json_key_u64(&j, "bytes", r->bytes);
	json_key_bool(&j, "short", r->bytes < o->size);
	json_key_u64(&j, "window", r->window);
	json_key_u64(&j, "windows", r->windows);
	json_key_double(&j, "seconds", r->best);
	json_key_double(&j, "gbps", measure_gbps(r->best_bytes, r->best));
	json_key_double(&j, "seconds_mean", r->mean);
	json_key_double(&j, "gbps_mean",
	                measure_gbps(r->total, r->mean * (double)o->repeat));
	json_key_u64(&j, "repeat", o->repeat);
	json_array_begin(&j, "seconds_each");
	for (uint64_t i = 0; i < o->repeat; i++)
		json_key_double(&j, NULL, r->seconds[i]);
	json_array_end(&j);
	json_array_begin(&j, "bytes_each");
	for (uint64_t i = 0; i < o->repeat; i++)
		json_key_u64(&j, NULL, r->bytes_each[i]);
	json_array_end(&j);
	json_array_begin(&j, "gbps_each");
	for (uint64_t i = 0; i < o->repeat; i++)
		json_key_double(&j, NULL,
		                measure_gbps(r->bytes_each[i], r->seconds[i]));
	json_array_end(&j);
	json_key_str(&j, "target", target_name(t, 1, target, sizeof(target)));
	json_key_str(&j, "target_reason", t->reason);
	summary_json_paths(&j, "paths", &r->before, &r->after, 0);
	json_object_begin(&j, "path_info");
	json_key_str(&j, "device_path", gpufile_path_name(r->device_path));
	json_key_str(&j, "reason", r->path_reason);
	json_object_end(&j);
	summary_json_settings(&j, "settings");
	json_key_str(&j, "version", gpufile_version());
	json_key_str(&j, "features", gpufile_features());
	json_object_end(&j);
}

/* Checks the range against the file and sets the size when not given.
 * Returns 0 or EXIT_RUNTIME. */
static int fit_range(struct read_options *o, int64_t file_size)
{
	if (o->offset > (uint64_t)file_size)
		return msg_error("read",
		                 "%s: --offset %" PRIu64
		                 " is past the end of the file (%" PRId64
		                 " bytes)",
		                 o->file, o->offset, file_size);
	if (!o->have_size)
		o->size = (uint64_t)file_size - o->offset;
	/* No check that offset + size fits in a file offset: the reads stop
	 * at the end of the file (a short read, as --help says), so none
	 * reaches past it. --offset 5000 --size 2^63-1 used to be refused
	 * as "beyond the largest file offset". */
	return 0;
}

/* Everything between opening the file and the report. */
static int read_file(gpufile_t *h, struct read_options *o,
                     struct read_result *r, struct target *t)
{
	r->file_size = gpufile_size(h);
	if (r->file_size < 0)
		return msg_error("read", "%s", gpufile_errmsg());
	if (fit_range(o, r->file_size))
		return EXIT_RUNTIME;
	r->seconds = calloc(o->repeat, sizeof(*r->seconds));
	r->bytes_each = calloc(o->repeat, sizeof(*r->bytes_each));
	if (!r->seconds || !r->bytes_each)
		return msg_error("read", "out of memory");
	if (target_choose("read", o->want_host, o->want_device, t))
		return EXIT_RUNTIME;
	r->window = choose_window(o, t, (uint64_t)r->file_size - o->offset,
	                          &r->window_why);
	if (target_alloc("read", t, (size_t)r->window,
	                 "the read window (a smaller --window needs less)"))
		return EXIT_RUNTIME;
	if (gpufile_warmup())
		return msg_error("read", "warmup: %s", gpufile_errmsg());
	if (run_reads(h, t, o, r))
		return EXIT_RUNTIME;
	if (target_path_info("read", t, h, &r->device_path, r->path_reason,
	                     sizeof(r->path_reason)))
		return EXIT_RUNTIME;
	return 0;
}

int cmd_read(int argc, char **argv)
{
	struct read_options o = {.repeat = 1, .want_device = -1};
	struct read_result r = {0};
	struct target t = {.device = -1};
	gpufile_t *h = NULL;
	int rc = parse(argc, argv, &o);

	if (rc || !o.file)
		return rc;
	rc = run_settings_use("read", &o.settings);
	if (rc)
		return rc;
	if (gpufile_open(&h, o.file, "r"))
		return msg_error("read", "%s", gpufile_errmsg());
	/* From here the file is named as the library shows it: a URL without
	 * its user information and query (a password, a signature). */
	o.file = gpufile_filename(h);
	rc = read_file(h, &o, &r, &t);
	if (rc == 0 && o.json)
		report_json(&o, &r, &t);
	else if (rc == 0)
		report_text(&o, &r, &t);
	target_free(&t);
	free(r.seconds);
	free(r.bytes_each);
	if (gpufile_close(h) && rc == EXIT_OK)
		rc = msg_error("read", "%s", gpufile_errmsg());
	return rc;
}
