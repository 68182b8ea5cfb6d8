/*
 * The part of the CUDA driver API gpufile uses, declared here so that the
 * library builds without cuda.h and never links libcuda: libcuda.so.1 is
 * opened with dlopen on first need. Values are those of CUDA's cuda.h.
 */
#ifndef GPUFILE_CUDA_SHIM_H
#define GPUFILE_CUDA_SHIM_H

#include <stddef.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

#define CUDA_SUCCESS                    0
#define CUDA_ERROR_INVALID_VALUE        1
#define CUDA_ERROR_OUT_OF_MEMORY        2
#define CUDA_ERROR_NOT_INITIALIZED      3
#define CUDA_ERROR_NOT_READY            600
#define CUDA_ERROR_CONTEXT_IS_DESTROYED 709

#define CU_POINTER_ATTRIBUTE_CONTEXT          1
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE      2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED       8
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL   9
#define CU_POINTER_ATTRIBUTE_RANGE_START_ADDR 11
#define CU_POINTER_ATTRIBUTE_RANGE_SIZE       12
#define CU_MEMORYTYPE_HOST                    1
#define CU_MEMORYTYPE_DEVICE                  2
#define CU_MEMORYTYPE_UNIFIED                 4
#define CU_MEMHOSTALLOC_PORTABLE              0x01
#define CU_MEMHOSTREGISTER_PORTABLE           0x01
#define CU_MEMHOSTREGISTER_READ_ONLY          0x08
#define CU_STREAM_NON_BLOCKING                0x1
#define CU_EVENT_DISABLE_TIMING               0x2
#define CU_MEMHOSTALLOC_DEVICEMAP             0x02
#define CU_EVENT_BLOCKING_SYNC                0x1
#define CU_STREAM_WAIT_VALUE_GEQ              0x0
#define CUDA_ERROR_NOT_SUPPORTED              801

/* cuMemcpyBatchAsync's attributes (cuda.h, CUDA 12.8 on). */
struct CUmemcpyAttributes_st {
	int srcAccessOrder; /* CUmemcpySrcAccessOrder */
	struct {
		int type, id; /* CUmemLocation */
	} srcLocHint, dstLocHint;
	unsigned flags;
};
_Static_assert(sizeof(struct CUmemcpyAttributes_st) == 24,
               "CUmemcpyAttributes is 24 bytes");
#define CU_MEMCPY_SRC_ACCESS_ORDER_STREAM 1

typedef void (*CUhostFn)(void *user_data);

/* Every driver call gpufile makes, so that tests can replace the table
 * (gpufile__cuda_override) to inject failures or run the staging logic
 * with host memory standing in for a device. */
struct gpufile__cuda {
	CUresult (*cuInit)(unsigned flags);
	CUresult (*cuDriverGetVersion)(int *version);
	CUresult (*cuDeviceGetCount)(int *count);
	CUresult (*cuDeviceGet)(CUdevice *dev, int ordinal);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
	CUresult (*cuCtxGetCurrent)(CUcontext *ctx);
	CUresult (*cuCtxSetCurrent)(CUcontext ctx);
	CUresult (*cuPointerGetAttributes)(unsigned n, int *attrs, void **data,
	                                   CUdeviceptr ptr);
	CUresult (*cuMemAlloc)(CUdeviceptr *ptr, size_t size);
	CUresult (*cuMemFree)(CUdeviceptr ptr);
	CUresult (*cuMemHostAlloc)(void **ptr, size_t size, unsigned flags);
	CUresult (*cuMemFreeHost)(void *ptr);
	CUresult (*cuMemHostRegister)(void *ptr, size_t size, unsigned flags);
	CUresult (*cuMemHostUnregister)(void *ptr);
	CUresult (*cuMemcpy)(CUdeviceptr dst, CUdeviceptr src, size_t size);
	CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr dst, const void *src,
	                              size_t size, CUstream stream);
	CUresult (*cuMemcpyDtoHAsync)(void *dst, CUdeviceptr src, size_t size,
	                              CUstream stream);
	CUresult (*cuStreamCreate)(CUstream *stream, unsigned flags);
	CUresult (*cuStreamDestroy)(CUstream stream);
	CUresult (*cuStreamSynchronize)(CUstream stream);
	CUresult (*cuEventCreate)(CUevent *event, unsigned flags);
	CUresult (*cuEventDestroy)(CUevent event);
	CUresult (*cuEventRecord)(CUevent event, CUstream stream);
	CUresult (*cuEventSynchronize)(CUevent event);
	CUresult (*cuGetErrorName)(CUresult rc, const char **name);

	/* Optional entry points (stream-ordered requests, stream.c): NULL
	 * when the driver lacks them; callers check. */
	CUresult (*cuStreamWaitValue32)(CUstream stream, CUdeviceptr addr,
	                                unsigned value, unsigned flags);
	CUresult (*cuLaunchHostFunc)(CUstream stream, CUhostFn fn,
	                             void *user_data);
	CUresult (*cuMemHostGetDevicePointer)(CUdeviceptr *dptr, void *p,
	                                      unsigned flags);
	CUresult (*cuStreamGetCtx)(CUstream stream, CUcontext *ctx);
	/* *status: 0 not capturing, 1 capturing, 2 capture invalidated. */
	CUresult (*cuStreamIsCapturing)(CUstream stream, int *status);
	/* Optional (NULL when the driver lacks it): CUDA 13's
	 * cuMemcpyBatchAsync_v2, many copies in one call (batch.c). CUDA
	 * 12.8's cuMemcpyBatchAsync takes a ninth argument and is not
	 * used. */
	CUresult (*cuMemcpyBatchAsync)(CUdeviceptr *dsts, CUdeviceptr *srcs,
	                               size_t *sizes, size_t count,
	                               struct CUmemcpyAttributes_st *attrs,
	                               size_t *attrs_idxs, size_t num_attrs,
	                               CUstream stream);
	/* Optional (CUDA 12.0 on): a context's id, unique in the process,
	 * which tells a context from one destroyed before it (see
	 * gpufile__ctx_same); the current context's device. */
	CUresult (*cuCtxGetId)(CUcontext ctx, unsigned long long *id);
	CUresult (*cuCtxGetDevice)(CUdevice *dev);
};

