/*
 * host_ref: gpufile_pread of a whole warm file into host memory against
 * the fastest hand-written parallel pread into the same buffer, in one
 * run (issue 14, goal 3: >= 0.95x the fastest reference).
 *
 *	host_ref FILE [--rounds N] [--repeat R] [--threads T,T,...] [--json]
 *
 * --threads: the small-machine form (issue 33): pread references of
 * those thread counts only (each with 4 MiB blocks and with the whole
 * slice), against gpufile at defaults and with host_map_copy=on and off
 * (its setting names which), no other readers.
 *
 * One destination: a file-sized buffer, 4 KiB aligned, touched before
 * timing, shared by every reader, so that no reader gains from a smaller
 * footprint (pages that stay in the CPU caches) or pays first-touch page
 * faults that another does not.
 *
 * Readers:
 *   gpufile nthreads=D (D: the default setting), 16, 24, 32: gpufile_pread
 *     of the whole file; the pool is restarted with the setting and
 *     warmed up (gpufile_warmup) before timing.
 *   pread T x B: T threads (8, 16, 24, 32), each pread()ing its
 *     contiguous slice of the file (size/T, rounded to 4 KiB) in blocks of
 *     B bytes (1, 4, 16 MiB, or the whole slice in one call loop).
 *   mmap T x memcpy|stream: T threads (16, 32), each mapping its slice
 *     (MAP_POPULATE) and copying it out with memcpy or with the library's
 *     streaming-store copy (map_copy.c), map and unmap timed: whether a copy
 *that skips the kernel's copy_to_user, or the destination's read-for-ownership,
 *     beats pread into a file-sized buffer.
 *   chunks T x B memcpy|stream[+dontneed]: one map of the file; T threads
 *     take B-byte chunks in turn, populate each (MADV_POPULATE_READ), copy
 *     it, and with +dontneed unmap its pages after: the shape a library's
 *     tasks would have.
 *
 * Each round runs every reader once, as the best of R reads; the reader
 * order rotates from round to round so that no reader always runs first
 * (after another's page-cache or memory traffic). Reported per reader: the
 * median over the rounds of its best-of-R. Prints one line per reader and
 * a summary (gpufile at defaults, the best gpufile setting, the fastest
 * pread reference, the fastest copy from a map, and the ratios); --json adds
 *one JSON object at the end. GB/s are 1e9 bytes per second.
 */
#define _GNU_SOURCE
#include "gpufile.h"
#include "bench_util.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_ROUNDS  64
#define MAX_THREADS 32

enum copy_kind {
	BY_PREAD,
	BY_MAP_MEMCPY,       /* per slice: map (populated), memcpy, unmap */
	BY_MAP_STREAM,       /* the same with streaming stores */
	BY_CHUNKS_MEMCPY,    /* one map; chunks populated, then memcpy */
	BY_CHUNKS_STREAM,    /* the same with streaming stores */
	BY_CHUNKS_STREAM_DN, /* and each chunk's pages unmapped after */
};

struct reader {
	char name[64];
	unsigned gpufile_nthreads; /* 0: a hand-written reference */
	const char *map_copy;      /* host_map_copy for gpufile; NULL: auto */
	unsigned threads;
	size_t block; /* 0: the whole slice */
	enum copy_kind how;
	double best_of_round[MAX_ROUNDS];
	double median;
};

struct slice {
	int fd;
	char *buf;
	off_t off;
	size_t len, block;
	enum copy_kind how;
	int err;
};

static double median_of(const double *v, int n)
{
	double s[MAX_ROUNDS];

	memcpy(s, v, sizeof(*v) * (size_t)n);
	qsort(s, (size_t)n, sizeof(*s), bench_cmp_double);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static void *read_slice(void *p)
{
	struct slice *s = p;
	size_t block = s->block ? s->block : s->len;

	for (size_t pos = 0; pos < s->len;) {
		size_t want = s->len - pos < block ? s->len - pos : block;
		ssize_t got =
		    pread(s->fd, s->buf + pos, want, s->off + (off_t)pos);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			s->err = got < 0 ? errno : EIO;
			return NULL;
		}
		/* pread may return less than asked (above 2 GiB - 4 KiB
		 * Linux caps one call): continue from where it stopped. */
		pos += (size_t)got;
	}
	return NULL;
}

