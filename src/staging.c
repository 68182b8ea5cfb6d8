/*
 * The host-staged ("posix") path for device buffers: file <-> pinned
 * bounce buffers <-> GPU, pipelined.
 *
 * A stager owns bounce_buffers pinned buffers, a CUDA stream and one event
 * per buffer. Within a task, the file is read chunk by chunk (chunk =
 * bounce_buffer_size, chunk edges at multiples of it in the file); while
 * the copy of chunk k to the GPU runs, chunk k+1 is read into the next
 * buffer, and a buffer is reused only after its event says its copy ended.
 * Writes run the other way round: the copy of chunk k+1 from the GPU runs
 * while chunk k is written to the file.
 *
 * Stagers are kept on a free list and handed to whichever thread runs a
 * device task; at most nthreads exist, so pinned memory is bounded by
 * nthreads * bounce_buffers * (bounce_buffer_size + GPUFILE_ALIGN).
 * They are allocated on first use (cuMemHostAlloc takes tens of
 * milliseconds) and kept until gpufile_release(). At process exit they are
 * left to the operating system: the CUDA contexts may already be gone.
 */
#include "internal.h"
#include "cuda_shim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUFFERS 64

struct stager {
	struct stager *next;
	CUcontext ctx;         /* context the stream and events belong to */
	CUstream stream;
	unsigned nbufs;
	size_t buf_size;       /* usable bytes per buffer */
	char *buf[MAX_BUFFERS];
	CUevent event[MAX_BUFFERS];
	int pending[MAX_BUFFERS]; /* a copy using buf[i] may still run */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t freed;
	struct stager *free_list;
	unsigned count; /* stagers in existence */
} stagers = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.freed = PTHREAD_COND_INITIALIZER,
};

static void stager_free_buffers(const struct gpufile__cuda *t, struct stager *s)
{
	if (s->ctx)
		t->cuCtxSetCurrent(s->ctx);
	for (unsigned i = 0; i < s->nbufs; i++) {
		if (s->buf[i])
			t->cuMemFreeHost(s->buf[i]);
		if (s->event[i])
			t->cuEventDestroy(s->event[i]);
		s->buf[i] = NULL;
		s->event[i] = NULL;
		s->pending[i] = 0;
	}
	if (s->stream)
		t->cuStreamDestroy(s->stream);
	s->stream = NULL;
	s->ctx = NULL;
	s->nbufs = 0;
	s->buf_size = 0;
}

/* Gives s buffers, events and a stream in context ctx, matching the
 * settings. Reuses what s has when nothing changed. */
static int stager_prepare(const struct gpufile__cuda *t, struct stager *s,
                          CUcontext ctx, const struct gpufile__settings *cfg,
                          char *msg, size_t msg_len)
{
	CUresult rc;

	if (s->ctx == ctx && s->nbufs == cfg->bounce_buffers &&
	    s->buf_size == cfg->bounce_buffer_size)
		return 0;
	stager_free_buffers(t, s);
	rc = t->cuCtxSetCurrent(ctx);
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(rc, msg, msg_len, "cuCtxSetCurrent");
	s->ctx = ctx;
	rc = t->cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING);
	if (rc != CUDA_SUCCESS) {
		s->stream = NULL;
		stager_free_buffers(t, s);
		return gpufile__cuda_fail(rc, msg, msg_len, "cuStreamCreate");
	}
	for (unsigned i = 0; i < cfg->bounce_buffers; i++) {
		s->nbufs = i + 1;
		rc = t->cuMemHostAlloc((void **)&s->buf[i],
		                       cfg->bounce_buffer_size + GPUFILE_ALIGN,
		                       CU_MEMHOSTALLOC_PORTABLE);
		if (rc != CUDA_SUCCESS) {
			s->buf[i] = NULL;
			stager_free_buffers(t, s);
			return gpufile__cuda_fail(
				rc, msg, msg_len,
				"cuMemHostAlloc of a %zu-byte bounce buffer",
				cfg->bounce_buffer_size + GPUFILE_ALIGN);
		}
		rc = t->cuEventCreate(&s->event[i], CU_EVENT_DISABLE_TIMING);
		if (rc != CUDA_SUCCESS) {
			s->event[i] = NULL;
			stager_free_buffers(t, s);
			return gpufile__cuda_fail(rc, msg, msg_len,
			                          "cuEventCreate");
		}
	}
	s->buf_size = cfg->bounce_buffer_size;
	return 0;
}

static struct stager *stager_acquire(unsigned limit)
{
	struct stager *s;

