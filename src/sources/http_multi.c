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
 * exchange) takes a free lane, the lowest-numbered one that kept
 * connections open, else the lowest-numbered one (a thread that reads
 * one range after another keeps finding the connections of its last
 * call), runs its own transfers on it until they have all ended, and
 * gives the lane back: a lane holds only its driver's transfers, so a
 * call never waits on a transfer that no thread drives, and a lane has
 * no transfer whenever no call holds it. With every lane taken, a call
 * waits for one (lane_free).
 *
 * Slots: the lanes share max_in_flight slots (at most remote_connections:
 * remote.c), and a lane holds one for each transfer it has in libcurl
 * and for each connection it has open, whichever count is larger (HTTP/2
 * carries many transfers on one connection). So at most max_in_flight
 * transfers are in flight and at most max_in_flight connections are
 * open, in use and idle together, however many lanes keep some (each
 * lane's multi handle kept up to max_in_flight idle connections of its
 * own, max_in_flight squared in all; libcurl cannot share one connection
 * cache between threads). The lane's multi handle may open no more
 * connections than the slots the lane holds
 * (CURLMOPT_MAX_TOTAL_CONNECTIONS: libcurl closes an idle one first),
 * and the lane counts the sockets libcurl opens and closes on them (the
 * socket callbacks), giving a slot back as soon as neither a transfer
 * nor a connection needs it. A lane keeps the slots of its idle
 * connections when its call ends, for the next call on it, and gives
 * them back by closing those connections:
 *   - a call that has had transfers in flight for RECLAIM_AFTER_MS and
 *     finds no free slot for more closes the connections of a lane no
 *     call holds (reclaim), unless a call waits for a lane (it would
 *     reuse them): sooner, the lanes of a read's other tasks, which
 *     start a moment after its first, would lose their connections to
 *     it and take slots back from it (twice the connects);
 *   - a call with none in flight that finds no free slot waits
 *     (slot_free, counted in slot_waiters) for one, or for a lane no
 *     call holds that keeps connections, and moves to that lane; while
 *     it waits, a lane with transfers in flight starts no more and has
 *     libcurl close an idle connection as each transfer ends
 *     (CURLMOPT_MAXCONNECTS 1), whose slot the waiter gets (else a pread
 *     beside a batch of 10,000 ranges would wait for the whole batch);
 *   - a lane whose transfers all wait out a back-off closes its own.
 *
 * A failure of libcurl's multi interface itself (curl_multi_perform or
 * curl_multi_poll returning an error) ends the call's attempts still in
 * libcurl with it (x->multi_rc, which their owner names) and closes the
 * lane's multi handle with its connections, its state being libcurl's to
 * know; the call's other transfers start on a new one.
 *
 * Lock order: the owner's lock (*e->lock, the handle's lock once open:
 * fork.c holds it across fork()) guards the lanes' busy flags, owner,
 * the two waits and, while no call holds a lane, its held count; it is
 * held only for that bookkeeping, never during a libcurl call or an ops
 * call, and nothing is taken under it.
 *
 * A lane's holder's own (no lock): the lane's multi and easy handles,
 * its slots, sockets, retries and active count, and its call's
 * transfers. They pass from one holder (a call's driver, or a caller
 * closing an idle lane's connections) to the next through the lock
 * (busy).
 *
 * Invariants:
 *   - the slots held (e->slots) are the sum of the lanes' held, at most
 *     max_in_flight; a lane's held is at least its transfers in libcurl
 *     and its connections (between libcurl calls);
 *   - a transfer is waiting to start, in libcurl (x->easy set), on retry
 *     or ended: exactly one, and its call's left counts it until it ends;
 *   - a call returns only once left is 0 and its lane is given back with
 *     no transfer, so nothing touches its transfers afterwards.
 */
#define _GNU_SOURCE
#include "sources/http_multi.h"

#if GPUFILE_HAVE_CURL
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* How long a call has transfers in flight before it may close another
 * lane's idle connections to start more (see above). */
#define RECLAIM_AFTER_MS 100

/* One gpufile__http_run: its transfers not yet ended. Its thread's own. */
struct gpufile__http_call {
	size_t left;
};

struct lane {
	int busy; /* under the lock: a call, or a reclaim, holds it */
	/* Its holder's; read under the lock while no one holds it. */
	unsigned held; /* slots: for its transfers and its connections */
	/* Its holder's own. */
	CURLM *multi;
	CURL **easy; /* idle easy handles, cap of them room for */
	unsigned neasy, cap;
	unsigned active;                  /* its transfers in libcurl */
	unsigned socks;                   /* sockets open on its multi */
	int trimming;                     /* CURLMOPT_MAXCONNECTS is 1 */
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
	_Atomic unsigned slots;     /* held by all lanes */
	_Atomic unsigned in_flight; /* all lanes' transfers in libcurl */
	_Atomic unsigned in_flight_max;
	CURL *(*new_easy)(void *);
	void *arg;
};

/* The socket callbacks of a lane's transfers: libcurl opens and closes
 * every socket of the lane's connections through them (a connection
 * keeps the closing one of the transfer that opened it), in calls on the
 * lane's multi handle, so by the lane's holder. */
static curl_socket_t sock_open(void *arg, curlsocktype purpose,
                               struct curl_sockaddr *a)
{
	struct lane *l = arg;
	curl_socket_t s =
	    socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);

	(void)purpose;
	if (s != CURL_SOCKET_BAD)
		l->socks++;
	return s;
}

