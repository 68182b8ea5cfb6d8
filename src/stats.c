/* Per-process counters, updated with relaxed atomics. */
#include "internal.h"

#include <string.h>
#include <time.h>

struct counter {
	atomic_uint_fast64_t ops, tasks, bytes, errors;
};

static struct {
	struct counter path[GPUFILE_PATH_COUNT][2];
	atomic_uint_fast64_t direct_io_fallbacks;
} counters;

uint64_t gpufile__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void gpufile__stats_request(gpufile_path_t path, int is_write, ssize_t result,
                            uint64_t tasks, size_t size, uint64_t ns)
{
	struct counter *c = &counters.path[path][is_write ? 1 : 0];

	(void)size;
	(void)ns;
	atomic_fetch_add_explicit(&c->ops, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->tasks, tasks, memory_order_relaxed);
	if (result < 0)
		atomic_fetch_add_explicit(&c->errors, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&c->bytes, (uint64_t)result,
		                          memory_order_relaxed);
}

void gpufile__stats_direct_fallback(void)
{
	atomic_fetch_add_explicit(&counters.direct_io_fallbacks, 1,
	                          memory_order_relaxed);
}

int gpufile_stats_self(gpufile_stats_t *out)
{
	memset(out, 0, sizeof(*out));
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		for (int d = 0; d < 2; d++) {
			struct counter *c = &counters.path[p][d];
			out->path[p][d].ops = atomic_load_explicit(&c->ops, memory_order_relaxed);
			out->path[p][d].tasks = atomic_load_explicit(&c->tasks, memory_order_relaxed);
			out->path[p][d].bytes = atomic_load_explicit(&c->bytes, memory_order_relaxed);
			out->path[p][d].errors = atomic_load_explicit(&c->errors, memory_order_relaxed);
		}
	}
	out->direct_io_fallbacks = atomic_load_explicit(
		&counters.direct_io_fallbacks, memory_order_relaxed);
	return 0;
}

const char *gpufile_path_name(gpufile_path_t path)
{
	static const char *const names[] = {"host", "posix", "cufile", "small"};

	return (unsigned)path < GPUFILE_PATH_COUNT ? names[path] : "?";
}

void gpufile__stats_file(const char *path, gpufile_path_t chosen,
                         const char *reason)
{
	(void)path;
	(void)chosen;
	(void)reason;
}

void gpufile__stats_cufile(const struct gpufile__cufile_counts *per_gpu,
                           int ngpus)
{
	(void)per_gpu;
	(void)ngpus;
}
