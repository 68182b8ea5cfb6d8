/*
 * write_bench: writes SIZE bytes from host memory (or from device memory
 * of a GPU) into a new file with one gpufile_pwrite, REPEAT times, and
 * reports each throughput, the best and the median. The source buffer is
 * filled (and so touched) once, before timing, and the worker pool and
 * the bounce buffers are warmed up by a first small write, so that the
 * repeats measure only the writes (for a buffered write, the warm-up is
 * a write of SIZE: see main).
 *
 *	write_bench FILE SIZE [REPEAT] [--direct] [--device N] [--sync]
 *	            [--huge] [--json]
 *
 * Each repeat removes FILE, creates it ("w"), times the write (and, with
 * --sync, the gpufile_sync after it), then syncs the file untimed and
 * removes it, so that write-back of one repeat does not fall on the next
 * and every repeat allocates its blocks as fio does writing a new file.
 * --direct sets direct_io=on (O_DIRECT for the aligned middle of each
 * task). --device N writes from device memory of GPU N; without a usable
 * GPU the program says so and exits 77. --huge gives the host source
 * MADV_HUGEPAGE before it is touched, as NumPy does for its arrays of 4
 * MiB or more (on the 2-core VM a buffered write from a 4 KiB-page
 * source ran at 0.55x one from a cache-resident 1 MiB buffer, from a
 * huge-page one at 0.91x: bench/README.md).
 */
#include "gpufile.h"
#include "bench_util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

static int fail(const char *what)
{
	fprintf(stderr, "write_bench: %s: %s\n", what, gpufile_errmsg());
	return 1;
}

static int parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);
	unsigned shift = 0;

	if (end == s)
		return -1;
	if (!*end || !strcmp(end, "B"))
		shift = 0;
	else if (!strcmp(end, "k") || !strcmp(end, "KiB"))
		shift = 10;
	else if (!strcmp(end, "m") || !strcmp(end, "MiB"))
		shift = 20;
	else if (!strcmp(end, "g") || !strcmp(end, "GiB"))
		shift = 30;
	else
		return -1;
	*out = (size_t)v << shift;
	return 0;
}

/* One write of size bytes from src into a new path; its seconds. */
static int write_once(const char *path, const void *src, size_t size, int sync,
                      double *secs)
{
	gpufile_t *h = NULL;
	double t0;
	ssize_t n;

	unlink(path);
	if (gpufile_open(&h, path, "w"))
		return fail("gpufile_open");
	t0 = bench_now();
	n = gpufile_pwrite(h, src, size, 0);
	if (n == (ssize_t)size && sync && gpufile_sync(h))
		n = -1;
	*secs = bench_now() - t0;
	if (n != (ssize_t)size) {
		gpufile_close(h);
		return fail("gpufile_pwrite");
	}
	gpufile_sync(h); /* untimed without --sync: no write-back later */
	gpufile_close(h);
	unlink(path);
	return 0;
}