static int sock_close(void *arg, curl_socket_t s)
{
	struct lane *l = arg;

	if (l->socks)
		l->socks--;
	return close(s);
}

/* Sets the slots l holds, and so the connections its multi handle may
 * have open (libcurl closes an idle one before it opens one more). */
static void lane_hold(struct lane *l, unsigned held)
{
	l->held = held;
	if (l->multi)
		curl_multi_setopt(l->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS,
		                  (long)(held ? held : 1));
}

/* Makes l's multi handle (none when out of memory: then each transfer
 * fails to start, with no easy handle). */
static void lane_open(struct gpufile__http_engine *e, struct lane *l)
{
	l->multi = curl_multi_init();
	if (!l->multi)
		return;
	/* A connection stays open when its transfer ends (libcurl keeps 4
	 * per added transfer by default), within MAX_TOTAL_CONNECTIONS. */
	curl_multi_setopt(l->multi, CURLMOPT_MAXCONNECTS,
	                  (long)e->max_in_flight);
	curl_multi_setopt(l->multi, CURLMOPT_PIPELINING,
	                  (long)CURLPIPE_MULTIPLEX);
	l->trimming = 0;
	lane_hold(l, l->held);
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
	l->socks = 0;
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
	atomic_init(&e->slots, 0);
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
		l->neasy = l->active = l->held = l->socks = 0;
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
	atomic_store(&e->slots, 0);
	atomic_store(&e->in_flight, 0);
}

/* Reserves one of the max_in_flight slots: 1, or 0 when all are taken. */
static int slot_take(struct gpufile__http_engine *e)
{
	unsigned n = atomic_load(&e->slots);

	do {
		if (n >= e->max_in_flight)
			return 0;
	} while (!atomic_compare_exchange_weak(&e->slots, &n, n + 1));
	return 1;
}

/* Gives n slots back, waking the calls that wait for one. A waiter
 * counts itself in slot_waiters before it looks at slots, under the lock
 * it waits with, so that either it sees these slots free or this sees
 * it. */
static void slot_give(struct gpufile__http_engine *e, unsigned n)
{
	atomic_fetch_sub(&e->slots, n);
	if (atomic_load(&e->slot_waiters)) {
		pthread_mutex_lock(*e->lock);
		pthread_cond_broadcast(&e->slot_free);
		pthread_mutex_unlock(*e->lock);
	}
}

/* Gives back the slots of lane l that back neither a transfer in libcurl
 * nor an open socket. */
static void lane_trim(struct gpufile__http_engine *e, struct lane *l)
{
	const unsigned keep = l->active > l->socks ? l->active : l->socks;

	if (l->held > keep) {
		const unsigned n = l->held - keep;

		lane_hold(l, keep);
		slot_give(e, n);
	}
}

