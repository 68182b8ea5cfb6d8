/*
 * gpufile bench FILE: the workloads gdsio and fio users measure --
 * sequential or random reads or writes of a block size, from several
 * jobs, one request at a time or in batches (gpufile's batch API), into
 * host or GPU memory, for a size or a time, with the data checked
 * against a pattern -- and, beside the throughput and the latency
 * percentiles, the bytes each path carried, from gpufile's counters and
 * cuFile's, and the reason for the device path.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "gpufile.h"
#include "json.h"
#include "latency.h"
#include "measure.h"
#include "msg.h"
#include "options.h"
#include "run_settings.h"
#include "summary.h"
#include "target.h"
#include "text.h"

#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define LAYOUT_CHUNK  (8u << 20)
#define DEFAULT_SEED  1
#define MAX_JOBS      1024
#define MAX_BATCH     65536
#define MAX_BLOCK     (1ull << 30)
#define DEFAULT_BLOCK (1u << 20)

static const char usage[] =
    "Usage: gpufile bench FILE [--rw read|write|randread|randwrite] [--bs B]\n"
    "                          [--jobs N] [--batch N] [--host | --device N]\n"
    "                          [--size B | --time S] [--file-size B]\n"
    "                          [--verify] [--seed N] [--json]\n"
    "                          " RUN_SETTINGS_USAGE "\n"
    "\n"
    "Measures a workload on FILE as gdsio and fio do, and shows beside the\n"
    "speed which path carried the bytes: IOPS, throughput (GB/s, 1 GB =\n"
    "1e9 bytes, and MiB/s as fio prints it), latency min, mean, max and\n"
    "p50, p90, p99, p99.9, the bytes of each gpufile path (its counters),\n"
    "cuFile's own per-GPU counters where cuFile was used, and why device\n"
    "requests of FILE take their path.\n"
    "\n"
    "A FILE that does not exist, or is smaller than --file-size, is laid\n"
    "out first (not timed) with the pattern of --seed: the 8-byte word at\n"
    "offset 8i is a hash of the seed and i, so any block can be checked.\n"
    "An http://, https:// or s3:// URL is read as it is (never laid out;\n"
    "no writes).\n"
    "\n"
    "  --rw MODE      read (default), write (sequential), randread or\n"
    "                 randwrite (uniform random blocks, with repeats, as\n"
    "                 fio's norandommap)\n"
    "  --bs B         bytes per I/O (default 1 MiB); offsets are\n"
    "                 multiples of it\n"
    "  --jobs N       threads submitting I/O at once (default 1; gdsio -w,\n"
    "                 fio --numjobs); sequential jobs share one cursor, so\n"
    "                 together they read the file once\n"
    "  --batch N      I/Os per submit through gpufile's batch API (reads\n"
    "                 only; default 1: one gpufile_pread or gpufile_pwrite\n"
    "                 at a time); latency is then per batch\n"
    "  --host         host memory even when a GPU is usable\n"
    "  --device N     device memory of GPU N (default GPU 0 when usable)\n"
    "  --size B       bytes to move in all, in whole blocks (at least\n"
    "                 one; default: the region once, unless --time is\n"
    "                 given)\n"
    "  --time S       run for S seconds (with --size: whichever ends first)\n"
    "  --file-size B  the region of FILE used, from offset 0 (default: the\n"
    "                 whole file; at least --bs); laid out when FILE is\n"
    "                 smaller\n"
    "  --verify       reads: check every block read against the pattern;\n"
    "                 writes: write the pattern, then read back and check\n"
    "                 every block written (untimed). Checks of reads are\n"
    "                 inside the time: measure speed without --verify.\n"
    "                 Writes without it write one block's bytes at every\n"
    "                 offset (no time spent making data, as fio)\n"
    "  --seed N       the pattern's seed (default 1)\n"
    "  --json         print one JSON object instead of text\n" RUN_SETTINGS_HELP
    "  --help         print this help\n"
    "\n"
    "Sizes accept bytes (B) or a number with k, m, g, t, KiB, MiB, GiB,\n"
    "TiB, KB, MB, GB or TB (any case; all binary). bench/README.md\n"
    "compares its figures with fio's.\n"
    "Exit status: 0 ok, 1 I/O, verification or runtime error, 2 usage\n"
    "error.\n";

enum rw { RW_READ, RW_WRITE, RW_RANDREAD, RW_RANDWRITE };
static const char *const rw_names[] = {"read", "write", "randread", "randwrite",
                                       NULL};

struct bench_options {
	const char *file;
	char *shown; /* file as every output names it (a URL redacted) */
	int rw;
	uint64_t bs, jobs, batch, size, file_size, seed;
	double time;
	int have_size, have_time, have_file_size, verify, want_host,
	    want_device, json;
	struct run_settings settings;
};

