/*
 * fork(): the library stays usable in a forked child.
 *
 * Python's multiprocessing forks by default on Linux, often while other
 * threads of the parent are inside gpufile. fork() copies the memory of
 * the process but only the calling thread, so a lock held by another
 * thread at that moment would stay held forever in the child, and the
 * pool's workers, with the requests they were running, would be gone.
 * The handlers below (registered once, when the library is loaded) hold
 * every library lock across fork(), so the child's copy of each
 * structure is consistent, then let each module make its state the
 * child's own (stream.c, pool.c, staging.c, stream_stage.c, cuda_shim.c,
 * cufile_shim.c, config.c, batch.c; stats.c keeps its own handler).
 *
 * Library lock order, which prepare follows and every code path obeys
 * (a thread holding one lock takes only locks further down):
 *   1. handles.lock (this file)
 *   2. a handle's lock (h->lock), all of them
 *   2a. waiters.lock (stream.c: the stream-ordered requests' threads)
 *   3. pool.lock, then each in-flight request's lock (pool.c)
 *   4. stagers.lock (staging.c)
 *   4a. cache.lock (stream_stage.c: stream-ordered reads' pinned buffers)
 *   5. cufile_lock (cufile_shim.c)
 *   6. cuda_lock (cuda_shim.c)
 *   7. config_lock (config.c)
 *   8. batches.lock (batch.c: the list of batches)
 *   9. dl_lock (platform/dl.c: the dynamic loader)
 *  10. facts_lock (core/decide.c: the platform facts kept for the process)
 * The statistics locks (stats.c) are outside this order: stats.c
 * resets them in the child itself.
 */
#define _GNU_SOURCE
#include "api/api.h"

#include <pthread.h>

static struct {
	pthread_mutex_t lock;
	LIST_HEAD(, gpufile) open; /* every open handle (tracked) */
} handles = {.lock = PTHREAD_MUTEX_INITIALIZER};

void gpufile__fork_track(struct gpufile *h)
{
	pthread_mutex_lock(&handles.lock);
	LIST_INSERT_HEAD(&handles.open, h, tracked);
	pthread_mutex_unlock(&handles.lock);
}

void gpufile__fork_untrack(struct gpufile *h)
{
	pthread_mutex_lock(&handles.lock);
	LIST_REMOVE(h, tracked);
	pthread_mutex_unlock(&handles.lock);
}

static void prepare(void)
{
	struct gpufile *h;

	pthread_mutex_lock(&handles.lock);
	LIST_FOREACH (h, &handles.open, tracked)
		pthread_mutex_lock(&h->lock);
	gpufile__stream_atfork_prepare();
	gpufile__pool_atfork_prepare();
	gpufile__staging_atfork_prepare();
	gpufile__stage_atfork_prepare();
	gpufile__cufile_atfork_prepare();
	gpufile__cuda_atfork_prepare();
	gpufile__config_atfork_prepare();
	gpufile__batch_atfork_prepare();
	gpufile__dl_lock();
	gpufile__facts_atfork_prepare();
}

static void unlock_handles(void)
{
	struct gpufile *h;

	LIST_FOREACH (h, &handles.open, tracked)
		pthread_mutex_unlock(&h->lock);
	pthread_mutex_unlock(&handles.lock);
}

static void parent(void)
{
	gpufile__facts_atfork_parent();
	gpufile__dl_unlock();
	gpufile__batch_atfork_parent();
	gpufile__config_atfork_parent();
	gpufile__cuda_atfork_parent();
	gpufile__cufile_atfork_parent();
	gpufile__stage_atfork_parent();
	gpufile__staging_atfork_parent();
	gpufile__pool_atfork_parent();
	gpufile__stream_atfork_parent();
	unlock_handles();
}

/* The locks were taken by the thread that forked, which is the child's
 * only thread: it may release them. */
static void child(void)
{
	struct gpufile *h;

	gpufile__facts_atfork_child();
	gpufile__dl_unlock();
	gpufile__config_atfork_child();
	gpufile__cuda_atfork_child();
	gpufile__cufile_atfork_child();
	gpufile__stage_atfork_child();
	gpufile__staging_atfork_child();
	gpufile__pool_atfork_child(); /* cancels requests: h->inflight drops */
	gpufile__stream_atfork_child(); /* and the parent's stream jobs' */
	/* No append is in flight here: the parent's are cancelled above or
	 * were other threads'. Left counted, the child's next append did
	 * not start at the file's end and a failed one was never cut back
	 * (append.c). */
	LIST_FOREACH (h, &handles.open, tracked)
		h->appends = 0;
	unlock_handles();
	/* Last: it releases batch entries' holds (pool.lock, unlocked). */
	gpufile__batch_atfork_child();
}

/* At load time, before any thread of the library can exist: a handler
 * registered later (at first use) could miss a fork that happens while
 * another thread is still making the first request. */
__attribute__((constructor)) static void register_handlers(void)
{
	pthread_atfork(prepare, parent, child);
}
