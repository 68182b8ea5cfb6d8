/*
 * Memory-mapped handles: a read-only mapping of a file range, read into
 * host or device memory by the same pool, split into tasks like file
 * reads, and counted as the "mmap" path.
 *
 * A handle embeds a struct gpufile describing its descriptor, so that the
 * pool (which names r->h->path in messages and counts r->h->inflight) and
 * the staging path (which reads r->h->fd) serve it unchanged.
 *
 * Host targets are copied from the map, one task per task_size piece, in
 * parallel: by the guarded streaming copy of warm host reads (map_copy.c)
 * where host_map_copy allows it, else by memcpy. Device targets go through the
 * pinned bounce-buffer pipeline, whose reads take the same page-cache pages the
 * map shows (pread of the mapped range on the handle's descriptor), rather than
 * a cuMemcpyHtoD from the mapping: a copy from pageable memory is staged by the
 * CUDA driver through its own small pinned buffer and does not overlap the next
 * chunk's fetch, where the pipeline keeps the DMA busy while the next chunk is
 * read. A direct copy from pageable memory would only win where the GPU reads
 * host page tables (HMM/ATS systems), which gpufile does not assume. A file
 * that shrinks below the mapped range after gpufile_mmap_open() makes reads
 * of the lost bytes fail with -EIO, synchronous or not, device or host: host
 * copies run under gpufile's SIGBUS guard (map_copy.c), whatever handlers
 * the program installs, and check the size after copying; only with
 * host_map_copy=off, where gpufile installs no handler, does a host read
 * of a lost page fault (SIGBUS), as any access to a mapping would.
 */
#define _GNU_SOURCE
#include "api/api.h"
#include "platform/cuda_shim.h"
#include "core/decide.h"
#include "sources/remote.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

struct gpufile_mmap {
	struct gpufile file; /* what the pool and the staging path see */
	char *base;          /* the mapping (page aligned), or NULL if empty */
	size_t base_len;
	char *data; /* the byte at file offset map_offset */
	int64_t map_offset;
	size_t map_size;
};

/* The decision for every request on a map: decide.c's first rule. */
static void mmap_decision(struct gpufile__decision *d)
{
	gpufile__decide_source(GPUFILE__SOURCE_MMAP, d);
}

static struct gpufile_mmap *of(struct gpufile__request *r)
{
	return (struct gpufile_mmap *)((char *)r->h -
	                               offsetof(struct gpufile_mmap, file));
}

/* The file shrank under the map after gpufile_mmap_open(): -EIO, the
 * message naming its end now. */
static ssize_t shrank(struct gpufile_mmap *m, char *msg, size_t msg_len)
{
	struct stat st;

	if (gpufile__sys.fstat(m->file.fd, &st))
		st.st_size = -1;
	snprintf(msg, msg_len,
	         "reading %s: the file ends at %lld, inside the range "
	         "mapped at open (it shrank)",
	         m->file.path, (long long)st.st_size);
	return -EIO;
}

struct map_memcpy {
	char *dst;
	const char *src;
	size_t n;
};

static void map_memcpy(void *arg)
{
	const struct map_memcpy *c = arg;

	memcpy(c->dst, c->src, c->n);
}

/* Copies len bytes of the map at src into buf: by the streaming copy of
 * file.c's warm host reads for large tasks (map_copy.c), else by memcpy,
 * under the SIGBUS guard; with host_map_copy=off, where gpufile installs
 * no handler, by a bare memcpy (a page the file lost raises SIGBUS, as
 * any access to a map would). Returns 1 copied, 0 a page the file lost
 * faulted, -1 the guard could not be put in place (nothing copied). */
static int copy_from_map(const struct gpufile__request *r, char *buf,
                         const char *src, size_t len)
{
	const int mode = r->cfg.host_map_copy;
	struct map_memcpy c = {buf, src, len};

	if (mode == GPUFILE__MAP_COPY_OFF) {
		memcpy(buf, src, len);
		return 1;
	}
	if (len >= GPUFILE__MAP_COPY_MIN && gpufile__populate_works() &&
	    gpufile__stream_copy_ready(mode))
		return gpufile__user_range_ok(src, len, 0) &&
		       gpufile__stream_copy(buf, src, len) == 0;
	if (!gpufile__guard_ready(mode))
		return -1;
	return gpufile__guarded(map_memcpy, &c) == 0;
}

