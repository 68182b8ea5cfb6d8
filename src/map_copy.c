/*
 * Copies out of a shared map of a file with streaming (non-temporal)
 * stores, guarded against SIGBUS: the fast way for warm bytes to reach a
 * host buffer (posix_io.c, gpufile__map_read).
 *
 * Why: on the H200 host (16 cores, 300 MiB L3, bench/README.md "Host
 * reads"), 16 threads pread()ing a warm 4 GiB file into one 4 GiB buffer
 * reached 36-43 GB/s; 16 threads taking 4 MiB chunks of one map of the
 * file, populating each (MADV_POPULATE_READ) and copying it with 64-byte
 * streaming stores, 70-71 GB/s; the same chunks by memcpy, 46. A streaming
 * store writes a whole line without reading it first, and the destination
 * (far larger than the caches) is not pulled through them.
 *
 * Why guarded: a page of a map past the end of its file raises SIGBUS
 * where pread would have returned a short count. A file cut short by
 * another process while gpufile copies from it must cost a short read,
 * not the process. So the first copy installs a SIGBUS handler (once per
 * process); a copy arms it for its thread, and a fault taken by the
 * kernel while armed (si_code > 0) jumps back to the copy, which returns
 * -EFAULT: the caller reads the range again with pread, which gets the
 * file's real end. Any other SIGBUS goes to the handler that was there
 * before, or, where that was the default or ignored, ends the process as
 * it would have without gpufile (the default disposition is restored and
 * the signal taken again). Each copy first checks that the handler is
 * still gpufile's (a program or runtime may install its own later): if
 * not, nothing is copied from the map and the caller uses pread, so a
 * handler that is not gpufile's never sees gpufile's faults.
 * The handler is installed only once a guarded copy is to be made, and
 * never with host_map_copy=off: by a streaming copy (a warm host read, a
 * memory-mapped handle's host read; under auto only on a CPU with
 * AVX-512), or by a gathered read's copies from its map (gather.c: memcpy
 * of short runs, any CPU).
 *
 * The guard's state is per thread (initial-exec TLS, so the handler never
 * allocates); the process-wide part is set once, under guard_once.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

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

typedef void (*copy_fn)(char *dst, const char *src, size_t n);

/* The CPU's streaming copy, or NULL where it has none (then a map copy
 * gains nothing over pread's and is not made); *kind: which stores
 * (GPUFILE__STREAM_*). */
static copy_fn streaming_copy(int *kind)
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

/* ---- the SIGBUS guard ---- */

struct guard {
	sigjmp_buf env;
	volatile sig_atomic_t armed;
};

static __thread struct guard guard __attribute__((tls_model("initial-exec")));

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static copy_fn copy;  /* set once, under cpu_once */
static int copy_kind; /* its stores, GPUFILE__STREAM_*; cpu_once */
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static int guard_installed;       /* set once, under guard_once */
static struct sigaction previous; /* the handler before gpufile's */
static atomic_ullong faults;      /* faults the guard turned into -EFAULT */
static atomic_ullong map_bytes;   /* bytes copied from maps */

/* A SIGBUS that is not a guarded copy's: what would have happened
 * without gpufile. */
static void pass_on(int sig, siginfo_t *si, void *uc)
{
	struct sigaction dfl;

	if (previous.sa_flags & SA_SIGINFO) {
		previous.sa_sigaction(sig, si, uc);
		return;
	}
	if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN) {
		previous.sa_handler(sig);
		return;
	}
	/* Ignored, and sent by kill() or sigqueue(): ignore it. */
	if (previous.sa_handler == SIG_IGN && si->si_code <= 0)
		return;
	/* The default (or an ignored fault, which the kernel does not let
	 * a process ignore): restore it and take the signal again, blocked
	 * while this handler runs, so it is delivered when it returns; a
	 * fault is also raised again by the instruction it returns to. */
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	sigaction(SIGBUS, &dfl, NULL);
	if (si->si_code <= 0)
		raise(SIGBUS);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	/* si_code > 0: raised by the kernel for this thread's own access,
	 * which while armed is the guarded copy's. */
	if (guard.armed && si->si_code > 0) {
		guard.armed = 0;
		siglongjmp(guard.env, 1);
	}
	pass_on(sig, si, uc);
}

static void find_copy(void)
{
	copy = streaming_copy(&copy_kind);
}

static void install(void)
{
	struct sigaction act;

	memset(&act, 0, sizeof(act));
	act.sa_sigaction = on_sigbus;
	/* SA_ONSTACK: runtimes that run threads on small stacks (Go)
	 * require it of every handler. */
	act.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
	sigemptyset(&act.sa_mask);
	guard_installed = sigaction(SIGBUS, &act, &previous) == 0;
}

/* The handler in place is still gpufile's. */
static int still_ours(void)
{
	struct sigaction cur;

	return sigaction(SIGBUS, NULL, &cur) == 0 &&
	       (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus;
}

int gpufile__stream_copy_kind(void)
{
	pthread_once(&cpu_once, find_copy);
	return copy_kind;
}

/* auto takes AVX-512's 64-byte stores only: on the H200 host, 16 threads
 * copying a 4 GiB file's map with AVX2's 32-byte streaming stores reached
 * 54.8 GB/s against 67-70 with AVX-512's, and on a 2-core AMD VM with
 * AVX2 alone the copy did not beat pread (12.8 against 14.2 GB/s). */
int gpufile__stream_copy_allowed(int mode, int kind)
{
	if (mode == GPUFILE__MAP_COPY_AUTO)
		return kind == GPUFILE__STREAM_AVX512;
	return mode == GPUFILE__MAP_COPY_ON && kind != GPUFILE__STREAM_NONE;
}

int gpufile__guard_ready(int mode)
{
	if (mode == GPUFILE__MAP_COPY_OFF)
		return 0;
	pthread_once(&guard_once, install);
	return guard_installed && still_ours();
}

int gpufile__stream_copy_ready(int mode)
{
	if (!gpufile__stream_copy_allowed(mode, gpufile__stream_copy_kind()))
		return 0; /* and the handler is not installed */
	return gpufile__guard_ready(mode);
}

int gpufile__guarded(void (*fn)(void *arg), void *arg)
{
	/* Nothing of this frame is changed between sigsetjmp and the jump
	 * (what fn changes lives behind arg). The mask is saved (1): the
	 * jump leaves the handler, where SIGBUS was blocked. */
	if (sigsetjmp(guard.env, 1)) {
		atomic_fetch_add_explicit(&faults, 1, memory_order_relaxed);
		gpufile__stats_map_copy(0, 1);
		return -EFAULT;
	}
	guard.armed = 1;
	fn(arg);
	guard.armed = 0;
	return 0;
}

struct stream_job {
	char *dst;
	const char *src;
	size_t n;
};

static void stream_job(void *arg)
{
	struct stream_job *j = arg;

	copy(j->dst, j->src, j->n);
}

int gpufile__stream_copy(char *dst, const char *src, size_t n)
{
	struct stream_job j = {dst, src, n};
	int rc = gpufile__guarded(stream_job, &j);

	if (rc == 0)
		atomic_fetch_add_explicit(&map_bytes, n, memory_order_relaxed);
	return rc;
}

void gpufile__stream_copy_counts(uint64_t *bytes, uint64_t *caught)
{
	if (bytes)
		*bytes = atomic_load(&map_bytes);
	if (caught)
		*caught = atomic_load(&faults);
}
