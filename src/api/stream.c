/*
 * Stream-ordered reads and writes (gpufile_read_async, gpufile_write_async):
 * a request placed on the caller's CUDA stream, after the work queued there
 * before the call and before the work queued after it.
 *
 * How each mechanism keeps the order, best first:
 *
 *   cufile      the file's device requests take cuFile (file.c decides)
 *               and libcufile has cuFileReadAsync/WriteAsync: cuFile
 *               queues the I/O on the stream itself, and a host
 *               function after it writes *n_out and ends the request
 *               on its handle (gpufile_close waits until then).
 *   wait-value  host memory (the request puts no work on the GPU): an
 *               event is recorded on the stream (the work before), then
 *               cuStreamWaitValue32 makes the stream wait for a 32-bit
 *               flag in mapped pinned memory. A gpufile thread waits for
 *               the event, runs the request as gpufile_pread/pwrite would
 *               (the pool's parallel reads), writes *n_out
 *               and then stores the flag from the host, which releases
 *               the stream: the work after sees the bytes and *n_out.
 *               The thread runs the request's unclaimed tasks itself
 *               (pool.c's help): every worker may be waiting for a copy
 *               of another request queued behind this very stream in a
 *               shared hardware queue, and the flag must not wait for
 *               them (test_stream_queue).
 *   host-func   as wait-value, but the stream is held by a host function
 *               (cuLaunchHostFunc) that sleeps until the request ended,
 *               where the driver refuses stream memory operations
 *               (CUDA_ERROR_NOT_SUPPORTED) or lacks the wait. It occupies
 *               one of the driver's callback threads while it waits.
 *   staged      a read into, or a write from, device memory on the posix
 *               path of up to one staging arena, on a stream of the
 *               buffer's context: the stream itself copies the bytes
 *               between the buffer and gpufile's pinned memory. A read's
 *               copies each wait for a flag that filler threads release
 *               once they have read its part of the file (at the call,
 *               ahead of the stream, unless a stream-ordered write to
 *               the file is pending: then once the stream has reached
 *               the read, see write_pending); a write's
 *               copies go first, and fillers write the file once they
 *               have run (stream_stage.c, which says why neither can
 *               deadlock). A waiter waits for the copies (and a write's
 *               fillers), writes *n_out and releases the work after.
 *   blocking    a request of device (or managed) memory that the staged
 *               mechanism cannot take (see choose), whose request runs
 *               gpufile's own copies on the GPU (see runs_gpu_work), or a
 *               driver with neither of the above (older than CUDA 10):
 *               the call synchronises the stream, runs the request (the
 *               pool and its pipelined bounce buffers) and returns once
 *               *n_out is written. Correct order; no overlap with the
 *               caller's work after it.
 *
 * The wait-value, host-func and staged jobs run on waiter threads
 * (below), taken in the order they were queued, not on the pool's
 * workers: a waiter sleeps in cuEventSynchronize until the stream reaches
 * the request, and then waits for its pool request like any caller (a
 * staged job: for its fillers, then for its copies).
 *
 * The flags live in slabs of mapped pinned memory that are never freed (a
 * stream may still be waiting on one when gpufile_release() runs). A slot
 * is waited on with CU_STREAM_WAIT_VALUE_GEQ for a value one past what it
 * held, so it can be given to the next request as soon as its request has
 * stored the flag: a stream still waiting on the old value is released by
 * the new one too ((int32_t)(*flag - value) >= 0, as CUDA compares).
 *
 * Lock order: slot_lock alone (but for cuda_shim.c's primary_lock, taken
 * when a slab is allocated), or after a staged read's lock
 * (stream_stage.c); a job's lock alone; waiters.lock before
 * pool.lock (gpufile__handle_release), and after every handle's lock
 * (fork.c). No I/O runs under any of them, and no CUDA call but, under
 * slot_lock, a slab's allocation and the checks that its context lives
 * (cuCtxGetId): none waits for GPU work.
 */
#define _GNU_SOURCE
#include "api/api.h"
#include "paths/cufile_shim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum mechanism {
	MECH_CUFILE,
	MECH_WAIT_VALUE,
	MECH_HOST_FUNC,
	MECH_STAGED,
	MECH_BLOCKING,
};

/* Set once a driver answered CUDA_ERROR_NOT_SUPPORTED to the wait: later
 * requests go straight to the host function. */
static atomic_int wait_unsupported;

/* ---- flag slots ---- */

#define SLOTS_PER_SLAB 1024 /* one 4 KiB page of 32-bit flags */
#define MAX_SLABS      64

static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
/*
 * A slab lives in the primary context of one device, which gpufile holds
 * for the process's life (a context the program creates could be
 * destroyed with the slab's memory), and only that device's requests
 * take its slots. Only a reset of that context (cudaDeviceReset) ends
 * it: the slab is then forgotten (host NULL), never reused, and its
 * slots are dropped. The reset ends the device's streams with it, so no
 * live stream is left waiting on a flag that can no longer be stored.
 * (Slots used to come from any device's slab: after device 0's reset, a
 * device-1 stream waiting on a flag of device 0's slab was never
 * released.)
 */
static struct {
	uint32_t *host; /* NULL: its context ended */
	CUdeviceptr dev;
	CUcontext ctx;
	unsigned long long id; /* ctx's id (gpufile__ctx_same) */
	int device;            /* ctx's device */
	unsigned nfree;
	uint16_t free[SLOTS_PER_SLAB]; /* its slots not held */
} slabs[MAX_SLABS];
static int nslabs;

/* Caller holds slot_lock. Whether slab k's memory is still there. */
static int slab_alive(const struct gpufile__cuda *t, int k)
{
	return slabs[k].host && gpufile__ctx_same(t, slabs[k].ctx, slabs[k].id);
}

/* Caller holds slot_lock. Forgets slab k, whose context ended with its
 * memory: its free slots are dropped, held ones when their requests
 * end. */
static void slab_forget(int k)
{
	slabs[k].host = NULL;
	slabs[k].nfree = 0;
}

/* Caller holds slot_lock. Gives slot back to its slab's free slots. */
static void slot_free(int slot)
{
	const int k = slot / SLOTS_PER_SLAB;

	slabs[k].free[slabs[k].nfree++] = (uint16_t)(slot % SLOTS_PER_SLAB);
}

/* Caller holds slot_lock; a context of device is current. Adds a slab in
 * device's primary context: *k. Returns 0 or an error naming the file of
 * the request (path, is_write) that needed it. */
