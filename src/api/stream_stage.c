/*
 * Stream-ordered reads and writes of device memory on the posix path
 * ("staged"): the caller's stream itself copies the file's bytes out of
 * pinned memory of gpufile's (a read), or the buffer's bytes into it (a
 * write), so that gpufile_read_async and gpufile_write_async return at
 * once.
 *
 * A read of up to one arena (nthreads * bounce_buffers * bounce_buffer_
 * size bytes, 128 MiB at the defaults, counted from the read's offset
 * rounded down to bounce_buffer_size) is cut into pieces of bounce_
 * buffer_size, edges at multiples of it in the file, held in a span of as
 * many consecutive units of an arena, and the pieces into groups of about
 * STAGE_COPY bytes. At the call the stream gets, per group, a wait for
 * the request's flag to reach seq + (pieces up to the group's end)
 * (cuStreamWaitValue32, GEQ) and one copy of the group; then an event,
 * and a wait for seq + pieces + 1: the work queued after the call. Filler
 * threads read the pieces from the file (pread, or O_DIRECT for cold
 * ranges, as a host read would), and the flag rises over the pieces
 * filled in file order. A waiter (stream.c) waits for every piece and the
 * event, stores *n_out, then the last value (in that order: once the
 * caller can see the request ended, no CUDA call of gpufile's names its
 * stream or context).
 *
 * The fillers start at the call, ahead of the stream: a read's bytes are
 * then in the arena by the time the stream gets there. That is wrong
 * only where the work before the read changes the file, which gpufile
 * knows of when it is its own stream-ordered write (stream.c's
 * write_pending): a staged write then read back on one stream returned
 * the old bytes. Such a read is "in order": at the call the stream gets
 * the wait the flag already satisfies (as a write's first), an event,
 * and the read's waits and copies; the waiter waits for the event and
 * only then gives the pieces to the fillers. Its size is not cut at the
 * file's end at the call (the write may extend the file); where it
 * reaches past that end, copies of the destination into the span come
 * before the event (the snapshot), so that the bytes the file lacks
 * when it is read are the destination's own, as gpufile_pread leaves
 * them. Reads with no such write pending (the common case) lose
 * nothing.
 *
 * A write of up to one arena is cut the same way, but its copies (device
 * to host, one per group) come first, behind a wait the flag already
 * satisfies (a driver that refuses waits then refuses it with nothing
 * else queued, as a read's first wait), each followed by an event; then
 * the event after the last and the wait for seq + pieces + 1. The waiter
 * waits for each group's event, and only then gives its pieces to the
 * fillers, which write them to the file (pwrite, or O_DIRECT where
 * direct_io=on, as a host write would) while the next groups' copies run;
 * once all are written it stores *n_out and releases the stream. (One
 * event for the whole write, the pieces given out after it: 0.89-0.94x
 * of gpufile_pwrite on the H200, 2026-12-02, whose pipeline overlaps its
 * copies with its writes.)
 *
 * Measured on the H200 first (2026-12-02): one wait, copy and event per
 * 4 MiB chunk through a ring of reused buffers, to take reads of any
 * size. The stream's queue holds only so many operations: the call of a
 * warm 4 GiB read (3073 of them) returned after 0.95 of the read, and the
 * read ran at 0.88x of gpufile_pread (a wait between every two copies
 * stops the copy engine's pipeline). Hence few operations, no reuse
 * within a read, and larger reads block instead (stream.c).
 *
 * Why no deadlock: CUDA runs a stream's work in order, and a stream
 * blocked in a flag wait may hold up, in a shared hardware queue, work
 * queued later on other streams (the reason stream.c never lets a held
 * stream wait for gpufile's own copy streams: the Python suite hung that
 * way on the H200). Here every wait is released by a filler, which waits
 * for nothing but the file (a write's, also for copies queued before the
 * wait): fillers are threads of their own, never the
 * pool's workers (a worker may wait for a copy held up behind this very
 * stream), and they never wait for the GPU.
 *
 * Arenas are allocated portable in the primary context of the
 * destination's device, at most MAX_ARENAS in all, and serve only that
 * device's requests: a reset of one device's context frees its arenas,
 * and must not take the memory of another device's request in flight (a
 * device-1 read used to take a device-0 arena, and got the freed
 * memory's bytes after device 0's reset). An idle arena of another
 * device makes way where none has room. They are kept until
 * gpufile_release() or gpufile_bounce_buffer_free(); a call waits while
 * every one is in use,
 * which ends without the caller (the fillers and the stream run it),
 * unless the stream of an earlier staged read waits for something the
 * caller does after the call: the contract says so (gpufile.h).
 *
 * Lock order: a stage's lock, then stream.c's slot_lock (the flag
 * stores); the arenas' and the fillers' locks alone. No I/O runs under
 * any of them.
 */
#define _GNU_SOURCE
#include "api/api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>

#define MAX_ARENAS 2
#define STAGE_COPY (16u << 20) /* bytes per copy (measured: bench/README) */

/* ---- the arenas ---- */

/*
 * An arena is one pinned allocation of nthreads * bounce_buffers units of
 * bounce_buffer_size bytes; a read takes a span of as many consecutive
 * units as it has pieces (first fit), so that small reads share an arena
 * and one copy can take several pieces. A 4 MiB read used to take a whole
 * 128 MiB region: with two of them, the third of 32 such calls queued back
 * to back waited for the first read to end (H200, 2026-12-02).
 */
