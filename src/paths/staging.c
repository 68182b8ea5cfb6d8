/*
 * The host-staged ("posix") path for device buffers: file <-> pinned
 * bounce buffers <-> GPU, pipelined.
 *
 * A stager owns bounce_buffers pinned buffers, a CUDA stream and one event
 * per buffer. Within a task, the file is read chunk by chunk (chunk =
 * bounce_buffer_size, chunk edges at multiples of it in the file); while
 * the copy of chunk k to the GPU runs, chunk k+1 is read into the next
 * buffer, and a buffer is reused only after its event says its copy ended.
 * Writes run the other way round, in pieces of a quarter of a task (see
 * write_piece): the copy of piece k+1 from the GPU runs while piece k is
 * written to the file. The warm reader's copies are
 * pooled across stagers, several to a call ("Pooled copies" below).
 *
 * Stagers are kept on a free list and handed to whichever thread runs a
 * device task; at most nthreads exist, so pinned memory is bounded by
 * nthreads * bounce_buffers * GPUFILE__BOUNCE_STRIDE(bounce_buffer_size).
 * A stager's buffers are one pinned region (pinned.c: pinning is most of
 * what a first read pays), allocated on first use and kept until
 * gpufile_release(). At process exit they are left to the operating
 * system: the CUDA contexts may already be gone.
 */
#include "paths/paths.h"
#include "platform/cuda_shim.h"

#include <assert.h>
#include <errno.h>
#ifdef GPUFILE_HAVE_LIBURING
#include <liburing.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUFFERS 64

#ifdef GPUFILE_HAVE_LIBURING
static int uring_queue_init(unsigned entries, struct io_uring *ring,
                            unsigned flags)
{
	return io_uring_queue_init(entries, ring, flags);
}

#define REAL_URING                                                             \
	{                                                                      \
		.queue_init = uring_queue_init, .submit = io_uring_submit,     \
		.wait_cqe = io_uring_wait_cqe,                                 \
	}
static const struct gpufile__uring_ops real_uring = REAL_URING;
struct gpufile__uring_ops gpufile__uring = REAL_URING;
#else
struct gpufile__uring_ops gpufile__uring;
#endif

void gpufile__uring_reset(void)
{
#ifdef GPUFILE_HAVE_LIBURING
	gpufile__uring = real_uring;
#endif
}

/* Contexts (devices) whose streams one stager keeps besides its current
 * one: enough for one process feeding every GPU of an 8-GPU machine
 * without remaking streams (a lane costs a stream and bounce_buffers
 * events, no pinned memory). */
#define MAX_LANES 8

struct stager {
	struct stager *next;
	CUcontext ctx;             /* context the stream and events belong to */
	unsigned long long ctx_id; /* its id (gpufile__ctx_same) */
	CUstream stream;
	/* Streams and events this stager made in other contexts, kept for
	 * when a request on that device comes back: the pinned buffers are
	 * portable (CU_MEMHOSTALLOC_PORTABLE) and serve every context, so
	 * moving between devices costs a stream switch, not new pinned
	 * memory. Without this, two reads into GPUs 0 and 1 at once made
	 * every worker reallocate its buffers at each task: 0.52x of one
	 * GPU's throughput on the two-H200 machine. */
	struct lane {
		CUcontext ctx; /* NULL: slot unused */
		unsigned long long id;
		CUstream stream;
		CUevent event[MAX_BUFFERS];
		unsigned long last; /* lane_clock when it was last current */
	} lanes[MAX_LANES];
	unsigned long lane_clock;
	unsigned nbufs;
	size_t buf_size; /* usable bytes per buffer */
	/* The context the pinned buffers were allocated in, and its id:
	 * the device's primary one, which gpufile holds (stager_prepare). */
	CUcontext buf_ctx;
	unsigned long long buf_id;
	struct gpufile__pinned mem; /* the buffers, one after another */
	char *buf[MAX_BUFFERS];
	CUevent event[MAX_BUFFERS];
	int pending[MAX_BUFFERS]; /* a copy using buf[i] may still run */
	/* Pooled copies: buf[i]'s last copy went through queue pool_q
	 * (in_pool[i], the owner's own); it still waits there to be sent
	 * (queued[i]), and what its send returned (sent_rc[i]), both under
	 * pool.lock. */
	struct copy_queue *pool_q;
	int in_pool[MAX_BUFFERS];
	int queued[MAX_BUFFERS];
	CUresult sent_rc[MAX_BUFFERS];
	unsigned next_buf; /* rotates across tasks */
	unsigned gen;      /* bfree.gen when acquired */
	/* A worker's task whose last copy to the GPU may still run; it ends
	 * once that copy has (see settle_deferred). */
	struct {
		struct gpufile__request *r;
		int64_t off;
		size_t len;
		ssize_t n;
		unsigned buf;
		int active;
		/* A pooled copy of the task that failed, found while it was
		 * deferred (wait_buffer). */
		CUresult rc;
	} deferred;
	/* The deferred task once its copy finished, until staged_settle
	 * hands it to the pool (which ends it). */
	struct gpufile__task_result settled;
	int has_settled;
#ifdef GPUFILE_HAVE_LIBURING
	struct io_uring ring; /* cold reads, one per buffer in flight */
	int ring_ok;
	int ring_broken; /* a submit failed: close the ring after this task */
#endif
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t freed;
	struct stager *free_list;
	unsigned count; /* stagers in existence */
	/* Threads waiting in stager_acquire: while there are any, a worker
	 * gives its set back after each task (staged_settle) instead of
	 * keeping it for the next one, so that a caller running its read
	 * itself (gpufile__staged_here_ops) is not kept waiting for as long
	 * as the queue stays busy. Written under lock; read without it. */
	_Atomic unsigned waiting;
} stagers = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .freed = PTHREAD_COND_INITIALIZER,
};

/* gpufile_bounce_buffer_free(): each call starts a generation; stagers
 * acquired before it and still in use are freed when they come back, and
 * the call waits for them. Fields after serial are guarded by stagers.lock;
 * serial (taken before stagers.lock) lets one call run at a time. */
static struct {
	pthread_mutex_t serial;
	pthread_cond_t back;
	unsigned gen;
	unsigned old_out; /* stagers of an older generation still in use */
	size_t old_bytes; /* pinned bytes of those that have come back */
} bfree = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};

static size_t stager_bytes(const struct stager *s)
{
	return (size_t)s->nbufs * GPUFILE__BOUNCE_STRIDE(s->buf_size);
}

/*
 * Pooled copies. A copy engine pays about 3.4 us for each copy call it is
 * given (bench/README.md, "--batch-copies"): 4 MiB copies one to a call
 * reach 0.96x of one large copy, the same copies eight to a
 * cuMemcpyBatchAsync 0.995x. So the warm reader does not queue a chunk's
 * copy on its own stream: it posts it to its context's queue, and whoever
 * posts the k-th waiting copy sends them all in one call on the queue's
 * stream, recording each buffer's event after it. Whoever must wait for
 * a buffer whose copy still waits in the queue sends the queue first, so
 * no copy is waited for before the GPU has it. A context's pooled copies
 * run on one stream in the order they were posted: the event of a task's
 * last copy still says that its earlier ones have ended.
 *
 * k = bounce buffers of all workers / 4, at most gpufile__pool_copies:
 * 8 at the defaults (16 workers x 2), so that most buffers are being
 * filled while a quarter wait or copy. Below 2, without
 * cuMemcpyBatchAsync, or where no queue can be had, each copy goes on the
 * stager's own stream.
 */
#define POOL_QUEUES 8 /* contexts with a queue at once */
#define POOL_MAX    64

unsigned gpufile__pool_copies = 8;

struct pooled_copy {
	CUdeviceptr dst;
	const char *src;
	size_t n;
	struct stager *owner;
	unsigned buf;
};

struct copy_queue {
	CUcontext ctx; /* NULL: slot unused */
	unsigned long long id;
	CUstream stream;
	struct pooled_copy q[POOL_MAX];
	unsigned n;
};