	pthread_mutex_lock(&stagers.lock);
	while (!stagers.free_list && stagers.count >= limit)
		pthread_cond_wait(&stagers.freed, &stagers.lock);
	s = stagers.free_list;
	if (s) {
		stagers.free_list = s->next;
	} else {
		s = calloc(1, sizeof(*s));
		if (s)
			stagers.count++;
	}
	pthread_mutex_unlock(&stagers.lock);
	return s;
}

static void stager_return(struct stager *s)
{
	pthread_mutex_lock(&stagers.lock);
	s->next = stagers.free_list;
	stagers.free_list = s;
	pthread_cond_signal(&stagers.freed);
	pthread_mutex_unlock(&stagers.lock);
}

/* Waits for the copy that last used buffer i. */
static int wait_buffer(const struct gpufile__cuda *t, struct stager *s,
                       unsigned i, char *msg, size_t msg_len)
{
	CUresult rc;

	if (!s->pending[i])
		return 0;
	s->pending[i] = 0;
	rc = t->cuEventSynchronize(s->event[i]);
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(rc, msg, msg_len,
		                          "waiting for a copy between host and GPU");
	return 0;
}

/* After an error: no copy of ours may still touch the caller's buffer. */
static void drain(const struct gpufile__cuda *t, struct stager *s)
{
	t->cuStreamSynchronize(s->stream);
	for (unsigned i = 0; i < s->nbufs; i++)
		s->pending[i] = 0;
}

static int64_t chunk_end(int64_t pos, int64_t end, size_t chunk)
{
	int64_t next = pos - (int64_t)((uint64_t)pos % chunk) + (int64_t)chunk;

	return next < end ? next : end;
}

static ssize_t staged_read(const struct gpufile__cuda *t, struct stager *s,
                           struct gpufile__request *r, CUdeviceptr dst,
                           size_t len, int64_t off, char *scratch, char *msg,
                           size_t msg_len)
{
	const int64_t end = off + (int64_t)len;
	int64_t pos = off;
	unsigned k = 0;
	CUresult rc;
	int err;

	while (pos < end) {
		const unsigned b = k++ % s->nbufs;
		const int64_t cend = chunk_end(pos, end, s->buf_size);
		/* Keep the bounce position congruent with the file offset so
		 * that O_DIRECT reads land in it without a copy. */
		char *bounce = s->buf[b] + ((uint64_t)pos % GPUFILE_ALIGN);
		const size_t want = (size_t)(cend - pos);
		ssize_t n;

		err = wait_buffer(t, s, b, msg, msg_len);
		if (err)
			goto fail;
		n = gpufile__file_read(r->h, r->cfg.direct_io, bounce, want,
		                       pos, scratch,
		                       GPUFILE__SCRATCH);
		if (n < 0) {
			err = (int)n;
			goto fail;
		}
		if (n > 0) {
			rc = t->cuMemcpyHtoDAsync(dst + (CUdeviceptr)(pos - off),
			                          bounce, (size_t)n, s->stream);
			if (rc == CUDA_SUCCESS)
				rc = t->cuEventRecord(s->event[b], s->stream);
			if (rc != CUDA_SUCCESS) {
				err = gpufile__cuda_fail(
					rc, msg, msg_len,
					"copying %zd bytes of %s at offset %lld "
					"to device memory %p",
					n, r->h->path, (long long)pos,
					(void *)(uintptr_t)(dst + (CUdeviceptr)(pos - off)));
				goto fail;
			}
			s->pending[b] = 1;
		}
		pos += n;
		if ((size_t)n < want)
			break; /* end of file */
	}
	rc = t->cuStreamSynchronize(s->stream);
	for (unsigned i = 0; i < s->nbufs; i++)
		s->pending[i] = 0;
	if (rc != CUDA_SUCCESS)
		return gpufile__cuda_fail(rc, msg, msg_len,
		                          "finishing copies of %s to the GPU",
		                          r->h->path);
	return pos - off;
fail:
	drain(t, s);
	return err;
}