static int is_write(const struct bench_options *o)
{
	return o->rw == RW_WRITE || o->rw == RW_RANDWRITE;
}

static int is_random(const struct bench_options *o)
{
	return o->rw == RW_RANDREAD || o->rw == RW_RANDWRITE;
}

/* ---- the pattern ---- */

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* The bytes at file offsets [off, off + len): byte k of the 8-byte word
 * at offset 8i is byte k (little-endian) of a hash of seed and i. */
static void pattern_fill(unsigned char *buf, size_t len, uint64_t off,
                         uint64_t seed)
{
	size_t i = 0;

	while (i < len) {
		uint64_t o = off + i, w = splitmix64(seed ^ splitmix64(o / 8));

		for (unsigned k = (unsigned)(o % 8); k < 8 && i < len; k++)
			buf[i++] = (unsigned char)(w >> (8 * k));
	}
}

/* ---- shared state and jobs ---- */

struct bench {
	const struct bench_options *o;
	gpufile_t *h;
	uint64_t region, nblocks, max_ops;
	double deadline; /* 0: none */
	atomic_uint_fast64_t next_op;
	atomic_int stop;
	uint64_t *written;    /* writes with --verify: a bit per block */
	pthread_mutex_t lock; /* guards go */
	pthread_cond_t started;
	int go; /* 1: the clock runs, the jobs may start */
};

struct job {
	struct bench *b;
	int index;
	pthread_t thread;
	struct target mem;      /* batch x bs bytes */
	unsigned char *expect;  /* the pattern of a block (--verify) */
	unsigned char *copy;    /* a device block copied to host (--verify) */
	gpufile_batch_t *batch; /* --batch > 1 */
	gpufile_batch_entry_t *entries;
	uint64_t rng, ops, bytes, checked;
	char *error; /* the first failure, allocated */
	struct latency lat;
};

