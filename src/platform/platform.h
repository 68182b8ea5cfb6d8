/*
 * The platform wing (src/platform/): everything that talks to the drivers
 * and the machine below gpufile's own decisions: the CUDA driver API
 * (cuda_shim.c, loaded with dlopen), pinned host memory (pinned.c),
 * cuFile's configuration file (cufile_json.c, the ABI in cufile_abi.h),
 * the dynamic loader's lock (dl.c) and the CPU's streaming stores (cpu.c).
 *
 * May include: common/. Calls nothing above it.
 */
#ifndef GPUFILE_PLATFORM_H
#define GPUFILE_PLATFORM_H

#include "common/common.h"
#include "platform/cuda_shim.h"
#include "platform/cufile_json.h"

/* ---- the dynamic loader (dl.c) ---- */

/* dl_lock (dl.c), held across fork() (api/fork.c): taken around every
 * dlopen, dlclose and dl_iterate_phdr of the library outside the shims'
 * loaders, since glibc's loader is not safe to fork in the middle of. The
 * last lock of the library's order: nothing else is taken while it is
 * held. */
void gpufile__dl_lock(void);
void gpufile__dl_unlock(void);
/* The loader's count of objects loaded into the process so far (it moves
 * whenever any library is loaded). Caller holds dl_lock. */
unsigned long long gpufile__dl_adds(void);

/* ---- the CPU (cpu.c) ---- */

/* The streaming stores this CPU has for the map copy, found once, no
 * handler installed: host_map_copy=auto uses AVX-512's only, on also
 * AVX2's. */
enum { GPUFILE__STREAM_NONE, GPUFILE__STREAM_AVX2, GPUFILE__STREAM_AVX512 };
int gpufile__stream_copy_kind(void);
/* A copy of n bytes from src to dst with those stores (then an sfence),
 * or NULL where the CPU has none (GPUFILE__STREAM_NONE). */
typedef void (*gpufile__copy_fn)(char *dst, const char *src, size_t n);
gpufile__copy_fn gpufile__stream_copy_fn(void);
/* The CPUs this process may run on (its affinity mask; the online count
 * where the mask cannot be read), found once. */
int gpufile__usable_cpus(void);

/* ---- CUDA (cuda_shim.c) ---- */

/* Classifies ptr without loading CUDA into a process that has not loaded
 * it: if libcuda.so.1 is not already mapped, every pointer is host. */
int gpufile__classify(const void *ptr, gpufile_mem_t *kind, int *device,
                      void **ctx);
/* 1 in a forked child of a process that had initialised CUDA: no CUDA
 * call is made, every pointer counts as host memory, and an -EFAULT names
 * this as the likely cause (a device pointer of the parent). */
int gpufile__cuda_forked(void);
/* cuda_shim.c's part of fork (api/fork.c). */
void gpufile__cuda_atfork_prepare(void);
void gpufile__cuda_atfork_parent(void);
void gpufile__cuda_atfork_child(void);

#endif
