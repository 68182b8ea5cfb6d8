/*
 * host_read: reads a whole file into host memory with gpufile_pread, with
 * the default settings (or GPUFILE_* variables), N times, and reports the
 * best and median throughput. The buffer is allocated and touched once,
 * before timing, and the worker pool is warmed up, so that the repeats
 * measure only the reads.
 *
 *	host_read FILE [REPEAT] [--chunk BYTES] [--json]
 *
 * With --chunk, each repeat reads the file as consecutive requests of
 * BYTES into one BYTES-sized buffer, the way fio reuses one buffer per job:
 * this separates gpufile's own cost from that of filling a file-sized
 * buffer, whose pages do not stay in the CPU caches.
 */
#include "gpufile.h"
#include "bench_util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fail(const char *what)
{
	fprintf(stderr, "host_read: %s: %s\n", what, gpufile_errmsg());
	return 1;
}

int main(int argc, char **argv)
{
	const char *path = NULL;
	long repeat = 10;
	size_t chunk = 0, buf_len;
	int json = 0;
	gpufile_t *h;
	int64_t size;
	void *buf;
	double *gbps, best, median;
	size_t task_size = 0;
	unsigned nthreads = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			json = 1;
		else if (strcmp(argv[i], "--chunk") == 0 && i + 1 < argc)
			chunk = strtoull(argv[++i], NULL, 10);
		else if (!path)
			path = argv[i];
		else
			repeat = strtol(argv[i], NULL, 10);
	}
	if (!path || repeat < 1) {
		fprintf(stderr,
		        "usage: host_read FILE [REPEAT] [--chunk BYTES] "
		        "[--json]\n");
		return 2;
	}
	if (gpufile_get_nthreads(&nthreads) ||
	    gpufile_get_task_size(&task_size))
		return fail("settings");
	if (gpufile_open(&h, path, "r"))
		return fail("open");
	size = gpufile_size(h);
	if (size <= 0)
		return fail("size");
	if (chunk == 0 || chunk > (size_t)size)
		chunk = (size_t)size;
	buf_len = chunk;
	if (posix_memalign(&buf, 4096, buf_len)) {
		fprintf(stderr, "host_read: out of memory\n");
		return 1;
	}
	memset(buf, 0, buf_len);
	gbps = calloc((size_t)repeat, sizeof(*gbps));
	if (!gbps || gpufile_warmup())
		return fail("warmup");
	for (long i = 0; i < repeat; i++) {
		double t0 = bench_now(), dt;

		for (int64_t off = 0; off < size; off += (int64_t)chunk) {
			size_t len = (size_t)(size - off) < chunk
			                 ? (size_t)(size - off)
			                 : chunk;

			if (gpufile_pread(h, buf, len, off) != (ssize_t)len)
				return fail("read");
		}
		dt = bench_now() - t0;
		gbps[i] = (double)size / dt / 1e9;
	}
	qsort(gbps, (size_t)repeat, sizeof(*gbps), bench_cmp_double);
	best = gbps[repeat - 1];
	median = repeat % 2 ? gbps[repeat / 2]
	                    : (gbps[repeat / 2 - 1] + gbps[repeat / 2]) / 2;
	if (json)
		printf("{\"bytes\": %" PRId64 ", \"repeat\": %ld, "
		       "\"nthreads\": %u, \"task_size\": %zu, \"chunk\": %zu, "
		       "\"gbps_best\": %.4f, \"gbps_median\": %.4f}\n",
		       size, repeat, nthreads, task_size, chunk, best, median);
	else
		printf("host_read: %" PRId64 " bytes x %ld, nthreads %u, "
		       "task_size %zu, requests of %zu: best %.3f GB/s, "
		       "median %.3f GB/s\n",
		       size, repeat, nthreads, task_size, chunk, best, median);
	free(gbps);
	free(buf);
	gpufile_close(h);
	return 0;
}
