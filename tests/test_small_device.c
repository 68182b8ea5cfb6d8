/*
 * What one small gpufile_pread into device memory costs, counted through
 * the fake driver (fake_cuda.h) wrapped in a table that counts every call
 * by name and by thread: the staged ("small"/"posix") path of a read of
 * one task runs on the calling thread (no worker woken, no condition
 * variable slept on: each hand-off cost 5-20 us on the H200 host, where a
 * 4 KiB device read took 42 us against ~10 us for a pread into pinned
 * memory, one copy and a synchronise by hand), and makes a fixed, small
 * set of driver calls: one pointer classification, the context checks,
 * one copy and one synchronisation; no stream, event or pinned memory
 * made, no context switched where the caller's is the buffer's. A read
 * into another device's memory leaves the calling thread's current
 * context as it was.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#define FILE_SIZE (1u << 20)
#define SEED_FILE 51
#define NREADS    16
#define READ_SIZE 4096
#include "fake_cuda.h"

/* ---- a counting table over the fake ---- */

enum {
	C_ATTRS,
	C_CTX_GET,
	C_CTX_SET,
	C_CTX_ID,
	C_CTX_DEVICE,
	C_HTOD,
	C_BATCH,
	C_STREAM_CREATE,
	C_STREAM_DESTROY,
	C_STREAM_SYNC,
	C_EVENT_CREATE,
	C_EVENT_DESTROY,
	C_EVENT_RECORD,
	C_EVENT_SYNC,
	C_HOST_ALLOC,
	C_HOST_REGISTER,
	C_PRIMARY,
	C_OTHER,
	NCOUNTS
};

static const char *const count_name[NCOUNTS] = {
    "cuPointerGetAttributes",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuCtxGetId",
    "cuCtxGetDevice",
    "cuMemcpyHtoDAsync",
    "cuMemcpyBatchAsync",
    "cuStreamCreate",
    "cuStreamDestroy",
    "cuStreamSynchronize",
    "cuEventCreate",
    "cuEventDestroy",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuMemHostAlloc",
    "cuMemHostRegister",
    "cuDevicePrimaryCtxRetain/cuDeviceGet",
    "other"};

static atomic_long counts[NCOUNTS];
static atomic_long off_thread_calls; /* driver calls by another thread */
static atomic_long off_thread_tasks; /* pool tasks run by another thread */
static pthread_t caller;

static void count(int c)
{
	atomic_fetch_add(&counts[c], 1);
	if (!pthread_equal(pthread_self(), caller))
		atomic_fetch_add(&off_thread_calls, 1);
}

static void counts_reset(void)
{
	for (int i = 0; i < NCOUNTS; i++)
		atomic_store(&counts[i], 0);
	atomic_store(&off_thread_calls, 0);
	atomic_store(&off_thread_tasks, 0);
}

static long counts_total(void)
{
	long n = 0;

	for (int i = 0; i < NCOUNTS; i++)
		n += atomic_load(&counts[i]);
	return n;
}

static void counts_print(const char *what, int nreads)
{
	fprintf(stderr, "%s: driver calls per read:", what);
	for (int i = 0; i < NCOUNTS; i++)
		if (atomic_load(&counts[i]))
			fprintf(stderr, " %s %.2f", count_name[i],
			        (double)atomic_load(&counts[i]) / nreads);
	fprintf(stderr,
	        " (total %.2f; calls off the calling thread %ld, tasks off "
	        "it %ld)\n",
	        (double)counts_total() / nreads, atomic_load(&off_thread_calls),
	        atomic_load(&off_thread_tasks));
}

static void task_hook(struct gpufile__request *r, int64_t off)
{
	(void)r;
	(void)off;
	if (!pthread_equal(pthread_self(), caller))
		atomic_fetch_add(&off_thread_tasks, 1);
}

#define WRAP(c, name, params, args)                                            \
	static CUresult w_##name params                                        \
	{                                                                      \
		count(c);                                                      \
		return fake.name args;                                         \
	}

WRAP(C_OTHER, cuInit, (unsigned f), (f))
WRAP(C_OTHER, cuDriverGetVersion, (int *v), (v))
WRAP(C_OTHER, cuDeviceGetCount, (int *n), (n))
WRAP(C_PRIMARY, cuDeviceGet, (CUdevice * d, int o), (d, o))
WRAP(C_PRIMARY, cuDevicePrimaryCtxRetain, (CUcontext * c, CUdevice d), (c, d))
WRAP(C_CTX_GET, cuCtxGetCurrent, (CUcontext * c), (c))
WRAP(C_CTX_SET, cuCtxSetCurrent, (CUcontext c), (c))
WRAP(C_ATTRS, cuPointerGetAttributes,
     (unsigned n, int *a, void **d, CUdeviceptr p), (n, a, d, p))