static int add_slab(const struct gpufile__cuda *t, int device, int *k,
                    const char *path, int is_write)
{
	char why[384];
	void *p = NULL;
	CUdeviceptr dev;
	CUcontext old = NULL, ctx;
	CUresult cr;
	int rc;

	if (nslabs == MAX_SLABS)
		return gpufile__fail(-EAGAIN,
		                     "%s %s: the %d stream flags are all "
		                     "taken, by requests waiting on streams "
		                     "or by contexts reset under them",
		                     stream_verb(is_write), path,
		                     MAX_SLABS * SLOTS_PER_SLAB);
	t->cuCtxGetCurrent(&old);
	rc = gpufile__primary_context(device, (void **)&ctx);
	if (rc) {
		snprintf(why, sizeof(why), "%s", gpufile_errmsg());
		return gpufile__fail(rc, "%s %s: %s", stream_verb(is_write),
		                     path, why);
	}
	cr = t->cuCtxSetCurrent(ctx);
	if (cr == CUDA_SUCCESS)
		cr = t->cuMemHostAlloc(&p, 4096,
		                       CU_MEMHOSTALLOC_PORTABLE |
		                           CU_MEMHOSTALLOC_DEVICEMAP);
	gpufile__ctx_restore(t, old);
	if (cr != CUDA_SUCCESS)
		return gpufile__cuda_fail(cr, NULL, 0,
		                          "%s %s: cuMemHostAlloc of the "
		                          "stream flags",
		                          stream_verb(is_write), path);
	memset(p, 0, 4096);
	dev = (CUdeviceptr)(uintptr_t)p; /* the same address under UVA */
	if (t->cuMemHostGetDevicePointer) {
		cr = t->cuMemHostGetDevicePointer(&dev, p, 0);
		if (cr != CUDA_SUCCESS) {
			t->cuMemFreeHost(p);
			return gpufile__cuda_fail(
			    cr, NULL, 0,
			    "%s %s: "
			    "cuMemHostGetDevicePointer of "
			    "the stream flags",
			    stream_verb(is_write), path);
		}
	}
	*k = nslabs++;
	slabs[*k].host = p;
	slabs[*k].dev = dev;
	slabs[*k].ctx = ctx;
	gpufile__ctx_id(t, ctx, &slabs[*k].id);
	slabs[*k].device = device;
	slabs[*k].nfree = SLOTS_PER_SLAB;
	for (int i = 0; i < SLOTS_PER_SLAB; i++)
		slabs[*k].free[i] = (uint16_t)(SLOTS_PER_SLAB - 1 - i);
	return 0;
}

/* A free slot of a live slab of the current context's device; its value
 * is read under slot_lock (another thread may forget the slab). */
int gpufile__stream_flag_get(const struct gpufile__cuda *t, int *slot,
                             uint32_t *value, const char *path, int is_write)
{
	const int device = gpufile__current_device(t);
	int rc = 0;

	pthread_mutex_lock(&slot_lock);
	for (;;) {
		int k = 0;

		while (k < nslabs && !(slabs[k].host && slabs[k].nfree &&
		                       slabs[k].device == device))
			k++;
		if (k == nslabs &&
		    (rc = add_slab(t, device, &k, path, is_write)) != 0)
			break;
		if (!slab_alive(t, k)) {
			slab_forget(k);
			continue;
		}
		*slot = k * SLOTS_PER_SLAB + slabs[k].free[--slabs[k].nfree];
		*value = __atomic_load_n(&slabs[k].host[*slot % SLOTS_PER_SLAB],
		                         __ATOMIC_SEQ_CST);
		break;
	}
	pthread_mutex_unlock(&slot_lock);
	return rc;
}

/* Of a slab forgotten meanwhile, the slot is dropped. */
void gpufile__stream_flag_put(int slot)
{
	pthread_mutex_lock(&slot_lock);
	if (slabs[slot / SLOTS_PER_SLAB].host)
		slot_free(slot);
	pthread_mutex_unlock(&slot_lock);
}

/* Caller holds slot_lock. Stores value into slot's flag unless the slab's
 * context has ended (and its memory with it); returns whether it did. */
static int flag_store(const struct gpufile__cuda *t, int slot, uint32_t value)
{
	const int k = slot / SLOTS_PER_SLAB;

	if (slab_alive(t, k)) {
		__atomic_store_n(&slabs[k].host[slot % SLOTS_PER_SLAB], value,
		                 __ATOMIC_SEQ_CST);
		return 1;
	}
	if (slabs[k].host)
		slab_forget(k);
	return 0;
}

void gpufile__stream_flag_store(const struct gpufile__cuda *t, int slot,
                                uint32_t value)
{
	pthread_mutex_lock(&slot_lock);
	flag_store(t, slot, value);
	pthread_mutex_unlock(&slot_lock);
}

void gpufile__stream_flag_release(const struct gpufile__cuda *t, int slot,
                                  uint32_t value)
{
	pthread_mutex_lock(&slot_lock);
	if (flag_store(t, slot, value))
		slot_free(slot);
	pthread_mutex_unlock(&slot_lock);
}

CUdeviceptr gpufile__stream_flag_dev(int slot)
{
	return slabs[slot / SLOTS_PER_SLAB].dev +
	       (CUdeviceptr)(slot % SLOTS_PER_SLAB) * sizeof(uint32_t);
}

/* ---- events ---- */

/*
 * The events of finished requests are kept for the next ones, per
 * context, rather than destroyed: cuEventDestroy takes the driver's lock
 * for writing, and a waiter destroying one while the stream waited for it
 * deadlocked with a call of another thread that holds that lock while it
 * waits for every stream, the held one too (cuModuleLoadData, which CuPy
 * makes at the first use of a kernel; H200, a staged write: the waiter in
 * cuEventDestroy). Waiting for an event is no such call
 * (test_gpu_stream). An event of a context that ended went with it: it
 * is forgotten, never destroyed.
 */
struct kept_event {
	CUevent ev;
	CUcontext ctx;
	unsigned long long id; /* ctx's (gpufile__ctx_same) */
	int lent;              /* a request has it */
};

static struct {
	pthread_mutex_t lock;
	struct kept_event *v;
	size_t n, cap;
} events = {.lock = PTHREAD_MUTEX_INITIALIZER};

CUresult gpufile__stream_event_get(const struct gpufile__cuda *t, CUevent *e)
{
	CUcontext cur = NULL;
	unsigned long long id = 0;
	struct kept_event *v;
	CUresult cr;

	*e = NULL;
	t->cuCtxGetCurrent(&cur);
	gpufile__ctx_id(t, cur, &id);
	pthread_mutex_lock(&events.lock);
	for (size_t i = 0; cur && i < events.n; i++) {
		if (events.v[i].lent || events.v[i].ctx != cur)
			continue;
		if (events.v[i].id != id) { /* cur is a later context */
			events.v[i--] = events.v[--events.n];
			continue;
		}
		events.v[i].lent = 1;
		*e = events.v[i].ev;
		break;
	}
	pthread_mutex_unlock(&events.lock);
	if (*e)
		return CUDA_SUCCESS;
	cr = t->cuEventCreate(e,
	                      CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC);
	if (cr != CUDA_SUCCESS) {
		*e = NULL;
		return cr;
	}
	pthread_mutex_lock(&events.lock);
	if (events.n == events.cap) {
		size_t cap = events.cap ? 2 * events.cap : 32;

		v = realloc(events.v, cap * sizeof(*v));
		if (v) {
			events.v = v;
			events.cap = cap;
		}
	}
	if (events.n < events.cap) /* else never kept: destroyed when put */
		events.v[events.n++] = (struct kept_event){*e, cur, id, 1};
	pthread_mutex_unlock(&events.lock);
	return CUDA_SUCCESS;
}