static ssize_t mmap_host_task(struct gpufile__request *r, char *buf, size_t len,
                              int64_t off, char *msg, size_t msg_len)
{
	struct gpufile_mmap *m = of(r);
	const char *src = m->data + (off - m->map_offset);
	ssize_t n;
	int copied;

	/* The copy is made by this process, not the kernel: memory the
	 * caller cannot write is pread's -EFAULT, not a SIGSEGV. */
	if (!gpufile__user_range_ok(buf, len, 1)) {
		snprintf(msg, msg_len,
		         "reading %s: the buffer at %p cannot be written",
		         m->file.path, (void *)buf);
		return -EFAULT;
	}
	copied = copy_from_map(r, buf, src, len);
	/* Without the guard (out of memory for its record of the program's
	 * handler), the same page-cache pages by pread, which stops at the
	 * file's end instead of faulting. */
	if (copied < 0) {
		n = gpufile__pread_full(m->file.fd, buf, len, off);
		if (n < 0) {
			snprintf(msg, msg_len, "reading %s: %s", m->file.path,
			         strerror((int)-n));
			return n;
		}
		copied = (size_t)n == len;
	}
	/* A file cut inside the range's last page reads zeros there, with
	 * no fault: only its size tells. */
	if (copied && gpufile__file_holds(&m->file, off + (int64_t)len))
		return (ssize_t)len;
	return shrank(m, msg, msg_len);
}

static const struct gpufile__task_ops mmap_host_ops = {.run = mmap_host_task};

/* Device targets: the staging path's tasks, whose pread of the mapped
 * range comes back short only where the file shrank under the map (every
 * request lies inside it). A short task is that error, for blocking and
 * asynchronous reads alike, deferred tasks included. */
static ssize_t mmap_device_task(struct gpufile__request *r, char *buf,
                                size_t len, int64_t off, char *msg,
                                size_t msg_len)
{
	ssize_t n = gpufile__staged_ops.run(r, buf, len, off, msg, msg_len);

	if (n != GPUFILE__TASK_DEFERRED && n >= 0 && (size_t)n < len)
		return shrank(of(r), msg, msg_len);
	return n;
}

static int mmap_device_settle(struct gpufile__task_result *out, int idle)
{
	int reported = gpufile__staged_ops.settle(out, idle);

	if (reported && out->n >= 0 && (size_t)out->n < out->len)
		out->n = shrank(of(out->r), out->msg, sizeof(out->msg));
	return reported;
}

static const struct gpufile__task_ops mmap_device_ops = {
    .run = mmap_device_task,
    .settle = mmap_device_settle,
};

/* Checks gpufile_mmap_open's arguments (and clears *out). */
static int check_args(gpufile_mmap_t **out, const char *path, const char *flags,
                      int64_t offset)
{
	if (!out)
		return gpufile__fail(-EINVAL, "gpufile_mmap_open: out is NULL");
	*out = NULL;
	if (!path)
		return gpufile__fail(-EINVAL,
		                     "gpufile_mmap_open: path is NULL");
	/* Opened as a local path, a URL failed with -ENOENT and a message
	 * that showed its password and presigned query. */
	if (gpufile__is_url(path))
		return gpufile__remote_not_local(path, "gpufile_mmap_open");
	if (!flags || strcmp(flags, "r") != 0)
		return gpufile__fail(
		    GPUFILE_EFLAGS,
		    "mapping %s: flags \"%s\": a memory-mapped "
		    "handle is read-only; only \"r\" is accepted",
		    path, flags ? flags : "(null)");
	if (offset < 0)
		return gpufile__fail(-EINVAL,
		                     "mapping %s: offset %lld is negative",
		                     path, (long long)offset);
	return 0;
}

/* Opens path, a regular file holding [offset, offset + *size); a *size
 * of 0 becomes the rest of the file. Returns the descriptor or an
 * error. */