struct arena {
	struct arena *next;
	struct gpufile__pinned mem;
	char *p;     /* mem.p */
	size_t unit; /* bytes per unit */
	unsigned nunits;
	unsigned char *used;
	unsigned busy; /* units in use */
	unsigned lost; /* of them, units copies of unknown end may touch */
	int dead;      /* its context ended, or units lost: no new spans */
	int device;    /* the device whose requests it serves */
	CUcontext ctx; /* that device's primary context, and its id */
	unsigned long long id;
};

struct span {
	struct arena *a;
	unsigned first, n;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t back; /* units came back */
	struct arena *list;
	unsigned count;     /* arenas, made or being made */
	struct arena *lost; /* left, never freed: see span_lose */
} arenas = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, 0, NULL};

static unsigned arena_units(const struct gpufile__settings *cfg)
{
	return cfg->nthreads * cfg->bounce_buffers;
}

static void arena_free(const struct gpufile__cuda *t, struct arena *a)
{
	if (t && a->p) {
		int alive = gpufile__ctx_same(t, a->ctx, a->id);
		CUcontext old = NULL;

		if (alive) {
			t->cuCtxGetCurrent(&old);
			t->cuCtxSetCurrent(a->ctx);
		}
		gpufile__pinned_free(t, &a->mem, alive);
		if (alive)
			gpufile__ctx_restore(t, old);
	}
	free(a->used);
	free(a);
}

static struct arena *arena_alloc(const struct gpufile__cuda *t, size_t unit,
                                 unsigned nunits, int device)
{
	struct arena *a = calloc(1, sizeof(*a));
	CUcontext old = NULL;
	const char *call = "cuCtxSetCurrent";
	CUresult cr;

	if (!a || !(a->used = calloc(nunits, 1))) {
		free(a);
		gpufile__fail(-ENOMEM, "out of memory");
		return NULL;
	}
	if (gpufile__primary_context(device, (void **)&a->ctx)) {
		arena_free(NULL, a);
		return NULL;
	}
	gpufile__ctx_id(t, a->ctx, &a->id);
	t->cuCtxGetCurrent(&old);
	cr = t->cuCtxSetCurrent(a->ctx);
	if (cr == CUDA_SUCCESS)
		cr = gpufile__pinned_alloc(t, unit * nunits, &a->mem, &call);
	gpufile__ctx_restore(t, old);
	if (cr != CUDA_SUCCESS) {
		gpufile__cuda_fail(cr, NULL, 0,
		                   "%s of %zu bytes of pinned memory "
		                   "for stream-ordered reads",
		                   call, unit * nunits);
		arena_free(NULL, a);
		return NULL;
	}
	a->p = a->mem.p;
	a->unit = unit;
	a->nunits = nunits;
	a->device = device;
	return a;
}

/* Caller holds arenas.lock. The first unit of n free consecutive ones in
 * a, or -1. */
static int arena_fit(const struct arena *a, unsigned n)
{
	unsigned run = 0;

	for (unsigned i = 0; i < a->nunits; i++) {
		run = a->used[i] ? 0 : run + 1;
		if (run == n)
			return (int)(i + 1 - n);
	}
	return -1;
}

/* Caller holds arenas.lock. Moves the idle arenas that cannot serve
 * (their context ended, or made with other settings) to *gone, and those
 * whose only units in use are lost to arenas.lost. */
static void arenas_prune(const struct gpufile__cuda *t, size_t unit,
                         unsigned nunits, struct arena **gone)
{
	struct arena **pp = &arenas.list, *a;

	while ((a = *pp)) {
		if (!a->dead && !gpufile__ctx_same(t, a->ctx, a->id))
			a->dead = 1;
		if (a->lost && a->busy == a->lost) {
			*pp = a->next;
			arenas.count--;
			a->next = arenas.lost;
			arenas.lost = a;
			continue;
		}
		if (a->busy == 0 &&
		    (a->dead || a->unit != unit || a->nunits != nunits)) {
			*pp = a->next;
			arenas.count--;
			a->next = *gone;
			*gone = a;
			continue;
		}
		pp = &a->next;
	}
}

/* Caller holds arenas.lock. Moves an idle arena of a device other than
 * device to *gone; returns whether there was one. */
static int arena_evict(int device, struct arena **gone)
{
	for (struct arena **pp = &arenas.list, *a; (a = *pp); pp = &a->next)
		if (a->busy == 0 && a->device != device) {
			*pp = a->next;
			arenas.count--;
			a->next = *gone;
			*gone = a;
			return 1;
		}
	return 0;
}

/* A span of n units of unit bytes in an arena (of nunits) of device's, a
 * new one made in device's primary context when none has room and fewer
 * than MAX_ARENAS exist (or another device's is idle); waits while every
 * one is in use. Returns 0, or an error with the thread's message. */
