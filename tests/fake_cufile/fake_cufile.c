/* A fake libcufile for tests; see fake_cufile.h. */
#define _GNU_SOURCE
#include "cufile_abi.h"
#include "fake_cufile.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* A registered file: the caller's descriptor may be O_DIRECT, which the
 * unaligned "device" buffers of the tests cannot use, so the fake reads
 * through its own buffered descriptor of the same file. */
struct fake_handle {
	int fd;
	int buffered_fd;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_cufile_counts counts;
static int driver_open;
static CUfilePerGpuStats_t gpu0;

static CUfileError_t status(int err)
{
	CUfileError_t e = {(CUfileOpError)err, 0};
	return e;
}

static int env_status(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? atoi(v) : 0;
}

static struct fake_cufile_fault fault;
static int fault_set;
static long fault_calls;

EXPORT void fake_cufile_inject(const struct fake_cufile_fault *f)
{
	pthread_mutex_lock(&lock);
	fault_set = f != NULL;
	if (f)
		fault = *f;
	fault_calls = 0;
	pthread_mutex_unlock(&lock);
}

/* Applies the injected fault to a call: returns 0 with *size possibly
 * cut, or the value the call returns (errno set). */
static ssize_t inject(int is_write, size_t *size, off_t foff)
{
	ssize_t ret = 0;
	int err = 0;

	pthread_mutex_lock(&lock);
	if (fault_set && fault.is_write == is_write) {
		long k = fault_calls++;
		if (k == fault.call ||
		    (fault.len && foff < fault.at + fault.len &&
		     foff + (off_t)*size > fault.at)) {
			err = fault.err;
			ret = err ? -1 : -(ssize_t)fault.status;
		} else {
			if (fault.max_len && *size > fault.max_len)
				*size = fault.max_len;
			if (fault.short_by && *size > fault.short_by)
				*size -= fault.short_by;
		}
	}
	pthread_mutex_unlock(&lock);
	if (err)
		errno = err;
	return ret;
}

EXPORT void fake_cufile_counts(struct fake_cufile_counts *out)
{
	pthread_mutex_lock(&lock);
	*out = counts;
	pthread_mutex_unlock(&lock);
}

EXPORT CUfileError_t cuFileDriverOpen(void)
{
	int fail = env_status("FAKE_CUFILE_FAIL_OPEN");

	pthread_mutex_lock(&lock);
	counts.driver_open++;
	if (!fail)
		driver_open = 1;
	pthread_mutex_unlock(&lock);
	return status(fail);
}

EXPORT CUfileError_t cuFileDriverClose_v2(void)
{
	pthread_mutex_lock(&lock);
	counts.driver_close++;
	driver_open = 0;
	pthread_mutex_unlock(&lock);
	return status(0);
}

EXPORT CUfileError_t cuFileDriverClose(void)
{
	return cuFileDriverClose_v2();
}

EXPORT CUfileError_t cuFileGetVersion(int *version)
{
	*version = 1150;
	return status(0);
}

/* The tunables the setters change, starting at cuFile 1.15's defaults
 * (KiB); FAKE_CUFILE_NVFS=MAJOR.MINOR reports nvidia-fs loaded. */
static struct {
	int set; /* changed since load */
	int poll;
	size_t poll_thresh, max_direct_io, max_cache, max_pinned;
} tun = {0, 0, 4, 16384, 131072, 33554432};

EXPORT CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *p)
{
	const char *nvfs = getenv("FAKE_CUFILE_NVFS");

	memset(p, 0, sizeof(*p));
	pthread_mutex_lock(&lock);
	/* Before any setter, the value the tests of the first layer know. */
	p->nvfs.max_direct_io_size = tun.set ? tun.max_direct_io : 16u << 20;
	p->nvfs.poll_thresh_size = tun.poll_thresh;
	p->nvfs.dcontrolflags = (tun.poll ? 1u << CU_FILE_USE_POLL_MODE : 0) |
	                        1u << CU_FILE_ALLOW_COMPAT_MODE;
	p->max_device_cache_size = (unsigned)tun.max_cache;
	p->per_buffer_cache_size = 1024;
	p->max_device_pinned_mem_size = (unsigned)tun.max_pinned;
	p->max_batch_io_size = 128;
	p->max_batch_io_timeout_msecs = 5;
	pthread_mutex_unlock(&lock);
	if (nvfs && sscanf(nvfs, "%u.%u", &p->nvfs.major_version,
	                   &p->nvfs.minor_version) != 2)
		p->nvfs.major_version = p->nvfs.minor_version = 0;
	if (env_status("FAKE_CUFILE_P2P"))
		p->fflags |= 1u << CU_FILE_P2P_SUPPORTED;
	return status(0);
}

