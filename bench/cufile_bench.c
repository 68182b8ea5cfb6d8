/*
 * cufile_bench: reads FILE into GPU memory N times with the settings the
 * environment gives (GPUFILE_COMPAT_MODE, GPUFILE_TASK_SIZE, CUFILE_*,
 * ...), and prints one JSON line: GB/s (best and median), the path gpufile
 * chose and why, gpufile's per-path counters, and cuFile's own per-GPU
 * nvfs/posix/p2p counters (set GPUFILE_CUFILE_STATS=3 or
 * CUFILE_STATS_LEVEL=3 to have them).
 *
 *   cufile_bench FILE [--iters N] [--size BYTES] [--cold] [--register]
 *                     [--verify] [--no-warmup]
 *
 * --cold drops FILE from the page cache before each read
 * (posix_fadvise(DONTNEED); the file must not be dirty). --register
 * registers the buffer with cuFile (gpufile_buf_register). --verify
 * compares the last read with a plain read(2) of the file, byte for byte.
 * --no-warmup skips the untimed first read, so that the counters (both
 * layers; cuFile's are cumulative) count exactly the timed reads.
 * Public API only. Exits 77 without a GPU.
 */
#define _GNU_SOURCE
#include "gpufile.h"
#include "bench_util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void drop_cache(const char *file)
{
	int fd = open(file, O_RDONLY);

	if (fd >= 0) {
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

/* Compares size bytes of device memory dev with the file, in 64 MiB
 * pieces. Returns the offset of the first difference, or -1. */
static long long verify(const char *file, const char *dev, size_t size)
{
	const size_t piece = 64u << 20;
	char *a = malloc(piece), *b = malloc(piece);
	int fd = open(file, O_RDONLY);
	long long bad = -1;

	for (size_t off = 0; fd >= 0 && a && b && off < size && bad < 0;
	     off += piece) {
		size_t n = size - off < piece ? size - off : piece;
		if (pread(fd, a, n, (off_t)off) != (ssize_t)n ||
		    gpufile_memcpy(b, dev + off, n)) {
			bad = (long long)off;
			break;
		}
		for (size_t i = 0; i < n; i++) {
			if (a[i] != b[i]) {
				bad = (long long)(off + i);
				break;
			}
		}
	}
	if (fd >= 0)
		close(fd);
	free(a);
	free(b);
	return bad;
}

/* Prints s as a JSON string. */
static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

int main(int argc, char **argv)
{
	const char *file = NULL;
	int iters = 5, cold = 0, reg = 0, check = 0, warmup = 1;
	long long size = -1, bad = -1;
	double *times;
	gpufile_t *h;
	gpufile_stats_t before, after;
	gpufile_cufile_info_t cf;
	gpufile_path_t path;
	char reason[1024], value[64];
	void *dev;
	ssize_t n = 0;
	int rc;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--size") && i + 1 < argc)
			size = atoll(argv[++i]);
		else if (!strcmp(argv[i], "--cold"))
			cold = 1;
		else if (!strcmp(argv[i], "--register"))
			reg = 1;
		else if (!strcmp(argv[i], "--verify"))
			check = 1;
		else if (!strcmp(argv[i], "--no-warmup"))
			warmup = 0;
		else if (!file && argv[i][0] != '-')
			file = argv[i];
		else {
			fprintf(stderr,
			        "usage: %s FILE [--iters N] [--size B] "
			        "[--cold] [--register] [--verify]\n",
			        argv[0]);
			return 2;
		}
	}
	if (!file || iters < 1)
		return 2;
	if (gpufile_cuda_device_count() <= 0) {
		fprintf(stderr, "cufile_bench: %s: skipped\n",
		        gpufile_errmsg());
		return 77;
	}
	rc = gpufile_open(&h, file, "r");
	if (rc) {
		fprintf(stderr, "cufile_bench: %s\n", gpufile_errmsg());
		return 1;
	}
	if (size < 0)
		size = (long long)gpufile_size(h);
	rc = gpufile_device_alloc(0, (size_t)size, &dev);
	if (rc) {
		fprintf(stderr, "cufile_bench: %s\n", gpufile_errmsg());
		return 1;
	}
	if (reg && gpufile_buf_register(dev, (size_t)size, 0)) {
		fprintf(stderr, "cufile_bench: %s\n", gpufile_errmsg());
		return 1;
	}
	gpufile_warmup();
	times = calloc((size_t)iters, sizeof(*times));
	/* One untimed read decides the path (registers the file, opens the
	 * cuFile driver) so that the timed ones measure only I/O. */
	if (warmup) {
		if (cold)
			drop_cache(file);
		n = gpufile_pread(h, dev, (size_t)size, 0);
		if (n != size) {
			fprintf(stderr, "cufile_bench: read returned %zd: %s\n",
			        n, gpufile_errmsg());
			return 1;
		}
	}
	GPUFILE_INIT(before);
	gpufile_stats_self(&before);
	for (int i = 0; i < iters; i++) {
		double t0;

		if (cold)
			drop_cache(file);
		t0 = bench_now();
		n = gpufile_pread(h, dev, (size_t)size, 0);
		times[i] = bench_now() - t0;
		if (n != size) {
			fprintf(stderr, "cufile_bench: read returned %zd: %s\n",
			        n, gpufile_errmsg());
			return 1;
		}
	}
	GPUFILE_INIT(after);
	gpufile_stats_self(&after);
	if (check)
		bad = verify(file, dev, (size_t)size);
	gpufile_path_info(h, &path, reason, sizeof(reason));
	GPUFILE_INIT(cf);
	gpufile_cufile_info(&cf);
	qsort(times, (size_t)iters, sizeof(*times), bench_cmp_double);

	printf("{\"file\":");
	json_string(file);
	printf(",\"bytes\":%lld,\"iters\":%d,\"cold\":%s,\"registered\":%s",
	       size, iters, cold ? "true" : "false", reg ? "true" : "false");
	gpufile_config_get("compat_mode", value, sizeof(value), NULL, NULL, 0);
	printf(",\"compat_mode\":\"%s\"", value);
	gpufile_config_get("task_size", value, sizeof(value), NULL, NULL, 0);
	printf(",\"task_size\":%s", value);
	printf(",\"cufile_force_compat_mode\":");
	json_string(getenv("CUFILE_FORCE_COMPAT_MODE")
	                ? getenv("CUFILE_FORCE_COMPAT_MODE")
	                : "");
	printf(",\"cufile_env_path_json\":");
	json_string(getenv("CUFILE_ENV_PATH_JSON")
	                ? getenv("CUFILE_ENV_PATH_JSON")
	                : "");
	printf(",\"gbps_best\":%.3f,\"gbps_median\":%.3f",
	       (double)size / times[0] / 1e9,
	       (double)size / times[iters / 2] / 1e9);
	printf(",\"path\":\"%s\",\"reason\":", gpufile_path_name(path));
	json_string(reason);
	printf(",\"gpufile\":{");
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++)
		printf("%s\"%s\":{\"ops\":%llu,\"tasks\":%llu,\"bytes\":%llu}",
		       p ? "," : "", gpufile_path_name((gpufile_path_t)p),
		       (unsigned long long)(after.path[p][0].ops -
		                            before.path[p][0].ops),
		       (unsigned long long)(after.path[p][0].tasks -
		                            before.path[p][0].tasks),
		       (unsigned long long)(after.path[p][0].bytes -
		                            before.path[p][0].bytes));
	printf("},\"cufile\":{\"loaded\":%d,\"driver_open\":%d,\"status\":%d,"
	       "\"version\":%d,\"nvfs_loaded\":%d,\"p2pdma\":%d,"
	       "\"stats_level\":%d,\"layout_verified\":%d,\"message\":",
	       cf.loaded, cf.driver_open, cf.status, cf.version, cf.nvfs_loaded,
	       cf.p2pdma, cf.stats_level, cf.stats_layout_verified);
	json_string(cf.message);
	printf(",\"gpus\":[");
	for (int g = 0; g < cf.ngpus; g++)
		printf("%s{\"gpu\":%d,\"nvfs_reads\":%llu,\"posix_reads\":%llu,"
		       "\"p2p_reads\":%llu,\"unaligned_reads\":%llu}",
		       g ? "," : "", cf.gpu[g].gpu,
		       (unsigned long long)cf.gpu[g].nvfs_reads,
		       (unsigned long long)cf.gpu[g].posix_reads,
		       (unsigned long long)cf.gpu[g].p2p_reads,
		       (unsigned long long)cf.gpu[g].unaligned_reads);
	printf("]}");
	if (check)
		printf(",\"verified\":%s,\"first_difference\":%lld",
		       bad < 0 ? "true" : "false", bad);
	printf("}\n");
	if (reg)
		gpufile_buf_deregister(dev);
	gpufile_close(h);
	gpufile_device_free(dev);
	free(times);
	return check && bad >= 0 ? 1 : 0;
}