static void job_fail(struct job *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void job_fail(struct job *j, const char *fmt, ...)
{
	va_list ap;

	atomic_store(&j->b->stop, 1);
	if (j->error)
		return;
	va_start(ap, fmt);
	if (vasprintf(&j->error, fmt, ap) < 0)
		j->error = NULL;
	va_end(ap);
	if (!j->error)
		j->error = strdup("out of memory");
}

/* Claims up to want I/Os; returns how many (0: the run is over) and the
 * index of the first in *first. */
static uint64_t claim(struct bench *b, uint64_t want, uint64_t *first)
{
	uint64_t k;

	if (atomic_load_explicit(&b->stop, memory_order_relaxed) ||
	    (b->deadline > 0 && measure_now() >= b->deadline))
		return 0;
	k = atomic_fetch_add(&b->next_op, want);
	if (k >= b->max_ops)
		return 0;
	*first = k;
	return b->max_ops - k < want ? b->max_ops - k : want;
}

/* The block of I/O number op of job j. */
static uint64_t block_of(struct job *j, uint64_t op)
{
	uint64_t x;

	if (!is_random(j->b->o))
		return op % j->b->nblocks;
	x = j->rng; /* xorshift64* */
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	j->rng = x;
	return (x * 0x2545f4914f6cdd1dull >> 11) % j->b->nblocks;
}

/* Checks the block at file offset off, held at buf (j->mem's memory).
 * Returns 0, or -1 after job_fail. */
static int check_block(struct job *j, const void *buf, uint64_t off)
{
	const struct bench_options *o = j->b->o;
	const unsigned char *got = buf;
	size_t bs = (size_t)o->bs, i;

	if (j->mem.device >= 0) {
		if (gpufile_memcpy(j->copy, buf, bs)) {
			job_fail(j, "verify: copying a block from GPU %d: %s",
			         j->mem.device, gpufile_errmsg());
			return -1;
		}
		got = j->copy;
	}
	pattern_fill(j->expect, bs, off, o->seed);
	j->checked++;
	if (memcmp(got, j->expect, bs) == 0)
		return 0;
	for (i = 0; got[i] == j->expect[i]; i++)
		;
	job_fail(j,
	         "verify: %s: the byte at offset %" PRIu64 " (block at %" PRIu64
	         ") is 0x%02x, the pattern of seed %" PRIu64
	         " has 0x%02x (was the file laid out or written with --verify "
	         "under another --seed?)",
	         o->shown, off + i, off, got[i], o->seed, j->expect[i]);
	return -1;
}

/* One gpufile_pread or gpufile_pwrite of block blk. Returns 0 or -1. */
static int one_io(struct job *j, uint64_t blk)
{
	const struct bench_options *o = j->b->o;
	uint64_t off = blk * o->bs;
	double t0;
	ssize_t n;

	if (is_write(o) && o->verify) {
		pattern_fill(j->mem.device >= 0 ? j->copy : j->mem.buf,
		             (size_t)o->bs, off, o->seed);
		if (j->mem.device >= 0 &&
		    gpufile_memcpy(j->mem.buf, j->copy, (size_t)o->bs)) {
			job_fail(j, "copying a block to GPU %d: %s",
			         j->mem.device, gpufile_errmsg());
			return -1;
		}
	}
	t0 = measure_now();
	n = is_write(o) ? gpufile_pwrite(j->b->h, j->mem.buf, (size_t)o->bs,
	                                 (int64_t)off)
	                : gpufile_pread(j->b->h, j->mem.buf, (size_t)o->bs,
	                                (int64_t)off);
	latency_add(&j->lat, (uint64_t)((measure_now() - t0) * 1e9));
	if (n < 0 || (uint64_t)n != o->bs) {
		job_fail(j, "%s %" PRIu64 " bytes at offset %" PRIu64 ": %s",
		         is_write(o) ? "writing" : "reading", o->bs, off,
		         n < 0 ? gpufile_errmsg() : "short (the file shrank?)");
		return -1;
	}
	j->ops++;
	j->bytes += o->bs;
	if (is_write(o) && j->b->written)
		__atomic_fetch_or(&j->b->written[blk / 64], 1ull << (blk % 64),
		                  __ATOMIC_RELAXED);
	if (!is_write(o) && o->verify)
		return check_block(j, j->mem.buf, off);
	return 0;
}

/* n reads through the batch API, the first being I/O number first. */
static int batch_io(struct job *j, uint64_t first, uint64_t n)
{
	const struct bench_options *o = j->b->o;
	double t0;

	for (uint64_t i = 0; i < n; i++)
		j->entries[i] = (gpufile_batch_entry_t){
		    .file = j->b->h,
		    .buf = (char *)j->mem.buf + i * o->bs,
		    .size = (size_t)o->bs,
		    .offset = (int64_t)(block_of(j, first + i) * o->bs)};
	t0 = measure_now();
	if (gpufile_batch_submit(j->batch, j->entries, (unsigned)n) ||
	    gpufile_batch_wait(j->batch, -1) < 0) {
		job_fail(j, "batch of %" PRIu64 " reads: %s", n,
		         gpufile_errmsg());
		return -1;
	}
	latency_add(&j->lat, (uint64_t)((measure_now() - t0) * 1e9));
	for (unsigned i = 0; i < n; i++) {
		ssize_t r = gpufile_batch_result(j->batch, i);

		if (r < 0 || (uint64_t)r != o->bs) {
			job_fail(j, "%s",
			         r < 0 ? gpufile_batch_errmsg(j->batch, i)
			               : "a batch read was short (the file "
			                 "shrank?)");
			return -1;
		}
		if (o->verify && check_block(j, j->entries[i].buf,
		                             (uint64_t)j->entries[i].offset))
			return -1;
	}
	j->ops += n;
	j->bytes += n * o->bs;
	return 0;
}

static void *job_main(void *arg)
{
	struct job *j = arg;
	uint64_t first, n;

	pthread_mutex_lock(&j->b->lock);
	while (!j->b->go)
		pthread_cond_wait(&j->b->started, &j->b->lock);
	pthread_mutex_unlock(&j->b->lock);
	while ((n = claim(j->b, j->b->o->batch, &first)) > 0) {
		if (j->batch ? batch_io(j, first, n)
		             : one_io(j, block_of(j, first)))
			break;
	}
	return NULL;
}

/* ---- options ---- */

static int parse(int argc, char **argv, struct bench_options *o)
{
	const struct opt opts[] = {
	    {.name = "rw",
	     .kind = OPT_CHOICE,
	     .dest = &o->rw,
	     .choices = rw_names},
	    {.name = "bs",
	     .kind = OPT_SIZE,
	     .dest = &o->bs,
	     .min = 1,
	     .max = MAX_BLOCK},
	    {.name = "jobs",
	     .kind = OPT_COUNT,
	     .dest = &o->jobs,
	     .min = 1,
	     .max = MAX_JOBS},
	    {.name = "batch",
	     .kind = OPT_COUNT,
	     .dest = &o->batch,
	     .min = 1,
	     .max = MAX_BATCH},
	    {.name = "host", .kind = OPT_FLAG, .dest = &o->want_host},
	    {.name = "device", .kind = OPT_DEVICE, .dest = &o->want_device},
	    {.name = "size",
	     .kind = OPT_SIZE,
	     .dest = &o->size,
	     .given = &o->have_size,
	     .min = 1,
	     .max = INT64_MAX},
	    {.name = "time",
	     .kind = OPT_SECONDS,
	     .dest = &o->time,
	     .given = &o->have_time},
	    {.name = "file-size",
	     .kind = OPT_SIZE,
	     .dest = &o->file_size,
	     .given = &o->have_file_size,
	     .min = 1,
	     .max = INT64_MAX},
	    {.name = "verify", .kind = OPT_FLAG, .dest = &o->verify},
	    {.name = "seed", .kind = OPT_COUNT, .dest = &o->seed},
	    {.name = "json", .kind = OPT_FLAG, .dest = &o->json},
	    RUN_SETTINGS_OPTS(&o->settings),
	};
	const struct opt_spec spec = {
	    "bench", usage, opts, sizeof(opts) / sizeof(opts[0]), "FILE", 1, 1};
	int rc, first = opt_parse(&spec, argc, argv, &rc);

	if (first < 0)
		return rc;
	rc = target_check_options("bench", o->want_host, o->want_device,
	                          &o->settings);
	if (rc)
		return rc;
	if (o->batch > 1 && is_write(o))
		return msg_usage_error("bench",
		                       "--batch %" PRIu64 " with --rw %s: "
		                       "gpufile's batch API reads only (use "
		                       "--jobs for writes in parallel)",
		                       o->batch, rw_names[o->rw]);
	/* Checked here, not after a layout: --file-size below --bs would lay
	 * out a file no block fits in, and --size below it moved a whole
	 * block, more than asked. */
	if (o->have_size && o->size < o->bs)
		return msg_usage_error("bench",
		                       "--size %" PRIu64
		                       " is smaller than --bs "
		                       "%" PRIu64 ": a run moves whole blocks",
		                       o->size, o->bs);
	if (o->have_file_size && o->file_size < o->bs)
		return msg_usage_error("bench",
		                       "--file-size %" PRIu64
		                       " is smaller than "
		                       "--bs %" PRIu64 ": no block fits",
		                       o->file_size, o->bs);
	o->file = argv[first];
	return 0;
}

/* ---- the file ---- */

/* Lays out [from, to) of the file with the pattern (untimed). */
static int lay_out(const struct bench_options *o, uint64_t from, uint64_t to)
{
	gpufile_t *h = NULL;
	unsigned char *buf = malloc(LAYOUT_CHUNK);
	int rc = 0;

	if (!buf)
		return msg_error("bench", "out of memory");
	if (gpufile_open(&h, o->file, from ? "r+" : "w+")) {
		free(buf);
		return msg_error("bench", "%s", gpufile_errmsg());
	}
	for (uint64_t off = from; off < to && rc == 0;) {
		size_t len =
		    (size_t)(to - off < LAYOUT_CHUNK ? to - off : LAYOUT_CHUNK);

		pattern_fill(buf, len, off, o->seed);
		if (gpufile_pwrite(h, buf, len, (int64_t)off) != (ssize_t)len)
			rc = msg_error("bench", "laying out %s: %s", o->shown,
			               gpufile_errmsg());
		off += len;
	}
	if (rc == 0 && gpufile_sync(h))
		rc = msg_error("bench", "%s", gpufile_errmsg());
	if (gpufile_close(h) && rc == 0)
		rc = msg_error("bench", "%s", gpufile_errmsg());
	free(buf);
	return rc;
}

/* Lays the file out where it is missing or too short, and sets the
 * region. *laid_out: the bytes written. */
static int prepare_file(const struct bench_options *o, uint64_t *region,
                        uint64_t *laid_out)
{
	struct stat st;
	uint64_t have = 0;

	*laid_out = 0;
	*region = o->have_file_size ? o->file_size : 0;
	if (strstr(o->file, "://"))
		return 0; /* a URL: read as it is (writes are refused) */
	if (stat(o->file, &st) == 0) {
		if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode))
			return msg_error("bench",
			                 "%s: not a regular file or block "
			                 "device",
			                 o->shown);
		have = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : UINT64_MAX;
	} else if (errno != ENOENT) {
		return msg_error("bench", "%s: %s", o->shown, strerror(errno));
	} else if (!o->have_file_size) {
		return msg_error("bench",
		                 "%s does not exist: give --file-size B to "
		                 "lay it out",
		                 o->shown);
	}
	*region = o->have_file_size ? o->file_size : have;
	if (have == UINT64_MAX) { /* a block device: its size is the API's */
		*region = o->have_file_size ? o->file_size : 0;
		return 0;
	}
	if (have < *region) {
		*laid_out = *region - have;
		if (lay_out(o, have, *region))
			return EXIT_RUNTIME;
	}
	return 0;
}

