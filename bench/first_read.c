/*
 * first_read: the first gpufile read in this process, of a whole file into
 * GPU memory, timed. Run it as a fresh process per measurement
 * (bench/first_read.sh does, interleaving settings).
 *
 *   first_read [--warmup] [--mark] FILE
 *
 * The device buffer is allocated (and the CUDA context created) before
 * the clock starts: what is timed is gpufile_pread alone, as a program
 * that loads a model sees it (its pool start, pinned buffers, the path
 * decision and, where chosen, cuFile's driver and registration). Prints
 * "seconds path bytes". With --warmup, gpufile_warmup() runs first, timed
 * on its own (what a program can take off its first read's path), and the
 * line is "seconds path bytes warmup-seconds". With --mark, a write to
 * file descriptor -1 of "first_read: timed read begins" (and "ends") lies
 * on each side of the timed call, for finding it in an strace log. Exits
 * 77 without a GPU.
 */
#define _GNU_SOURCE
#include "gpufile.h"
#include "bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* A system call strace shows and nothing else does: the argument names it. */
static void mark(int on, const char *what)
{
	if (on && write(-1, what, strlen(what)) != -1)
		abort();
}

int main(int argc, char **argv)
{
	gpufile_path_t path = GPUFILE_PATH_POSIX;
	gpufile_t *h;
	void *dev = NULL;
	int64_t size;
	ssize_t n;
	double t0, t1, w0 = 0, w1 = 0;
	int warmup = 0, marks = 0, i;
	const char *file = argv[argc - 1];

	for (i = 1; i < argc - 1; i++) {
		if (!strcmp(argv[i], "--warmup"))
			warmup = 1;
		else if (!strcmp(argv[i], "--mark"))
			marks = 1;
		else
			break;
	}
	if (argc < 2 || i != argc - 1 || !strncmp(file, "--", 2)) {
		fprintf(stderr, "usage: first_read [--warmup] [--mark] FILE\n");
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
		w0 = bench_now();
		if (gpufile_warmup() < 0) {
			fprintf(stderr, "first_read: gpufile_warmup: %s\n",
			        gpufile_errmsg());
			return 1;
		}
		w1 = bench_now();
	}
	mark(marks, "first_read: timed read begins");
	t0 = bench_now();
	n = gpufile_pread(h, dev, (size_t)size, 0);
	t1 = bench_now();
	mark(marks, "first_read: timed read ends");
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
