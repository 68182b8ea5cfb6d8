/*
 * The CPU's streaming (non-temporal) stores, for the copy from a file's
 * map (paths/map_copy.c): which the CPU has, found once, and a copy made
 * with them; and how many CPUs the process may run on. Facts of the
 * machine: core/decide.c weighs them (the host_map_copy rule),
 * paths/map_copy.c uses the copy.
 */
#define _GNU_SOURCE
#include "platform/platform.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define HAVE_X86 1
#endif

/* ---- streaming copies ---- */

#ifdef HAVE_X86
/* 64-byte stores: a whole line each. */
__attribute__((target("avx512f"))) static void
copy_avx512(char *dst, const char *src, size_t n)
{
	size_t i = (64 - ((uintptr_t)dst & 63)) & 63;

	if (i > n)
		i = n;
	memcpy(dst, src, i);
	for (; i + 256 <= n; i += 256) {
		__m512i a = _mm512_loadu_si512((const void *)(src + i));
		__m512i b = _mm512_loadu_si512((const void *)(src + i + 64));
		__m512i c = _mm512_loadu_si512((const void *)(src + i + 128));
		__m512i d = _mm512_loadu_si512((const void *)(src + i + 192));

		_mm512_stream_si512((void *)(dst + i), a);
		_mm512_stream_si512((void *)(dst + i + 64), b);
		_mm512_stream_si512((void *)(dst + i + 128), c);
		_mm512_stream_si512((void *)(dst + i + 192), d);
	}
	_mm_sfence();
	memcpy(dst + i, src + i, n - i);
}

/* 32-byte stores, two to a line. */
__attribute__((target("avx2"))) static void copy_avx2(char *dst,
                                                      const char *src, size_t n)
{
	size_t i = (32 - ((uintptr_t)dst & 31)) & 31;

	if (i > n)
		i = n;
	memcpy(dst, src, i);
	for (; i + 128 <= n; i += 128) {
		__m256i a = _mm256_loadu_si256((const __m256i *)(src + i));
		__m256i b = _mm256_loadu_si256((const __m256i *)(src + i + 32));
		__m256i c = _mm256_loadu_si256((const __m256i *)(src + i + 64));
		__m256i d = _mm256_loadu_si256((const __m256i *)(src + i + 96));

		_mm256_stream_si256((__m256i *)(dst + i), a);
		_mm256_stream_si256((__m256i *)(dst + i + 32), b);
		_mm256_stream_si256((__m256i *)(dst + i + 64), c);
		_mm256_stream_si256((__m256i *)(dst + i + 96), d);
	}
	_mm_sfence();
	memcpy(dst + i, src + i, n - i);
}
#endif

/* The CPU's streaming copy, or NULL where it has none (then a map copy
 * gains nothing over pread's and is not made); *kind: which stores
 * (GPUFILE__STREAM_*). */
static gpufile__copy_fn streaming_copy(int *kind)
{
	*kind = GPUFILE__STREAM_NONE;
#ifdef HAVE_X86
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f")) {
		*kind = GPUFILE__STREAM_AVX512;
		return copy_avx512;
	}
	if (__builtin_cpu_supports("avx2")) {
		*kind = GPUFILE__STREAM_AVX2;
		return copy_avx2;
	}
#endif
	return NULL;
}

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static gpufile__copy_fn copy; /* set once, under cpu_once */
static int copy_kind;         /* its stores, GPUFILE__STREAM_*; cpu_once */

static void find_copy(void)
{
	copy = streaming_copy(&copy_kind);
}

int gpufile__stream_copy_kind(void)
{
	pthread_once(&cpu_once, find_copy);
	return copy_kind;
}

gpufile__copy_fn gpufile__stream_copy_fn(void)
{
	pthread_once(&cpu_once, find_copy);
	return copy;
}

/* ---- the CPUs this process may use ---- */

static pthread_once_t cpus_once = PTHREAD_ONCE_INIT;
static int usable_cpus; /* set once, under cpus_once */

static void count_cpus(void)
{
	cpu_set_t set;
	long online = sysconf(_SC_NPROCESSORS_ONLN);

	/* A mask of more than CPU_SETSIZE CPUs fails with EINVAL: the
	 * online count then stands for it (both are far above the rule's
	 * threshold). */
	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		usable_cpus = CPU_COUNT(&set);
	else
		usable_cpus = online > 0 ? (int)online : 1;
	if (usable_cpus < 1)
		usable_cpus = 1;
}

int gpufile__usable_cpus(void)
{
	pthread_once(&cpus_once, count_cpus);
	return usable_cpus;
}
