/*
 * Time, rates and byte counts of the gpufile tool (see measure.h).
 */
#define _GNU_SOURCE
#include "measure.h"

#include <inttypes.h>
#include <stdio.h>
#include <time.h>

double measure_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double measure_gbps(uint64_t bytes, double seconds)
{
	return seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0;
}

const char *measure_human_bytes(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = {"B",   "KiB", "MiB",
	                                    "GiB", "TiB", "PiB"};
	double v = (double)bytes;
	unsigned u = 0;

	while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		u++;
	}
	/* %.3g writes 999.5 and more of a unit (up to 1023.x, and more of
	 * the top unit) in exponent form: 1000 MiB was "1e+03 MiB". */
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", bytes);
	else if (v >= 999.5)
		snprintf(buf, len, "%.0f %s", v, units[u]);
	else
		snprintf(buf, len, "%.3g %s", v, units[u]);
	return buf;
}
