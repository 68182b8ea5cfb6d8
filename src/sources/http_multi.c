/*
 * The HTTP transfer engine: many transfers on libcurl's multi interface,
 * driven by the threads that wait for them.
 *
 * Why a waiting caller drives and not an engine thread: one 64 KiB range
 * at a time would pay two thread hand-offs per range (submit, then wake
 * the waiter), tens of microseconds on a loaded machine against a
 * transfer of about 70 us on loopback; a caller that drives pays none.
 *
 * One multi handle per engine (per remote handle): one connection cache,
 * so that the connection of the size at open serves the first range and
 * the connections of one call serve the next, and at most max_in_flight
 * transfers (on HTTP/1.1, connections) at once however many threads read.
 * A multi handle is used by one thread at a time: the driver. A caller
 * queues its transfers; if no thread drives, it becomes the driver and
 * drives every queued transfer, its own and others', until its own have
 * ended; then it hands over (a waiting caller becomes the driver). Callers
 * that do not drive wait on their call's own condition variable, woken
 * once: when their last transfer ends, or when the driver leaves (not at
 * each transfer's end: a batch's 10,000 ranges woke every waiting thread
 * 10,000 times).
 *
 * Lock order: the owner's lock (*e->lock, the handle's lock once open:
 * fork.c holds it across fork()) guards queue, driving, owner, waiters and
 * every call's left; it is held only for that bookkeeping, never during a
 * libcurl call or an ops call, and nothing is taken under it.
 *
 * The driver's own (no lock): the multi handle, the easy handles, retry,
 * active. They pass from one driver to the next through the lock.
 *
 * Invariants:
 *   - at most max_in_flight transfers are in libcurl at once (active);
 *   - a transfer is on the queue, in libcurl, on retry or ended: exactly
 *     one, and its call's left counts it until it ends;
 *   - a call returns only once left is 0, so nothing touches its
 *     transfers afterwards;
 *   - while a call has transfers not ended, some thread drives, or the
 *     call's own thread will take over (it waits only while driving is
 *     set, on the waiters list, and the driver clears driving and wakes
 *     every waiter when it leaves).
 */
#define _GNU_SOURCE
#include "sources/http_multi.h"

#if GPUFILE_HAVE_CURL
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* One gpufile__http_run: its transfers not yet ended, and where its
 * thread waits while another drives. */
struct gpufile__http_call {
	size_t left;
	pthread_cond_t wake;
	int waiting; /* on the engine's waiters list */
	struct gpufile__http_call *next_waiter;
};

struct gpufile__http_engine {
	pthread_mutex_t *const *lock;
	struct gpufile__http_call *waiters; /* calls waiting, not driving */
	/* Queued, not yet started, oldest first. */
	struct gpufile__http_xfer *queue, **queue_tail;
	int driving;
	pid_t owner; /* the process whose connections multi holds */
	unsigned max_in_flight;
	_Atomic unsigned in_flight_max;
	/* The driver's own. */
	CURLM *multi;
	CURL **easy; /* idle easy handles */
	unsigned neasy, made;
	unsigned active;
	struct gpufile__http_xfer *retry; /* waiting out a back-off */
	CURL *(*new_easy)(void *);
	void *arg;
};

static CURLM *multi_new(unsigned max_in_flight)
{
	CURLM *m = curl_multi_init();

	if (!m)
		return NULL;
	/* Every connection the transfers opened stays open for the next
	 * (libcurl keeps 4 per added transfer by default, closing the rest
	 * once the transfers are removed). */
	curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)max_in_flight);
	curl_multi_setopt(m, CURLMOPT_PIPELINING, (long)CURLPIPE_MULTIPLEX);
	return m;
}

int gpufile__http_engine_new(struct gpufile__http_engine **out,
                             unsigned max_in_flight, CURL *(*new_easy)(void *),
                             void *arg, pthread_mutex_t *const *lock)
{
	struct gpufile__http_engine *e = calloc(1, sizeof(*e));

	*out = NULL;
	if (!e)
		return -ENOMEM;
	e->max_in_flight = max_in_flight ? max_in_flight : 1;
	e->easy = calloc(e->max_in_flight, sizeof(*e->easy));
	e->multi = multi_new(e->max_in_flight);
	if (!e->easy || !e->multi) {
		if (e->multi)
			curl_multi_cleanup(e->multi);
		free(e->easy);
		free(e);
		return -ENOMEM;
	}
	e->lock = lock;
	e->queue_tail = &e->queue;
	atomic_init(&e->in_flight_max, 0);
	e->owner = getpid();
	e->new_easy = new_easy;
	e->arg = arg;
	*out = e;
	return 0;
}

