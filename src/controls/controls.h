/*
 * The controls wing (src/controls/): what a user asks of gpufile beside
 * reading and writing: the check and its report (probe.c), features
 * (features.c), the plan of a read (plan.c), the page cache
 * (page_cache.c) and the small controls on handles (controls.c).
 *
 * May include: every wing but formats/.
 */
#ifndef GPUFILE_CONTROLS_H
#define GPUFILE_CONTROLS_H

#include "api/api.h"

/* How gpufile_page_cache_info() counts (page_cache.c): cachestat(2) with a
 * fallback to mincore(2) when the kernel lacks it, or one of them only.
 * Tests set it to run both. */
enum { GPUFILE__PC_AUTO = 0, GPUFILE__PC_CACHESTAT, GPUFILE__PC_MINCORE };
extern int gpufile__page_cache_method;
/* The file gpufile_drop_system_page_cache() writes; tests point it at a
 * file of their own so that they never drop the machine's caches. */
extern const char *gpufile__drop_caches_path;

#endif
