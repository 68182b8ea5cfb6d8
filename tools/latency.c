/*
 * The latency histogram of gpufile bench (see latency.h).
 */
#include "latency.h"

static unsigned bucket_of(uint64_t ns)
{
	unsigned e;

	if (ns < LATENCY_SUB)
		return (unsigned)ns;
	e = 63u - (unsigned)__builtin_clzll(ns); /* >= 7 */
	return (e - 6) * LATENCY_SUB +
	       (unsigned)((ns >> (e - 7)) & (LATENCY_SUB - 1));
}

/* The middle of bucket i, in ns. */
static double bucket_middle(unsigned i)
{
	unsigned e = i / LATENCY_SUB + 6, sub = i % LATENCY_SUB;
	double width;

	if (i < LATENCY_SUB)
		return (double)i;
	width = (double)(1ull << (e - 7));
	return (double)(LATENCY_SUB + sub) * width + width / 2;
}

void latency_add(struct latency *l, uint64_t ns)
{
	if (l->count == 0 || ns < l->min)
		l->min = ns;
	if (ns > l->max)
		l->max = ns;
	l->count++;
	l->sum += (double)ns;
	l->bucket[bucket_of(ns)]++;
}

void latency_merge(struct latency *into, const struct latency *from)
{
	if (from->count == 0)
		return;
	if (into->count == 0 || from->min < into->min)
		into->min = from->min;
	if (from->max > into->max)
		into->max = from->max;
	into->count += from->count;
	into->sum += from->sum;
	for (unsigned i = 0; i < LATENCY_BUCKETS; i++)
		into->bucket[i] += from->bucket[i];
}

double latency_quantile(const struct latency *l, double p)
{
	uint64_t rank, seen = 0;
	double v;

	if (l->count == 0)
		return 0;
	rank = (uint64_t)(p * (double)l->count);
	if ((double)rank < p * (double)l->count)
		rank++; /* the ceiling */
	if (rank < 1)
		rank = 1;
	for (unsigned i = 0; i < LATENCY_BUCKETS; i++) {
		seen += l->bucket[i];
		if (seen >= rank) {
			v = bucket_middle(i);
			if (v < (double)l->min)
				v = (double)l->min;
			if (v > (double)l->max)
				v = (double)l->max;
			return v;
		}
	}
	return (double)l->max;
}
