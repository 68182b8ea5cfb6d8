/*
 * first_use: what a staged read's first use of the GPU costs, piece by
 * piece, to find where a fresh process's first read loses its time (issue
 * 14 goal 1: a first 64 MiB read took 74 ms where a later one takes ~2).
 *
 *   first_use [--rounds N] [--threads T] [--buffers B] [--mib M]
 *
 * In rounds, each pattern once, the order rotating, pinned memory freed
 * after each (T workers x B buffers of M MiB + 4 KiB, gpufile's default
 * shape: 16 x 2 x 4 MiB):
 *   serial    one thread cuMemHostAlloc's all T*B buffers, one a call;
 *   parallel  T threads, each its B buffers (what T workers do on their
 *             first device task);
 *   one       one cuMemHostAlloc of all of it;
 *   register  T threads each map B*M MiB (MAP_POPULATE) and
 *             cuMemHostRegister it;
 *   streams   T cuStreamCreate + T*B cuEventCreate, one thread;
 *   huge      T threads each map B*M MiB 2 MiB-aligned, ask for
 *             transparent huge pages (MADV_HUGEPAGE), populate
 *             (MADV_POPULATE_WRITE) and cuMemHostRegister it;
 *   huge1     one thread does the same for all of it, one region;
 * and the seconds of each (median over the rounds). The pinned memory of
 * a pattern is touched by nobody: only the allocation is timed.
 */
#define _GNU_SOURCE
#include "cuda_shim.h"
#include "gpufile.h"
#include "bench_util.h"
#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define MAX_THREADS 64
#define MAX_BUFS    (MAX_THREADS * 8)

static const struct gpufile__cuda *cu;
static CUcontext ctx;
static unsigned nthreads = 16, nbufs = 2;
static size_t buf_bytes = (4u << 20) + 4096;
static void *bufs[MAX_BUFS];

static void die(const char *what, long rc)
{
	fprintf(stderr, "first_use: %s failed (%ld)\n", what, rc);
	exit(1);
}

static void alloc_range(unsigned from, unsigned n)
{
	for (unsigned i = from; i < from + n; i++) {
		CUresult rc = cu->cuMemHostAlloc(&bufs[i], buf_bytes,
		                                 CU_MEMHOSTALLOC_PORTABLE);
		if (rc)
			die("cuMemHostAlloc", rc);
	}
}

static void free_all(unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		cu->cuMemFreeHost(bufs[i]);
}

static void *alloc_worker(void *arg)
{
	unsigned w = (unsigned)(uintptr_t)arg;

	cu->cuCtxSetCurrent(ctx);
	alloc_range(w * nbufs, nbufs);
	return NULL;
}

