/*
 * Several CUDA contexts in one process, on a real GPU: contexts the
 * program creates (cuCtxCreate) beside the device's primary one, read
 * into at the same time from threads with and without a current context,
 * synchronously, asynchronously and on a stream; then a context
 * destroyed while gpufile keeps staging state from reads into it, a new
 * one created (the driver may give it the old handle), and the primary
 * context reset (what cudaDeviceReset does). Every byte is checked by
 * copying it back in its own context. Skips (77) without a GPU.
 * TEST_GPU_CONTEXTS_PROBE=1 first prints what the driver does with a
 * destroyed context's handle and a reset primary context (the facts
 * cuda_shim.h cites).
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#define SEED      67
#define FILE_SIZE ((64u << 20) + 123)
#define BUF_SIZE  (FILE_SIZE + 8192)

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;

static struct {
	CUresult (*Init)(unsigned);
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*CtxCreate)(CUcontext *, void *, unsigned, CUdevice);
	CUresult (*CtxDestroy)(CUcontext);
	CUresult (*CtxSetCurrent)(CUcontext);
	CUresult (*PrimaryRetain)(CUcontext *, CUdevice);
	CUresult (*PrimaryRelease)(CUdevice);
	CUresult (*PrimaryReset)(CUdevice);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
	CUresult (*CtxSynchronize)(void);
	CUresult (*CtxGetId)(CUcontext, unsigned long long *);
	CUresult (*StreamCreate)(CUstream *, unsigned);
	CUresult (*StreamDestroy)(CUstream);
	CUresult (*StreamSynchronize)(CUstream);
} cu;

static const char *path;

static int load_driver(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	struct {
		const char *name;
		void **fn;
	} syms[] = {
	    {"cuInit", (void **)&cu.Init},
	    {"cuDeviceGet", (void **)&cu.DeviceGet},
	    {"cuCtxCreate_v4", (void **)&cu.CtxCreate},
	    {"cuCtxDestroy_v2", (void **)&cu.CtxDestroy},
	    {"cuCtxSetCurrent", (void **)&cu.CtxSetCurrent},
	    {"cuDevicePrimaryCtxRetain", (void **)&cu.PrimaryRetain},
	    {"cuDevicePrimaryCtxRelease_v2", (void **)&cu.PrimaryRelease},
	    {"cuDevicePrimaryCtxReset_v2", (void **)&cu.PrimaryReset},
	    {"cuMemAlloc_v2", (void **)&cu.MemAlloc},
	    {"cuMemFree_v2", (void **)&cu.MemFree},
	    {"cuMemcpyDtoH_v2", (void **)&cu.MemcpyDtoH},
	    {"cuMemsetD8_v2", (void **)&cu.MemsetD8},
	    {"cuCtxSynchronize", (void **)&cu.CtxSynchronize},
	    {"cuCtxGetId", (void **)&cu.CtxGetId},
	    {"cuStreamCreate", (void **)&cu.StreamCreate},
	    {"cuStreamDestroy_v2", (void **)&cu.StreamDestroy},
	    {"cuStreamSynchronize", (void **)&cu.StreamSynchronize},
	};

	if (!lib)
		return -1;
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		*syms[i].fn = dlsym(lib, syms[i].name);
		if (!*syms[i].fn) {
			fprintf(stderr, "libcuda.so.1 lacks %s\n",
			        syms[i].name);
			return -1;
		}
	}
	return cu.Init(0) == 0 ? 0 : -1;
}

/* A context's memory to read into. */
struct target {
	const char *name;
	CUcontext ctx;
	CUdeviceptr mem;
};

/* STREAM_HOST: a stream-ordered read into host memory, which the stream
 * waits for on a flag gpufile keeps in pinned memory. */
enum how { SYNC, ASYNC, STREAM, STREAM_HOST, NHOW };
static const char *const how_name[NHOW] = {"sync", "async", "stream",
                                           "stream-ordered host"};

/* Reads size bytes at off into t's memory (4099 bytes in, so that the
 * copies are not aligned) the way how says, with current (maybe NULL, or
 * another context) current on this thread during the read; checks the
 * bytes in t's context. Returns 0 when right. */