void gpufile__stream_event_put(CUevent e)
{
	int kept = 0;

	if (!e)
		return;
	pthread_mutex_lock(&events.lock);
	for (size_t i = 0; i < events.n && !kept; i++)
		if (events.v[i].ev == e && events.v[i].lent) {
			events.v[i].lent = 0;
			kept = 1;
		}
	pthread_mutex_unlock(&events.lock);
	if (!kept) /* out of memory for the list when it was made */
		gpufile__cuda()->cuEventDestroy(e);
}

void gpufile__stream_events_free(const struct gpufile__cuda *t)
{
	pthread_mutex_lock(&events.lock);
	for (size_t i = 0; i < events.n; i++) {
		if (events.v[i].lent)
			continue;
		if (gpufile__ctx_same(t, events.v[i].ctx, events.v[i].id))
			t->cuEventDestroy(events.v[i].ev);
		events.v[i--] = events.v[--events.n];
	}
	pthread_mutex_unlock(&events.lock);
}

/* ---- jobs ---- */

/* A request cuFile queued on the stream (the cufile mechanism): the
 * arguments cuFile reads when the stream reaches it, freed by the host
 * function queued after it (cufile_done). */
struct cufile_args {
	gpufile_t *h;
	size_t size;
	off_t file_offset;
	off_t buf_offset;
	/* cuFile's own result (-errno, or minus a cuFile status): the
	 * caller's *n_out gets gpufile's code for it, in one store. */
	ssize_t done;
	ssize_t *n_out;
	int is_write;
	size_t asked;
	uint64_t start_ns;
	/* On waiters.cufile from its queueing until cufile_done: under
	 * waiters.lock. */
	TAILQ_ENTRY(cufile_args) link;
};

struct job {
	gpufile_t *h;
	char *buf;
	size_t size;
	int64_t offset;
	int is_write;
	ssize_t *n_out;
	CUcontext ctx;
	CUevent before; /* recorded on the caller's stream at the call */
	enum mechanism mech;
	int slot;     /* wait-value: the flag */
	uint32_t seq; /* wait-value: the value that releases the stream */
	struct gpufile__stage *stage; /* staged */
	pthread_mutex_t lock;         /* host-func: guards done and refs */
	pthread_cond_t cond;
	int done;
	int refs; /* host-func: the thread and the host function */
	/* On waiters' queue (queued) or running list (taken, not ended):
	 * under waiters.lock. */
	TAILQ_ENTRY(job) link;
};

static void job_free(struct job *j)
{
	pthread_mutex_destroy(&j->lock);
	pthread_cond_destroy(&j->cond);
	free(j);
}

static void job_unref(struct job *j)
{
	int last;

	pthread_mutex_lock(&j->lock);
	last = --j->refs == 0;
	pthread_mutex_unlock(&j->lock);
	if (last)
		job_free(j);
}

/* The host function of the host-func mechanism: holds the stream until
 * the request has ended. Makes no CUDA call (the driver forbids it). */
static void hold_stream(void *arg)
{
	struct job *j = arg;

	pthread_mutex_lock(&j->lock);
	while (!j->done)
		pthread_cond_wait(&j->cond, &j->lock);
	pthread_mutex_unlock(&j->lock);
	job_unref(j);
}

static void job_ended(struct job *j); /* waiters, below */

/* The staged mechanism's job: the stream orders the copies itself, so
 * nothing waits for the work before; stream_stage.c waits for the copies,
 * stores *n_out and releases the stream. Ends the job. */
static void staged_run(const struct gpufile__cuda *t, struct job *j)
{
	CUcontext old = NULL;

	t->cuCtxGetCurrent(&old);
	t->cuCtxSetCurrent(j->ctx);
	gpufile__stage_run(j->stage);
	gpufile__ctx_restore(t, old);
	job_ended(j); /* h may be closed from here */
	gpufile__stage_free(j->stage);
	job_free(j);
}

/* Waits for the work queued before the call, runs the request, writes
 * *n_out and releases the stream. Ends the job. */
static void job_run(struct job *j)
{
	const struct gpufile__cuda *t = gpufile__cuda();
	CUcontext old = NULL;
	CUresult cr;
	ssize_t n;

	if (j->mech == MECH_STAGED) {
		staged_run(t, j);
		return;
	}
	t->cuCtxGetCurrent(&old);
	cr = t->cuCtxSetCurrent(j->ctx);
	if (cr == CUDA_SUCCESS)
		cr = t->cuEventSynchronize(j->before);
	if (cr != CUDA_SUCCESS)
		n = gpufile__cuda_fail(cr, NULL, 0,
		                       "%s %s: waiting for the work queued on "
		                       "the stream before the request",
		                       stream_verb(j->is_write), j->h->path);
	else if (j->is_write)
		n = gpufile_pwrite(j->h, j->buf, j->size, j->offset);
	else
		n = gpufile_pread(j->h, j->buf, j->size, j->offset);
	gpufile__stream_event_put(j->before);
	gpufile__ctx_restore(t, old);
	/* Atomic: a caller may peek at *n_out before the stream gets
	 * there (StreamFuture.n_out() in Python); it then sees the old
	 * value or the final one. */
	__atomic_store_n(j->n_out, n, __ATOMIC_RELEASE);
	job_ended(j); /* h may be closed from here */

	if (j->mech == MECH_WAIT_VALUE) {
		/* *n_out and the bytes are stored before the flag: the
		 * stream's work after reads them once the flag is seen. */
		gpufile__stream_flag_release(t, j->slot, j->seq);
		job_free(j);
	} else if (j->mech == MECH_HOST_FUNC) {
		pthread_mutex_lock(&j->lock);
		j->done = 1;
		pthread_cond_broadcast(&j->cond);
		pthread_mutex_unlock(&j->lock);
		job_unref(j);
	} else {
		job_free(j);
	}
}

/* ---- waiters ---- */