/* Closes the connections of lane l, which has no transfer in libcurl,
 * and gives back its slots; its multi handle is made again for its next
 * transfer. */
static void lane_shed(struct gpufile__http_engine *e, struct lane *l)
{
	if (l->multi)
		curl_multi_cleanup(l->multi);
	l->multi = NULL;
	l->socks = 0;
	lane_trim(e, l);
}

/* Caller holds the lock. A lane no one holds that keeps slots (for idle
 * connections), marked held by the caller; NULL when there is none. */
static struct lane *idle_lane_take(struct gpufile__http_engine *e)
{
	for (unsigned i = 0; i < e->nlanes; i++) {
		struct lane *v = &e->lanes[i];

		if (!v->busy && v->held) {
			v->busy = 1;
			return v;
		}
	}
	return NULL;
}

/* Caller holds the lock: gives lane l back. */
static void lane_give(struct gpufile__http_engine *e, struct lane *l)
{
	l->busy = 0;
	if (e->lane_waiters)
		pthread_cond_signal(&e->lane_free);
}

/* Caller holds the lock, which it releases meanwhile: closes the idle
 * connections of a lane no one holds, freeing their slots. 1 when there
 * was such a lane. */
static int reclaim_locked(struct gpufile__http_engine *e)
{
	struct lane *v = idle_lane_take(e);

	if (!v)
		return 0;
	pthread_mutex_unlock(*e->lock);
	lane_shed(e, v);
	pthread_mutex_lock(*e->lock);
	lane_give(e, v);
	return 1;
}

/* One more slot for lane l: a free one, else, with may_reclaim while no
 * call waits for a lane, one freed by closing the connections of a lane
 * no one holds (a call waiting for a lane would take that lane, and its
 * connections, next). 1, or 0 when there is none. */
static int lane_grow(struct gpufile__http_engine *e, struct lane *l,
                     int may_reclaim)
{
	int got = slot_take(e);

	if (!got && may_reclaim) {
		pthread_mutex_lock(*e->lock);
		while (!(got = slot_take(e)) && !e->lane_waiters &&
		       reclaim_locked(e))
			;
		pthread_mutex_unlock(*e->lock);
	}
	if (got)
		lane_hold(l, l->held + 1);
	return got;
}

/* The call on lane *lp has no transfer in libcurl and no slot: waits for
 * a slot another lane gives back, reserved for *lp, or for a lane no
 * call holds that keeps connections open, which the call moves to with
 * its retries (the empty lane it leaves is given back), so that their
 * connections serve it rather than close. Counted in slot_waiters
 * meanwhile, so that lanes with transfers in flight leave it a slot. */
static void slot_wait(struct gpufile__http_engine *e, struct lane **lp)
{
	struct lane *l = *lp, *v = NULL;
	int got;

	pthread_mutex_lock(*e->lock);
	atomic_fetch_add(&e->slot_waiters, 1);
	while (!(got = slot_take(e)) && !(v = idle_lane_take(e)))
		pthread_cond_wait(&e->slot_free, *e->lock);
	atomic_fetch_sub(&e->slot_waiters, 1);
	if (v) {
		v->retry = l->retry;
		l->retry = NULL;
		lane_give(e, l);
		*lp = v;
	}
	pthread_mutex_unlock(*e->lock);
	if (got)
		lane_hold(l, l->held + 1);
}

/* While a call waits for a slot, each transfer of lane l that ends
 * closes an idle connection of l, whose slot the waiter then gets. */