static int span_take(const struct gpufile__cuda *t, size_t unit,
                     unsigned nunits, int device, unsigned n, struct span *out)
{
	struct arena *gone = NULL, *made = NULL;
	int rc = 0;

	if (n > nunits) /* never fits: gpufile__stage_fits said otherwise */
		return gpufile__fail(-EINVAL,
		                     "a staged read of %u pieces is larger "
		                     "than an arena of %u",
		                     n, nunits);
	pthread_mutex_lock(&arenas.lock);
	for (;;) {
		struct arena *a;
		int first = -1;

		if (made) {
			made->next = arenas.list;
			arenas.list = made;
			made = NULL;
		}
		arenas_prune(t, unit, nunits, &gone);
		for (a = arenas.list; a; a = a->next)
			if (!a->dead && a->device == device &&
			    a->unit == unit && a->nunits == nunits &&
			    (first = arena_fit(a, n)) >= 0)
				break;
		if (a) {
			memset(a->used + first, 1, n);
			a->busy += n;
			*out = (struct span){a, (unsigned)first, n};
			break;
		}
		if (arenas.count < MAX_ARENAS) {
			arenas.count++;
			pthread_mutex_unlock(&arenas.lock);
			made = arena_alloc(t, unit, nunits, device);
			pthread_mutex_lock(&arenas.lock);
			if (!made) {
				arenas.count--;
				pthread_cond_broadcast(&arenas.back);
				rc = GPUFILE_ECUDA;
				break;
			}
			continue;
		}
		if (arena_evict(device, &gone))
			continue;
		pthread_cond_wait(&arenas.back, &arenas.lock);
	}
	pthread_mutex_unlock(&arenas.lock);
	while (gone) {
		struct arena *a = gone;

		gone = a->next;
		arena_free(t, a);
	}
	return rc;
}

static void span_give(struct span sp)
{
	pthread_mutex_lock(&arenas.lock);
	memset(sp.a->used + sp.first, 0, sp.n);
	sp.a->busy -= sp.n;
	pthread_cond_broadcast(&arenas.back);
	pthread_mutex_unlock(&arenas.lock);
}

/*
 * A span that copies queued on a stream may still read or write, with no
 * event to tell when they end (the driver refused a copy, then the event
 * after the ones queued; or waiting for that event failed). Its units are never
 * given back, and its arena takes no new span; once nothing else of it is in
 * use it leaves the list for arenas.lost, its pinned memory never freed, and a
 * new arena may take its place: requests after it never wait for units that
 * cannot come back. Each such double failure costs one arena of pinned memory.
 */
static void span_lose(struct span sp)
{
	pthread_mutex_lock(&arenas.lock);
	sp.a->lost += sp.n;
	sp.a->dead = 1;
	pthread_cond_broadcast(&arenas.back);
	pthread_mutex_unlock(&arenas.lock);
}

size_t gpufile__stage_buffers_free(void)
{
	const struct gpufile__cuda *t = gpufile__cuda_if_loaded();
	struct arena *idle = NULL, **pp, *a;
	size_t bytes = 0;

	pthread_mutex_lock(&arenas.lock);
	for (pp = &arenas.list; (a = *pp);) {
		if (a->busy == 0) {
			*pp = a->next;
			arenas.count--;
			a->next = idle;
			idle = a;
		} else {
			pp = &a->next;
		}
	}
	pthread_mutex_unlock(&arenas.lock);
	while ((a = idle)) {
		idle = a->next;
		bytes += a->unit * a->nunits;
		arena_free(t, a);
	}
	if (t)
		gpufile__stream_events_free(t);
	return bytes;
}

/* ---- the fillers ---- */

struct piece_task {
	TAILQ_ENTRY(piece_task) link;
	struct gpufile__stage *st;
	uint32_t piece;
};

#define FILLER_IDLE_S 5

static struct {
	pthread_mutex_t lock;
	pthread_cond_t work;
	TAILQ_HEAD(, piece_task) queue;
	unsigned queued; /* tasks on the queue */
	unsigned nfillers, nidle;
} fillers = {.lock = PTHREAD_MUTEX_INITIALIZER,
             .work = PTHREAD_COND_INITIALIZER,
             .queue = TAILQ_HEAD_INITIALIZER(fillers.queue)};

static void piece_run(struct gpufile__stage *st, uint32_t p, char *scratch);

static void *filler(void *arg)
{
	char *scratch = NULL;

	(void)arg;
	pthread_mutex_lock(&fillers.lock);
	for (;;) {
		struct piece_task *task = TAILQ_FIRST(&fillers.queue);

		if (!task) {
			if (gpufile__idle_wait(&fillers.work, &fillers.lock,
			                       &fillers.nidle,
			                       FILLER_IDLE_S) == ETIMEDOUT &&
			    TAILQ_EMPTY(&fillers.queue))
				break;
			continue;
		}
		TAILQ_REMOVE(&fillers.queue, task, link);
		fillers.queued--;
		pthread_mutex_unlock(&fillers.lock);
		if (!scratch)
			scratch = gpufile__thread_scratch();
		piece_run(task->st, task->piece, scratch);
		pthread_mutex_lock(&fillers.lock);
	}
	fillers.nfillers--;
	pthread_mutex_unlock(&fillers.lock);
	return NULL;
}

/* Queues n tasks, and starts fillers while fewer are idle than tasks wait,
 * up to max in all (a 4 MiB piece takes one thread ~0.7 ms to read from
 * the page cache: reads of one piece each, queued back to back, need as
 * many fillers as those of many pieces). Returns 0, or -1 when no filler
 * exists and none could be started (nothing is then queued). */
static int fillers_submit(struct piece_task *tasks, uint32_t n, unsigned max)
{
	pthread_attr_t attr;
	unsigned started = 0;
	int rc = 0;

	pthread_mutex_lock(&fillers.lock);
	for (uint32_t i = 0; i < n; i++)
		TAILQ_INSERT_TAIL(&fillers.queue, &tasks[i], link);
	fillers.queued += n;
	while (fillers.nfillers < max &&
	       fillers.nidle + started < fillers.queued &&
	       pthread_attr_init(&attr) == 0) {
		pthread_t tid;

		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		rc = pthread_create(&tid, &attr, filler, NULL);
		pthread_attr_destroy(&attr);
		if (rc)
			break;
		fillers.nfillers++;
		started++;
	}
	rc = fillers.nfillers ? 0 : -1;
	if (rc) {
		for (uint32_t i = 0; i < n; i++)
			TAILQ_REMOVE(&fillers.queue, &tasks[i], link);
		fillers.queued -= n;
	}
	pthread_cond_broadcast(&fillers.work);
	pthread_mutex_unlock(&fillers.lock);
	return rc;
}

