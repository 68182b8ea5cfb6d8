/*
 * What the gpufile tool measures and how it shows it: the clock that
 * times requests, rates in GB/s and byte counts in binary units.
 */
#ifndef GPUFILE_TOOLS_MEASURE_H
#define GPUFILE_TOOLS_MEASURE_H

#include <stddef.h>
#include <stdint.h>

/* Seconds on CLOCK_MONOTONIC. */
double measure_now(void);

/* Bytes per nanosecond, i.e. GB/s with 1 GB = 1e9 bytes; 0 when seconds
 * is not positive. */
double measure_gbps(uint64_t bytes, double seconds);

/* Formats bytes as a short human string ("1.5 GiB", "512 B") in buf. */
const char *measure_human_bytes(uint64_t bytes, char *buf, size_t len);

#endif
