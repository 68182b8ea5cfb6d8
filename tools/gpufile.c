/*
 * The gpufile command-line tool: a table of subcommands, and the read,
 * write and config subcommands. It uses only the public API (gpufile.h),
 * so everything it shows a user can also be had from the library.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "gpufile.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define ALIGNMENT 4096

static const struct command {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} commands[] = {
    {"read", cmd_read, "read a file into GPU or host memory, timed"},
    {"write", cmd_write, "create a test file of a given size"},
    {"config", cmd_config, "print every setting, its value and source"},
    {"stats", cmd_stats, "print the path counters of a running process"},
    {"check", cmd_check, "check the platform and predict a file's path"},
    {"explain", cmd_explain, "print the split plan of a request"},
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

/* Counters of one direction, after - before, summed over every path. */
static uint64_t path_delta(const gpufile_stats_t *before,
                           const gpufile_stats_t *after, int path, int dir,
                           int field)
{
	const gpufile_counter_t *a = &after->path[path][dir];
	const gpufile_counter_t *b = &before->path[path][dir];

	switch (field) {
	case 0:
		return a->ops - b->ops;
	case 1:
		return a->tasks - b->tasks;
	case 2:
		return a->bytes - b->bytes;
	default:
		return a->errors - b->errors;
	}
}

static void print_paths(const gpufile_stats_t *before,
                        const gpufile_stats_t *after, int dir)
{
	int shown = 0;

	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		uint64_t ops = path_delta(before, after, p, dir, 0);

		if (!ops)
			continue;
		printf("  %-8s %" PRIu64 " ops, %" PRIu64 " tasks, %" PRIu64
		       " bytes, %" PRIu64 " errors\n",
		       gpufile_path_name((gpufile_path_t)p), ops,
		       path_delta(before, after, p, dir, 1),
		       path_delta(before, after, p, dir, 2),
		       path_delta(before, after, p, dir, 3));
		shown = 1;
	}
	if (!shown)
		printf("  (no requests)\n");
}

/* Prints the settings that shape a request's split, in one line. */
static void print_settings_line(void)
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

/* ------------------------------------------------------------------ */
/* read                                                               */
/* ------------------------------------------------------------------ */

static const char read_usage[] =
    "Usage: gpufile read FILE [--host | --device N] [--offset B] "
    "[--size B]\n"
    "                         [--repeat K] [--json]\n"
    "\n"
    "Reads SIZE bytes of FILE at OFFSET into a fresh buffer, K times, and\n"
    "reports the time, the throughput (GB/s, 1 GB = 1e9 bytes) of the best\n"
    "and the mean repeat, and which data path carried the bytes.\n"
    "\n"
    "The buffer is device memory of GPU 0 when a GPU is usable, else host\n"
    "memory (4096-byte aligned, touched before timing); the report says\n"
    "which and why. The worker pool and bounce buffers are started before\n"
    "timing (gpufile_warmup).\n"
    "\n"
    "  --host         read into host memory even when a GPU is usable\n"
    "  --device N     read into device memory of GPU N (error if unusable)\n"
    "  --offset B     file offset to start at (default 0)\n"
    "  --size B       bytes to read (default: to the end of the file)\n"
    "  --repeat K     read K times (default 1)\n"
    "  --json         print one JSON object instead of text\n"
    "  --help         print this help\n"
    "\n"
    "Sizes accept bytes or a number with k, m, g (also KiB, MiB, GiB or\n"
    "KB, MB, GB; all binary). Settings come from GPUFILE_* variables (see\n"
    "gpufile config).\n"
    "Exit status: 0 ok, 1 I/O or runtime error, 2 usage error.\n";

struct read_target {
	int device; /* -1: host memory */
	char reason[512];
	void *buf;
};

/* Picks the buffer's memory as the options ask, and says why. */
static int choose_target(const char *cmd, int want_host, int want_device,
                         struct read_target *t)
{
	int n;

