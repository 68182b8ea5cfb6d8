/*
 * A fake CUDA driver table for tests without a GPU (test_staging_fake.c,
 * test_stress_soak.c, test_fault_matrix.c): a host region (dev_base, DEV_SIZE
 * bytes) stands in for device memory of GPU 0; asynchronous copies run only
 * when the library synchronises with the stream or an event recorded after
 * them, as on a GPU. It counts pinned memory, streams and events, and fails
 * cuMemHostAlloc and the copies on demand (fail_hostalloc, fail_htod,
 * fail_dtoh: the next N calls; fail_to_dev: the next N host-to-device
 * copy calls, single or batched, for readers whose copies may go either
 * way, staging.c's pooled copies). A copy from the device fails when it
 * is the dtoh_fail_at-th cuMemcpyDtoHAsync call (dtoh_calls counts them):
 * at the call; or, when it is the dtoh_async_fail_at-th, later, as a GPU
 * reports a failed asynchronous copy: it is queued, copies nothing when it
 * runs, and the next synchronisation with its stream or an event recorded
 * after it returns CUDA_ERROR_FAKE_COPY (once). Install with fake_install()
 * (at the end),
 * or with gpufile__cuda_override(&fake) after pointing dev_base at DEV_SIZE
 * bytes. Include once per program.
 *
 * More than one device (test_multi_device.c): set fake_ndev (at most
 * FAKE_MAX_DEV) and point fake_dev_mem[1..] at DEV_SIZE bytes each before
 * use, or install with fake_install_devices(n). Device d then has one primary
 * context, fake_ctx_of(d); the current context is per thread and starts as
 * none, as with the real driver; each stream and event belongs to the context
 * current when it was made, and a copy on a stream of a context that is not
 * current, or an event recorded on another context's stream, fails
 * (CUDA_ERROR_INVALID_CONTEXT / CUDA_ERROR_INVALID_HANDLE) and counts in
 * ctx_mismatches. cuMemAlloc carves device memory from the current context's
 * device, and cuPointerGetAttributes reports that device and its context. With
 * one device (the default) everything behaves as before: fake_ctx is always
 * current and cuMemAlloc fails.
 *
 * Stream-ordered requests (test_stream.c) use three more ops: a host
 * function (cuLaunchHostFunc; tests queue their "kernels" as host
 * functions too), a wait for a 32-bit value (cuStreamWaitValue32, GEQ),
 * which blocks whoever runs the stream until the value is stored, and
 * a marker for events. A stream is run by one thread at a time (busy);
 * fake_wait_refused makes cuStreamWaitValue32 answer
 * CUDA_ERROR_NOT_SUPPORTED (a test removes an entry point by installing
 * a copy of the table with that field NULL).
 *
 * One hardware queue (fake_one_queue, or FAKE_ONE_QUEUE=1 in the
 * environment at fake_install): a GPU feeds its streams through a few
 * hardware queues, and a stream blocked in a wait or a host function
 * holds up the work queued after it on every stream that shares its
 * queue (CUDA_DEVICE_MAX_CONNECTIONS; stream.c says how the Python suite
 * hung that way on the H200). In this mode every stream of a device
 * shares one: an op runs only after every op queued before it on any
 * stream of its device, the worst case a real driver can give. Streams
 * of a context that was reset are left out (their work is gone).
 * fake_queue_blocked counts the threads waiting while another runs a
 * blocking op (a wait or a host function) they must pass.
 *
 * Host memory registration (cuMemHostRegister), which pinned.c tries
 * before cuMemHostAlloc: refused with fake_register_rc (default
 * CUDA_ERROR_INVALID_VALUE, so that the library falls back to
 * cuMemHostAlloc) unless fake_register is set (or FAKE_REGISTER=1 in the
 * environment). A registered range counts as pinned memory like an
 * allocation (pinned_live, pinned_count, hostalloc_calls; fail_hostalloc
 * fails registrations too, with CUDA_ERROR_OUT_OF_MEMORY), and
 * register_calls and unregister_calls count the calls.
 *
 * A context that ends under the library (test_context_reset.c):
 * fake_ctx_reset(d) does to device d's primary context what
 * cuDevicePrimaryCtxReset does. Its id (cuCtxGetId) changes, and reads
 * CUDA_ERROR_CONTEXT_IS_DESTROYED until the context is retained again;
 * its streams, events and pinned memory end. A later use of one of them
 * (a call with the stream or event, a copy from or free of the memory)
 * fails and counts in stale_uses (copies in bad_copies); the memory stays
 * allocated, filled with FAKE_DEAD_BYTE, so that a write into it is seen
 * by fake_dead_intact().
 */
#ifndef GPUFILE_TEST_FAKE_CUDA_H
#define GPUFILE_TEST_FAKE_CUDA_H

#include "cuda_shim.h"
#include "gpufile.h"

#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef DEV_SIZE
#define DEV_SIZE (40u << 20)
#endif
#define CUDA_ERROR_OUT_OF_MEMORY        2
#define CUDA_ERROR_INVALID_CONTEXT      201
#define CUDA_ERROR_INVALID_HANDLE       400
#define CUDA_ERROR_FAKE_COPY            999
#define CUDA_ERROR_CONTEXT_IS_DESTROYED 709
#define FAKE_DEAD_BYTE                  0xDB
#define FAKE_MAX_DEV                    16