/* The library's own streaming copy (map_copy.c: AVX-512 or AVX2 stores,
 * under its SIGBUS guard), so that the references measure the copy
 * gpufile makes; ready() was checked before any reader runs. */
static void copy_nt(char *dst, const char *src, size_t n)
{
	if (gpufile__stream_copy(dst, src, n))
		abort(); /* the file shrank under the benchmark */
}

/* Chunks of one map of the whole file, taken in turn by every thread (as
 * the pool hands out tasks): each populated (MADV_POPULATE_READ), copied,
 * and for BY_CHUNKS_STREAM_DN unmapped again (MADV_DONTNEED). */
struct chunks {
	char *map, *buf;
	size_t size, block;
	enum copy_kind how;
	atomic_size_t next;
	atomic_int err;
};

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

static void *copy_chunks(void *p)
{
	struct chunks *c = p;

	for (;;) {
		size_t pos = atomic_fetch_add(&c->next, c->block);
		size_t n;

		if (pos >= c->size)
			return NULL;
		n = c->size - pos < c->block ? c->size - pos : c->block;
		if (madvise(c->map + pos, n, MADV_POPULATE_READ) &&
		    errno != EINVAL) {
			atomic_store(&c->err, errno);
			return NULL;
		}
		if (c->how == BY_CHUNKS_MEMCPY)
			memcpy(c->buf + pos, c->map + pos, n);
		else
			copy_nt(c->buf + pos, c->map + pos, n);
		if (c->how == BY_CHUNKS_STREAM_DN)
			madvise(c->map + pos, n, MADV_DONTNEED);
	}
}