	t->device = -1;
	if (want_host) {
		snprintf(t->reason, sizeof(t->reason), "--host given");
		return 0;
	}
	n = gpufile_cuda_device_count();
	if (want_device >= 0) {
		if (n < 0)
			return util_error(cmd, "--device %d: no usable GPU: %s",
			                  want_device, gpufile_errmsg());
		if (want_device >= n)
			return util_error(
			    cmd, "--device %d: no such GPU (%d usable)",
			    want_device, n);
		t->device = want_device;
		snprintf(t->reason, sizeof(t->reason), "--device %d given",
		         want_device);
		return 0;
	}
	if (n > 0) {
		t->device = 0;
		snprintf(t->reason, sizeof(t->reason),
		         "%d usable GPU%s found; --host uses host memory", n,
		         n == 1 ? "" : "s");
		return 0;
	}
	snprintf(t->reason, sizeof(t->reason), "no usable GPU: %s",
	         gpufile_errmsg()[0] ? gpufile_errmsg() : gpufile_strerror(n));
	return 0;
}

static int alloc_target(const char *cmd, struct read_target *t, size_t size)
{
	size_t len = size ? size : 1;
	int rc;

	if (t->device >= 0) {
		rc = gpufile_device_alloc(t->device, len, &t->buf);
		if (rc)
			return util_error(cmd,
			                  "allocating %zu bytes on GPU %d: %s",
			                  len, t->device, gpufile_errmsg());
		return 0;
	}
	rc = posix_memalign(&t->buf, ALIGNMENT, len);
	if (rc) {
		t->buf = NULL;
		return util_error(cmd,
		                  "allocating %zu bytes of host memory: %s",
		                  len, strerror(rc));
	}
	/* Fault the pages in now, so that the first repeat does not time
	 * the kernel zeroing them. */
	memset(t->buf, 0, len);
	return 0;
}

static void free_target(struct read_target *t)
{
	if (!t->buf)
		return;
	if (t->device >= 0)
		gpufile_device_free(t->buf);
	else
		free(t->buf);
	t->buf = NULL;
}

struct read_result {
	const char *file;
	int64_t file_size;
	uint64_t offset, size, bytes, repeat;
	double best, mean, *seconds;
	gpufile_stats_t before, after;
	gpufile_path_t device_path;
	char path_reason[512];
};

static void read_report_text(const struct read_result *r,
                             const struct read_target *t)
{
	char human[32];
	char target[32];

	if (t->device >= 0)
		snprintf(target, sizeof(target), "GPU %d memory", t->device);
	else
		snprintf(target, sizeof(target), "host memory");
	printf("file:     %s (%" PRId64 " bytes)\n", r->file, r->file_size);
	printf("target:   %s: %s\n", target, t->reason);
	printf("read:     %" PRIu64 " bytes (%s) at offset %" PRIu64
	       ", %" PRIu64 " time%s\n",
	       r->bytes, util_human_bytes(r->bytes, human, sizeof(human)),
	       r->offset, r->repeat, r->repeat == 1 ? "" : "s");
	printf("best:     %.6f s  %.3f GB/s\n", r->best,
	       util_gbps(r->bytes, r->best));
	printf("mean:     %.6f s  %.3f GB/s\n", r->mean,
	       util_gbps(r->bytes, r->mean));
	printf("paths (this command's reads, all repeats):\n");
	print_paths(&r->before, &r->after, 0);
	printf("device buffers: %s\n", r->path_reason);
	print_settings_line();
}

static void read_report_json(const struct read_result *r,
                             const struct read_target *t)
{
	struct json j;
	char target[32];

	if (t->device >= 0)
		snprintf(target, sizeof(target), "device:%d", t->device);
	else
		snprintf(target, sizeof(target), "host");
	json_init(&j, stdout);
	json_object_begin(&j, NULL);
	json_key_str(&j, "file", r->file);
	json_key_i64(&j, "file_size", r->file_size);
	json_key_u64(&j, "offset", r->offset);
	json_key_u64(&j, "bytes", r->bytes);
	json_key_double(&j, "seconds", r->best);
	json_key_double(&j, "gbps", util_gbps(r->bytes, r->best));
	json_key_double(&j, "seconds_mean", r->mean);
	json_key_double(&j, "gbps_mean", util_gbps(r->bytes, r->mean));
	json_key_u64(&j, "repeat", r->repeat);
	json_array_begin(&j, "seconds_each");
	for (uint64_t i = 0; i < r->repeat; i++)
		json_key_double(&j, NULL, r->seconds[i]);
	json_array_end(&j);
	json_key_str(&j, "target", target);
	json_key_str(&j, "target_reason", t->reason);
	util_json_paths(&j, "paths", &r->before, &r->after, 0);
	json_object_begin(&j, "path_info");
	json_key_str(&j, "device_path", gpufile_path_name(r->device_path));
	json_key_str(&j, "reason", r->path_reason);
	json_object_end(&j);
	util_json_settings(&j, "settings");
	json_key_str(&j, "version", gpufile_version());
	json_key_str(&j, "features", gpufile_features());
	json_object_end(&j);
}