static unsigned char *dev_base; /* the "device memory" of device 0 */
static struct CUctx_st *const fake_ctx = (struct CUctx_st *)0x1000;

/* ---- more than one device (see the top) ---- */
static int fake_ndev = 1;
static unsigned char *fake_dev_mem[FAKE_MAX_DEV]; /* [0]: dev_base */
static size_t fake_dev_used[FAKE_MAX_DEV];        /* cuMemAlloc's bump */
/* The current context, when fake_ndev > 1. initial-exec: the variable
 * lives in the static TLS block, not in a dynamic one. A library loaded
 * by dlopen (tests/fake_libcuda, which gpufile loads while its workers
 * run) gets its default-model variables in dynamic TLS blocks, and this
 * GCC's LeakSanitizer records such a block of a worker thread at a bogus
 * address ("DTLS 9 at 0x000100000042-0x000900001144" with
 * LSAN_OPTIONS=verbosity=1): its tracer died scanning it at every exit
 * of test_parity_gpu_fake, and of test_gpu_cold_eof_fake now and then. */
static _Thread_local struct CUctx_st *fake_cur
    __attribute__((tls_model("initial-exec")));
/* Contexts reset (fake_ctx_reset): how often, and whether since retained. */
static unsigned fake_ctx_gen[FAKE_MAX_DEV];
static int fake_ctx_dead[FAKE_MAX_DEV];

/* Device d's primary context: fake_ctx for device 0. */
static struct CUctx_st *fake_ctx_of(int d)
{
	return (struct CUctx_st *)(uintptr_t)(0x1000 + 0x100 * (uintptr_t)d);
}

/* The device whose context ctx is, or -1. */
static int fake_ctx_device(const struct CUctx_st *ctx)
{
	uintptr_t v = (uintptr_t)ctx;

	if (v < 0x1000 || (v - 0x1000) % 0x100 ||
	    (v - 0x1000) / 0x100 >= (uintptr_t)fake_ndev)
		return -1;
	return (int)((v - 0x1000) / 0x100);
}

static struct CUctx_st *fake_current(void)
{
	return fake_ndev > 1 ? fake_cur : fake_ctx;
}

static unsigned char *fake_dev_base(int d)
{
	return d == 0 ? dev_base : fake_dev_mem[d];
}

/* ---- fake driver state, all under fake_lock ---- */

enum { OP_COPY = 0, OP_MARKER = 1, OP_WAIT = 2, OP_HOSTFN = 3 };

struct op {
	int kind; /* OP_* */
	void *dst;
	const void *src;
	size_t size;
	uint32_t *addr; /* OP_WAIT: until (int32_t)(*addr - value) >= 0 */
	uint32_t value;
	CUhostFn fn; /* OP_HOSTFN */
	void *data;
	unsigned long seq; /* when queued, over all streams (enqueue) */
	int fails;         /* OP_COPY: copies nothing; sets the stream's err */
};

struct CUstream_st {
	struct CUctx_st *ctx; /* current when it was made */
	unsigned gen;         /* fake_ctx_gen of its device then */
	struct op *ops;
	size_t nops, cap;
	size_t done; /* ops[0, done) have run */
	int busy;    /* a thread runs a blocking op of it, unlocked */
	int err;     /* a failing copy ran: the next sync reports it */
	struct CUstream_st *next_live; /* fake_streams: not destroyed */
};

struct CUevent_st {
	struct CUctx_st *ctx;       /* current when it was made */
	unsigned gen;               /* fake_ctx_gen of its device then */
	struct CUstream_st *stream; /* where last recorded, or NULL */
	size_t seq;                 /* ops of stream before the record */
};

#define MAX_PINNED 4096
static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	void *ptr;
	size_t size;
	struct CUctx_st *ctx; /* current at cuMemHostAlloc */
	unsigned flags;
	int registered; /* cuMemHostRegister'ed: the library's own memory */
} pinned[MAX_PINNED];
static int fake_register;                                    /* see the top */
static CUresult fake_register_rc = CUDA_ERROR_INVALID_VALUE; /* refusal */
static long register_calls, unregister_calls;
static size_t pinned_live, pinned_peak;
static int pinned_count, streams_live, events_live;
static int fail_hostalloc, fail_htod, fail_dtoh; /* fail the next N calls */
static int fail_to_dev; /* the next N of f_htod and f_memcpy_batch */
static long dtoh_fail_at, dtoh_async_fail_at; /* see the top */
static long htod_calls, dtoh_calls, hostalloc_calls;
static int bad_copies; /* copies touching memory they should not */
/* More than one device: streams and events ever made; calls refused
 * because a stream or event belongs to a context that is not current;
 * copies to a device other than the current context's (a peer copy on a
 * real GPU); copies through pinned memory of another context that was not
 * allocated CU_MEMHOSTALLOC_PORTABLE (pageable, synchronous there). */
static long streams_created, events_created;
static int ctx_mismatches, cross_device_copies, nonportable_copies;
/* Calls on what a reset context took with it (see the top); the pinned
 * memory it took, kept allocated and filled with FAKE_DEAD_BYTE. */
static int stale_uses;
static struct {
	void *ptr;
	size_t size;
	int registered; /* the library's: not filled, may be unmapped */
} fake_dead[MAX_PINNED];
static int fake_ndead;
/* Every stream and event not destroyed: those a reset ended stay here
 * (the library must forget them, not destroy them), so that they are
 * not leaks. */