static int read_check(gpufile_t *h, const struct target *t, CUcontext current,
                      size_t size, int64_t off, enum how how,
                      unsigned char *host)
{
	const CUdeviceptr dst = t->mem + 4099;
	ssize_t n = -1;
	CUstream s = NULL;
	int rc = 0;

	/* The memset runs on the context's default stream, which gpufile's
	 * copies are not ordered after: it must have ended first. */
	if (cu.CtxSetCurrent(t->ctx) || cu.MemsetD8(t->mem, 0xE7, BUF_SIZE) ||
	    cu.CtxSynchronize())
		return -1;
	if ((how == STREAM || how == STREAM_HOST) && cu.StreamCreate(&s, 0))
		return -1;
	if (cu.CtxSetCurrent(current))
		return -1;
	if (how == SYNC) {
		n = gpufile_pread(h, (void *)(uintptr_t)dst, size, off);
	} else if (how == ASYNC) {
		gpufile_future_t *f = NULL;

		if (gpufile_pread_async(h, (void *)(uintptr_t)dst, size, off,
		                        &f) == 0)
			n = gpufile_future_wait(f);
		gpufile_future_free(f);
	} else if (how == STREAM) {
		rc = gpufile_read_async(h, (void *)(uintptr_t)dst, size, off, s,
		                        &n);
	} else {
		memset(host, 0, size);
		rc = gpufile_read_async(h, host, size, off, s, &n);
	}
	if (cu.CtxSetCurrent(t->ctx))
		return -1;
	if (s) {
		if (rc == 0 && cu.StreamSynchronize(s))
			rc = -1;
		cu.StreamDestroy(s);
	}
	if (how != STREAM_HOST)
		memset(host, 0, size);
	if (rc == 0 && n == (ssize_t)size &&
	    (how == STREAM_HOST || cu.MemcpyDtoH(host, dst, size) == 0) &&
	    test_mismatch(host, size, SEED, (uint64_t)off) == -1)
		return 0;
	fprintf(stderr, "  %s, %s read of %zu bytes at %lld: %zd %s\n", t->name,
	        how_name[how], size, (long long)off, n,
	        n < 0 || rc ? gpufile_errmsg() : "(bytes differ)");
	return -1;
}

static const size_t sizes[] = {(1u << 20) + 17, (16u << 20) - 5, FILE_SIZE};

/* Every size, every way, into t; current as read_check. Returns the
 * number of reads that went wrong. */
static int read_all(const struct target *t, CUcontext current)
{
	unsigned char *host = test_malloc(FILE_SIZE);
	gpufile_t *h = NULL;
	int bad = 0;

	if (gpufile_open(&h, path, "r") != 0) {
		free(host);
		return 1;
	}
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		for (int how = 0; how < NHOW; how++)
			bad += read_check(h, t, current, sizes[i],
			                  sizes[i] == FILE_SIZE ? 0 : 4099,
			                  (enum how)how, host) != 0;
	gpufile_close(h);
	free(host);
	return bad;
}

struct reader {
	const struct target *t;
	CUcontext current;
	int bad;
};

static void *reader_main(void *arg)
{
	struct reader *rd = arg;

	for (int round = 0; round < 2; round++)
		rd->bad += read_all(rd->t, rd->current);
	return NULL;
}

static int make_target(struct target *t, const char *name, CUdevice dev,
                       int primary)
{
	t->name = name;
	if (primary ? cu.PrimaryRetain(&t->ctx, dev)
	            : cu.CtxCreate(&t->ctx, NULL, 0, dev))
		return -1;
	if (cu.CtxSetCurrent(t->ctx) || cu.MemAlloc(&t->mem, BUF_SIZE))
		return -1;
	return 0;
}

/* What this driver does with a destroyed context's handle and with a
 * reset primary context (printed: what gpufile must cope with). */
static void probe_driver(CUdevice dev)
{
	CUcontext x = NULL, y = NULL, p = NULL, q = NULL;
	unsigned long long idx = 0, idy = 0, idp = 0, idq = 0, dead = 0;
	int rc;

	if (cu.CtxCreate(&x, NULL, 0, dev) || cu.CtxGetId(x, &idx))
		return;
	cu.CtxDestroy(x);
	printf("probe: destroyed a context, asking its id\n");
	rc = cu.CtxGetId(x, &dead);
	printf("probe: cuCtxGetId of a destroyed context: %d (id %llu, "
	       "was %llu)\n",
	       rc, dead, idx);
	if (cu.CtxCreate(&y, NULL, 0, dev) == 0 && cu.CtxGetId(y, &idy) == 0)
		printf("probe: the next context %s its handle, id %llu\n",
		       y == x ? "has" : "does not have", idy);
	cu.CtxDestroy(y);
	cu.CtxSetCurrent(NULL);
	if (cu.PrimaryRetain(&p, dev) || cu.CtxGetId(p, &idp))
		return;
	cu.PrimaryReset(dev);
	printf("probe: primary reset, asking its id\n");
	rc = cu.CtxGetId(p, &dead);
	printf("probe: primary %p id %llu; after a reset, still retained: "
	       "cuCtxGetId %d (id %llu)\n",
	       (void *)p, idp, rc, dead);
	if (cu.PrimaryRetain(&q, dev) == 0 && cu.CtxGetId(q, &idq) == 0)
		printf("probe: retained again: %s handle, id %llu\n",
		       q == p ? "the same" : "another", idq);
	cu.PrimaryRelease(dev);
	cu.PrimaryRelease(dev);
}