static int run_reads(const char *cmd, gpufile_t *h, struct read_target *t,
                     struct read_result *r)
{
	double total = 0;

	gpufile_stats_self(&r->before);
	for (uint64_t i = 0; i < r->repeat; i++) {
		double t0 = util_now();
		ssize_t n =
		    gpufile_pread(h, t->buf, r->size, (int64_t)r->offset);
		double dt = util_now() - t0;

		if (n < 0)
			return util_error(cmd, "%s", gpufile_errmsg());
		if (i == 0 || dt < r->best)
			r->best = dt;
		r->seconds[i] = dt;
		r->bytes = (uint64_t)n;
		total += dt;
	}
	gpufile_stats_self(&r->after);
	r->mean = total / (double)r->repeat;
	return 0;
}

int cmd_read(int argc, char **argv)
{
	static const char *const cmd = "read";
	static const struct option longopts[] = {
	    {"host", no_argument, NULL, 'H'},
	    {"device", required_argument, NULL, 'd'},
	    {"offset", required_argument, NULL, 'o'},
	    {"size", required_argument, NULL, 's'},
	    {"repeat", required_argument, NULL, 'r'},
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct read_result r = {.repeat = 1};
	struct read_target t = {.device = -1};
	int want_host = 0, want_device = -1, json = 0, have_size = 0;
	gpufile_t *h = NULL;
	uint64_t v;
	int c, rc;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'H':
			want_host = 1;
			break;
		case 'd':
			rc = util_count_arg(cmd, "--device", optarg, 0, 1023,
			                    &v);
			if (rc)
				return rc;
			want_device = (int)v;
			break;
		case 'o':
			rc = util_size_arg(cmd, "--offset", optarg, &r.offset);
			if (rc)
				return rc;
			if (r.offset > INT64_MAX)
				return util_usage_error(
				    cmd, "--offset \"%s\": too large", optarg);
			break;
		case 's':
			rc = util_size_arg(cmd, "--size", optarg, &r.size);
			if (rc)
				return rc;
			have_size = 1;
			break;
		case 'r':
			rc = util_count_arg(cmd, "--repeat", optarg, 1, 1000000,
			                    &r.repeat);
			if (rc)
				return rc;
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			fputs(read_usage, stdout);
			return EXIT_OK;
		default:
			return util_getopt_error(cmd, c, argv);
		}
	}
	if (optind >= argc)
		return util_usage_error(cmd, "no FILE given");
	if (optind + 1 < argc)
		return util_usage_error(cmd, "one FILE only (got \"%s\" too)",
		                        argv[optind + 1]);
	if (want_host && want_device >= 0)
		return util_usage_error(cmd, "--host and --device exclude "
		                             "each other");
	r.file = argv[optind];

	if (gpufile_config_check())
		return util_error(cmd, "%s", gpufile_errmsg());
	if (gpufile_open(&h, r.file, "r"))
		return util_error(cmd, "%s", gpufile_errmsg());
	rc = EXIT_RUNTIME;
	r.file_size = gpufile_size(h);
	if (r.file_size < 0) {
		util_error(cmd, "%s", gpufile_errmsg());
		goto out;
	}
	if (r.offset > (uint64_t)r.file_size) {
		util_error(cmd,
		           "%s: --offset %" PRIu64
		           " is past the end of the file (%" PRId64 " bytes)",
		           r.file, r.offset, r.file_size);
		goto out;
	}
	if (!have_size)
		r.size = (uint64_t)r.file_size - r.offset;
	if (r.size > SIZE_MAX / 2) {
		util_error(cmd, "--size %" PRIu64 ": too large", r.size);
		goto out;
	}
	r.seconds = calloc(r.repeat, sizeof(*r.seconds));
	if (!r.seconds) {
		util_error(cmd, "out of memory");
		goto out;
	}
	if (choose_target(cmd, want_host, want_device, &t) ||
	    alloc_target(cmd, &t, (size_t)r.size))
		goto out;
	if (gpufile_warmup()) {
		util_error(cmd, "warmup: %s", gpufile_errmsg());
		goto out;
	}
	if (run_reads(cmd, h, &t, &r))
		goto out;
	if (gpufile_path_info(h, &r.device_path, r.path_reason,
	                      sizeof(r.path_reason))) {
		util_error(cmd, "%s", gpufile_errmsg());
		goto out;
	}
	if (json)
		read_report_json(&r, &t);
	else
		read_report_text(&r, &t);
	rc = EXIT_OK;