#define FAKE_MAX_HANDLES 65536
static void *fake_handles[FAKE_MAX_HANDLES];

/* Caller holds fake_lock. */
static void fake_handle_add(void *h)
{
	for (int i = 0; i < FAKE_MAX_HANDLES; i++)
		if (!fake_handles[i]) {
			fake_handles[i] = h;
			return;
		}
}

/* Caller holds fake_lock. */
static void fake_handle_remove(void *h)
{
	for (int i = 0; i < FAKE_MAX_HANDLES; i++)
		if (fake_handles[i] == h) {
			fake_handles[i] = NULL;
			return;
		}
}
static int fail_ctxset; /* fail the next N cuCtxSetCurrent(non-NULL) */
static pthread_cond_t fake_cond = PTHREAD_COND_INITIALIZER;
static int fake_wait_refused;     /* cuStreamWaitValue32: NOT_SUPPORTED */
static long wait_ops, hostfn_ops; /* queued so far */
static int fake_one_queue;        /* see the top */
static int fake_queue_blocked; /* threads waiting for another's blocking op */
static unsigned long fake_op_seq;             /* ops queued, over all streams */
static struct CUstream_st *fake_streams;      /* not destroyed, newest first */
static struct CUstream_st *fake_streams_gone; /* destroyed (kept) */
static long attr_calls;                       /* cuPointerGetAttributes */
/* "Device" memory at or past dev_base + fake_managed_from reports itself
 * managed (CU_POINTER_ATTRIBUTE_IS_MANAGED); none does by default. */
static size_t fake_managed_from = (size_t)-1;

/* The device whose memory holds [p, p + size), or -1. */
static int dev_of(const void *p, size_t size)
{
	const unsigned char *c = p;

	for (int d = 0; d < fake_ndev && d < FAKE_MAX_DEV; d++) {
		const unsigned char *b = fake_dev_base(d);
		if (b && c >= b && size <= DEV_SIZE && c <= b + DEV_SIZE - size)
			return d;
	}
	return -1;
}

static int in_dev(const void *p, size_t size)
{
	return dev_of(p, size) >= 0;
}

/* Caller holds fake_lock. Counts a use from another context of pinned
 * memory that is not portable. */
static int in_pinned(const void *p, size_t size)
{
	const unsigned char *c = p;

	for (int i = 0; i < MAX_PINNED; i++) {
		const unsigned char *b = pinned[i].ptr;
		if (b && c >= b && c + size <= b + pinned[i].size) {
			if (!(pinned[i].flags & CU_MEMHOSTALLOC_PORTABLE) &&
			    pinned[i].ctx != fake_current())
				nonportable_copies++;
			return 1;
		}
	}
	return 0;
}

/* Caller holds fake_lock. Whether a stream or event made in ctx at gen
 * ended with a reset of its context since; counts the use if so. */
static int fake_stale(const struct CUctx_st *ctx, unsigned gen)
{
	const int d = fake_ctx_device(ctx);

	if (d < 0 || gen == fake_ctx_gen[d])
		return 0;
	stale_uses++;
	return 1;
}

/* Caller holds fake_lock. 0, or why a copy on s (to or from device memory
 * at dev) is refused: s belongs to a context that is not current, or
 * ended. */