/* The driver, loaded (dlopen + cuInit) on first call; NULL with the
 * thread's message set when it cannot be. */
const struct gpufile__cuda *gpufile__cuda(void);
/* The driver only if this process has already loaded libcuda.so.1 (or a
 * test installed a table); never loads it. NULL otherwise. */
const struct gpufile__cuda *gpufile__cuda_if_loaded(void);
/* Replaces the table (NULL restores the real driver). For tests. */
void gpufile__cuda_override(const struct gpufile__cuda *table);
/* Formats "what: NAME (code)" as the thread's message (and into msg when
 * msg is not NULL) and returns GPUFILE_ECUDA. */
int gpufile__cuda_fail(CUresult rc, char *msg, size_t msg_len, const char *fmt,
                       ...) __attribute__((format(printf, 4, 5)));

/*
 * The primary context of device ordinal, retained once per process (one
 * reference, held for the process's life: see cuda_shim.c) and shared by every
 * caller: a memory-mapped buffer (cuMemMap) reports no context, and
 * gpufile_path_info, warm-up and the cuFile driver need one when the
 * caller has none current. Returns 0 with *ctx set, or an error with the
 * thread's message naming the device.
 */
int gpufile__primary_context(int device, void **ctx);
/*
 * Contexts that end under gpufile. A program may destroy a context it
 * created (cuCtxDestroy), or reset a primary one (cudaDeviceReset,
 * cuDevicePrimaryCtxReset), while gpufile keeps streams, events or pinned
 * memory made in it; the driver frees them with the context, and its
 * handle may then name a new context (test_gpu_contexts saw both on the
 * H200). A call on a dead handle is undefined: cuCtxSetCurrent of a
 * destroyed context aborted in the driver ("free(): invalid pointer"),
 * while cuCtxGetId answers CUDA_ERROR_CONTEXT_IS_DESTROYED. So what
 * gpufile keeps in a context is kept with its id, and is used only while
 * the handle still has that id.
 *
 * gpufile__ctx_id: *id of ctx (0 where the driver lacks cuCtxGetId);
 * returns 0, or -1 when the driver says ctx has ended.
 * gpufile__ctx_same: 1 when ctx is non-NULL and still has id (always,
 * where the driver lacks cuCtxGetId: there the handle is all there is).
 * gpufile__current_device: the current context's device ordinal, or 0.
 * gpufile__ctx_restore: makes old current again, as a call that switched
 * contexts must leave its caller; NULL instead where old has ended. A
 * worker thread's current context is whatever its last task left, and
 * may have been reset since: putting that back was such a call on a dead
 * handle (test_context_reset counted it, one run in about ten).
 */
int gpufile__ctx_id(const struct gpufile__cuda *t, CUcontext ctx,
                    unsigned long long *id);
int gpufile__ctx_same(const struct gpufile__cuda *t, CUcontext ctx,
                      unsigned long long id);
int gpufile__current_device(const struct gpufile__cuda *t);
CUresult gpufile__ctx_restore(const struct gpufile__cuda *t, CUcontext old);

/*
 * Pinned host memory (pinned.c): mapped with huge pages asked for and
 * registered (map_len: its length), or from cuMemHostAlloc where the driver
 * registers none (map_len 0). Both are portable, and allocated and freed in
 * the context current at the call. gpufile__pinned_alloc returns
 * CUDA_SUCCESS with pm->p set, or the failed call's CUresult with *call
 * naming it (pm->p NULL). gpufile__pinned_free with ctx_alive 0 (the
 * context has ended and took the pinning with it) makes no driver call and
 * unmaps what gpufile mapped; NULL pm->p is a no-op.
 */
struct gpufile__pinned {
	void *p;
	size_t map_len;
};
CUresult gpufile__pinned_alloc(const struct gpufile__cuda *t, size_t len,
                               struct gpufile__pinned *pm, const char **call);
void gpufile__pinned_free(const struct gpufile__cuda *t,
                          struct gpufile__pinned *pm, int ctx_alive);

/* The calling thread's current context, else device 0's primary one.
 * Returns 0, or an error (no CUDA, no device). */
int gpufile__current_or_primary(void **ctx);

#endif