out:
	free_target(&t);
	free(r.seconds);
	if (gpufile_close(h) && rc == EXIT_OK)
		rc = util_error(cmd, "%s", gpufile_errmsg());
	return rc;
}

/* ------------------------------------------------------------------ */
/* write                                                              */
/* ------------------------------------------------------------------ */

static const char write_usage[] =
    "Usage: gpufile write FILE --size B [--pattern random|zero|sequence]\n"
    "                          [--seed N] [--chunk B] [--direct]\n"
    "                          [--host | --device N] [--json]\n"
    "\n"
    "Creates (or truncates) FILE and writes SIZE bytes to it with\n"
    "gpufile_pwrite, then flushes it to storage (gpufile_sync): a test\n"
    "file, like `dd if=/dev/urandom of=FILE bs=... oflag=direct; sync`.\n"
    "The data are made in host memory a chunk at a time and, when a GPU is\n"
    "usable, copied to device memory and written from there (through\n"
    "gpufile's device path); the next chunk is made while the previous one\n"
    "is written, so memory use stays at two chunks.\n"
    "\n"
    "  --size B       bytes to write (required)\n"
    "  --pattern P    random (default): xorshift64* bytes, seeded from the\n"
    "                 time and process id unless --seed is given;\n"
    "                 zero: all zero bytes;\n"
    "                 sequence: the byte at file offset i is i mod 251\n"
    "                 (a prime, so misplaced pages or chunks show)\n"
    "  --seed N       seed for --pattern random (same seed and chunk,\n"
    "                 same file)\n"
    "  --chunk B      bytes per write request (default 64 MiB)\n"
    "  --direct       write with O_DIRECT (sets direct_io=on)\n"
    "  --host         write from host memory even when a GPU is usable\n"
    "  --device N     write from device memory of GPU N\n"
    "  --json         print one JSON object instead of text\n"
    "  --help         print this help\n"
    "\n"
    "The time reported covers generating, writing and syncing.\n"
    "Exit status: 0 ok, 1 I/O or runtime error, 2 usage error.\n";

enum pattern { PATTERN_RANDOM, PATTERN_ZERO, PATTERN_SEQUENCE };
static const char *const pattern_names[] = {"random", "zero", "sequence"};

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Fills buf (len bytes, 8-byte aligned) with the data that belong at file
 * offset off. Random data depend only on the seed and the offset, so a
 * chunk can be regenerated to verify a file. */
static void fill_chunk(enum pattern pattern, uint64_t seed, char *buf,
                       size_t len, uint64_t off)
{
	switch (pattern) {
	case PATTERN_ZERO:
		memset(buf, 0, len);
		break;
	case PATTERN_SEQUENCE: {
		size_t period = 251, done;

		for (size_t i = 0; i < period && i < len; i++)
			buf[i] = (char)((off + i) % period);
		/* buf[0, done) repeats every 251 bytes and done is a multiple
		 * of 251, so appending a copy of it keeps the sequence. */
		for (done = period; done < len; done *= 2)
			memcpy(buf + done, buf,
			       len - done < done ? len - done : done);
		break;
	}
	default: {
		uint64_t x = splitmix64(seed ^ splitmix64(off)) | 1;
		size_t words = len / 8, i;

		for (i = 0; i < words; i++) {
			uint64_t v;

			x ^= x >> 12;
			x ^= x << 25;
			x ^= x >> 27;
			v = x * 0x2545f4914f6cdd1dull;
			memcpy(buf + i * 8, &v, 8);
		}
		for (i *= 8; i < len; i++)
			buf[i] = (char)splitmix64(x + i);
		break;
	}
	}
}

