/*
 * What stream.c (stream-ordered requests and their flags) and
 * stream_stage.c (reads of device memory staged on the caller's stream)
 * share.
 */
#ifndef GPUFILE_STREAM_H
#define GPUFILE_STREAM_H

#include "paths/paths.h"
#include "platform/cuda_shim.h"

/* How a message names a request's direction: "reading PATH: ...". */
static inline const char *stream_verb(int is_write)
{
	return is_write ? "writing" : "reading";
}

/* Caller holds lock. Waits on work as an idle thread of a set (counted
 * in *nidle while it waits), for at most secs seconds; returns what
 * pthread_cond_timedwait returned (ETIMEDOUT: the thread may end, if its
 * queue is still empty). The waiters (stream.c) and the fillers
 * (stream_stage.c) idle this way. */
int gpufile__idle_wait(pthread_cond_t *work, pthread_mutex_t *lock,
                       unsigned *nidle, unsigned secs);

/* ---- flags (stream.c) ---- */

/*
 * A flag is a 32-bit word of mapped pinned memory that a stream waits on
 * (cuStreamWaitValue32, GEQ). gpufile__stream_flag_get takes a free one
 * of the current context's device (its memory ends only with that
 * device's primary context): *slot, and *value, what it holds now (wait
 * for more than that); or an error naming the request's file (path, and
 * is_write: "reading" or "writing").
 * gpufile__stream_flag_store stores value, releasing the waits up to it,
 * and keeps the slot; gpufile__stream_flag_release stores it and gives
 * the slot back; gpufile__stream_flag_put gives back a slot nothing waits
 * on. Neither store writes once the flag's context has ended (its memory
 * went with it).
 */
int gpufile__stream_flag_get(const struct gpufile__cuda *t, int *slot,
                             uint32_t *value, const char *path, int is_write);
CUdeviceptr gpufile__stream_flag_dev(int slot);
void gpufile__stream_flag_store(const struct gpufile__cuda *t, int slot,
                                uint32_t value);
void gpufile__stream_flag_release(const struct gpufile__cuda *t, int slot,
                                  uint32_t value);
void gpufile__stream_flag_put(int slot);

/* ---- staged requests on the caller's stream (stream_stage.c) ---- */

struct gpufile__stage;

/* Whether a request of size bytes at offset fits one staging arena (the
 * only ones staged on the stream). */
int gpufile__stage_fits(const struct gpufile__settings *cfg, int64_t offset,
                        size_t size);
/*
 * Prepares the read or write r (prepared by file.c: device memory, the
 * posix path, gpufile__stage_fits) to run on stream, whose context owns the
 * buffer and is current: takes pinned memory for it (waiting while none has
 * room) and a flag. A read is read ahead of the stream, at once, unless
 * in_order: then only once the stream has reached it (the work queued
 * before it may change the file). Returns 0 with *out, or an error
 * (nothing is queued).
 */
int gpufile__stage_new(const struct gpufile__cuda *t,
                       const struct gpufile__request *r, CUstream stream,
                       int in_order, ssize_t *n_out,
                       struct gpufile__stage **out);
/* Queues the request's waits and copies on the stream and starts a read's
 * fillers (an in-order read's are started by gpufile__stage_run).
 * Returns 0 once the stream holds the request (a driver failure after
 * the first operation ends up in the result): then call
 * gpufile__stage_run, on a thread that may wait for the stream, and
 * before the call returns where *run_here is set (nothing holds the
 * work queued after the call). Or the error of the first operation,
 * with nothing queued and st freed; *unsupported is then 1 when the
 * driver refused the wait as CUDA_ERROR_NOT_SUPPORTED. */
int gpufile__stage_queue(struct gpufile__stage *st, int *unsupported,
                         int *run_here);
/* Waits until every piece is read and the stream's copies have run (an
 * in-order read: first until the stream has reached it; a write: until
 * the copies have run, then has every piece written), gives the pinned
 * memory back (or loses it, where copies may still run), stores *n_out,
 * then lets the stream go past the request; returns the result. st's
 * handle is not used after it; free st with gpufile__stage_free. */
ssize_t gpufile__stage_run(struct gpufile__stage *st);
void gpufile__stage_free(struct gpufile__stage *st);

/* Events of the stream-ordered requests (stream.c): one of the current
 * context, kept from an earlier request where one is spare, else made
 * (CU_EVENT_DISABLE_TIMING | CU_EVENT_BLOCKING_SYNC); given back with
 * gpufile__stream_event_put, which makes no CUDA call. The spare ones
 * are destroyed by gpufile__stream_events_free (gpufile_release,
 * gpufile_bounce_buffer_free). */
CUresult gpufile__stream_event_get(const struct gpufile__cuda *t, CUevent *e);
void gpufile__stream_event_put(CUevent e);
void gpufile__stream_events_free(const struct gpufile__cuda *t);

#endif
