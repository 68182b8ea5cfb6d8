/*
 * gpufile write FILE --size B: creates a test file of a given size and
 * pattern, written with gpufile_pwrite from GPU memory when a GPU is
 * usable, and reports which data path carried the bytes.
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
#include <time.h>
#include <unistd.h>

#define ALIGNMENT 4096

static const char usage[] =
    "Usage: gpufile write FILE --size B [--pattern random|zero|sequence]\n"
    "                          [--seed N] [--chunk B]\n"
    "                          [--host | --device N] [--json]\n"
    "                          [--no-progress]\n"
    "                          " RUN_SETTINGS_USAGE "\n"
    "\n"
    "Creates (or truncates) FILE and writes SIZE bytes to it with\n"
    "gpufile_pwrite, then flushes it to storage (gpufile_sync): a test\n"
    "file, like `dd if=/dev/urandom of=FILE bs=... oflag=direct; sync`.\n"
    "The data are made in host memory a chunk at a time and, when a GPU is\n"
    "usable, copied to device memory and written from there (through\n"
    "gpufile's device path); the next chunk is made while the previous one\n"
    "is written, so memory use stays at two chunks.\n"
    "FILE may be an http(s):// or s3:// URL: the bytes are uploaded (S3:\n"
    "one PUT, or parts of upload_part_size sent in parallel) and the\n"
    "object appears when the command ends; on a failure nothing is stored.\n"
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
    "  --host         write from host memory even when a GPU is usable\n"
    "  --device N     write from device memory of GPU N\n"
    "  --json         print one JSON object instead of text\n"
    "  --no-progress  no progress line (it is shown on stderr only when\n"
    "                 stderr is a terminal and SIZE is >= 64 "
    "MiB)\n" RUN_SETTINGS_HELP "  --help         print this help\n"
    "\n"
    "The time reported covers generating, writing and syncing.\n"
    "Sizes accept bytes (B) or a number with k, m, g, t, KiB, MiB, GiB,\n"
    "TiB, KB, MB, GB or TB (any case; all binary).\n"
    "Exit status: 0 ok, 1 I/O or runtime error, 2 usage error.\n";

enum pattern { PATTERN_RANDOM, PATTERN_ZERO, PATTERN_SEQUENCE };
static const char *const pattern_names[] = {"random", "zero", "sequence", NULL};

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

struct write_options {
	const char *file;
	uint64_t size, chunk, seed;
	int pattern; /* enum pattern */
	int have_seed, want_host, want_device, json, quiet;
	struct run_settings settings;
};

struct write_result {
	struct target target; /* where the written bytes come from */
	char *bufs[2];        /* host chunks, filled by turns */
	char *dev[2];         /* device chunks, or NULL */
	double seconds, fill_seconds, sync_seconds;
	gpufile_stats_t before, after;
	gpufile_path_t device_path;
	char path_reason[512];
};

static int parse(int argc, char **argv, struct write_options *o)
{
	int have_size = 0;
	const struct opt opts[] = {
	    {.name = "size",
	     .kind = OPT_SIZE,
	     .dest = &o->size,
	     .given = &have_size,
	     .max = INT64_MAX},
	    {.name = "pattern",
	     .kind = OPT_CHOICE,
	     .dest = &o->pattern,
	     .choices = pattern_names},
	    {.name = "seed",
	     .kind = OPT_COUNT,
	     .dest = &o->seed,
	     .given = &o->have_seed},
	    {.name = "chunk",
	     .kind = OPT_SIZE,
	     .dest = &o->chunk,
	     .min = 4096,
	     .max = 1ull << 30},
	    {.name = "host", .kind = OPT_FLAG, .dest = &o->want_host},
	    {.name = "device", .kind = OPT_DEVICE, .dest = &o->want_device},
	    {.name = "json", .kind = OPT_FLAG, .dest = &o->json},
	    {.name = "no-progress", .kind = OPT_FLAG, .dest = &o->quiet},
	    RUN_SETTINGS_OPTS(&o->settings),
	};
	const struct opt_spec spec = {
	    "write", usage, opts, sizeof(opts) / sizeof(opts[0]), "FILE", 1, 1};
	int rc, first = opt_parse(&spec, argc, argv, &rc);

	if (first < 0)
		return rc;
	if (!have_size)
		return msg_usage_error("write", "--size is required");
	rc = target_check_options("write", o->want_host, o->want_device,
	                          &o->settings);
	if (rc)
		return rc;
	o->file = argv[first];
	if (!o->have_seed)
		o->seed = splitmix64((uint64_t)time(NULL) ^
		                     ((uint64_t)getpid() << 32));
	if (o->chunk > o->size && o->size > 0)
		o->chunk =
		    (o->size + ALIGNMENT - 1) & ~(uint64_t)(ALIGNMENT - 1);
	return 0;
}