struct write_result {
	const char *file;
	uint64_t size, chunk, seed;
	enum pattern pattern;
	int direct;
	struct read_target target; /* where the written bytes come from */
	char *dev[2];              /* device chunks, or NULL */
	double seconds, fill_seconds, sync_seconds;
	gpufile_stats_t before, after;
	gpufile_path_t device_path;
	char path_reason[512];
};

/* Writes r->size bytes in chunks, filling one buffer while the other is
 * being written. */
static int write_chunks(const char *cmd, gpufile_t *h, char *bufs[2],
                        struct write_result *r)
{
	gpufile_future_t *pending = NULL;
	uint64_t off = 0;
	int which = 0, rc = 0;

	while (off < r->size) {
		size_t len = (size_t)(r->size - off < r->chunk ? r->size - off
		                                               : r->chunk);
		double t0 = util_now();

		fill_chunk(r->pattern, r->seed, bufs[which], len, off);
		/* The previous write from dev[which] was waited for one
		 * round ago. */
		if (r->dev[which] &&
		    gpufile_memcpy(r->dev[which], bufs[which], len))
			return util_error(cmd, "copying a chunk to GPU %d: %s",
			                  r->target.device, gpufile_errmsg());
		r->fill_seconds += util_now() - t0;
		if (pending) {
			ssize_t n = gpufile_future_wait(pending);

			gpufile_future_free(pending);
			pending = NULL;
			if (n < 0)
				return util_error(cmd, "%s", gpufile_errmsg());
		}
		if (gpufile_pwrite_async(
		        h, r->dev[which] ? r->dev[which] : bufs[which], len,
		        (int64_t)off, &pending))
			return util_error(cmd, "%s", gpufile_errmsg());
		off += len;
		which ^= 1;
	}
	if (pending) {
		ssize_t n = gpufile_future_wait(pending);

		gpufile_future_free(pending);
		if (n < 0)
			rc = util_error(cmd, "%s", gpufile_errmsg());
	}
	return rc;
}

static void write_report(const struct write_result *r, int json)
{
	char human[32];

	if (json) {
		struct json j;

		json_init(&j, stdout);
		json_object_begin(&j, NULL);
		json_key_str(&j, "file", r->file);
		json_key_u64(&j, "bytes", r->size);
		json_key_double(&j, "seconds", r->seconds);
		json_key_double(&j, "gbps", util_gbps(r->size, r->seconds));
		json_key_double(&j, "fill_seconds", r->fill_seconds);
		json_key_double(&j, "sync_seconds", r->sync_seconds);
		json_key_str(&j, "pattern", pattern_names[r->pattern]);
		if (r->pattern == PATTERN_RANDOM)
			json_key_u64(&j, "seed", r->seed);
		json_key_u64(&j, "chunk", r->chunk);
		json_key_bool(&j, "direct", r->direct);
		if (r->target.device >= 0) {
			char t[32];
			snprintf(t, sizeof(t), "device:%d", r->target.device);
			json_key_str(&j, "source", t);
		} else {
			json_key_str(&j, "source", "host");
		}
		json_key_str(&j, "source_reason", r->target.reason);
		util_json_paths(&j, "paths", &r->before, &r->after, 1);
		json_object_begin(&j, "path_info");
		json_key_str(&j, "device_path",
		             gpufile_path_name(r->device_path));
		json_key_str(&j, "reason", r->path_reason);
		json_object_end(&j);
		util_json_settings(&j, "settings");
		json_key_str(&j, "version", gpufile_version());
		json_object_end(&j);
		return;
	}
	printf("file:     %s\n", r->file);
	if (r->target.device >= 0)
		printf("source:   device memory of GPU %d (%s)\n",
		       r->target.device, r->target.reason);
	else
		printf("source:   host memory (%s)\n", r->target.reason);
	printf("wrote:    %" PRIu64 " bytes (%s), pattern %s", r->size,
	       util_human_bytes(r->size, human, sizeof(human)),
	       pattern_names[r->pattern]);
	if (r->pattern == PATTERN_RANDOM)
		printf(" (seed %" PRIu64 ")", r->seed);
	printf(", %s, chunks of %" PRIu64 " bytes\n",
	       r->direct ? "O_DIRECT requested" : "buffered", r->chunk);
	printf("time:     %.6f s  %.3f GB/s (generating %.3f s, sync %.3f s)\n",
	       r->seconds, util_gbps(r->size, r->seconds), r->fill_seconds,
	       r->sync_seconds);
	printf("paths (this command's writes):\n");
	print_paths(&r->before, &r->after, 1);
	printf("device buffers: %s\n", r->path_reason);
	print_settings_line();
}