WRAP(C_OTHER, cuMemAlloc, (CUdeviceptr * p, size_t s), (p, s))
WRAP(C_OTHER, cuMemFree, (CUdeviceptr p), (p))
WRAP(C_HOST_ALLOC, cuMemHostAlloc, (void **p, size_t s, unsigned f), (p, s, f))
WRAP(C_OTHER, cuMemFreeHost, (void *p), (p))
WRAP(C_HOST_REGISTER, cuMemHostRegister, (void *p, size_t s, unsigned f),
     (p, s, f))
WRAP(C_OTHER, cuMemHostUnregister, (void *p), (p))
WRAP(C_OTHER, cuMemcpy, (CUdeviceptr d, CUdeviceptr s, size_t n), (d, s, n))
WRAP(C_HTOD, cuMemcpyHtoDAsync,
     (CUdeviceptr d, const void *s, size_t n, CUstream st), (d, s, n, st))
WRAP(C_OTHER, cuMemcpyDtoHAsync,
     (void *d, CUdeviceptr s, size_t n, CUstream st), (d, s, n, st))
WRAP(C_STREAM_CREATE, cuStreamCreate, (CUstream * s, unsigned f), (s, f))
WRAP(C_STREAM_DESTROY, cuStreamDestroy, (CUstream s), (s))
WRAP(C_STREAM_SYNC, cuStreamSynchronize, (CUstream s), (s))
WRAP(C_EVENT_CREATE, cuEventCreate, (CUevent * e, unsigned f), (e, f))
WRAP(C_EVENT_DESTROY, cuEventDestroy, (CUevent e), (e))
WRAP(C_EVENT_RECORD, cuEventRecord, (CUevent e, CUstream s), (e, s))
WRAP(C_EVENT_SYNC, cuEventSynchronize, (CUevent e), (e))
WRAP(C_OTHER, cuGetErrorName, (CUresult rc, const char **n), (rc, n))
WRAP(C_OTHER, cuMemHostGetDevicePointer, (CUdeviceptr * d, void *p, unsigned f),
     (d, p, f))
WRAP(C_BATCH, cuMemcpyBatchAsync,
     (CUdeviceptr * d, CUdeviceptr *s, size_t *n, size_t c,
      struct CUmemcpyAttributes_st *a, size_t *ai, size_t na, CUstream st),
     (d, s, n, c, a, ai, na, st))
WRAP(C_CTX_ID, cuCtxGetId, (CUcontext c, unsigned long long *id), (c, id))
WRAP(C_CTX_DEVICE, cuCtxGetDevice, (CUdevice * d), (d))

static const struct gpufile__cuda counted = {
    .cuInit = w_cuInit,
    .cuDriverGetVersion = w_cuDriverGetVersion,
    .cuDeviceGetCount = w_cuDeviceGetCount,
    .cuDeviceGet = w_cuDeviceGet,
    .cuDevicePrimaryCtxRetain = w_cuDevicePrimaryCtxRetain,
    .cuCtxGetCurrent = w_cuCtxGetCurrent,
    .cuCtxSetCurrent = w_cuCtxSetCurrent,
    .cuPointerGetAttributes = w_cuPointerGetAttributes,
    .cuMemAlloc = w_cuMemAlloc,
    .cuMemFree = w_cuMemFree,
    .cuMemHostAlloc = w_cuMemHostAlloc,
    .cuMemFreeHost = w_cuMemFreeHost,
    .cuMemHostRegister = w_cuMemHostRegister,
    .cuMemHostUnregister = w_cuMemHostUnregister,
    .cuMemcpy = w_cuMemcpy,
    .cuMemcpyHtoDAsync = w_cuMemcpyHtoDAsync,
    .cuMemcpyDtoHAsync = w_cuMemcpyDtoHAsync,
    .cuStreamCreate = w_cuStreamCreate,
    .cuStreamDestroy = w_cuStreamDestroy,
    .cuStreamSynchronize = w_cuStreamSynchronize,
    .cuEventCreate = w_cuEventCreate,
    .cuEventDestroy = w_cuEventDestroy,
    .cuEventRecord = w_cuEventRecord,
    .cuEventSynchronize = w_cuEventSynchronize,
    .cuGetErrorName = w_cuGetErrorName,
    .cuMemHostGetDevicePointer = w_cuMemHostGetDevicePointer,
    .cuMemcpyBatchAsync = w_cuMemcpyBatchAsync,
    .cuCtxGetId = w_cuCtxGetId,
    .cuCtxGetDevice = w_cuCtxGetDevice,
};