/*
 * The threads that run wait-value and host-func jobs. A job waits in the
 * stream for the work queued before it, which can include earlier jobs'
 * holds but never a later job's (CUDA orders work by when it was queued),
 * so jobs are taken oldest first: the oldest job waiting never waits for
 * one behind it, and a bounded set of waiters always makes progress. A
 * waiter is started when a job is queued and fewer waiters are idle than
 * jobs wait on the queue (so a job stuck behind a long kernel on one
 * stream does not hold up another stream's), up to MAX_WAITERS; one idle
 * for WAITER_IDLE_S seconds ends. An idle waiter that was signalled still
 * counts as idle until it wakes: compared with nidle alone, two jobs
 * queued back to back went to one waiter, and the second waited for the
 * first's stream.
 * (Each request used to start and end a thread of its own:
 * test_stream_waiters counted 200 threads for 200 requests in turn.)
 *
 * A job is counted on its handle (gpufile__handle_hold) from its queueing
 * until it ended, and is on the queue or on the running list for exactly
 * that time, both under waiters.lock: a forked child, which has none of
 * the waiters, drops the count of every job on either (so that it can
 * close the handle) and starts with no waiter. A request queued through
 * cuFile is counted and listed (waiters.cufile) the same way, from its
 * queueing until its host function ran: gpufile_close() then waits for
 * it before deregistering the cuFile handle the stream will use.
 */
#define MAX_WAITERS   64
#define WAITER_IDLE_S 5

static struct {
	pthread_mutex_t lock;
	pthread_cond_t work;
	TAILQ_HEAD(, job) queue;          /* queued, oldest first */
	TAILQ_HEAD(, job) running;        /* taken, not ended */
	TAILQ_HEAD(, cufile_args) cufile; /* queued by cuFile, not ended */
	unsigned queued;                  /* jobs on queue */
	unsigned nwaiters, nidle;
} waiters = {.lock = PTHREAD_MUTEX_INITIALIZER,
             .work = PTHREAD_COND_INITIALIZER,
             .queue = TAILQ_HEAD_INITIALIZER(waiters.queue),
             .running = TAILQ_HEAD_INITIALIZER(waiters.running),
             .cufile = TAILQ_HEAD_INITIALIZER(waiters.cufile)};

static atomic_ulong waiters_started;

unsigned long gpufile__stream_waiters_started(void)
{
	return atomic_load(&waiters_started);
}

unsigned gpufile__stream_waiters_idle(void)
{
	unsigned n;

	pthread_mutex_lock(&waiters.lock);
	n = waiters.nidle;
	pthread_mutex_unlock(&waiters.lock);
	return n;
}

/* The job's request has ended: off the running list and uncounted on its
 * handle in one step (a fork sees it on the list and counted, or
 * neither). */
static void job_ended(struct job *j)
{
	pthread_mutex_lock(&waiters.lock);
	TAILQ_REMOVE(&waiters.running, j, link);
	gpufile__handle_release(j->h);
	pthread_mutex_unlock(&waiters.lock);
}

int gpufile__idle_wait(pthread_cond_t *work, pthread_mutex_t *lock,
                       unsigned *nidle, unsigned secs)
{
	struct timespec until;
	int rc;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += secs;
	(*nidle)++;
	rc = pthread_cond_timedwait(work, lock, &until);
	(*nidle)--;
	return rc;
}

static void *waiter(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&waiters.lock);
	for (;;) {
		struct job *j = TAILQ_FIRST(&waiters.queue);

		if (!j) {
			if (gpufile__idle_wait(&waiters.work, &waiters.lock,
			                       &waiters.nidle,
			                       WAITER_IDLE_S) == ETIMEDOUT &&
			    TAILQ_EMPTY(&waiters.queue))
				break;
			continue;
		}
		TAILQ_REMOVE(&waiters.queue, j, link);
		waiters.queued--;
		TAILQ_INSERT_TAIL(&waiters.running, j, link);
		pthread_mutex_unlock(&waiters.lock);
		job_run(j);
		pthread_mutex_lock(&waiters.lock);
	}
	waiters.nwaiters--;
	pthread_mutex_unlock(&waiters.lock);
	return NULL;
}

/* Queues j for a waiter, starting one where none is idle. Returns 0, or
 * -1 when no waiter exists and none could be started (the caller then
 * runs j itself; the order still holds). */
static int waiter_queue(struct job *j)
{
	pthread_attr_t attr;
	pthread_t tid;
	int start, rc = 0;

	pthread_mutex_lock(&waiters.lock);
	/* Each idle waiter takes one job: with j, one job more waits than
	 * are taken by the idle ones. */
	start = waiters.nidle < waiters.queued + 1 &&
	        waiters.nwaiters < MAX_WAITERS;
	if (start && pthread_attr_init(&attr) == 0) {
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		rc = pthread_create(&tid, &attr, waiter, NULL);
		pthread_attr_destroy(&attr);
		if (rc == 0) {
			waiters.nwaiters++;
			atomic_fetch_add(&waiters_started, 1);
		}
	}
	if (waiters.nwaiters == 0) {
		pthread_mutex_unlock(&waiters.lock);
		return -1;
	}
	gpufile__handle_hold(j->h);
	TAILQ_INSERT_TAIL(&waiters.queue, j, link);
	waiters.queued++;
	pthread_cond_signal(&waiters.work);
	pthread_mutex_unlock(&waiters.lock);
	return 0;
}

void gpufile__stream_atfork_prepare(void)
{
	pthread_mutex_lock(&waiters.lock);
}

void gpufile__stream_atfork_parent(void)
{
	pthread_mutex_unlock(&waiters.lock);
}

/* Caller holds waiters.lock (fork.c), the child's only thread. The jobs
 * are the parent's: their streams and threads are not here. */
void gpufile__stream_atfork_child(void)
{
	struct cufile_args *a;
	struct job *j;

	TAILQ_FOREACH (j, &waiters.queue, link)
		atomic_fetch_sub(&j->h->inflight, 1);
	TAILQ_FOREACH (j, &waiters.running, link)
		atomic_fetch_sub(&j->h->inflight, 1);
	TAILQ_FOREACH (a, &waiters.cufile, link)
		atomic_fetch_sub(&a->h->inflight, 1);
	TAILQ_INIT(&waiters.queue);
	TAILQ_INIT(&waiters.running);
	TAILQ_INIT(&waiters.cufile);
	/* The parent's events: not this process's. */
	pthread_mutex_init(&events.lock, NULL);
	events.v = NULL;
	events.n = events.cap = 0;
	waiters.nwaiters = waiters.nidle = waiters.queued = 0;
	pthread_cond_init(&waiters.work, NULL);
	pthread_mutex_unlock(&waiters.lock);
}

/* ---- the cuFile mechanism ---- */

/* a is queued on its stream: counted on its handle and listed (see the
 * waiters), in one step. */