/* ---- the run ---- */

struct bench_result {
	uint64_t region, laid_out, ops, bytes, checked;
	double seconds;
	struct latency lat;
	struct target mem; /* the kind of memory, for the report */
	gpufile_stats_t before, after;
	gpufile_cufile_info_t cufile_before, cufile_after;
	gpufile_path_t device_path;
	char path_reason[512];
};

static int job_setup(struct job *j, const struct bench_result *r)
{
	const struct bench_options *o = j->b->o;
	size_t bs = (size_t)o->bs;

	j->mem.device = r->mem.device;
	j->rng = splitmix64(o->seed ^ splitmix64((uint64_t)j->index + 1)) | 1;
	if (target_alloc("bench", &j->mem, bs * (size_t)o->batch,
	                 "a job's buffers (a smaller --bs or --batch needs "
	                 "less)"))
		return EXIT_RUNTIME;
	/* Writes without --verify write one block's pattern everywhere. */
	if (is_write(o) && !o->verify && j->mem.device < 0)
		pattern_fill(j->mem.buf, bs, 0, o->seed);
	j->expect = o->verify ? malloc(bs) : NULL;
	j->copy = o->verify || (is_write(o) && j->mem.device >= 0) ? malloc(bs)
	                                                           : NULL;
	if ((o->verify && !j->expect) ||
	    (!j->copy && (o->verify || (is_write(o) && j->mem.device >= 0))))
		return msg_error("bench", "out of memory");
	if (is_write(o) && !o->verify && j->mem.device >= 0) {
		pattern_fill(j->copy, bs, 0, o->seed);
		if (gpufile_memcpy(j->mem.buf, j->copy, bs))
			return msg_error("bench", "copying to GPU %d: %s",
			                 j->mem.device, gpufile_errmsg());
	}
	if (o->batch > 1) {
		j->entries = calloc((size_t)o->batch, sizeof(*j->entries));
		if (!j->entries ||
		    gpufile_batch_create(&j->batch, (unsigned)o->batch))
			return msg_error(
			    "bench", "creating a batch of %" PRIu64 ": %s",
			    o->batch,
			    j->entries ? gpufile_errmsg() : "out of memory");
	}
	return 0;
}