/* ---- tests ---- */

/* NREADS reads of READ_SIZE bytes into device d's memory, each checked. */
static void small_reads(gpufile_t *h, int d)
{
	unsigned char *dev = fake_dev_base(d);

	for (int i = 0; i < NREADS; i++) {
		const int64_t off = (int64_t)i * 3 * READ_SIZE + 17 * i;

		memset(dev, 0, READ_SIZE);
		CHECK_EQ(gpufile_pread(h, dev, READ_SIZE, off),
		         (ssize_t)READ_SIZE);
		CHECK_EQ(test_mismatch(dev, READ_SIZE, SEED_FILE, (size_t)off),
		         -1);
	}
}

/* A 4 KiB read into the memory of the calling thread's device, once the
 * first read set the bounce buffers up: on the calling thread, and at
 * most one classification, one context id, one look at the current
 * context, one copy and one synchronisation per read. */
static void test_one_read(gpufile_t *h)
{
	fake.cuCtxSetCurrent(fake_ctx_of(0));
	small_reads(h, 0); /* first use: stagers, pinned memory, streams */
	counts_reset();
	small_reads(h, 0);
	counts_print("4 KiB reads into device 0, its context current", NREADS);

	CHECK_EQ(atomic_load(&off_thread_tasks), 0);
	CHECK_EQ(atomic_load(&off_thread_calls), 0);
	CHECK_EQ(atomic_load(&counts[C_ATTRS]), NREADS);
	CHECK(atomic_load(&counts[C_CTX_ID]) <= NREADS);
	CHECK(atomic_load(&counts[C_CTX_GET]) <= NREADS);
	CHECK_EQ(atomic_load(&counts[C_CTX_SET]), 0);
	CHECK_EQ(atomic_load(&counts[C_HTOD]) + atomic_load(&counts[C_BATCH]),
	         NREADS);
	CHECK_EQ(atomic_load(&counts[C_STREAM_SYNC]) +
	             atomic_load(&counts[C_EVENT_SYNC]),
	         NREADS);
	CHECK_EQ(atomic_load(&counts[C_EVENT_RECORD]), 0);
	CHECK_EQ(atomic_load(&counts[C_STREAM_CREATE]) +
	             atomic_load(&counts[C_STREAM_DESTROY]) +
	             atomic_load(&counts[C_EVENT_CREATE]) +
	             atomic_load(&counts[C_EVENT_DESTROY]) +
	             atomic_load(&counts[C_HOST_ALLOC]) +
	             atomic_load(&counts[C_HOST_REGISTER]) +
	             atomic_load(&counts[C_PRIMARY]),
	         0);
	CHECK(counts_total() <= 5L * NREADS);
}

/* Reads into device 1's memory from a thread whose current context is
 * device 0's, then none: the thread's context is as it was after each,
 * and the bytes arrive. Still on the calling thread. */
static void test_other_context(gpufile_t *h)
{
	CUcontext cur = NULL;

	fake.cuCtxSetCurrent(fake_ctx_of(0));
	counts_reset();
	small_reads(h, 1);
	fake.cuCtxGetCurrent(&cur);
	CHECK(cur == fake_ctx_of(0));
	counts_print("4 KiB reads into device 1, device 0's context current",
	             NREADS);
	CHECK_EQ(atomic_load(&off_thread_tasks), 0);
	CHECK_EQ(atomic_load(&off_thread_calls), 0);

	fake.cuCtxSetCurrent(NULL);
	small_reads(h, 1);
	small_reads(h, 0);
	fake.cuCtxGetCurrent(&cur);
	CHECK(cur == NULL);
	CHECK_EQ(fake_read_int(&ctx_mismatches), 0);
}

/* A read that fails in its copy says so, naming the file, on the calling
 * thread as on a worker; the next read gets its bytes. */