static double chunks_parallel(int fd, char *buf, size_t size, unsigned threads,
                              size_t block, enum copy_kind how)
{
	pthread_t tid[MAX_THREADS];
	struct chunks c = {
	    .buf = buf, .size = size, .block = block, .how = how};
	double t0 = bench_now(), dt;

	c.map = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	if (c.map == MAP_FAILED) {
		perror("host_ref: mmap");
		return -1;
	}
	for (unsigned i = 0; i < threads; i++)
		if (pthread_create(&tid[i], NULL, copy_chunks, &c)) {
			fprintf(stderr, "host_ref: pthread_create failed\n");
			exit(1);
		}
	for (unsigned i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	munmap(c.map, size);
	dt = bench_now() - t0;
	if (atomic_load(&c.err)) {
		fprintf(stderr, "host_ref: madvise: %s\n",
		        strerror(atomic_load(&c.err)));
		return -1;
	}
	return (double)size / dt / 1e9;
}

/* The slice from a shared read-only map of the file (its page-cache pages,
 * mapped up front with MAP_POPULATE), copied by memcpy or by streaming
 * stores; the map and its teardown are timed too. */
static void map_slice(struct slice *s)
{
	char *m = mmap(NULL, s->len, PROT_READ, MAP_SHARED | MAP_POPULATE,
	               s->fd, s->off);

	if (m == MAP_FAILED) {
		s->err = errno;
		return;
	}
	if (s->how == BY_MAP_STREAM)
		copy_nt(s->buf, m, s->len);
	else
		memcpy(s->buf, m, s->len);
	munmap(m, s->len);
}

static void *copy_slice(void *p)
{
	struct slice *s = p;

	if (s->how == BY_PREAD)
		return read_slice(p);
	map_slice(s);
	return NULL;
}

/* One timed read of the whole file by T threads; returns GB/s or -1. */
static double pread_parallel(int fd, char *buf, size_t size, unsigned threads,
                             size_t block, enum copy_kind how)
{
	pthread_t tid[MAX_THREADS];
	struct slice s[MAX_THREADS];
	size_t slice = size / threads & ~(size_t)4095;
	double t0, dt;

	if (how >= BY_CHUNKS_MEMCPY)
		return chunks_parallel(fd, buf, size, threads, block, how);

	for (unsigned i = 0; i < threads; i++) {
		size_t off = slice * i;

		s[i] = (struct slice){
		    .fd = fd,
		    .buf = buf + off,
		    .off = (off_t)off,
		    .len = i + 1 == threads ? size - off : slice,
		    .block = block,
		    .how = how,
		};
	}
	t0 = bench_now();
	for (unsigned i = 0; i < threads; i++)
		if (pthread_create(&tid[i], NULL, copy_slice, &s[i])) {
			fprintf(stderr, "host_ref: pthread_create failed\n");
			exit(1);
		}
	for (unsigned i = 0; i < threads; i++)
		pthread_join(tid[i], NULL);
	dt = bench_now() - t0;
	for (unsigned i = 0; i < threads; i++)
		if (s[i].err) {
			fprintf(stderr, "host_ref: %s: %s\n",
			        how == BY_PREAD ? "pread" : "mmap",
			        strerror(s[i].err));
			return -1;
		}
	return (double)size / dt / 1e9;
}

static double gpufile_whole(gpufile_t *h, char *buf, size_t size)
{
	double t0 = bench_now();
	ssize_t got = gpufile_pread(h, buf, size, 0);

	if (got != (ssize_t)size) {
		fprintf(stderr, "host_ref: gpufile_pread returned %zd: %s\n",
		        got, gpufile_errmsg());
		return -1;
	}
	return (double)size / (bench_now() - t0) / 1e9;
}

/* The pool runs with the nthreads it started with: restart it so that
 * the setting applies, before timing. */
static int gpufile_use(unsigned nthreads)
{
	gpufile_release();
	if (gpufile_set_nthreads(nthreads) || gpufile_warmup()) {
		fprintf(stderr, "host_ref: nthreads %u: %s\n", nthreads,
		        gpufile_errmsg());
		return -1;
	}
	return 0;
}

static const char *block_name(size_t block, char *out, size_t len)
{
	if (!block)
		snprintf(out, len, "slice");
	else
		snprintf(out, len, "%zuMiB", block >> 20);
	return out;
}

int main(int argc, char **argv)
{
	static const unsigned ref_threads[] = {8, 16, 24, 32};
	static const size_t ref_blocks[] = {1 << 20, 4 << 20, 16 << 20, 0};
	static const unsigned gf_threads[] = {16, 24, 32};
	static const unsigned map_threads[] = {16, 32};
	/* on: AVX2's stores too, where the CPU has no AVX-512. */
	const int stream_ok = gpufile__stream_copy_ready(GPUFILE__MAP_COPY_ON);
	static const struct {
		unsigned threads;
		size_t block;
		enum copy_kind how;
		const char *name;
	} chunk_readers[] = {
	    {16, 4 << 20, BY_CHUNKS_MEMCPY, "chunks 16x4MiB memcpy"},
	    {16, 4 << 20, BY_CHUNKS_STREAM, "chunks 16x4MiB stream"},
	    {16, 4 << 20, BY_CHUNKS_STREAM_DN,
	     "chunks 16x4MiB stream+dontneed"},
	    {16, 1 << 20, BY_CHUNKS_STREAM, "chunks 16x1MiB stream"},
	    {16, 16 << 20, BY_CHUNKS_STREAM, "chunks 16x16MiB stream"},
	    {8, 4 << 20, BY_CHUNKS_STREAM, "chunks 8x4MiB stream"},
	    {24, 4 << 20, BY_CHUNKS_STREAM, "chunks 24x4MiB stream"},
	};
	struct reader readers[4 + 16 + 4 + 7];
	const char *path = NULL;
	int rounds = 5, repeat = 3, json = 0, nreaders = 0, fd;
	unsigned def_threads = 0, small_threads[8];
	int n_small = 0;
	struct reader *gf_def, *gf_best = NULL, *ref_best = NULL,
	                       *map_best = NULL;
	gpufile_t *h;
	struct stat st;
	size_t size;
	char *buf, bname[32];

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = 1;
		else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
			repeat = atoi(argv[++i]);
		else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
			char *p = argv[++i], *end;

			for (n_small = 0; *p && n_small < 8; n_small++) {
				unsigned long t = strtoul(p, &end, 10);

				if (end == p || t < 1 || t > MAX_THREADS)
					break;
				small_threads[n_small] = (unsigned)t;
				p = *end == ',' ? end + 1 : end;
			}
			if (*p || !n_small) {
				fprintf(stderr,
				        "host_ref: --threads wants a list "
				        "such as 1,2,4 (each 1..%d)\n",
				        MAX_THREADS);
				return 2;
			}
		} else if (!path && argv[i][0] != '-')
			path = argv[i];
		else {
			fprintf(stderr, "host_ref: unknown argument '%s'\n",
			        argv[i]);
			path = NULL;
			break;
		}
	}
	if (!path || rounds < 1 || rounds > MAX_ROUNDS || repeat < 1) {
		fprintf(stderr,
		        "usage: host_ref FILE [--rounds 1..%d] "
		        "[--repeat R>=1] [--json]\n",
		        MAX_ROUNDS);
		return 2;
	}
	fd = open(path, O_RDONLY);
	if (fd < 0 || fstat(fd, &st) || st.st_size < 4096 * MAX_THREADS) {
		fprintf(stderr, "host_ref: %s: %s\n", path,
		        fd < 0 ? strerror(errno)
		               : "need a file of at least 128 KiB");
		return 1;
	}
	size = (size_t)st.st_size;
	if (posix_memalign((void **)&buf, 4096, size)) {
		fprintf(stderr, "host_ref: cannot allocate %zu bytes\n", size);
		return 1;
	}
	memset(buf, 0, size);
	if (gpufile_get_nthreads(&def_threads) || gpufile_open(&h, path, "r")) {
		fprintf(stderr, "host_ref: %s\n", gpufile_errmsg());
		return 1;
	}

	readers[nreaders] = (struct reader){.gpufile_nthreads = def_threads};
	snprintf(readers[nreaders].name, sizeof(readers[0].name),
	         "gpufile nthreads=%u (default)", def_threads);
	nreaders++;
	if (n_small) {
		static const char *const modes[] = {"on", "off"};

		for (size_t m = 0; m < 2; m++) {
			readers[nreaders] =
			    (struct reader){.gpufile_nthreads = def_threads,
			                    .map_copy = modes[m]};
			snprintf(readers[nreaders].name,
			         sizeof(readers[0].name),
			         "gpufile host_map_copy=%s", modes[m]);
			nreaders++;
		}
		for (int t = 0; t < n_small; t++)
			for (size_t b = 1; b < 4; b += 2) {
				readers[nreaders] =
				    (struct reader){.threads = small_threads[t],
				                    .block = ref_blocks[b]};
				snprintf(readers[nreaders].name,
				         sizeof(readers[0].name), "pread %ux%s",
				         small_threads[t],
				         block_name(ref_blocks[b], bname,
				                    sizeof(bname)));
				nreaders++;
			}
		goto measure;
	}
	for (size_t i = 0; i < 3; i++) {
		if (gf_threads[i] == def_threads)
			continue;
		readers[nreaders] =
		    (struct reader){.gpufile_nthreads = gf_threads[i]};
		snprintf(readers[nreaders].name, sizeof(readers[0].name),
		         "gpufile nthreads=%u", gf_threads[i]);
		nreaders++;
	}
	for (size_t t = 0; t < 4; t++)
		for (size_t b = 0; b < 4; b++) {
			readers[nreaders] = (struct reader){
			    .threads = ref_threads[t], .block = ref_blocks[b]};
			snprintf(
			    readers[nreaders].name, sizeof(readers[0].name),
			    "pread %ux%s", ref_threads[t],
			    block_name(ref_blocks[b], bname, sizeof(bname)));
			nreaders++;
		}
	for (size_t t = 0; t < 2; t++)
		for (int how = BY_MAP_MEMCPY; how <= BY_MAP_STREAM; how++) {
			if (how == BY_MAP_STREAM && !stream_ok)
				continue;
			readers[nreaders] =
			    (struct reader){.threads = map_threads[t],
			                    .how = (enum copy_kind)how};
			snprintf(readers[nreaders].name,
			         sizeof(readers[0].name), "mmap %ux%s",
			         map_threads[t],
			         how == BY_MAP_STREAM ? "stream" : "memcpy");
			nreaders++;
		}
	for (size_t i = 0; i < 7; i++) {
		if (chunk_readers[i].how != BY_CHUNKS_MEMCPY && !stream_ok)
			continue;
		readers[nreaders] = (struct reader){
		    .threads = chunk_readers[i].threads,
		    .block = chunk_readers[i].block,
		    .how = chunk_readers[i].how,
		};
		snprintf(readers[nreaders].name, sizeof(readers[0].name), "%s",
		         chunk_readers[i].name);
		nreaders++;
	}