int main(void)
{
	struct target prim, a, b, c;
	CUcontext old_a;
	CUdevice dev;
	pthread_t th[3];

	if (gpufile_cuda_device_count() < 1 || load_driver() != 0) {
		printf("test_gpu_contexts: no GPU: skipped\n");
		return TEST_SKIP;
	}
	path = test_path("gpu-contexts.bin");
	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED), 0);
	CHECK_EQ(cu.DeviceGet(&dev, 0), 0);
	setvbuf(stdout, NULL, _IONBF, 0);
	if (getenv("TEST_GPU_CONTEXTS_PROBE"))
		probe_driver(dev);
	CHECK_EQ(make_target(&prim, "primary context", dev, 1), 0);
	CHECK_EQ(make_target(&a, "created context A", dev, 0), 0);
	CHECK_EQ(make_target(&b, "created context B", dev, 0), 0);
	if (test_failures)
		return test_finish("test_gpu_contexts");

	/* Three contexts read into at once: from a thread where the
	 * buffer's context is current, one with none current, and one with
	 * another context current. */
	{
		struct reader rd[3] = {
		    {&prim, prim.ctx, 0}, {&a, NULL, 0}, {&b, a.ctx, 0}};

		for (int i = 0; i < 3; i++)
			CHECK_EQ(
			    pthread_create(&th[i], NULL, reader_main, &rd[i]),
			    0);
		for (int i = 0; i < 3; i++) {
			pthread_join(th[i], NULL);
			CHECK_EQ(rd[i].bad, 0);
		}
		printf("three contexts at once: %s\n",
		       rd[0].bad + rd[1].bad + rd[2].bad ? "FAIL" : "ok");
	}

	/* A destroyed while gpufile holds what it made for reads into it;
	 * the others are still read into right, and so is a context created
	 * after it (which may have A's handle). */
	old_a = a.ctx;
	CHECK_EQ(cu.CtxSetCurrent(a.ctx), 0);
	CHECK_EQ(cu.MemFree(a.mem), 0);
	CHECK_EQ(cu.CtxDestroy(a.ctx), 0);
	CHECK_EQ(read_all(&b, NULL), 0);
	CHECK_EQ(read_all(&prim, b.ctx), 0);
	CHECK_EQ(make_target(&c, "created context C", dev, 0), 0);
	printf("context C %s context A's handle\n",
	       c.ctx == old_a ? "has" : "does not have");
	CHECK_EQ(read_all(&c, NULL), 0);
	CHECK_EQ(read_all(&c, c.ctx), 0);
	printf("after destroying a context: %s\n",
	       test_failures ? "FAIL" : "ok");

	/* The primary context reset, as cudaDeviceReset() does: its memory
	 * is gone, gpufile's too if it kept any there. */
	CHECK_EQ(cu.CtxSetCurrent(NULL), 0);
	CHECK_EQ(cu.PrimaryReset(dev), 0);
	CHECK_EQ(cu.PrimaryRelease(dev), 0);
	CHECK_EQ(make_target(&prim, "primary context after reset", dev, 1), 0);
	CHECK_EQ(read_all(&prim, NULL), 0);
	CHECK_EQ(read_all(&c, prim.ctx), 0);
	printf("after resetting the primary context: %s\n",
	       test_failures ? "FAIL" : "ok");

	CHECK_EQ(cu.CtxSetCurrent(prim.ctx), 0);
	CHECK_EQ(cu.MemFree(prim.mem), 0);
	CHECK_EQ(cu.CtxSetCurrent(c.ctx), 0);
	CHECK_EQ(cu.MemFree(c.mem), 0);
	CHECK_EQ(cu.CtxSetCurrent(b.ctx), 0);
	CHECK_EQ(cu.MemFree(b.mem), 0);
	gpufile_release();
	CHECK_EQ(cu.CtxDestroy(b.ctx), 0);
	CHECK_EQ(cu.CtxDestroy(c.ctx), 0);
	CHECK_EQ(cu.PrimaryRelease(dev), 0);
	return test_finish("test_gpu_contexts");
}