static void test_copy_fails(gpufile_t *h, const char *path)
{
	fake.cuCtxSetCurrent(fake_ctx_of(0));
	pthread_mutex_lock(&fake_lock);
	fail_to_dev = 1;
	pthread_mutex_unlock(&fake_lock);
	CHECK_EQ(gpufile_pread(h, dev_base, READ_SIZE, 0), GPUFILE_ECUDA);
	CHECK_CONTAINS(gpufile_errmsg(), "CUDA_ERROR_FAKE_COPY");
	CHECK_CONTAINS(gpufile_errmsg(), path);
	small_reads(h, 0);
}

/* ---- a caller waiting for a bounce-buffer set ---- */

#define BUSY_TS (128u << 10)

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_stage, at_gate;

/* The busy read's tasks: its second waits for stage 1, those after it
 * for stage 2. */
static void busy_hook(struct gpufile__request *r, int64_t off)
{
	task_hook(r, off);
	if (off < (int64_t)BUSY_TS)
		return;
	pthread_mutex_lock(&gate_lock);
	at_gate++;
	pthread_cond_broadcast(&gate_cond);
	while (gate_stage < (off >= 2 * (int64_t)BUSY_TS ? 2 : 1))
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
}

static void gate_open(int stage)
{
	pthread_mutex_lock(&gate_lock);
	gate_stage = stage;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

struct reader {
	gpufile_t *h;
	unsigned char *dev;
	size_t len;
	ssize_t got;
};

static void *read_thread(void *arg)
{
	struct reader *a = arg;

	fake.cuCtxSetCurrent(fake_ctx_of(0));
	a->got = gpufile_pread(a->h, a->dev, a->len, 0);
	return NULL;
}

/* One worker (nthreads 1) keeps its bounce-buffer set from task to task
 * while its queue has work. A small read on the calling thread then
 * waits for that set: it must get it when the worker's task ends, not
 * when the queue runs dry (here the queue's next task waits for the
 * small read, so it would never run). */
static void test_caller_not_starved(gpufile_t *h)
{
	unsigned char *big = fake_dev_base(0);
	unsigned char *small = fake_dev_base(0) + (8u << 20);
	struct reader busy = {h, big, 4 * BUSY_TS, 0};
	struct reader one = {h, small, READ_SIZE, 0};
	pthread_t tb, to;

	CHECK_EQ(gpufile_set_nthreads(1), 0);
	CHECK_EQ(gpufile_set_task_size(BUSY_TS), 0);
	gpufile__pool_task_hook = busy_hook;
	CHECK_EQ(pthread_create(&tb, NULL, read_thread, &busy), 0);
	pthread_mutex_lock(&gate_lock);
	while (at_gate < 1) /* the worker holds its set, task 0 done */
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);

	CHECK_EQ(pthread_create(&to, NULL, read_thread, &one), 0);
	while (gpufile__staging_waiting() < 1)
		test_sleep_ms(1);
	gate_open(1); /* the worker's task 1 ends; the small read's turn */
	CHECK_EQ(pthread_join(to, NULL), 0);
	CHECK_EQ(one.got, (ssize_t)READ_SIZE);
	CHECK_EQ(test_mismatch(small, READ_SIZE, SEED_FILE, 0), -1);

	gate_open(2);
	CHECK_EQ(pthread_join(tb, NULL), 0);
	CHECK_EQ(busy.got, (ssize_t)(4 * BUSY_TS));
	CHECK_EQ(test_mismatch(big, 4 * BUSY_TS, SEED_FILE, 0), -1);
	gpufile__pool_task_hook = task_hook;
	gpufile_config_reset();
}

int main(void)
{
	const char *path = test_path("small-device");
	gpufile_t *h = NULL;

	caller = pthread_self();
	if (fake_install_devices(2))
		return 1;
	gpufile__cuda_override(&counted);
	gpufile__pool_task_hook = task_hook;
	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED_FILE), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return test_finish("test_small_device");

	test_one_read(h);
	test_other_context(h);
	test_copy_fails(h, path);
	alarm(120); /* a starved caller fails instead of hanging */
	test_caller_not_starved(h);

	CHECK_EQ(gpufile_close(h), 0);
	gpufile__pool_task_hook = NULL;
	gpufile_release();
	CHECK_EQ(fake_read_int(&bad_copies), 0);
	fake_uninstall();
	gpufile_config_reset();
	return test_finish("test_small_device");
}