static void cufile_started(struct cufile_args *a)
{
	pthread_mutex_lock(&waiters.lock);
	gpufile__handle_hold(a->h);
	TAILQ_INSERT_TAIL(&waiters.cufile, a, link);
	pthread_mutex_unlock(&waiters.lock);
}

/* Queued after cuFile's request: maps its result onto gpufile's codes
 * into *n_out (its only store), counts it, ends it on its handle and
 * frees the arguments. No CUDA call. */
static void cufile_done(void *arg)
{
	struct cufile_args *a = arg;
	ssize_t n = a->done;

	/* cuFile reports -errno, or minus a cuFile status (5000 and up). */
	if (n <= -5000)
		n = GPUFILE_ECUFILE;
	gpufile__stats_request(GPUFILE_PATH_CUFILE, a->is_write, n, 1, a->asked,
	                       gpufile__now_ns() - a->start_ns);
	gpufile__stats_file_request(&a->h->stats_file, GPUFILE_PATH_CUFILE,
	                            a->is_write, n, 1);
	__atomic_store_n(a->n_out, n, __ATOMIC_RELEASE);
	pthread_mutex_lock(&waiters.lock);
	TAILQ_REMOVE(&waiters.cufile, a, link);
	gpufile__handle_release(a->h); /* h may be closed from here */
	pthread_mutex_unlock(&waiters.lock);
	free(a);
}

/* cuFile queued a's request, but the driver refused the host function
 * that would end it: the stream is synchronised here instead (the
 * request has then run), and the call returns with *n_out written. */
static void cufile_end_here(const struct gpufile__cuda *t,
                            struct cufile_args *a, CUstream stream)
{
	CUresult cr = t->cuStreamSynchronize(stream);

	if (cr == CUDA_SUCCESS) {
		cufile_done(a);
		return;
	}
	/* A stream that cannot be synchronised has a sticky error: its
	 * context runs nothing more, cuFile's request included. The
	 * arguments stay allocated all the same (one small leak beats
	 * cuFile reading freed memory); the handle may be closed. */
	__atomic_store_n(
	    a->n_out,
	    gpufile__cuda_fail(cr, NULL, 0, "%s %s: cuStreamSynchronize",
	                       stream_verb(a->is_write), a->h->path),
	    __ATOMIC_RELEASE);
	pthread_mutex_lock(&waiters.lock);
	TAILQ_REMOVE(&waiters.cufile, a, link);
	gpufile__handle_release(a->h);
	pthread_mutex_unlock(&waiters.lock);
}

/* Queues the request on stream through cuFile. Returns 0, or 1 when
 * cuFile refused it at submission (the caller falls back), with why. */
static int cufile_queue(const struct gpufile__cuda *t,
                        const struct gpufile__request *r, CUstream stream,
                        ssize_t *n_out, char *why, size_t why_len)
{
	const struct gpufile__cufile *cf;
	struct cufile_args *a = calloc(1, sizeof(*a));
	CUfileError_t e;
	int err, status;

	if (!a) {
		snprintf(why, why_len, "out of memory");
		return 1;
	}
	cf = gpufile__cufile_open(r->cuda_ctx, &err, &status);
	if (!cf) {
		free(a);
		snprintf(why, why_len, "%s", gpufile_errmsg());
		return 1;
	}
	a->h = r->h;
	a->size = r->size;
	a->file_offset = (off_t)r->offset;
	a->buf_offset = (off_t)(r->buf - r->cufile_base);
	a->done = GPUFILE_ECUFILE; /* until cuFile says otherwise */
	a->n_out = n_out;
	a->is_write = r->is_write;
	a->asked = r->size;
	a->start_ns = gpufile__now_ns();
	if (r->is_write)
		e = cf->cuFileWriteAsync(r->cufile_handle, r->cufile_base,
		                         &a->size, &a->file_offset,
		                         &a->buf_offset, &a->done, stream);
	else
		e = cf->cuFileReadAsync(r->cufile_handle, r->cufile_base,
		                        &a->size, &a->file_offset,
		                        &a->buf_offset, &a->done, stream);
	if (e.err != CU_FILE_SUCCESS) {
		free(a);
		snprintf(why, why_len, "%s refused the request: %s (%d)",
		         r->is_write ? "cuFileWriteAsync" : "cuFileReadAsync",
		         gpufile__cufile_status_name(e.err), (int)e.err);
		return 1;
	}
	/* The request is queued: from here only its end frees a, and the
	 * handle (with its cuFile registration) stays open until then. */
	cufile_started(a);
	if (t->cuLaunchHostFunc(stream, cufile_done, a) != CUDA_SUCCESS)
		cufile_end_here(t, a, stream);
	return 0;
}

/* ---- the decision ---- */

/*
 * Whether the request itself puts work on the GPU: device (or managed)
 * memory on the posix side is staged through pinned buffers and copied
 * by gpufile on streams of its own. Such a request must not hold the
 * caller's stream. CUDA allows a flag wait (cuStreamWaitValue32) and a
 * host function to depend only on work already ordered before them: a
 * held stream may share a hardware queue with gpufile's copy streams,
 * and a copy queued behind the hold then waits for the flag that only
 * its own completion would set. The Python suite hung that way on the
 * H200 (a CuPy read_async after ~150 other tests had made their streams;
 * the same test alone passed). Host memory needs no GPU work: a flag or
 * a host function is then safe.
 */
static int runs_gpu_work(const struct gpufile__request *r)
{
	gpufile_mem_t kind = GPUFILE_MEM_HOST;

	if (r->cuda_ctx)
		return 1;
	/* An append is not prepared (its offset is placed when it runs):
	 * ask the driver what its buffer is. */
	if (r->buf && gpufile_mem_kind(r->buf, &kind, NULL) == 0)
		return kind == GPUFILE_MEM_DEVICE ||
		       kind == GPUFILE_MEM_MANAGED;
	return 0;
}

/* Why a request of device memory cannot be staged on the stream
 * (stream_stage.c), or NULL when it can. The arena's size is written out
 * (into buf, len bytes): nthreads defaults to the online CPUs, so the
 * limit differs between machines (32 MiB on 4 CPUs, 128 MiB on 16). */
