/*
 * cufile_stats_probe: where cuFile 1.15 puts its level-3 counters.
 * Reads FILE through gpufile with compat_mode=off (run with
 * CUFILE_EXPERIMENTAL_FS=1 where registration needs it), then dumps every
 * non-zero 64-bit word of cuFileGetStatsL3's output with its offset, so
 * that the per-GPU layout gpufile assumes (src/platform/cufile_abi.h) can be
 * checked against the real library. A diagnostic for the GPU machine.
 *
 *   cufile_stats_probe FILE [--early]
 * --early sets the stats level before gpufile opens the cuFile driver.
 */
#include "gpufile.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	int err;
	int cu_err;
} status_t;

int main(int argc, char **argv)
{
	status_t (*set_level)(int);
	status_t (*get_l3)(void *);
	void *lib, *dev;
	gpufile_t *h;
	size_t size = 64u << 20;
	uint64_t *words;
	status_t st;
	ssize_t n;
	int shown = 0;

	if (argc < 2)
		return 2;
	if (gpufile_cuda_device_count() <= 0)
		return 77;
	lib = dlopen("libcufile.so.0", RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "no libcufile: %s\n", dlerror());
		return 77;
	}
	set_level = (status_t(*)(int))dlsym(lib, "cuFileSetStatsLevel");
	get_l3 = (status_t(*)(void *))dlsym(lib, "cuFileGetStatsL3");
	if (argc > 2 && !strcmp(argv[2], "--early")) {
		st = set_level(3);
		printf("cuFileSetStatsLevel(3) before driver open: %d\n",
		       st.err);
	}
	gpufile_config_set("compat_mode", "off");
	gpufile_config_set("cufile_stats", "3");
	if (gpufile_device_alloc(0, size, &dev) ||
	    gpufile_open(&h, argv[1], "r")) {
		fprintf(stderr, "setup: %s\n", gpufile_errmsg());
		return 1;
	}
	n = gpufile_pread(h, dev, size, 0);
	printf("gpufile_pread: %zd %s\n", n, n < 0 ? gpufile_errmsg() : "");
	st = set_level(3);
	printf("cuFileSetStatsLevel(3) after: %d\n", st.err);
	n = gpufile_pread(h, dev, size, 0);
	printf("gpufile_pread again: %zd\n", n);
	words = calloc(1, 64u << 10);
	st = get_l3(words);
	printf("cuFileGetStatsL3: %d\n", st.err);
	for (size_t i = 0; i < (64u << 10) / 8 && shown < 120; i++) {
		if (words[i]) {
			printf("  offset %5zu: %llu\n", i * 8,
			       (unsigned long long)words[i]);
			shown++;
		}
	}
	{
		gpufile_cufile_info_t info;
		GPUFILE_INIT(info);
		gpufile_cufile_info(&info);
		printf("gpufile_cufile_info: ngpus %d stats_level %d verified "
		       "%d\n",
		       info.ngpus, info.stats_level,
		       info.stats_layout_verified);
		for (int g = 0; g < info.ngpus; g++)
			printf("  gpu %d: nvfs %llu posix %llu p2p %llu\n", g,
			       (unsigned long long)info.gpu[g].nvfs_reads,
			       (unsigned long long)info.gpu[g].posix_reads,
			       (unsigned long long)info.gpu[g].p2p_reads);
	}
	gpufile_close(h);
	return 0;
}