static int open_range(const char *path, int64_t offset, size_t *size)
{
	struct stat st;
	int rc, fd;

	/* O_NONBLOCK: opening a FIFO must not wait for a writer. */
	fd = gpufile__sys.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0);
	if (fd < 0)
		return gpufile__fail(-errno, "opening %s: %s", path,
		                     strerror(errno));
	if (gpufile__sys.fstat(fd, &st) < 0) {
		rc = gpufile__fail(-errno, "fstat %s: %s", path,
		                   strerror(errno));
	} else if (!S_ISREG(st.st_mode)) {
		rc = gpufile__fail(-EINVAL, "mapping %s: not a regular file",
		                   path);
	} else if (offset > st.st_size ||
	           (*size &&
	            (uint64_t)*size > (uint64_t)(st.st_size - offset))) {
		rc = gpufile__fail(
		    -EINVAL,
		    "mapping %s: the range at offset %lld of %zu bytes "
		    "does not lie inside the file (%lld bytes)",
		    path, (long long)offset, *size, (long long)st.st_size);
	} else {
		if (!*size)
			*size = (size_t)(st.st_size - offset);
		return fd;
	}
	gpufile__sys.close(fd);
	return rc;
}

/* Maps [offset, offset + size) of fd into m, from the page holding
 * offset. Returns 0 or an error. */
static int map_range(struct gpufile_mmap *m, int fd, const char *path,
                     int64_t offset, size_t size)
{
	int64_t aligned = offset - offset % sysconf(_SC_PAGESIZE);

	m->base_len = size + (size_t)(offset - aligned);
	if (size) {
		m->base = mmap(NULL, m->base_len, PROT_READ, MAP_SHARED, fd,
		               (off_t)aligned);
		if (m->base == MAP_FAILED)
			return gpufile__fail(-errno, "mmap of %s: %s", path,
			                     strerror(errno));
		m->data = m->base + (offset - aligned);
	}
	m->map_offset = offset;
	m->map_size = size;
	return 0;
}

int gpufile_mmap_open(gpufile_mmap_t **out, const char *path, const char *flags,
                      int64_t offset, size_t size)
{
	struct gpufile__decision d;
	struct gpufile_mmap *m;
	int rc, fd;

	rc = check_args(out, path, flags, offset);
	if (rc)
		return rc;
	fd = open_range(path, offset, &size);
	if (fd < 0)
		return fd;
	m = calloc(1, sizeof(*m));
	if (!m || !(m->file.path = strdup(path))) {
		free(m);
		gpufile__sys.close(fd);
		return gpufile__fail(-ENOMEM, "out of memory mapping %s", path);
	}
	rc = map_range(m, fd, path, offset, size);
	if (rc) {
		free(m->file.path);
		free(m);
		gpufile__sys.close(fd);
		return rc;
	}
	m->file.fd = fd;
	m->file.direct_fd = -1;
	m->file.cufile_fd = -1;
	m->file.readable = 1;
	snprintf(m->file.direct_reason, sizeof(m->file.direct_reason),
	         "memory-mapped handle: page cache only");
	pthread_mutex_init(&m->file.lock, NULL);
	mmap_decision(&d);
	gpufile__stats_file(path, d.path, d.reason);
	gpufile__stats_file_hold(&m->file.stats_file, path);
	*out = m;
	return 0;
}

int gpufile_mmap_close(gpufile_mmap_t *m)
{
	int rc = 0;

	if (!m)
		return 0;
	/* Futures the caller has not waited for may still be running. */
	gpufile__handle_wait_idle(&m->file);
	gpufile__stats_file_release(&m->file.stats_file);
	if (m->base)
		munmap(m->base, m->base_len);
	if (gpufile__sys.close(m->file.fd) < 0)
		rc = gpufile__fail(-errno, "closing %s: %s", m->file.path,
		                   strerror(errno));
	pthread_mutex_destroy(&m->file.lock);
	free(m->file.path);
	free(m);
	return rc;
}

int64_t gpufile_mmap_file_size(gpufile_mmap_t *m)
{
	if (!m)
		return gpufile__fail(-EINVAL,
		                     "gpufile_mmap_file_size: handle is NULL");
	return gpufile_size(&m->file);
}

