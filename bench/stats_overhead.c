/*
 * The cost of the always-on counters: 4 KiB reads from the page cache
 * into host memory through gpufile_pread, timed in a build with counters
 * (stats_overhead_on) and one compiled with -DGPUFILE_NO_STATS
 * (stats_overhead_off). Both compile the library sources into the program
 * with the same flags, so the counters are the only difference.
 *
 *   stats_overhead_on [--file PATH] [--reads N] [--rounds R]
 *                     [--large-mib M] [--other PATH_TO_stats_overhead_off]
 *
 * Each round prints "stats=on|off ns_per_read=X". With --large-mib M
 * (default 1024; 0: none) each round also reads a warm file of M MiB
 * whole into host memory with one gpufile_pread at the default task_size
 * and worker count, timed by the wall clock ("ms_per_large_read="): the
 * read whose tasks are credited one by one as they end (issue 35: the
 * cost must stay below 1% of a warm 4 GiB read). With --other, this
 * program only drives: it runs one round of itself and one of the other
 * build as fresh processes, alternating (ABBA) so that frequency and
 * cache drift hit both alike, and prints the medians and their
 * difference, and what the counters of one task cost against the time
 * of one task of the large read.
 */
#define _GNU_SOURCE
#include "gpufile.h"
#include "internal.h" /* gpufile__stats_request, for the micro round */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef GPUFILE_NO_STATS
#define MODE "off"
#else
#define MODE "on"
#endif

#define READ_SIZE 4096
#define FILE_SIZE (64u << 20)

/* CPU time of this thread: the reads of one 4 KiB task run inline in the
 * calling thread, and time other processes take the CPU from it (this
 * machine is shared) does not count. */
static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Makes path a file of size bytes, byte i of each MiB (char)(i * mul),
 * kept between runs: a file already there is kept when keep_any (the
 * --file given, never overwritten), else when it has that size. */
static int make_data(const char *path, uint64_t size, unsigned mul,
                     int keep_any)
{
	struct stat st;
	char *buf;
	int fd;

	if (keep_any ? access(path, R_OK) == 0
	             : stat(path, &st) == 0 && (uint64_t)st.st_size == size)
		return 0;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	buf = malloc(1 << 20);
	if (fd < 0 || !buf)
		return -1;
	for (unsigned i = 0; i < (1 << 20); i++)
		buf[i] = (char)(i * mul);
	for (uint64_t done = 0; done < size; done += 1 << 20)
		if (write(fd, buf, 1 << 20) != 1 << 20)
			return -1;
	free(buf);
	return close(fd);
}

/* One round: nreads reads of 4 KiB at pseudo-random aligned offsets.
 * Returns ns per read, or a negative number on error. */
static double round_ns(gpufile_t *h, char *buf, long nreads)
{
	uint64_t x = 0x9E3779B97F4A7C15ull;
	double t0 = now();

	for (long i = 0; i < nreads; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		int64_t off =
		    (int64_t)(x % (FILE_SIZE / READ_SIZE)) * READ_SIZE;
		if (gpufile_pread(h, buf, READ_SIZE, off) != READ_SIZE)
			return -1;
	}
	return (now() - t0) * 1e9 / (double)nreads;
}

/* The record of per-file counters the counter rounds credit, as pool.c
 * credits a request's handle's. */
static struct gpufile__stats_file_ref file_ref;

/* The counters alone: ns per request of one task as pool.c counts it
 * (it starts, its task ends, it ends, in the process's counters and its
 * file's; the latency clock reads are pool.c's and are not counted
 * here). */
static double update_ns(long n)
{
	double t0 = now();

	for (long i = 0; i < n; i++) {
		gpufile__stats_request_begin(&file_ref, 1, READ_SIZE,
		                             1000 + (uint64_t)i);
		gpufile__stats_task(&file_ref, GPUFILE_PATH_HOST, 0, READ_SIZE);
		gpufile__stats_request_end(&file_ref, GPUFILE_PATH_HOST, 0,
		                           READ_SIZE, READ_SIZE, READ_SIZE,
		                           1000 + (uint64_t)i);
		__asm__ __volatile__("" ::: "memory");
	}
	return (now() - t0) * 1e9 / (double)n;
}