/* Waits for a pending write and frees it. Returns its result. */
static ssize_t wait_write(gpufile_future_t **pending)
{
	ssize_t n = gpufile_future_wait(*pending);

	gpufile_future_free(*pending);
	*pending = NULL;
	return n;
}

/* Writes o->size bytes in chunks, filling one buffer while the other is
 * being written. */
static int write_chunks(gpufile_t *h, const struct write_options *o,
                        struct write_result *r, struct progress *p)
{
	gpufile_future_t *pending = NULL;
	uint64_t off = 0;
	int which = 0;
	ssize_t n;

	while (off < o->size) {
		size_t len = (size_t)(o->size - off < o->chunk ? o->size - off
		                                               : o->chunk);
		double t0 = measure_now();

		fill_chunk((enum pattern)o->pattern, o->seed, r->bufs[which],
		           len, off);
		/* The previous write from dev[which] was waited for one
		 * round ago. */
		if (r->dev[which] &&
		    gpufile_memcpy(r->dev[which], r->bufs[which], len)) {
			progress_end(p);
			msg_error("write", "copying a chunk to GPU %d: %s",
			          r->target.device, gpufile_errmsg());
			goto fail;
		}
		r->fill_seconds += measure_now() - t0;
		if (pending && (n = wait_write(&pending)) < 0)
			goto fail_io;
		progress_update(p, off); /* all before off is written */
		if (gpufile_pwrite_async(
		        h, r->dev[which] ? r->dev[which] : r->bufs[which], len,
		        (int64_t)off, &pending))
			goto fail_io;
		off += len;
		which ^= 1;
	}
	if (pending && wait_write(&pending) < 0)
		goto fail_io;
	progress_update(p, o->size);
	return 0;
fail_io:
	progress_end(p); /* the message goes on a line of its own */
	msg_error("write", "%s", gpufile_errmsg());
fail:
	if (pending)
		wait_write(&pending);
	return EXIT_RUNTIME;
}

static void report_json(const struct write_options *o,
                        const struct write_result *r)
{
	char source[32];
	struct json j;

	json_init(&j, stdout);
	json_object_begin(&j, NULL);
	json_key_str(&j, "file", o->file);
	json_key_u64(&j, "bytes", o->size);
	json_key_double(&j, "seconds", r->seconds);
	json_key_double(&j, "gbps", measure_gbps(o->size, r->seconds));
	json_key_double(&j, "fill_seconds", r->fill_seconds);
	json_key_double(&j, "sync_seconds", r->sync_seconds);
	json_key_str(&j, "pattern", pattern_names[o->pattern]);
	if (o->pattern == PATTERN_RANDOM)
		json_key_u64(&j, "seed", o->seed);
	json_key_u64(&j, "chunk", o->chunk);
	json_key_bool(&j, "direct", o->settings.direct);
	json_key_str(&j, "source",
	             target_name(&r->target, 1, source, sizeof(source)));
	json_key_str(&j, "source_reason", r->target.reason);
	summary_json_paths(&j, "paths", &r->before, &r->after, 1);
	json_object_begin(&j, "path_info");
	json_key_str(&j, "device_path", gpufile_path_name(r->device_path));
	json_key_str(&j, "reason", r->path_reason);
	json_object_end(&j);
	summary_json_settings(&j, "settings");
	json_key_str(&j, "version", gpufile_version());
	json_object_end(&j);
}