/* fork(): the child has none of the fillers, nor their stages' threads;
 * the arenas are the parent's pinned memory (CUDA maps it
 * MADV_DONTFORK), unusable there. */
void gpufile__stage_atfork_prepare(void)
{
	pthread_mutex_lock(&arenas.lock);
	pthread_mutex_lock(&fillers.lock);
}

void gpufile__stage_atfork_parent(void)
{
	pthread_mutex_unlock(&fillers.lock);
	pthread_mutex_unlock(&arenas.lock);
}

void gpufile__stage_atfork_child(void)
{
	TAILQ_INIT(&fillers.queue);
	fillers.queued = fillers.nfillers = fillers.nidle = 0;
	pthread_cond_init(&fillers.work, NULL);
	pthread_mutex_unlock(&fillers.lock);
	while (arenas.list || arenas.lost) {
		struct arena *a = arenas.list ? arenas.list : arenas.lost;

		if (a == arenas.list)
			arenas.list = a->next;
		else
			arenas.lost = a->next;
		a->p = NULL; /* the parent's, not mapped here (pinned.c) */
		memset(&a->mem, 0, sizeof(a->mem));
		arena_free(NULL, a);
	}
	arenas.count = 0;
	pthread_cond_init(&arenas.back, NULL);
	pthread_mutex_unlock(&arenas.lock);
}

/* ---- a staged request ---- */

struct gpufile__stage {
	const struct gpufile__cuda *t;
	struct gpufile *h;
	struct gpufile__settings cfg;
	gpufile_path_t path; /* counted as */
	int is_write;
	CUstream stream;
	CUdeviceptr dst; /* the device buffer (a write's source) */
	int64_t off;     /* the request: [off, off + size) of the file */
	size_t size;     /* as asked; a read's up to the file's end then */
	size_t asked;    /* as asked */
	size_t piece;    /* bounce_buffer_size */
	int64_t base;    /* off rounded down to a multiple of piece */
	uint32_t npieces, per_group;
	struct span span; /* its units hold [base, base + n * piece) */
	struct piece_task *tasks;
	/* A read that waits for the stream (gpufile__stage_new): the
	 * fillers start once the stream has reached the request (reached,
	 * recorded at the call), and where the read may end past the
	 * file's end at the call, the stream first copies the destination
	 * into the span (snapshot), so that bytes the file does not have
	 * are left as they were. */
	int in_order, snapshot;
	CUevent reached;
	CUevent event;       /* after the last copy, or NULL */
	CUevent *group_done; /* a write's: after each group's copy, or NULL */
	uint32_t ngroups;
	int slot;
	uint32_t seq; /* the flag: seq + pieces filled in file order */
	ssize_t *n_out;
	uint64_t start_ns;

	pthread_mutex_t lock; /* guards what follows */
	pthread_cond_t cond;
	unsigned char *filled;
	uint32_t prefix; /* pieces [0, prefix) are filled (a read's) */
	uint32_t ended;  /* pieces filled, or written */
	int queue_done;  /* the caller is done queueing */
	ssize_t queue_err;
	int span_lost;      /* copies of unknown end may read it */
	uint32_t err_piece; /* lowest piece that failed (npieces: none) */
	ssize_t err;
	uint32_t short_piece; /* lowest piece cut short (npieces: none) */
	size_t short_n;       /* the bytes it had */
	int released; /* a read's *n_out and last value stored (release) */
};

int gpufile__stage_fits(const struct gpufile__settings *cfg, int64_t offset,
                        size_t size)
{
	const size_t head =
	    (size_t)((uint64_t)offset % cfg->bounce_buffer_size);

	return size <=
	       (size_t)arena_units(cfg) * cfg->bounce_buffer_size - head;
}

static int64_t piece_pos(const struct gpufile__stage *st, uint32_t p)
{
	const int64_t pos = st->base + (int64_t)((uint64_t)p * st->piece);

	return pos < st->off ? st->off : pos;
}

/* Compared as distances from base: base + (p + 1) * piece itself
 * overflows where the request ends within a piece of INT64_MAX (a
 * 4096-byte write at INT64_MAX - 4 MiB + 1 got a 4 MiB copy). */
static int64_t piece_end(const struct gpufile__stage *st, uint32_t p)
{
	const int64_t end = st->off + (int64_t)st->size;
	const uint64_t next = (uint64_t)(p + 1) * st->piece;

	return next < (uint64_t)(end - st->base) ? st->base + (int64_t)next
	                                         : end;
}

/* Where file offset pos lies in the read's span. */
static char *region_at(const struct gpufile__stage *st, int64_t pos)
{
	const struct span *sp = &st->span;

	return sp->a->p + sp->first * sp->a->unit + (pos - st->base);
}

void gpufile__stage_free(struct gpufile__stage *st)
{
	if (st->span.a)
		span_give(st->span);
	pthread_mutex_destroy(&st->lock);
	pthread_cond_destroy(&st->cond);
	free(st->tasks);
	free(st->filled);
	free(st->group_done);
	free(st);
}