measure:
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k < nreaders; k++) {
			/* Rotate by about nreaders/rounds per round, so that
			 * each round starts with a different reader. */
			int step = (nreaders + rounds - 1) / rounds;
			struct reader *rd = &readers[(k + r * step) % nreaders];
			double best = 0;

			if (rd->gpufile_nthreads &&
			    (gpufile_use(rd->gpufile_nthreads) ||
			     gpufile_config_set("host_map_copy",
			                        rd->map_copy ? rd->map_copy
			                                     : "auto")))
				return 1;
			for (int i = 0; i < repeat; i++) {
				double g = rd->gpufile_nthreads
				               ? gpufile_whole(h, buf, size)
				               : pread_parallel(
				                     fd, buf, size, rd->threads,
				                     rd->block, rd->how);
				if (g < 0)
					return 1;
				if (g > best)
					best = g;
			}
			rd->best_of_round[r] = best;
		}

	gf_def = &readers[0];
	for (int k = 0; k < nreaders; k++) {
		struct reader *rd = &readers[k];

		rd->median = median_of(rd->best_of_round, rounds);
		printf("host_ref: %-30s median %7.2f GB/s  rounds:", rd->name,
		       rd->median);
		for (int r = 0; r < rounds; r++)
			printf(" %.2f", rd->best_of_round[r]);
		printf("\n");
		if (rd->gpufile_nthreads) {
			if (rd->map_copy)
				continue; /* a setting, not a thread count */
			if (!gf_best || rd->median > gf_best->median)
				gf_best = rd;
		} else if (rd->how != BY_PREAD) {
			if (!map_best || rd->median > map_best->median)
				map_best = rd;
		} else if (!ref_best || rd->median > ref_best->median) {
			ref_best = rd;
		}
	}
	printf("host_ref: %zu bytes, %d rounds, best of %d each\n", size,
	       rounds, repeat);
	printf("host_ref: gpufile at defaults %.2f GB/s; fastest reference "
	       "%s %.2f GB/s; ratio %.3f (target >= 0.95)\n",
	       gf_def->median, ref_best->name, ref_best->median,
	       gf_def->median / ref_best->median);
	printf("host_ref: best gpufile setting %s %.2f GB/s; ratio %.3f\n",
	       gf_best->name, gf_best->median,
	       gf_best->median / ref_best->median);
	if (map_best)
		printf("host_ref: fastest copy from a map %s %.2f GB/s; "
		       "gpufile at defaults / it %.3f, it / fastest pread "
		       "%.3f\n",
		       map_best->name, map_best->median,
		       gf_def->median / map_best->median,
		       map_best->median / ref_best->median);
	if (json) {
		printf("{\"bytes\": %zu, \"rounds\": %d, \"repeat\": %d, "
		       "\"gpufile_default_nthreads\": %u, "
		       "\"gpufile_default_gbps\": %.4f, "
		       "\"gpufile_best\": \"%s\", \"gpufile_best_gbps\": %.4f, "
		       "\"ref_best\": \"%s\", \"ref_best_gbps\": %.4f, "
		       "\"ratio_default\": %.4f, \"ratio_best\": %.4f, "
		       "\"readers\": {",
		       size, rounds, repeat, def_threads, gf_def->median,
		       gf_best->name, gf_best->median, ref_best->name,
		       ref_best->median, gf_def->median / ref_best->median,
		       gf_best->median / ref_best->median);
		for (int k = 0; k < nreaders; k++)
			printf("%s\"%s\": %.4f", k ? ", " : "", readers[k].name,
			       readers[k].median);
		printf("}}\n");
	}
	gpufile_close(h);
	gpufile_release();
	free(buf);
	close(fd);
	return 0;
}