static int parse_pattern(const char *text, enum pattern *out)
{
	for (size_t i = 0; i < sizeof(pattern_names) / sizeof(*pattern_names);
	     i++) {
		if (strcasecmp(text, pattern_names[i]) == 0) {
			*out = (enum pattern)i;
			return 0;
		}
	}
	return util_usage_error("write",
	                        "--pattern \"%s\": use random, zero or "
	                        "sequence",
	                        text);
}

int cmd_write(int argc, char **argv)
{
	static const char *const cmd = "write";
	static const struct option longopts[] = {
	    {"size", required_argument, NULL, 's'},
	    {"pattern", required_argument, NULL, 'p'},
	    {"seed", required_argument, NULL, 'S'},
	    {"chunk", required_argument, NULL, 'c'},
	    {"direct", no_argument, NULL, 'D'},
	    {"host", no_argument, NULL, 'H'},
	    {"device", required_argument, NULL, 'd'},
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	struct write_result r = {.chunk = 64u << 20};
	char *bufs[2] = {NULL, NULL};
	int have_size = 0, have_seed = 0, json = 0;
	int want_host = 0, want_device = -1;
	uint64_t devno;
	gpufile_t *h = NULL;
	double t0;
	int c, rc;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			rc = util_size_arg(cmd, "--size", optarg, &r.size);
			if (rc)
				return rc;
			if (r.size > INT64_MAX)
				return util_usage_error(
				    cmd, "--size \"%s\": too large", optarg);
			have_size = 1;
			break;
		case 'p':
			rc = parse_pattern(optarg, &r.pattern);
			if (rc)
				return rc;
			break;
		case 'S':
			rc = util_count_arg(cmd, "--seed", optarg, 0,
			                    UINT64_MAX, &r.seed);
			if (rc)
				return rc;
			have_seed = 1;
			break;
		case 'c':
			rc = util_size_arg(cmd, "--chunk", optarg, &r.chunk);
			if (rc)
				return rc;
			if (r.chunk < 4096 || r.chunk > (1ull << 30))
				return util_usage_error(
				    cmd, "--chunk \"%s\": use 4 KiB to 1 GiB",
				    optarg);
			break;
		case 'D':
			r.direct = 1;
			break;
		case 'H':
			want_host = 1;
			break;
		case 'd':
			rc = util_count_arg(cmd, "--device", optarg, 0, 1023,
			                    &devno);
			if (rc)
				return rc;
			want_device = (int)devno;
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			fputs(write_usage, stdout);
			return EXIT_OK;
		default:
			return util_getopt_error(cmd, c, argv);
		}
	}
	if (optind >= argc)
		return util_usage_error(cmd, "no FILE given");
	if (optind + 1 < argc)
		return util_usage_error(cmd, "one FILE only (got \"%s\" too)",
		                        argv[optind + 1]);
	if (!have_size)
		return util_usage_error(cmd, "--size is required");
	if (want_host && want_device >= 0)
		return util_usage_error(cmd, "--host and --device exclude "
		                             "each other");
	r.file = argv[optind];
	if (!have_seed)
		r.seed = splitmix64((uint64_t)time(NULL) ^
		                    ((uint64_t)getpid() << 32));
	if (r.chunk > r.size && r.size > 0)
		r.chunk = (r.size + ALIGNMENT - 1) & ~(uint64_t)(ALIGNMENT - 1);

	if (gpufile_config_check())
		return util_error(cmd, "%s", gpufile_errmsg());
	if (r.direct && gpufile_config_set("direct_io", "on"))
		return util_error(cmd, "%s", gpufile_errmsg());
	for (int i = 0; i < 2; i++) {
		void *p;

		if (posix_memalign(&p, ALIGNMENT, (size_t)r.chunk)) {
			rc = util_error(cmd,
			                "allocating 2 x %" PRIu64
			                " bytes of host memory failed",
			                r.chunk);
			goto out;
		}
		bufs[i] = p;
	}
	rc = choose_target(cmd, want_host, want_device, &r.target);
	if (rc)
		goto out;
	for (int i = 0; i < 2 && r.target.device >= 0; i++) {
		void *p;

		if (gpufile_device_alloc(r.target.device, (size_t)r.chunk,
		                         &p)) {
			rc = util_error(
			    cmd, "allocating %" PRIu64 " bytes on GPU %d: %s",
			    r.chunk, r.target.device, gpufile_errmsg());
			goto out;
		}
		r.dev[i] = p;
	}
	if (gpufile_open(&h, r.file, "w")) {
		rc = util_error(cmd, "%s", gpufile_errmsg());
		goto out;
	}
	if (gpufile_warmup()) {
		rc = util_error(cmd, "warmup: %s", gpufile_errmsg());
		goto out;
	}
	gpufile_stats_self(&r.before);
	t0 = util_now();
	rc = write_chunks(cmd, h, bufs, &r);
	if (rc)
		goto out;
	r.sync_seconds = util_now();
	if (gpufile_sync(h)) {
		rc = util_error(cmd, "%s", gpufile_errmsg());
		goto out;
	}
	r.sync_seconds = util_now() - r.sync_seconds;
	r.seconds = util_now() - t0;
	gpufile_stats_self(&r.after);
	if (gpufile_path_info(h, &r.device_path, r.path_reason,
	                      sizeof(r.path_reason))) {
		rc = util_error(cmd, "%s", gpufile_errmsg());
		goto out;
	}
	rc = gpufile_close(h);
	h = NULL;
	if (rc) {
		rc = util_error(cmd, "%s", gpufile_errmsg());
		goto out;
	}
	write_report(&r, json);