int gpufile__stage_new(const struct gpufile__cuda *t,
                       const struct gpufile__request *r, CUstream stream,
                       int in_order, ssize_t *n_out,
                       struct gpufile__stage **out)
{
	struct gpufile__stage *st = calloc(1, sizeof(*st));
	/* A write is not cut at the file's end. */
	const int64_t fsize = r->is_write ? INT64_MAX : gpufile_size(r->h);
	char why[384];
	int rc;

	*out = NULL;
	if (!st)
		return gpufile__fail(-ENOMEM, "%s %s: out of memory",
		                     stream_verb(r->is_write), r->h->path);
	if (fsize < 0) {
		free(st);
		return (int)fsize;
	}
	st->t = t;
	st->h = r->h;
	st->cfg = r->cfg;
	st->path = r->path;
	st->is_write = r->is_write;
	st->stream = stream;
	st->n_out = n_out;
	st->dst = (CUdeviceptr)(uintptr_t)r->buf;
	st->off = r->offset;
	st->asked = r->size;
	st->size = r->offset >= fsize ? 0
	           : (uint64_t)(fsize - r->offset) < r->size
	               ? (size_t)(fsize - r->offset)
	               : r->size;
	/* Read once the stream gets there, the file may be longer than
	 * now (a write before it extends it): the whole request is
	 * staged, and what lies past the file's end now is kept. */
	st->in_order = in_order && !r->is_write && r->size > 0;
	st->snapshot = st->in_order && st->size < r->size;
	if (st->in_order)
		st->size = r->size;
	st->piece = r->cfg.bounce_buffer_size;
	st->base = st->off - (int64_t)((uint64_t)st->off % st->piece);
	st->npieces = st->size
	                  ? (uint32_t)(((uint64_t)(st->off + (int64_t)st->size -
	                                           st->base) +
	                                st->piece - 1) /
	                               st->piece)
	                  : 0;
	st->per_group = (uint32_t)((STAGE_COPY + st->piece - 1) / st->piece);
	st->ngroups = (st->npieces + st->per_group - 1) / st->per_group;
	st->err_piece = st->short_piece = st->npieces;
	st->start_ns = gpufile__now_ns();
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->cond, NULL);
	st->tasks = calloc(st->npieces + 1, sizeof(*st->tasks));
	st->filled = calloc(st->npieces + 1, 1);
	if (st->is_write)
		st->group_done = calloc(st->ngroups + 1, sizeof(CUevent));
	if (!st->tasks || !st->filled || (st->is_write && !st->group_done)) {
		gpufile__stage_free(st);
		return gpufile__fail(-ENOMEM, "%s %s: out of memory",
		                     stream_verb(r->is_write), r->h->path);
	}
	if (st->npieces && span_take(t, st->piece, arena_units(&r->cfg),
	                             r->device, st->npieces, &st->span)) {
		snprintf(why, sizeof(why), "%s", gpufile_errmsg());
		gpufile__stage_free(st);
		return gpufile__fail(GPUFILE_ECUDA, "%s %s: %s",
		                     stream_verb(r->is_write), r->h->path, why);
	}
	rc = gpufile__stream_flag_get(t, &st->slot, &st->seq, r->h->path,
	                              r->is_write);
	if (rc) {
		gpufile__stage_free(st);
		return rc;
	}
	*out = st;
	return 0;
}

/* Caller holds st->lock; every piece is filled (or written) and the call
 * is done queueing. What *n_out must hold. */
static ssize_t result(const struct gpufile__stage *st)
{
	if (st->queue_err)
		return st->queue_err;
	if (st->err_piece < st->npieces && st->err_piece <= st->short_piece)
		return st->err;
	if (st->short_piece < st->npieces)
		return (ssize_t)(piece_pos(st, st->short_piece) +
		                 (int64_t)st->short_n - st->off);
	return (ssize_t)st->size;
}

/*
 * Caller holds st->lock. A read whose pieces are all filled, once the
 * caller has queued it without error, ends here, in the thread that
 * filled the last piece or queued the last operation: *n_out, then the
 * value that releases the copies and the work after, in that order.
 * The stream never waits for the waiter, whose CUDA calls (the event of
 * the copies, gpufile__stage_run) may block: a call of another thread
 * that synchronises the whole context (cuModuleLoadData, as CuPy's first
 * use of a kernel makes it) holds the driver's lock while it waits for
 * this very stream (H200: the waiter stuck in cuEventDestroy, the main
 * thread in cuModuleLoadData). Returns whether it released.
 */
static int release_read(struct gpufile__stage *st)
{
	if (st->is_write || st->released || !st->queue_done || st->queue_err ||
	    st->prefix != st->npieces)
		return 0;
	__atomic_store_n(st->n_out, result(st), __ATOMIC_RELEASE);
	gpufile__stream_flag_store(st->t, st->slot, st->seq + st->npieces + 1);
	st->released = 1;
	return 1;
}

/* Whether piece p lies past a piece that failed or was cut short: it is
 * then neither read nor written. */
static int piece_skipped(struct gpufile__stage *st, uint32_t p)
{
	int skip;

	pthread_mutex_lock(&st->lock);
	skip = p > st->err_piece || p > st->short_piece;
	pthread_mutex_unlock(&st->lock);
	return skip;
}

/* Caller holds st->lock. Records what piece p's read or write of len
 * bytes returned: the lowest piece that failed, and the lowest cut
 * short, are kept. */
static void piece_outcome(struct gpufile__stage *st, uint32_t p, ssize_t n,
                          size_t len)
{
	if (n < 0 && p < st->err_piece) {
		st->err_piece = p;
		st->err = n;
	} else if (n >= 0 && (size_t)n < len && p < st->short_piece) {
		st->short_piece = p;
		st->short_n = (size_t)n;
	}
}