static const char *staged_refusal(const struct gpufile__cuda *t,
                                  const struct gpufile__request *r,
                                  int prepared, char *buf, size_t len)
{
	if (r->is_write && r->h->append)
		return "an append's offset is placed only when it runs";
	if (!prepared || !r->cuda_ctx)
		return "the buffer's device is not known";
	if (r->path != GPUFILE_PATH_POSIX && r->path != GPUFILE_PATH_SMALL)
		return "only requests of a local file are staged on the "
		       "stream";
	if (!t->cuStreamWaitValue32 || atomic_load(&wait_unsupported))
		return "the driver does not wait on flags "
		       "(cuStreamWaitValue32)";
	if (!gpufile__stage_fits(&r->cfg, r->offset, r->size)) {
		snprintf(buf, len,
		         "the %s is larger than one staging arena (nthreads x "
		         "bounce_buffers x bounce_buffer_size: %u x %u x %zu "
		         "= %zu bytes, counted from file_offset rounded down "
		         "to bounce_buffer_size)%s",
		         r->is_write ? "write" : "read", r->cfg.nthreads,
		         r->cfg.bounce_buffers, r->cfg.bounce_buffer_size,
		         (size_t)r->cfg.nthreads * r->cfg.bounce_buffers *
		             r->cfg.bounce_buffer_size,
		         r->is_write ? ""
		                     : ": the stream's queue holds too few "
		                       "operations for it, so the call would "
		                       "wait for most of the read anyway "
		                       "(bench/README.md)");
		return buf;
	}
	return NULL;
}

/* Which mechanism a request on stream uses, and why (reason, len bytes).
 * r is prepared (file.c); cuFile's is tried by the caller. */
static enum mechanism choose(const struct gpufile__cuda *t,
                             const struct gpufile__request *r, int prepared,
                             char *reason, size_t len)
{
	const char *io = r->is_write ? "write" : "read";

	if (prepared && r->path == GPUFILE_PATH_CUFILE) {
		int err, status;
		const struct gpufile__cufile *cf =
		    gpufile__cufile_open(r->cuda_ctx, &err, &status);

		if (cf && cf->cuFileReadAsync && t->cuLaunchHostFunc) {
			snprintf(reason, len,
			         "cufile: cuFile%sAsync queues the request on "
			         "the stream (stream not registered with "
			         "cuFileStreamRegister: gpufile cannot know "
			         "when the caller destroys it)",
			         r->is_write ? "Write" : "Read");
			return MECH_CUFILE;
		}
	}
	if (runs_gpu_work(r)) {
		char arena[512];
		const char *why =
		    staged_refusal(t, r, prepared, arena, sizeof(arena));

		if (!why) {
			snprintf(
			    reason, len,
			    "staged: the stream copies %s through the %s "
			    "path",
			    r->is_write
			        ? "the buffer's bytes into gpufile's pinned "
			          "buffers itself, then waits "
			          "(cuStreamWaitValue32) until gpufile's "
			          "threads have written them to the file"
			        : "the file's bytes from gpufile's pinned "
			          "buffers itself, each copy waiting "
			          "(cuStreamWaitValue32) until gpufile's "
			          "threads have read its part of the file "
			          "into its buffer",
			    gpufile_path_name(r->path));
			return MECH_STAGED;
		}
		snprintf(
		    reason, len,
		    "blocking: %s; a %s of device memory that runs gpufile's "
		    "own copies on the GPU must not hold the stream (CUDA's "
		    "rule for flag waits and host functions), so the call "
		    "synchronises the stream and runs the %s through the %s "
		    "path before it returns",
		    why, io, io, gpufile_path_name(r->path));
		return MECH_BLOCKING;
	}
	if (t->cuStreamWaitValue32 && !atomic_load(&wait_unsupported)) {
		snprintf(reason, len,
		         "wait-value: the stream waits (cuStreamWaitValue32) "
		         "for a flag gpufile sets once the %s has run through "
		         "the %s path",
		         io, gpufile_path_name(r->path));
		return MECH_WAIT_VALUE;
	}
	if (t->cuLaunchHostFunc) {
		snprintf(reason, len,
		         "host-func: the stream is held by a host function "
		         "(cuLaunchHostFunc) until the %s has run through the "
		         "%s path (%s)",
		         io, gpufile_path_name(r->path),
		         t->cuStreamWaitValue32
		             ? "the driver refused cuStreamWaitValue32"
		             : "the driver lacks cuStreamWaitValue32");
		return MECH_HOST_FUNC;
	}
	snprintf(reason, len,
	         "blocking: the driver has neither cuStreamWaitValue32 nor "
	         "cuLaunchHostFunc, so the call synchronises the stream and "
	         "runs the %s before it returns",
	         io);
	return MECH_BLOCKING;
}

/* Validates the request into *r (*prepared: 1 when file.c prepared it,
 * and then it must be destroyed). Returns 0 or an error. */
static int validate(struct gpufile__request *r, int *prepared, gpufile_t *h,
                    void *buf, size_t size, int64_t offset, int is_write)
{
	int rc;

	memset(r, 0, sizeof(*r));
	*prepared = 0;
	if (is_write && h->append) {
		/* An append's offset is placed when it runs (file.c); the
		 * checks of prepare() that apply are made here. */
		if (!buf && size)
			return gpufile__fail(
			    -EFAULT, "writing %s: buffer is NULL", h->path);
		/* Refused at the call, as prepare() refuses it: once queued,
		 * it could only fail in *n_out. */
		if (size > (size_t)INT64_MAX)
			return gpufile__fail(
			    -EINVAL,
			    "writing %s: offset 0 with size %zu "
			    "is out of range",
			    h->path, size);
		r->h = h;
		r->buf = buf;
		r->size = size;
		r->is_write = 1;
		/* For the reason given (gpufile_stream_info): a write of host
		 * memory takes the host path, not the bounce buffers. */
		r->path =
		    runs_gpu_work(r) ? GPUFILE_PATH_POSIX : GPUFILE_PATH_HOST;
		return 0;
	}
	rc = gpufile__request_prepare(r, h, buf, size, offset, is_write);
	if (rc == 0)
		*prepared = 1;
	return rc;
}

/* The context the stream belongs to (or, for the NULL stream, the current
 * one; failing that, the one owning the buffer). */
static CUcontext stream_context(const struct gpufile__cuda *t, CUstream stream,
                                const struct gpufile__request *r)
{
	CUcontext ctx = NULL;

	if (t->cuStreamGetCtx &&
	    t->cuStreamGetCtx(stream, &ctx) != CUDA_SUCCESS)
		ctx = NULL;
	if (!ctx && t->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS)
		ctx = NULL;
	if (!ctx)
		ctx = r->cuda_ctx;
	return ctx;
}

/* Puts the job's hold on stream: the flag wait, or the host function.
 * Returns 0, or 1 when the wait was refused as unsupported (the caller
 * then tries the host function), or an error. */