static void job_free(struct job *j)
{
	gpufile_batch_free(j->batch);
	free(j->entries);
	free(j->expect);
	free(j->copy);
	free(j->error);
	target_free(&j->mem);
}

/* Starts the jobs, times them, and adds up what they did. Returns 0 or
 * EXIT_RUNTIME (after the first job's message). */
static int run_jobs(struct bench *b, struct job *jobs, struct bench_result *r)
{
	const struct bench_options *o = b->o;
	uint64_t started = 0;
	double t0;
	int rc = 0;

	GPUFILE_INIT(r->before);
	gpufile_stats_self(&r->before);
	GPUFILE_INIT(r->cufile_before);
	gpufile_cufile_info(&r->cufile_before);
	for (; started < o->jobs; started++)
		if (pthread_create(&jobs[started].thread, NULL, job_main,
		                   &jobs[started]))
			break;
	if (started < o->jobs) {
		/* The jobs started find the run over at their first claim. */
		atomic_store(&b->stop, 1);
		rc = msg_error("bench",
		               "starting job %" PRIu64 " of %" PRIu64
		               ": out of threads",
		               started + 1, o->jobs);
	}
	pthread_mutex_lock(&b->lock);
	t0 = measure_now();
	if (o->have_time)
		b->deadline = t0 + o->time;
	b->go = 1;
	pthread_cond_broadcast(&b->started);
	pthread_mutex_unlock(&b->lock);
	for (uint64_t i = 0; i < started; i++)
		pthread_join(jobs[i].thread, NULL);
	r->seconds = measure_now() - t0;
	GPUFILE_INIT(r->after);
	gpufile_stats_self(&r->after);
	GPUFILE_INIT(r->cufile_after);
	gpufile_cufile_info(&r->cufile_after);
	for (uint64_t i = 0; i < started; i++) {
		r->ops += jobs[i].ops;
		r->bytes += jobs[i].bytes;
		r->checked += jobs[i].checked;
		latency_merge(&r->lat, &jobs[i].lat);
		if (jobs[i].error && rc == 0)
			rc = msg_error("bench", "%s", jobs[i].error);
	}
	return rc;
}

