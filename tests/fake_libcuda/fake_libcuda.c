/*
 * libcuda.so.1 for machines without a GPU, for the Python binding's tests:
 * the fake driver of fake_cuda.h (streams are queues run when someone
 * synchronises them; host functions; waits on 32-bit values) exported
 * under the driver's own names, with a bump allocator over DEV_SIZE bytes
 * of host memory standing in for GPU 0's memory, and the calls the
 * binding's _cuda.py makes (cuPointerGetAttribute, context push and pop).
 */
#define _GNU_SOURCE
#define DEV_SIZE (256u << 20)
#include "fake_cuda.h"

#include <stdint.h>

#define EXPORT __attribute__((visibility("default")))

static pthread_once_t once = PTHREAD_ONCE_INIT;
static size_t dev_used;

static void setup(void)
{
	dev_base = aligned_alloc(4096, DEV_SIZE);
}

EXPORT CUresult cuInit(unsigned flags)
{
	(void)flags;
	pthread_once(&once, setup);
	return dev_base ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuDriverGetVersion(int *v)
{
	return fake.cuDriverGetVersion(v);
}

EXPORT CUresult cuDeviceGetCount(int *n)
{
	return fake.cuDeviceGetCount(n);
}

EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
	return fake.cuDeviceGet(d, ordinal);
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d)
{
	return fake.cuDevicePrimaryCtxRetain(ctx, d);
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	(void)d;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *ctx)
{
	return fake.cuCtxGetCurrent(ctx);
}

EXPORT CUresult cuCtxSetCurrent(CUcontext ctx)
{
	return fake.cuCtxSetCurrent(ctx);
}

EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	return fake.cuCtxSetCurrent(ctx);
}

EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *ctx)
{
	if (ctx)
		*ctx = fake_ctx;
	return CUDA_SUCCESS;
}

EXPORT CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data,
                                       CUdeviceptr ptr)
{
	return fake.cuPointerGetAttributes(n, attrs, data, ptr);
}

EXPORT CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr ptr)
{
	return fake.cuPointerGetAttributes(1, &attr, &data, ptr);
}

/* Device memory: a bump allocator (tests allocate a few buffers). */
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
	CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;

	size = (size + 4095) & ~(size_t)4095;
	pthread_mutex_lock(&fake_lock);
	if (dev_base && size <= DEV_SIZE - dev_used) {
		*p = (CUdeviceptr)(uintptr_t)(dev_base + dev_used);
		dev_used += size;
		rc = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
	return fake.cuMemFree(p);
}

EXPORT CUresult cuMemHostAlloc(void **p, size_t size, unsigned flags)
{
	return fake.cuMemHostAlloc(p, size, flags);
}

EXPORT CUresult cuMemFreeHost(void *p)
{
	return fake.cuMemFreeHost(p);
}

EXPORT CUresult cuMemHostRegister_v2(void *p, size_t size, unsigned flags)
{
	return fake.cuMemHostRegister(p, size, flags);
}

EXPORT CUresult cuMemHostUnregister(void *p)
{
	return fake.cuMemHostUnregister(p);
}

EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p,
                                             unsigned flags)
{
	return fake.cuMemHostGetDevicePointer(d, p, flags);
}

EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t size)
{
	return fake.cuMemcpy(dst, src, size);
}

EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src,
                                     size_t size, CUstream s)
{
	return fake.cuMemcpyHtoDAsync(dst, src, size, s);
}

EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t size,
                                     CUstream s)
{
	return fake.cuMemcpyDtoHAsync(dst, src, size, s);
}

EXPORT CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
	return fake.cuStreamCreate(s, flags);
}

EXPORT CUresult cuStreamDestroy_v2(CUstream s)
{
	return fake.cuStreamDestroy(s);
}

EXPORT CUresult cuStreamSynchronize(CUstream s)
{
	return fake.cuStreamSynchronize(s);
}

EXPORT CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr,
                                       unsigned value, unsigned flags)
{
	return fake.cuStreamWaitValue32(s, addr, value, flags);
}

EXPORT CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
	return fake.cuLaunchHostFunc(s, fn, data);
}

EXPORT CUresult cuEventCreate(CUevent *e, unsigned flags)
{
	return fake.cuEventCreate(e, flags);
}

EXPORT CUresult cuEventDestroy_v2(CUevent e)
{
	return fake.cuEventDestroy(e);
}

EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
	return fake.cuEventRecord(e, s);
}

EXPORT CUresult cuEventSynchronize(CUevent e)
{
	return fake.cuEventSynchronize(e);
}

EXPORT CUresult cuGetErrorName(CUresult rc, const char **name)
{
	return fake.cuGetErrorName(rc, name);
}

/* Counters for the tests: stream waits and host functions queued. */
EXPORT long fake_cuda_wait_ops(void)
{
	long n;

	pthread_mutex_lock(&fake_lock);
	n = wait_ops;
	pthread_mutex_unlock(&fake_lock);
	return n;
}
