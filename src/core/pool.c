/*
 * The worker pool and the life of a request.
 *
 * A request is split into tasks at multiples of task_size in the file.
 * Queued requests form a FIFO list; a worker claims the next task of the
 * request at the head, and a request leaves the list once its last task is
 * claimed (or once one of its tasks failed). Tasks are claimed lazily, so
 * memory does not grow with the request's size, and the number of requests
 * in flight is bounded by max_inflight (submitters wait: back-pressure).
 *
 * Lock order: pool.lock, then a request's lock. No lock is held while a
 * task moves bytes, and no user code ever runs on a worker. (The order
 * across modules, which the fork handlers follow, is written in fork.c.)
 *
 * Invariants:
 *   - a request completes (done = 1, under its lock, with a broadcast)
 *     only after every one of its tasks has ended, so nothing writes into
 *     the caller's buffer after the caller has seen the result;
 *   - the completing thread touches the request for the last time when it
 *     releases the request's lock after the broadcast;
 *   - a request's tasks are credited in the statistics (the process's
 *     and its file's) as each ends, before it counts as ended, and the
 *     request after its last task;
 *   - the error kept is that of the lowest-offset task that failed, and
 *     every task below that offset runs: a failure skips only the tasks
 *     above it. (Skipping every task not yet started made the error
 *     depend on scheduling: a thread that had claimed a lower task but
 *     not yet started it skipped it once a higher task failed, and the
 *     higher task's error was returned; test_errors saw -ENXIO for
 *     -EIO once in ~22 runs under ASan on a loaded machine.)
 *   - tasks of a read that start at or above an end of file a task found
 *     are not run (a read of INT64_MAX bytes of a small file is a few
 *     tasks, not 2^43), and an error at or above the end of file is not
 *     the result: the read ends there, however the tasks were scheduled;
 *   - a request is on the active list from submission until it
 *     completes; completion leaves the list, the counts and sets done
 *     under pool.lock, so a fork sees each request either finished or
 *     on the list (a forked child cancels those: its workers are gone).
 */
#define _GNU_SOURCE
#include "core/core.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct {
	pthread_mutex_t lock;
	pthread_cond_t work;   /* a task was queued, or workers must exit */
	pthread_cond_t space;  /* a request ended: room for one more */
	pthread_cond_t exited; /* a worker exited */
	pthread_cond_t idle;   /* some handle's inflight dropped to 0 */
	/* Queued requests, oldest first; the requests counted by inflight. */
	TAILQ_HEAD(, gpufile__request) queue;
	LIST_HEAD(, gpufile__request) active;
	unsigned nworkers; /* running and taking tasks */
	unsigned exiting;  /* left the count, still flushing */
	unsigned target;   /* wanted */
	unsigned inflight; /* submitted, not yet ended */
} pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .queue = TAILQ_HEAD_INITIALIZER(pool.queue),
    .work = PTHREAD_COND_INITIALIZER,
    .space = PTHREAD_COND_INITIALIZER,
    .exited = PTHREAD_COND_INITIALIZER,
    .idle = PTHREAD_COND_INITIALIZER,
};

static _Thread_local int is_worker;
/* The ops whose settle this thread owes a call with idle (they keep state
 * in the thread, maybe a deferred task), or NULL. */
static _Thread_local const struct gpufile__task_ops *holding;

void (*gpufile__pool_task_hook)(struct gpufile__request *r, int64_t off);

void gpufile__request_init(struct gpufile__request *r)
{
	const size_t ts = r->cfg.task_size;
	const int64_t base = r->offset - (int64_t)((uint64_t)r->offset % ts);
	const int64_t end = r->offset + (int64_t)r->size;

	r->ntasks = r->size ? ((uint64_t)(end - base) + ts - 1) / ts : 0;
	r->start_ns = gpufile__now_ns();
	r->next_task = 0;
	r->queued = 0;
	atomic_init(&r->tasks_ended, 0);
	atomic_init(&r->bytes, 0);
	atomic_init(&r->failed, 0);
	atomic_init(&r->fail_at, INT64_MAX);
	atomic_init(&r->eof_at, INT64_MAX);
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	r->done = 0;
	r->result = 0;
	r->error_offset = INT64_MAX;
	r->errmsg[0] = '\0';
}

void gpufile__request_destroy(struct gpufile__request *r)
{
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->cond);
}