/* Writes with --verify: reads back every block written (untimed) and
 * checks it. Returns 0 or EXIT_RUNTIME. */
static int verify_written(struct bench *b, struct job *j,
                          struct bench_result *r)
{
	const struct bench_options *o = b->o;
	struct job check = {.b = b, .mem = {.device = -1}};
	int rc = 0;

	check.expect = j->expect; /* job 0's, free now */
	check.mem.buf = j->copy;
	for (uint64_t blk = 0; blk < b->nblocks && rc == 0; blk++) {
		uint64_t off = blk * o->bs;
		ssize_t n;

		if (!(b->written[blk / 64] >> (blk % 64) & 1))
			continue;
		n = gpufile_pread(b->h, check.mem.buf, (size_t)o->bs,
		                  (int64_t)off);
		if (n < 0 || (uint64_t)n != o->bs)
			rc = msg_error("bench",
			               "verify: reading back the block at "
			               "offset %" PRIu64 ": %s",
			               off, n < 0 ? gpufile_errmsg() : "short");
		else if (check_block(&check, check.mem.buf, off))
			rc = msg_error("bench", "%s", check.error);
	}
	r->checked = check.checked;
	free(check.error);
	return rc;
}

/* ---- reports ---- */

static const double quantiles[] = {0.5, 0.9, 0.99, 0.999};
static const char *const quantile_names[] = {"p50", "p90", "p99", "p99.9"};

/* What cuFile counted per GPU during the run (its own layer). */
static void cufile_delta(const gpufile_cufile_info_t *a,
                         const gpufile_cufile_info_t *b, int i,
                         gpufile_cufile_gpu_t *d)
{
	const gpufile_cufile_gpu_t *x = &a->gpu[i];
	const gpufile_cufile_gpu_t *y = i < b->ngpus ? &b->gpu[i] : NULL;

	*d = *x;
	if (!y)
		return;
	d->nvfs_reads -= y->nvfs_reads;
	d->posix_reads -= y->posix_reads;
	d->p2p_reads -= y->p2p_reads;
	d->unaligned_reads -= y->unaligned_reads;
	d->nvfs_writes -= y->nvfs_writes;
	d->posix_writes -= y->posix_writes;
	d->p2p_writes -= y->p2p_writes;
	d->unaligned_writes -= y->unaligned_writes;
}

static void report_text(const struct bench_options *o,
                        const struct bench_result *r)
{
	char human[32], mem[32];
	double s = r->seconds;

	printf("file:     ");
	text_put(stdout, o->shown);
	printf(" (region %" PRIu64 " bytes", r->region);
	if (r->laid_out)
		printf(", %" PRIu64 " laid out with the pattern of seed "
		       "%" PRIu64,
		       r->laid_out, o->seed);
	printf(")\n");
	printf("workload: %s, bs %" PRIu64 ", %" PRIu64 " job%s, batch %" PRIu64
	       ", %s (",
	       rw_names[o->rw], o->bs, o->jobs, o->jobs == 1 ? "" : "s",
	       o->batch, target_name(&r->mem, 0, mem, sizeof(mem)));
	text_put(stdout, r->mem.reason);
	printf(")\n");
	printf("done:     %" PRIu64 " I/Os, %" PRIu64 " bytes (%s) in %.6f s\n",
	       r->ops, r->bytes,
	       measure_human_bytes(r->bytes, human, sizeof(human)), s);
	printf("rate:     %.0f IOPS, %.3f GB/s, %.1f MiB/s\n",
	       s > 0 ? (double)r->ops / s : 0, measure_gbps(r->bytes, s),
	       s > 0 ? (double)r->bytes / s / 1048576.0 : 0);
	printf("latency:  per %s, usec: min %.1f, mean %.1f, max %.1f\n",
	       o->batch > 1 ? "batch" : "I/O", (double)r->lat.min / 1e3,
	       r->lat.count ? r->lat.sum / (double)r->lat.count / 1e3 : 0,
	       (double)r->lat.max / 1e3);
	printf("         ");
	for (int i = 0; i < 4; i++)
		printf(" %s %.1f%s", quantile_names[i],
		       latency_quantile(&r->lat, quantiles[i]) / 1e3,
		       i < 3 ? "," : "\n");
	if (o->verify)
		printf("verify:   %" PRIu64 " blocks checked against the "
		       "pattern of seed %" PRIu64 ": ok\n",
		       r->checked, o->seed);
	printf("paths (gpufile's counters, this run):\n");
	summary_print_paths(&r->before, &r->after, is_write(o));
	printf("cuFile (its own counters, this run):");
	if (!r->cufile_after.loaded || r->cufile_after.ngpus <= 0) {
		printf(" none (%s)\n", !r->cufile_after.loaded
		                           ? "cuFile not loaded"
		                           : "no per-GPU counters");
	} else {
		putchar('\n');
		for (int i = 0; i < r->cufile_after.ngpus; i++) {
			gpufile_cufile_gpu_t d;

			cufile_delta(&r->cufile_after, &r->cufile_before, i,
			             &d);
			printf("  GPU %d: %s nvfs %" PRIu64 ", posix %" PRIu64
			       ", p2p %" PRIu64 ", unaligned %" PRIu64 "\n",
			       d.gpu, is_write(o) ? "writes" : "reads",
			       is_write(o) ? d.nvfs_writes : d.nvfs_reads,
			       is_write(o) ? d.posix_writes : d.posix_reads,
			       is_write(o) ? d.p2p_writes : d.p2p_reads,
			       is_write(o) ? d.unaligned_writes
			                   : d.unaligned_reads);
		}
	}
	printf("device buffers: ");
	text_put(stdout, r->path_reason);
	putchar('\n');
	summary_print_settings_line();
}