int gpufile_mmap_range(gpufile_mmap_t *m, int64_t *offset, size_t *size)
{
	if (!m)
		return gpufile__fail(-EINVAL,
		                     "gpufile_mmap_range: handle is NULL");
	if (offset)
		*offset = m->map_offset;
	if (size)
		*size = m->map_size;
	return 0;
}

int gpufile_mmap_path_info(gpufile_mmap_t *m, char *reason, size_t len)
{
	struct gpufile__decision d;

	if (!m)
		return gpufile__fail(-EINVAL,
		                     "gpufile_mmap_path_info: handle is NULL");
	mmap_decision(&d);
	if (reason && len)
		snprintf(reason, len, "%s", d.reason);
	return (int)d.path;
}

/* Validates a read and prepares r (not yet initialised for the pool). */
static int prepare(struct gpufile__request *r, struct gpufile_mmap *m,
                   void *buf, size_t size, int64_t offset)
{
	struct gpufile__decision d;
	gpufile_mem_t kind;
	void *ctx;
	int device, rc;

	if (!m)
		return gpufile__fail(-EINVAL, "memory-mapped handle is NULL");
	if (!buf && size)
		return gpufile__fail(-EFAULT, "reading %s: buffer is NULL",
		                     m->file.path);
	if (offset < m->map_offset || size > m->map_size ||
	    offset - m->map_offset > (int64_t)(m->map_size - size))
		return gpufile__fail(
		    -EINVAL,
		    "reading %s: %zu bytes at offset %lld reach outside the "
		    "mapped range [%lld, %lld)",
		    m->file.path, size, (long long)offset,
		    (long long)m->map_offset,
		    (long long)(m->map_offset + (int64_t)m->map_size));
	memset(r, 0, sizeof(*r));
	rc = gpufile__settings(&r->cfg);
	if (rc)
		return rc;
	rc = gpufile__classify(buf, &kind, &device, &ctx);
	if (rc)
		return rc;
	r->h = &m->file;
	r->buf = buf;
	r->size = size;
	r->offset = offset;
	r->device = -1;
	mmap_decision(&d);
	r->path = d.path;
	r->ops = &mmap_host_ops;
	if (kind == GPUFILE_MEM_HOST || kind == GPUFILE_MEM_PINNED)
		return 0;
	/* Memory mapped with cuMemMap reports no context: use the device's
	 * primary context. */
	if (!ctx && (rc = gpufile__primary_context(device, &ctx)))
		return rc;
	r->device = device;
	r->cuda_ctx = ctx;
	if (gpufile__ctx_id(gpufile__cuda(), ctx, &r->cuda_ctx_id))
		return gpufile__fail(GPUFILE_ECUDA,
		                     "the CUDA context of buffer %p has been "
		                     "destroyed",
		                     buf);
	r->ops = &mmap_device_ops;
	r->cfg.direct_io = GPUFILE__DIRECT_OFF; /* the map's pages */
	return 0;
}

ssize_t gpufile_mmap_pread(gpufile_mmap_t *m, void *buf, size_t size,
                           int64_t offset)
{
	struct gpufile__request r;
	ssize_t result;
	int rc = prepare(&r, m, buf, size, offset);

	if (rc)
		return rc;
	gpufile__request_init(&r);
	if (r.ops == &mmap_host_ops && r.ntasks <= 1) {
		gpufile__request_run_inline(&r);
	} else {
		rc = gpufile__request_submit(&r);
		if (rc) {
			gpufile__request_destroy(&r);
			return rc;
		}
	}
	result = gpufile__request_wait(&r, -1);
	gpufile__request_destroy(&r);
	return result;
}

int gpufile_mmap_pread_async(gpufile_mmap_t *m, void *buf, size_t size,
                             int64_t offset, gpufile_future_t **out)
{
	struct gpufile__request r;
	int rc;

	if (!out)
		return gpufile__fail(-EINVAL, "future pointer is NULL");
	*out = NULL;
	rc = prepare(&r, m, buf, size, offset);
	if (rc)
		return rc;
	return gpufile__future_submit(&r, out);
}