/* Reads piece p into the span; bytes past what the file gave (a file
 * cut short since the call, an error) are zeroed, so that the copy never
 * puts another read's bytes into the destination. Pieces past a failure
 * or the file's end are not read. Raises the flag over the pieces filled
 * in file order. */
static void fill_piece(struct gpufile__stage *st, uint32_t p, char *scratch)
{
	const int64_t pos = piece_pos(st, p);
	const size_t len = (size_t)(piece_end(st, p) - pos);
	char *buf = region_at(st, pos);
	const int skip = piece_skipped(st, p);
	uint32_t before;
	ssize_t n = 0;

	if (!skip)
		n = gpufile__file_read(st->h, st->cfg.direct_io, buf, len, pos,
		                       scratch, GPUFILE__SCRATCH);
	/* A snapshot holds the destination's own bytes there. */
	if (st->snapshot)
		;
	else if (n < 0)
		memset(buf, 0, len);
	else if ((size_t)n < len)
		memset(buf + n, 0, len - (size_t)n);

	pthread_mutex_lock(&st->lock);
	before = st->prefix;
	if (!skip)
		piece_outcome(st, p, n, len);
	st->filled[p] = 1;
	while (st->prefix < st->npieces && st->filled[st->prefix])
		st->prefix++;
	if (st->prefix != before && !release_read(st))
		gpufile__stream_flag_store(st->t, st->slot,
		                           st->seq + st->prefix);
	if (++st->ended == st->npieces)
		pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
}

/* Writes piece p of a staged write from the span (its copy has ended) to
 * the file. Pieces past a failure are not written. */
static void write_piece(struct gpufile__stage *st, uint32_t p, char *scratch)
{
	const int64_t pos = piece_pos(st, p);
	const size_t len = (size_t)(piece_end(st, p) - pos);
	const int skip = piece_skipped(st, p);
	ssize_t n = 0;

	if (!skip)
		n = gpufile__file_write(st->h, st->cfg.direct_io,
		                        region_at(st, pos), len, pos, scratch,
		                        GPUFILE__SCRATCH);
	pthread_mutex_lock(&st->lock);
	if (!skip)
		piece_outcome(st, p, n, len);
	/* The waiter may wait for fewer than all (after a failed wait for
	 * a later group's copy: write_groups). */
	st->ended++;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
}

static void piece_run(struct gpufile__stage *st, uint32_t p, char *scratch)
{
	if (st->is_write)
		write_piece(st, p, scratch);
	else
		fill_piece(st, p, scratch);
}

/* Group g: its pieces [*first, *last), and its bytes: *len at file
 * offset *pos, at *dev in the buffer. */
static void group_range(const struct gpufile__stage *st, uint32_t g,
                        uint32_t *first, uint32_t *last, int64_t *pos,
                        CUdeviceptr *dev, size_t *len)
{
	*first = g * st->per_group;
	*last = *first + st->per_group < st->npieces ? *first + st->per_group
	                                             : st->npieces;
	*pos = piece_pos(st, *first);
	*dev = st->dst + (CUdeviceptr)(*pos - st->off);
	*len = (size_t)(piece_end(st, *last - 1) - *pos);
}

/* Queues group g: a read's wait, unless queued already (the first), and
 * its copy; a write's copy. */
static CUresult queue_group(struct gpufile__stage *st, uint32_t g, int wait)
{
	const struct gpufile__cuda *t = st->t;
	uint32_t first, last;
	int64_t pos;
	CUdeviceptr dev;
	size_t len;
	CUresult cr = CUDA_SUCCESS;

	group_range(st, g, &first, &last, &pos, &dev, &len);
	if (st->is_write)
		return t->cuMemcpyDtoHAsync(region_at(st, pos), dev, len,
		                            st->stream);
	if (wait)
		cr = t->cuStreamWaitValue32(
		    st->stream, gpufile__stream_flag_dev(st->slot),
		    st->seq + last, CU_STREAM_WAIT_VALUE_GEQ);
	if (cr == CUDA_SUCCESS)
		cr = t->cuMemcpyHtoDAsync(dev, region_at(st, pos), len,
		                          st->stream);
	return cr;
}

/* The stream's first operation: a wait (a read's group 0, or the end's
 * where nothing is copied; a write's, or an in-order read's, for the
 * value the flag holds, which lets the stream through at once). */
static CUresult queue_first(struct gpufile__stage *st)
{
	const uint32_t first =
	    st->per_group < st->npieces ? st->per_group : st->npieces;
	const uint32_t value = !st->npieces                   ? st->seq + 1
	                       : st->is_write || st->in_order ? st->seq
	                                                      : st->seq + first;

	return st->t->cuStreamWaitValue32(st->stream,
	                                  gpufile__stream_flag_dev(st->slot),
	                                  value, CU_STREAM_WAIT_VALUE_GEQ);
}

/* Gives pieces [first, first + n) to the fillers, or runs them here
 * where no filler exists (a read's first wait is queued by then: the
 * stream goes on once they are read). */
static void pieces_give(struct gpufile__stage *st, uint32_t first, uint32_t n)
{
	for (uint32_t p = first; p < first + n; p++)
		st->tasks[p] = (struct piece_task){.st = st, .piece = p};
	if (n && fillers_submit(st->tasks + first, n, st->cfg.nthreads) != 0) {
		char *scratch = gpufile__thread_scratch();

		for (uint32_t p = first; p < first + n; p++)
			piece_run(st, p, scratch);
	}
}