static void json_cufile(struct json *j, const struct bench_options *o,
                        const struct bench_result *r)
{
	json_object_begin(j, "cufile");
	json_key_bool(j, "loaded", r->cufile_after.loaded);
	json_key_bool(j, "driver_open", r->cufile_after.driver_open);
	json_key_str(j, "message", r->cufile_after.message);
	json_array_begin(j, "gpus");
	for (int i = 0; i < r->cufile_after.ngpus; i++) {
		gpufile_cufile_gpu_t d;

		cufile_delta(&r->cufile_after, &r->cufile_before, i, &d);
		json_object_begin(j, NULL);
		json_key_i64(j, "gpu", d.gpu);
		json_key_u64(j, "nvfs",
		             is_write(o) ? d.nvfs_writes : d.nvfs_reads);
		json_key_u64(j, "posix",
		             is_write(o) ? d.posix_writes : d.posix_reads);
		json_key_u64(j, "p2p",
		             is_write(o) ? d.p2p_writes : d.p2p_reads);
		json_key_u64(j, "unaligned",
		             is_write(o) ? d.unaligned_writes
		                         : d.unaligned_reads);
		json_object_end(j);
	}
	json_array_end(j);
	json_object_end(j);
}

static void report_json(const struct bench_options *o,
                        const struct bench_result *r)
{
	struct json j;
	char mem[32];
	double s = r->seconds;

	json_init(&j, stdout);
	json_object_begin(&j, NULL);
	json_key_str(&j, "file", o->shown);
	json_key_u64(&j, "region", r->region);
	json_key_u64(&j, "laid_out", r->laid_out);
	json_key_str(&j, "rw", rw_names[o->rw]);
	json_key_u64(&j, "bs", o->bs);
	json_key_u64(&j, "jobs", o->jobs);
	json_key_u64(&j, "batch", o->batch);
	json_key_str(&j, "target", target_name(&r->mem, 1, mem, sizeof(mem)));
	json_key_str(&j, "target_reason", r->mem.reason);
	json_key_u64(&j, "ops", r->ops);
	json_key_u64(&j, "bytes", r->bytes);
	json_key_double(&j, "seconds", s);
	json_key_double(&j, "iops", s > 0 ? (double)r->ops / s : 0);
	json_key_double(&j, "gbps", measure_gbps(r->bytes, s));
	json_key_double(&j, "mib_per_s",
	                s > 0 ? (double)r->bytes / s / 1048576.0 : 0);
	json_object_begin(&j, "latency_us");
	json_key_str(&j, "per", o->batch > 1 ? "batch" : "io");
	json_key_u64(&j, "count", r->lat.count);
	json_key_double(&j, "min", (double)r->lat.min / 1e3);
	json_key_double(&j, "mean",
	                r->lat.count ? r->lat.sum / (double)r->lat.count / 1e3
	                             : 0);
	json_key_double(&j, "max", (double)r->lat.max / 1e3);
	for (int i = 0; i < 4; i++)
		json_key_double(&j, quantile_names[i],
		                latency_quantile(&r->lat, quantiles[i]) / 1e3);
	json_object_end(&j);
	json_object_begin(&j, "verify");
	json_key_bool(&j, "enabled", o->verify);
	json_key_u64(&j, "seed", o->seed);
	json_key_u64(&j, "blocks_checked", r->checked);
	json_object_end(&j);
	summary_json_paths(&j, "paths", &r->before, &r->after, is_write(o));
	json_cufile(&j, o, r);
	json_object_begin(&j, "path_info");
	json_key_str(&j, "device_path", gpufile_path_name(r->device_path));
	json_key_str(&j, "reason", r->path_reason);
	json_object_end(&j);
	summary_json_settings(&j, "settings");
	json_key_str(&j, "version", gpufile_version());
	json_key_str(&j, "features", gpufile_features());
	json_object_end(&j);
}

