/*
 * libcuda.so.1 through dlopen. The driver is loaded fully only when a
 * caller needs a GPU (gpufile_cuda_device_count, gpufile_device_alloc);
 * classifying a pointer never loads it, because a process that has not
 * loaded libcuda cannot hold device memory, and cuInit costs hundreds of
 * milliseconds that a host-only user must not pay.
 */
#define _GNU_SOURCE
#include "platform/platform.h"
#include "platform/cuda_shim.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t cuda_lock = PTHREAD_MUTEX_INITIALIZER;
static struct gpufile__cuda real;
static const struct gpufile__cuda *_Atomic active; /* loaded, or a test's */
static const struct gpufile__cuda *_Atomic override;
static int load_failed;
static char load_error[256];
/* This process is a forked child of one that had initialised CUDA (or
 * had a test's driver installed): see gpufile__cuda_atfork_child. */
static atomic_int forked_after_init;

static const struct {
	const char *symbol;
	size_t offset;
	int optional; /* absent: the field stays NULL */
} symbols[] = {
#define SYM(field, name)                                                       \
	{                                                                      \
		name, offsetof(struct gpufile__cuda, field), 0                 \
	}
#define OPT(field, name)                                                       \
	{                                                                      \
		name, offsetof(struct gpufile__cuda, field), 1                 \
	}
    SYM(cuInit, "cuInit"),
    SYM(cuDriverGetVersion, "cuDriverGetVersion"),
    SYM(cuDeviceGetCount, "cuDeviceGetCount"),
    SYM(cuDeviceGet, "cuDeviceGet"),
    SYM(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
    SYM(cuCtxGetCurrent, "cuCtxGetCurrent"),
    SYM(cuCtxSetCurrent, "cuCtxSetCurrent"),
    SYM(cuPointerGetAttributes, "cuPointerGetAttributes"),
    SYM(cuMemAlloc, "cuMemAlloc_v2"),
    SYM(cuMemFree, "cuMemFree_v2"),
    SYM(cuMemHostAlloc, "cuMemHostAlloc"),
    SYM(cuMemFreeHost, "cuMemFreeHost"),
    SYM(cuMemHostRegister, "cuMemHostRegister_v2"),
    SYM(cuMemHostUnregister, "cuMemHostUnregister"),
    SYM(cuMemcpy, "cuMemcpy"),
    SYM(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
    SYM(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
    SYM(cuStreamCreate, "cuStreamCreate"),
    SYM(cuStreamDestroy, "cuStreamDestroy_v2"),
    SYM(cuStreamSynchronize, "cuStreamSynchronize"),
    SYM(cuEventCreate, "cuEventCreate"),
    SYM(cuEventDestroy, "cuEventDestroy_v2"),
    SYM(cuEventRecord, "cuEventRecord"),
    SYM(cuEventSynchronize, "cuEventSynchronize"),
    SYM(cuGetErrorName, "cuGetErrorName"),
    /* The _v2 wait is the one CUDA 12 documents and enables on every
     * device; the first form needs stream memory operations enabled
     * (CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1) on older drivers. */
    OPT(cuStreamWaitValue32, "cuStreamWaitValue32_v2"),
    OPT(cuStreamWaitValue32, "cuStreamWaitValue32"),
    OPT(cuLaunchHostFunc, "cuLaunchHostFunc"),
    OPT(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2"),
    OPT(cuStreamGetCtx, "cuStreamGetCtx"),
    OPT(cuStreamIsCapturing, "cuStreamIsCapturing"),
    OPT(cuCtxGetId, "cuCtxGetId"),
    OPT(cuCtxGetDevice, "cuCtxGetDevice"),
#undef OPT
#undef SYM
};

/* Caller holds cuda_lock. Resolves every symbol from lib and runs cuInit. */
static int resolve(void *lib)
{
	CUresult rc;

	for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
		void *fn = dlsym(lib, symbols[i].symbol);
		void *have;

		if (symbols[i].optional) {
			/* A later spelling only fills what an earlier one
			 * did not. */
			memcpy(&have, (char *)&real + symbols[i].offset,
			       sizeof(have));
			if (fn && !have)
				memcpy((char *)&real + symbols[i].offset, &fn,
				       sizeof(fn));
			continue;
		}
		if (!fn) {
			snprintf(load_error, sizeof(load_error),
			         "libcuda.so.1 lacks %s: driver too old",
			         symbols[i].symbol);
			return -1;
		}
		memcpy((char *)&real + symbols[i].offset, &fn, sizeof(fn));
	}
	/* Optional entry points. */
	{
		void *fn = dlsym(lib, "cuMemcpyBatchAsync_v2");
		memcpy(&real.cuMemcpyBatchAsync, &fn, sizeof(fn));
	}
	rc = real.cuInit(0);
	if (rc != CUDA_SUCCESS) {
		const char *name = "?";
		real.cuGetErrorName(rc, &name);
		snprintf(load_error, sizeof(load_error),
		         "cuInit failed: %s (%d): no usable GPU or driver",
		         name, rc);
		return -1;
	}
	return 0;
}

const struct gpufile__cuda *gpufile__cuda(void)
{
	const struct gpufile__cuda *t = atomic_load(&override);
	void *lib;

	if (t)
		return t;
	t = atomic_load(&active);
	if (t)
		return t;
	pthread_mutex_lock(&cuda_lock);
	if (!active && !load_failed && !forked_after_init) {
		lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
		if (!lib) {
			snprintf(load_error, sizeof(load_error),
			         "cannot load libcuda.so.1 (%s): no NVIDIA "
			         "driver on this machine",
			         dlerror());
			load_failed = 1;
		} else if (resolve(lib)) {
			load_failed = 1;
		} else {
			atomic_store(&active, &real);
		}
	}
	t = active;
	pthread_mutex_unlock(&cuda_lock);
	if (!t)
		gpufile__fail_msg(GPUFILE_ENOCUDA, load_error);
	return t;
}

static unsigned long long adds_at_last_miss = ~0ull; /* under dl_lock */

const struct gpufile__cuda *gpufile__cuda_if_loaded(void)
{
	const struct gpufile__cuda *t = atomic_load(&override);
	unsigned long long adds;
	void *lib;

	if (t)
		return t;
	t = atomic_load(&active);
	if (t || forked_after_init)
		return t;
	/* Some library of this process (the CUDA runtime, CuPy, PyTorch)
	 * may have loaded the driver since we last looked. dlopen with
	 * RTLD_NOLOAD still searches the library path (four failed openat
	 * calls, ~15 us), so ask only when the loader's count of loaded
	 * objects has moved since the last miss. */
	gpufile__dl_lock();
	adds = gpufile__dl_adds();
	lib = adds == adds_at_last_miss
	          ? NULL
	          : dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (lib)
		dlclose(lib);
	else
		adds_at_last_miss = adds;
	gpufile__dl_unlock();
	return lib ? gpufile__cuda() : NULL;
}

void gpufile__cuda_override(const struct gpufile__cuda *table)
{
	pthread_mutex_lock(&cuda_lock);
	if (table && forked_after_init) {
		/* A test gives the child a driver of its own. */
		forked_after_init = 0;
		load_failed = 0;
	}
	pthread_mutex_unlock(&cuda_lock);
	atomic_store(&override, table);
}

/*
 * fork() (see fork.c). CUDA does not copy its state into a child: a
 * child of a process that initialised CUDA may not call CUDA at all
 * before exec (the CUDA programming guide; in practice calls fail with
 * CUDA_ERROR_INITIALIZATION_ERROR or hang). So a child of such a process
 * forgets the driver without a call into it, and every device request or
 * allocation fails with GPUFILE_ENOCUDA and a message saying why; host
 * memory works as before. A child of a process that never initialised
 * CUDA loads it on first need like any process.
 */
int gpufile__cuda_forked(void)
{
	return atomic_load(&forked_after_init);
}

void gpufile__cuda_atfork_prepare(void)
{
	pthread_mutex_lock(&cuda_lock);
}

void gpufile__cuda_atfork_parent(void)
{
	pthread_mutex_unlock(&cuda_lock);
}

void gpufile__cuda_atfork_child(void)
{
	if (atomic_load(&active) || atomic_load(&override)) {
		forked_after_init = 1;
		load_failed = 1;
		snprintf(load_error, sizeof(load_error),
		         "CUDA was initialised in the parent before fork(): a "
		         "forked child cannot use CUDA (CUDA does not support "
		         "fork without exec); use device memory from a "
		         "process started with exec (Python: multiprocessing "
		         "start method \"spawn\")");
		atomic_store(&active, NULL);
		atomic_store(&override, NULL);
	}
	pthread_mutex_unlock(&cuda_lock);
}

int gpufile__cuda_fail(CUresult rc, char *msg, size_t msg_len, const char *fmt,
                       ...)
{
	const struct gpufile__cuda *t = gpufile__cuda_if_loaded();
	const char *name = NULL;
	char what[384];
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	if (t && t->cuGetErrorName)
		t->cuGetErrorName(rc, &name);
	snprintf(buf, sizeof(buf), "%s: %s (%d)", what,
	         name ? name : "CUDA error", rc);
	if (msg && msg_len)
		snprintf(msg, msg_len, "%s", buf);
	return gpufile__fail_msg(GPUFILE_ECUDA, buf);
}

int gpufile__classify(const void *ptr, gpufile_mem_t *kind, int *device,
                      void **ctx)
{
	const struct gpufile__cuda *t = gpufile__cuda_if_loaded();
	int attrs[4] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
	                CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
	                CU_POINTER_ATTRIBUTE_CONTEXT,
	                CU_POINTER_ATTRIBUTE_IS_MANAGED};
	unsigned memtype = 0;
	int ordinal = -1;
	CUcontext context = NULL;
	int managed = 0; /* the driver writes a bool-sized value, 0-filled */
	void *data[4] = {&memtype, &ordinal, &context, &managed};
	CUresult rc;

	*kind = GPUFILE_MEM_HOST;
	*device = -1;
	if (ctx)
		*ctx = NULL;
	if (!t)
		return 0;
	rc = t->cuPointerGetAttributes(4, attrs, data,
	                               (CUdeviceptr)(uintptr_t)ptr);
	if (rc == CUDA_ERROR_INVALID_VALUE)
		return 0; /* memory CUDA does not know: pageable host */
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(rc, NULL, 0,
		                          "cuPointerGetAttributes(%p)", ptr);
	if (managed & 0xff) {
		*kind = GPUFILE_MEM_MANAGED;
		*device = ordinal;
	} else if (memtype == CU_MEMORYTYPE_DEVICE) {
		*kind = GPUFILE_MEM_DEVICE;
		*device = ordinal;
	} else if (memtype == CU_MEMORYTYPE_HOST) {
		*kind = GPUFILE_MEM_PINNED;
	}
	if (ctx)
		*ctx = context;
	return 0;
}

const char *gpufile_mem_name(gpufile_mem_t kind)
{
	static const char *const names[] = {"host", "pinned", "device",
	                                    "managed"};

	return (unsigned)kind < 4 ? names[kind] : "?";
}

int gpufile_mem_kind(const void *ptr, gpufile_mem_t *kind, int *device)
{
	int dev, rc;

	if (!kind)
		return gpufile__fail(-EINVAL, "gpufile_mem_kind: kind is NULL");
	rc = gpufile__classify(ptr, kind, &dev, NULL);
	if (rc == 0 && device)
		*device = dev;
	return rc;
}

int gpufile_cuda_device_count(void)
{
	const struct gpufile__cuda *t = gpufile__cuda();
	int n = 0;
	CUresult rc;

	if (!t)
		return GPUFILE_ENOCUDA;
	rc = t->cuDeviceGetCount(&n);
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(rc, NULL, 0, "cuDeviceGetCount");
	if (n == 0)
		return gpufile__fail(GPUFILE_ENOCUDA,
		                     "the CUDA driver reports no device");
	return n;
}

/* Makes the primary context of device ordinal current in this thread. */
static int use_device(const struct gpufile__cuda *t, int ordinal)
{
	CUcontext ctx;
	CUresult rc;
	int n = 0;

	if (t->cuDeviceGetCount(&n) != CUDA_SUCCESS || ordinal < 0 ||
	    ordinal >= n)
		return gpufile__fail(-ENODEV, "no CUDA device %d (%d present)",
		                     ordinal, n);
	if (gpufile__primary_context(ordinal, (void **)&ctx))
		return GPUFILE_ECUDA;
	rc = t->cuCtxSetCurrent(ctx);
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(rc, NULL, 0, "activating device %d",
		                          ordinal);
	return 0;
}

/* Makes the context that owns ptr current; keeps the current one for
 * memory CUDA does not know. */
static int use_context_of(const struct gpufile__cuda *t, const void *ptr)
{
	gpufile_mem_t kind;
	int dev;
	void *ctx;
	int rc = gpufile__classify(ptr, &kind, &dev, &ctx);

	if (rc)
		return rc;
	if (ctx) {
		CUresult cr = t->cuCtxSetCurrent((CUcontext)ctx);
		if (cr != CUDA_SUCCESS)
			return gpufile__cuda_fail(cr, NULL, 0,
			                          "cuCtxSetCurrent");
		return 0;
	}
	return use_device(t, dev >= 0 ? dev : 0);
}

int gpufile_device_alloc(int device, size_t size, void **out)
{
	const struct gpufile__cuda *t = gpufile__cuda();
	CUdeviceptr p;
	CUresult rc;
	int err;

	if (!out)
		return gpufile__fail(-EINVAL,
		                     "gpufile_device_alloc: out is NULL");
	*out = NULL;
	if (!t)
		return GPUFILE_ENOCUDA;
	err = use_device(t, device);
	if (err)
		return err;
	rc = t->cuMemAlloc(&p, size ? size : 1);
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(
		    rc, NULL, 0, "cuMemAlloc of %zu bytes on device %d", size,
		    device);
	*out = (void *)(uintptr_t)p;
	return 0;
}

int gpufile_device_free(void *ptr)
{
	const struct gpufile__cuda *t;
	CUresult rc;
	int err;

	if (!ptr)
		return 0;
	t = gpufile__cuda();
	if (!t)
		return GPUFILE_ENOCUDA;
	err = use_context_of(t, ptr);
	if (err)
		return err;
	rc = t->cuMemFree((CUdeviceptr)(uintptr_t)ptr);
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(rc, NULL, 0, "cuMemFree(%p)", ptr);
	return 0;
}

int gpufile_memcpy(void *dst, const void *src, size_t size)
{
	const struct gpufile__cuda *t = gpufile__cuda_if_loaded();
	gpufile_mem_t kd, ks;
	int dd, ds, err;
	CUresult rc;

	/* memmove of 0 bytes from NULL is still undefined behaviour, and a
	 * NULL with bytes to copy was a SIGSEGV. */
	if (!size)
		return 0;
	if (!dst || !src)
		return gpufile__fail(-EINVAL, "gpufile_memcpy: %s NULL",
		                     !dst && !src ? "dst and src are"
		                     : !dst       ? "dst is"
		                                  : "src is");
	if (!t) {
		memmove(dst, src, size);
		return 0;
	}
	err = gpufile_mem_kind(dst, &kd, &dd);
	if (!err)
		err = gpufile_mem_kind(src, &ks, &ds);
	if (err)
		return err;
	if (kd <= GPUFILE_MEM_PINNED && ks <= GPUFILE_MEM_PINNED) {
		memmove(dst, src, size);
		return 0;
	}
	err = use_context_of(t, kd >= GPUFILE_MEM_DEVICE ? dst : src);
	if (err)
		return err;
	rc = t->cuMemcpy((CUdeviceptr)(uintptr_t)dst,
	                 (CUdeviceptr)(uintptr_t)src, size);
	/* From pageable memory, cuMemcpy returns once the bytes are staged,
	 * before the last DMA has landed: wait for it, so that the device
	 * bytes are final when this returns. */
	if (rc == CUDA_SUCCESS)
		rc = t->cuStreamSynchronize(NULL);
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(rc, NULL, 0, "cuMemcpy of %zu bytes",
		                          size);
	return 0;
}

/* Primary contexts retained by gpufile__primary_context, per ordinal, with
 * the table that retained them (a test may swap tables). One reference per
 * device, taken once (before, every request on cuMemMap memory and every
 * gpufile_device_alloc took one more) and held for the life of the
 * process: memory from gpufile_device_alloc and cuFile's per-GPU driver
 * state live in that context, and releasing the last reference would
 * destroy them under the caller. */
#define MAX_PRIMARY 64
static pthread_mutex_t primary_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	const struct gpufile__cuda *table;
	CUcontext ctx;
	unsigned long long id; /* gpufile__ctx_id when retained */
} primary[MAX_PRIMARY];

int gpufile__ctx_id(const struct gpufile__cuda *t, CUcontext ctx,
                    unsigned long long *id)
{
	*id = 0;
	if (!t || !t->cuCtxGetId)
		return 0;
	return t->cuCtxGetId(ctx, id) == CUDA_SUCCESS ? 0 : -1;
}

CUresult gpufile__ctx_restore(const struct gpufile__cuda *t, CUcontext old)
{
	unsigned long long id;

	if (old && gpufile__ctx_id(t, old, &id))
		old = NULL;
	return t->cuCtxSetCurrent(old);
}

int gpufile__ctx_same(const struct gpufile__cuda *t, CUcontext ctx,
                      unsigned long long id)
{
	unsigned long long now;

	return ctx && gpufile__ctx_id(t, ctx, &now) == 0 && now == id;
}

int gpufile__current_device(const struct gpufile__cuda *t)
{
	CUdevice dev = 0;

	if (t->cuCtxGetDevice && t->cuCtxGetDevice(&dev) == CUDA_SUCCESS)
		return dev;
	return 0;
}

int gpufile__primary_context(int device, void **ctx)
{
	const struct gpufile__cuda *t = gpufile__cuda();
	CUdevice dev = 0;
	CUcontext c = NULL;
	CUresult cr;

	*ctx = NULL;
	if (!t)
		return GPUFILE_ENOCUDA;
	if (device < 0 || device >= MAX_PRIMARY)
		return gpufile__fail(-ENODEV, "no CUDA device %d", device);
	pthread_mutex_lock(&primary_lock);
	/* A primary context reset (cudaDeviceReset) is destroyed under
	 * gpufile's reference: cuCtxGetId answers
	 * CUDA_ERROR_CONTEXT_IS_DESTROYED (709) until it is retained again,
	 * which gives the same handle and a new id (driver 580, H200). */
	if (primary[device].ctx && primary[device].table == t &&
	    gpufile__ctx_same(t, primary[device].ctx, primary[device].id)) {
		*ctx = primary[device].ctx;
		pthread_mutex_unlock(&primary_lock);
		return 0;
	}
	cr = t->cuDeviceGet(&dev, device);
	if (cr == CUDA_SUCCESS)
		cr = t->cuDevicePrimaryCtxRetain(&c, dev);
	if (cr == CUDA_SUCCESS) {
		primary[device].table = t;
		primary[device].ctx = c;
		gpufile__ctx_id(t, c, &primary[device].id);
		*ctx = c;
	}
	pthread_mutex_unlock(&primary_lock);
	if (cr != CUDA_SUCCESS)
		return gpufile__cuda_fail(
		    cr, NULL, 0, "retaining device %d's context", device);
	return 0;
}

int gpufile__current_or_primary(void **ctx)
{
	const struct gpufile__cuda *t = gpufile__cuda();
	CUcontext c = NULL;

	*ctx = NULL;
	if (!t)
		return GPUFILE_ENOCUDA;
	if (t->cuCtxGetCurrent(&c) == CUDA_SUCCESS && c) {
		*ctx = c;
		return 0;
	}
	return gpufile__primary_context(0, ctx);
}
