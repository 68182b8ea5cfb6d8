/*
 * first_read: the first gpufile read in this process, of a whole file into
 * GPU memory, timed. Run it as a fresh process per measurement
 * (bench/first_read.sh does, interleaving settings).
 *
 *   first_read [--warmup] FILE
 *
 * The device buffer is allocated (and the CUDA context created) before
 * the clock starts: what is timed is gpufile_pread alone, as a program
 * that loads a model sees it (its pool start, pinned buffers, the path
 * decision and, where chosen, cuFile's driver and registration). Prints
 * "seconds path bytes". With --warmup, gpufile_warmup() runs first, timed
 * on its own (what a program can take off its first read's path), and the
 * line is "seconds path bytes warmup-seconds". Exits 77 without a GPU.
 */
#define _GNU_SOURCE
#include "gpufile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	gpufile_path_t path = GPUFILE_PATH_POSIX;
	gpufile_t *h;
	void *dev = NULL;
	int64_t size;
	ssize_t n;
	double t0, t1, w0 = 0, w1 = 0;
	int warmup = argc == 3 && !strcmp(argv[1], "--warmup");
	const char *file = argv[argc - 1];

	if (argc != 2 + warmup) {
		fprintf(stderr, "usage: first_read [--warmup] FILE\n");
		return 2;
	}
	if (gpufile_cuda_device_count() <= 0) {
		fprintf(stderr, "first_read: no GPU: %s\n", gpufile_errmsg());
		return 77;
	}
	if (gpufile_open(&h, file, "r")) {
		fprintf(stderr, "first_read: %s\n", gpufile_errmsg());
		return 1;
	}
	size = gpufile_size(h);
	if (size <= 0 || gpufile_device_alloc(0, (size_t)size, &dev)) {
		fprintf(stderr, "first_read: cannot allocate %lld bytes: %s\n",
		        (long long)size, gpufile_errmsg());
		return 1;
	}
	if (warmup) {
		w0 = now();
		if (gpufile_warmup() < 0) {
			fprintf(stderr, "first_read: gpufile_warmup: %s\n",
			        gpufile_errmsg());
			return 1;
		}
		w1 = now();
	}
	t0 = now();
	n = gpufile_pread(h, dev, (size_t)size, 0);
	t1 = now();
	if (n != size) {
		fprintf(stderr, "first_read: read %zd of %lld bytes: %s\n", n,
		        (long long)size, gpufile_errmsg());
		return 1;
	}
	gpufile_path_info(h, &path, NULL, 0);
	printf("%.6f %s %lld", t1 - t0, gpufile_path_name(path),
	       (long long)size);
	if (warmup)
		printf(" %.6f", w1 - w0);
	printf("\n");
	gpufile_close(h);
	gpufile_device_free(dev);
	return 0;
}
