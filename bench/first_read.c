/*
 * first_read: the first gpufile read in this process, of a whole file into
 * GPU memory, timed. Run it as a fresh process per measurement
 * (bench/first_read.sh does, interleaving settings).
 *
 *   first_read FILE
 *
 * The device buffer is allocated (and the CUDA context created) before
 * the clock starts: what is timed is gpufile_pread alone, as a program
 * that loads a model sees it (its pool start, pinned buffers, the path
 * decision and, where chosen, cuFile's driver and registration). Prints
 * "seconds path bytes". Exits 77 without a GPU.
 */
#define _GNU_SOURCE
#include "gpufile.h"

#include <stdio.h>
#include <stdlib.h>
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
	double t0, t1;

	if (argc != 2) {
		fprintf(stderr, "usage: first_read FILE\n");
		return 2;
	}
	if (gpufile_cuda_device_count() <= 0) {
		fprintf(stderr, "first_read: no GPU: %s\n", gpufile_errmsg());
		return 77;
	}
	if (gpufile_open(&h, argv[1], "r")) {
		fprintf(stderr, "first_read: %s\n", gpufile_errmsg());
		return 1;
	}
	size = gpufile_size(h);
	if (size <= 0 || gpufile_device_alloc(0, (size_t)size, &dev)) {
		fprintf(stderr, "first_read: cannot allocate %lld bytes: %s\n",
		        (long long)size, gpufile_errmsg());
		return 1;
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
	printf("%.6f %s %lld\n", t1 - t0, gpufile_path_name(path),
	       (long long)size);
	gpufile_close(h);
	gpufile_device_free(dev);
	return 0;
}
