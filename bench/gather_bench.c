/*
 * gpufile_pread_gather's two ways of copying a run, on a warm file: from
 * a map of the runs' span (gpufile__gather_map = 1, the default) and by
 * pread (0), against a hand-written reference: T threads each pread()ing
 * its share of the runs. The runs are what safetensors' get_slice reads
 * for a column block of tensor parallelism: BLOCKS blocks of ROWS runs of
 * RUN bytes at a stride of STRIDE (defaults: 64 blocks of 4096 runs of
 * 2 KiB at 16 KiB, a 1024-column bf16 block of each of 64 weights of
 * 4096 x 8192), into one reused host buffer.
 *
 *   gather_bench FILE [--rounds N] [--run B] [--stride B] [--rows N]
 *
 * Rounds interleave the readers; each prints the median and best seconds
 * of all blocks and GB/s of gathered bytes (1e9 bytes), and the ratio of
 * each gpufile way to the reference. The file must hold BLOCKS * ROWS *
 * STRIDE bytes and should be in the page cache (cat it first).
 */
#define _GNU_SOURCE
#include "bench_util.h"

#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCKS      64
#define REF_THREADS 16

static size_t run = 2048, stride = 16384, rows = 4096;

struct ref_arg {
	int fd;
	char *buf;
	const int64_t *offs;
	size_t first, count;
	int failed;
};

static void *ref_thread(void *p)
{
	struct ref_arg *a = p;

	for (size_t i = a->first; i < a->first + a->count; i++)
		if (pread(a->fd, a->buf + i * run, run, a->offs[i]) !=
		    (ssize_t)run)
			a->failed = 1;
	return NULL;
}

/* The reference: REF_THREADS threads, each its contiguous share of the
 * block's runs. Returns 0 or -1. */
static int ref_gather(int fd, char *buf, const int64_t *offs)
{
	pthread_t t[REF_THREADS];
	struct ref_arg a[REF_THREADS];
	size_t per = (rows + REF_THREADS - 1) / REF_THREADS;
	int failed = 0;

	for (int k = 0; k < REF_THREADS; k++) {
		size_t first = k * per < rows ? k * per : rows;
		size_t count = first + per <= rows ? per : rows - first;

		a[k] = (struct ref_arg){fd, buf, offs, first, count, 0};
		pthread_create(&t[k], NULL, ref_thread, &a[k]);
	}
	for (int k = 0; k < REF_THREADS; k++) {
		pthread_join(t[k], NULL);
		failed |= a[k].failed;
	}
	return failed ? -1 : 0;
}

int main(int argc, char **argv)
{
	const char *names[] = {"gpufile, map", "gpufile, pread",
	                       "reference: 16 threads x pread"};
	double t[3][64], med[3];
	int rounds = 5, fd;
	unsigned nthreads = 0;
	gpufile_t *h = NULL;
	int64_t *offs;
	char *buf;

	if (argc < 2) {
		fprintf(stderr,
		        "usage: gather_bench FILE [--rounds N] [--run B] "
		        "[--stride B] [--rows N]\n");
		return 2;
	}
	for (int i = 2; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--rounds"))
			rounds = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--run"))
			run = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--stride"))
			stride = strtoull(argv[i + 1], NULL, 0);
		else if (!strcmp(argv[i], "--rows"))
			rows = strtoull(argv[i + 1], NULL, 0);
	}
	if (rounds < 1 || rounds > 64 || !run || stride < run || !rows) {
		fprintf(stderr,
		        "gather_bench: bad --rounds/--run/--stride/--rows\n");
		return 2;
	}
	if (gpufile_open(&h, argv[1], "r") != 0 ||
	    (fd = open(argv[1], O_RDONLY)) < 0) {
		fprintf(stderr, "gather_bench: %s: %s\n", argv[1],
		        gpufile_errmsg());
		return 1;
	}
	if ((uint64_t)gpufile_size(h) < (uint64_t)BLOCKS * rows * stride) {
		fprintf(stderr, "gather_bench: %s holds fewer than %zu bytes\n",
		        argv[1], (size_t)BLOCKS * rows * stride);
		return 1;
	}
	offs = malloc(sizeof(*offs) * rows * BLOCKS);
	buf = malloc(run * rows);
	if (!offs || !buf)
		return 1;
	/* Block b's runs: the second column block of weight b. */
	for (size_t b = 0; b < BLOCKS; b++)
		for (size_t i = 0; i < rows; i++)
			offs[b * rows + i] =
			    (int64_t)((b * rows + i) * stride + run);
	gpufile_warmup();
	for (int r = 0; r < rounds; r++) {
		for (int k = 0; k < 3; k++) {
			int w = (k + r) % 3;
			double t0 = bench_now();

			for (size_t b = 0; b < BLOCKS; b++) {
				const int64_t *o = offs + b * rows;
				ssize_t n = 0;

				if (w < 2) {
					gpufile__gather_map = w == 0;
					n = gpufile_pread_gather(h, buf, run,
					                         rows, o);
				} else if (ref_gather(fd, buf, o) == 0) {
					n = (ssize_t)(run * rows);
				}
				if (n != (ssize_t)(run * rows)) {
					fprintf(stderr, "%s: %s\n", names[w],
					        n < 0 ? gpufile_errmsg()
					              : "short");
					return 1;
				}
			}
			t[w][r] = bench_now() - t0;
		}
	}
	gpufile_get_nthreads(&nthreads);
	printf("%d blocks of %zu runs of %zu bytes at a stride of %zu, %d "
	       "rounds, nthreads %u\n",
	       BLOCKS, rows, run, stride, rounds, nthreads);
	for (int w = 0; w < 3; w++) {
		double best;

		qsort(t[w], rounds, sizeof(double), bench_cmp_double);
		med[w] = t[w][rounds / 2];
		best = t[w][0];
		printf("%-32s median %.4f s best %.4f s  %6.2f GB/s\n",
		       names[w], med[w], best,
		       (double)BLOCKS * rows * run / med[w] / 1e9);
	}
	printf("map / reference %.2f, pread / reference %.2f (>1: faster)\n",
	       med[2] / med[0], med[2] / med[1]);
	gpufile_close(h);
	close(fd);
	return 0;
}