/* FAKE_CUFILE_REFUSE=NAME makes setter NAME answer
 * CU_FILE_DRIVER_UNSUPPORTED_LIMIT, as cuFile does for a value out of its
 * range. */
static int refused(const char *name)
{
	const char *v = getenv("FAKE_CUFILE_REFUSE");
	return v && strcmp(v, name) == 0;
}

EXPORT CUfileError_t cuFileDriverSetPollMode(_Bool poll, size_t thresh)
{
	if (refused("cuFileDriverSetPollMode"))
		return status(CU_FILE_DRIVER_UNSUPPORTED_LIMIT);
	pthread_mutex_lock(&lock);
	tun.set = 1;
	tun.poll = poll;
	tun.poll_thresh = thresh;
	pthread_mutex_unlock(&lock);
	return status(0);
}

#define FAKE_SETTER(fn, field)                                                 \
	EXPORT CUfileError_t fn(size_t kb)                                     \
	{                                                                      \
		if (refused(#fn))                                              \
			return status(CU_FILE_DRIVER_UNSUPPORTED_LIMIT);       \
		pthread_mutex_lock(&lock);                                     \
		if (!tun.set)                                                  \
			tun.max_direct_io = 16384;                             \
		tun.set = 1;                                                   \
		tun.field = kb;                                                \
		pthread_mutex_unlock(&lock);                                   \
		return status(0);                                              \
	}
FAKE_SETTER(cuFileDriverSetMaxDirectIOSize, max_direct_io)
FAKE_SETTER(cuFileDriverSetMaxCacheSize, max_cache)
FAKE_SETTER(cuFileDriverSetMaxPinnedMemSize, max_pinned)
#undef FAKE_SETTER

EXPORT CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh,
                                          CUfileDescr_t *descr)
{
	int fail = env_status("FAKE_CUFILE_FAIL_REGISTER");
	struct fake_handle *h;
	char path[64];
	int flags;

	if (!driver_open)
		return status(CU_FILE_DRIVER_NOT_INITIALIZED);
	if (fail)
		return status(fail);
	if (descr->type != CU_FILE_HANDLE_TYPE_OPAQUE_FD || descr->fs_ops)
		return status(CU_FILE_INVALID_VALUE);
	flags = fcntl(descr->handle.fd, F_GETFL);
	if (flags < 0)
		return status(CU_FILE_INVALID_VALUE);
	h = calloc(1, sizeof(*h));
	if (!h)
		return status(CU_FILE_NOMEM_ERROR);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", descr->handle.fd);
	h->fd = descr->handle.fd;
	h->buffered_fd = open(path, (flags & O_ACCMODE) | O_CLOEXEC);
	if (h->buffered_fd < 0) {
		free(h);
		return status(CU_FILE_INVALID_FILE_TYPE);
	}
	pthread_mutex_lock(&lock);
	counts.handle_register++;
	if (flags & O_DIRECT)
		counts.handle_register_direct++;
	pthread_mutex_unlock(&lock);
	*fh = h;
	return status(0);
}

EXPORT void cuFileHandleDeregister(CUfileHandle_t fh)
{
	struct fake_handle *h = fh;

	pthread_mutex_lock(&lock);
	counts.handle_deregister++;
	pthread_mutex_unlock(&lock);
	close(h->buffered_fd);
	free(h);
}

static void record(int is_write, const void *base, size_t size, off_t foff,
                   off_t boff, ssize_t n)
{
	pthread_mutex_lock(&lock);
	if (is_write) {
		counts.writes++;
		counts.write_bytes += n > 0 ? (uint64_t)n : 0;
	} else {
		counts.reads++;
		counts.read_bytes += n > 0 ? (uint64_t)n : 0;
	}
	counts.last_base = base;
	counts.last_buf_offset = boff;
	counts.last_file_offset = foff;
	if (!counts.min_io || size < counts.min_io)
		counts.min_io = size;
	if (size > counts.max_io)
		counts.max_io = size;
	if (counts.stats_level >= 1) {
		if (is_write) {
			gpu0.n_total_writes++;
			gpu0.n_posix_writes++;
			gpu0.writes_bytes += n > 0 ? (uint64_t)n : 0;
		} else {
			gpu0.n_total_reads++;
			gpu0.n_posix_reads++;
			gpu0.read_bytes += n > 0 ? (uint64_t)n : 0;
		}
		if (foff % 4096 || size % 4096) {
			if (is_write)
				gpu0.n_unaligned_writes++;
			else
				gpu0.n_unaligned_reads++;
		}
	}
	pthread_mutex_unlock(&lock);
}

/* Like cuFile: -1 with errno for file system errors. */
EXPORT ssize_t cuFileRead(CUfileHandle_t fh, void *base, size_t size,
                          off_t foff, off_t boff)
{
	struct fake_handle *h = fh;
	size_t done = 0;
	ssize_t injected;

	if (!driver_open)
		return -CU_FILE_DRIVER_NOT_INITIALIZED;
	injected = inject(0, &size, foff);
	if (injected)
		return injected;
	while (done < size) {
		ssize_t n = pread(h->buffered_fd, (char *)base + boff + done,
		                  size - done, foff + (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	record(0, base, size, foff, boff, (ssize_t)done);
	return (ssize_t)done;
}

EXPORT ssize_t cuFileWrite(CUfileHandle_t fh, const void *base, size_t size,
                           off_t foff, off_t boff)
{
	struct fake_handle *h = fh;
	size_t done = 0;
	ssize_t injected;

	if (!driver_open)
		return -CU_FILE_DRIVER_NOT_INITIALIZED;
	injected = inject(1, &size, foff);
	if (injected)
		return injected;
	while (done < size) {
		ssize_t n =
		    pwrite(h->buffered_fd, (const char *)base + boff + done,
		           size - done, foff + (off_t)done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		done += (size_t)n;
	}
	record(1, base, size, foff, boff, (ssize_t)done);
	return (ssize_t)done;
}

EXPORT CUfileError_t cuFileBufRegister(const void *base, size_t len, int flags)
{
	(void)base;
	(void)len;
	(void)flags;
	pthread_mutex_lock(&lock);
	counts.buf_register++;
	pthread_mutex_unlock(&lock);
	return status(0);
}

EXPORT CUfileError_t cuFileBufDeregister(const void *base)
{
	(void)base;
	pthread_mutex_lock(&lock);
	counts.buf_deregister++;
	pthread_mutex_unlock(&lock);
	return status(0);
}

EXPORT CUfileError_t cuFileSetStatsLevel(int level)
{
	if (level < 0 || level > 3)
		return status(CU_FILE_INVALID_VALUE);
	pthread_mutex_lock(&lock);
	counts.stats_level = level;
	pthread_mutex_unlock(&lock);
	return status(0);
}

/* The cuFile 1.15 layout: num_gpus at 1024, per_gpu_stats at 1032. */
EXPORT CUfileError_t cuFileGetStatsL3(void *stats)
{
	const size_t l1 = GPUFILE__CUFILE_L1_SIZE_1_15;
	uint32_t one = 1;

	pthread_mutex_lock(&lock);
	if (counts.stats_level < 3) {
		pthread_mutex_unlock(&lock);
		return status(CU_FILE_INVALID_VALUE);
	}
	memset(stats, 0, 5000);
	memcpy((char *)stats + GPUFILE__CUFILE_L3_NUM_GPUS(l1), &one,
	       sizeof(one));
	memcpy((char *)stats + GPUFILE__CUFILE_L3_PER_GPU(l1), &gpu0,
	       sizeof(gpu0));
	pthread_mutex_unlock(&lock);
	return status(0);
}

/* ---- stream-ordered I/O (cuFileReadAsync, cuFileWriteAsync) ---- */

/* The fake has no CUDA of its own: the test hands it the fake driver's
 * cuLaunchHostFunc, and each request runs as a host function on the
 * stream, reading its arguments when the stream reaches it, as cuFile
 * does. Without a launcher the calls answer CU_FILE_PLATFORM_NOT_SUPPORTED
 * (cuFile's answer where it cannot queue on streams). */
typedef int (*fake_launch_fn)(void *stream, void (*fn)(void *), void *data);
static fake_launch_fn launcher;
static uint64_t async_calls;

EXPORT void fake_cufile_set_launcher(fake_launch_fn fn)
{
	pthread_mutex_lock(&lock);
	launcher = fn;
	async_calls = 0;
	pthread_mutex_unlock(&lock);
}

/* Stream-ordered requests queued so far (since the last launcher set). */
EXPORT uint64_t fake_cufile_async_calls(void)
{
	uint64_t n;

	pthread_mutex_lock(&lock);
	n = async_calls;
	pthread_mutex_unlock(&lock);
	return n;
}

struct async_req {
	int is_write;
	CUfileHandle_t fh;
	void *base;
	size_t *size_p;
	off_t *file_offset_p, *buf_offset_p;
	ssize_t *done_p;
};

static void run_async(void *arg)
{
	struct async_req *a = arg;
	ssize_t n = a->is_write
	                ? cuFileWrite(a->fh, a->base, *a->size_p,
	                              *a->file_offset_p, *a->buf_offset_p)
	                : cuFileRead(a->fh, a->base, *a->size_p,
	                             *a->file_offset_p, *a->buf_offset_p);

	*a->done_p = n == -1 ? -errno : n;
	free(a);
}

static CUfileError_t queue_async(int is_write, CUfileHandle_t fh, void *base,
                                 size_t *size_p, off_t *file_offset_p,
                                 off_t *buf_offset_p, ssize_t *done_p,
                                 void *stream)
{
	struct async_req *a;
	fake_launch_fn fn;

	pthread_mutex_lock(&lock);
	fn = launcher;
	pthread_mutex_unlock(&lock);
	if (!fn)
		return status(CU_FILE_PLATFORM_NOT_SUPPORTED);
	if (!fh || !size_p || !file_offset_p || !buf_offset_p || !done_p)
		return status(CU_FILE_INVALID_VALUE);
	a = malloc(sizeof(*a));
	if (!a)
		return status(CU_FILE_INTERNAL_ERROR);
	*a = (struct async_req){is_write,      fh,           base,  size_p,
	                        file_offset_p, buf_offset_p, done_p};
	if (fn(stream, run_async, a) != 0) {
		free(a);
		return status(CU_FILE_INTERNAL_ERROR);
	}
	pthread_mutex_lock(&lock);
	async_calls++;
	pthread_mutex_unlock(&lock);
	return status(CU_FILE_SUCCESS);
}

EXPORT CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *base,
                                     size_t *size_p, off_t *file_offset_p,
                                     off_t *buf_offset_p, ssize_t *read_p,
                                     void *stream)
{
	return queue_async(0, fh, base, size_p, file_offset_p, buf_offset_p,
	                   read_p, stream);
}

EXPORT CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void *base,
                                      size_t *size_p, off_t *file_offset_p,
                                      off_t *buf_offset_p, ssize_t *written_p,
                                      void *stream)
{
	return queue_async(1, fh, base, size_p, file_offset_p, buf_offset_p,
	                   written_p, stream);
}

/* ---- the batch API: every I/O runs at submit (as cuFileRead would,
 * injected faults included); cuFileBatchIOGetStatus reports them. At most
 * 128 I/Os per batch, cuFile's default io_batchsize. ---- */

struct fake_batch {
	unsigned cap, n, reported;
	CUfileIOEvents_t ev[];
};

EXPORT CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t *batch, unsigned nr)
{
	struct fake_batch *b;

	if (!driver_open)
		return status(CU_FILE_DRIVER_NOT_INITIALIZED);
	if (!batch || nr == 0 || nr > 128)
		return status(CU_FILE_INVALID_VALUE);
	b = calloc(1, sizeof(*b) + nr * sizeof(CUfileIOEvents_t));
	if (!b)
		return status(CU_FILE_NOMEM_ERROR);
	b->cap = nr;
	*batch = b;
	pthread_mutex_lock(&lock);
	counts.batch_setups++;
	pthread_mutex_unlock(&lock);
	return status(CU_FILE_SUCCESS);
}

EXPORT CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch, unsigned nr,
                                         CUfileIOParams_t *io, unsigned flags)
{
	struct fake_batch *b = batch;

	(void)flags;
	if (!b || !io || nr > b->cap)
		return status(CU_FILE_INVALID_VALUE);
	pthread_mutex_lock(&lock);
	counts.batch_submits++;
	counts.batch_ios += nr;
	pthread_mutex_unlock(&lock);
	b->n = nr;
	b->reported = 0;
	for (unsigned i = 0; i < nr; i++) {
		ssize_t n;

		if (io[i].mode != CUFILE_BATCH || io[i].opcode != CUFILE_READ) {
			b->ev[i] =
			    (CUfileIOEvents_t){io[i].cookie, CUFILE_INVALID, 0};
			continue;
		}
		n = cuFileRead(io[i].fh, io[i].u.batch.devPtr_base,
		               io[i].u.batch.size, io[i].u.batch.file_offset,
		               io[i].u.batch.devPtr_offset);
		if (n == -1)
			n = -errno;
		b->ev[i] = (CUfileIOEvents_t){
		    io[i].cookie, n < 0 ? CUFILE_FAILED : CUFILE_COMPLETE,
		    (size_t)n};
	}
	return status(CU_FILE_SUCCESS);
}

EXPORT CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch,
                                            unsigned min_nr, unsigned *nr,
                                            CUfileIOEvents_t *ev,
                                            struct timespec *timeout)
{
	struct fake_batch *b = batch;
	unsigned k = 0;

	(void)min_nr;
	(void)timeout;
	if (!b || !nr || !ev)
		return status(CU_FILE_INVALID_VALUE);
	if (env_status("FAKE_CUFILE_FAIL_GETSTATUS"))
		return status(env_status("FAKE_CUFILE_FAIL_GETSTATUS"));
	while (k < *nr && b->reported < b->n)
		ev[k++] = b->ev[b->reported++];
	*nr = k;
	return status(CU_FILE_SUCCESS);
}

EXPORT CUfileError_t cuFileBatchIOCancel(CUfileBatchHandle_t batch)
{
	if (!batch)
		return status(CU_FILE_INVALID_VALUE);
	pthread_mutex_lock(&lock);
	counts.batch_cancels++;
	pthread_mutex_unlock(&lock);
	return status(CU_FILE_SUCCESS);
}

EXPORT void cuFileBatchIODestroy(CUfileBatchHandle_t batch)
{
	if (!batch)
		return;
	pthread_mutex_lock(&lock);
	counts.batch_destroys++;
	pthread_mutex_unlock(&lock);
	free(batch);
}