/* ns per task credited (gpufile__stats_task alone: what a task of a large
 * request adds). */
static double task_update_ns(long n)
{
	double t0 = now();

	for (long i = 0; i < n; i++) {
		gpufile__stats_task(&file_ref, GPUFILE_PATH_HOST, 0, 4u << 20);
		__asm__ __volatile__("" ::: "memory");
	}
	return (now() - t0) * 1e9 / (double)n;
}

static double wall(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One warm read of the whole large file into buf; ms, or < 0. */
static double large_ms(gpufile_t *h, char *buf, uint64_t size)
{
	double t0 = wall();

	if (gpufile_pread(h, buf, size, 0) != (ssize_t)size)
		return -1;
	return (wall() - t0) * 1e3;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Runs one round of the other build; returns its ns per read. */
static double other_round(const char *other, const char *path, long nreads,
                          long large_mib, double *update, double *large,
                          double *task)
{
	char cmd[2048], line[256];
	double ns = -1;
	FILE *f;

	snprintf(cmd, sizeof(cmd),
	         "'%s' --file '%s' --reads %ld --rounds 1 --large-mib %ld",
	         other, path, nreads, large_mib);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "ns_per_read=");
		if (p)
			ns = atof(p + 12);
		p = strstr(line, "ns_per_update=");
		if (p)
			*update = atof(p + 14);
		p = strstr(line, "ns_per_task_update=");
		if (p)
			*task = atof(p + 19);
		p = strstr(line, "ms_per_large_read=");
		if (p)
			*large = atof(p + 18);
	}
	pclose(f);
	return ns;
}

