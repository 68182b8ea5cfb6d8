/*
 * bench_util.h: the clock and the order of doubles that the benchmark
 * programs time and take medians with (header only: each program is one
 * .c file, some linking no gpufile at all).
 */
#ifndef GPUFILE_BENCH_UTIL_H
#define GPUFILE_BENCH_UTIL_H

#include <time.h>

/* Seconds on CLOCK_MONOTONIC. */
static inline double bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* qsort's comparison of two doubles, ascending. */
static inline int bench_cmp_double(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

#endif