out:
	gpufile_close(h);
	free(bufs[0]);
	free(bufs[1]);
	gpufile_device_free(r.dev[0]);
	gpufile_device_free(r.dev[1]);
	return rc;
}

/* ------------------------------------------------------------------ */
/* config                                                             */
/* ------------------------------------------------------------------ */

static const char config_usage[] =
    "Usage: gpufile config [--json]\n"
    "\n"
    "Prints every setting: its effective value (sizes in bytes), where the\n"
    "value came from (default, environment GPUFILE_<NAME>, KvikIO's\n"
    "KVIKIO_<NAME>, or a setter) and what it means. A GPUFILE_ variable\n"
    "wins over its KVIKIO_ twin.\n"
    "\n"
    "  --json         print one JSON object instead of text\n"
    "  --help         print this help\n"
    "\n"
    "Exit status: 0 ok, 1 when a variable holds a bad value (the message\n"
    "names it), 2 usage error.\n";

static int config_text(void)
{
	int bad = 0;

	printf("%-20s %-12s %-34s %s\n", "SETTING", "VALUE", "SOURCE",
	       "MEANING");
	for (int i = 0; i < gpufile_config_count(); i++) {
		const char *name = gpufile_config_name(i);
		char value[512], variable[128], source[192];
		gpufile_source_t src = GPUFILE_SOURCE_DEFAULT;

		if (gpufile_config_get(name, value, sizeof(value), &src,
		                       variable, sizeof(variable))) {
			printf("%-20s %-12s %-34s %s\n", name, "(bad)",
			       "environment (see below)",
			       gpufile_config_help(i));
			util_error("config", "%s", gpufile_errmsg());
			bad = 1;
			continue;
		}
		if (variable[0])
			snprintf(source, sizeof(source), "%s %s",
			         gpufile_source_name(src), variable);
		else
			snprintf(source, sizeof(source), "%s",
			         gpufile_source_name(src));
		printf("%-20s %-12s %-34s %s\n", name, value, source,
		       gpufile_config_help(i));
	}
	/* Clamps and environment warnings (config.c). */
	for (int i = 0; i < gpufile_config_warning_count(); i++) {
		char w[512];
		if (gpufile_config_warning(i, w, sizeof(w)) == 0)
			printf("%s %s\n", i ? "        " : "\nnotes:", w);
	}
	return bad ? EXIT_RUNTIME : EXIT_OK;
}