/* An event recorded on the stream after what is queued there: *e, or
 * NULL with the failure. */
static CUresult event_after(struct gpufile__stage *st, CUevent *e)
{
	const struct gpufile__cuda *t = st->t;
	CUresult cr = gpufile__stream_event_get(t, e);

	if (cr == CUDA_SUCCESS &&
	    (cr = t->cuEventRecord(*e, st->stream)) != CUDA_SUCCESS)
		gpufile__stream_event_put(*e);
	if (cr != CUDA_SUCCESS)
		*e = NULL;
	return cr;
}

/* An in-order read's operations before its copies: the snapshot's
 * copies (counted in *copies), then the event that tells the waiter the
 * stream has reached the request. */
static CUresult queue_reached(struct gpufile__stage *st, uint32_t *copies)
{
	CUresult cr = CUDA_SUCCESS;

	for (uint32_t g = 0; st->snapshot && g < st->ngroups; g++) {
		uint32_t first, last;
		int64_t pos;
		CUdeviceptr dev;
		size_t len;

		group_range(st, g, &first, &last, &pos, &dev, &len);
		cr = st->t->cuMemcpyDtoHAsync(region_at(st, pos), dev, len,
		                              st->stream);
		if (cr != CUDA_SUCCESS)
			return cr;
		(*copies)++;
	}
	return event_after(st, &st->reached);
}

/* The error of gpufile__stage_queue for cr (CUDA_SUCCESS: 0), which
 * stopped it at group g of ngroups (ngroups: after the copies). */
static int queue_error(struct gpufile__stage *st, CUresult cr, uint32_t g,
                       uint32_t ngroups)
{
	if (cr == CUDA_SUCCESS)
		return 0;
	if (st->in_order && !st->reached)
		return gpufile__cuda_fail(
		    cr, NULL, 0,
		    "%s %s: queueing the wait for the work before the request "
		    "on the stream",
		    stream_verb(st->is_write), st->h->path);
	if (g < ngroups)
		return gpufile__cuda_fail(
		    cr, NULL, 0, "%s %s: queueing copy %u of %u on the stream",
		    stream_verb(st->is_write), st->h->path, g + 1, ngroups);
	return gpufile__cuda_fail(cr, NULL, 0,
	                          "%s %s: recording an event after the "
	                          "copies on the stream",
	                          stream_verb(st->is_write), st->h->path);
}

