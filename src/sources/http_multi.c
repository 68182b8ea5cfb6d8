/*
 * The HTTP transfer engine: many transfers on libcurl's multi interface,
 * driven by the threads that wait for them, on several lanes at once.
 *
 * Why a waiting caller drives and not an engine thread: one 64 KiB range
 * at a time would pay two thread hand-offs per range (submit, then wake
 * the waiter), tens of microseconds on a loaded machine against a
 * transfer of about 70 us on loopback; a caller that drives pays none.
 *
 * Why lanes: one thread driving every transfer of a handle receives all
 * of its bytes on one CPU. On the 16-CPU GPU machine a 4 GiB read from
 * nginx on loopback then ran at 3.3 GB/s, as one curl does, while 16
 * curl processes fetching 16 ranges at once reached 28 GB/s. A lane is
 * a multi handle (its own connection cache) and its easy handles, made
 * when a call first takes it. The engine has max_in_flight lanes: as
 * many callers as may have a transfer in flight at once each drive their
 * own, on as many CPUs as the machine gives them (one lane per CPU
 * instead would let only two callers of a 2-CPU machine have transfers
 * in flight, where the single multi handle had up to max_in_flight
 * callers' transfers going).
 *
 * A call (one gpufile__http_run: one task's ranges, a batch, one
 * exchange) takes a free lane, the lowest-numbered one (a thread that
 * reads one range after another keeps finding the connections of its
 * last call), runs its own transfers on it until they have all ended,
 * and gives the lane back: a lane holds only its driver's transfers, so
 * a call never waits on a transfer that no thread drives, and a lane is
 * empty whenever no call holds it. With every lane taken, a call waits
 * for one (lane_free). The lanes share one limit, max_in_flight
 * transfers in libcurl at once (on HTTP/1.1, connections), however many
 * threads read: a call whose transfers cannot start because the other
 * lanes hold every slot, and that has none in flight itself, waits for
 * a slot (slot_free) and has the next one given back; one that has some
 * in flight starts the rest as its own end, and leaves a free slot to
 * such a waiting call first (else a pread beside a batch of 10,000
 * ranges would wait for the whole batch: the batch's own thread frees a
 * slot and takes it again before a waiter wakes).
 *
 * Lock order: the owner's lock (*e->lock, the handle's lock once open:
 * fork.c holds it across fork()) guards the lanes' busy flags, owner and
 * the two waits; it is held only for that bookkeeping, never during a
 * libcurl call or an ops call, and nothing is taken under it.
 *
 * A lane's driver's own (no lock): the lane's multi and easy handles,
 * its retries and active count, and its call's transfers. They pass from
 * one driver to the next through the lock (busy).
 *
 * Invariants:
 *   - at most max_in_flight transfers are in libcurl at once (in_flight,
 *     a slot reserved before a transfer starts and given back when it
 *     leaves libcurl);
 *   - a transfer is waiting to start, in libcurl, on retry or ended:
 *     exactly one, and its call's left counts it until it ends;
 *   - a call returns only once left is 0 and its lane is given back
 *     empty, so nothing touches its transfers afterwards.
 */
#define _GNU_SOURCE
#include "sources/http_multi.h"

#if GPUFILE_HAVE_CURL
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* One gpufile__http_run: its transfers not yet ended. Its thread's own. */
struct gpufile__http_call {
	size_t left;
};

struct lane {
	int busy; /* under the lock: a call holds it */
	/* The driver's own. */
	CURLM *multi;
	CURL **easy; /* idle easy handles, cap of them room for */
	unsigned neasy, cap;
	unsigned active;                  /* its transfers in libcurl */
	struct gpufile__http_xfer *retry; /* waiting out a back-off */
};

