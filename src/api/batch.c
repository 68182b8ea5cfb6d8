/*
 * Batches of small reads (gpufile_batch_*): many (handle, buffer, size,
 * offset) reads submitted at once, for host or device buffers.
 *
 * Why not one gpufile_pread per entry: a 4 KiB device read through the
 * staged path costs a bounce-buffer claim, its own cuMemcpyHtoDAsync +
 * synchronise and three more driver calls (on the calling thread, with
 * no wake-up since test_small_device), so 65,536 of them are 65,536 copy
 * calls and as many waits for the GPU. Here a batch is cut into chunks of
 * consecutive entries; each of the batch's own worker threads claims
 * chunks and, per round, reads up to BATCH_DEPTH entries with one
 * io_uring submission (many reads in flight, no thread per read), device
 * entries packed one after another into a pinned slot, and then copies
 * the slot to the GPU with one cuMemcpyHtoDAsync per run of entries whose
 * destinations are contiguous. Two slots per worker: the reads of round
 * k+1 run while the copies of round k are in flight. Host entries are
 * read straight into their destination.
 *
 * Entries that this scheme does not suit are read one by one with
 * gpufile_pread, on the batch's workers (so still in parallel): entries
 * whose file the path decision hands to cuFile, entries larger than a
 * slot (they gain nothing from packing, and gpufile_pread pipelines them),
 * and device entries of a second CUDA context.
 *
 * Threads: the batch owns nworkers threads, started at a submit as its
 * chunks need them (one per chunk, up to nthreads: a batch whose submits
 * have been of one chunk has one to start and wake) and joined by
 * gpufile_batch_free. Locks: batch.lock,
 * and pool.lock inside gpufile__handle_release_marks, never one while holding
 * the other; no I/O runs under either. Invariants:
 *   - an entry's result and message are written only by the worker that
 *     claimed its chunk (a WAY_BODY entry: the chunk of its group's
 *     lead), before its done flag is set (release); readers look at them
 *     only after seeing the flag (acquire);
 *   - a device entry is done only after the copy holding its bytes has
 *     completed (its slot's stream synchronised), so the caller never
 *     sees a count for bytes still on their way;
 *   - the batch is complete (b->complete, broadcast under the lock) only
 *     after every entry is done and the stats are recorded;
 *   - an entry counts on its handle's inflight (what gpufile_close waits
 *     for) from its submit until its done flag is set, which happens in
 *     one step with the release, under pool.lock.
 */
#define _GNU_SOURCE
#include "api/api.h"
#include "platform/cuda_shim.h"
#include "paths/cufile_shim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef GPUFILE_HAVE_LIBURING
#include <liburing.h>
#endif

/* Device bytes packed per round into one pinned slot. 2 MiB: a round of
 * 4 KiB entries is then limited by BATCH_DEPTH, one of 64 KiB entries by
 * the slot (32 reads), and 16 workers hold 64 MiB of pinned memory. */
#define SLOT_BYTES (2u << 20)
/* Reads in flight per worker (io_uring entries). */
#define BATCH_DEPTH 256u
/* A chunk (the unit workers claim): up to two rounds of entries. */
#define CHUNK_BYTES   (2 * SLOT_BYTES)
#define CHUNK_ENTRIES (2 * BATCH_DEPTH)
#define MAX_WORKERS   64u
/* I/Os per cuFile batch: cuFile's default io_batchsize (cufile.json). */
#define CUFILE_BATCH_IOS 128u

enum entry_way {
	WAY_HOST = 0,   /* io_uring (or pread) straight into buf */
	WAY_STAGED = 1, /* io_uring into a pinned slot, coalesced copies */
	WAY_SINGLE = 2, /* gpufile_pread of the entry alone */
	WAY_CUFILE = 3, /* cuFile's batch API */
	WAY_REMOTE = 4, /* a remote object's range, issued with the round's */
	/* Host memory from a server that ignores Range: every such entry of
	 * its handle read from one body by the worker of the group's lead
	 * (round_remote), each a body from the object's start otherwise. */
	WAY_BODY = 5,
};

struct entry {
	gpufile_t *h;
	char *buf;
	size_t size;
	int64_t offset;
	ssize_t result;
	char *msg;         /* why it failed (malloc'd), or NULL */
	void *cufile_fh;   /* WAY_CUFILE: the registered file */
	char *cufile_base; /* WAY_CUFILE: registered buffer holding buf */
	uint8_t way;
	uint8_t path; /* gpufile_path_t it is counted on */
	/* WAY_BODY: the lead of its group (its first entry) has body_n > 0,
	 * the group's entries being b->body[body_at, body_at + body_n). */
	unsigned body_at, body_n;
	atomic_int done;
};

struct slot {
	char *mem; /* pinned, SLOT_BYTES */
	CUstream stream;
	/* The contexts mem and stream were made in, with their ids: a batch
	 * may read into another device at its next submit, and a context
	 * may end under it (cuda_shim.h, gpufile__ctx_same). */
	CUcontext mem_ctx, stream_ctx;
	unsigned long long mem_id, stream_id;
	unsigned *pending; /* device entries waiting for this slot's copies */
	unsigned npending;
};

struct worker {
	struct gpufile_batch *b;
	pthread_t tid;
	int started;
	unsigned gen0; /* b->gen when started: submits before it are not its */
	struct slot slot[2];
	unsigned cur; /* slot to fill next */
	CUcontext ctx;
	unsigned *round; /* entry indexes of the round being read */
	/* cuFile's batch API: entries gathered, the batch, its I/Os. */
	unsigned *cf_idx;
	unsigned cf_n;
	CUfileBatchHandle_t cf_batch;
	int cf_state; /* 0 untried, 1 set up, -1 unusable: read singly */
	CUfileIOParams_t *cf_io;
	CUfileIOEvents_t *cf_ev;
#ifdef GPUFILE_HAVE_LIBURING
	struct io_uring ring;
	int ring_state; /* 0 untried, 1 usable, -1 not available */
#endif
};

struct gpufile_batch {
	unsigned capacity;
	struct entry *e;
	unsigned *chunk_start; /* nchunks + 1 boundaries */
	unsigned *body; /* entries of servers that ignore Range, by handle */
	unsigned n, nchunks;
	CUcontext staged_ctx; /* the context of staged entries */
	int staged_device;    /* its device, whose primary context the
	                       * slots' pinned memory is allocated in */
	CUcontext cufile_ctx; /* the context of cuFile batch entries */
	uint64_t start_ns;

	atomic_uint next_chunk;
	atomic_uint nended; /* entries done: the last one completes the batch */
	/* What gpufile_batch_poll says: nended, less the last entry until the
	 * batch is complete, so that a caller who polls n done may submit
	 * again, or wait with timeout 0, at once. */
	atomic_uint ndone;
	atomic_uint_fast64_t path_bytes[GPUFILE_PATH_COUNT];
	atomic_uint_fast64_t path_errors[GPUFILE_PATH_COUNT];
	atomic_int first_error[GPUFILE_PATH_COUNT];
	/* Entries counted on each path's request, and their size: set at
	 * submit, less those that fall back to gpufile_pread (it counts
	 * them itself). */
	atomic_uint_fast64_t path_entries[GPUFILE_PATH_COUNT];
	atomic_uint_fast64_t path_size[GPUFILE_PATH_COUNT];

	pthread_mutex_t lock; /* guards everything below */
	pthread_cond_t work;  /* a submit, or stop */
	pthread_cond_t ended; /* complete became 1 */
	unsigned gen;         /* submits so far */
	int stop;
	int busy;        /* submitted and not complete */
	int complete;    /* every entry of the last submit is done */
	unsigned active; /* workers between taking a submit and going idle */
	/* Workers that have taken the current gen (or were started after
	 * it): a submit may rewrite the entries and chunks only when every
	 * worker has, or one woken late for the previous submit could take
	 * a chunk of the next while it is being written. */
	unsigned caught_up;
	pthread_cond_t idle; /* active became 0 */
	unsigned nworkers;   /* started */
	unsigned nalloc;     /* workers in w */
	pid_t pid;           /* the process whose threads these are */
	struct worker *w;
	LIST_ENTRY(gpufile_batch) link; /* on batches.all */
};

/* Every batch not freed, for fork() (gpufile__batch_atfork_child). The
 * lock is taken alone (create, free) or by fork.c's prepare. */
static struct {
	pthread_mutex_t lock;
	LIST_HEAD(, gpufile_batch) all;
} batches = {.lock = PTHREAD_MUTEX_INITIALIZER};

void (*gpufile__batch_complete_hook)(gpufile_batch_t *b);

/* Worker threads of every batch, started and not yet ended: each holds
 * at most its two slots of pinned memory, which gpufile_pinned_bytes_max
 * counts (a slot's memory is allocated at its first device round and
 * kept until gpufile_batch_free). */
static atomic_size_t slot_holders;

size_t gpufile__batch_pinned_max(void)
{
	return atomic_load(&slot_holders) * 2 * (size_t)SLOT_BYTES;
}