static void report_text(const struct write_options *o,
                        const struct write_result *r)
{
	char human[32];

	printf("file:     ");
	text_put(stdout, o->file);
	if (r->target.device >= 0)
		printf("\nsource:   device memory of GPU %d (",
		       r->target.device);
	else
		printf("\nsource:   host memory (");
	text_put(stdout, r->target.reason);
	printf(")\n");
	printf("wrote:    %" PRIu64 " bytes (%s), pattern %s", o->size,
	       measure_human_bytes(o->size, human, sizeof(human)),
	       pattern_names[o->pattern]);
	if (o->pattern == PATTERN_RANDOM)
		printf(" (seed %" PRIu64 ")", o->seed);
	printf(", %s, chunks of %" PRIu64 " bytes\n",
	       o->settings.direct ? "O_DIRECT requested" : "buffered",
	       o->chunk);
	printf("time:     %.6f s  %.3f GB/s (generating %.3f s, sync %.3f s)\n",
	       r->seconds, measure_gbps(o->size, r->seconds), r->fill_seconds,
	       r->sync_seconds);
	printf("paths (this command's writes):\n");
	summary_print_paths(&r->before, &r->after, 1);
	printf("device buffers: ");
	text_put(stdout, r->path_reason);
	putchar('\n');
	summary_print_settings_line();
}

/* Two host chunks, and two device chunks when writing from a GPU. */
static int alloc_chunks(const struct write_options *o, struct write_result *r)
{
	for (int i = 0; i < 2; i++) {
		void *p;

		if (posix_memalign(&p, ALIGNMENT, (size_t)o->chunk))
			return msg_error("write",
			                 "allocating 2 x %" PRIu64
			                 " bytes of host memory failed "
			                 "(a smaller --chunk needs less)",
			                 o->chunk);
		r->bufs[i] = p;
	}
	for (int i = 0; i < 2 && r->target.device >= 0; i++) {
		void *p;

		if (gpufile_device_alloc(r->target.device, (size_t)o->chunk,
		                         &p))
			return msg_error(
			    "write",
			    "allocating %" PRIu64 " bytes on GPU %d: %s",
			    o->chunk, r->target.device, gpufile_errmsg());
		r->dev[i] = p;
	}
	return 0;
}

/* Writes and syncs the file, timed. Returns 0 or EXIT_RUNTIME. */
static int write_file(gpufile_t *h, const struct write_options *o,
                      struct write_result *r)
{
	struct progress p;
	double t0, t_sync;
	int rc;

	if (gpufile_warmup())
		return msg_error("write", "warmup: %s", gpufile_errmsg());
	GPUFILE_INIT(r->before);
	gpufile_stats_self(&r->before);
	t0 = measure_now();
	progress_start(&p, "wrote", o->size, !o->json && !o->quiet);
	rc = write_chunks(h, o, r, &p);
	if (rc == 0) {
		/* A sync of gigabytes of dirty pages takes seconds: say what
		 * the wait is for. */
		progress_note(&p, "syncing to storage");
		t_sync = measure_now();
		if (gpufile_sync(h)) {
			progress_end(&p);
			rc = msg_error("write", "%s", gpufile_errmsg());
		}
		r->sync_seconds = measure_now() - t_sync;
	}
	progress_end(&p);
	if (rc)
		return rc;
	r->seconds = measure_now() - t0;
	GPUFILE_INIT(r->after);
	gpufile_stats_self(&r->after);
	if (target_path_info("write", &r->target, h, &r->device_path,
	                     r->path_reason, sizeof(r->path_reason)))
		return EXIT_RUNTIME;
	return 0;
}

int cmd_write(int argc, char **argv)
{
	struct write_options o = {.chunk = 64u << 20, .want_device = -1};
	struct write_result r = {.target = {.device = -1}};
	gpufile_t *h = NULL;
	int rc = parse(argc, argv, &o);

	if (rc || !o.file)
		return rc;
	rc = run_settings_use("write", &o.settings);
	if (rc)
		return rc;
	rc = target_choose("write", o.want_host, o.want_device, &r.target);
	if (rc == 0)
		rc = alloc_chunks(&o, &r);
	if (rc == 0 && gpufile_open(&h, o.file, "w"))
		rc = msg_error("write", "%s", gpufile_errmsg());
	if (rc == 0)
		rc = write_file(h, &o, &r);
	/* A close that fails loses data: it is an error of the command. */
	if (h && gpufile_close(h) && rc == 0)
		rc = msg_error("write", "%s", gpufile_errmsg());
	if (rc == 0 && o.json)
		report_json(&o, &r);
	else if (rc == 0)
		report_text(&o, &r);
	free(r.bufs[0]);
	free(r.bufs[1]);
	gpufile_device_free(r.dev[0]);
	gpufile_device_free(r.dev[1]);
	return rc;
}