/* Caller holds pool.lock. */
static void dequeue(struct gpufile__request *r)
{
	if (!r->queued)
		return;
	TAILQ_REMOVE(&pool.queue, r, queue_link);
	r->queued = 0;
}

/* Caller holds pool.lock. Counts r as in flight, in the pool and on its
 * handle (both under pool.lock, so that a fork sees the two agree). */
static void activate(struct gpufile__request *r)
{
	pool.inflight++;
	atomic_fetch_add(&r->h->inflight, 1);
	gpufile__stats_request_begin(&r->h->stats_file, r->ntasks, r->size,
	                             r->start_ns);
	LIST_INSERT_HEAD(&pool.active, r, active_link);
}

/* Caller holds pool.lock. */
static void deactivate(struct gpufile__request *r)
{
	pool.inflight--;
	/* Under pool.lock: gpufile__handle_wait_idle checks the count under
	 * it too, so the wake-up cannot be lost, and the closer cannot free
	 * the handle before this thread releases pool.lock. */
	if (atomic_fetch_sub(&r->h->inflight, 1) == 1)
		pthread_cond_broadcast(&pool.idle);
	LIST_REMOVE(r, active_link);
}

void gpufile__handle_hold(struct gpufile *h)
{
	pthread_mutex_lock(&pool.lock);
	atomic_fetch_add(&h->inflight, 1);
	pthread_mutex_unlock(&pool.lock);
}

void gpufile__handle_release(struct gpufile *h)
{
	gpufile__handle_release_marks(&h, NULL, 1);
}

void gpufile__handle_release_marks(struct gpufile *const *h,
                                   atomic_int *const *marks, unsigned n)
{
	int idle = 0;

	pthread_mutex_lock(&pool.lock);
	for (unsigned k = 0; k < n; k++) {
		idle |= atomic_fetch_sub(&h[k]->inflight, 1) == 1;
		/* In the same step: the fork prepare handler holds
		 * pool.lock, so a forked child sees each piece either still
		 * counted and unmarked or released and marked, never
		 * released and unmarked (which it would release again). */
		if (marks)
			atomic_store_explicit(marks[k], 1,
			                      memory_order_release);
	}
	if (idle)
		pthread_cond_broadcast(&pool.idle);
	pthread_mutex_unlock(&pool.lock);
}

void gpufile__handle_wait_idle(struct gpufile *h)
{
	pthread_mutex_lock(&pool.lock);
	while (atomic_load(&h->inflight) > 0)
		pthread_cond_wait(&pool.idle, &pool.lock);
	pthread_mutex_unlock(&pool.lock);
}

static void record_error(struct gpufile__request *r, int64_t off, size_t len,
                         ssize_t err, const char *msg)
{
	int64_t cur = atomic_load(&r->fail_at);

	while (off < cur &&
	       !atomic_compare_exchange_weak(&r->fail_at, &cur, off))
		;
	atomic_store(&r->failed, 1);
	pthread_mutex_lock(&r->lock);
	if (off < r->error_offset) {
		r->error_offset = off;
		r->result = err;
		if (msg && msg[0] && strstr(msg, r->h->path))
			snprintf(r->errmsg, sizeof(r->errmsg), "%s", msg);
		else if (msg && msg[0])
			/* The task's own words lack the file (a pinned
			 * allocation failed): name it and the offset. */
			snprintf(r->errmsg, sizeof(r->errmsg),
			         "%s %s at offset %lld (%zu bytes): %s",
			         r->is_write ? "writing" : "reading",
			         r->h->path, (long long)off, len, msg);
		else
			snprintf(r->errmsg, sizeof(r->errmsg),
			         "%s %s at offset %lld (%zu bytes): %s",
			         r->is_write ? "writing" : "reading",
			         r->h->path, (long long)off, len,
			         gpufile_strerror((int)err));
		if (err == -EFAULT && gpufile__cuda_forked()) {
			/* No CUDA call can tell a device pointer of the
			 * parent from bad host memory here: say which is
			 * likely. */
			size_t n = strlen(r->errmsg);
			snprintf(r->errmsg + n, sizeof(r->errmsg) - n,
			         " (this process was forked after CUDA was "
			         "initialised: device memory cannot be used "
			         "here, and every pointer is taken as host "
			         "memory)");
		}
	}
	pthread_mutex_unlock(&r->lock);
}