static void set_msg(struct entry *e, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Sets e's message, as long as its text (the file's path in it is as long
 * as the caller's). Where no memory is left for it, e->msg stays NULL and
 * gpufile_batch_errmsg() gives the words of e->result's code instead. */
static void set_msg(struct entry *e, const char *fmt, ...)
{
	va_list ap;
	int n;

	free(e->msg);
	e->msg = NULL;
	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !(e->msg = malloc((size_t)n + 1)))
		return;
	va_start(ap, fmt);
	vsnprintf(e->msg, (size_t)n + 1, fmt, ap);
	va_end(ap);
}

/* Entry i's bytes or error, in the batch's request of its path. */
static void entry_count(struct gpufile_batch *b, unsigned i)
{
	struct entry *e = &b->e[i];

	if (e->way != WAY_SINGLE) /* else gpufile_pread counted it */
		gpufile__stats_file_request(&e->h->stats_file, e->path, 0,
		                            e->result, 1);
	if (e->way == WAY_SINGLE)
		; /* gpufile_pread counted it */
	else if (e->result >= 0)
		atomic_fetch_add_explicit(&b->path_bytes[e->path],
		                          (uint64_t)e->result,
		                          memory_order_relaxed);
	else {
		int zero = 0;
		atomic_fetch_add_explicit(&b->path_errors[e->path], 1,
		                          memory_order_relaxed);
		atomic_compare_exchange_strong(&b->first_error[e->path], &zero,
		                               (int)e->result);
	}
}

/* The last entries have ended: records the batch's requests and makes it
 * complete. */
static void batch_complete(struct gpufile_batch *b)
{
	const uint64_t ns = gpufile__now_ns() - b->start_ns;
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		int err = atomic_load(&b->first_error[p]);
		uint64_t entries = atomic_load(&b->path_entries[p]);

		if (!entries)
			continue;
		/* One request per path and batch, its tasks the entries. */
		gpufile__stats_request(
		    (gpufile_path_t)p, 0,
		    err ? err : (ssize_t)atomic_load(&b->path_bytes[p]),
		    entries, atomic_load(&b->path_size[p]), ns);
	}
	if (gpufile__batch_complete_hook)
		gpufile__batch_complete_hook(b);
	pthread_mutex_lock(&b->lock);
	b->complete = 1;
	b->busy = 0;
	/* After busy and complete (its release order publishes them): a
	 * poller that sees n sees them too. */
	atomic_fetch_add(&b->ndone, 1);
	pthread_cond_broadcast(&b->ended);
	pthread_mutex_unlock(&b->lock);
}

/* Entries released per hold of pool.lock. */
#define END_GROUP 64u

/* Called by the worker whose entries idx[0, n) just ended (results and
 * messages final); the one that ends the last completes the batch.
 * Their counts on their handles go through the pool: a gpufile_close
 * waiting for a handle sleeps on the pool's idle condition, and only a
 * release under pool.lock wakes it (a bare decrement left it asleep for
 * ever). Done flags are set in the same step, for batch_after_fork. A
 * group shares one hold of the lock: a round's up to 256 entries take it
 * 4 times, not 256, and every worker of every batch, and the pool, take
 * that lock. After this the handles may be freed: not touched again. */
static void entries_end(struct gpufile_batch *b, const unsigned *idx,
                        unsigned n)
{
	struct gpufile *h[END_GROUP];
	atomic_int *done[END_GROUP];

	if (!n)
		return;
	for (unsigned k = 0; k < n; k += END_GROUP) {
		const unsigned m = n - k < END_GROUP ? n - k : END_GROUP;

		for (unsigned j = 0; j < m; j++) {
			struct entry *e = &b->e[idx[k + j]];

			entry_count(b, idx[k + j]);
			h[j] = e->h;
			done[j] = &e->done;
		}
		gpufile__handle_release_marks(h, done, m);
	}
	if (atomic_fetch_add(&b->nended, n) + n != b->n) {
		atomic_fetch_add(&b->ndone, n);
		return;
	}
	atomic_fetch_add(&b->ndone, n - 1);
	batch_complete(b);
}

static void end_single(struct gpufile_batch *b, unsigned i)
{
	struct entry *e = &b->e[i];

	e->result = gpufile_pread(e->h, e->buf, e->size, e->offset);
	if (e->result < 0)
		set_msg(e, "batch entry %u: %s", i, gpufile_errmsg());
	entries_end(b, &i, 1);
}

/* A read that returned got (>= 0) of want bytes at off: finish it with
 * plain reads (a short read before end-of-file). */
static ssize_t finish_short(struct entry *e, char *dst, size_t got)
{
	ssize_t more;

	if (got == 0 || got >= e->size)
		return (ssize_t)got;
	more = gpufile__pread_full(e->h->fd, dst + got, e->size - got,
	                           e->offset + (int64_t)got);
	return more < 0 ? more : (ssize_t)(got + (size_t)more);
}

/* Entry i failed with err. Its message names the file, offset and size
 * (the header's promise), then why (NULL: err's own words). */
static void entry_failed(struct entry *e, unsigned i, ssize_t err,
                         const char *why)
{
	e->result = err;
	set_msg(e, "batch entry %u: reading %s at offset %lld (%zu bytes): %s",
	        i, e->h->path, (long long)e->offset, e->size,
	        why ? why : gpufile_strerror((int)err));
}

/* ---- the slots and their copies ---- */

/* Drops slot sl's stream and memory where their contexts have ended (the
 * driver freed them), and its stream where it belongs to a context other
 * than ctx (NULL: every one). No copy of the slot may still run. */
static void slot_drop(const struct gpufile__cuda *t, struct slot *sl,
                      CUcontext ctx)
{
	if (sl->stream &&
	    (!ctx || sl->stream_ctx != ctx ||
	     !gpufile__ctx_same(t, sl->stream_ctx, sl->stream_id))) {
		if (gpufile__ctx_same(t, sl->stream_ctx, sl->stream_id))
			t->cuStreamDestroy(sl->stream);
		sl->stream = NULL;
	}
	if (sl->mem && !gpufile__ctx_same(t, sl->mem_ctx, sl->mem_id))
		sl->mem = NULL;
}

/* Gives both slots pinned memory (in the staged device's primary
 * context, which gpufile holds: a context the program created could be
 * destroyed with it) and a stream in w->ctx. */
static int slot_setup(struct worker *w, const struct gpufile__cuda *t,
                      char *msg, size_t len)
{
	CUcontext mem_ctx = NULL;
	CUresult rc;
	int err;

	for (int s = 0; s < 2; s++) {
		struct slot *sl = &w->slot[s];

		slot_drop(t, sl, w->ctx);
		if (sl->mem)
			continue;
		/* Looked up only when memory is needed: not every round. */
		mem_ctx = w->ctx;
		if (w->b->staged_device >= 0 &&
		    (err = gpufile__primary_context(w->b->staged_device,
		                                    (void **)&mem_ctx))) {
			snprintf(msg, len, "%s", gpufile_errmsg());
			return err;
		}
		rc = t->cuCtxSetCurrent(mem_ctx);
		if (rc == CUDA_SUCCESS)
			rc = t->cuMemHostAlloc((void **)&sl->mem, SLOT_BYTES,
			                       CU_MEMHOSTALLOC_PORTABLE);
		if (rc != CUDA_SUCCESS) {
			sl->mem = NULL;
			return gpufile__cuda_fail(
			    rc, msg, len,
			    "cuMemHostAlloc of a %u-byte batch slot",
			    SLOT_BYTES);
		}
		sl->mem_ctx = mem_ctx;
		gpufile__ctx_id(t, mem_ctx, &sl->mem_id);
	}
	rc = t->cuCtxSetCurrent(w->ctx);
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(rc, msg, len, "cuCtxSetCurrent");
	for (int s = 0; s < 2; s++) {
		struct slot *sl = &w->slot[s];

		if (sl->stream)
			continue;
		rc = t->cuStreamCreate(&sl->stream, CU_STREAM_NON_BLOCKING);
		if (rc != CUDA_SUCCESS) {
			sl->stream = NULL;
			return gpufile__cuda_fail(rc, msg, len,
			                          "cuStreamCreate");
		}
		sl->stream_ctx = w->ctx;
		gpufile__ctx_id(t, w->ctx, &sl->stream_id);
	}
	return 0;
}

/* Waits for slot s's copies and ends the entries they carried. */
static void slot_settle(struct worker *w, unsigned s)
{
	struct slot *sl = &w->slot[s];
	const struct gpufile__cuda *t;
	CUresult rc = CUDA_SUCCESS;
	char why[256] = "copying to the GPU: ";
	const size_t at = strlen(why);

	if (!sl->npending)
		return;
	t = gpufile__cuda();
	if (t)
		rc = t->cuStreamSynchronize(sl->stream);
	if (t && rc != CUDA_SUCCESS)
		gpufile__cuda_fail(rc, why + at, sizeof(why) - at,
		                   "cuStreamSynchronize");
	else if (!t)
		snprintf(why + at, sizeof(why) - at, "%s", gpufile_errmsg());
	for (unsigned k = 0; k < sl->npending; k++) {
		unsigned i = sl->pending[k];
		struct entry *e = &w->b->e[i];

		if ((!t || rc != CUDA_SUCCESS) && e->result >= 0)
			entry_failed(e, i, GPUFILE_ECUDA, why);
	}
	entries_end(w->b, sl->pending, sl->npending);
	sl->npending = 0;
}