static ssize_t staged_write(const struct gpufile__cuda *t, struct stager *s,
                            struct gpufile__request *r, CUdeviceptr src,
                            size_t len, int64_t off, char *scratch, char *msg,
                            size_t msg_len)
{
	const int64_t end = off + (int64_t)len;
	int64_t fetch = off; /* next chunk to copy from the GPU */
	int64_t pos = off;   /* next chunk to write to the file */
	unsigned k_fetch = 0, k_write = 0;
	CUresult rc;
	int err;

	while (pos < end) {
		/* Keep up to nbufs copies from the GPU ahead of the writes. */
		while (fetch < end && k_fetch - k_write < s->nbufs) {
			const unsigned b = k_fetch++ % s->nbufs;
			const int64_t cend = chunk_end(fetch, end, s->buf_size);

			rc = t->cuMemcpyDtoHAsync(s->buf[b],
			                          src + (CUdeviceptr)(fetch - off),
			                          (size_t)(cend - fetch), s->stream);
			if (rc == CUDA_SUCCESS)
				rc = t->cuEventRecord(s->event[b], s->stream);
			if (rc != CUDA_SUCCESS) {
				err = gpufile__cuda_fail(
					rc, msg, msg_len,
					"copying %lld bytes from device memory %p "
					"for %s at offset %lld",
					(long long)(cend - fetch),
					(void *)(uintptr_t)(src + (CUdeviceptr)(fetch - off)),
					r->h->path, (long long)fetch);
				goto fail;
			}
			s->pending[b] = 1;
			fetch = cend;
		}
		{
			const unsigned b = k_write++ % s->nbufs;
			const int64_t cend = chunk_end(pos, end, s->buf_size);
			ssize_t n;

			err = wait_buffer(t, s, b, msg, msg_len);
			if (err)
				goto fail;
			n = gpufile__file_write(r->h, r->cfg.direct_io, s->buf[b],
			                        (size_t)(cend - pos), pos, scratch,
			                        GPUFILE__SCRATCH);
			if (n < 0) {
				err = (int)n;
				goto fail;
			}
			pos = cend;
		}
	}
	return (ssize_t)len;
fail:
	drain(t, s);
	return err;
}

ssize_t gpufile__staged_task(struct gpufile__request *r, char *buf,
                             size_t len, int64_t off, char *msg,
                             size_t msg_len)
{
	const struct gpufile__cuda *t = gpufile__cuda_if_loaded();
	struct stager *s;
	char *scratch = gpufile__thread_scratch();
	ssize_t n;
	int err;

	if (!t)
		return gpufile__fail(GPUFILE_ENOCUDA, "CUDA driver not loaded");
	s = stager_acquire(r->cfg.nthreads);
	if (!s) {
		snprintf(msg, msg_len, "out of memory for a bounce-buffer set");
		return -ENOMEM;
	}
	err = stager_prepare(t, s, (CUcontext)r->cuda_ctx, &r->cfg, msg,
	                     msg_len);
	if (err) {
		stager_return(s);
		return err;
	}
	if (t->cuCtxSetCurrent((CUcontext)r->cuda_ctx) != CUDA_SUCCESS) {
		stager_return(s);
		return gpufile__cuda_fail(CUDA_ERROR_INVALID_VALUE, msg,
		                          msg_len, "cuCtxSetCurrent");
	}
	if (r->is_write)
		n = staged_write(t, s, r, (CUdeviceptr)(uintptr_t)buf, len, off,
		                 scratch, msg, msg_len);
	else
		n = staged_read(t, s, r, (CUdeviceptr)(uintptr_t)buf, len, off,
		                scratch, msg, msg_len);
	stager_return(s);
	return n;
}

int gpufile__staging_warmup(const struct gpufile__settings *cfg)
{
	const struct gpufile__cuda *t = gpufile__cuda();
	struct stager *list = NULL;
	CUcontext ctx = NULL;
	char msg[256];
	int err = 0;

	if (!t)
		return GPUFILE_ENOCUDA;
	if (t->cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || !ctx) {
		CUdevice dev;
		if (t->cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
		    t->cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS)
			return gpufile__fail(GPUFILE_ECUDA,
			                     "cannot retain device 0's context");
	}
	for (unsigned i = 0; i < cfg->nthreads && !err; i++) {
		struct stager *s = stager_acquire(cfg->nthreads);
		if (!s)
			break;
		err = stager_prepare(t, s, ctx, cfg, msg, sizeof(msg));
		s->next = list;
		list = s;
	}
	while (list) {
		struct stager *s = list;
		list = s->next;
		stager_return(s);
	}
	return err;
}

void gpufile__staging_release(void)
{
	const struct gpufile__cuda *t = gpufile__cuda_if_loaded();

	pthread_mutex_lock(&stagers.lock);
	while (stagers.free_list) {
		struct stager *s = stagers.free_list;
		stagers.free_list = s->next;
		if (t)
			stager_free_buffers(t, s);
		free(s);
		stagers.count--;
	}
	pthread_mutex_unlock(&stagers.lock);
}