static void complete(struct gpufile__request *r)
{
	const int64_t end = r->offset + (int64_t)r->size;
	ssize_t result;

	pthread_mutex_lock(&r->lock);
	{
		const int64_t eof = atomic_load(&r->eof_at);

		/* An error at or above the end of file is not part of the
		 * read (such tasks may have run or not: see above). */
		if (r->error_offset == INT64_MAX || r->error_offset >= eof)
			r->result =
			    (ssize_t)((eof < end ? eof : end) - r->offset);
	}
	result = r->result;
	pthread_mutex_unlock(&r->lock);

	/* Before the request counts as ended: a failed append is cut back
	 * off the file before the next is placed at its end, and before the
	 * caller sees the result (append.c). No task touches r->errmsg now. */
	if (r->is_write && r->h->append)
		gpufile__append_end(r->h, r->offset, r->size, result, r->errmsg,
		                    sizeof(r->errmsg));

	gpufile__stats_request_end(&r->h->stats_file, r->path, r->is_write,
	                           result, r->size, atomic_load(&r->bytes),
	                           gpufile__now_ns() - r->start_ns);

	/* One step under pool.lock, so that a fork finds r either on the
	 * active list or done (see the invariants above). */
	pthread_mutex_lock(&pool.lock);
	deactivate(r);
	pthread_cond_signal(&pool.space);
	pthread_mutex_lock(&r->lock);
	r->done = 1;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	pthread_mutex_unlock(&pool.lock);
}

/* Ends one task of r: n bytes moved or an error (msg may be NULL or "");
 * len 0 for a task that was not run. Completes r when it was the last
 * task. */
static void task_end(struct gpufile__request *r, int64_t off, size_t len,
                     ssize_t n, const char *msg)
{
	/* Counted before tasks_ended moves: the request may end right after
	 * (each task's bytes, then the request, in that order). */
	if (len)
		gpufile__stats_task(&r->h->stats_file, r->path, r->is_write,
		                    n > 0 ? (uint64_t)n : 0);
	else
		gpufile__stats_tasks_skipped(&r->h->stats_file, 1);
	if (n < 0) {
		record_error(r, off, len, n, msg);
	} else {
		atomic_fetch_add_explicit(&r->bytes, (uint64_t)n,
		                          memory_order_relaxed);
		if ((size_t)n < len) {
			int64_t eof = off + n;
			int64_t cur = atomic_load(&r->eof_at);
			while (eof < cur && !atomic_compare_exchange_weak(
			                        &r->eof_at, &cur, eof))
				;
		}
	}
	/* Once tasks_ended moves, another thread may complete r and its
	 * owner free it: read ntasks first. */
	const uint64_t ntasks = r->ntasks;

	if (atomic_fetch_add(&r->tasks_ended, 1) + 1 == ntasks)
		complete(r);
}

/* Ends the deferred tasks the ops this thread holds report, if any; with
 * idle, waits for them and lets the ops give back what the thread keeps
 * (see struct gpufile__task_ops). */
static void settle(int idle)
{
	struct gpufile__task_result done;
	const struct gpufile__task_ops *ops = holding;

	if (!ops)
		return;
	if (idle)
		holding = NULL;
	while (ops->settle(&done, idle))
		task_end(done.r, done.off, done.len, done.n, done.msg);
}

/* Ends left tasks of r that will never run (they add no byte, no error
 * and no end of file), at once: a request of 2^40 tasks past the end of a
 * small file must not cost 2^40 steps. */
static void tasks_skipped(struct gpufile__request *r, uint64_t left)
{
	const uint64_t ntasks = r->ntasks; /* as in task_end */

	if (left)
		gpufile__stats_tasks_skipped(&r->h->stats_file, left);
	if (left && atomic_fetch_add(&r->tasks_ended, left) + left == ntasks)
		complete(r);
}

/* The first file offset task index of r covers. */
static int64_t task_start(const struct gpufile__request *r, uint64_t index)
{
	const uint64_t ts = r->cfg.task_size;
	const int64_t base = r->offset - (int64_t)((uint64_t)r->offset % ts);
	const int64_t toff = base + (int64_t)(index * ts);

	return toff < r->offset ? r->offset : toff;
}

/* Caller holds pool.lock. 1 when no unclaimed task of r can move a byte:
 * a task below them failed, or a read met the end of the file below them
 * (the result ends there, whatever they would read). */