static struct {
	pthread_mutex_t lock;
	struct copy_queue queue[POOL_QUEUES];
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The copies per call for cfg's workers (see above). */
static unsigned pool_k(const struct gpufile__settings *cfg)
{
	size_t k = (size_t)cfg->nthreads * cfg->bounce_buffers / 4;

	if (k > gpufile__pool_copies)
		k = gpufile__pool_copies;
	return k > POOL_MAX ? POOL_MAX : (unsigned)k;
}

/* Under pool.lock: sends every waiting copy of cq in one call on its
 * stream, then records each buffer's event, in cq's context (made current
 * for it where the caller's is another: a worker settling its last task
 * before it moves to another device). When the call fails, nothing it may
 * have begun outlives it (the stream is waited for) and each copy's owner
 * gets the error; when only a record fails, the stream is waited for too,
 * and the copies count as done. */
static void pool_send(const struct gpufile__cuda *t, struct copy_queue *cq)
{
	CUdeviceptr dsts[POOL_MAX], srcs[POOL_MAX];
	size_t sizes[POOL_MAX], attr_idx = 0;
	struct CUmemcpyAttributes_st attr;
	CUresult rc, rec = CUDA_SUCCESS;
	CUcontext caller = NULL;

	if (!cq->n)
		return;
	if (t->cuCtxGetCurrent(&caller) != CUDA_SUCCESS)
		caller = NULL;
	if (caller != cq->ctx &&
	    (rc = t->cuCtxSetCurrent(cq->ctx)) != CUDA_SUCCESS) {
		caller = cq->ctx; /* nothing to put back */
	} else if (cq->n == 1) {
		rc = t->cuMemcpyHtoDAsync(cq->q[0].dst, cq->q[0].src,
		                          cq->q[0].n, cq->stream);
	} else {
		memset(&attr, 0, sizeof(attr));
		attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
		for (unsigned i = 0; i < cq->n; i++) {
			dsts[i] = cq->q[i].dst;
			srcs[i] = (CUdeviceptr)(uintptr_t)cq->q[i].src;
			sizes[i] = cq->q[i].n;
		}
		rc = t->cuMemcpyBatchAsync(dsts, srcs, sizes, cq->n, &attr,
		                           &attr_idx, 1, cq->stream);
	}
	for (unsigned i = 0;
	     i < cq->n && rc == CUDA_SUCCESS && rec == CUDA_SUCCESS; i++) {
		const struct pooled_copy *p = &cq->q[i];

		rec = t->cuEventRecord(p->owner->event[p->buf], cq->stream);
	}
	if (rc != CUDA_SUCCESS || rec != CUDA_SUCCESS)
		t->cuStreamSynchronize(cq->stream);
	if (caller != cq->ctx)
		gpufile__ctx_restore(t, caller);
	for (unsigned i = 0; i < cq->n; i++) {
		const struct pooled_copy *p = &cq->q[i];

		p->owner->queued[p->buf] = 0;
		p->owner->sent_rc[p->buf] = rc;
	}
	cq->n = 0;
}

/* Under pool.lock: removes what queue cq holds, without a CUDA call (its
 * context has ended), each waiting copy's owner getting that error. */
static void pool_drop(struct copy_queue *cq)
{
	for (unsigned i = 0; i < cq->n; i++) {
		const struct pooled_copy *p = &cq->q[i];

		p->owner->queued[p->buf] = 0;
		p->owner->sent_rc[p->buf] = CUDA_ERROR_CONTEXT_IS_DESTROYED;
	}
	memset(cq, 0, sizeof(*cq));
}

/* The queue of s's context (current), made on first use; NULL where s
 * copies on its own stream (see above). */
static struct copy_queue *pool_queue(const struct gpufile__cuda *t,
                                     const struct stager *s, unsigned k)
{
	struct copy_queue *cq = NULL, *slot = NULL;

	if (k < 2 || !t->cuMemcpyBatchAsync)
		return NULL;
	pthread_mutex_lock(&pool.lock);
	for (unsigned i = 0; i < POOL_QUEUES && !cq; i++) {
		struct copy_queue *q = &pool.queue[i];

		if (q->ctx == s->ctx && q->id == s->ctx_id)
			cq = q;
		else if (!q->ctx && !slot)
			slot = q;
	}
	/* All taken: one whose context has ended (its stream with it). */
	for (unsigned i = 0; i < POOL_QUEUES && !cq && !slot; i++)
		if (!gpufile__ctx_same(t, pool.queue[i].ctx,
		                       pool.queue[i].id)) {
			slot = &pool.queue[i];
			pool_drop(slot);
		}
	if (!cq && slot &&
	    t->cuStreamCreate(&slot->stream, CU_STREAM_NON_BLOCKING) ==
	        CUDA_SUCCESS) {
		slot->ctx = s->ctx;
		slot->id = s->ctx_id;
		cq = slot;
	}
	pthread_mutex_unlock(&pool.lock);
	return cq;
}

/* Posts the copy of n bytes of buffer b (at src) to dst into queue cq,
 * and sends the queue once k copies wait there. 0, or -1 where cq no
 * longer is s's context's (it ended and the slot was taken). */
static int pool_post(const struct gpufile__cuda *t, struct copy_queue *cq,
                     struct stager *s, unsigned b, CUdeviceptr dst,
                     const char *src, size_t n, unsigned k)
{
	pthread_mutex_lock(&pool.lock);
	if (cq->ctx != s->ctx || cq->id != s->ctx_id) {
		pthread_mutex_unlock(&pool.lock);
		return -1;
	}
	cq->q[cq->n++] = (struct pooled_copy){dst, src, n, s, b};
	s->queued[b] = 1;
	s->sent_rc[b] = CUDA_SUCCESS;
	if (cq->n >= k || cq->n == POOL_MAX)
		pool_send(t, cq);
	pthread_mutex_unlock(&pool.lock);
	s->pool_q = cq;
	s->in_pool[b] = 1;
	s->pending[b] = 1;
	return 0;
}

/* Makes sure buffer b's last copy, if pooled, has been given to the GPU
 * (its queue sent where it still waits there); what the send returned. */
static CUresult pool_sent(const struct gpufile__cuda *t, struct stager *s,
                          unsigned b)
{
	CUresult rc;

	if (!s->in_pool[b])
		return CUDA_SUCCESS;
	s->in_pool[b] = 0;
	pthread_mutex_lock(&pool.lock);
	if (s->queued[b])
		pool_send(t, s->pool_q);
	rc = s->sent_rc[b];
	pthread_mutex_unlock(&pool.lock);
	return rc;
}

/* Takes s's copies out of every queue unsent, without a CUDA call: their
 * context or their buffers have ended, or s is being freed. */
static void pool_forget(struct stager *s)
{
	pthread_mutex_lock(&pool.lock);
	for (unsigned i = 0; i < POOL_QUEUES; i++) {
		struct copy_queue *cq = &pool.queue[i];
		unsigned kept = 0;

		for (unsigned j = 0; j < cq->n; j++)
			if (cq->q[j].owner != s)
				cq->q[kept++] = cq->q[j];
		cq->n = kept;
	}
	memset(s->queued, 0, sizeof(s->queued));
	pthread_mutex_unlock(&pool.lock);
	memset(s->in_pool, 0, sizeof(s->in_pool));
}

/* gpufile_release() with no stager left: the queues' streams go. */
static void pool_release(const struct gpufile__cuda *t)
{
	CUcontext caller = NULL;
	int restore = t->cuCtxGetCurrent(&caller) == CUDA_SUCCESS;

	pthread_mutex_lock(&pool.lock);
	for (unsigned i = 0; i < POOL_QUEUES; i++) {
		struct copy_queue *cq = &pool.queue[i];

		if (cq->ctx && gpufile__ctx_same(t, cq->ctx, cq->id) &&
		    t->cuCtxSetCurrent(cq->ctx) == CUDA_SUCCESS)
			t->cuStreamDestroy(cq->stream);
		memset(cq, 0, sizeof(*cq));
	}
	pthread_mutex_unlock(&pool.lock);
	if (restore)
		gpufile__ctx_restore(t, caller);
}

static void settle_deferred(const struct gpufile__cuda *t, struct stager *s);

/* Destroys a stream and its events in their context, where it has not
 * ended (and taken them with it). */
static void lane_destroy(const struct gpufile__cuda *t, struct lane *l,
                         unsigned nbufs)
{
	if (gpufile__ctx_same(t, l->ctx, l->id)) {
		t->cuCtxSetCurrent(l->ctx);
		for (unsigned i = 0; i < nbufs; i++)
			if (l->event[i])
				t->cuEventDestroy(l->event[i]);
		if (l->stream)
			t->cuStreamDestroy(l->stream);
	}
	memset(l, 0, sizeof(*l));
}

/* s's current stream and events (of s->ctx) as a lane. */
static struct lane current_lane(const struct stager *s)
{
	struct lane l = {.ctx = s->ctx, .id = s->ctx_id, .stream = s->stream};