/* One copy of a round: entries idx[first, end) of it, len bytes from
 * the slot to dst. */
struct run {
	unsigned first, end;
	size_t len;
};

/* Copies run r one by one; entries of a failed copy fail. */
static void run_copy(struct worker *w, struct slot *sl, const unsigned *idx,
                     const size_t *place, const struct run *r,
                     const struct gpufile__cuda *t)
{
	struct entry *e = &w->b->e[idx[r->first]];
	CUresult rc = t ? t->cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)e->buf,
	                                       sl->mem + place[r->first],
	                                       r->len, sl->stream)
	                : CUDA_ERROR_NOT_INITIALIZED;
	char why[256] = "copying to the GPU: ";
	const size_t at = strlen(why);

	if (rc != CUDA_SUCCESS)
		gpufile__cuda_fail(rc, why + at, sizeof(why) - at,
		                   "cuMemcpyHtoDAsync of %zu bytes", r->len);
	for (unsigned m = r->first; m < r->end; m++) {
		if (rc != CUDA_SUCCESS)
			entry_failed(&w->b->e[idx[m]], idx[m], GPUFILE_ECUDA,
			             why);
		sl->pending[sl->npending++] = idx[m];
	}
}

/* Queues the copies of the round's device entries from slot s: one copy
 * per run of entries whose destinations follow each other (their slot
 * places always do), and all the runs of the round in one
 * cuMemcpyBatchAsync where the driver has it (scattered destinations
 * would otherwise cost a copy call each). Entries whose read failed or
 * came short end a run. */
static void slot_copy(struct worker *w, unsigned s, const unsigned *idx,
                      const size_t *place, unsigned n)
{
	struct gpufile_batch *b = w->b;
	struct slot *sl = &w->slot[s];
	const struct gpufile__cuda *t = gpufile__cuda();
	struct run runs[BATCH_DEPTH];
	unsigned nruns = 0, k = 0;

	while (k < n) {
		struct entry *e = &b->e[idx[k]];
		struct run *r = &runs[nruns];

		if (e->result <= 0) {
			sl->pending[sl->npending++] = idx[k];
			k++;
			continue;
		}
		r->first = k;
		r->end = k + 1;
		r->len = (size_t)e->result;
		while (r->end < n && (size_t)b->e[idx[r->end - 1]].result ==
		                         b->e[idx[r->end - 1]].size) {
			struct entry *p = &b->e[idx[r->end - 1]];
			struct entry *q = &b->e[idx[r->end]];

			if (q->result <= 0 || q->buf != p->buf + p->size)
				break;
			r->len += (size_t)q->result;
			r->end++;
		}
		k = r->end;
		nruns++;
	}
	if (nruns > 1 && t && t->cuMemcpyBatchAsync) {
		CUdeviceptr dsts[BATCH_DEPTH], srcs[BATCH_DEPTH];
		size_t sizes[BATCH_DEPTH], attr_idx = 0;
		struct CUmemcpyAttributes_st attr;

		memset(&attr, 0, sizeof(attr));
		attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
		for (unsigned m = 0; m < nruns; m++) {
			dsts[m] =
			    (CUdeviceptr)(uintptr_t)b->e[idx[runs[m].first]]
			        .buf;
			srcs[m] =
			    (CUdeviceptr)(uintptr_t)(sl->mem +
			                             place[runs[m].first]);
			sizes[m] = runs[m].len;
		}
		if (t->cuMemcpyBatchAsync(dsts, srcs, sizes, nruns, &attr,
		                          &attr_idx, 1,
		                          sl->stream) == CUDA_SUCCESS) {
			for (unsigned m = 0; m < nruns; m++)
				for (unsigned q = runs[m].first;
				     q < runs[m].end; q++)
					sl->pending[sl->npending++] = idx[q];
			return;
		}
		/* Refused: copy run by run. Copies the batch may have made
		 * already are made again, with the same bytes. */
	}
	for (unsigned m = 0; m < nruns; m++)
		run_copy(w, sl, idx, place, &runs[m], t);
}

/* ---- reading a round ---- */

/* The destinations of a round's host entries, faulted in before the
 * reads (gpufile__populate_dest): entries whose pages follow each other
 * or share one (fsspec's new bytes objects, allocated one after another;
 * a Zarr result's chunks) with one call for the run, not a mincore() and
 * a madvise() per entry (10,000 64 KiB ranges: 20,000 system calls). A
 * run never covers a page no entry of it writes into. */
struct dest_span {
	uintptr_t start, end; /* page-aligned; empty when equal */
};

static void span_flush(struct dest_span *s)
{
	if (s->end > s->start)
		gpufile__populate_dest((void *)s->start, s->end - s->start);
	s->start = s->end = 0;
}

static void span_add(struct dest_span *s, const char *p, size_t n)
{
	const uintptr_t page = GPUFILE_ALIGN;
	const uintptr_t a = (uintptr_t)p & ~(page - 1);
	const uintptr_t e = ((uintptr_t)p + n + page - 1) & ~(page - 1);

	if (!n)
		return;
	if (s->end > s->start && a <= s->end && e >= s->start) {
		if (a < s->start)
			s->start = a;
		if (e > s->end)
			s->end = e;
		return;
	}
	span_flush(s);
	s->start = a;
	s->end = e;
}

/* Faults in the destinations of the round's host entries, a run of
 * entries on following pages with one call. */
static void populate_round(struct gpufile_batch *b, const unsigned *idx,
                           unsigned n)
{
	struct dest_span span = {0, 0};

	for (unsigned k = 0; k < n; k++) {
		const struct entry *e = &b->e[idx[k]];

		if (e->way == WAY_HOST)
			span_add(&span, e->buf, e->size);
	}
	span_flush(&span);
}

/* Reads the round's entries with plain preads (no io_uring). */
static void round_pread(struct worker *w, const unsigned *idx,
                        const size_t *place, unsigned n, char *slot_mem)
{
	for (unsigned k = 0; k < n; k++) {
		struct entry *e = &w->b->e[idx[k]];
		char *dst = e->way == WAY_STAGED ? slot_mem + place[k] : e->buf;
		ssize_t got =
		    gpufile__pread_full(e->h->fd, dst, e->size, e->offset);

		if (got < 0)
			entry_failed(e, idx[k], got, NULL);
		else
			e->result = got;
	}
}

#ifdef GPUFILE_HAVE_LIBURING
/* Reads the round through the worker's ring: one submission for all of
 * them. user_data is the entry's index in the batch (tests match it).
 * Returns 0, or a negative error when the ring itself failed (then no
 * read of the round is left in flight, and the caller reads the round
 * with preads). */
static int round_uring(struct worker *w, const unsigned *idx,
                       const size_t *place, unsigned n, char *slot_mem)
{
	struct gpufile_batch *b = w->b;
	unsigned inflight = 0;
	int rc;

	for (unsigned k = 0; k < n; k++) {
		struct entry *e = &b->e[idx[k]];
		struct io_uring_sqe *sqe = io_uring_get_sqe(&w->ring);
		char *dst = e->way == WAY_STAGED ? slot_mem + place[k] : e->buf;

		/* The ring has BATCH_DEPTH entries and a round at most
		 * that many reads. */
		if (!sqe)
			return -EBUSY;
		io_uring_prep_read(sqe, e->h->fd, dst, (unsigned)e->size,
		                   (uint64_t)e->offset);
		io_uring_sqe_set_data64(sqe, idx[k]);
		e->result = 0;
	}
	while (inflight < n) {
		rc = gpufile__uring.submit(&w->ring);
		if (rc == -EINTR || rc == -EAGAIN)
			continue;
		if (rc < 0)
			break;
		inflight += (unsigned)rc;
		if (rc == 0)
			break;
	}
	if (inflight < n) {
		/* Entries never submitted: the ring is unusable. Reap what
		 * was, then let the caller read all of them again. */
		for (unsigned k = 0; k < inflight; k++) {
			struct io_uring_cqe *cqe;
			if (gpufile__uring.wait_cqe(&w->ring, &cqe) == 0)
				io_uring_cqe_seen(&w->ring, cqe);
		}
		return rc < 0 ? rc : -EIO;
	}
	for (unsigned k = 0; k < n; k++) {
		struct io_uring_cqe *cqe;
		unsigned i;
		int res;

		rc = gpufile__uring.wait_cqe(&w->ring, &cqe);
		if (rc == -EINTR) {
			k--;
			continue;
		}
		if (rc < 0)
			return rc; /* cannot happen with reads in flight */
		i = (unsigned)io_uring_cqe_get_data64(cqe);
		res = cqe->res;
		io_uring_cqe_seen(&w->ring, cqe);
		if (i >= b->n)
			continue;
		b->e[i].result = res;
	}
	for (unsigned k = 0; k < n; k++) {
		struct entry *e = &b->e[idx[k]];
		char *dst = e->way == WAY_STAGED ? slot_mem + place[k] : e->buf;

		if (e->result == -EINTR || e->result == -EAGAIN)
			e->result = gpufile__pread_full(e->h->fd, dst, e->size,
			                                e->offset);
		else if (e->result >= 0)
			e->result = finish_short(e, dst, (size_t)e->result);
		if (e->result < 0)
			entry_failed(e, idx[k], e->result, NULL);
	}
	return 0;
}
#endif