static int rest_is_void(struct gpufile__request *r)
{
	return atomic_load_explicit(&r->failed, memory_order_relaxed) ||
	       (r->next_task < r->ntasks &&
	        task_start(r, r->next_task) >= atomic_load(&r->eof_at));
}

/* Caller holds pool.lock (released while the tasks end, held again on
 * return). Ends the unclaimed tasks of r unrun (see rest_is_void). */
static void end_unclaimed(struct gpufile__request *r)
{
	const uint64_t left = r->ntasks - r->next_task;

	r->next_task = r->ntasks;
	if (r->queued)
		dequeue(r);
	pthread_mutex_unlock(&pool.lock);
	tasks_skipped(r, left);
	pthread_mutex_lock(&pool.lock);
}

static void run_task(struct gpufile__request *r, uint64_t index)
{
	const size_t ts = r->cfg.task_size;
	const int64_t base = r->offset - (int64_t)((uint64_t)r->offset % ts);
	const int64_t end = r->offset + (int64_t)r->size;
	int64_t toff = base + (int64_t)(index * ts);
	/* Not toff + ts: that overflows for a request ending near INT64_MAX. */
	int64_t tend = end - toff > (int64_t)ts ? toff + (int64_t)ts : end;
	char msg[512];
	ssize_t n = 0;

	if (toff < r->offset)
		toff = r->offset;
	if (tend > end)
		tend = end;
	msg[0] = '\0';
	if (gpufile__pool_task_hook)
		gpufile__pool_task_hook(r, toff);
	/* Above a failed task, or above a read's end of file: not run. */
	if (toff < atomic_load(&r->fail_at) && toff < atomic_load(&r->eof_at)) {
		if (holding && holding != r->ops)
			settle(1);
		n = r->ops->run(r, r->buf + (toff - r->offset),
		                (size_t)(tend - toff), toff, msg, sizeof(msg));
		assert(n != GPUFILE__TASK_DEFERRED || r->ops->settle);
		if (r->ops->settle)
			holding = r->ops;
		/* The previous task, deferred, ended while this one ran:
		 * end it first (its request may complete now). */
		settle(!is_worker);
		if (n == GPUFILE__TASK_DEFERRED)
			return; /* settle() ends it later */
	} else {
		n = 0; /* skipped */
		toff = tend = end;
	}
	task_end(r, toff, (size_t)(tend - toff), n, msg);
}

/* Caller holds pool.lock. Claims the next task of r; returns its index. */
static uint64_t claim(struct gpufile__request *r)
{
	uint64_t index = r->next_task++;

	if (r->next_task == r->ntasks)
		dequeue(r);
	return index;
}

static void *worker_main(void *arg)
{
	(void)arg;
	is_worker = 1;
	pthread_mutex_lock(&pool.lock);
	for (;;) {
		struct gpufile__request *r;

		if (TAILQ_EMPTY(&pool.queue) && holding) {
			/* Nothing queued: end the task whose last step this
			 * worker left running before going to sleep. */
			pthread_mutex_unlock(&pool.lock);
			settle(1);
			pthread_mutex_lock(&pool.lock);
		}
		while (TAILQ_EMPTY(&pool.queue) && pool.nworkers <= pool.target)
			pthread_cond_wait(&pool.work, &pool.lock);
		if (pool.nworkers > pool.target) {
			/* Leave the count at once: every surplus worker
			 * decides under this lock, and a count that still
			 * included the ones on their way out (flushing below,
			 * lock released) would make them all leave, and a
			 * queued request would wait for workers that no
			 * submit will start (seen: test_async hung after
			 * nthreads 8 -> 2). */
			pool.nworkers--;
			pool.exiting++;
			break;
		}
		r = TAILQ_FIRST(&pool.queue);
		if (rest_is_void(r)) {
			/* Each lies above the failed task or the end of file,
			 * found by a task claimed before them. */
			end_unclaimed(r);
			pthread_mutex_unlock(&pool.lock);
		} else {
			uint64_t index = claim(r);
			pthread_mutex_unlock(&pool.lock);
			run_task(r, index);
		}
		pthread_mutex_lock(&pool.lock);
	}
	pthread_mutex_unlock(&pool.lock);
	settle(1);
	pthread_mutex_lock(&pool.lock);
	pool.exiting--;
	pthread_cond_broadcast(&pool.exited);
	pthread_mutex_unlock(&pool.lock);
	return NULL;
}

/* Caller holds pool.lock. Starts workers up to target. Returns 0 (with
 * at least one worker) or pthread_create's error as -errno, with no
 * message: the caller names what needed the workers. */