int main(int argc, char **argv)
{
	const char *path = "/tmp/gpufile-stats-overhead.dat", *other = NULL;
	long nreads = 200000, large_mib = 1024;
	double large[64], large_peer[64];
	int rounds = 9;
	double self[64], peer[64];
	char *buf;
	gpufile_t *h;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--file") == 0)
			path = argv[i + 1];
		else if (strcmp(argv[i], "--reads") == 0)
			nreads = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--rounds") == 0)
			rounds = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--large-mib") == 0)
			large_mib = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--other") == 0)
			other = argv[i + 1];
		else
			return fprintf(stderr, "unknown option %s\n", argv[i]),
			       2;
	}
	if (rounds < 1 || rounds > 64 || nreads < 1 || large_mib < 0 ||
	    large_mib > (1l << 20))
		return fprintf(stderr, "bad --rounds or --reads\n"), 2;
	if (make_data(path, FILE_SIZE, 31, 1))
		return fprintf(stderr, "%s: cannot create\n", path), 1;
	if (other) {
		/* Both builds run as fresh processes, in ABBA order, so that
		 * neither gets a warmer cache or a later clock. */
		char exe[4096];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		double a, b, ua[64], ub[64], ta[64], tb[64];

		if (n <= 0)
			return 1;
		exe[n] = '\0';
		for (int r = 0; r < rounds; r++) {
			int flip = r % 2;
			double ux = 0, uy = 0, lx = 0, ly = 0, tx = 0, ty = 0;
			double x = other_round(flip ? other : exe, path, nreads,
			                       large_mib, &ux, &lx, &tx);
			double y = other_round(flip ? exe : other, path, nreads,
			                       large_mib, &uy, &ly, &ty);

			self[r] = flip ? y : x;
			peer[r] = flip ? x : y;
			ua[r] = flip ? uy : ux;
			ub[r] = flip ? ux : uy;
			ta[r] = flip ? ty : tx;
			tb[r] = flip ? tx : ty;
			large[r] = flip ? ly : lx;
			large_peer[r] = flip ? lx : ly;
			if (self[r] < 0 || peer[r] < 0 || large[r] < 0 ||
			    large_peer[r] < 0)
				return fprintf(stderr, "a round failed\n"), 1;
			printf("round %d: stats=%s %.1f ns/read, other %.1f "
			       "ns/read; %ld MiB read: %.1f ms, other %.1f "
			       "ms\n",
			       r + 1, MODE, self[r], peer[r], large_mib,
			       large[r], large_peer[r]);
			fflush(stdout);
		}
		printf("counter update alone: stats=%s %.2f ns, other %.2f ns "
		       "per one-task request; %.2f ns, other %.2f ns per "
		       "task credited\n",
		       MODE, median(ua, rounds), median(ub, rounds),
		       median(ta, rounds), median(tb, rounds));
		a = median(self, rounds);
		b = median(peer, rounds);
		printf("median of %d rounds of %ld reads: stats=%s %.1f "
		       "ns/read, other %.1f ns/read; difference %+.2f%%\n",
		       rounds, nreads, MODE, a, b, (a - b) / b * 100.0);
		if (large_mib) {
			double ms = median(large, rounds);
			double ms_peer = median(large_peer, rounds);
			double tasks = (double)large_mib / 4.0; /* 4 MiB */
			double counters_ms =
			    tasks *
			    (median(ta, rounds) - median(tb, rounds) +
			     median(ua, rounds) / tasks) /
			    1e6;

			printf("median of %d warm reads of %ld MiB: stats=%s "
			       "%.1f ms (%.2f GB/s), other %.1f ms; "
			       "difference %+.2f%% (wall clock, noise "
			       "included)\n",
			       rounds, large_mib, MODE, ms,
			       (double)large_mib * 1048576.0 / ms / 1e6,
			       ms_peer, (ms - ms_peer) / ms_peer * 100.0);
			printf("counters of that read (%.0f tasks of 4 MiB and "
			       "its request): %.4f ms = %.5f%% of the read\n",
			       tasks, counters_ms, counters_ms / ms * 100.0);
		}
		return 0;
	}
	if (gpufile_open(&h, path, "r"))
		return fprintf(stderr, "%s: %s\n", path, gpufile_errmsg()), 1;
	if (posix_memalign((void **)&buf, 4096, READ_SIZE))
		return 1;
	/* Warm the page cache and the library (pool, settings). */
	if (round_ns(h, buf, FILE_SIZE / READ_SIZE) < 0)
		return fprintf(stderr, "read: %s\n", gpufile_errmsg()), 1;
	gpufile__stats_file_hold(&file_ref, "stats-overhead-counters");
	printf("stats=%s ns_per_update=%.2f\n", MODE, update_ns(10000000));
	printf("stats=%s ns_per_task_update=%.2f\n", MODE,
	       task_update_ns(10000000));
	if (large_mib) {
		const uint64_t size = (uint64_t)large_mib << 20;
		char large_path[4200], *big;
		gpufile_t *hl;

		snprintf(large_path, sizeof(large_path), "%s.%ldm", path,
		         large_mib);
		if (make_data(large_path, size, 37, 0) ||
		    gpufile_open(&hl, large_path, "r"))
			return fprintf(stderr, "%s: cannot make or open\n",
			               large_path),
			       1;
		big = aligned_alloc(4096, size);
		if (!big)
			return fprintf(stderr, "no memory for %ld MiB\n",
			               large_mib),
			       1;
		memset(big, 1, size);
		/* The first warms the page cache; the best of two is the
		 * round's (this machine is shared). */
		double ms = large_ms(hl, big, size), best = -1;
		for (int i = 0; i < 2 && ms >= 0; i++) {
			ms = large_ms(hl, big, size);
			if (ms >= 0 && (best < 0 || ms < best))
				best = ms;
		}
		printf("stats=%s ms_per_large_read=%.3f\n", MODE,
		       ms < 0 ? -1.0 : best);
		free(big);
		gpufile_close(hl);
	}
	for (int r = 0; r < rounds; r++) {
		self[r] = round_ns(h, buf, nreads);
		if (self[r] < 0)
			return fprintf(stderr, "read: %s\n", gpufile_errmsg()),
			       1;
		printf("stats=%s ns_per_read=%.1f\n", MODE, self[r]);
		fflush(stdout);
	}
	gpufile_close(h);
	free(buf);
	return 0;
}