static void read_round(struct worker *w, const unsigned *idx,
                       const size_t *place, unsigned n, char *slot_mem)
{
	/* New memory (a new bytes object per entry) is faulted in before
	 * the reads, not a fault per page inside each read's copy. */
	populate_round(w->b, idx, n);
#ifdef GPUFILE_HAVE_LIBURING
	if (w->ring_state == 0)
		w->ring_state =
		    gpufile__uring.queue_init(BATCH_DEPTH, &w->ring, 0) == 0
		        ? 1
		        : -1;
	if (w->ring_state == 1) {
		if (round_uring(w, idx, place, n, slot_mem) == 0)
			return;
		io_uring_queue_exit(&w->ring);
		w->ring_state = -1;
	}
#endif
	round_pread(w, idx, place, n, slot_mem);
}

/* ---- the cuFile batch API ---- */

/* Entry i's result from a cuFile batch event: bytes, or an error named
 * with cuFile's status where ret holds one. */
static void cufile_event(struct gpufile_batch *b, unsigned i,
                         const CUfileIOEvents_t *ev,
                         const struct gpufile__cufile *t)
{
	struct entry *e = &b->e[i];
	ssize_t ret = (ssize_t)ev->ret;

	if (ev->status == CUFILE_COMPLETE && ret >= 0) {
		size_t got = (size_t)ret;

		/* A short count: finish it as cuFileRead would, stopping at
		 * end-of-file. */
		while (got > 0 && got < e->size) {
			ssize_t n = t->cuFileRead(
			    e->cufile_fh, e->cufile_base, e->size - got,
			    (off_t)(e->offset + (int64_t)got),
			    (off_t)(e->buf - e->cufile_base) + (off_t)got);
			if (n <= 0) {
				/* The errno (ENODATA, ...), as gpufile_pread
				 * reports it; -EIO for every -1 lost it. */
				if (n < 0)
					ret =
					    gpufile__cufile_io_error(n, errno);
				break;
			}
			got += (size_t)n;
		}
		if (ret >= 0) {
			e->result = (ssize_t)got;
			return;
		}
	}
	if (ret < 0 && -ret > CUFILEOP_BASE_ERR) {
		char why[128];

		snprintf(why, sizeof(why), "cuFile batch I/O failed: %s (%d)",
		         gpufile__cufile_status_name((int)-ret), (int)-ret);
		entry_failed(e, i, GPUFILE_ECUFILE, why);
	} else {
		entry_failed(e, i, ret < 0 ? ret : -EIO, NULL);
	}
}

/* Sets up the worker's cuFile batch at its first use: w->cf_state 1 when
 * it can be used, -1 when never (its entries are then read singly). */
static void cufile_setup(struct worker *w, const struct gpufile__cufile *t)
{
	/* Kept where made already: batch_after_fork sets cf_state to 0
	 * again, but these are the child's own copies. */
	if (!w->cf_io)
		w->cf_io = calloc(CUFILE_BATCH_IOS, sizeof(*w->cf_io));
	if (!w->cf_ev)
		w->cf_ev = calloc(CUFILE_BATCH_IOS, sizeof(*w->cf_ev));
	w->cf_state = -1;
	if (w->cf_io && w->cf_ev &&
	    t->cuFileBatchIOSetUp(&w->cf_batch, CUFILE_BATCH_IOS).err ==
	        CU_FILE_SUCCESS)
		w->cf_state = 1;
}

/* The I/O parameters of the n gathered entries, each with its index as
 * the cookie its event returns. */
static void cufile_fill(struct worker *w, unsigned n)
{
	struct gpufile_batch *b = w->b;

	for (unsigned k = 0; k < n; k++) {
		struct entry *e = &b->e[w->cf_idx[k]];
		CUfileIOParams_t *io = &w->cf_io[k];

		memset(io, 0, sizeof(*io));
		io->mode = CUFILE_BATCH;
		io->u.batch.devPtr_base = e->cufile_base;
		io->u.batch.file_offset = (off_t)e->offset;
		io->u.batch.devPtr_offset = (off_t)(e->buf - e->cufile_base);
		io->u.batch.size = e->size;
		io->fh = e->cufile_fh;
		io->opcode = CUFILE_READ;
		io->cookie = (void *)(uintptr_t)w->cf_idx[k];
	}
}

/* cuFile lost track of the worker's batch (GetStatus failed with rc, or
 * reported nothing): its I/Os not reported may still be running, into
 * buffers the caller takes as free once their entries fail, so they are
 * cancelled first; then the batch is destroyed (and this worker reads its
 * later cuFile entries singly). The n entries not done fail, saying so.
 */
static void cufile_lost(struct worker *w, const struct gpufile__cufile *t,
                        unsigned n, CUfileError_t rc)
{
	struct gpufile_batch *b = w->b;
	CUfileError_t cancel = t->cuFileBatchIOCancel(w->cf_batch);
	char why[256];
	unsigned m = 0;
	int len;

	t->cuFileBatchIODestroy(w->cf_batch);
	w->cf_batch = NULL;
	w->cf_state = -1;
	if (rc.err != CU_FILE_SUCCESS)
		len = snprintf(
		    why, sizeof(why), "cuFileBatchIOGetStatus failed: %s (%d)",
		    gpufile__cufile_status_name((int)rc.err), (int)rc.err);
	else
		len = snprintf(why, sizeof(why),
		               "cuFileBatchIOGetStatus reported no event for "
		               "it");
	if (cancel.err != CU_FILE_SUCCESS && len > 0 &&
	    (size_t)len < sizeof(why))
		snprintf(why + len, sizeof(why) - (size_t)len,
		         "; cuFileBatchIOCancel failed too: %s (%d)",
		         gpufile__cufile_status_name((int)cancel.err),
		         (int)cancel.err);
	for (unsigned k = 0; k < n; k++) {
		unsigned i = w->cf_idx[k];
		struct entry *e = &b->e[i];

		if (atomic_load(&e->done))
			continue;
		entry_failed(e, i, GPUFILE_ECUFILE, why);
		w->cf_idx[m++] = i;
	}
	entries_end(b, w->cf_idx, m);
}

/* Waits for the n submitted entries' events and ends each entry. */
static void cufile_reap(struct worker *w, const struct gpufile__cufile *t,
                        unsigned n)
{
	struct gpufile_batch *b = w->b;
	CUfileError_t rc = {CU_FILE_SUCCESS, 0};
	unsigned got = 0, ended[CUFILE_BATCH_IOS];

	while (got < n) {
		unsigned nr = n - got, m = 0;

		rc = t->cuFileBatchIOGetStatus(w->cf_batch, nr, &nr, w->cf_ev,
		                               NULL);
		if (rc.err != CU_FILE_SUCCESS || nr == 0)
			break;
		for (unsigned k = 0; k < nr && k < CUFILE_BATCH_IOS; k++) {
			unsigned i = (unsigned)(uintptr_t)w->cf_ev[k].cookie;

			if (i < b->n) {
				cufile_event(b, i, &w->cf_ev[k], t);
				ended[m++] = i;
			}
		}
		entries_end(b, ended, m);
		got += nr;
	}
	if (got < n)
		cufile_lost(w, t, n, rc);
}

/* Reads the worker's gathered cuFile entries with one cuFile batch. Where
 * the batch API cannot be used, each entry is read as gpufile_pread
 * would. */
static void cufile_flush(struct worker *w)
{
	struct gpufile_batch *b = w->b;
	const struct gpufile__cufile *t = gpufile__cufile_loaded();
	const struct gpufile__cuda *cu = gpufile__cuda_if_loaded();
	const unsigned n = w->cf_n;

	if (!n)
		return;
	w->cf_n = 0;
	/* cuFile maps device memory in the current context. */
	if (cu && b->cufile_ctx)
		cu->cuCtxSetCurrent(b->cufile_ctx);
	if (t && w->cf_state == 0)
		cufile_setup(w, t);
	if (t && w->cf_state == 1) {
		cufile_fill(w, n);
		if (t->cuFileBatchIOSubmit(w->cf_batch, n, w->cf_io, 0).err ==
		    CU_FILE_SUCCESS) {
			cufile_reap(w, t, n);
			return;
		}
		/* Nothing was started: read them singly. */
	}
	for (unsigned k = 0; k < n; k++) {
		struct entry *e = &b->e[w->cf_idx[k]];

		/* gpufile_pread counts it as a request of its own: out of
		 * the batch's (it was counted twice). Before its end, which
		 * the completing thread's reading of the counts follows. */
		atomic_fetch_sub(&b->path_entries[e->path], 1);
		atomic_fetch_sub(&b->path_size[e->path], e->size);
		e->way = WAY_SINGLE;
		end_single(b, w->cf_idx[k]);
	}
}

/* Gathers the next round from entries [*i, z) into w->round: up to
 * BATCH_DEPTH entries, device ones while they fit the slot (their places
 * in it into place, their count into *ndev). Entries read singly and
 * cuFile's are handed on as they come. Returns the round's size. */