int main(int argc, char **argv)
{
	const char *path = NULL, *size_arg = NULL;
	long repeat = 5;
	int json = 0, direct = 0, sync = 0, huge = 0, device = -1;
	size_t size = 0, chunk;
	void *src = NULL, *host = NULL;
	double *gbps, secs;
	size_t task_size = 0;
	unsigned nthreads = 0;
	int rc = 1;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--json"))
			json = 1;
		else if (!strcmp(argv[i], "--direct"))
			direct = 1;
		else if (!strcmp(argv[i], "--sync"))
			sync = 1;
		else if (!strcmp(argv[i], "--huge"))
			huge = 1;
		else if (!strcmp(argv[i], "--device") && i + 1 < argc)
			device = atoi(argv[++i]);
		else if (!path)
			path = argv[i];
		else if (!size_arg)
			size_arg = argv[i];
		else
			repeat = atol(argv[i]);
	}
	if (!path || !size_arg || parse_size(size_arg, &size) || !size ||
	    repeat < 1) {
		fprintf(stderr, "usage: write_bench FILE SIZE [REPEAT] "
		                "[--direct] [--device N] [--sync] [--huge] "
		                "[--json]\n");
		return 2;
	}
	if (direct && gpufile_config_set("direct_io", "on"))
		return fail("direct_io=on");
	gpufile_get_task_size(&task_size);
	gpufile_get_nthreads(&nthreads);

	/* The data: a pattern made in host memory, copied to the GPU. */
	chunk = size < (64u << 20) ? size : (64u << 20);
	if (posix_memalign(&host, huge ? 2u << 20 : 4096,
	                   device >= 0 ? chunk : size)) {
		fprintf(stderr, "write_bench: out of memory for %zu bytes\n",
		        size);
		return 1;
	}
	if (huge && madvise(host, device >= 0 ? chunk : size, MADV_HUGEPAGE))
		perror("write_bench: madvise(MADV_HUGEPAGE)");
	if (device >= 0) {
		if (gpufile_cuda_device_count() <= device) {
			printf("write_bench: skipped, no usable GPU %d\n",
			       device);
			free(host);
			return 77;
		}
		if (gpufile_device_alloc(device, size, &src)) {
			free(host);
			return fail("gpufile_device_alloc");
		}
		for (size_t i = 0; i < chunk; i++)
			((unsigned char *)host)[i] = (unsigned char)(i % 251);
		for (size_t off = 0; off < size; off += chunk) {
			size_t n = size - off < chunk ? size - off : chunk;
			if (gpufile_memcpy((char *)src + off, host, n)) {
				fail("gpufile_memcpy");
				goto out;
			}
		}
	} else {
		for (size_t i = 0; i < size; i++)
			((unsigned char *)host)[i] = (unsigned char)(i % 251);
		src = host;
	}

	/* Warm-up: the workers, the bounce buffers for a device, and for a
	 * buffered write the page-cache pages themselves: a write of the
	 * whole size, removed after. On the 2-core VM a first touch of
	 * memory the hypervisor took back costs ~47 us a page (0.09 GB/s,
	 * bench/README.md), so a buffered write whose page cache must take
	 * such pages ran at 0.1 GB/s, and one that reuses pages just freed
	 * at 1-3 GB/s: fio, with its 1 MiB buffer, reuses those the run
	 * before it freed, while our source buffer had just taken them. */
	if (write_once(path, src,
	               !direct                       ? size
	               : task_size * nthreads < size ? task_size * nthreads
	                                             : size,
	               0, &secs))
		goto out;

	gbps = calloc((size_t)repeat, sizeof(*gbps));
	if (!gbps)
		goto out;
	for (long r = 0; r < repeat; r++) {
		if (write_once(path, src, size, sync, &secs)) {
			free(gbps);
			goto out;
		}
		gbps[r] = (double)size / secs / 1e9;
	}
	if (json) {
		printf("{\"size\":%zu,\"source\":\"%s\",\"direct\":%d,"
		       "\"sync\":%d,\"huge\":%d,\"nthreads\":%u,"
		       "\"task_size\":%zu,\"gbps\":[",
		       size, device >= 0 ? "device" : "host", direct, sync,
		       huge, nthreads, task_size);
		for (long r = 0; r < repeat; r++)
			printf("%s%.3f", r ? "," : "", gbps[r]);
	} else {
		printf("write_bench: %zu bytes from %s%s, direct_io=%s%s, "
		       "nthreads=%u task_size=%zu:",
		       size, device >= 0 ? "device" : "host",
		       huge ? " (huge pages asked)" : "",
		       direct ? "on" : "default", sync ? ", synced" : "",
		       nthreads, task_size);
		for (long r = 0; r < repeat; r++)
			printf(" %.3f", gbps[r]);
		printf(" GB/s\n");
	}
	qsort(gbps, (size_t)repeat, sizeof(*gbps), bench_cmp_double);
	{
		const double med =
		    repeat % 2 ? gbps[repeat / 2]
		               : (gbps[repeat / 2 - 1] + gbps[repeat / 2]) / 2;
		if (json)
			printf("],\"gbps_best\":%.3f,\"gbps_median\":%.3f}\n",
			       gbps[repeat - 1], med);
		else
			printf("best %.3f, median %.3f GB/s\n",
			       gbps[repeat - 1], med);
	}
	free(gbps);
	rc = 0;
out:
	if (device >= 0 && src)
		gpufile_device_free(src);
	free(host);
	return rc;
}
