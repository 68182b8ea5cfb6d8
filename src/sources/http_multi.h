/*
 * The HTTP transfer engine (http_multi.c): many transfers driven by the
 * thread that waits for them, on libcurl's multi interface, over
 * connections kept open between calls (HTTP/1.1 keep-alive; HTTP/2
 * streams where the server offers h2).
 *
 * The engine's lanes (http_multi.c) each have a multi handle, driven by
 * the thread whose call holds the lane; a connection a call opened
 * serves the next call on its lane.
 *
 * The engine knows nothing of ranges, signatures or validation: a
 * transfer's owner (remote.c's ranges, http.c's requests of uploads and
 * WebHDFS) sets up each attempt on the easy handle the engine lends it
 * (ops->start; http.c resets the handle first, so an engine serves one
 * owner: a handle's reads or its source's requests) and judges its end
 * (ops->finish), which says whether and when to try again. The engine
 * keeps at most max_in_flight transfers of all its callers in libcurl at
 * once, and at most max_in_flight connections open, in use and idle
 * together.
 */
#ifndef GPUFILE_HTTP_MULTI_H
#define GPUFILE_HTTP_MULTI_H

#include "paths/paths.h"

#if GPUFILE_HAVE_CURL
#include <curl/curl.h>

struct gpufile__http_engine;
struct gpufile__http_xfer;
struct gpufile__http_call;

/* ops->finish's answer for a transfer that has ended (for good). */
#define GPUFILE__HTTP_DONE (-1L)

struct gpufile__http_xfer_ops {
	/* Sets up the next attempt of x on x->easy (NULL when no easy
	 * handle could be made: then it fails). Returns 0, or a negative
	 * error: the transfer ends there, its owner having kept why. */
	int (*start)(struct gpufile__http_xfer *x);
	/* The attempt ended with cc (libcurl holds x->easy no more), or,
	 * when x->multi_rc is not CURLM_OK, was ended by that failure of
	 * libcurl's multi interface (cc is then CURLE_OUT_OF_MEMORY).
	 * Returns GPUFILE__HTTP_DONE, or the milliseconds (>= 0) to wait
	 * before ops->start sets up the next attempt. */
	long (*finish)(struct gpufile__http_xfer *x, CURLcode cc);
};

struct gpufile__http_xfer {
	const struct gpufile__http_xfer_ops *ops;
	CURL *easy; /* lent by the engine from ops->start to ops->finish */
	/* For ops->finish: CURLM_OK, or the failure of libcurl's multi
	 * interface that ended the attempt, returned by the function
	 * multi_fn names (e.g. "curl_multi_perform"). */
	CURLMcode multi_rc;
	const char *multi_fn;
	/* The engine's own. */
	uint64_t not_before_ns; /* a retry waits until then */
	struct gpufile__http_xfer *next;
	struct gpufile__http_call *call; /* the gpufile__http_run it is of */
};

/* Makes an engine. new_easy(arg) makes an easy handle set up for the
 * owner's object (URL, TLS, redirects), returned to the engine, which
 * reuses it for later transfers and frees it. *lock points at the
 * owner's lock (read at each use: the owner may move it), which is held
 * only for the engine's short bookkeeping, never across a transfer.
 * Returns 0 or -ENOMEM. */
int gpufile__http_engine_new(struct gpufile__http_engine **out,
                             unsigned max_in_flight, CURL *(*new_easy)(void *),
                             void *arg, pthread_mutex_t *const *lock);
/* Frees e (no call of gpufile__http_run is running). Accepts NULL. */
void gpufile__http_engine_free(struct gpufile__http_engine *e);

/* Runs x[0..n) to their ends, started in order after the transfers
 * queued before them, with those of other threads' calls counted against
 * the same max_in_flight; the calling thread drives its own transfers.
 * Every transfer ends through its ops (the owner reads the outcome
 * there); a failure of libcurl's multi interface itself ends the call's
 * attempts in flight with x->multi_rc set. */
void gpufile__http_run(struct gpufile__http_engine *e,
                       struct gpufile__http_xfer *const *x, size_t n);

/* The most transfers e had in libcurl at once, since it was made. */
unsigned gpufile__http_in_flight_max(const struct gpufile__http_engine *e);

#endif
#endif
