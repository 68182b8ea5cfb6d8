/*
 * The cost of the always-on counters: 4 KiB reads from the page cache
 * into host memory through gpufile_pread, timed in a build with counters
 * (stats_overhead_on) and one compiled with -DGPUFILE_NO_STATS
 * (stats_overhead_off). Both compile the library sources into the program
 * with the same flags, so the counters are the only difference.
 *
 *   stats_overhead_on [--file PATH] [--reads N] [--rounds R]
 *                     [--other PATH_TO_stats_overhead_off]
 *
 * Each round prints "stats=on|off ns_per_read=X". With --other, this
 * program only drives: it runs one round of itself and one of the other
 * build as fresh processes, alternating (ABBA) so that frequency and
 * cache drift hit both alike, and prints the medians and their
 * difference.
 */
#define _GNU_SOURCE
#include "gpufile.h"
#include "internal.h" /* gpufile__stats_request, for the micro round */

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static int make_file(const char *path)
{
	char *buf;
	int fd;

	if (access(path, R_OK) == 0)
		return 0;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	buf = malloc(1 << 20);
	if (fd < 0 || !buf)
		return -1;
	for (unsigned i = 0; i < (1 << 20); i++)
		buf[i] = (char)(i * 31);
	for (unsigned done = 0; done < FILE_SIZE; done += 1 << 20)
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

/* The counters alone: ns per gpufile__stats_request() call, as made once
 * per request when it completes (the latency clock reads are pool.c's
 * and are not counted here). */
static double update_ns(long n)
{
	double t0 = now();

	for (long i = 0; i < n; i++) {
		gpufile__stats_request(GPUFILE_PATH_HOST, 0, READ_SIZE, 1,
		                       READ_SIZE, 1000 + (uint64_t)i);
		__asm__ __volatile__("" ::: "memory");
	}
	return (now() - t0) * 1e9 / (double)n;
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
                          double *update)
{
	char cmd[2048], line[256];
	double ns = -1;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "'%s' --file '%s' --reads %ld --rounds 1",
	         other, path, nreads);
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
	}
	pclose(f);
	return ns;
}

int main(int argc, char **argv)
{
	const char *path = "/tmp/gpufile-stats-overhead.dat", *other = NULL;
	long nreads = 200000;
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
		else if (strcmp(argv[i], "--other") == 0)
			other = argv[i + 1];
		else
			return fprintf(stderr, "unknown option %s\n", argv[i]),
			       2;
	}
	if (rounds < 1 || rounds > 64 || nreads < 1)
		return fprintf(stderr, "bad --rounds or --reads\n"), 2;
	if (make_file(path))
		return fprintf(stderr, "%s: cannot create\n", path), 1;
	if (other) {
		/* Both builds run as fresh processes, in ABBA order, so that
		 * neither gets a warmer cache or a later clock. */
		char exe[4096];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		double a, b, ua[64], ub[64];

		if (n <= 0)
			return 1;
		exe[n] = '\0';
		for (int r = 0; r < rounds; r++) {
			int flip = r % 2;
			double ux = 0, uy = 0;
			double x =
			    other_round(flip ? other : exe, path, nreads, &ux);
			double y =
			    other_round(flip ? exe : other, path, nreads, &uy);

			self[r] = flip ? y : x;
			peer[r] = flip ? x : y;
			ua[r] = flip ? uy : ux;
			ub[r] = flip ? ux : uy;
			if (self[r] < 0 || peer[r] < 0)
				return fprintf(stderr, "a round failed\n"), 1;
			printf("round %d: stats=%s %.1f ns/read, other %.1f "
			       "ns/read\n",
			       r + 1, MODE, self[r], peer[r]);
			fflush(stdout);
		}
		printf("counter update alone: stats=%s %.2f ns, other %.2f ns "
		       "per request\n",
		       MODE, median(ua, rounds), median(ub, rounds));
		a = median(self, rounds);
		b = median(peer, rounds);
		printf("median of %d rounds of %ld reads: stats=%s %.1f "
		       "ns/read, other %.1f ns/read; difference %+.2f%%\n",
		       rounds, nreads, MODE, a, b, (a - b) / b * 100.0);
		return 0;
	}
	if (gpufile_open(&h, path, "r"))
		return fprintf(stderr, "%s: %s\n", path, gpufile_errmsg()), 1;
	if (posix_memalign((void **)&buf, 4096, READ_SIZE))
		return 1;
	/* Warm the page cache and the library (pool, settings). */
	if (round_ns(h, buf, FILE_SIZE / READ_SIZE) < 0)
		return fprintf(stderr, "read: %s\n", gpufile_errmsg()), 1;
	printf("stats=%s ns_per_update=%.2f\n", MODE, update_ns(10000000));
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
