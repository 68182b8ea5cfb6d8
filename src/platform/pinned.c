/*
 * Pinned host memory for the bounce buffers (staging.c) and the arenas of
 * stream-ordered reads (stream_stage.c).
 *
 * What pinning costs is what a fresh process's first device read pays:
 * on the H200 host a first 64 MiB read took 78 ms, and 4 ms once
 * gpufile_warmup() had run; a first 4 GiB read 0.162 s against 0.088 s
 * (bench/first_use, bench/README.md). cuMemHostAlloc of the defaults'
 * 128 MiB (16 workers x 2 x 4 MiB) took 55-66 ms however it was cut into
 * calls or spread over threads: the driver allocates, zeroes and pins
 * 4 KiB pages one after another. The same bytes mapped at a 2 MiB
 * boundary with transparent huge pages asked for (MADV_HUGEPAGE),
 * populated and registered with cuMemHostRegister took 24-31 ms. So the
 * memory is mapped that way; where the kernel gives no huge pages it is
 * still registered (4 KiB pages: 40-46 ms), and where the driver refuses
 * to register host memory it comes from cuMemHostAlloc, as before.
 *
 * MADV_DONTFORK keeps the pages out of a forked child, as CUDA does with
 * its own pinned memory: fork.c's handlers have the child forget them
 * without touching them, and the kernel would otherwise copy pinned
 * anonymous pages into the child at the fork.
 */
#define _GNU_SOURCE
#include "platform/platform.h"
#include "platform/cuda_shim.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

#define HUGE_PAGE (2u << 20)
#define PAGE      4096u

/* The driver answered CUDA_ERROR_NOT_SUPPORTED to a registration: it will
 * answer so again, so no more are tried. */
static atomic_int register_unsupported;

/* An anonymous mapping of len bytes (a multiple of PAGE) starting at a
 * HUGE_PAGE boundary, so that every whole 2 MiB of it can be a huge page;
 * NULL when the kernel gives none. */
static char *map_aligned(size_t len)
{
	size_t span = len + HUGE_PAGE;
	char *m = mmap(NULL, span, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *p;

	if (m == MAP_FAILED)
		return NULL;
	p = (char *)(((uintptr_t)m + HUGE_PAGE - 1) &
	             ~(uintptr_t)(HUGE_PAGE - 1));
	if (p > m)
		munmap(m, (size_t)(p - m));
	if (m + span > p + len)
		munmap(p + len, (size_t)(m + span - (p + len)));
	return p;
}

/* Maps and registers len bytes into *pm. Returns CUDA_SUCCESS, a
 * registration's error, or -1 when nothing could be mapped. */
static CUresult map_and_register(const struct gpufile__cuda *t, size_t len,
                                 struct gpufile__pinned *pm)
{
	size_t mlen = (len + PAGE - 1) & ~(size_t)(PAGE - 1);
	char *p = map_aligned(mlen);
	CUresult rc;

	if (!p)
		return -1;
	/* Without DONTFORK a fork would copy the pinned pages: not an
	 * option; without huge pages or the populate call (kernels before
	 * 5.14), the registration faults in 4 KiB pages itself. */
	if (madvise(p, mlen, MADV_DONTFORK)) {
		munmap(p, mlen);
		return -1;
	}
	(void)madvise(p, mlen, MADV_HUGEPAGE);
	(void)madvise(p, mlen, MADV_POPULATE_WRITE);
	rc = t->cuMemHostRegister(p, mlen, CU_MEMHOSTREGISTER_PORTABLE);
	if (rc != CUDA_SUCCESS) {
		munmap(p, mlen);
		return rc;
	}
	pm->p = p;
	pm->map_len = mlen;
	return CUDA_SUCCESS;
}

CUresult gpufile__pinned_alloc(const struct gpufile__cuda *t, size_t len,
                               struct gpufile__pinned *pm, const char **call)
{
	CUresult rc;

	memset(pm, 0, sizeof(*pm));
	if (t->cuMemHostRegister && t->cuMemHostUnregister &&
	    !atomic_load_explicit(&register_unsupported,
	                          memory_order_relaxed)) {
		rc = map_and_register(t, len, pm);
		if (rc == CUDA_SUCCESS)
			return rc;
		/* Out of memory is the answer: cuMemHostAlloc pins the same
		 * pages. */
		if (rc == CUDA_ERROR_OUT_OF_MEMORY) {
			*call = "cuMemHostRegister";
			return rc;
		}
		if (rc == CUDA_ERROR_NOT_SUPPORTED)
			atomic_store_explicit(&register_unsupported, 1,
			                      memory_order_relaxed);
	}
	*call = "cuMemHostAlloc";
	rc = t->cuMemHostAlloc(&pm->p, len, CU_MEMHOSTALLOC_PORTABLE);
	if (rc != CUDA_SUCCESS)
		pm->p = NULL;
	return rc;
}

void gpufile__pinned_free(const struct gpufile__cuda *t,
                          struct gpufile__pinned *pm, int ctx_alive)
{
	if (!pm->p)
		return;
	if (pm->map_len) {
		/* An ended context took the registration with it; the
		 * mapping is gpufile's own either way. */
		if (ctx_alive)
			t->cuMemHostUnregister(pm->p);
		munmap(pm->p, pm->map_len);
	} else if (ctx_alive) {
		t->cuMemFreeHost(pm->p);
	}
	memset(pm, 0, sizeof(*pm));
}
