/*
 * gpufile_private.h - helpers that exist for gpufile's own tests, tools and
 * Python binding. NOT part of the public API: they may change or go away
 * in any release, and this header is not installed. They are exported from
 * the shared library under the separate symbol version GPUFILE_PRIVATE
 * (as glibc does with GLIBC_PRIVATE) only because the gpufile tool and the
 * Python binding reach them through libgpufile.so; test programs link the
 * static library.
 */
#ifndef GPUFILE_PRIVATE_H
#define GPUFILE_PRIVATE_H

#include "gpufile.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parses text as a size the way settings are parsed: plain bytes or a
 * number with k/m/g/t, KiB/MiB/GiB/TiB or KB/MB/GB/TB (all binary), spaces
 * allowed around the number and the unit. Returns 0 with *out set, -EINVAL
 * for anything else, -ERANGE when it does not fit 64 bits. */
GPUFILE_API int gpufile_parse_size(const char *text, uint64_t *out);

/* Parses text as a whole number (digits, spaces around). Returns 0,
 * -EINVAL or -ERANGE as gpufile_parse_size(). */
GPUFILE_API int gpufile_parse_count(const char *text, uint64_t *out);

/* Forgets every setter and rereads the environment. */
GPUFILE_API void gpufile_config_reset(void);

/* Where the segment of pid (0: this process) is found, for messages:
 * "/proc/PID/fd (memfd gpufile-stats)", written into buf (len bytes).
 * Returns 0, -EINVAL (buf NULL) or -ENAMETOOLONG. */
GPUFILE_API int gpufile_stats_segment_path(int pid, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif /* GPUFILE_PRIVATE_H */