int gpufile__stage_queue(struct gpufile__stage *st, int *unsupported,
                         int *run_here)
{
	const struct gpufile__cuda *t = st->t;
	const uint32_t ngroups = st->ngroups;
	CUresult cr = queue_first(st);
	uint32_t g = 0, copies = 0;
	int rc;

	*unsupported = cr == CUDA_ERROR_NOT_SUPPORTED;
	*run_here = 0;
	if (cr != CUDA_SUCCESS) {
		/* Nothing on the stream: the request is off. */
		rc = gpufile__cuda_fail(cr, NULL, 0,
		                        "%s %s: cuStreamWaitValue32 on "
		                        "the stream",
		                        stream_verb(st->is_write), st->h->path);
		gpufile__stream_flag_put(st->slot);
		gpufile__stage_free(st);
		return rc;
	}
	/* A read's fillers start now (an in-order read's once the stream
	 * has reached it); a write's pieces once their group's copy has
	 * run (its event; where that was refused, the last's). */
	if (!st->is_write && !st->in_order)
		pieces_give(st, 0, st->npieces);
	if (st->in_order)
		cr = queue_reached(st, &copies);
	for (g = 0; cr == CUDA_SUCCESS && g < ngroups; g++) {
		cr = queue_group(st, g, g > 0 || st->in_order);
		if (cr != CUDA_SUCCESS)
			break;
		copies++;
		if (st->is_write)
			event_after(st, &st->group_done[g]);
	}
	/* The event after the copies queued, all of them or those before
	 * a refused one: it tells when the span is no longer touched. */
	if (copies > 0) {
		CUresult ev = event_after(st, &st->event);

		if (cr == CUDA_SUCCESS)
			cr = ev;
	}
	rc = queue_error(st, cr, g, ngroups);
	/* The end, queued after a failure too, so that the work after
	 * still waits for *n_out (which then holds the failure). Where the
	 * driver refuses it, nothing holds the work after (the call used
	 * to return 0 all the same, the stream unordered): the request
	 * then runs to its end in the call (the caller is told to), before
	 * any work queued after it. */
	if (st->npieces && t->cuStreamWaitValue32(
	                       st->stream, gpufile__stream_flag_dev(st->slot),
	                       st->seq + st->npieces + 1,
	                       CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS)
		*run_here = 1;
	pthread_mutex_lock(&st->lock);
	/* Copies were queued, and nothing will tell when they have ended:
	 * the span cannot be reused (gpufile__stage_run loses it). */
	st->span_lost = rc && copies && !st->event;
	st->queue_err = rc;
	st->queue_done = 1;
	release_read(st);
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
	return 0;
}

static ssize_t copies_failed(struct gpufile__stage *st, CUresult cr)
{
	return gpufile__cuda_fail(cr, NULL, 0,
	                          "%s %s: waiting for the copies on the "
	                          "stream",
	                          stream_verb(st->is_write), st->h->path);
}

/* Waits for the stream's copies (where their event was recorded) and
 * destroys the events; returns n, or the wait's failure where n is not
 * one already. */
static ssize_t copies_ended(struct gpufile__stage *st, ssize_t n)
{
	const struct gpufile__cuda *t = st->t;

	for (uint32_t g = 0; st->group_done && g < st->ngroups; g++)
		if (st->group_done[g]) {
			gpufile__stream_event_put(st->group_done[g]);
			st->group_done[g] = NULL;
		}
	if (st->event) {
		CUresult cr = t->cuEventSynchronize(st->event);

		/* The copies may still run: the span must not be reused
		 * (it used to be given back). */
		if (cr != CUDA_SUCCESS) {
			st->span_lost = 1;
			if (n >= 0)
				n = copies_failed(st, cr);
		}
		gpufile__stream_event_put(st->event);
		st->event = NULL;
	}
	return n;
}

/* Waits until n pieces are filled or written; returns the result where n
 * is all of them, else 0. */
static ssize_t pieces_ended(struct gpufile__stage *st, uint32_t n)
{
	ssize_t rc = 0;

	pthread_mutex_lock(&st->lock);
	while (st->ended < n)
		pthread_cond_wait(&st->cond, &st->lock);
	if (n == st->npieces)
		rc = result(st);
	pthread_mutex_unlock(&st->lock);
	return rc;
}

/* An in-order read that will not be read (its event before was not
 * queued, or waiting for it failed: err): every piece ends as failed,
 * and the flag lets the copies queued pass. Their bytes are the span's:
 * zeroed, unless a snapshot copy may write it (the destination's own
 * bytes then). */
static void pieces_fail(struct gpufile__stage *st, ssize_t err)
{
	if (!st->snapshot)
		memset(region_at(st, st->off), 0, st->size);
	pthread_mutex_lock(&st->lock);
	st->err_piece = 0;
	st->err = err;
	memset(st->filled, 1, st->npieces);
	st->prefix = st->ended = st->npieces;
	gpufile__stream_flag_store(st->t, st->slot, st->seq + st->npieces);
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
}

/* An in-order read: waits until the stream has reached the request (the
 * work before it, and so the writes to the file among it, has run),
 * then gives the pieces to the fillers. */
static void reach(struct gpufile__stage *st)
{
	CUresult cr;

	if (!st->reached) {
		pieces_fail(st, st->queue_err);
		return;
	}
	cr = st->t->cuEventSynchronize(st->reached);
	gpufile__stream_event_put(st->reached);
	st->reached = NULL;
	if (cr != CUDA_SUCCESS) {
		/* Whether the snapshot's copies ended is not known. */
		st->span_lost |= st->snapshot;
		pieces_fail(st, gpufile__cuda_fail(
		                    cr, NULL, 0,
		                    "%s %s: waiting for the work "
		                    "queued on the stream before "
		                    "the request",
		                    stream_verb(st->is_write), st->h->path));
		return;
	}
	pieces_give(st, 0, st->npieces);
}

/* A write whose copies were all queued: each group's pieces go to the
 * fillers once its copy has run. Returns the result once every piece
 * given out is written. */
static ssize_t write_groups(struct gpufile__stage *st)
{
	uint32_t given = 0;
	ssize_t n = 0, rc;

	for (uint32_t g = 0; g < st->ngroups; g++) {
		const uint32_t first = g * st->per_group;
		const uint32_t count = st->npieces - first < st->per_group
		                           ? st->npieces - first
		                           : st->per_group;
		CUevent e = st->group_done[g] ? st->group_done[g] : st->event;
		CUresult cr = st->t->cuEventSynchronize(e);

		if (cr != CUDA_SUCCESS) {
			n = copies_failed(st, cr);
			break;
		}
		pieces_give(st, first, count);
		given += count;
	}
	/* After a failed wait, the pieces given out still end first. */
	rc = pieces_ended(st, given);
	return n < 0 ? n : rc;
}

ssize_t gpufile__stage_run(struct gpufile__stage *st)
{
	const struct gpufile__cuda *t = st->t;
	int released;
	ssize_t n;

	pthread_mutex_lock(&st->lock);
	while (!st->queue_done)
		pthread_cond_wait(&st->cond, &st->lock);
	pthread_mutex_unlock(&st->lock);
	/* The copies are waited for before the stream is let go: once the
	 * caller sees the request ended, gpufile touches none of its CUDA
	 * objects (the caller may destroy the stream, or the context, right
	 * away). After a read's last copy nothing reads the span; after a
	 * write's, the span holds the buffer's bytes, and only then are
	 * they written (none where a copy was not queued, or failed). */
	if (st->is_write) {
		n = copies_ended(st, st->queue_err ? st->queue_err
		                                   : write_groups(st));
	} else {
		if (st->in_order)
			reach(st);
		n = copies_ended(st, pieces_ended(st, st->npieces));
	}
	if (st->span.a && st->span_lost)
		span_lose(st->span);
	else if (st->span.a)
		span_give(st->span);
	st->span.a = NULL;
	gpufile__stats_request(st->path, st->is_write, n, st->npieces,
	                       st->asked, gpufile__now_ns() - st->start_ns);
	gpufile__stats_file_request(&st->h->stats_file, st->path, st->is_write,
	                            n, st->npieces);
	pthread_mutex_lock(&st->lock);
	released = st->released;
	pthread_mutex_unlock(&st->lock);
	if (released) { /* release_read: the stream went on already */
		gpufile__stream_flag_put(st->slot);
		return n;
	}
	/* Atomic: a caller may peek at *n_out before the stream gets
	 * there; it then sees the old value or the final one. */
	__atomic_store_n(st->n_out, n, __ATOMIC_RELEASE);
	/* The work after may run from here. */
	gpufile__stream_flag_release(t, st->slot, st->seq + st->npieces + 1);
	return n;
}
