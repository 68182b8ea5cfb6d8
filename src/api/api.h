/*
 * The api wing (src/api/): the handle and the forms of request built on
 * it, which wire the decision (core/) to the paths and sources below:
 * opening, reading and writing a handle (file.c), batches (batch.c),
 * stream-ordered requests (stream.c, stream.h, stream_stage.c), memory
 * maps (mmap.c), and fork (fork.c: every wing's part, in the library's
 * lock order).
 *
 * May include: every wing below (common/, platform/, core/, paths/,
 * sources/). The wings above (formats/, controls/) call it.
 */
#ifndef GPUFILE_API_H
#define GPUFILE_API_H

#include "sources/sources.h"
#include "api/stream.h"

/* ---- handles (file.c) and fork (fork.c) ---- */

/* Adds a new handle to, and removes a closing one from, the list of open
 * handles whose locks the fork handlers hold across fork(). */
void gpufile__fork_track(struct gpufile *h);
void gpufile__fork_untrack(struct gpufile *h);
/* The smallest task a device read of fewer tasks than workers is split
 * into (file.c): 512 KiB; benchmarks set SIZE_MAX to compare. */
extern size_t gpufile__split_min;

/* Allocates a future around a copy of prepared (a request another source,
 * mmap.c, filled in but did not initialise), initialises and submits it.
 * Returns 0 with *out set, or an error (then *out is NULL) (file.c). */
int gpufile__future_submit(const struct gpufile__request *prepared,
                           gpufile_future_t **out);

/* ---- stream-ordered requests (stream.c) ---- */

/* Validates a request and decides its path as gpufile_pread/pwrite would
 * (r->path, r->cufile_handle, r->cufile_base, r->cuda_ctx), leaving r
 * initialised but not submitted: the caller ends it with
 * gpufile__request_destroy(). Not for writes to an "a" handle (their
 * offset is placed at submission). Returns 0 or an error (file.c). */
int gpufile__request_prepare(struct gpufile__request *r, gpufile_t *h,
                             void *buf, size_t size, int64_t offset,
                             int is_write);

/* The pinned buffers of stream-ordered reads staged on the caller's
 * stream (stream_stage.c): frees the idle ones and returns their bytes
 * (gpufile_bounce_buffer_free, gpufile_release); fork.c's handlers. */
size_t gpufile__stage_buffers_free(void);
void gpufile__stage_atfork_prepare(void);
void gpufile__stage_atfork_parent(void);
void gpufile__stage_atfork_child(void);

/* Threads stream.c has started to run stream-ordered requests, and
 * those idle now (tests). */
unsigned long gpufile__stream_waiters_started(void);
unsigned gpufile__stream_waiters_idle(void);
/* stream.c's part of fork.c's handlers (its waiters.lock comes after the
 * handles' locks and before pool.lock). */
void gpufile__stream_atfork_prepare(void);
void gpufile__stream_atfork_parent(void);
void gpufile__stream_atfork_child(void);

/* batch.c: every batch not freed; the child ends its copies' entries in
 * flight at the fork (so that closing their handles does not wait). */
void gpufile__batch_atfork_prepare(void);
void gpufile__batch_atfork_parent(void);
void gpufile__batch_atfork_child(void);

/* ---- batches (batch.c) ---- */

/* batch.c's io_uring reads carry the entry's index in the batch as their
 * user_data, so that tests replacing gpufile__uring.wait_cqe can fail one
 * entry. */

/* Test seam: when set, called by the thread that ended a batch's last
 * entry, after its statistics and before it marks the batch complete
 * (tests hold that thread there to look at the batch in between). */
extern void (*gpufile__batch_complete_hook)(gpufile_batch_t *b);

/* The most pinned memory the batches' slots can hold now: two 2 MiB slots
 * per worker thread of every batch not yet freed (gpufile_pinned_bytes_max).
 */
size_t gpufile__batch_pinned_max(void);

#endif