static void lane_trimming(struct gpufile__http_engine *e, struct lane *l)
{
	const int want = atomic_load(&e->slot_waiters) != 0;

	if (want != l->trimming) {
		curl_multi_setopt(l->multi, CURLMOPT_MAXCONNECTS,
		                  want ? 1L : (long)e->max_in_flight);
		l->trimming = want;
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
	t->not_before_ns = gpufile__now_ns() + (uint64_t)wait * 1000000u;
	t->next = l->retry;
	l->retry = t;
}

/* Starts t on an easy handle of lane l (one is idle or may be made); l
 * holds a slot for it. */
static void start_one(struct gpufile__http_engine *e, struct lane *l,
                      struct gpufile__http_xfer *t)
{
	unsigned n, max;
	CURLMcode mc;

	t->multi_rc = CURLM_OK;
	t->multi_fn = NULL;
	t->easy = !l->multi  ? NULL
	          : l->neasy ? l->easy[--l->neasy]
	                     : e->new_easy(e->arg);
	if (t->ops->start(t) < 0) {
		if (t->easy)
			idle_put(l, t->easy);
		t->easy = NULL;
		t->call->left--;
		return;
	}
	/* After ops->start, which may reset the handle (http.c). */
	curl_easy_setopt(t->easy, CURLOPT_PRIVATE, (void *)t);
	curl_easy_setopt(t->easy, CURLOPT_OPENSOCKETFUNCTION, sock_open);
	curl_easy_setopt(t->easy, CURLOPT_OPENSOCKETDATA, (void *)l);
	curl_easy_setopt(t->easy, CURLOPT_CLOSESOCKETFUNCTION, sock_close);
	curl_easy_setopt(t->easy, CURLOPT_CLOSESOCKETDATA, (void *)l);
	mc = curl_multi_add_handle(l->multi, t->easy);
	if (mc != CURLM_OK) {
		t->multi_rc = mc;
		t->multi_fn = "curl_multi_add_handle";
		attempt_ended(l, t, CURLE_OUT_OF_MEMORY);
		return;
	}
	l->active++;
	n = atomic_fetch_add(&e->in_flight, 1) + 1;
	max = atomic_load(&e->in_flight_max);
	if (n > max)
		atomic_store(&e->in_flight_max, n); /* a gauge: racy max */
}

/* Transfer t of lane l has left libcurl with cc. */
static void transfer_left(struct gpufile__http_engine *e, struct lane *l,
                          struct gpufile__http_xfer *t, CURLcode cc)
{
	curl_multi_remove_handle(l->multi, t->easy);
	l->active--;
	atomic_fetch_sub(&e->in_flight, 1);
	attempt_ended(l, t, cc);
}

/* The call's next transfer to start: a retry whose back-off is over,
 * else the next not yet started (*next of x[0..n)); NULL when none may
 * start now. */
static struct gpufile__http_xfer *
next_ready(struct lane *l, struct gpufile__http_xfer *const *x, size_t n,
           size_t *next)
{
	const uint64_t now = gpufile__now_ns();

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
	const uint64_t now = gpufile__now_ns();
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

		if (m->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE,
		                  (char **)&t);
		transfer_left(e, l, t, m->data.result);
	}
}

/* fn of libcurl's multi interface failed with mc on lane l: the
 * attempts of the call's transfers (x[0..started)) still in libcurl end
 * with it, and l's multi handle is closed with its connections. */
static void multi_failed(struct gpufile__http_engine *e, struct lane *l,
                         struct gpufile__http_xfer *const *x, size_t started,
                         const char *fn, CURLMcode mc)
{
	reap(e, l); /* those that ended before */
	for (size_t i = 0; i < started; i++) {
		struct gpufile__http_xfer *t = x[i];

		if (!t->easy)
			continue; /* not in libcurl */
		t->multi_rc = mc;
		t->multi_fn = fn;
		transfer_left(e, l, t, CURLE_OUT_OF_MEMORY);
	}
	lane_shed(e, l);
}

/* Runs the call's transfers x[0..n) on lane l until all have ended.
 * Returns the lane it holds then (it may have moved: slot_wait). */
static struct lane *drive(struct gpufile__http_engine *e, struct lane *l,
                          struct gpufile__http_xfer *const *x, size_t n,
                          struct gpufile__http_call *c)
{
	const uint64_t began = gpufile__now_ns();
	size_t next = 0;