	memcpy(l.event, s->event, sizeof(l.event));
	return l;
}

/* Moves the deferred task, if any, into s->settled (msg empty) and
 * returns it, with has_settled set; NULL when there is none. */
static struct gpufile__task_result *take_deferred(struct stager *s)
{
	struct gpufile__task_result *done = &s->settled;

	if (!s->deferred.active)
		return NULL;
	assert(!s->has_settled);
	s->deferred.active = 0;
	done->r = s->deferred.r;
	done->off = s->deferred.off;
	done->len = s->deferred.len;
	done->n = s->deferred.n;
	done->msg[0] = '\0';
	s->has_settled = 1;
	return done;
}

/* Ends the deferred task, if any, with an error and no CUDA call: the
 * context its last copy ran in (or copied from) has ended, so its bytes
 * cannot be known to have arrived. */
static void lose_deferred(struct stager *s, const char *what)
{
	struct gpufile__task_result *done = take_deferred(s);

	if (!done)
		return;
	done->n = gpufile__fail(GPUFILE_ECUDA,
	                        "copying %s to the GPU: %s ended while the "
	                        "copy ran",
	                        done->r->h->path, what);
	snprintf(done->msg, sizeof(done->msg), "%s", gpufile_errmsg());
}

/* Forgets, without a CUDA call on any of it, what s kept in contexts that
 * have ended (cuda_shim.h, gpufile__ctx_same): cached lanes, the current
 * stream and events, the pinned buffers (then buf[] is NULL). */
static void forget_dead(const struct gpufile__cuda *t, struct stager *s)
{
	for (unsigned k = 0; k < MAX_LANES; k++)
		if (s->lanes[k].ctx &&
		    !gpufile__ctx_same(t, s->lanes[k].ctx, s->lanes[k].id))
			memset(&s->lanes[k], 0, sizeof(s->lanes[k]));
	if (s->ctx && !gpufile__ctx_same(t, s->ctx, s->ctx_id)) {
		pool_forget(s);
		lose_deferred(s, "the destination's CUDA context");
		s->ctx = NULL;
		s->stream = NULL;
		memset(s->event, 0, sizeof(s->event));
		memset(s->pending, 0, sizeof(s->pending));
	}
	if (s->buf_ctx && !gpufile__ctx_same(t, s->buf_ctx, s->buf_id)) {
		pool_forget(s);
		lose_deferred(s, "the CUDA context of the bounce buffers");
		gpufile__pinned_free(t, &s->mem, 0);
		memset(s->buf, 0, sizeof(s->buf));
		memset(s->pending, 0, sizeof(s->pending));
		s->buf_ctx = NULL;
	}
}

static void stager_free_buffers(const struct gpufile__cuda *t, struct stager *s)
{
	/* The streams and events are destroyed in their own contexts; the
	 * calling thread's current context is put back after, or a
	 * gpufile_release() would move the caller to another device (the
	 * CUDA runtime takes the current context as its current device). */
	CUcontext caller = NULL;
	int restore = t->cuCtxGetCurrent(&caller) == CUDA_SUCCESS;

	forget_dead(t, s);
	pool_forget(s); /* none waits by now; be sure, s may be freed */
	for (unsigned k = 0; k < MAX_LANES; k++)
		if (s->lanes[k].ctx)
			lane_destroy(t, &s->lanes[k], s->nbufs);
	if (s->ctx) {
		struct lane cur = current_lane(s);

		lane_destroy(t, &cur, s->nbufs);
	}
	memset(s->event, 0, sizeof(s->event));
	memset(s->pending, 0, sizeof(s->pending));
	s->stream = NULL;
	if (s->buf_ctx)
		t->cuCtxSetCurrent(s->buf_ctx);
	gpufile__pinned_free(t, &s->mem, 1);
	memset(s->buf, 0, sizeof(s->buf));
	s->buf_ctx = NULL;
#ifdef GPUFILE_HAVE_LIBURING
	if (s->ring_ok)
		io_uring_queue_exit(&s->ring);
	s->ring_ok = 0;
	s->ring_broken = 0;
#endif
	s->ctx = NULL;
	s->nbufs = 0;
	s->buf_size = 0;
	s->next_buf = 0;
	if (restore)
		gpufile__ctx_restore(t, caller);
}

/* Gives s a stream and its events in the current context, s->ctx.
 * Returns 0, or an error with s's buffers freed. */
static int lane_make(const struct gpufile__cuda *t, struct stager *s, char *msg,
                     size_t msg_len)
{
	CUresult rc = t->cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING);

	if (rc != CUDA_SUCCESS) {
		s->stream = NULL;
		stager_free_buffers(t, s);
		return gpufile__cuda_fail(rc, msg, msg_len, "cuStreamCreate");
	}
	for (unsigned i = 0; i < s->nbufs; i++) {
		rc = t->cuEventCreate(&s->event[i], CU_EVENT_DISABLE_TIMING);
		if (rc != CUDA_SUCCESS) {
			s->event[i] = NULL;
			stager_free_buffers(t, s);
			return gpufile__cuda_fail(rc, msg, msg_len,
			                          "cuEventCreate");
		}
	}
	return 0;
}

/* Makes ctx's (whose id is id) stream and events the current ones of s
 * (whose copies have all finished), keeping the pinned buffers: the
 * current lane, if any, goes into the cache, and ctx's comes out of it or
 * is made. */
static int stager_switch(const struct gpufile__cuda *t, struct stager *s,
                         CUcontext ctx, unsigned long long id, char *msg,
                         size_t msg_len)
{
	struct lane cur = current_lane(s), *slot = NULL;
	CUresult rc;

	cur.last = ++s->lane_clock;
	for (unsigned k = 0; k < MAX_LANES && !slot && s->ctx; k++)
		if (!s->lanes[k].ctx)
			slot = &s->lanes[k];
	if (!slot && s->ctx) { /* more devices than lanes: the least
		                * recently used goes (always the same slot
		                * would drop the device just left, and keep
		                * ones long unused) */
		slot = &s->lanes[0];
		for (unsigned k = 1; k < MAX_LANES; k++)
			if (s->lanes[k].last < slot->last)
				slot = &s->lanes[k];
		lane_destroy(t, slot, s->nbufs);
	}
	if (slot)
		*slot = cur;
	memset(s->event, 0, sizeof(s->event));
	s->stream = NULL;
	s->ctx = ctx;
	s->ctx_id = id;
	for (unsigned k = 0; k < MAX_LANES; k++) {
		if (s->lanes[k].ctx == ctx && s->lanes[k].id == id) {
			s->stream = s->lanes[k].stream;
			memcpy(s->event, s->lanes[k].event, sizeof(s->event));
			memset(&s->lanes[k], 0, sizeof(s->lanes[k]));
			break;
		}
	}
	rc = t->cuCtxSetCurrent(ctx);
	if (rc != CUDA_SUCCESS) {
		/* s->ctx is ctx already, maybe without a stream or events:
		 * kept so, the next task on ctx would use none. */
		stager_free_buffers(t, s);
		return gpufile__cuda_fail(rc, msg, msg_len, "cuCtxSetCurrent");
	}
	return s->stream ? 0 : lane_make(t, s, msg, msg_len);
}

/* Whether s's buffers have cfg's shape (and were not lost). */
static int bufs_fit(const struct stager *s, const struct gpufile__settings *cfg)
{
	return s->nbufs && s->buf[0] && s->nbufs == cfg->bounce_buffers &&
	       s->buf_size == cfg->bounce_buffer_size;
}

/* Gives s buffers, events and a stream in context ctx (whose id is id,
 * gpufile__ctx_id), matching the settings. Reuses what s has when nothing
 * changed, and its pinned buffers when only the context did. device:
 * ctx's ordinal, whose primary context the buffers are allocated in (-1:
 * in ctx). */