static unsigned gather_round(struct worker *w, unsigned *i, unsigned z,
                             size_t *place, unsigned *ndev)
{
	struct gpufile_batch *b = w->b;
	unsigned n = 0;
	size_t used = 0;

	*ndev = 0;
	while (*i < z && n < BATCH_DEPTH) {
		struct entry *e = &b->e[*i];

		if (e->way == WAY_SINGLE) {
			end_single(b, (*i)++);
			continue;
		}
		if (e->way == WAY_CUFILE) {
			w->cf_idx[w->cf_n++] = (*i)++;
			if (w->cf_n == CUFILE_BATCH_IOS)
				cufile_flush(w);
			continue;
		}
		if (e->way == WAY_STAGED) {
			if (used + e->size > SLOT_BYTES)
				break;
			place[n] = used;
			used += e->size;
			(*ndev)++;
		}
		w->round[n++] = (*i)++;
	}
	return n;
}

/* A slot that could not be set up: the round's device entries fail with
 * err and msg; the host ones stay in the round. Returns its new size. */
static unsigned fail_staged(struct worker *w, unsigned n, int err,
                            const char *msg)
{
	struct gpufile_batch *b = w->b;
	unsigned nh = 0, nf = 0, failed[BATCH_DEPTH];

	for (unsigned k = 0; k < n; k++) {
		unsigned j = w->round[k];
		struct entry *e = &b->e[j];

		if (e->way == WAY_STAGED) {
			entry_failed(e, j, err, msg);
			failed[nf++] = j;
		} else {
			w->round[nh++] = j;
		}
	}
	entries_end(b, failed, nf);
	return nh;
}

/* After a round's reads: host entries are done; device ones once the
 * slot's copies have landed, which start here. */
static void end_round(struct worker *w, size_t *place, unsigned n)
{
	struct gpufile_batch *b = w->b;
	unsigned nd = 0, nh = 0, host[BATCH_DEPTH];

	for (unsigned k = 0; k < n; k++) {
		unsigned j = w->round[k];

		if (b->e[j].way != WAY_STAGED) {
			host[nh++] = j;
			continue;
		}
		w->round[nd] = j;
		place[nd++] = place[k];
	}
	entries_end(b, host, nh);
	if (nd) {
		slot_copy(w, w->cur, w->round, place, nd);
		w->cur ^= 1;
	}
}

/* Ends entries idx[0..n) of handle h, read as rr[0..n) by
 * gpufile__remote_read_ranges, which returned rc. */
static void remote_end(struct gpufile_batch *b, struct gpufile *h,
                       const unsigned *idx, struct gpufile__remote_range *rr,
                       unsigned n)
{
	const int rc = gpufile__remote_read_ranges(h, rr, n);

	for (unsigned k = 0; k < n; k++) {
		struct entry *e = &b->e[idx[k]];

		if (rc)
			entry_failed(e, idx[k], rc, gpufile_errmsg());
		else if (rr[k].result < 0)
			set_msg(e, "batch entry %u: %s", idx[k],
			        rr[k].msg
			            ? rr[k].msg
			            : gpufile_strerror((int)rr[k].result));
		if (!rc)
			e->result = rr[k].result;
		free(rr[k].msg);
	}
	entries_end(b, idx, n);
}

/* Reads and ends the group whose lead is entry i (WAY_BODY): one body of
 * its server serves them all (remote.c). */
static void body_group(struct gpufile_batch *b, unsigned i)
{
	const unsigned *idx = b->body + b->e[i].body_at;
	const unsigned n = b->e[i].body_n;
	struct gpufile__remote_range *rr = calloc(n, sizeof(*rr));

	if (!rr) {
		for (unsigned k = 0; k < n; k++)
			entry_failed(&b->e[idx[k]], idx[k], -ENOMEM,
			             "out of memory");
		entries_end(b, idx, n);
		return;
	}
	for (unsigned k = 0; k < n; k++) {
		const struct entry *e = &b->e[idx[k]];

		rr[k] = (struct gpufile__remote_range){
		    .buf = e->buf, .len = e->size, .off = e->offset};
	}
	remote_end(b, b->e[i].h, idx, rr, n);
	free(rr);
}

/* Reads the round's entries of remote objects (WAY_REMOTE) all at once,
 * each run of one handle's through its transfer engine (remote.c: up to
 * http_max_in_flight in flight), and the groups of WAY_BODY entries led
 * here, and ends them (the other WAY_BODY entries are their leads'); the
 * round keeps the others (their places with them). Returns its new
 * size. */
static unsigned round_remote(struct worker *w, unsigned n, size_t *place)
{
	struct gpufile_batch *b = w->b;
	struct gpufile__remote_range rr[BATCH_DEPTH];
	unsigned idx[BATCH_DEPTH], keep = 0, nr = 0;

	for (unsigned k = 0; k < n; k++) {
		const unsigned j = w->round[k];
		struct entry *e = &b->e[j];

		if (e->way == WAY_BODY) {
			if (e->body_n)
				body_group(b, j);
			continue;
		}
		if (e->way != WAY_REMOTE) {
			place[keep] = place[k];
			w->round[keep++] = j;
			continue;
		}
		rr[nr] = (struct gpufile__remote_range){
		    .buf = e->buf, .len = e->size, .off = e->offset};
		idx[nr++] = j;
	}
	for (unsigned a = 0, z; a < nr; a = z) {
		struct gpufile *h = b->e[idx[a]].h;

		for (z = a + 1; z < nr && b->e[idx[z]].h == h; z++)
			;
		remote_end(b, h, idx + a, rr + a, z - a);
	}
	return keep;
}

/* Runs entries [a, z) of the batch. */
static void run_chunk(struct worker *w, unsigned a, unsigned z)
{
	struct gpufile_batch *b = w->b;
	const struct gpufile__cuda *t = NULL;
	size_t place[BATCH_DEPTH];
	unsigned i = a;

	while (i < z) {
		unsigned ndev, n = gather_round(w, &i, z, place, &ndev);
		struct slot *sl = &w->slot[w->cur];
		char msg[256] = "";
		int setup_err = 0;

		n = round_remote(w, n, place);
		if (!n)
			continue;
		if (ndev) {
			/* The slot's last copies must have landed before
			 * its memory is read into again. */
			slot_settle(w, w->cur);
			if (!t)
				t = gpufile__cuda();
			w->ctx = b->staged_ctx;
			setup_err = t ? slot_setup(w, t, msg, sizeof(msg))
			              : GPUFILE_ENOCUDA;
			if (!t)
				snprintf(msg, sizeof(msg), "%s",
				         gpufile_errmsg());
		}
		if (setup_err)
			n = fail_staged(w, n, setup_err, msg);
		read_round(w, w->round, place, n, setup_err ? NULL : sl->mem);
		end_round(w, place, n);
	}
	cufile_flush(w);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct gpufile_batch *b = w->b;
	unsigned seen = w->gen0;

	pthread_mutex_lock(&b->lock);
	for (;;) {
		while (!b->stop && b->gen == seen)
			pthread_cond_wait(&b->work, &b->lock);
		if (b->stop)
			break;
		seen = b->gen;
		b->caught_up++;
		b->active++;
		pthread_mutex_unlock(&b->lock);
		for (;;) {
			unsigned c = atomic_fetch_add(&b->next_chunk, 1);
			if (c >= b->nchunks)
				break;
			run_chunk(w, b->chunk_start[c], b->chunk_start[c + 1]);
		}
		slot_settle(w, 0);
		slot_settle(w, 1);
		pthread_mutex_lock(&b->lock);
		if (--b->active == 0)
			pthread_cond_broadcast(&b->idle);
	}
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

static void worker_free(struct worker *w)
{
	const struct gpufile__cuda *t = gpufile__cuda_if_loaded();

	for (int s = 0; s < 2; s++) {
		struct slot *sl = &w->slot[s];

		if (t)
			slot_drop(t, sl, NULL);
		if (t && sl->mem)
			t->cuMemFreeHost(sl->mem);
		free(sl->pending);
	}
#ifdef GPUFILE_HAVE_LIBURING
	if (w->ring_state == 1)
		io_uring_queue_exit(&w->ring);
#endif
	if (w->cf_state == 1 && gpufile__cufile_loaded())
		gpufile__cufile_loaded()->cuFileBatchIODestroy(w->cf_batch);
	free(w->cf_io);
	free(w->cf_ev);
	free(w->cf_idx);
	free(w->round);
}

/* ---- the public functions ---- */

/*
 * A forked child holds a copy of b without its threads (fork copies only
 * the calling thread), with its locks in whatever state the parent's
 * threads left them, and with pinned memory, streams, io_uring rings and
 * a cuFile batch that belong to the parent. Make the copy the child's
 * own: fresh locks, no workers (the next submit starts new ones), the
 * parent's resources forgotten rather than freed. Entries in flight at
 * the fork were being read by the parent's threads only: in the child
 * they end with -ECANCELED, so that waiting for them does not hang.
 * Called at the top of every public function but create.
 */
static void batch_after_fork(struct gpufile_batch *b)
{
	const pid_t me = getpid();

	if (b->pid == me)
		return;
	b->pid = me;
	/* The parent's workers and their slots are not this process's. */
	atomic_fetch_sub(&slot_holders, b->nworkers);
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->work, NULL);
	pthread_cond_init(&b->ended, NULL);
	pthread_cond_init(&b->idle, NULL);
	b->nworkers = 0;
	b->active = 0;
	b->caught_up = 0;
	b->stop = 0;
	for (unsigned k = 0; k < b->nalloc; k++) {
		struct worker *w = &b->w[k];

		w->started = 0;
		for (int sl = 0; sl < 2; sl++) {
			w->slot[sl].mem = NULL;
			w->slot[sl].stream = NULL;
			w->slot[sl].npending = 0;
		}
		w->cur = 0;
		w->cf_n = 0;
		w->cf_state = 0;
		w->cf_batch = NULL;
#ifdef GPUFILE_HAVE_LIBURING
		/* The ring's memory is shared with the parent's: unmap the
		 * child's view and close its descriptor. */
		if (w->ring_state == 1)
			io_uring_queue_exit(&w->ring);
		w->ring_state = 0;
#endif
	}
	if (b->busy) {
		for (unsigned i = 0; i < b->n; i++) {
			struct entry *e = &b->e[i];
			atomic_int *done = &e->done;

			if (atomic_load(done))
				continue;
			entry_failed(e, i, -ECANCELED,
			             "the process forked while it was in "
			             "flight; the parent's threads read it");
			/* Not done: its release had not happened at the fork
			 * (gpufile__handle_release_marks sets done with it). */
			gpufile__handle_release_marks(&e->h, &done, 1);
		}
		atomic_store(&b->nended, b->n);
		atomic_store(&b->ndone, b->n);
		b->busy = 0;
		b->complete = 1;
	}
}