static int hold(const struct gpufile__cuda *t, struct job *j, CUstream stream)
{
	CUresult cr;
	int rc;

	if (j->mech == MECH_WAIT_VALUE) {
		uint32_t now;

		rc = gpufile__stream_flag_get(t, &j->slot, &now, j->h->path,
		                              j->is_write);
		if (rc)
			return rc;
		j->seq = now + 1;
		cr = t->cuStreamWaitValue32(stream,
		                            gpufile__stream_flag_dev(j->slot),
		                            j->seq, CU_STREAM_WAIT_VALUE_GEQ);
		if (cr == CUDA_SUCCESS)
			return 0;
		gpufile__stream_flag_put(j->slot);
		if (cr == CUDA_ERROR_NOT_SUPPORTED && t->cuLaunchHostFunc) {
			atomic_store(&wait_unsupported, 1);
			return 1;
		}
		return gpufile__cuda_fail(cr, NULL, 0,
		                          "%s %s: cuStreamWaitValue32 on the "
		                          "stream",
		                          stream_verb(j->is_write), j->h->path);
	}
	if (j->mech == MECH_HOST_FUNC) {
		j->refs = 2;
		cr = t->cuLaunchHostFunc(stream, hold_stream, j);
		if (cr != CUDA_SUCCESS) {
			j->refs = 1;
			return gpufile__cuda_fail(cr, NULL, 0,
			                          "%s %s: cuLaunchHostFunc on "
			                          "the stream",
			                          stream_verb(j->is_write),
			                          j->h->path);
		}
		return 0;
	}
	/* Blocking: the work before is waited for in the call. */
	cr = t->cuStreamSynchronize(stream);
	return cr == CUDA_SUCCESS
	           ? 0
	           : gpufile__cuda_fail(cr, NULL, 0,
	                                "%s %s: "
	                                "cuStreamSynchronize",
	                                stream_verb(j->is_write), j->h->path);
}

/* From here the stream waits for j: it must run. Queues it for a waiter,
 * or, blocking, where here is set or when no waiter could be started,
 * runs it here (the order still holds), counted and listed as a waiter's
 * job is. */
static void job_dispatch(struct job *j, int here)
{
	if (j->mech != MECH_BLOCKING && !here && waiter_queue(j) == 0)
		return;
	pthread_mutex_lock(&waiters.lock);
	gpufile__handle_hold(j->h);
	TAILQ_INSERT_TAIL(&waiters.running, j, link);
	pthread_mutex_unlock(&waiters.lock);
	job_run(j);
}

/* Queues the posix-side mechanisms: the event, the hold, the thread. */
static int queue_job(const struct gpufile__cuda *t, struct job *j,
                     CUstream stream)
{
	CUresult cr;
	int rc;

	/* Blocking sync: the thread waiting for the work before sleeps
	 * instead of spinning a core the I/O needs. */
	cr = gpufile__stream_event_get(t, &j->before);
	if (cr != CUDA_SUCCESS)
		return gpufile__cuda_fail(cr, NULL, 0, "%s %s: cuEventCreate",
		                          stream_verb(j->is_write), j->h->path);
	cr = t->cuEventRecord(j->before, stream);
	if (cr != CUDA_SUCCESS) {
		gpufile__stream_event_put(j->before);
		return gpufile__cuda_fail(cr, NULL, 0,
		                          "%s %s: cuEventRecord on the stream",
		                          stream_verb(j->is_write), j->h->path);
	}
	rc = hold(t, j, stream);
	if (rc == 1) {
		j->mech = MECH_HOST_FUNC;
		rc = hold(t, j, stream);
	}
	if (rc) {
		gpufile__stream_event_put(j->before);
		return rc;
	}
	job_dispatch(j, 0);
	return 0;
}

/* The checks made before the request itself: the arguments, a usable
 * CUDA (*t), a stream that runs its work (not capturing). */
static int check_call(gpufile_t *h, ssize_t *n_out, CUstream stream,
                      const char *what, const struct gpufile__cuda **t)
{
	char why[384];
	int capturing = 0;

	*t = NULL;
	if (!h)
		return gpufile__fail(-EINVAL, "%s: handle is NULL", what);
	if (!n_out)
		return gpufile__fail(-EINVAL, "%s %s: n_out is NULL", what,
		                     h->path);
	*t = gpufile__cuda();
	if (!*t) {
		/* The message is formatted into the buffer it comes from. */
		snprintf(why, sizeof(why), "%s", gpufile_errmsg());
		return gpufile__fail(
		    GPUFILE_ENOCUDA,
		    "%s %s: a stream-ordered request needs the "
		    "CUDA driver for its stream, even on host "
		    "memory: %s",
		    what, h->path, why);
	}
	/* A stream capturing a CUDA graph records work instead of running
	 * it: the event gpufile would wait for never completes, and a
	 * graph cannot replay a host read. */
	if ((*t)->cuStreamIsCapturing &&
	    (*t)->cuStreamIsCapturing(stream, &capturing) == CUDA_SUCCESS &&
	    capturing)
		return gpufile__fail(-EINVAL,
		                     "%s %s: the stream is capturing a "
		                     "CUDA graph; stream-ordered requests "
		                     "cannot be captured",
		                     what, h->path);
	return 0;
}

/* Chooses the request's mechanism into *mech, and for cuFile's queues
 * the request: *mech is MECH_CUFILE only once it is queued. When cuFile
 * refuses it at submission the posix side keeps the order, unless the
 * caller demands cuFile. Returns 0 or an error. */
static int pick_mechanism(const struct gpufile__cuda *t,
                          struct gpufile__request *r, int prepared,
                          CUstream stream, ssize_t *n_out, const char *what,
                          enum mechanism *mech)
{
	char reason[512], why[384];

	*mech = choose(t, r, prepared, reason, sizeof(reason));
	if (*mech != MECH_CUFILE)
		return 0;
	if (cufile_queue(t, r, stream, n_out, why, sizeof(why)) == 0)
		return 0;
	if (r->cfg.compat_mode == GPUFILE_COMPAT_OFF)
		return gpufile__fail(GPUFILE_ECUFILE,
		                     "%s %s: compat_mode=off requires "
		                     "cuFile: %s",
		                     what, r->h->path, why);
	r->path = GPUFILE_PATH_POSIX;
	*mech = choose(t, r, 0, reason, sizeof(reason));
	return 0;
}

/* A job of mechanism mech for a request on h in context ctx, or NULL with
 * the thread's message naming what (out of memory). */
static struct job *job_new(enum mechanism mech, gpufile_t *h, ssize_t *n_out,
                           CUcontext ctx, const char *what)
{
	struct job *j = calloc(1, sizeof(*j));

	if (!j) {
		gpufile__fail(-ENOMEM, "%s %s: out of memory", what, h->path);
		return NULL;
	}
	j->mech = mech;
	j->h = h;
	j->n_out = n_out;
	j->ctx = ctx;
	j->refs = 1;
	pthread_mutex_init(&j->lock, NULL);
	pthread_cond_init(&j->cond, NULL);
	return j;
}