static int spawn_workers(void)
{
	while (pool.nworkers < pool.target) {
		pthread_t t;
		pthread_attr_t attr;
		int rc;

		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		rc = pthread_create(&t, &attr, worker_main, NULL);
		pthread_attr_destroy(&attr);
		if (rc) {
			if (pool.nworkers == 0)
				return -rc;
			break; /* run with the workers we have */
		}
		pool.nworkers++;
	}
	return 0;
}

int gpufile__pool_start(void)
{
	struct gpufile__settings s;
	int rc = gpufile__settings(&s);

	if (rc)
		return rc;
	pthread_mutex_lock(&pool.lock);
	pool.target = s.nthreads;
	rc = spawn_workers();
	pthread_mutex_unlock(&pool.lock);
	if (rc)
		return gpufile__fail(rc, "cannot start a worker thread: %s",
		                     strerror(-rc));
	return 0;
}

void gpufile__pool_stop(void)
{
	pthread_mutex_lock(&pool.lock);
	pool.target = 0;
	pthread_cond_broadcast(&pool.work);
	while (pool.nworkers > 0 || pool.exiting > 0)
		pthread_cond_wait(&pool.exited, &pool.lock);
	pthread_mutex_unlock(&pool.lock);
}

int gpufile__request_submit(struct gpufile__request *r)
{
	int rc;

	if (r->ntasks == 0) {
		pthread_mutex_lock(&pool.lock);
		activate(r);
		pthread_mutex_unlock(&pool.lock);
		complete(r);
		return 0;
	}
	pthread_mutex_lock(&pool.lock);
	if (pool.target != r->cfg.nthreads) {
		pool.target = r->cfg.nthreads;
		pthread_cond_broadcast(&pool.work); /* surplus workers exit */
	}
	rc = spawn_workers();
	if (rc) {
		pthread_mutex_unlock(&pool.lock);
		return gpufile__fail(rc,
		                     "%s %s at offset %lld (%zu bytes): cannot "
		                     "start a worker thread: %s",
		                     r->is_write ? "writing" : "reading",
		                     r->h->path, (long long)r->offset, r->size,
		                     strerror(-rc));
	}
	while (pool.inflight >= r->cfg.max_inflight)
		pthread_cond_wait(&pool.space, &pool.lock);
	activate(r);
	r->queued = 1;
	TAILQ_INSERT_TAIL(&pool.queue, r, queue_link);
	if (r->ntasks > 1)
		pthread_cond_broadcast(&pool.work);
	else
		pthread_cond_signal(&pool.work);
	pthread_mutex_unlock(&pool.lock);
	return 0;
}

void gpufile__request_run_inline(struct gpufile__request *r)
{
	pthread_mutex_lock(&pool.lock);
	activate(r);
	pthread_mutex_unlock(&pool.lock);
	if (r->ntasks == 0) {
		complete(r);
		return;
	}
	/* r is this thread's alone: no lock for its task count. */
	for (uint64_t i = 0; i < r->ntasks; i++) {
		if (atomic_load(&r->failed) ||
		    task_start(r, i) >= atomic_load(&r->eof_at)) {
			tasks_skipped(r, r->ntasks - i);
			return;
		}
		run_task(r, i);
	}
}

static int past(const struct timespec *deadline)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	return now.tv_sec > deadline->tv_sec ||
	       (now.tv_sec == deadline->tv_sec &&
	        now.tv_nsec >= deadline->tv_nsec);
}

/* Runs unclaimed tasks of r in the calling thread while it would
 * otherwise only wait; with a deadline (NULL: none), starts none after it
 * (a wait that gives up at the deadline may overrun it by one task). */
static void help(struct gpufile__request *r, const struct timespec *deadline)
{
	pthread_mutex_lock(&pool.lock);
	while (r->queued && r->next_task < r->ntasks &&
	       !(deadline && past(deadline))) {
		uint64_t index;

		if (rest_is_void(r)) {
			end_unclaimed(r);
			break;
		}
		index = claim(r);
		pthread_mutex_unlock(&pool.lock);
		run_task(r, index);
		pthread_mutex_lock(&pool.lock);
	}
	pthread_mutex_unlock(&pool.lock);
}