/* fork(): a child that closes a handle before any call on the batch
 * must not wait for entries only the parent's threads would end, so
 * every batch is made the child's own in the child handler, not at its
 * next call alone. fork.c calls the child handler last, with every other
 * library lock released (batch_after_fork takes pool.lock). */
void gpufile__batch_atfork_prepare(void)
{
	pthread_mutex_lock(&batches.lock);
}

void gpufile__batch_atfork_parent(void)
{
	pthread_mutex_unlock(&batches.lock);
}

void gpufile__batch_atfork_child(void)
{
	struct gpufile_batch *b;

	LIST_FOREACH (b, &batches.all, link)
		batch_after_fork(b);
	pthread_mutex_unlock(&batches.lock);
}

int gpufile_batch_create(gpufile_batch_t **out, unsigned capacity)
{
	struct gpufile_batch *b;

	if (!out)
		return gpufile__fail(-EINVAL, "gpufile_batch_create: out is "
		                              "NULL");
	*out = NULL;
	if (capacity == 0 || capacity > GPUFILE_BATCH_MAX)
		return gpufile__fail(-EINVAL,
		                     "gpufile_batch_create: capacity %u is out "
		                     "of range (1 to %u entries)",
		                     capacity, GPUFILE_BATCH_MAX);
	b = calloc(1, sizeof(*b));
	if (!b)
		return gpufile__fail(-ENOMEM, "gpufile_batch_create: out of "
		                              "memory");
	b->capacity = capacity;
	b->e = calloc(capacity, sizeof(*b->e));
	b->chunk_start = calloc((size_t)capacity + 1, sizeof(unsigned));
	b->body = calloc(capacity, sizeof(unsigned));
	if (!b->e || !b->chunk_start || !b->body) {
		free(b->e);
		free(b->chunk_start);
		free(b->body);
		free(b);
		return gpufile__fail(-ENOMEM,
		                     "gpufile_batch_create: out of memory for "
		                     "%u entries",
		                     capacity);
	}
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->work, NULL);
	pthread_cond_init(&b->ended, NULL);
	pthread_cond_init(&b->idle, NULL);
	b->complete = 1;
	b->pid = getpid();
	pthread_mutex_lock(&batches.lock);
	LIST_INSERT_HEAD(&batches.all, b, link);
	pthread_mutex_unlock(&batches.lock);
	*out = b;
	return 0;
}

/* Allocates want workers and their arrays into b->w, all or none: a
 * failure frees what was made, so that the next submit tries again (it
 * once kept b->w, and the next submit started workers whose arrays were
 * NULL). */
static int alloc_workers(struct gpufile_batch *b, unsigned want)
{
	b->w = calloc(want, sizeof(*b->w));
	if (!b->w)
		goto oom;
	b->nalloc = want;
	for (unsigned k = 0; k < want; k++) {
		struct worker *w = &b->w[k];

		w->b = b;
		w->round = malloc(BATCH_DEPTH * sizeof(unsigned));
		w->cf_idx = malloc(CUFILE_BATCH_IOS * sizeof(unsigned));
		w->slot[0].pending = malloc(BATCH_DEPTH * sizeof(unsigned));
		w->slot[1].pending = malloc(BATCH_DEPTH * sizeof(unsigned));
		if (!w->round || !w->cf_idx || !w->slot[0].pending ||
		    !w->slot[1].pending)
			goto oom;
	}
	return 0;
oom:
	for (unsigned k = 0; k < b->nalloc; k++)
		worker_free(&b->w[k]);
	free(b->w);
	b->w = NULL;
	b->nalloc = 0;
	return gpufile__fail(-ENOMEM,
	                     "batch: out of memory for the arrays of %u "
	                     "workers (the nthreads setting)",
	                     want);
}

/* Starts workers until need of them run, need at most want (nthreads,
 * the workers allocated at the first submit). Only the submitting thread
 * runs this, while none of b's entries is in flight and every worker
 * started has taken the last submit (submit_ready): a worker started
 * here is as one started with the batch. A worker per chunk: starting
 * and waking threads that find no chunk cost a batch of one small entry
 * more than its read (each thread start, and at each submit each wake,
 * and the submit's wait for every worker to have taken the last one).
 * Workers once started stay: a later submit of fewer chunks wakes them
 * all. */
static int start_workers(struct gpufile_batch *b, unsigned want, unsigned need)
{
	int rc;

	if (need > want)
		need = want;
	if (b->nworkers >= need)
		return 0;
	if (!b->w && (rc = alloc_workers(b, want)))
		return rc;
	if (need > b->nalloc)
		need = b->nalloc;
	for (unsigned k = b->nworkers; k < need; k++) {
		struct worker *w = &b->w[k];

		/* Only a later submit wakes it: in a forked child gen counts
		 * the parent's submits already. */
		w->gen0 = b->gen;
		if (pthread_create(&w->tid, NULL, worker_main, w) != 0)
			break; /* fewer workers do the same work */
		w->started = 1;
		atomic_fetch_add(&slot_holders, 1);
		pthread_mutex_lock(&b->lock);
		b->nworkers = k + 1;
		b->caught_up++; /* it starts at the current gen */
		pthread_mutex_unlock(&b->lock);
	}
	if (!b->nworkers)
		return gpufile__fail(-EAGAIN, "batch: cannot start a worker "
		                              "thread");
	return 0;
}

/* Decides how entry i is read, checking it. cache remembers the last
 * decision so that entries alike (same file, same kind of memory) do not
 * each ask the driver. Returns 0 or an error naming the entry. */
struct decision {
	gpufile_t *h;
	int kind_device; /* device (or managed) memory */
	int above;       /* size >= gds_threshold */
	void *ctx;
	uint8_t way, path;
	int valid;
	/* The device allocation last classified: entries inside it are
	 * device memory of ctx without asking the driver again (65,536
	 * cuPointerGetAttributes calls cost more than reading 4 KiB each
	 * from the page cache). */
	uintptr_t range_start, range_end;
	gpufile_mem_t range_kind;
	int range_device;
	void *range_ctx;
};

/* Classifies buf as gpufile__classify does, through the cached range when
 * [buf, buf+size) lies in it; else asks the driver, and for device memory
 * also for its allocation's range (RANGE_START_ADDR, RANGE_SIZE). */
static int classify_cached(const void *buf, size_t size, struct decision *c,
                           gpufile_mem_t *kind, int *device, void **ctx)
{
	const uintptr_t p = (uintptr_t)buf;
	const struct gpufile__cuda *t;
	CUdeviceptr start = 0;
	size_t len = 0;
	int attrs[2] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
	                CU_POINTER_ATTRIBUTE_RANGE_SIZE};
	void *data[2] = {&start, &len};
	int rc;

	if (c->range_end && p >= c->range_start && p < c->range_end &&
	    size <= c->range_end - p) {
		*kind = c->range_kind;
		*device = c->range_device;
		*ctx = c->range_ctx;
		return 0;
	}
	rc = gpufile__classify(buf, kind, device, ctx);
	if (rc || (*kind != GPUFILE_MEM_DEVICE && *kind != GPUFILE_MEM_MANAGED))
		return rc;
	t = gpufile__cuda_if_loaded();
	if (t &&
	    t->cuPointerGetAttributes(2, attrs, data, (CUdeviceptr)p) ==
	        CUDA_SUCCESS &&
	    len && p >= start && p - start < len) {
		c->range_start = (uintptr_t)start;
		c->range_end = (uintptr_t)start + len;
		c->range_kind = *kind;
		c->range_device = *device;
		c->range_ctx = *ctx;
	}
	return 0;
}