	while (c->left) {
		int running = 0, starved = 0;
		const int may_reclaim =
		    l->active && gpufile__now_ns() - began >=
		                     RECLAIM_AFTER_MS * (uint64_t)1000000;
		CURLMcode mc;

		if (!l->multi)
			lane_open(e, l);
		/* A lane with transfers in flight leaves a free slot to a
		 * call that has none (a pread beside a batch of 10,000
		 * ranges would otherwise wait for the batch). */
		while (next < n || until_retry(l, 1) == 0) {
			if ((l->active && atomic_load(&e->slot_waiters)) ||
			    (l->active >= l->held &&
			     !lane_grow(e, l, may_reclaim))) {
				starved = 1;
				break;
			}
			start_one(e, l, next_ready(l, x, n, &next));
		}
		lane_trim(e, l); /* the slots of transfers that did not start */
		if (!c->left)
			break;
		if (!l->active) {
			long ms = until_retry(l, 1000);

			if (starved && (next < n || ms == 0)) {
				/* Work to start, every slot another lane's:
				 * the next one freed is this call's. */
				slot_wait(e, &l);
				if (!l->multi)
					lane_open(e, l);
				start_one(e, l, next_ready(l, x, n, &next));
			} else if (ms > 0) {
				/* Only retries waiting out their back-off:
				 * the lane's connections are closed, their
				 * slots free for other calls meanwhile. */
				struct timespec ts = {ms / 1000,
				                      (ms % 1000) * 1000000L};

				if (l->held)
					lane_shed(e, l);
				nanosleep(&ts, NULL);
			}
			continue;
		}
		lane_trimming(e, l);
		mc = curl_multi_perform(l->multi, &running);
		if (mc != CURLM_OK) {
			multi_failed(e, l, x, next, "curl_multi_perform", mc);
			continue;
		}
		reap(e, l);
		lane_trim(e, l);
		/* Woken by a transfer's socket or a retry's time; a slot
		 * another lane gives back is seen at the next of this lane's
		 * events. A retry that is due but has no slot looks again in
		 * 10 ms, not at once (polling with no wait spun a CPU until
		 * a slot came back). */
		if (running && c->left) {
			long ms = until_retry(l, 1000);

			mc = curl_multi_poll(
			    l->multi, NULL, 0,
			    (int)(starved && ms == 0 ? 10 : ms), NULL);
			if (mc != CURLM_OK)
				multi_failed(e, l, x, next, "curl_multi_poll",
				             mc);
		}
	}
	return l;
}

/* Caller holds the lock. A free lane: the lowest-numbered one that kept
 * connections open, else the lowest-numbered one; NULL when all are
 * taken. */
static struct lane *lane_pick(struct gpufile__http_engine *e)
{
	struct lane *any = NULL;

	for (unsigned i = 0; i < e->nlanes; i++) {
		struct lane *l = &e->lanes[i];

		if (l->busy)
			continue;
		if (l->held)
			return l;
		if (!any)
			any = l;
	}
	return any;
}

void gpufile__http_run(struct gpufile__http_engine *e,
                       struct gpufile__http_xfer *const *x, size_t n)
{
	struct gpufile__http_call call = {.left = n};
	struct lane *l;

	if (!n)
		return;
	for (size_t i = 0; i < n; i++) {
		x[i]->easy = NULL;
		x[i]->call = &call;
		x[i]->next = NULL;
		x[i]->multi_rc = CURLM_OK;
		x[i]->multi_fn = NULL;
	}
	pthread_mutex_lock(*e->lock);
	adopt_after_fork(e);
	while (!(l = lane_pick(e))) {
		e->lane_waiters++;
		pthread_cond_wait(&e->lane_free, *e->lock);
		e->lane_waiters--;
	}
	l->busy = 1;
	pthread_mutex_unlock(*e->lock);
	l = drive(e, l, x, n, &call);
	lane_trim(e, l);
	/* The lane keeps its idle connections for the next call on it; a
	 * call waiting for a slot moves to it (slot_wait), one that starts
	 * waiting after this finds it free. */
	pthread_mutex_lock(*e->lock);
	lane_give(e, l);
	if (l->held && atomic_load(&e->slot_waiters))
		pthread_cond_broadcast(&e->slot_free);
	pthread_mutex_unlock(*e->lock);
}
#endif