void gpufile__deadline(long timeout_ms, struct timespec *out)
{
	clock_gettime(CLOCK_REALTIME, out);
	out->tv_sec += timeout_ms / 1000;
	out->tv_nsec += (timeout_ms % 1000) * 1000000L;
	if (out->tv_nsec >= 1000000000L) {
		out->tv_sec++;
		out->tv_nsec -= 1000000000L;
	}
}

ssize_t gpufile__request_wait(struct gpufile__request *r, long timeout_ms)
{
	ssize_t result;
	struct timespec deadline;

	if (timeout_ms > 0)
		gpufile__deadline(timeout_ms, &deadline);
	/* A request into host memory (a local file, a map, a remote
	 * object) puts no work on the GPU: its tasks may run in any thread.
	 * Running them here also means its end never waits for a worker:
	 * a stream-ordered host request's thread (stream.c) waits here
	 * while the caller's stream is held for it, and every worker may
	 * be waiting for a copy queued behind that stream in a shared
	 * hardware queue (test_stream_queue). */
	if (timeout_ms != 0 && !r->cuda_ctx && !is_worker)
		help(r, timeout_ms > 0 ? &deadline : NULL);
	pthread_mutex_lock(&r->lock);
	while (!r->done) {
		if (timeout_ms < 0) {
			pthread_cond_wait(&r->cond, &r->lock);
		} else if (timeout_ms == 0 ||
		           pthread_cond_timedwait(&r->cond, &r->lock,
		                                  &deadline) == ETIMEDOUT) {
			if (r->done)
				break;
			pthread_mutex_unlock(&r->lock);
			return -ETIMEDOUT;
		}
	}
	result = r->result;
	if (result < 0)
		gpufile__fail_msg((int)result, r->errmsg);
	pthread_mutex_unlock(&r->lock);
	return result;
}

/*
 * fork(). The prepare handler holds pool.lock and the lock of every
 * request in flight, so the child's copy of each is consistent; the child
 * is left with one thread, so:
 *   - workers: none exist in the child; the counts start again at zero
 *     and the next submission starts workers (lazily, as at first use);
 *   - condition variables may count waiters that were threads of the
 *     parent (glibc's condvar would wait for them to leave), so they are
 *     made anew;
 *   - a request in flight at the fork belongs to a thread that does not
 *     exist in the child or, if the forking thread submitted it
 *     asynchronously, has no worker left to finish it: it completes at
 *     once with -ECANCELED and a message saying why (the child's copy of
 *     the buffer holds whatever had arrived at the fork). The parent's
 *     request goes on unaffected.
 */
void gpufile__pool_atfork_prepare(void)
{
	struct gpufile__request *r;

	pthread_mutex_lock(&pool.lock);
	LIST_FOREACH (r, &pool.active, active_link)
		pthread_mutex_lock(&r->lock);
}

void gpufile__pool_atfork_parent(void)
{
	struct gpufile__request *r;

	LIST_FOREACH (r, &pool.active, active_link)
		pthread_mutex_unlock(&r->lock);
	pthread_mutex_unlock(&pool.lock);
}

void gpufile__pool_atfork_child(void)
{
	struct gpufile__request *r;

	/* The lists are dropped whole below: no request is taken off. */
	LIST_FOREACH (r, &pool.active, active_link) {
		pthread_cond_init(&r->cond, NULL);
		r->queued = 0;
		r->next_task = r->ntasks;
		atomic_store(&r->failed, 1);
		atomic_store(&r->fail_at, INT64_MIN);
		r->result = -ECANCELED;
		snprintf(r->errmsg, sizeof(r->errmsg),
		         "%s %s (%zu bytes at offset %lld) was in flight when "
		         "the process forked: this child has none of the "
		         "threads that were moving its bytes, so its copy of "
		         "the buffer is incomplete (wait for requests before "
		         "fork())",
		         r->is_write ? "writing" : "reading", r->h->path,
		         r->size, (long long)r->offset);
		r->done = 1;
		atomic_fetch_sub(&r->h->inflight, 1);
		pthread_mutex_unlock(&r->lock);
	}
	LIST_INIT(&pool.active);
	TAILQ_INIT(&pool.queue);
	pool.nworkers = 0;
	pool.exiting = 0;
	pool.inflight = 0;
	pthread_cond_init(&pool.work, NULL);
	pthread_cond_init(&pool.space, NULL);
	pthread_cond_init(&pool.exited, NULL);
	pthread_cond_init(&pool.idle, NULL);
	pthread_mutex_unlock(&pool.lock);
}