static void *register_worker(void *arg)
{
	unsigned w = (unsigned)(uintptr_t)arg;
	size_t len = buf_bytes * nbufs;
	void *p;
	CUresult rc;

	cu->cuCtxSetCurrent(ctx);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
	         MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (p == MAP_FAILED)
		die("mmap", 0);
	rc = cu->cuMemHostRegister(p, len, CU_MEMHOSTREGISTER_PORTABLE);
	if (rc)
		die("cuMemHostRegister", rc);
	bufs[w] = p;
	return NULL;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define HUGE_ALIGN (2u << 20)

static int huge_ok = 1;

/* A region of len bytes (a multiple of 2 MiB) at a 2 MiB boundary, backed
 * by transparent huge pages where the kernel gives them, populated and
 * registered; *base receives what to munmap, *maplen its length. */
static void *huge_region(size_t len, void **base, size_t *maplen)
{
	char *p, *q;
	CUresult rc;

	*maplen = len + HUGE_ALIGN;
	p = mmap(NULL, *maplen, PROT_READ | PROT_WRITE,
	         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		die("mmap", 0);
	q = (char *)(((uintptr_t)p + HUGE_ALIGN - 1) &
	             ~(uintptr_t)(HUGE_ALIGN - 1));
	if (madvise(q, len, MADV_HUGEPAGE))
		huge_ok = 0;
	if (madvise(q, len, MADV_POPULATE_WRITE))
		memset(q, 0, len);
	rc = cu->cuMemHostRegister(q, len, CU_MEMHOSTREGISTER_PORTABLE);
	if (rc)
		die("cuMemHostRegister (huge)", rc);
	*base = p;
	return q;
}

static size_t huge_len(size_t n)
{
	return (n + HUGE_ALIGN - 1) & ~(size_t)(HUGE_ALIGN - 1);
}

static void *huge_base[MAX_THREADS], *huge_reg[MAX_THREADS];
static size_t huge_maplen[MAX_THREADS];

static void *huge_worker(void *arg)
{
	unsigned w = (unsigned)(uintptr_t)arg;

	cu->cuCtxSetCurrent(ctx);
	huge_reg[w] = huge_region(huge_len(buf_bytes * nbufs), &huge_base[w],
	                          &huge_maplen[w]);
	return NULL;
}

static void huge_free(unsigned n)
{
	for (unsigned w = 0; w < n; w++) {
		cu->cuMemHostUnregister(huge_reg[w]);
		munmap(huge_base[w], huge_maplen[w]);
	}
}

/* Kilobytes of AnonHugePages in this process (smaps_rollup). */
static long anon_huge_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/smaps_rollup", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static double threads(void *(*fn)(void *))
{
	pthread_t th[MAX_THREADS];
	double t0 = bench_now();

	for (unsigned w = 0; w < nthreads; w++)
		if (pthread_create(&th[w], NULL, fn, (void *)(uintptr_t)w))
			die("pthread_create", 0);
	for (unsigned w = 0; w < nthreads; w++)
		pthread_join(th[w], NULL);
	return bench_now() - t0;
}

static double pattern(int which)
{
	unsigned n = nthreads * nbufs;
	double t0, t;

	switch (which) {
	case 0: /* serial */
		t0 = bench_now();
		alloc_range(0, n);
		t = bench_now() - t0;
		free_all(n);
		return t;
	case 1: /* parallel */
		t = threads(alloc_worker);
		free_all(n);
		return t;
	case 2: { /* one */
		void *p;
		CUresult rc;

		t0 = bench_now();
		rc = cu->cuMemHostAlloc(&p, buf_bytes * n,
		                        CU_MEMHOSTALLOC_PORTABLE);
		t = bench_now() - t0;
		if (rc)
			die("cuMemHostAlloc (one)", rc);
		cu->cuMemFreeHost(p);
		return t;
	}
	case 3: /* register */
		t = threads(register_worker);
		for (unsigned w = 0; w < nthreads; w++) {
			cu->cuMemHostUnregister(bufs[w]);
			munmap(bufs[w], buf_bytes * nbufs);
		}
		return t;
	case 5: /* huge */
		t = threads(huge_worker);
		huge_free(nthreads);
		return t;
	case 6: /* huge1 */
		t0 = bench_now();
		huge_reg[0] = huge_region(huge_len(buf_bytes * n),
		                          &huge_base[0], &huge_maplen[0]);
		t = bench_now() - t0;
		huge_free(1);
		return t;
	default: { /* streams and events */
		CUstream s[MAX_THREADS];
		CUevent e[MAX_BUFS];

		t0 = bench_now();
		for (unsigned w = 0; w < nthreads; w++)
			if (cu->cuStreamCreate(&s[w], CU_STREAM_NON_BLOCKING))
				die("cuStreamCreate", 0);
		for (unsigned i = 0; i < n; i++)
			if (cu->cuEventCreate(&e[i], CU_EVENT_DISABLE_TIMING))
				die("cuEventCreate", 0);
		t = bench_now() - t0;
		for (unsigned i = 0; i < n; i++)
			cu->cuEventDestroy(e[i]);
		for (unsigned w = 0; w < nthreads; w++)
			cu->cuStreamDestroy(s[w]);
		return t;
	}
	}
}

int main(int argc, char **argv)
{
	static const char *names[] = {"serial",  "parallel", "one",  "register",
	                              "streams", "huge",     "huge1"};
	enum { NPAT = 7, MAX_ROUNDS = 64 };
	double t[NPAT][MAX_ROUNDS];
	int rounds = 5;
	CUdevice d0;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
			rounds = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			nthreads = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--buffers") && i + 1 < argc)
			nbufs = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
			buf_bytes = ((size_t)atoi(argv[++i]) << 20) + 4096;
		else {
			fprintf(stderr, "usage: first_use [--rounds N] "
			                "[--threads T] [--buffers B] "
			                "[--mib M]\n");
			return 2;
		}
	}
	if (rounds < 1 || rounds > MAX_ROUNDS || !nthreads ||
	    nthreads > MAX_THREADS || !nbufs || nbufs > 8) {
		fprintf(stderr, "first_use: rounds 1..64, threads 1..64, "
		                "buffers 1..8\n");
		return 2;
	}
	if (gpufile_cuda_device_count() <= 0) {
		fprintf(stderr, "first_use: no GPU: %s\n", gpufile_errmsg());
		return 77;
	}
	cu = gpufile__cuda();
	if (cu->cuDeviceGet(&d0, 0) || cu->cuDevicePrimaryCtxRetain(&ctx, d0) ||
	    cu->cuCtxSetCurrent(ctx))
		die("context", 0);
	{
		void *b, *q;
		size_t ml;
		long before = anon_huge_kb();

		q = huge_region(HUGE_ALIGN * 8, &b, &ml);
		printf("first_use: a 16 MiB huge region holds %ld kB of "
		       "huge pages (madvise %s)\n",
		       anon_huge_kb() - before, huge_ok ? "ok" : "refused");
		cu->cuMemHostUnregister(q);
		munmap(b, ml);
	}
	for (int r = 0; r < rounds; r++)
		for (int k = 0; k < NPAT; k++) {
			int p = (k + r) % NPAT;
			t[p][r] = pattern(p);
		}
	printf("first_use: %u threads x %u buffers x %zu bytes = %.1f MiB "
	       "pinned, %d rounds (median, min, max ms)\n",
	       nthreads, nbufs, buf_bytes,
	       (double)buf_bytes * nthreads * nbufs / 1048576.0, rounds);
	for (int p = 0; p < NPAT; p++) {
		qsort(t[p], (size_t)rounds, sizeof(double), bench_cmp_double);
		printf("  %-9s %8.2f %8.2f %8.2f\n", names[p],
		       t[p][rounds / 2] * 1e3, t[p][0] * 1e3,
		       t[p][rounds - 1] * 1e3);
	}
	return 0;
}