/* Checks entry i's fields: returns 0 or an error naming the entry. */
static int check_entry(unsigned i, const gpufile_batch_entry_t *in)
{
	if (!in->file)
		return gpufile__fail(-EINVAL, "batch entry %u: handle is NULL",
		                     i);
	if (!in->buf && in->size)
		return gpufile__fail(-EFAULT,
		                     "batch entry %u: reading %s: buffer is "
		                     "NULL",
		                     i, in->file->path);
	if (in->offset < 0 || in->size > (size_t)INT64_MAX ||
	    (int64_t)in->size > INT64_MAX - in->offset)
		return gpufile__fail(-EINVAL,
		                     "batch entry %u: reading %s: offset %lld "
		                     "with size %zu is out of range",
		                     i, in->file->path, (long long)in->offset,
		                     in->size);
	if (!in->file->readable)
		return gpufile__fail(-EBADF,
		                     "batch entry %u: reading %s: the file "
		                     "was not opened for reading",
		                     i, in->file->path);
	return 0;
}

/* Copies the caller's entry into e and clears the last submit's result. */
static void entry_init(struct entry *e, const gpufile_batch_entry_t *in)
{
	e->h = in->file;
	e->buf = in->buf;
	e->size = in->size;
	e->offset = in->offset;
	e->result = 0;
	free(e->msg);
	e->msg = NULL;
	e->body_at = e->body_n = 0;
	atomic_init(&e->done, 0);
}

/* The way of an entry the path decision sent to cuFile: its batch API
 * when libcufile has one and the entry shares the batch's context. */
static uint8_t cufile_way(struct gpufile_batch *b, void *cuda_ctx)
{
	const struct gpufile__cufile *t = gpufile__cufile_loaded();
	uint8_t way = t && (t->optional & GPUFILE__CUFILE_HAS_BATCH)
	                  ? WAY_CUFILE
	                  : WAY_SINGLE;

	if (way == WAY_CUFILE && !b->cufile_ctx)
		b->cufile_ctx = cuda_ctx;
	if (way == WAY_CUFILE && cuda_ctx != b->cufile_ctx)
		way = WAY_SINGLE;
	return way;
}

/* Runs the one path decision (file.c) on device entry i, whose memory
 * belongs to ctx, and remembers it in cache for the entries alike. */
static int decide_device(struct gpufile_batch *b, unsigned i,
                         const gpufile_batch_entry_t *in,
                         const struct gpufile__settings *cfg,
                         struct decision *cache, void *ctx)
{
	struct entry *e = &b->e[i];
	struct gpufile__request r;
	int rc;

	rc = gpufile__request_prepare(&r, in->file, in->buf, in->size,
	                              in->offset, 0);
	if (rc)
		return gpufile__fail(rc, "batch entry %u: %s", i,
		                     gpufile_errmsg());
	gpufile__request_destroy(&r);
	e->path = (uint8_t)r.path;
	e->way = WAY_STAGED;
	if (r.path == GPUFILE_PATH_CUFILE)
		e->way = cufile_way(b, r.cuda_ctx);
	/* Only the decision fields: the range stays. */
	cache->h = in->file;
	cache->kind_device = 1;
	cache->above = in->size >= cfg->gds_threshold;
	cache->ctx = ctx;
	cache->way = e->way;
	cache->path = e->path;
	cache->valid = 1;
	if (e->way == WAY_STAGED && !b->staged_ctx) {
		b->staged_ctx = r.cuda_ctx;
		b->staged_device = r.device;
	}
	if (e->way == WAY_STAGED && r.cuda_ctx != b->staged_ctx)
		cache->way = e->way = WAY_SINGLE;
	return 0;
}

/* 1 when entry e reads from a server that ignores Range. */
static int rangeless(const struct entry *e)
{
	return e->h->remote && !e->h->source_ops &&
	       gpufile__remote_source(e->h) == GPUFILE__SOURCE_REMOTE_STREAM;
}

static int decide(struct gpufile_batch *b, unsigned i,
                  const gpufile_batch_entry_t *in,
                  const struct gpufile__settings *cfg, struct decision *cache)
{
	struct entry *e = &b->e[i];
	gpufile_mem_t kind;
	int device, rc;
	void *ctx;

	rc = check_entry(i, in);
	if (rc)
		return rc;
	entry_init(e, in);
	rc = classify_cached(in->buf, in->size, cache, &kind, &device, &ctx);
	if (rc)
		return gpufile__fail(rc, "batch entry %u: %s", i,
		                     gpufile_errmsg());
	if (in->file->remote) {
		/* A remote object has no descriptor to hand io_uring: a
		 * round's host entries go to its transfer engine together
		 * (round_remote); device ones are read as gpufile_pread
		 * reads them (remote.c), which counts them. */
		const int host =
		    kind == GPUFILE_MEM_HOST || kind == GPUFILE_MEM_PINNED;

		e->path = host ? GPUFILE_PATH_REMOTE : GPUFILE_PATH_HOST;
		e->way = host ? WAY_REMOTE : WAY_SINGLE;
		if (host && rangeless(e))
			e->way = WAY_BODY;
		return 0;
	}
	if (kind == GPUFILE_MEM_HOST || kind == GPUFILE_MEM_PINNED) {
		e->path = GPUFILE_PATH_HOST;
		e->way = in->size > SLOT_BYTES ? WAY_SINGLE : WAY_HOST;
		return 0;
	}
	if (cache->valid && cache->h == in->file && cache->kind_device &&
	    cache->ctx == ctx &&
	    cache->above == (in->size >= cfg->gds_threshold)) {
		e->path = cache->path;
		e->way = cache->way;
	} else {
		rc = decide_device(b, i, in, cfg, cache, ctx);
		if (rc)
			return rc;
	}
	if (e->way == WAY_STAGED && in->size > SLOT_BYTES)
		e->way = WAY_SINGLE;
	if (e->way == WAY_CUFILE) {
		char *base = gpufile__cufile_buf_base(in->buf, in->size);

		e->cufile_fh = in->file->cufile_handle;
		e->cufile_base = base ? base : in->buf;
	}
	return 0;
}

/* Checks submit's arguments and that the batch is idle: its last entries
 * done and its workers back asleep. Returns 0 or an error. */
static int submit_ready(gpufile_batch_t *b,
                        const gpufile_batch_entry_t *entries, unsigned n)
{
	int busy;

	if (!b)
		return gpufile__fail(-EINVAL, "gpufile_batch_submit: batch is "
		                              "NULL");
	if (!entries && n)
		return gpufile__fail(-EINVAL, "gpufile_batch_submit: entries "
		                              "is NULL");
	if (n > b->capacity)
		return gpufile__fail(-EINVAL,
		                     "gpufile_batch_submit: %u entries exceed "
		                     "the batch's capacity of %u",
		                     n, b->capacity);
	batch_after_fork(b);
	pthread_mutex_lock(&b->lock);
	busy = b->busy;
	/* Workers that ended the last entry may still be on their way back
	 * to sleep, reading nchunks, and a worker woken for the last submit
	 * may not have taken it yet (the others did all its chunks): let
	 * every one take it and get back first. Each that takes it ends by
	 * making active 0 again, which signals idle. */
	while (!busy && (b->active || b->caught_up < b->nworkers))
		pthread_cond_wait(&b->idle, &b->lock);
	pthread_mutex_unlock(&b->lock);
	if (busy)
		return gpufile__fail(-EBUSY,
		                     "gpufile_batch_submit: the batch's "
		                     "previous %u entries are still in flight "
		                     "(wait for them first)",
		                     b->n);
	return 0;
}

static int by_handle(const void *a, const void *b, void *arg)
{
	const struct entry *e = arg;
	const unsigned i = *(const unsigned *)a, j = *(const unsigned *)b;
	const uintptr_t x = (uintptr_t)e[i].h, y = (uintptr_t)e[j].h;

	return x != y ? (x < y ? -1 : 1) : (i > j) - (i < j);
}

/* Groups the entries of each server that ignores Range (WAY_BODY) for one
 * body each (round_remote), their first entry the lead. A device entry
 * is read as gpufile_pread reads it, a body of its own: refused beside
 * any other entry of its object, whose bodies would each download it
 * from its start. Returns 0 or an error naming the entry. */
static int group_bodies(gpufile_batch_t *b, unsigned n)
{
	unsigned nb = 0;

	for (unsigned i = 0; i < n; i++)
		if (rangeless(&b->e[i]))
			b->body[nb++] = i;
	qsort_r(b->body, nb, sizeof(*b->body), by_handle, b->e);
	for (unsigned a = 0, z; a < nb; a = z) {
		struct entry *lead = &b->e[b->body[a]];

		for (z = a + 1; z < nb && b->e[b->body[z]].h == lead->h; z++)
			if (b->e[b->body[z]].way == WAY_SINGLE ||
			    lead->way == WAY_SINGLE) {
				const unsigned i = lead->way == WAY_SINGLE
				                       ? b->body[a]
				                       : b->body[z];

				return gpufile__fail(
				    -EINVAL,
				    "batch entry %u: %s ignores Range requests "
				    "(it answers one with HTTP 200 and the "
				    "whole object), so a device entry of it "
				    "downloads the object from its start, and "
				    "this batch has other entries of it: read "
				    "it with one gpufile_pread, into host "
				    "memory (a batch's host entries of one "
				    "object share one body), or from a server "
				    "that honours Range",
				    i, lead->h->path);
			}
		lead->body_at = a;
		lead->body_n = lead->way == WAY_BODY ? z - a : 0;
	}
	return 0;
}

