/*
 * Latency percentiles for `gpufile bench`: a log-linear histogram of
 * nanoseconds (exact below 128 ns, then 128 buckets per power of two, so
 * a percentile is within 1/128 of the true value, as fio's own
 * histogram of completion latencies is within its buckets), fixed in
 * size whatever the number of samples, and merged across jobs.
 */
#ifndef GPUFILE_TOOLS_LATENCY_H
#define GPUFILE_TOOLS_LATENCY_H

#include <stdint.h>

#define LATENCY_SUB     128
#define LATENCY_BUCKETS (58 * LATENCY_SUB)

struct latency {
	uint64_t count, min, max;
	double sum; /* ns */
	uint64_t bucket[LATENCY_BUCKETS];
};

/* Counts a sample of ns nanoseconds. */
void latency_add(struct latency *l, uint64_t ns);

/* Adds the samples of from to into. */
void latency_merge(struct latency *into, const struct latency *from);

/* The p-th quantile (0 < p <= 1) in nanoseconds: the middle of the
 * bucket that holds the ceil(p * count)-th smallest sample, clamped to
 * [min, max]; 0 when there are no samples. */
double latency_quantile(const struct latency *l, double p);

#endif