static int stager_prepare(const struct gpufile__cuda *t, struct stager *s,
                          CUcontext ctx, unsigned long long id, int device,
                          const struct gpufile__settings *cfg, char *msg,
                          size_t msg_len)
{
	CUcontext buf_ctx = ctx;
	size_t stride = GPUFILE__BOUNCE_STRIDE(cfg->bounce_buffer_size);
	const char *call = NULL;
	CUresult rc;
	int same_bufs, err;

	/* The task before was in ctx, which lives (its id is the request's):
	 * then no driver call, unless the buffers are in another context. */
	if (s->ctx == ctx && s->ctx_id == id && bufs_fit(s, cfg) &&
	    ((s->buf_ctx == ctx && s->buf_id == id) ||
	     gpufile__ctx_same(t, s->buf_ctx, s->buf_id)))
		return 0;
	forget_dead(t, s);
	same_bufs = bufs_fit(s, cfg);
	if (s->ctx == ctx && s->ctx_id == id && same_bufs)
		return 0;
	if (s->stream) {
		t->cuStreamSynchronize(s->stream);
		settle_deferred(t, s);
	}
	if (same_bufs)
		return stager_switch(t, s, ctx, id, msg, msg_len);
	stager_free_buffers(t, s);
	/* In the device's primary context, which gpufile holds for the
	 * process's life, not in ctx: a context the program creates and
	 * later destroys takes its pinned memory with it (reads into the
	 * other contexts then failed with EFAULT in test_gpu_contexts). */
	if (device >= 0 &&
	    (err = gpufile__primary_context(device, (void **)&buf_ctx))) {
		snprintf(msg, msg_len, "%s", gpufile_errmsg());
		return err;
	}
	rc = t->cuCtxSetCurrent(buf_ctx);
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(rc, msg, msg_len, "cuCtxSetCurrent");
	s->buf_ctx = buf_ctx;
	gpufile__ctx_id(t, buf_ctx, &s->buf_id);
	/* One region for all of a stager's buffers: one registration. */
	rc = gpufile__pinned_alloc(t, stride * cfg->bounce_buffers, &s->mem,
	                           &call);
	if (rc != CUDA_SUCCESS) {
		stager_free_buffers(t, s);
		return gpufile__cuda_fail(rc, msg, msg_len,
		                          "%s of %u bounce buffers of %zu "
		                          "bytes",
		                          call, cfg->bounce_buffers, stride);
	}
	s->nbufs = cfg->bounce_buffers;
	for (unsigned i = 0; i < s->nbufs; i++)
		s->buf[i] = (char *)s->mem.p + (size_t)i * stride;
	rc = t->cuCtxSetCurrent(ctx);
	if (rc != CUDA_SUCCESS) {
		stager_free_buffers(t, s);
		return gpufile__cuda_fail(rc, msg, msg_len, "cuCtxSetCurrent");
	}
	s->ctx = ctx;
	s->ctx_id = id;
	err = lane_make(t, s, msg, msg_len);
	if (err)
		return err;
	s->buf_size = cfg->bounce_buffer_size;
#ifdef GPUFILE_HAVE_LIBURING
	/* Without a ring (old kernel, seccomp) cold reads use the
	 * synchronous loop: one request in flight per worker. */
	s->ring_ok =
	    gpufile__uring.queue_init(cfg->bounce_buffers, &s->ring, 0) == 0;
#endif
	return 0;
}

/* Takes an idle stager, or makes one while fewer than limit exist. Idle
 * stagers beyond limit (nthreads was lowered) are freed on the way. */
static struct stager *stager_acquire(const struct gpufile__cuda *t,
                                     unsigned limit)
{
	struct stager *s, *surplus = NULL;

	pthread_mutex_lock(&stagers.lock);
	while (stagers.count > limit && stagers.free_list) {
		s = stagers.free_list;
		stagers.free_list = s->next;
		s->next = surplus;
		surplus = s;
		stagers.count--;
	}
	while (!stagers.free_list && stagers.count >= limit) {
		atomic_fetch_add(&stagers.waiting, 1);
		pthread_cond_wait(&stagers.freed, &stagers.lock);
		atomic_fetch_sub(&stagers.waiting, 1);
	}
	s = stagers.free_list;
	if (s) {
		stagers.free_list = s->next;
	} else {
		s = calloc(1, sizeof(*s));
		if (s)
			stagers.count++;
	}
	if (s)
		s->gen = bfree.gen;
	pthread_mutex_unlock(&stagers.lock);
	while (surplus) {
		struct stager *x = surplus;
		surplus = x->next;
		stager_free_buffers(t, x);
		free(x);
	}
	return s;
}

/* Keeps s for reuse, unless there are more stagers than nthreads or its
 * buffers no longer match the settings (the settings changed): then its
 * pinned memory goes, so that what is held stays within
 * gpufile_pinned_bytes_max(). */
static void stager_return(const struct gpufile__cuda *t, struct stager *s)
{
	struct gpufile__settings cfg;
	int keep = gpufile__settings(&cfg) == 0;

	pthread_mutex_lock(&stagers.lock);
	if (keep && (stagers.count > cfg.nthreads ||
	             (s->nbufs && (s->nbufs != cfg.bounce_buffers ||
	                           s->buf_size != cfg.bounce_buffer_size))))
		keep = 0;
	if (s->gen != bfree.gen) { /* a bounce_buffer_free() waits for it */
		keep = 0;
		bfree.old_out--;
		bfree.old_bytes += stager_bytes(s);
		pthread_cond_broadcast(&bfree.back);
	}
	if (keep) {
		s->next = stagers.free_list;
		stagers.free_list = s;
	} else {
		stagers.count--;
	}
	pthread_cond_signal(&stagers.freed);
	pthread_mutex_unlock(&stagers.lock);
	if (!keep) {
		if (t)
			stager_free_buffers(t, s);
		free(s);
	}
}

/* Waits for the copy that last used buffer i. A pooled copy that could
 * not be sent fails the task it belongs to: the deferred one while there
 * is one (every copy in the pool is then its), else this one. */
static int wait_buffer(const struct gpufile__cuda *t, struct stager *s,
                       unsigned i, char *msg, size_t msg_len)
{
	CUresult rc;

	if (!s->pending[i])
		return 0;
	s->pending[i] = 0;
	rc = pool_sent(t, s, i);
	if (rc != CUDA_SUCCESS) {
		if (!s->deferred.active)
			return gpufile__cuda_fail(
			    rc, msg, msg_len,
			    "copying a chunk to the GPU (pooled with others)");
		if (s->deferred.rc == CUDA_SUCCESS)
			s->deferred.rc = rc;
		return 0;
	}
	rc = t->cuEventSynchronize(s->event[i]);
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(
		    rc, msg, msg_len,
		    "waiting for a copy between host and GPU");
	return 0;
}

/* Waits for the deferred task's last copy and keeps the task's outcome
 * for staged_settle. */
static void settle_deferred(const struct gpufile__cuda *t, struct stager *s)
{
	struct gpufile__task_result *done = take_deferred(s);
	CUresult rc = s->deferred.rc;

	if (!done)
		return;
	/* Every pooled copy still unsent is the deferred task's. */
	for (unsigned i = 0; i < s->nbufs; i++) {
		CUresult sent = pool_sent(t, s, i);

		if (rc == CUDA_SUCCESS)
			rc = sent;
	}
	if (rc != CUDA_SUCCESS)
		done->n = gpufile__cuda_fail(rc, done->msg, sizeof(done->msg),
		                             "copying %s to the GPU (pooled "
		                             "with other copies)",
		                             done->r->h->path);
	/* Each buffer's last copy is the task's or ended before it: one
	 * event would do where all ran on one stream, but a task may have
	 * moved from the pool to its own stream. */
	for (unsigned i = 0; i < s->nbufs; i++) {
		CUresult ended = s->pending[i]
		                     ? t->cuEventSynchronize(s->event[i])
		                     : CUDA_SUCCESS;

		s->pending[i] = 0;
		if (ended != CUDA_SUCCESS && done->n >= 0)
			done->n = gpufile__cuda_fail(
			    ended, done->msg, sizeof(done->msg),
			    "finishing copies of %s to the GPU",
			    done->r->h->path);
	}
}

/* After an error: no copy of ours may still touch the caller's buffer. */
static void drain(const struct gpufile__cuda *t, struct stager *s)
{
	settle_deferred(t, s); /* first: the pool's copies may be its */
	for (unsigned i = 0; i < s->nbufs; i++)
		if (s->in_pool[i] && pool_sent(t, s, i) == CUDA_SUCCESS)
			t->cuEventSynchronize(s->event[i]);
	t->cuStreamSynchronize(s->stream);
	for (unsigned i = 0; i < s->nbufs; i++)
		s->pending[i] = 0;
}