int cmd_config(int argc, char **argv)
{
	static const char *const cmd = "config";
	static const struct option longopts[] = {
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int json = 0, c;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'j':
			json = 1;
			break;
		case 'h':
			fputs(config_usage, stdout);
			return EXIT_OK;
		default:
			return util_getopt_error(cmd, c, argv);
		}
	}
	if (optind < argc)
		return util_usage_error(cmd, "unexpected argument \"%s\"",
		                        argv[optind]);
	if (json) {
		struct json j;
		int bad;

		json_init(&j, stdout);
		json_object_begin(&j, NULL);
		bad = util_json_settings(&j, "settings");
		json_array_begin(&j, "help");
		for (int i = 0; i < gpufile_config_count(); i++) {
			json_object_begin(&j, NULL);
			json_key_str(&j, "name", gpufile_config_name(i));
			json_key_str(&j, "help", gpufile_config_help(i));
			json_object_end(&j);
		}
		json_array_end(&j);
		/* Clamps and environment warnings (config.c). */
		json_array_begin(&j, "warnings");
		for (int i = 0; i < gpufile_config_warning_count(); i++) {
			char w[512];
			if (gpufile_config_warning(i, w, sizeof(w)) == 0)
				json_key_str(&j, NULL, w);
		}
		json_array_end(&j);
		json_key_str(&j, "version", gpufile_version());
		json_key_str(&j, "features", gpufile_features());
		json_object_end(&j);
		if (bad) {
			gpufile_config_check();
			return util_error(cmd, "%s", gpufile_errmsg());
		}
		return EXIT_OK;
	}
	return config_text();
}

/* ------------------------------------------------------------------ */
/* main                                                               */
/* ------------------------------------------------------------------ */

static void usage(FILE *out)
{
	fprintf(out, "Usage: gpufile COMMAND [ARGS...]\n"
	             "       gpufile COMMAND --help\n"
	             "       gpufile --version\n"
	             "\n"
	             "Reads files into GPU (and host) memory and tells which "
	             "data path carried\nthe bytes, and why.\n\nCommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(out, "  %-9s %s\n", commands[i].name,
		        commands[i].summary);
	fprintf(out, "  %-9s %s\n", "help", "print this help, or a command's");
	fprintf(out, "\nExit status: 0 ok, 1 I/O or runtime error, 2 usage "
	             "error.\n");
}

static const struct command *find_command(const char *name)
{
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (strcmp(commands[i].name, name) == 0)
			return &commands[i];
	return NULL;
}

int main(int argc, char **argv)
{
	const struct command *c;

	if (argc < 2) {
		usage(stderr);
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(stdout);
		return EXIT_OK;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
		printf("gpufile %s (%s)\n", gpufile_version(),
		       gpufile_features());
		return EXIT_OK;
	}
	if (strcmp(argv[1], "help") == 0) {
		char help[] = "--help";
		char *args[] = {argc > 2 ? argv[2] : NULL, help, NULL};

		if (argc < 3) {
			usage(stdout);
			return EXIT_OK;
		}
		c = find_command(argv[2]);
		if (!c)
			return util_usage_error(NULL, "unknown command \"%s\"",
			                        argv[2]);
		return c->run(2, args);
	}
	c = find_command(argv[1]);
	if (!c)
		return util_usage_error(NULL, "unknown command \"%s\"",
		                        argv[1]);
	return c->run(argc - 1, argv + 1);
}