/* ---- the command ---- */

/* Opens the file and sizes the run. Returns 0 or EXIT_RUNTIME. */
static int open_file(struct bench *b, struct bench_result *r)
{
	const struct bench_options *o = b->o;
	char human[32];
	int64_t size;

	if (prepare_file(o, &r->region, &r->laid_out))
		return EXIT_RUNTIME;
	if (gpufile_open(&b->h, o->file, is_write(o) ? "r+" : "r"))
		return msg_error("bench", "%s", gpufile_errmsg());
	size = gpufile_size(b->h);
	if (size < 0)
		return msg_error("bench", "%s", gpufile_errmsg());
	if (r->region == 0 || r->region > (uint64_t)size)
		r->region = (uint64_t)size;
	b->region = r->region;
	b->nblocks = r->region / o->bs;
	if (b->nblocks == 0)
		return msg_error(
		    "bench",
		    "--bs %" PRIu64 " is larger than the region "
		    "of %s (%" PRIu64 " bytes, %s): give a "
		    "smaller --bs or a larger --file-size",
		    o->bs, o->shown, r->region,
		    measure_human_bytes(r->region, human, sizeof(human)));
	if (o->have_size)
		b->max_ops = o->size / o->bs ? o->size / o->bs : 1;
	else
		b->max_ops = o->have_time ? UINT64_MAX : b->nblocks;
	return 0;
}

/* Everything between the options and the report. */
static int bench(struct bench *b, struct bench_result *r, struct job *jobs)
{
	const struct bench_options *o = b->o;
	int rc = open_file(b, r);

	if (rc)
		return rc;
	if (target_choose("bench", o->want_host, o->want_device, &r->mem))
		return EXIT_RUNTIME;
	if (is_write(o) && o->verify) {
		b->written = calloc((size_t)(b->nblocks + 63) / 64, 8);
		if (!b->written)
			return msg_error("bench", "out of memory");
	}
	for (uint64_t i = 0; i < o->jobs && rc == 0; i++) {
		jobs[i].b = b;
		jobs[i].index = (int)i;
		rc = job_setup(&jobs[i], r);
	}
	if (rc == 0 && gpufile_warmup())
		rc = msg_error("bench", "warmup: %s", gpufile_errmsg());
	if (rc == 0)
		rc = run_jobs(b, jobs, r);
	if (rc == 0 && b->written)
		rc = verify_written(b, &jobs[0], r);
	if (rc == 0 && target_path_info("bench", &r->mem, b->h, &r->device_path,
	                                r->path_reason, sizeof(r->path_reason)))
		rc = EXIT_RUNTIME;
	return rc;
}

int cmd_bench(int argc, char **argv)
{
	struct bench_options o = {.bs = DEFAULT_BLOCK,
	                          .jobs = 1,
	                          .batch = 1,
	                          .seed = DEFAULT_SEED,
	                          .want_device = -1};
	struct bench b = {.o = &o,
	                  .lock = PTHREAD_MUTEX_INITIALIZER,
	                  .started = PTHREAD_COND_INITIALIZER};
	struct bench_result *r = NULL;
	struct job *jobs = NULL;
	int rc = parse(argc, argv, &o);

	if (rc || !o.file)
		return rc;
	rc = run_settings_use("bench", &o.settings);
	if (rc)
		return rc;
	o.shown = text_shown_path(o.file);
	if (!o.shown)
		return msg_error("bench", "out of memory");
	r = calloc(1, sizeof(*r));
	jobs = calloc((size_t)o.jobs, sizeof(*jobs));
	if (!r || !jobs)
		rc = msg_error("bench", "out of memory");
	else
		rc = bench(&b, r, jobs);
	if (rc == 0 && o.json)
		report_json(&o, r);
	else if (rc == 0)
		report_text(&o, r);
	for (uint64_t i = 0; jobs && i < o.jobs; i++)
		job_free(&jobs[i]);
	free(jobs);
	free(b.written);
	if (b.h && gpufile_close(b.h) && rc == 0)
		rc = msg_error("bench", "%s", gpufile_errmsg());
	free(r);
	free(o.shown);
	return rc;
}