static CUresult check_stream_ctx(const struct CUstream_st *s, const void *dev)
{
	int d = dev_of(dev, 1);

	if ((uintptr_t)s > 2 && fake_stale(s->ctx, s->gen))
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	if ((uintptr_t)s > 2 && s->ctx != fake_current()) {
		ctx_mismatches++;
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	if (d >= 0 && fake_ctx_of(d) != fake_current())
		cross_device_copies++;
	return CUDA_SUCCESS;
}

/* Caller holds fake_lock. Runs s's ops up to (not including) upto. A
 * wait polls its value (the library stores it from the host, without
 * telling the fake); a host function runs with fake_lock released. */
static void run_stream_ops(struct CUstream_st *s, size_t upto)
{
	while (s->done < upto && s->done < s->nops) {
		struct op o;

		if (s->busy) {
			fake_queue_blocked++;
			pthread_cond_wait(&fake_cond, &fake_lock);
			fake_queue_blocked--;
			continue;
		}
		o = s->ops[s->done]; /* a copy: ops may grow while unlocked */
		if (o.kind == OP_COPY && o.fails) {
			s->err = 1;
		} else if (o.kind == OP_COPY) {
			memcpy(o.dst, o.src, o.size);
		} else if (o.kind == OP_WAIT) {
			s->busy = 1;
			while ((int32_t)(__atomic_load_n(o.addr,
			                                 __ATOMIC_SEQ_CST) -
			                 o.value) < 0) {
				struct timespec ts;

				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_nsec += 1000000;
				if (ts.tv_nsec >= 1000000000) {
					ts.tv_sec++;
					ts.tv_nsec -= 1000000000;
				}
				pthread_cond_timedwait(&fake_cond, &fake_lock,
				                       &ts);
			}
			s->busy = 0;
		} else if (o.kind == OP_HOSTFN) {
			s->busy = 1;
			pthread_mutex_unlock(&fake_lock);
			o.fn(o.data);
			pthread_mutex_lock(&fake_lock);
			s->busy = 0;
		}
		s->done++;
		pthread_cond_broadcast(&fake_cond);
	}
}

/* FAKE_ONE_QUEUE=1: one hardware queue from the start (tests that install
 * the table themselves, without fake_install, get it too). */
__attribute__((constructor)) static void fake_one_queue_env(void)
{
	const char *v = getenv("FAKE_ONE_QUEUE");

	fake_one_queue = v && atoi(v) > 0;
	v = getenv("FAKE_REGISTER");
	fake_register = v && atoi(v) > 0;
}

/* Caller holds fake_lock. Whether s's context was reset since s was made
 * (not counted as a use: only the fake looks). */
static int fake_stream_gone(const struct CUstream_st *s)
{
	const int d = fake_ctx_device(s->ctx);

	return d >= 0 && s->gen != fake_ctx_gen[d];
}

/* Caller holds fake_lock. Runs s's ops up to (not including) upto; with
 * one hardware queue (see the top), first every op of s's device queued
 * before the last of them, oldest first. */
static void run_ops(struct CUstream_st *s, size_t upto)
{
	while (fake_one_queue &&
	       (upto = upto < s->nops ? upto : s->nops) > s->done) {
		/* upto again each time: s may be destroyed (its ops all run)
		 * while this thread waits below. */
		const unsigned long last = s->ops[upto - 1].seq;
		const int dev = fake_ctx_device(s->ctx);
		struct CUstream_st *first = NULL;

		for (struct CUstream_st *t = fake_streams; t; t = t->next_live)
			if (t->done < t->nops && !fake_stream_gone(t) &&
			    fake_ctx_device(t->ctx) == dev &&
			    t->ops[t->done].seq <= last &&
			    (!first ||
			     t->ops[t->done].seq < first->ops[first->done].seq))
				first = t;
		if (!first) /* s itself was reset */
			break;
		run_stream_ops(first, first->done + 1);
	}
	run_stream_ops(s, upto);
}

static CUresult enqueue(struct CUstream_st *s, struct op o)
{
	if ((uintptr_t)s <= 2) /* the default streams: not faked */
		return CUDA_ERROR_INVALID_VALUE;
	if (s->nops == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 64;
		struct op *ops = realloc(s->ops, cap * sizeof(*ops));
		if (!ops)
			return CUDA_ERROR_OUT_OF_MEMORY;
		s->ops = ops;
		s->cap = cap;
	}
	o.seq = ++fake_op_seq;
	s->ops[s->nops++] = o;
	return CUDA_SUCCESS;
}

static CUresult f_init(unsigned flags)
{
	(void)flags;
	return CUDA_SUCCESS;
}

static CUresult f_driver_version(int *v)
{
	*v = 12040;
	return CUDA_SUCCESS;
}

static CUresult f_device_count(int *n)
{
	*n = fake_ndev;
	return CUDA_SUCCESS;
}

static CUresult f_device_get(CUdevice *d, int ordinal)
{
	if (ordinal < 0 || ordinal >= fake_ndev)
		return CUDA_ERROR_INVALID_VALUE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

static CUresult f_primary_retain(CUcontext *ctx, CUdevice d)
{
	if (d < 0 || d >= fake_ndev)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_lock);
	fake_ctx_dead[d] = 0;
	pthread_mutex_unlock(&fake_lock);
	*ctx = fake_ctx_of(d);
	return CUDA_SUCCESS;
}

static CUresult f_ctx_get_id(CUcontext ctx, unsigned long long *id)
{
	const int d = fake_ctx_device(ctx);
	CUresult rc = CUDA_SUCCESS;

	if (d < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&fake_lock);
	if (fake_ctx_dead[d])
		rc = CUDA_ERROR_CONTEXT_IS_DESTROYED;
	else
		*id = (unsigned long long)fake_ctx_gen[d] * FAKE_MAX_DEV +
		      (unsigned long long)d + 1;
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

static CUresult f_ctx_get_device(CUdevice *dev)
{
	const int d = fake_ctx_device(fake_current());

	if (d < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	*dev = d;
	return CUDA_SUCCESS;
}

static CUresult f_ctx_get(CUcontext *ctx)
{
	*ctx = fake_current();
	return CUDA_SUCCESS;
}

static CUresult f_ctx_set(CUcontext ctx)
{
	if (ctx != NULL && fake_ctx_device(ctx) < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx != NULL) {
		pthread_mutex_lock(&fake_lock);
		int fail = fail_ctxset > 0;
		int dead = fake_ctx_dead[fake_ctx_device(ctx)];
		fail_ctxset -= fail;
		stale_uses += dead;
		pthread_mutex_unlock(&fake_lock);
		if (dead)
			return CUDA_ERROR_CONTEXT_IS_DESTROYED;
		if (fail)
			return CUDA_ERROR_INVALID_CONTEXT;
	}
	fake_cur = ctx;
	return CUDA_SUCCESS;
}

static CUresult f_pointer_attrs(unsigned n, int *attrs, void **data,
                                CUdeviceptr ptr)
{
	const int dev = dev_of((void *)(uintptr_t)ptr, 1);

	pthread_mutex_lock(&fake_lock);
	attr_calls++;
	pthread_mutex_unlock(&fake_lock);
	if (dev < 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < n; i++) {
		switch (attrs[i]) {
		case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
			*(unsigned *)data[i] = CU_MEMORYTYPE_DEVICE;
			break;
		case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
			*(int *)data[i] = dev;
			break;
		case CU_POINTER_ATTRIBUTE_CONTEXT:
			*(CUcontext *)data[i] = fake_ctx_of(dev);
			break;
		case CU_POINTER_ATTRIBUTE_IS_MANAGED: /* a bool */
			*(unsigned char *)data[i] =
			    (size_t)((unsigned char *)(uintptr_t)ptr -
			             dev_base) >= fake_managed_from;
			break;
		case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
			*(CUdeviceptr *)data[i] =
			    (CUdeviceptr)(uintptr_t)dev_base;
			break;
		case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
			*(size_t *)data[i] = DEV_SIZE;
			break;
		default:
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	return CUDA_SUCCESS;
}

/* One device: fails, as before. More: bump allocation in the current
 * context's device memory, never freed. */
static CUresult f_mem_alloc(CUdeviceptr *p, size_t size)
{
	CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
	int d;

	if (fake_ndev <= 1)
		return CUDA_ERROR_OUT_OF_MEMORY;
	d = fake_ctx_device(fake_current());
	if (d < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	size = (size + 4095) & ~(size_t)4095;
	pthread_mutex_lock(&fake_lock);
	if (fake_dev_base(d) && size <= DEV_SIZE - fake_dev_used[d]) {
		*p = (CUdeviceptr)(uintptr_t)(fake_dev_base(d) +
		                              fake_dev_used[d]);
		fake_dev_used[d] += size;
		rc = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

static CUresult f_mem_free(CUdeviceptr p)
{
	(void)p;
	return CUDA_SUCCESS;
}

static CUresult f_host_alloc(void **p, size_t size, unsigned flags)
{
	CUresult rc = CUDA_SUCCESS;
	void *mem;

	pthread_mutex_lock(&fake_lock);
	hostalloc_calls++;
	if (fail_hostalloc > 0) {
		fail_hostalloc--;
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&fake_lock);
	mem = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
	if (!mem)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&fake_lock);
	rc = CUDA_ERROR_OUT_OF_MEMORY;
	for (int i = 0; i < MAX_PINNED; i++) {
		if (!pinned[i].ptr) {
			pinned[i].ptr = mem;
			pinned[i].size = size;
			pinned[i].ctx = fake_current();
			pinned[i].flags = flags;
			pinned_live += size;
			pinned_count++;
			if (pinned_live > pinned_peak)
				pinned_peak = pinned_live;
			rc = CUDA_SUCCESS;
			break;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	if (rc != CUDA_SUCCESS)
		free(mem);
	else
		*p = mem;
	return rc;
}

static CUresult f_free_host(void *p)
{
	CUresult rc = CUDA_ERROR_INVALID_VALUE;

	pthread_mutex_lock(&fake_lock);
	for (int i = 0; i < fake_ndead; i++)
		stale_uses += fake_dead[i].ptr == p;
	for (int i = 0; i < MAX_PINNED; i++) {
		if (pinned[i].ptr == p && !pinned[i].registered) {
			pinned_live -= pinned[i].size;
			pinned_count--;
			pinned[i].ptr = NULL;
			rc = CUDA_SUCCESS;
			break;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	if (rc == CUDA_SUCCESS)
		free(p);
	return rc;
}

static CUresult f_host_register(void *p, size_t size, unsigned flags)
{
	CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;

	pthread_mutex_lock(&fake_lock);
	register_calls++;
	if (!fake_register) {
		pthread_mutex_unlock(&fake_lock);
		return fake_register_rc;
	}
	hostalloc_calls++;
	if (fail_hostalloc > 0) {
		fail_hostalloc--;
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if ((uintptr_t)p % 4096 || size % 4096) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (int i = 0; i < MAX_PINNED; i++) {
		if (!pinned[i].ptr) {
			pinned[i].ptr = p;
			pinned[i].size = size;
			pinned[i].ctx = fake_current();
			pinned[i].flags = flags;
			pinned[i].registered = 1;
			pinned_live += size;
			pinned_count++;
			if (pinned_live > pinned_peak)
				pinned_peak = pinned_live;
			rc = CUDA_SUCCESS;
			break;
		}
	}
	/* A range a reset took and the library unmapped may come back from
	 * mmap: from now on calls on it are not stale. */
	for (int i = 0; rc == CUDA_SUCCESS && i < fake_ndead; i++) {
		const char *d = fake_dead[i].ptr, *c = p;
		if (fake_dead[i].registered && d && d < c + size &&
		    c < d + fake_dead[i].size) {
			fake_dead[i].ptr = NULL;
			fake_dead[i].size = 0;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

static CUresult f_host_unregister(void *p)
{
	CUresult rc = CUDA_ERROR_INVALID_VALUE;

	pthread_mutex_lock(&fake_lock);
	unregister_calls++;
	for (int i = 0; i < fake_ndead; i++)
		stale_uses += fake_dead[i].ptr == p;
	for (int i = 0; i < MAX_PINNED; i++) {
		if (pinned[i].ptr == p && pinned[i].registered) {
			pinned_live -= pinned[i].size;
			pinned_count--;
			pinned[i].ptr = NULL;
			pinned[i].registered = 0;
			rc = CUDA_SUCCESS;
			break;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

static CUresult f_memcpy(CUdeviceptr dst, CUdeviceptr src, size_t size)
{
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, size);
	return CUDA_SUCCESS;
}

static CUresult f_htod(CUdeviceptr dst, const void *src, size_t size,
                       CUstream s)
{
	CUresult rc;

	pthread_mutex_lock(&fake_lock);
	htod_calls++;
	if (fail_htod > 0 || fail_to_dev > 0) {
		if (fail_htod > 0)
			fail_htod--;
		else
			fail_to_dev--;
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_FAKE_COPY;
	}
	if (!in_dev((void *)(uintptr_t)dst, size) || !in_pinned(src, size)) {
		bad_copies++;
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	rc = check_stream_ctx(s, (void *)(uintptr_t)dst);
	if (rc != CUDA_SUCCESS) {
		pthread_mutex_unlock(&fake_lock);
		return rc;
	}
	rc = enqueue(s, (struct op){.kind = OP_COPY,
	                            .dst = (void *)(uintptr_t)dst,
	                            .src = src,
	                            .size = size});
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

/* cuMemcpyBatchAsync_v2, host to device only: every copy checked as
 * f_htod checks one, queued in order; fail_batch fails the next N calls
 * (nothing queued). */
static long batch_copy_calls, batch_copies;
static int fail_batch;

static CUresult f_memcpy_batch(CUdeviceptr *dsts, CUdeviceptr *srcs,
                               size_t *sizes, size_t count,
                               struct CUmemcpyAttributes_st *attrs,
                               size_t *attrs_idxs, size_t num_attrs, CUstream s)
{
	CUresult rc = CUDA_SUCCESS;

	if (!attrs || !attrs_idxs || num_attrs == 0 || attrs_idxs[0] != 0 ||
	    count == 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_lock);
	batch_copy_calls++;
	if (fail_batch > 0 || fail_to_dev > 0) {
		if (fail_batch > 0)
			fail_batch--;
		else
			fail_to_dev--;
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_FAKE_COPY;
	}
	for (size_t i = 0; i < count; i++) {
		const void *src = (const void *)(uintptr_t)srcs[i];
		if (!in_dev((void *)(uintptr_t)dsts[i], sizes[i]) ||
		    !in_pinned(src, sizes[i])) {
			bad_copies++;
			pthread_mutex_unlock(&fake_lock);
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	for (size_t i = 0; i < count && rc == CUDA_SUCCESS; i++) {
		batch_copies++;
		rc = enqueue(
		    s, (struct op){.kind = OP_COPY,
		                   .dst = (void *)(uintptr_t)dsts[i],
		                   .src = (const void *)(uintptr_t)srcs[i],
		                   .size = sizes[i]});
	}
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

static CUresult f_dtoh(void *dst, CUdeviceptr src, size_t size, CUstream s)
{
	CUresult rc;

	pthread_mutex_lock(&fake_lock);
	dtoh_calls++;
	if (fail_dtoh > 0 || dtoh_calls == dtoh_fail_at) {
		if (fail_dtoh > 0)
			fail_dtoh--;
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_FAKE_COPY;
	}
	if (!in_dev((void *)(uintptr_t)src, size) || !in_pinned(dst, size)) {
		bad_copies++;
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	rc = check_stream_ctx(s, (void *)(uintptr_t)src);
	if (rc != CUDA_SUCCESS) {
		pthread_mutex_unlock(&fake_lock);
		return rc;
	}
	rc = enqueue(s, (struct op){.kind = OP_COPY,
	                            .dst = dst,
	                            .src = (const void *)(uintptr_t)src,
	                            .size = size,
	                            .fails = dtoh_calls == dtoh_async_fail_at});
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

static CUresult f_stream_create(CUstream *s, unsigned flags)
{
	(void)flags;
	if (!fake_current())
		return CUDA_ERROR_INVALID_CONTEXT;
	*s = calloc(1, sizeof(**s));
	if (!*s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	(*s)->ctx = fake_current();
	pthread_mutex_lock(&fake_lock);
	(*s)->gen = fake_ctx_gen[fake_ctx_device(fake_current())];
	fake_handle_add(*s);
	(*s)->next_live = fake_streams;
	fake_streams = *s;
	streams_live++;
	streams_created++;
	pthread_mutex_unlock(&fake_lock);
	return CUDA_SUCCESS;
}

static CUresult f_stream_sync(CUstream s)
{
	/* The default stream (NULL, or CU_STREAM_LEGACY 0x1 and
	 * CU_STREAM_PER_THREAD 0x2 as CUDA Array Interface producers name
	 * it): f_memcpy is synchronous, nothing is queued there. */
	if ((uintptr_t)s <= 2)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&fake_lock);
	if (fake_stale(s->ctx, s->gen)) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	}
	run_ops(s, s->nops);
	if (s->err) {
		s->err = 0;
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_FAKE_COPY;
	}
	pthread_mutex_unlock(&fake_lock);
	return CUDA_SUCCESS;
}

static CUresult f_stream_destroy(CUstream s)
{
	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_lock);
	if (fake_stale(s->ctx, s->gen)) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	}
	run_ops(s, s->nops); /* work already queued still completes */
	streams_live--;
	fake_handle_remove(s);
	for (struct CUstream_st **p = &fake_streams; *p; p = &(*p)->next_live)
		if (*p == s) {
			*p = s->next_live;
			break;
		}
	/* Kept, its ops all run: an event recorded on it stays valid (as
	 * with CUDA), and a later cuEventSynchronize finds nothing left to
	 * run. */
	free(s->ops);
	s->ops = NULL;
	s->nops = s->done = s->cap = 0;
	s->next_live = fake_streams_gone;
	fake_streams_gone = s;
	pthread_mutex_unlock(&fake_lock);
	return CUDA_SUCCESS;
}

static CUresult f_event_create(CUevent *e, unsigned flags)
{
	(void)flags;
	if (!fake_current())
		return CUDA_ERROR_INVALID_CONTEXT;
	*e = calloc(1, sizeof(**e));
	if (!*e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	(*e)->ctx = fake_current();
	pthread_mutex_lock(&fake_lock);
	(*e)->gen = fake_ctx_gen[fake_ctx_device(fake_current())];
	fake_handle_add(*e);
	events_live++;
	events_created++;
	pthread_mutex_unlock(&fake_lock);
	return CUDA_SUCCESS;
}

static CUresult f_event_destroy(CUevent e)
{
	if (!e)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_lock);
	if (fake_stale(e->ctx, e->gen)) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	}
	events_live--;
	fake_handle_remove(e);
	pthread_mutex_unlock(&fake_lock);
	free(e);
	return CUDA_SUCCESS;
}

static CUresult f_event_record(CUevent e, CUstream s)
{
	CUresult rc;

	if (!e || (uintptr_t)s <= 2)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_lock);
	if (fake_stale(e->ctx, e->gen)) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	}
	if (e->ctx != s->ctx) { /* the real driver refuses this too */
		ctx_mismatches++;
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	rc = check_stream_ctx(s, NULL);
	if (rc != CUDA_SUCCESS) {
		pthread_mutex_unlock(&fake_lock);
		return rc;
	}
	rc = enqueue(s, (struct op){.kind = OP_MARKER});
	e->stream = s;
	e->seq = s->nops;
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

static CUresult f_event_sync(CUevent e)
{
	if (!e)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_lock);
	if (fake_stale(e->ctx, e->gen)) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	}
	if (e->stream) {
		run_ops(e->stream, e->seq);
		if (e->stream->err) {
			e->stream->err = 0;
			pthread_mutex_unlock(&fake_lock);
			return CUDA_ERROR_FAKE_COPY;
		}
	}
	pthread_mutex_unlock(&fake_lock);
	return CUDA_SUCCESS;
}

static CUresult f_wait_value32(CUstream s, CUdeviceptr addr, unsigned value,
                               unsigned flags)
{
	CUresult rc;

	if (flags != CU_STREAM_WAIT_VALUE_GEQ || !s)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_lock);
	if (fake_stale(s->ctx, s->gen)) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	}
	if (fake_wait_refused) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	wait_ops++;
	rc = enqueue(s, (struct op){.kind = OP_WAIT,
	                            .addr = (uint32_t *)(uintptr_t)addr,
	                            .value = value});
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

static CUresult f_launch_host_func(CUstream s, CUhostFn fn, void *data)
{
	CUresult rc;

	if (!s || !fn)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&fake_lock);
	if ((uintptr_t)s > 2 && fake_stale(s->ctx, s->gen)) {
		pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	}
	hostfn_ops++;
	rc = enqueue(s, (struct op){.kind = OP_HOSTFN, .fn = fn, .data = data});
	pthread_mutex_unlock(&fake_lock);
	return rc;
}

static CUresult f_host_get_devptr(CUdeviceptr *d, void *p, unsigned flags)
{
	(void)flags;
	*d = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

static CUresult f_error_name(CUresult rc, const char **name)
{
	switch (rc) {
	case CUDA_ERROR_INVALID_VALUE:
		*name = "CUDA_ERROR_INVALID_VALUE";
		break;
	case CUDA_ERROR_OUT_OF_MEMORY:
		*name = "CUDA_ERROR_OUT_OF_MEMORY";
		break;
	case CUDA_ERROR_FAKE_COPY:
		*name = "CUDA_ERROR_FAKE_COPY";
		break;
	case CUDA_ERROR_INVALID_CONTEXT:
		*name = "CUDA_ERROR_INVALID_CONTEXT";
		break;
	case CUDA_ERROR_INVALID_HANDLE:
		*name = "CUDA_ERROR_INVALID_HANDLE";
		break;
	case CUDA_ERROR_NOT_SUPPORTED:
		*name = "CUDA_ERROR_NOT_SUPPORTED";
		break;
	case CUDA_ERROR_CONTEXT_IS_DESTROYED:
		*name = "CUDA_ERROR_CONTEXT_IS_DESTROYED";
		break;
	default:
		*name = "CUDA_ERROR_UNKNOWN";
		break;
	}
	return CUDA_SUCCESS;
}

static const struct gpufile__cuda fake = {
    .cuInit = f_init,
    .cuDriverGetVersion = f_driver_version,
    .cuDeviceGetCount = f_device_count,
    .cuDeviceGet = f_device_get,
    .cuDevicePrimaryCtxRetain = f_primary_retain,
    .cuCtxGetCurrent = f_ctx_get,
    .cuCtxSetCurrent = f_ctx_set,
    .cuPointerGetAttributes = f_pointer_attrs,
    .cuMemAlloc = f_mem_alloc,
    .cuMemFree = f_mem_free,
    .cuMemHostAlloc = f_host_alloc,
    .cuMemFreeHost = f_free_host,
    .cuMemHostRegister = f_host_register,
    .cuMemHostUnregister = f_host_unregister,
    .cuMemcpy = f_memcpy,
    .cuMemcpyHtoDAsync = f_htod,
    .cuMemcpyDtoHAsync = f_dtoh,
    .cuStreamCreate = f_stream_create,
    .cuStreamDestroy = f_stream_destroy,
    .cuStreamSynchronize = f_stream_sync,
    .cuEventCreate = f_event_create,
    .cuEventDestroy = f_event_destroy,
    .cuEventRecord = f_event_record,
    .cuEventSynchronize = f_event_sync,
    .cuGetErrorName = f_error_name,
    .cuStreamWaitValue32 = f_wait_value32,
    .cuLaunchHostFunc = f_launch_host_func,
    .cuMemHostGetDevicePointer = f_host_get_devptr,
    .cuMemcpyBatchAsync = f_memcpy_batch,
    .cuCtxGetId = f_ctx_get_id,
    .cuCtxGetDevice = f_ctx_get_device,
};

/* A counter of the fake's (htod_calls, stale_uses, ...), read under its
 * lock while the library's threads may count. */
static inline long fake_read_long(const long *c)
{
	long v;

	pthread_mutex_lock(&fake_lock);
	v = *c;
	pthread_mutex_unlock(&fake_lock);
	return v;
}

static inline int fake_read_int(const int *c)
{
	int v;

	pthread_mutex_lock(&fake_lock);
	v = *c;
	pthread_mutex_unlock(&fake_lock);
	return v;
}

/* What cuDevicePrimaryCtxReset does to device d's primary context (see
 * the top). */
static inline void fake_ctx_reset(int d)
{
	pthread_mutex_lock(&fake_lock);
	fake_ctx_gen[d]++;
	fake_ctx_dead[d] = 1;
	for (int i = 0; i < MAX_PINNED; i++) {
		if (!pinned[i].ptr || pinned[i].ctx != fake_ctx_of(d) ||
		    fake_ndead == MAX_PINNED)
			continue;
		/* Registered memory stays the library's, which unmaps it once
		 * it sees the context ended: only a call on it is checked. */
		if (!pinned[i].registered)
			memset(pinned[i].ptr, FAKE_DEAD_BYTE, pinned[i].size);
		fake_dead[fake_ndead].ptr = pinned[i].ptr;
		fake_dead[fake_ndead].registered = pinned[i].registered;
		fake_dead[fake_ndead++].size = pinned[i].size;
		pinned_live -= pinned[i].size;
		pinned_count--;
		pinned[i].ptr = NULL;
		pinned[i].registered = 0;
	}
	pthread_mutex_unlock(&fake_lock);
}

/* 1 when no byte of the memory resets took was written since. */
static inline int fake_dead_intact(void)
{
	int intact = 1;

	pthread_mutex_lock(&fake_lock);
	for (int i = 0; i < fake_ndead; i++) {
		const unsigned char *c = fake_dead[i].ptr;
		if (fake_dead[i].registered)
			continue;
		for (size_t k = 0; k < fake_dead[i].size; k++)
			intact &= c[k] == FAKE_DEAD_BYTE;
	}
	pthread_mutex_unlock(&fake_lock);
	return intact;
}

/* The usual start of a test on the fake: dev_base gets DEV_SIZE bytes (the
 * test may free them), the table is installed, and compat_mode is on, so
 * that the fake's "device memory" never reaches a real cuFile. Returns 0,
 * or -1 (said on stderr). */
static inline int fake_install(void)
{
	void *mem = NULL;

	if (posix_memalign(&mem, 4096, DEV_SIZE)) {
		fprintf(stderr,
		        "fake_cuda: no memory for %u bytes of device "
		        "memory\n",
		        (unsigned)DEV_SIZE);
		return -1;
	}
	dev_base = mem;
	gpufile__cuda_override(&fake);
	if (gpufile_set_compat_mode(GPUFILE_COMPAT_ON)) {
		fprintf(stderr, "fake_cuda: compat_mode on: %s\n",
		        gpufile_errmsg());
		return -1;
	}
	return 0;
}

/* fake_install() with ndev devices (at most FAKE_MAX_DEV): fake_dev_mem[d]
 * gets DEV_SIZE bytes each ([0] is dev_base). Free with fake_uninstall().
 * Returns 0, or -1 (said on stderr). */
static inline int fake_install_devices(int ndev)
{
	fake_ndev = ndev;
	for (int d = 1; d < ndev; d++)
		if (posix_memalign((void **)&fake_dev_mem[d], 4096, DEV_SIZE)) {
			fprintf(stderr, "fake_cuda: no memory for device %d\n",
			        d);
			return -1;
		}
	if (fake_install() != 0)
		return -1;
	fake_dev_mem[0] = dev_base;
	return 0;
}

/* Restores the real driver and frees what fake_install_devices took. */
static inline void fake_uninstall(void)
{
	gpufile__cuda_override(NULL);
	for (int d = 1; d < fake_ndev; d++)
		free(fake_dev_mem[d]);
	free(dev_base);
}

#endif