/* Decides every entry's way and counts the entries and bytes of each path
 * (those read singly are counted by gpufile_pread). */
static int decide_all(gpufile_batch_t *b, const gpufile_batch_entry_t *entries,
                      unsigned n, const struct gpufile__settings *cfg)
{
	uint64_t count[GPUFILE_PATH_COUNT] = {0},
	         size[GPUFILE_PATH_COUNT] = {0};
	struct decision cache = {0};
	int rc;

	b->staged_ctx = NULL;
	b->staged_device = -1;
	b->cufile_ctx = NULL;
	for (unsigned i = 0; i < n; i++) {
		rc = decide(b, i, &entries[i], cfg, &cache);
		if (rc)
			return rc;
		if (b->e[i].way == WAY_SINGLE)
			continue;
		count[b->e[i].path]++;
		size[b->e[i].path] += entries[i].size;
	}
	rc = group_bodies(b, n);
	if (rc)
		return rc;
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		atomic_store(&b->path_entries[p], count[p]);
		atomic_store(&b->path_size[p], size[p]);
	}
	return 0;
}

/* Cuts the n entries into chunks of consecutive entries, by bytes and
 * count. Returns the number of chunks. */
static unsigned cut_chunks(gpufile_batch_t *b, unsigned n)
{
	unsigned nchunks = 0;
	size_t bytes = 0;

	for (unsigned i = 0, count = 0; i < n; i++) {
		if (count == 0)
			b->chunk_start[nchunks++] = i;
		bytes += b->e[i].size;
		if (++count == CHUNK_ENTRIES || bytes >= CHUNK_BYTES)
			count = 0, bytes = 0;
	}
	b->chunk_start[nchunks] = n;
	return nchunks;
}

/* Zeroes the counters the workers add to, and marks each entry's handle
 * busy until its entry is done. */
static void reset_progress(gpufile_batch_t *b, unsigned n)
{
	b->start_ns = gpufile__now_ns();
	atomic_store(&b->next_chunk, 0);
	atomic_store(&b->nended, 0);
	atomic_store(&b->ndone, 0);
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		atomic_store(&b->path_bytes[p], 0);
		atomic_store(&b->path_errors[p], 0);
		atomic_store(&b->first_error[p], 0);
	}
	for (unsigned i = 0; i < n; i++)
		atomic_fetch_add(&b->e[i].h->inflight, 1);
}

/* The reason, once per submit and path, in the file record of the first
 * entry on that path, where that handle's device path is not decided yet
 * (gpufile__stats_file_note): a device entry's decision was recorded by
 * the path decision itself (file.c). A new record per submit (what
 * gpufile__stats_file made when the handle's was no longer pending)
 * counted every submit in files_opened and pushed the records of the
 * handles open out of the 64 kept. */
static void record_reasons(gpufile_batch_t *b, unsigned n)
{
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		char why[256];

		if (!atomic_load(&b->path_entries[p]))
			continue;
		for (unsigned i = 0; i < n; i++) {
			if (b->e[i].path != p || b->e[i].way == WAY_SINGLE)
				continue;
			snprintf(
			    why, sizeof(why), "%s: batch of %llu reads (%s)",
			    gpufile_path_name((gpufile_path_t)p),
			    (unsigned long long)atomic_load(
			        &b->path_entries[p]),
			    p == GPUFILE_PATH_HOST
			        ? "io_uring, into the buffers"
			    : p == GPUFILE_PATH_CUFILE ? "cuFile batch API"
			    : p == GPUFILE_PATH_REMOTE
			        ? "HTTP ranges issued together"
			        : "io_uring, pinned slots, coalesced copies");
			gpufile__stats_file_note(b->e[i].h->path,
			                         (gpufile_path_t)p, why);
			break;
		}
	}
}

int gpufile_batch_submit(gpufile_batch_t *b,
                         const gpufile_batch_entry_t *entries, unsigned n)
{
	struct gpufile__settings cfg;
	unsigned nchunks;
	int rc;

	rc = submit_ready(b, entries, n);
	if (rc)
		return rc;
	rc = gpufile__settings(&cfg);
	if (rc)
		return rc;
	rc = decide_all(b, entries, n, &cfg);
	/* Every worker is idle and has taken the last submit (submit_ready):
	 * none reads the chunks while they are cut. */
	nchunks = rc ? 0 : cut_chunks(b, n);
	if (rc == 0 && n) {
		unsigned want =
		    cfg.nthreads < MAX_WORKERS ? cfg.nthreads : MAX_WORKERS;
		rc = start_workers(b, want ? want : 1, nchunks);
	}
	if (rc) {
		/* Refused, nothing started: no entries, none done. */
		b->n = 0;
		atomic_store(&b->ndone, 0);
		return rc;
	}
	b->n = n;
	b->nchunks = nchunks;
	reset_progress(b, n);
	record_reasons(b, n);
	pthread_mutex_lock(&b->lock);
	b->complete = n == 0;
	b->busy = n != 0;
	b->gen++;
	b->caught_up = 0;
	pthread_cond_broadcast(&b->work);
	pthread_mutex_unlock(&b->lock);
	return 0;
}

int gpufile_batch_poll(gpufile_batch_t *b)
{
	if (!b)
		return gpufile__fail(-EINVAL, "gpufile_batch_poll: batch is "
		                              "NULL");
	batch_after_fork(b);
	return (int)atomic_load(&b->ndone);
}

int gpufile_batch_wait(gpufile_batch_t *b, long timeout_ms)
{
	struct timespec until;
	int rc = 0;

	if (!b)
		return gpufile__fail(-EINVAL, "gpufile_batch_wait: batch is "
		                              "NULL");
	batch_after_fork(b);
	if (timeout_ms > 0)
		gpufile__deadline(timeout_ms, &until);
	pthread_mutex_lock(&b->lock);
	while (!b->complete && rc == 0) {
		if (timeout_ms == 0)
			rc = ETIMEDOUT;
		else if (timeout_ms < 0)
			pthread_cond_wait(&b->ended, &b->lock);
		else
			rc =
			    pthread_cond_timedwait(&b->ended, &b->lock, &until);
	}
	rc = b->complete ? (int)b->n : -ETIMEDOUT;
	pthread_mutex_unlock(&b->lock);
	if (rc < 0)
		return gpufile__fail(rc,
		                     "gpufile_batch_wait: %u of %u entries "
		                     "done after %ld ms",
		                     atomic_load(&b->ndone), b->n, timeout_ms);
	return rc;
}

ssize_t gpufile_batch_result(gpufile_batch_t *b, unsigned i)
{
	if (!b)
		return gpufile__fail(-EINVAL, "gpufile_batch_result: batch is "
		                              "NULL");
	/* No batch_after_fork (a getpid() system call: once per entry, the
	 * caller's cost of 10,000 results): the fork handler made every
	 * batch the child's own already (gpufile__batch_atfork_child), and
	 * this reads an entry's done flag and result, taking no lock. */
	if (i >= b->n)
		return gpufile__fail(-EINVAL,
		                     "gpufile_batch_result: entry %u is out of "
		                     "range (%u entries submitted)",
		                     i, b->n);
	if (!atomic_load_explicit(&b->e[i].done, memory_order_acquire))
		return -EINPROGRESS;
	return b->e[i].result;
}

const char *gpufile_batch_errmsg(gpufile_batch_t *b, unsigned i)
{
	if (!b)
		return NULL;
	/* No batch_after_fork: as gpufile_batch_result. */
	if (i >= b->n ||
	    !atomic_load_explicit(&b->e[i].done, memory_order_acquire))
		return NULL;
	if (!b->e[i].msg && b->e[i].result < 0) /* see set_msg */
		return gpufile_strerror((int)b->e[i].result);
	return b->e[i].msg;
}

void gpufile_batch_free(gpufile_batch_t *b)
{
	if (!b)
		return;
	batch_after_fork(b);
	gpufile_batch_wait(b, -1);
	pthread_mutex_lock(&batches.lock);
	LIST_REMOVE(b, link);
	pthread_mutex_unlock(&batches.lock);
	pthread_mutex_lock(&b->lock);
	b->stop = 1;
	pthread_cond_broadcast(&b->work);
	pthread_mutex_unlock(&b->lock);
	for (unsigned k = 0; b->w && k < b->nworkers; k++)
		if (b->w[k].started)
			pthread_join(b->w[k].tid, NULL);
	for (unsigned k = 0; k < b->nalloc; k++)
		worker_free(&b->w[k]);
	atomic_fetch_sub(&slot_holders, b->nworkers);
	for (unsigned i = 0; i < b->capacity; i++)
		free(b->e[i].msg);
	free(b->w);
	free(b->e);
	free(b->chunk_start);
	free(b->body);
	pthread_mutex_destroy(&b->lock);
	pthread_cond_destroy(&b->work);
	pthread_cond_destroy(&b->ended);
	pthread_cond_destroy(&b->idle);
	free(b);
}