struct gpufile__http_engine {
	pthread_mutex_t *const *lock;
	pid_t owner; /* the process whose connections the lanes hold */
	unsigned max_in_flight;
	unsigned nlanes;
	struct lane *lanes;
	/* Under the lock: calls waiting for a lane, for a slot. */
	pthread_cond_t lane_free, slot_free;
	unsigned lane_waiters;
	_Atomic unsigned slot_waiters;
	_Atomic unsigned in_flight; /* all lanes' transfers in libcurl */
	_Atomic unsigned in_flight_max;
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

/* Closes what lane l holds (its connections and easy handles). */
static void lane_close(struct lane *l)
{
	for (unsigned i = 0; i < l->neasy; i++)
		curl_easy_cleanup(l->easy[i]);
	l->neasy = 0;
	if (l->multi)
		curl_multi_cleanup(l->multi);
	l->multi = NULL;
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
	e->nlanes = e->max_in_flight;
	e->lanes = calloc(e->nlanes, sizeof(*e->lanes));
	if (!e->lanes) {
		free(e);
		return -ENOMEM;
	}
	pthread_cond_init(&e->lane_free, NULL);
	pthread_cond_init(&e->slot_free, NULL);
	e->lock = lock;
	atomic_init(&e->slot_waiters, 0);
	atomic_init(&e->in_flight, 0);
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
	for (unsigned i = 0; e->lanes && i < e->nlanes; i++) {
		/* In a forked child the connections are its parent's too:
		 * left unclosed (a TLS close would end the parent's
		 * session). */
		if (e->owner == getpid())
			lane_close(&e->lanes[i]);
		free(e->lanes[i].easy);
	}
	free(e->lanes);
	pthread_cond_destroy(&e->lane_free);
	pthread_cond_destroy(&e->slot_free);
	free(e);
}

unsigned gpufile__http_in_flight_max(const struct gpufile__http_engine *e)
{
	return atomic_load(&e->in_flight_max);
}

/* Caller holds the lock. A forked child starts with no transfer and
 * lanes of its own: the parent's multi handles hold the parent's sockets
 * (dropped, not closed, as remote.c drops its idle connections), and
 * the parent's transfers are not the child's (its threads are gone). */
static void adopt_after_fork(struct gpufile__http_engine *e)
{
	if (e->owner == getpid())
		return;
	e->owner = getpid();
	for (unsigned i = 0; i < e->nlanes; i++) {
		struct lane *l = &e->lanes[i];

		l->busy = 0;
		l->neasy = l->active = 0;
		l->retry = NULL;
		l->multi = NULL; /* made again when a call takes it */
	}
	/* The parent's waiters are gone with its threads; the conditions
	 * are made again, as a child may not use what a parent's thread
	 * was waiting on. */
	pthread_cond_init(&e->lane_free, NULL);
	pthread_cond_init(&e->slot_free, NULL);
	e->lane_waiters = 0;
	atomic_store(&e->slot_waiters, 0);
	atomic_store(&e->in_flight, 0);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Reserves one of the max_in_flight slots: 1, or 0 when all are taken. */
static int slot_take(struct gpufile__http_engine *e)
{
	unsigned n = atomic_load(&e->in_flight);

	do {
		if (n >= e->max_in_flight)
			return 0;
	} while (!atomic_compare_exchange_weak(&e->in_flight, &n, n + 1));
	if (n + 1 > atomic_load(&e->in_flight_max))
		atomic_store(&e->in_flight_max, n + 1); /* a gauge: racy max */
	return 1;
}

/* Gives a slot back, waking the calls that wait for one. A waiter counts
 * itself in slot_waiters before it looks at in_flight, under the lock it
 * waits with, so that either it sees this slot free or this sees it. */
static void slot_give(struct gpufile__http_engine *e)
{
	atomic_fetch_sub(&e->in_flight, 1);
	if (atomic_load(&e->slot_waiters)) {
		pthread_mutex_lock(*e->lock);
		pthread_cond_broadcast(&e->slot_free);
		pthread_mutex_unlock(*e->lock);
	}
}

/* Keeps easy handle c idle on lane l for its next transfer (closed when
 * there is no room for it). */
static void idle_put(struct lane *l, CURL *c)
{
	if (l->neasy == l->cap) {
		unsigned cap = l->cap ? 2 * l->cap : 4;
		CURL **more = realloc(l->easy, cap * sizeof(*more));

		if (!more) {
			curl_easy_cleanup(c);
			return;
		}
		l->easy = more;
		l->cap = cap;
	}
	l->easy[l->neasy++] = c;
}

/* The attempt of t has left libcurl (or never entered it) with cc: its
 * easy handle goes back to lane l, and it ends or waits for its next
 * attempt. */
static void attempt_ended(struct lane *l, struct gpufile__http_xfer *t,
                          CURLcode cc)
{
	CURL *c = t->easy;
	long wait = t->ops->finish(t, cc);

	if (c)
		idle_put(l, c);
	t->easy = NULL;
	if (wait == GPUFILE__HTTP_DONE) {
		t->call->left--;
		return;
	}
	t->not_before_ns = now_ns() + (uint64_t)wait * 1000000u;
	t->next = l->retry;
	l->retry = t;
}

/* Starts t on an easy handle of lane l (one is idle or may be made); a
 * slot is reserved for it. */
static void start_one(struct gpufile__http_engine *e, struct lane *l,
                      struct gpufile__http_xfer *t)
{
	t->easy = l->neasy ? l->easy[--l->neasy] : NULL;
	if (!t->easy && l->multi)
		t->easy = e->new_easy(e->arg);
	if (t->ops->start(t) < 0) {
		if (t->easy)
			idle_put(l, t->easy);
		t->easy = NULL;
		t->call->left--;
		slot_give(e);
		return;
	}
	curl_easy_setopt(t->easy, CURLOPT_PRIVATE, (void *)t);
	if (curl_multi_add_handle(l->multi, t->easy) != CURLM_OK) {
		slot_give(e);
		attempt_ended(l, t, CURLE_OUT_OF_MEMORY);
		return;
	}
	l->active++;
}

/* The call's next transfer to start: a retry whose back-off is over,
 * else the next not yet started (*next of x[0..n)); NULL when none may
 * start now. */
static struct gpufile__http_xfer *
next_ready(struct lane *l, struct gpufile__http_xfer *const *x, size_t n,
           size_t *next)
{
	const uint64_t now = now_ns();

	for (struct gpufile__http_xfer **p = &l->retry; *p; p = &(*p)->next)
		if ((*p)->not_before_ns <= now) {
			struct gpufile__http_xfer *t = *p;

			*p = t->next;
			return t;
		}
	return *next < n ? x[(*next)++] : NULL;
}

/* Milliseconds until the first retry may start (0: now), or ms_max. */
static long until_retry(const struct lane *l, long ms_max)
{
	const uint64_t now = now_ns();
	long best = ms_max;

	for (const struct gpufile__http_xfer *t = l->retry; t; t = t->next) {
		long ms =
		    t->not_before_ns <= now
		        ? 0
		        : (long)((t->not_before_ns - now + 999999) / 1000000u);
		if (ms < best)
			best = ms;
	}
	return best;
}

static void reap(struct gpufile__http_engine *e, struct lane *l)
{
	CURLMsg *m;
	int left;

	while ((m = curl_multi_info_read(l->multi, &left))) {
		struct gpufile__http_xfer *t = NULL;
		const CURLcode cc = m->data.result;
		CURL *c = m->easy_handle;

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(c, CURLINFO_PRIVATE, (char **)&t);
		curl_multi_remove_handle(l->multi, c);
		l->active--;
		slot_give(e);
		attempt_ended(l, t, cc);
	}
}

/* Waits until another lane gives a slot back, and reserves it (counted
 * in slot_waiters until then, so that lanes with transfers in flight
 * leave it). */
static void slot_wait(struct gpufile__http_engine *e)
{
	pthread_mutex_lock(*e->lock);
	atomic_fetch_add(&e->slot_waiters, 1);
	while (!slot_take(e))
		pthread_cond_wait(&e->slot_free, *e->lock);
	atomic_fetch_sub(&e->slot_waiters, 1);
	pthread_mutex_unlock(*e->lock);
}

/* Runs the call's transfers x[0..n) on lane l until all have ended. */
static void drive(struct gpufile__http_engine *e, struct lane *l,
                  struct gpufile__http_xfer *const *x, size_t n,
                  struct gpufile__http_call *c)
{
	size_t next = 0;

	while (c->left) {
		struct gpufile__http_xfer *t;
		int running = 0, starved = 0;

		/* A lane with transfers in flight leaves a free slot to a
		 * call that has none (a pread beside a batch of 10,000
		 * ranges would otherwise wait for the batch). */
		while (next < n || until_retry(l, 1) == 0) {
			if ((l->active && atomic_load(&e->slot_waiters)) ||
			    !slot_take(e)) {
				starved = 1;
				break;
			}
			t = next_ready(l, x, n, &next);
			start_one(e, l, t);
		}
		if (!c->left)
			break;
		if (!l->active) {
			long ms = until_retry(l, 1000);

			if (starved && (next < n || ms == 0)) {
				/* Work to start, every slot another lane's:
				 * the next one freed is this call's. */
				slot_wait(e);
				start_one(e, l, next_ready(l, x, n, &next));
			} else if (ms > 0) {
				/* Only retries waiting out their back-off. */
				struct timespec ts = {ms / 1000,
				                      (ms % 1000) * 1000000L};
				nanosleep(&ts, NULL);
			}
			continue;
		}
		curl_multi_perform(l->multi, &running);
		reap(e, l);
		/* Woken by a transfer's socket or a retry's time; a slot
		 * another lane gives back is seen at the next of this lane's
		 * events. A retry that is due but has no slot looks again in
		 * 10 ms, not at once (polling with no wait spun a CPU until
		 * a slot came back). */
		if (running && c->left) {
			long ms = until_retry(l, 1000);

			curl_multi_poll(l->multi, NULL, 0,
			                (int)(starved && ms == 0 ? 10 : ms),
			                NULL);
		}
	}
}

void gpufile__http_run(struct gpufile__http_engine *e,
                       struct gpufile__http_xfer *const *x, size_t n)
{
	struct gpufile__http_call call = {.left = n};
	struct lane *l = NULL;

	if (!n)
		return;
	for (size_t i = 0; i < n; i++) {
		x[i]->easy = NULL;
		x[i]->call = &call;
		x[i]->next = NULL;
	}
	pthread_mutex_lock(*e->lock);
	adopt_after_fork(e);
	for (;;) {
		for (unsigned i = 0; i < e->nlanes && !l; i++)
			if (!e->lanes[i].busy)
				l = &e->lanes[i];
		if (l)
			break;
		e->lane_waiters++;
		pthread_cond_wait(&e->lane_free, *e->lock);
		e->lane_waiters--;
	}
	l->busy = 1;
	pthread_mutex_unlock(*e->lock);
	/* A lane's multi handle is made when a call first takes it; with
	 * none (out of memory) each transfer fails to start, with no easy
	 * handle. */
	if (!l->multi)
		l->multi = multi_new(e->max_in_flight);
	drive(e, l, x, n, &call);
	pthread_mutex_lock(*e->lock);
	l->busy = 0;
	if (e->lane_waiters)
		pthread_cond_signal(&e->lane_free);
	pthread_mutex_unlock(*e->lock);
}
#endif