static int wait_all(const struct gpufile__cuda *t, struct stager *s, char *msg,
                    size_t msg_len)
{
	int err = 0;

	settle_deferred(t, s);
	for (unsigned i = 0; i < s->nbufs && !err; i++)
		err = wait_buffer(t, s, i, msg, msg_len);
	if (err)
		drain(t, s);
	return err;
}

static int64_t chunk_end(int64_t pos, int64_t end, size_t chunk)
{
	const int64_t start = pos - (int64_t)((uint64_t)pos % chunk);
	/* Compared before adding: start + chunk may overflow near INT64_MAX. */
	int64_t next =
	    end - start > (int64_t)chunk ? start + (int64_t)chunk : end;

	return next < end ? next : end;
}

/* Queues the copy of n bytes at src (bounce buffer b, file offset pos) to
 * device address dst, and records b's event after it, so that b is reused
 * only once the copy ended. Shared by the warm and the cold reader. */
static int copy_to_device(const struct gpufile__cuda *t, struct stager *s,
                          struct gpufile__request *r, unsigned b,
                          CUdeviceptr dst, const char *src, size_t n,
                          int64_t pos, char *msg, size_t msg_len)
{
	CUresult rc = t->cuMemcpyHtoDAsync(dst, src, n, s->stream);

	if (rc == CUDA_SUCCESS)
		rc = t->cuEventRecord(s->event[b], s->stream);
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(rc, msg, msg_len,
		                          "copying %zu bytes of %s at offset "
		                          "%lld to device memory %p",
		                          n, r->h->path, (long long)pos,
		                          (void *)(uintptr_t)dst);
	s->pending[b] = 1;
	return 0;
}

/* Copies n bytes at src (in a bounce buffer; file offset pos) to device
 * address dst and waits for the copy: the last chunk of a task that is
 * not deferred, whose end the task waits for at once anyway. On s's own
 * stream, not the pooled copies' queue (which would add a lock, a look at
 * the current context and an event per copy), and no event: the buffer
 * is free again when this returns. A lone 4 KiB device read is then
 * one copy and one synchronisation. */
static int copy_to_device_now(const struct gpufile__cuda *t, struct stager *s,
                              struct gpufile__request *r, CUdeviceptr dst,
                              const char *src, size_t n, int64_t pos, char *msg,
                              size_t msg_len)
{
	CUresult rc = t->cuMemcpyHtoDAsync(dst, src, n, s->stream);

	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(rc, msg, msg_len,
		                          "copying %zu bytes of %s at offset "
		                          "%lld to device memory %p",
		                          n, r->h->path, (long long)pos,
		                          (void *)(uintptr_t)dst);
	rc = t->cuStreamSynchronize(s->stream);
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(
		    rc, msg, msg_len,
		    "waiting for the copy of %zu bytes of "
		    "%s at offset %lld to device memory %p",
		    n, r->h->path, (long long)pos, (void *)(uintptr_t)dst);
	return 0;
}

#ifdef GPUFILE_HAVE_LIBURING
/*
 * Cold ranges: every buffer of the stager has an O_DIRECT read in flight
 * through io_uring, so nthreads workers keep nthreads * bounce_buffers
 * reads queued at the device. Chunks are consumed in file order; a buffer
 * gets its next read once the copy of its previous chunk to the GPU ended.
 */
struct cold_chunk {
	int64_t pos, end,
	    ws;    /* data range, and where the aligned read starts */
	size_t wl; /* aligned read length */
	int done;  /* its completion was reaped; res holds the result */
	int res;
};

/* One cold range being read: chunk b lives in bounce buffer b. */
struct cold_read {
	struct cold_chunk chunk[MAX_BUFFERS];
	int64_t next, end; /* next chunk to submit, end of the range */
	/* Reads submitted whose completion is not reaped yet: exactly the
	 * completions the ring still owes us. A completion reaped while
	 * waiting for another chunk no longer counts, whether or not its
	 * chunk was consumed (issue 10 item 1: counting it made the final
	 * drain wait for a completion that never came). */
	unsigned unreaped;
};

/* Submits the read of the next chunk of cr into buffer b. */
static int uring_submit(struct stager *s, struct gpufile__request *r,
                        struct cold_read *cr, unsigned b)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);
	struct cold_chunk *c = &cr->chunk[b];

	if (!sqe)
		return -EBUSY;
	c->pos = cr->next;
	c->end = chunk_end(c->pos, cr->end, s->buf_size);
	c->ws = c->pos & ~(int64_t)(GPUFILE_ALIGN - 1);
	c->wl = (size_t)((((uint64_t)c->end + GPUFILE_ALIGN - 1) &
	                  ~(uint64_t)(GPUFILE_ALIGN - 1)) -
	                 (uint64_t)c->ws);
	/* The window fits its buffer whatever bounce_buffer_size is. */
	assert(c->wl <= GPUFILE__BOUNCE_STRIDE(s->buf_size));
	c->done = 0;
	io_uring_prep_read(sqe, gpufile__direct_fd(r->h), s->buf[b],
	                   (unsigned)c->wl, (uint64_t)c->ws);
	io_uring_sqe_set_data64(sqe, b);
	for (int again = 0;; again++) {
		int rc = gpufile__uring.submit(&s->ring);
		if (rc == 1) {
			cr->unreaped++;
			cr->next = c->end;
			return 0;
		}
		if ((rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) &&
		    again < 1000)
			continue;
		/* The prepared entry is still in the ring and would go out
		 * with a later request's: this ring is not used again. */
		s->ring_broken = 1;
		return rc < 0 ? rc : -EIO;
	}
}

/* Reaps one completion, whichever chunk it belongs to. */
static int uring_reap(struct stager *s, struct cold_read *cr)
{
	for (;;) {
		struct io_uring_cqe *cqe;
		int rc = gpufile__uring.wait_cqe(&s->ring, &cqe);
		if (rc == -EINTR || rc == -EAGAIN)
			continue;
		if (rc < 0)
			return rc;
		unsigned i = (unsigned)io_uring_cqe_get_data64(cqe);
		if (i < MAX_BUFFERS) {
			cr->chunk[i].res = cqe->res;
			cr->chunk[i].done = 1;
		}
		io_uring_cqe_seen(&s->ring, cqe);
		cr->unreaped--;
		return 0;
	}
}