/* Makes the job of a posix-side request and queues it on stream. */
static int start_job(const struct gpufile__cuda *t, gpufile_t *h, void *buf,
                     size_t size, int64_t offset, int is_write, ssize_t *n_out,
                     CUcontext ctx, enum mechanism mech, CUstream stream,
                     const char *what)
{
	struct job *j = job_new(mech, h, n_out, ctx, what);
	int rc;

	if (!j)
		return -ENOMEM;
	j->buf = buf;
	j->size = size;
	j->offset = offset;
	j->is_write = is_write;
	rc = queue_job(t, j, stream);
	if (rc)
		job_free(j);
	return rc;
}

/* Whether h and g name one file (one inode). */
static int same_file(const gpufile_t *h, const gpufile_t *g)
{
	return h == g || (h->file_ino && h->file_dev == g->file_dev &&
	                  h->file_ino == g->file_ino);
}

/*
 * Whether a stream-ordered write to h's file was queued and has not
 * ended, on any handle and any stream: a read must then not read the
 * file before the stream has reached it. A write on another stream
 * counts too, since the caller may have ordered it before the read with
 * an event (cuStreamWaitEvent) that gpufile cannot see; one queued later
 * is never before the read. Every such write is on one of the lists
 * until its bytes are in the file. The lists hold the requests in flight
 * (tens, rarely more): scanning them costs far less than a read.
 */
static int write_pending(const gpufile_t *h)
{
	const struct cufile_args *a;
	const struct job *j;
	int pending = 0;

	pthread_mutex_lock(&waiters.lock);
	TAILQ_FOREACH (j, &waiters.queue, link)
		pending |= j->is_write && same_file(j->h, h);
	TAILQ_FOREACH (j, &waiters.running, link)
		pending |= j->is_write && same_file(j->h, h);
	TAILQ_FOREACH (a, &waiters.cufile, link)
		pending |= a->is_write && same_file(a->h, h);
	pthread_mutex_unlock(&waiters.lock);
	return pending;
}

/*
 * Starts a staged request (stream_stage.c): its waits and copies on the
 * stream, a read's fillers, and a waiter for its end (or, where the
 * driver refused the end's wait, runs it to its end here). A read is
 * read ahead, at once, unless a write to its file is pending
 * (write_pending): it is then read once the stream has reached it.
 * Returns 0, or 1 when it could not start and nothing is queued (the
 * caller then blocks instead), or an error.
 */
static int start_staged(const struct gpufile__cuda *t,
                        const struct gpufile__request *r, ssize_t *n_out,
                        CUcontext ctx, CUstream stream)
{
	struct gpufile__stage *st;
	struct job *j;
	int rc, unsupported = 0, here = 0;

	/* The stream's copies read or write the buffer: they must run in
	 * its context. */
	if (ctx != r->cuda_ctx)
		return 1;
	j = job_new(MECH_STAGED, r->h, n_out, ctx,
	            r->is_write ? "gpufile_write_async" : "gpufile_read_async");
	if (!j)
		return -ENOMEM;
	j->is_write = r->is_write;
	rc = gpufile__stage_new(
	    t, r, stream, !r->is_write && write_pending(r->h), n_out, &st);
	if (rc == 0)
		rc = gpufile__stage_queue(st, &unsupported, &here);
	if (rc) {
		job_free(j);
		if (rc == GPUFILE_ECUDA && unsupported) {
			atomic_store(&wait_unsupported, 1);
			return 1;
		}
		return rc;
	}
	j->stage = st;
	/* Without a waiter this waits here; the fillers and the stream
	 * end it. */
	job_dispatch(j, here);
	return 0;
}

static int stream_io(gpufile_t *h, void *buf, size_t size, int64_t offset,
                     void *stream_arg, ssize_t *n_out, int is_write)
{
	const char *what =
	    is_write ? "gpufile_write_async" : "gpufile_read_async";
	CUstream stream = stream_arg;
	const struct gpufile__cuda *t;
	struct gpufile__request r;
	CUcontext ctx, old = NULL;
	enum mechanism mech;
	int prepared, rc;

	rc = check_call(h, n_out, stream, what, &t);
	if (rc)
		return rc;
	rc = validate(&r, &prepared, h, buf, size, offset, is_write);
	if (rc)
		return rc;
	ctx = stream_context(t, stream, &r);
	if (!ctx) {
		rc = gpufile__fail(-EINVAL,
		                   "%s %s: no CUDA context is current and the "
		                   "stream names none",
		                   what, h->path);
		goto out;
	}
	t->cuCtxGetCurrent(&old);
	if (t->cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
		rc = gpufile__fail(-EINVAL,
		                   "%s %s: the stream's context "
		                   "cannot be made current",
		                   what, h->path);
		goto out;
	}
	rc = pick_mechanism(t, &r, prepared, stream, n_out, what, &mech);
	if (rc == 0 && mech == MECH_STAGED &&
	    (rc = start_staged(t, &r, n_out, ctx, stream)) == 1) {
		rc = 0;
		mech = MECH_BLOCKING;
	}
	if (rc == 0 && mech != MECH_CUFILE && mech != MECH_STAGED)
		rc = start_job(t, h, buf, size, offset, is_write, n_out, ctx,
		               mech, stream, what);
	gpufile__ctx_restore(t, old);
out:
	if (prepared)
		gpufile__request_destroy(&r);
	return rc;
}

int gpufile_read_async(gpufile_t *h, void *buf, size_t size,
                       int64_t file_offset, void *stream, ssize_t *n_out)
{
	return stream_io(h, buf, size, file_offset, stream, n_out, 0);
}

int gpufile_write_async(gpufile_t *h, const void *buf, size_t size,
                        int64_t file_offset, void *stream, ssize_t *n_out)
{
	return stream_io(h, (void *)buf, size, file_offset, stream, n_out, 1);
}

int gpufile_stream_info(gpufile_t *h, const void *buf, size_t size,
                        int is_write, char *reason, size_t len)
{
	const struct gpufile__cuda *t;
	struct gpufile__request r;
	char why[1024];
	int prepared, rc;

	if (!h)
		return gpufile__fail(-EINVAL, "gpufile_stream_info: handle is "
		                              "NULL");
	rc = validate(&r, &prepared, h, (void *)buf, size, 0, is_write != 0);
	if (rc)
		return rc;
	t = gpufile__cuda();
	if (t) {
		choose(t, &r, prepared, why, sizeof(why));
	} else {
		/* An answer, not the loader's error (which named no call):
		 * without a driver there is no stream to order a request on,
		 * and gpufile_read_async/write_async say so (check_call). */
		snprintf(why, sizeof(why),
		         "none: %s; gpufile_read_async and gpufile_write_async "
		         "need the CUDA driver for their stream, even on host "
		         "memory, and fail with GPUFILE_ENOCUDA",
		         gpufile_errmsg());
	}
	if (prepared)
		gpufile__request_destroy(&r);
	if (reason && len)
		snprintf(reason, len, "%s", why);
	return 0;
}