void gpufile__http_engine_free(struct gpufile__http_engine *e)
{
	if (!e)
		return;
	/* In a forked child the connections are its parent's too: left
	 * unclosed (a TLS close would end the parent's session). */
	if (e->owner == getpid()) {
		for (unsigned i = 0; i < e->neasy; i++)
			curl_easy_cleanup(e->easy[i]);
		if (e->multi)
			curl_multi_cleanup(e->multi);
	}
	free(e->easy);
	free(e);
}

unsigned gpufile__http_in_flight_max(const struct gpufile__http_engine *e)
{
	return atomic_load(&e->in_flight_max);
}

/* Caller holds the lock. A forked child starts with no transfer and a
 * multi handle of its own: the parent's holds the parent's sockets
 * (dropped, not closed, as remote.c drops its idle connections), and the
 * parent's transfers are not the child's (its threads are gone). */
static void adopt_after_fork(struct gpufile__http_engine *e)
{
	if (e->owner == getpid())
		return;
	e->owner = getpid();
	e->waiters = NULL;
	e->queue = NULL;
	e->queue_tail = &e->queue;
	e->driving = 0;
	e->neasy = e->made = e->active = 0;
	e->retry = NULL;
	e->multi = multi_new(e->max_in_flight); /* NULL: transfers fail */
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A transfer has ended: its call counts one fewer, and its thread is
 * woken when that was the last. */
static void ended(struct gpufile__http_engine *e, struct gpufile__http_xfer *t)
{
	struct gpufile__http_call *c = t->call;

	pthread_mutex_lock(*e->lock);
	if (--c->left == 0)
		pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(*e->lock);
}

/* The attempt of t has left libcurl (or never entered it) with cc: its
 * easy handle goes back, and it ends or waits for its next attempt. */
static void attempt_ended(struct gpufile__http_engine *e,
                          struct gpufile__http_xfer *t, CURLcode cc)
{
	CURL *c = t->easy;
	long wait = t->ops->finish(t, cc);

	e->easy[e->neasy++] = c;
	t->easy = NULL;
	if (wait == GPUFILE__HTTP_DONE) {
		ended(e, t);
		return;
	}
	t->not_before_ns = now_ns() + (uint64_t)wait * 1000000u;
	t->next = e->retry;
	e->retry = t;
}

/* Starts t on an easy handle (one is idle or may be made: the caller
 * checked active < max_in_flight). */
static void start_one(struct gpufile__http_engine *e,
                      struct gpufile__http_xfer *t)
{
	t->easy = e->neasy ? e->easy[--e->neasy] : NULL;
	if (!t->easy && e->multi) {
		t->easy = e->new_easy(e->arg);
		if (t->easy)
			e->made++;
	}
	if (t->ops->start(t) < 0) {
		if (t->easy)
			e->easy[e->neasy++] = t->easy;
		t->easy = NULL;
		ended(e, t);
		return;
	}
	curl_easy_setopt(t->easy, CURLOPT_PRIVATE, (void *)t);
	if (curl_multi_add_handle(e->multi, t->easy) != CURLM_OK) {
		attempt_ended(e, t, CURLE_OUT_OF_MEMORY);
		return;
	}
	if (++e->active > atomic_load(&e->in_flight_max))
		atomic_store(&e->in_flight_max, e->active);
}

/* The next transfer to start: a retry whose back-off is over, else the
 * oldest queued one; NULL when none may start now. */
static struct gpufile__http_xfer *next_ready(struct gpufile__http_engine *e)
{
	struct gpufile__http_xfer *t = NULL;
	const uint64_t now = now_ns();

	for (struct gpufile__http_xfer **p = &e->retry; *p; p = &(*p)->next)
		if ((*p)->not_before_ns <= now) {
			t = *p;
			*p = t->next;
			return t;
		}
	pthread_mutex_lock(*e->lock);
	t = e->queue;
	if (t) {
		e->queue = t->next;
		if (!e->queue)
			e->queue_tail = &e->queue;
	}
	pthread_mutex_unlock(*e->lock);
	return t;
}

/* Milliseconds until the first retry may start (0: now), or ms_max. */
static long until_retry(const struct gpufile__http_engine *e, long ms_max)
{
	const uint64_t now = now_ns();
	long best = ms_max;

	for (const struct gpufile__http_xfer *t = e->retry; t; t = t->next) {
		long ms =
		    t->not_before_ns <= now
		        ? 0
		        : (long)((t->not_before_ns - now + 999999) / 1000000u);
		if (ms < best)
			best = ms;
	}
	return best;
}

static void reap(struct gpufile__http_engine *e)
{
	CURLMsg *m;
	int left;

	while ((m = curl_multi_info_read(e->multi, &left))) {
		struct gpufile__http_xfer *t = NULL;
		const CURLcode cc = m->data.result;
		CURL *c = m->easy_handle;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(c, CURLINFO_PRIVATE, (char **)&t);
		curl_multi_remove_handle(e->multi, c);
		e->active--;
		attempt_ended(e, t, cc);
	}
}

/* 1 while call c has transfers not ended. */
static int call_open(struct gpufile__http_engine *e,
                     const struct gpufile__http_call *c)
{
	int open;

	pthread_mutex_lock(*e->lock);
	open = c->left > 0;
	pthread_mutex_unlock(*e->lock);
	return open;
}

/* Drives every transfer of the engine until those of the calling
 * thread's call c have ended. */
static void drive(struct gpufile__http_engine *e,
                  const struct gpufile__http_call *c)
{
	while (call_open(e, c)) {
		struct gpufile__http_xfer *t;
		int running = 0;

		while (e->active < e->max_in_flight && (t = next_ready(e)))
			start_one(e, t);
		if (!e->active) {
			/* Only retries waiting out their back-off. */
			long ms = until_retry(e, 1000);

			if (ms > 0 && call_open(e, c)) {
				struct timespec ts = {ms / 1000,
				                      (ms % 1000) * 1000000L};
				nanosleep(&ts, NULL);
			}
			continue;
		}
		curl_multi_perform(e->multi, &running);
		reap(e);
		/* Woken by a transfer's socket, a retry's time, or a caller
		 * queueing more (curl_multi_wakeup). */
		if (running && call_open(e, c))
			curl_multi_poll(e->multi, NULL, 0,
			                (int)until_retry(e, 1000), NULL);
	}
}

/* Caller holds the lock. Wakes every waiting call (one will drive). */
static void wake_waiters(struct gpufile__http_engine *e)
{
	for (struct gpufile__http_call *w = e->waiters; w; w = w->next_waiter)
		pthread_cond_signal(&w->wake);
}

/* Caller holds the lock. Takes call c off the waiters list. */
static void unwait(struct gpufile__http_engine *e, struct gpufile__http_call *c)
{
	for (struct gpufile__http_call **p = &e->waiters; *p;
	     p = &(*p)->next_waiter)
		if (*p == c) {
			*p = c->next_waiter;
			break;
		}
	c->waiting = 0;
}

void gpufile__http_run(struct gpufile__http_engine *e,
                       struct gpufile__http_xfer *const *x, size_t n)
{
	struct gpufile__http_call call = {.left = n};

	if (!n)
		return;
	pthread_cond_init(&call.wake, NULL);
	pthread_mutex_lock(*e->lock);
	adopt_after_fork(e);
	for (size_t i = 0; i < n; i++) {
		x[i]->easy = NULL;
		x[i]->call = &call;
		x[i]->next = NULL;
		*e->queue_tail = x[i];
		e->queue_tail = &x[i]->next;
	}
	if (!e->multi) {
		/* No multi handle (a forked child out of memory): each fails
		 * to start, with no easy handle. */
		pthread_mutex_unlock(*e->lock);
		for (struct gpufile__http_xfer *t; (t = next_ready(e));)
			start_one(e, t);
		pthread_mutex_lock(*e->lock);
		while (call.left) /* some may be another thread's to end */
			pthread_cond_wait(&call.wake, *e->lock);
		pthread_mutex_unlock(*e->lock);
		pthread_cond_destroy(&call.wake);
		return;
	}
	if (e->driving)
		curl_multi_wakeup(e->multi);
	while (call.left) {
		if (e->driving) {
			if (!call.waiting) {
				call.waiting = 1;
				call.next_waiter = e->waiters;
				e->waiters = &call;
			}
			pthread_cond_wait(&call.wake, *e->lock);
			continue;
		}
		if (call.waiting)
			unwait(e, &call);
		e->driving = 1;
		pthread_mutex_unlock(*e->lock);
		drive(e, &call);
		pthread_mutex_lock(*e->lock);
		e->driving = 0;
		wake_waiters(e); /* one takes over */
	}
	if (call.waiting)
		unwait(e, &call);
	pthread_mutex_unlock(*e->lock);
	pthread_cond_destroy(&call.wake);
}
#endif