/* Waits until chunk b's read completed, recording others on the way. */
static int uring_wait(struct stager *s, struct cold_read *cr, unsigned b)
{
	while (!cr->chunk[b].done) {
		int rc = uring_reap(s, cr);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Reads still in flight target our buffers: let them end. When the ring
 * fails while some are in flight, it is not used again. */
static void uring_drain(struct stager *s, struct cold_read *cr)
{
	while (cr->unreaped > 0) {
		if (uring_reap(s, cr) < 0) {
			s->ring_broken = 1;
			break;
		}
	}
	if (s->ring_broken && cr->unreaped == 0) {
		io_uring_queue_exit(&s->ring);
		s->ring_ok = 0;
		s->ring_broken = 0;
	}
}

/* The data bytes chunk b's completed read gave (at most the chunk's
 * length; fewer only at end-of-file), finishing transient failures and
 * short counts that are not end-of-file synchronously; or -errno
 * (-EINVAL: O_DIRECT refused, recorded on the handle). */
static ssize_t cold_chunk_bytes(struct stager *s, struct gpufile__request *r,
                                const struct cold_chunk *c, unsigned b)
{
	const size_t skip = (size_t)(c->pos - c->ws);
	const size_t want = (size_t)(c->end - c->pos);
	ssize_t got = c->res;
	size_t valid;

	if (got == -EINTR || got == -EAGAIN)
		/* A transient failure of the whole read: redo it
		 * synchronously (that loop retries both). */
		got = gpufile__direct_pread(gpufile__direct_fd(r->h), s->buf[b],
		                            c->wl, c->ws);
	if (got == -EINVAL) {
		/* O_DIRECT refused at I/O time: the caller continues from
		 * here through the page cache. */
		gpufile__refuse_direct(r->h, c->pos, 0);
		return -EINVAL;
	}
	if (got < 0)
		return got;
	if ((size_t)got < c->wl && got % GPUFILE_ALIGN == 0 && got > 0) {
		/* A short read that is not end-of-file: finish it. */
		ssize_t more = gpufile__direct_pread(
		    gpufile__direct_fd(r->h), s->buf[b] + got,
		    c->wl - (size_t)got, c->ws + got);
		if (more < 0)
			return more;
		got += more;
	}
	valid = (size_t)got > skip ? (size_t)got - skip : 0;
	if (valid > want)
		valid = want;
	if (valid < want &&
	    gpufile__before_eof(r->h, c->pos + (int64_t)valid)) {
		/* A short count that is not end-of-file (some file systems
		 * return any count): finish through the page cache. */
		ssize_t more =
		    gpufile__pread_full(r->h->fd, s->buf[b] + skip + valid,
		                        want - valid, c->pos + (int64_t)valid);
		if (more < 0)
			return more;
		valid += (size_t)more;
	}
	return (ssize_t)valid;
}

static ssize_t staged_read_cold(const struct gpufile__cuda *t, struct stager *s,
                                struct gpufile__request *r, CUdeviceptr dst,
                                size_t len, int64_t off, char *msg,
                                size_t msg_len, int64_t *stopped_at)
{
	struct cold_read cr;
	unsigned k_next = 0, k;
	int64_t done = off;
	int err;
	CUresult rc;

	memset(&cr, 0, sizeof(cr));
	cr.next = off;
	cr.end = off + (int64_t)len;
	/* The reads below land in every buffer: no earlier copy may still
	 * be reading one. */
	err = wait_all(t, s, msg, msg_len);
	if (err)
		return err;
	for (; k_next < s->nbufs && cr.next < cr.end; k_next++) {
		err = uring_submit(s, r, &cr, k_next);
		if (err)
			goto out;
	}
	for (k = 0; k < k_next; k++) {
		const unsigned b = k % s->nbufs;
		const struct cold_chunk *c = &cr.chunk[b];
		const size_t want = (size_t)(c->end - c->pos);
		ssize_t valid;

		err = uring_wait(s, &cr, b);
		if (err)
			goto out;
		valid = cold_chunk_bytes(s, r, c, b);
		if (valid < 0) {
			err = (int)valid;
			goto out;
		}
		if (valid) {
			err = copy_to_device(
			    t, s, r, b, dst + (CUdeviceptr)(c->pos - off),
			    s->buf[b] + (c->pos - c->ws), (size_t)valid, c->pos,
			    msg, msg_len);
			if (err)
				goto out;
		}
		done = c->pos + valid;
		if ((size_t)valid < want)
			break; /* end of file */
		if (cr.next < cr.end) {
			err = wait_buffer(t, s, b, msg, msg_len);
			if (!err)
				err = uring_submit(s, r, &cr, b);
			if (err)
				goto out;
			k_next++;
		}
	}
out:
	uring_drain(s, &cr);
	rc = t->cuStreamSynchronize(s->stream);
	for (unsigned i = 0; i < s->nbufs; i++)
		s->pending[i] = 0;
	*stopped_at = done;
	if (err)
		return err;
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(rc, msg, msg_len,
		                          "finishing copies of %s to the GPU",
		                          r->h->path);
	return done - off;
}
#endif

/* may_defer: a pool worker leaves the last copy running and returns
 * GPUFILE__TASK_DEFERRED; the copy then overlaps the file read of its next
 * task, which ends this one (settle_deferred) before its own first copy. */
static ssize_t staged_read_warm(const struct gpufile__cuda *t, struct stager *s,
                                struct gpufile__request *r, CUdeviceptr dst,
                                size_t len, int64_t off, char *scratch,
                                char *msg, size_t msg_len, int may_defer)
{
	const int64_t end = off + (int64_t)len;
	const unsigned k = pool_k(&r->cfg);
	struct copy_queue *cq = NULL;
	int cq_asked = 0; /* pool_queue asked (on the first pooled copy) */
	int64_t pos = off;
	unsigned b = 0;
	int err;

	while (pos < end) {
		b = s->next_buf++ % s->nbufs;
		const int64_t cend = chunk_end(pos, end, s->buf_size);
		/* Keep the bounce position congruent with the file offset so
		 * that O_DIRECT reads land in it without a copy. */
		char *bounce = s->buf[b] + ((uint64_t)pos % GPUFILE_ALIGN);
		const size_t want = (size_t)(cend - pos);
		ssize_t n;

		err = wait_buffer(t, s, b, msg, msg_len);
		if (err)
			goto fail;
		n = gpufile__file_read(r->h, r->cfg.direct_io, bounce, want,
		                       pos, scratch, GPUFILE__SCRATCH);
		if (n < 0) {
			err = (int)n;
			goto fail;
		}
		/* The previous task's last copy ran while we read. */
		settle_deferred(t, s);
		if (n > 0 && !may_defer &&
		    (pos + n == end || (size_t)n < want)) {
			err = copy_to_device_now(
			    t, s, r, dst + (CUdeviceptr)(pos - off), bounce,
			    (size_t)n, pos, msg, msg_len);
			if (err)
				goto fail;
			pos += n;
			break; /* the last chunk */
		}
		if (n > 0 && !cq_asked) {
			cq = pool_queue(t, s, k);
			cq_asked = 1;
		}
		if (n > 0 && (!cq || pool_post(t, cq, s, b,
		                               dst + (CUdeviceptr)(pos - off),
		                               bounce, (size_t)n, k))) {
			cq = NULL;
			err = copy_to_device(
			    t, s, r, b, dst + (CUdeviceptr)(pos - off), bounce,
			    (size_t)n, pos, msg, msg_len);
			if (err)
				goto fail;
		}
		pos += n;
		if ((size_t)n < want)
			break; /* end of file */
	}
	if (may_defer && s->pending[b]) {
		s->deferred.r = r;
		s->deferred.off = off;
		s->deferred.len = len;
		s->deferred.n = pos - off;
		s->deferred.buf = b;
		s->deferred.rc = CUDA_SUCCESS;
		s->deferred.active = 1;
		return GPUFILE__TASK_DEFERRED;
	}
	err = wait_all(t, s, msg, msg_len);
	return err ? err : pos - off;
fail:
	drain(t, s);
	return err;
}

static ssize_t staged_read(const struct gpufile__cuda *t, struct stager *s,
                           struct gpufile__request *r, CUdeviceptr dst,
                           size_t len, int64_t off, char *scratch, char *msg,
                           size_t msg_len, int may_defer)
{
#ifdef GPUFILE_HAVE_LIBURING
	struct gpufile *h = r->h;

	if (s->ring_ok &&
	    gpufile__direct_read_wanted(h, r->cfg.direct_io, len, off)) {
		int64_t stopped = off;
		ssize_t n = staged_read_cold(t, s, r, dst, len, off, msg,
		                             msg_len, &stopped);
		if (n != -EINVAL)
			return n;
		/* Continue where O_DIRECT was refused, through the cache. */
		msg[0] = '\0';
		n = staged_read_warm(t, s, r,
		                     dst + (CUdeviceptr)(stopped - off),
		                     len - (size_t)(stopped - off), stopped,
		                     scratch, msg, msg_len, 0);
		return n < 0 ? n : (stopped - off) + n;
	}
#endif
	return staged_read_warm(t, s, r, dst, len, off, scratch, msg, msg_len,
	                        may_defer);
}

/*
 * A device write task is cut into pieces of about a quarter of it, so that
 * the copy of piece k+1 from the GPU runs while piece k is written, and
 * only the first piece's copy waits alone. Cut at bounce_buffer_size, a
 * task of the default size (task_size = bounce_buffer_size = 4 MiB) was
 * one chunk, copied and then written: in each worker the copy and the
 * write took turns. Pieces are multiples of GPUFILE_ALIGN with edges at
 * multiples of their size in the file, so that an O_DIRECT write of one
 * has whole blocks, at least WRITE_PIECE_MIN (a write call's cost stays
 * small beside its bytes) and at most bounce_buffer_size.
 */
#define WRITE_PIECES    4
#define WRITE_PIECE_MIN ((size_t)256 << 10)

static size_t write_piece(size_t buf_size, size_t len)
{
	size_t piece = (len / WRITE_PIECES + GPUFILE_ALIGN - 1) &
	               ~(size_t)(GPUFILE_ALIGN - 1);

	if (piece < WRITE_PIECE_MIN)
		piece = WRITE_PIECE_MIN;
	return piece < buf_size ? piece : buf_size;
}

/* Queues the copy of piece [pos, pend) from the GPU into bounce buffer b,
 * at the buffer's offset congruent with pos (so that the O_DIRECT write
 * of the piece's aligned middle leaves from the bounce buffer itself, not
 * through the scratch copy of an unaligned source), and records b's
 * event after it. */
static int copy_from_device(const struct gpufile__cuda *t, struct stager *s,
                            struct gpufile__request *r, unsigned b,
                            CUdeviceptr src, int64_t pos, int64_t pend,
                            char *msg, size_t msg_len)
{
	char *bounce = s->buf[b] + ((uint64_t)pos % GPUFILE_ALIGN);
	CUresult rc =
	    t->cuMemcpyDtoHAsync(bounce, src, (size_t)(pend - pos), s->stream);

	if (rc == CUDA_SUCCESS)
		rc = t->cuEventRecord(s->event[b], s->stream);
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(
		    rc, msg, msg_len,
		    "copying %lld bytes from device memory %p for %s at "
		    "offset %lld",
		    (long long)(pend - pos), (void *)(uintptr_t)src, r->h->path,
		    (long long)pos);
	s->pending[b] = 1;
	return 0;
}

/* Writes [off, off + len) of the file from device memory at src: up to
 * nbufs pieces are copied from the GPU ahead of the piece being written.
 * A piece is written only once its copy ended without error; on a failure
 * no later piece is written, so the file holds, past the pieces written
 * in order, only what it held before. */
static ssize_t staged_write(const struct gpufile__cuda *t, struct stager *s,
                            struct gpufile__request *r, CUdeviceptr src,
                            size_t len, int64_t off, char *scratch, char *msg,
                            size_t msg_len)
{
	const int64_t end = off + (int64_t)len;
	const size_t piece = write_piece(s->buf_size, len);
	int64_t fetch = off; /* next piece to copy from the GPU */
	int64_t pos = off;   /* next piece to write to the file */
	unsigned k_fetch = 0, k_write = 0;
	int err = wait_all(t, s, msg, msg_len);

	if (err)
		return err;
	assert(piece <= s->buf_size);
	while (pos < end) {
		/* Keep up to nbufs copies from the GPU ahead of the writes. */
		while (fetch < end && k_fetch - k_write < s->nbufs) {
			const int64_t pend = chunk_end(fetch, end, piece);

			err = copy_from_device(t, s, r, k_fetch++ % s->nbufs,
			                       src + (CUdeviceptr)(fetch - off),
			                       fetch, pend, msg, msg_len);
			if (err)
				goto fail;
			fetch = pend;
		}
		{
			const unsigned b = k_write++ % s->nbufs;
			const int64_t pend = chunk_end(pos, end, piece);
			ssize_t n;

			err = wait_buffer(t, s, b, msg, msg_len);
			if (err)
				goto fail;
			n = gpufile__file_write(
			    r->h, r->cfg.direct_io,
			    s->buf[b] + ((uint64_t)pos % GPUFILE_ALIGN),
			    (size_t)(pend - pos), pos, scratch,
			    GPUFILE__SCRATCH);
			if (n < 0) {
				err = (int)n;
				goto fail;
			}
			pos = pend;
		}
	}
	return (ssize_t)len;
fail:
	drain(t, s);
	return err;
}

/*
 * Pushed reads (gpufile__staged_pushed): the source writes the bytes in
 * order into the current bounce buffer; a full one is copied to the GPU
 * while the next fills, and a buffer is filled again only once its last
 * copy ended (wait_buffer), as in staged_read_warm.
 */
struct gpufile__staged_push {
	const struct gpufile__cuda *t;
	struct stager *s;
	struct gpufile__request *r;
	CUdeviceptr dst;
	size_t len;
	int64_t off;
	size_t pos;  /* bytes taken, from dst's start */
	size_t fill; /* the last of them, in buf[b], not yet copied */
	unsigned b;
	int err; /* the first failure: later pushes return it */
	char *msg;
	size_t msg_len;
};

/* Copies buf[b]'s bytes to their place in dst. */
static int push_flush(struct gpufile__staged_push *p)
{
	const size_t at = p->pos - p->fill;
	int err =
	    copy_to_device(p->t, p->s, p->r, p->b, p->dst + at, p->s->buf[p->b],
	                   p->fill, p->off + (int64_t)at, p->msg, p->msg_len);

	p->fill = 0;
	return err;
}

int gpufile__staged_push(struct gpufile__staged_push *p, const char *data,
                         size_t n)
{
	if (n > p->len - p->pos)
		n = p->len - p->pos;
	while (n && !p->err) {
		size_t k;

		if (p->fill == 0) {
			p->b = p->s->next_buf++ % p->s->nbufs;
			p->err =
			    wait_buffer(p->t, p->s, p->b, p->msg, p->msg_len);
			if (p->err)
				break;
		}
		k = p->s->buf_size - p->fill;
		if (k > n)
			k = n;
		memcpy(p->s->buf[p->b] + p->fill, data, k);
		p->fill += k;
		p->pos += k;
		data += k;
		n -= k;
		if (p->fill == p->s->buf_size || p->pos == p->len)
			p->err = push_flush(p);
	}
	return p->err;
}

void gpufile__staged_push_restart(struct gpufile__staged_push *p)
{
	/* Copies already queued write bytes the new ones overwrite in the
	 * same order on the one stream; buf[b]'s unsent bytes are dropped
	 * (it has no copy running: it was waited for before it filled). */
	p->pos = 0;
	p->fill = 0;
}

/* A push source: fill and its argument. */
struct push_source {
	ssize_t (*fill)(void *arg, struct gpufile__staged_push *p);
	void *arg;
};

static ssize_t staged_push_read(const struct gpufile__cuda *t, struct stager *s,
                                struct gpufile__request *r, CUdeviceptr dst,
                                size_t len, int64_t off,
                                const struct push_source *src, char *msg,
                                size_t msg_len)
{
	struct gpufile__staged_push p = {.t = t,
	                                 .s = s,
	                                 .r = r,
	                                 .dst = dst,
	                                 .len = len,
	                                 .off = off,
	                                 .msg = msg,
	                                 .msg_len = msg_len};
	ssize_t n;
	int err;

	settle_deferred(t, s); /* the thread's previous task first */
	n = src->fill(src->arg, &p);
	if (n >= 0 && !p.err && p.fill)
		p.err = push_flush(&p);
	if (n >= 0 && p.err)
		n = p.err;
	if (n < 0) {
		drain(t, s);
		return n;
	}
	err = wait_all(t, s, msg, msg_len);
	return err ? err : (ssize_t)p.pos;
}

/* The stager a thread keeps between the tasks of gpufile__staged_ops (see
 * settle_deferred), until staged_settle with idle gives it back. */
static _Thread_local struct stager *held;

/* One task; keep: the thread keeps the stager afterwards, and the task's
 * last copy may be left running (GPUFILE__TASK_DEFERRED); in_ctx: the
 * thread's current context is the request's already. */
static ssize_t staged_task(struct gpufile__request *r, char *buf, size_t len,
                           int64_t off, char *msg, size_t msg_len, int keep,
                           const struct push_source *src, int in_ctx)
{
	const struct gpufile__cuda *t = gpufile__cuda_if_loaded();
	struct stager *s = held;
	char *scratch = gpufile__thread_scratch();
	ssize_t n;
	CUresult rc;
	int err;

	if (!t)
		return gpufile__fail(GPUFILE_ENOCUDA, "CUDA driver not loaded");
	/* A stager already held (by the ops, in this thread) stays held:
	 * it may carry a settled task the pool has yet to collect. */
	const int hold = keep || s;

	if (!s)
		s = stager_acquire(t, r->cfg.nthreads);
	if (!s) {
		snprintf(msg, msg_len, "out of memory for a bounce-buffer set");
		return -ENOMEM;
	}
	held = NULL;
	err = stager_prepare(t, s, (CUcontext)r->cuda_ctx, r->cuda_ctx_id,
	                     r->device, &r->cfg, msg, msg_len);
	/* stager_prepare leaves the current context alone, or makes it the
	 * request's. */
	if (!err && !in_ctx) {
		rc = t->cuCtxSetCurrent((CUcontext)r->cuda_ctx);
		if (rc != CUDA_SUCCESS)
			err = gpufile__cuda_fail(rc, msg, msg_len,
			                         "cuCtxSetCurrent");
	}
	if (err)
		n = err;
	else if (src)
		n = staged_push_read(t, s, r, (CUdeviceptr)(uintptr_t)buf, len,
		                     off, src, msg, msg_len);
	else if (r->is_write)
		n = staged_write(t, s, r, (CUdeviceptr)(uintptr_t)buf, len, off,
		                 scratch, msg, msg_len);
	else
		n = staged_read(t, s, r, (CUdeviceptr)(uintptr_t)buf, len, off,
		                scratch, msg, msg_len, keep);
	if (hold) {
		held = s;
	} else {
		settle_deferred(t, s); /* none: this call did not defer */
		stager_return(t, s);
	}
	return n;
}

ssize_t gpufile__staged_task(struct gpufile__request *r, char *buf, size_t len,
                             int64_t off, char *msg, size_t msg_len)
{
	return staged_task(r, buf, len, off, msg, msg_len, 0, NULL, 0);
}

static ssize_t staged_task_kept(struct gpufile__request *r, char *buf,
                                size_t len, int64_t off, char *msg,
                                size_t msg_len)
{
	return staged_task(r, buf, len, off, msg, msg_len, 1, NULL, 0);
}

ssize_t gpufile__staged_pushed(struct gpufile__request *r, char *buf,
                               size_t len, int64_t off,
                               ssize_t (*fill)(void *arg,
                                               struct gpufile__staged_push *p),
                               void *arg, char *msg, size_t msg_len)
{
	const struct push_source src = {.fill = fill, .arg = arg};

	return staged_task(r, buf, len, off, msg, msg_len, 1, &src, 0);
}

/* A task on the caller's own thread (see gpufile__staged_here_ops): not
 * deferred, and the thread's current context as it found it. */
static ssize_t staged_task_here(struct gpufile__request *r, char *buf,
                                size_t len, int64_t off, char *msg,
                                size_t msg_len)
{
	const struct gpufile__cuda *t = gpufile__cuda_if_loaded();
	CUcontext caller = NULL;
	int in_ctx;
	ssize_t n;

	if (!t)
		return gpufile__fail(GPUFILE_ENOCUDA, "CUDA driver not loaded");
	in_ctx = t->cuCtxGetCurrent(&caller) == CUDA_SUCCESS &&
	         caller == (CUcontext)r->cuda_ctx;
	n = staged_task(r, buf, len, off, msg, msg_len, 0, NULL, in_ctx);
	/* A failed task may have left another context current (its
	 * buffers' while they were being made). */
	if (!in_ctx || n < 0)
		gpufile__ctx_restore(t, caller);
	return n;
}

static int staged_settle(struct gpufile__task_result *out, int idle)
{
	const struct gpufile__cuda *t = gpufile__cuda_if_loaded();
	struct stager *s = held;
	int reported;

	if (!s)
		return 0;
	/* What has finished first: the waits below fill s->settled again. */
	if (s->has_settled) {
		*out = s->settled;
		s->has_settled = 0;
		return 1;
	}
	/* Another thread waits for a set: this one goes back now. */
	if (!idle && atomic_load(&stagers.waiting))
		idle = 1;
	if (!idle)
		return 0;
	if (t) {
		forget_dead(t, s);
		settle_deferred(t, s);
	}
	held = NULL;
	reported = s->has_settled;
	if (reported) {
		*out = s->settled;
		s->has_settled = 0;
	}
	stager_return(t, s);
	return reported;
}

const struct gpufile__task_ops gpufile__staged_ops = {
    .run = staged_task_kept,
    .settle = staged_settle,
};

const struct gpufile__task_ops gpufile__staged_here_ops = {
    .run = staged_task_here,
};

unsigned gpufile__staging_waiting(void)
{
	return atomic_load(&stagers.waiting);
}

int gpufile__staging_warmup(const struct gpufile__settings *cfg)
{
	const struct gpufile__cuda *t = gpufile__cuda();
	struct stager *list = NULL;
	CUcontext ctx = NULL, cur = NULL;
	unsigned long long id;
	char msg[256];
	int err = 0, device;

	if (!t)
		return GPUFILE_ENOCUDA;
	if (gpufile__current_or_primary((void **)&ctx))
		return GPUFILE_ECUDA;
	/* ctx is the current one, else device 0's primary. */
	device = t->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur
	             ? gpufile__current_device(t)
	             : 0;
	if (gpufile__ctx_id(t, ctx, &id))
		return gpufile__fail(GPUFILE_ECUDA, "gpufile_warmup: the "
		                                    "current CUDA context has "
		                                    "been destroyed");
	for (unsigned i = 0; i < cfg->nthreads && !err; i++) {
		struct stager *s = stager_acquire(t, cfg->nthreads);
		if (!s)
			break;
		err = stager_prepare(t, s, ctx, id, device, cfg, msg,
		                     sizeof(msg));
		s->next = list;
		list = s;
	}
	while (list) {
		struct stager *s = list;
		list = s->next;
		stager_return(t, s);
	}
	return err;
}

void gpufile__staging_release(void)
{
	const struct gpufile__cuda *t = gpufile__cuda_if_loaded();

	pthread_mutex_lock(&stagers.lock);
	while (stagers.free_list) {
		struct stager *s = stagers.free_list;
		stagers.free_list = s->next;
		if (t)
			stager_free_buffers(t, s);
		free(s);
		stagers.count--;
	}
	/* A stager in use may still post to a queue. */
	if (t && stagers.count == 0)
		pool_release(t);
	pthread_mutex_unlock(&stagers.lock);
}

/* ---- gpufile_bounce_buffer_free() ---- */

size_t gpufile__staging_free(void)
{
	const struct gpufile__cuda *t = gpufile__cuda_if_loaded();
	struct stager *idle;
	size_t bytes = 0;

	pthread_mutex_lock(&bfree.serial);
	pthread_mutex_lock(&stagers.lock);
	idle = stagers.free_list;
	stagers.free_list = NULL;
	for (struct stager *s = idle; s; s = s->next)
		stagers.count--;
	bfree.gen++;
	bfree.old_out = stagers.count; /* every other stager is in use */
	bfree.old_bytes = 0;
	pthread_mutex_unlock(&stagers.lock);
	while (idle) {
		struct stager *s = idle;

		idle = s->next;
		bytes += stager_bytes(s);
		if (t)
			stager_free_buffers(t, s);
		free(s);
	}
	pthread_mutex_lock(&stagers.lock);
	while (bfree.old_out)
		pthread_cond_wait(&bfree.back, &stagers.lock);
	bytes += bfree.old_bytes;
	if (t && stagers.count == 0)
		pool_release(t); /* no stager left to post to a queue */
	pthread_mutex_unlock(&stagers.lock);
	pthread_mutex_unlock(&bfree.serial);
	return bytes;
}

/*
 * fork() (see fork.c). A child cannot use the parent's CUDA context, so
 * neither the pinned buffers, streams and events made in it: the child
 * forgets every stager without a CUDA call (the pinned pages are not even
 * mapped in the child: pinned.c, like CUDA, maps them MADV_DONTFORK, so
 * nothing is unmapped here either). Stagers in use
 * at the fork belong to threads that do not exist in the child, so the
 * count starts again at zero, and the copy queues are emptied. A ring's
 * descriptor and mappings are the child's own copies: closing them leaves
 * the parent's ring alone.
 */
void gpufile__staging_atfork_prepare(void)
{
	pthread_mutex_lock(&stagers.lock);
}

void gpufile__staging_atfork_parent(void)
{
	pthread_mutex_unlock(&stagers.lock);
}

void gpufile__staging_atfork_child(void)
{
	while (stagers.free_list) {
		struct stager *s = stagers.free_list;
		stagers.free_list = s->next;
#ifdef GPUFILE_HAVE_LIBURING
		if (s->ring_ok)
			io_uring_queue_exit(&s->ring);
#endif
		free(s);
	}
	stagers.count = 0;
	atomic_store(&stagers.waiting, 0);
	/* A gpufile_bounce_buffer_free() of another parent thread may have
	 * held serial or waited for stagers at the fork: neither exists in
	 * the child. */
	pthread_mutex_init(&bfree.serial, NULL);
	pthread_cond_init(&bfree.back, NULL);
	bfree.old_out = 0;
	bfree.old_bytes = 0;
	held = NULL; /* the forking thread is not a worker; be sure */
	/* The queues' streams and copies are the parent's. */
	pthread_mutex_init(&pool.lock, NULL);
	memset(pool.queue, 0, sizeof(pool.queue));
	pthread_cond_init(&stagers.freed, NULL);
	pthread_mutex_unlock(&stagers.lock);
}
