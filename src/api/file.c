/*
 * File handles, and the one place where a request's data path is decided.
 */
#define _GNU_SOURCE
#include "api/api.h"
#include "platform/cuda_shim.h"
#include "paths/cufile_shim.h"
#include "core/decide.h"
#include "sources/remote.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

struct gpufile_future {
	struct gpufile__request r;
};

static int parse_flags(const char *flags, int *oflags, int *readable,
                       int *writable, int *append)
{
	static const struct {
		const char *text;
		int oflags, readable, writable, append;
	} modes[] = {
	    {"r", O_RDONLY, 1, 0, 0},
	    {"r+", O_RDWR, 1, 1, 0},
	    {"w", O_WRONLY | O_CREAT | O_TRUNC, 0, 1, 0},
	    {"w+", O_RDWR | O_CREAT | O_TRUNC, 1, 1, 0},
	    {"a", O_WRONLY | O_CREAT, 0, 1, 1},
	};

	for (size_t i = 0; flags && i < sizeof(modes) / sizeof(modes[0]); i++) {
		if (strcmp(flags, modes[i].text) == 0) {
			*oflags = modes[i].oflags;
			*readable = modes[i].readable;
			*writable = modes[i].writable;
			*append = modes[i].append;
			return 0;
		}
	}
	return GPUFILE_EFLAGS;
}

/* The error for a file of kind kind at path. */
static int refuse_special(const char *path, mode_t mode)
{
	const int err = S_ISDIR(mode)                      ? -EISDIR
	                : S_ISFIFO(mode) || S_ISSOCK(mode) ? -ESPIPE
	                                                   : -ENODEV;

	return gpufile__fail(err,
	                     "opening %s: it is %s; gpufile reads and writes "
	                     "only regular files and block devices (reads at "
	                     "offsets, in parallel)",
	                     path, gpufile__special_kind(mode));
}

/* Opens h->path into h->fd (which the caller closes on failure) with
 * oflags, refusing special files; *st gets its status. flags is the
 * caller's, for the message. Returns 0 or an error. */
static int open_fd(struct gpufile *h, const char *flags, int oflags,
                   struct stat *st)
{
	const char *path = h->path;
	int rc;

	/* O_NONBLOCK: opening a FIFO (or a device) must not wait for a
	 * writer; the kind is checked below, before any I/O. */
	h->fd = gpufile__sys.open(path, oflags | O_CLOEXEC | O_NONBLOCK, 0644);
	if (h->fd < 0) {
		rc = -errno;
		/* A FIFO without a reader, or a socket, refuses a
		 * non-blocking open with ENXIO: name what it is. */
		if (rc == -ENXIO && stat(path, st) == 0 &&
		    gpufile__special_kind(st->st_mode))
			return refuse_special(path, st->st_mode);
		return gpufile__fail(rc, "opening %s (\"%s\"): %s", path, flags,
		                     strerror(-rc));
	}
	if (gpufile__sys.fstat(h->fd, st) < 0) {
		rc = -errno;
		return gpufile__fail(rc, "fstat %s: %s", path, strerror(-rc));
	}
	if (gpufile__special_kind(st->st_mode))
		return refuse_special(path, st->st_mode);
	/* The status flags the descriptor was opened with, less
	 * O_NONBLOCK (F_SETFL ignores the access mode and O_CREAT/O_TRUNC):
	 * one call, not F_GETFL first. A non-blocking descriptor would make
	 * io_uring fail uncached reads with EAGAIN. */
	if (fcntl(h->fd, F_SETFL, oflags) < 0) {
		rc = -errno;
		return gpufile__fail(rc, "opening %s: fcntl: %s", path,
		                     strerror(-rc));
	}
	return 0;
}

/* gpufile_open (opts NULL) or gpufile_open_remote of a remote object: the
 * source makes the handle, tracked here for fork as every handle is. */
static int open_remote(gpufile_t **out, const char *url, const char *flags,
                       const gpufile_remote_opts_t *opts)
{
	int rc = gpufile__webhdfs_url(url)
	             ? gpufile__webhdfs_open(out, url, flags, opts)
	         : flags && !strcmp(flags, "w")
	             ? gpufile__upload_open(out, url, opts)
	             : gpufile__remote_open_with(out, url, flags, opts);

	if (rc == 0) {
		gpufile__stats_file_hold(&(*out)->stats_file, (*out)->path);
		gpufile__fork_track(*out);
	}
	return rc;
}

int gpufile_open_remote(gpufile_t **out, const char *url, const char *flags,
                        const gpufile_remote_opts_t *opts)
{
	gpufile_remote_opts_t o = {0};
	int rc;

	if (!out)
		return gpufile__fail(-EINVAL, "gpufile_open_remote: out is "
		                              "NULL");
	*out = NULL;
	if (!url)
		return gpufile__fail(-EINVAL, "gpufile_open_remote: url is "
		                              "NULL");
	if (!gpufile__is_url(url))
		return gpufile__fail(-EINVAL,
		                     "gpufile_open_remote: %s is not a URL "
		                     "(http://, https://, s3://, webhdfs://)",
		                     url);
	if (opts) {
		/* A caller built against a newer header may pass a larger
		 * struct: the fields this library knows are read. */
		rc = GPUFILE__SIZED_CHECK(opts, gpufile_remote_opts_t);
		if (rc)
			return rc;
		memcpy(&o, opts,
		       opts->size < sizeof(o) ? opts->size : sizeof(o));
		for (size_t i = sizeof(o); i < opts->size; i++)
			if (((const unsigned char *)opts)[i])
				return gpufile__fail(
				    -EINVAL,
				    "gpufile_open_remote: opts sets fields "
				    "past byte %zu, which this gpufile does "
				    "not "
				    "know (built against a newer gpufile.h)",
				    sizeof(o));
	}
	return open_remote(out, url, flags, opts ? &o : NULL);
}

int gpufile_open(gpufile_t **out, const char *path, const char *flags)
{
	struct gpufile__settings cfg;
	struct gpufile *h;
	struct stat st;
	int64_t size;
	int oflags, readable, writable, append, rc;

	if (!out)
		return gpufile__fail(-EINVAL, "gpufile_open: out is NULL");
	*out = NULL;
	if (!path)
		return gpufile__fail(-EINVAL, "gpufile_open: path is NULL");
	if (parse_flags(flags, &oflags, &readable, &writable, &append)) {
		/* A URL's password and query left out. */
		char *url =
		    gpufile__is_url(path) ? gpufile__remote_redact(path) : NULL;

		rc = gpufile__fail(GPUFILE_EFLAGS,
		                   "opening %s: invalid flags \"%s\" (use r, "
		                   "r+, w, w+ or a)",
		                   url ? url
		                   : gpufile__is_url(path)
		                       ? GPUFILE__URL_NOT_SHOWN
		                       : path,
		                   flags ? flags : "(null)");
		free(url);
		return rc;
	}
	if (gpufile__is_url(path)) /* http(s)://, s3:// (remote.c) */
		return open_remote(out, path, flags, NULL);
	rc = gpufile__settings(&cfg);
	if (rc)
		return rc;
	h = calloc(1, sizeof(*h));
	if (!h || !(h->path = strdup(path))) {
		free(h);
		return gpufile__fail(-ENOMEM, "opening %s: out of memory",
		                     path);
	}
	rc = open_fd(h, flags, oflags, &st);
	if (rc == 0 && append && S_ISBLK(st.st_mode))
		rc = gpufile__fail(
		    -EINVAL,
		    "opening %s (\"a\"): it is a block device, "
		    "whose size is fixed: nothing can be appended "
		    "(open it \"r+\" and write at offsets)",
		    path);
	/* A regular file's size is in st; a block device's is the
	 * kernel's (its st_size is 0). */
	size = rc == 0 ? (int64_t)st.st_size : 0;
	if (rc == 0 && S_ISBLK(st.st_mode) &&
	    (rc = gpufile__fd_size(h->fd, &size)))
		rc = gpufile__fail(rc, "opening %s: its size: %s", path,
		                   strerror(-rc));
	if (rc) {
		if (h->fd >= 0)
			gpufile__sys.close(h->fd);
		free(h->path);
		free(h);
		return rc;
	}
	h->readable = readable;
	h->writable = writable;
	h->append = append;
	h->regular = S_ISREG(st.st_mode);
	h->file_dev = st.st_dev;
	h->file_ino = st.st_ino;
	h->append_pos = size;
	atomic_init(&h->direct_refused, 0);
	atomic_init(&h->fs_magic, 0);
	atomic_init(&h->prealloc_refused, 0);
	atomic_init(&h->inflight, 0);
	pthread_mutex_init(&h->lock, NULL);
	h->cufile_state = GPUFILE__CUFILE_UNDECIDED;
	h->cufile_fd = -1;
	/* The O_DIRECT descriptor is opened by its first use (direct_fd.c):
	 * most handles never need it. */
	if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))
		gpufile__direct_fd_init(h, cfg.direct_io);
	else
		h->direct_fd = -1; /* GPUFILE__DIRECT_FD_NONE */
	h->stats_record = gpufile__stats_file_open(h->path);
	gpufile__stats_file_hold(&h->stats_file, h->path);
	gpufile__fork_track(h);
	*out = h;
	return 0;
}

int gpufile_close(gpufile_t *h)
{
	int rc = 0;

	if (!h)
		return 0;
	/* Futures the caller has not waited for may still be running. */
	gpufile__handle_wait_idle(h);
	gpufile__fork_untrack(h);
	gpufile__stats_file_release(&h->stats_file);
	if (h->remote)
		return h->source_ops ? h->source_ops->close(h)
		                     : gpufile__remote_close(h);
	if (h->map)
		munmap(h->map, h->map_len);
	while (h->old_maps) {
		struct gpufile__old_map *m = h->old_maps;

		h->old_maps = m->next;
		munmap(m->map, m->len);
		free(m);
	}
	if (h->cufile_handle)
		gpufile__cufile_handle_deregister(h->cufile_handle);
	if (h->cufile_fd_owned)
		gpufile__sys.close(h->cufile_fd);
	if (atomic_load(&h->direct_state) == GPUFILE__DIRECT_FD_OPEN)
		gpufile__sys.close(h->direct_fd);
	if (gpufile__sys.close(h->fd) < 0)
		rc = gpufile__fail(-errno, "closing %s: %s", h->path,
		                   strerror(errno));
	pthread_mutex_destroy(&h->lock);
	free(h->path);
	free(h);
	return rc;
}

int64_t gpufile_size(gpufile_t *h)
{
	int64_t size;
	int rc;

	if (!h)
		return gpufile__fail(-EINVAL, "gpufile_size: handle is NULL");
	if (h->remote)
		return h->source_ops ? h->source_ops->size(h)
		                     : gpufile__remote_size(h);
	rc = gpufile__fd_size(h->fd, &size);
	if (rc)
		return gpufile__fail(rc, "the size of %s: %s", h->path,
		                     strerror(-rc));
	return size;
}

const char *gpufile_filename(gpufile_t *h)
{
	return h ? h->path : NULL;
}

int gpufile_sync(gpufile_t *h)
{
	if (!h)
		return gpufile__fail(-EINVAL, "gpufile_sync: handle is NULL");
	if (h->remote && h->source_ops)
		return h->source_ops->sync(h);
	if (h->remote)
		return 0; /* read-only: nothing to flush */
	if (gpufile__sys.fdatasync(h->fd) < 0)
		return gpufile__fail(-errno, "fdatasync %s: %s", h->path,
		                     strerror(errno));
	return 0;
}

/* The host path: bytes go straight between the file and buf. */
static ssize_t host_task(struct gpufile__request *r, char *buf, size_t len,
                         int64_t off, char *msg, size_t msg_len)
{
	char *scratch = r->cfg.direct_io == GPUFILE__DIRECT_OFF
	                    ? NULL
	                    : gpufile__thread_scratch();

	(void)msg;
	(void)msg_len;
	if (r->is_write)
		return gpufile__file_write(r->h, r->cfg.direct_io, buf, len,
		                           off, scratch, GPUFILE__SCRATCH);
	if (gpufile__map_read(r->h, &r->cfg, buf, len, off))
		return (ssize_t)len;
	return gpufile__file_read(r->h, r->cfg.direct_io, buf, len, off,
	                          scratch, GPUFILE__SCRATCH);
}

static const struct gpufile__task_ops host_ops = {.run = host_task};
static const struct gpufile__task_ops cufile_ops = {.run =
                                                        gpufile__cufile_task};

/*
 * The handle's cuFile state, established once (caller holds h->lock):
 * cuFile loaded and its driver open, an O_DIRECT descriptor, and the file
 * registered; or why not, with the error a compat_mode=off request gets.
 */
static void cufile_establish(struct gpufile *h, void *ctx)
{
	const int access = h->readable && h->writable ? O_RDWR
	                   : h->writable              ? O_WRONLY
	                                              : O_RDONLY;
	CUfileHandle_t fh;
	int err, status;

	if (h->cufile_state != GPUFILE__CUFILE_UNDECIDED)
		return;
	h->cufile_state = GPUFILE__CUFILE_UNAVAILABLE;
	if (!gpufile__cufile_open(ctx, &err, &status)) {
		h->cufile_error = err;
		h->cufile_status = status;
		snprintf(h->cufile_reason, sizeof(h->cufile_reason), "%s",
		         gpufile_errmsg());
		return;
	}
	/* cuFile's nvidia-fs path needs O_DIRECT; its compat path would take
	 * a buffered descriptor, but a file cuFile cannot accelerate is
	 * better served by gpufile's own path. */
	h->cufile_fd = gpufile__direct_fd_locked(h);
	if (h->cufile_fd < 0) {
		h->cufile_fd = gpufile__reopen_direct(h, access);
		if (h->cufile_fd < 0) {
			struct statfs sfs;
			const char *fs = "this file system";

			err = h->cufile_fd;
			h->cufile_fd = -1;
			if (gpufile__sys.fstatfs(h->fd, &sfs) == 0)
				fs = gpufile__fs_name((long)sfs.f_type);
			h->cufile_error = err;
			if (err == -ESTALE)
				snprintf(h->cufile_reason,
				         sizeof(h->cufile_reason),
				         "%s was replaced while it was opened; "
				         "cuFile needs an O_DIRECT descriptor "
				         "on the file first opened",
				         h->path);
			else
				snprintf(h->cufile_reason,
				         sizeof(h->cufile_reason),
				         "O_DIRECT refused by %s (%s); cuFile "
				         "needs it",
				         fs, strerror(-err));
			return;
		}
		h->cufile_fd_owned = 1;
	}
	if (gpufile__cufile_handle_register(ctx, h->cufile_fd, &fh, &status)) {
		h->cufile_error = GPUFILE_ECUFILE;
		h->cufile_status = status;
		snprintf(h->cufile_reason, sizeof(h->cufile_reason),
		         "cuFileHandleRegister failed: %s (%d)",
		         gpufile__cufile_status_name(status), status);
		if (h->cufile_fd_owned)
			gpufile__sys.close(h->cufile_fd);
		h->cufile_fd = -1;
		h->cufile_fd_owned = 0;
		return;
	}
	h->cufile_handle = fh;
	h->cufile_state = GPUFILE__CUFILE_REGISTERED;
}

/* Fills the cheap facts of f from h, gathering them once (caller holds
 * h->lock). */
static void handle_platform_facts(struct gpufile *h, struct gpufile__facts *f)
{
	if (!h->facts_known) {
		struct gpufile__facts g = {0};
		struct stat st;

		gpufile__platform_facts(
		    &g, gpufile__sys.fstat(h->fd, &st) == 0 ? &st : NULL);
		h->nvfs_loaded = g.nvfs_loaded;
		h->p2pdma_possible = g.p2pdma_possible;
		snprintf(h->nvfs_why, sizeof(h->nvfs_why), "%s", g.nvfs_why);
		snprintf(h->p2pdma_why, sizeof(h->p2pdma_why), "%s",
		         g.p2pdma_why);
		h->facts_known = 1;
	}
	f->nvfs_loaded = h->nvfs_loaded;
	f->p2pdma_possible = h->p2pdma_possible;
	/* Not kept with the handle: the environment may change. */
	f->cufile_forced = gpufile__cufile_forced_compat();
	snprintf(f->nvfs_why, sizeof(f->nvfs_why), "%s", h->nvfs_why);
	snprintf(f->p2pdma_why, sizeof(f->p2pdma_why), "%s", h->p2pdma_why);
}

/* FNV-1a of a decision's reason: whether it changed since recorded. */
static uint64_t reason_hash(const char *s)
{
	uint64_t x = 14695981039346656037ull;

	for (; *s; s++)
		x = (x ^ (unsigned char)*s) * 1099511628211ull;
	return x;
}

/*
 * The path of a request of size bytes in memory of kind kind on h (ctx:
 * the context owning it), by gpufile__decide. A remote handle or a host
 * buffer settles it at once; a device request on a local file is decided
 * first from the cheap facts, and cuFile is loaded, its driver opened and
 * the file registered only when they leave cuFile possible. The device
 * decision of a local handle goes to the statistics, first and whenever it
 * changes (a remote one was recorded at open). Returns 0, or the error of a
 * request that cannot run (compat_mode=off without cuFile) with the message
 * set.
 */
static int choose(struct gpufile *h, const struct gpufile__settings *cfg,
                  gpufile_mem_t kind, size_t size, void *ctx,
                  struct gpufile__decision *d)
{
	struct gpufile__facts f = {.cfg = cfg,
	                           .source = h->remote
	                                         ? gpufile__remote_source(h)
	                                         : GPUFILE__SOURCE_FILE,
	                           .kind = kind,
	                           .size = size};
	char why[sizeof(h->cufile_reason)];
	int record = 0;

	if (h->remote || kind == GPUFILE_MEM_HOST ||
	    kind == GPUFILE_MEM_PINNED) {
		/* Decided by the source or the buffer alone, and for host
		 * reads whether the map copy can see the page cache (asked
		 * only where the copy could be made). */
		f.stream_copy = gpufile__stream_copy_kind();
		f.cpus = gpufile__usable_cpus();
		if (!h->remote &&
		    gpufile__stream_copy_allowed(cfg->host_map_copy,
		                                 f.stream_copy, f.cpus))
			f.cache_hidden = !gpufile__cache_visible(h);
		gpufile__decide(&f, d);
		return 0;
	}
	pthread_mutex_lock(&h->lock);
	if (kind == GPUFILE_MEM_DEVICE && size >= cfg->gds_threshold &&
	    cfg->compat_mode != GPUFILE_COMPAT_ON)
		handle_platform_facts(h, &f);
	gpufile__decide(&f, d);
	if (d->need_cufile) {
		cufile_establish(h, ctx);
		snprintf(why, sizeof(why), "%s", h->cufile_reason);
		f.cufile_known = 1;
		f.cufile_registered =
		    h->cufile_state == GPUFILE__CUFILE_REGISTERED;
		f.cufile_error = h->cufile_error;
		f.cufile_why = why;
		f.cufile_p2pdma =
		    f.cufile_registered && gpufile__cufile_p2pdma();
		gpufile__decide(&f, d);
	}
	/* A request refused (compat_mode=off without cuFile) moved nothing
	 * and fell back to nothing: not the handle's path. Nor is a managed
	 * buffer's posix, which the buffer decides, not the file: recorded,
	 * it stood as the handle's path (and its reason) while the
	 * handle's device requests went to cuFile. Recorded again when it
	 * changes (a setting changed: compat_mode=on, then auto), or the
	 * record kept a path the requests no longer take. */
	if (!d->error && kind == GPUFILE_MEM_DEVICE &&
	    (d->path == GPUFILE_PATH_POSIX || d->path == GPUFILE_PATH_CUFILE)) {
		const uint64_t said = reason_hash(d->reason);

		record = !h->path_recorded || h->recorded_path != d->path ||
		         h->recorded_reason != said;
		h->path_recorded = 1;
		h->recorded_path = d->path;
		h->recorded_reason = said;
	}
	pthread_mutex_unlock(&h->lock);
	if (record)
		gpufile__stats_file_set(h->stats_record, h->path, d->path,
		                        d->reason);
	if (d->error)
		return gpufile__fail(d->error, "%s: %s", h->path, d->reason);
	return 0;
}

/*
 * The path of request r, by gpufile__decide (decide.c): a remote object
 * its HTTP ranges, host memory in place, device memory below
 * gds_threshold "small", managed memory the bounce buffers, and the rest
 * cuFile or the bounce buffers ("posix").
 */
static int decide_path(struct gpufile__request *r)
{
	struct gpufile__decision d;
	gpufile_mem_t kind;
	int device;
	void *ctx;
	int rc = gpufile__classify(r->buf, &kind, &device, &ctx);

	if (rc)
		return rc;
	if (kind != GPUFILE_MEM_HOST && kind != GPUFILE_MEM_PINNED) {
		/* Memory mapped with cuMemMap reports no context. */
		if (!ctx && (rc = gpufile__primary_context(device, &ctx)))
			return rc;
		r->device = device;
		r->cuda_ctx = ctx;
		if (gpufile__ctx_id(gpufile__cuda(), ctx, &r->cuda_ctx_id))
			return gpufile__fail(
			    GPUFILE_ECUDA,
			    "%s: the CUDA context of buffer %p "
			    "has been destroyed",
			    r->h->path, r->buf);
	}
	rc = choose(r->h, &r->cfg, kind, r->size, ctx, &d);
	if (rc)
		return rc;
	r->path = d.path;
	if (d.path == GPUFILE_PATH_REMOTE) { /* HTTP ranges (remote.c) */
		r->ops = r->h->source_ops ? r->h->source_ops->task
		                          : &gpufile__remote_ops;
		return 0;
	}
	if (d.path == GPUFILE_PATH_HOST) {
		r->ops = &host_ops;
		return 0;
	}
	r->ops = &gpufile__staged_ops;
	if (d.path == GPUFILE_PATH_CUFILE) {
		char *base = gpufile__cufile_buf_base(r->buf, r->size);

		r->cufile_handle = r->h->cufile_handle;
		r->cufile_base = base ? base : r->buf;
		r->ops = &cufile_ops;
	}
	return 0;
}

/*
 * A device read through the bounce buffers (the posix and small paths) of
 * fewer tasks than there are workers, read from the page cache, gets
 * smaller tasks, halving task_size down to gpufile__split_min (512 KiB),
 * so that more workers read it at once: one worker reads a 4 MiB task out
 * of the page cache in about 0.7 ms, and a 4 MiB device gpufile_pread took
 * 0.9 ms on the H200 (bench/README.md). A range O_DIRECT would read (cold,
 * or direct_io=on) keeps task_size: split, cold 1 and 4 MiB reads ran at
 * 0.97 and 0.96x. Tasks stay at multiples of their size in the file.
 * Writes keep task_size: buffered writes to one file take turns on its
 * lock.
 */
size_t gpufile__split_min = 512u << 10; /* SIZE_MAX: no split (benches) */

static uint64_t tasks_of(const struct gpufile__request *r, size_t ts)
{
	const int64_t base = r->offset - (int64_t)((uint64_t)r->offset % ts);

	return ((uint64_t)(r->offset + (int64_t)r->size - base) + ts - 1) / ts;
}

static void split_small_read(struct gpufile__request *r)
{
	size_t ts = r->cfg.task_size;

	if (r->is_write || !r->cuda_ctx || r->h->remote ||
	    (r->path != GPUFILE_PATH_POSIX && r->path != GPUFILE_PATH_SMALL) ||
	    tasks_of(r, ts) >= r->cfg.nthreads ||
	    gpufile__direct_read_wanted(r->h, r->cfg.direct_io, r->size,
	                                r->offset))
		return;
	while (ts / 2 >= gpufile__split_min && ts % 2 == 0 &&
	       tasks_of(r, ts) < r->cfg.nthreads)
		ts /= 2;
	r->cfg.task_size = ts;
}

/* Validates and prepares r; returns 0 or an error with the message set.
 * An append is placed here: once prepared, it must end, completed by the
 * pool or through unplace() when it is not submitted. */
static int prepare(struct gpufile__request *r, gpufile_t *h, void *buf,
                   size_t size, int64_t offset, int is_write)
{
	int rc;

	if (!h)
		return gpufile__fail(-EINVAL, "handle is NULL");
	if (!buf && size)
		return gpufile__fail(-EFAULT, "%s %s: buffer is NULL",
		                     is_write ? "writing" : "reading", h->path);
	/* An "a" handle's writes ignore file_offset (append.c places
	 * them): only their size is checked here. */
	if (is_write && h->append)
		offset = 0;
	if (offset < 0 || size > (size_t)INT64_MAX ||
	    (int64_t)size > INT64_MAX - offset)
		return gpufile__fail(
		    -EINVAL, "%s %s: offset %lld with size %zu is out of range",
		    is_write ? "writing" : "reading", h->path,
		    (long long)offset, size);
	if (is_write ? !h->writable : !h->readable)
		return gpufile__fail(-EBADF,
		                     "%s %s: the file was not opened for %s",
		                     is_write ? "writing" : "reading", h->path,
		                     is_write ? "writing" : "reading");
	rc = gpufile__settings(&r->cfg);
	if (rc)
		return rc;
	/* A remote range costs a round trip and a response header; remote
	 * requests are split at their own size (config.c says why 8 MiB). */
	if (h->remote) {
		if (!r->cfg.remote_task_size) /* the range size, as set */
			r->cfg.remote_task_size = r->cfg.task_size;
		r->cfg.task_size = r->cfg.remote_task_size;
	}
	if (h->source_ops && h->source_ops->task_size(h))
		r->cfg.task_size = h->source_ops->task_size(h);
	r->h = h;
	r->buf = buf;
	r->size = size;
	r->is_write = is_write;
	r->device = -1;
	r->cuda_ctx = NULL;
	r->offset = offset;
	if (is_write && h->append) {
		rc = gpufile__append_begin(h, size, &r->offset);
		if (rc)
			return rc;
	}
	rc = decide_path(r);
	if (rc) {
		if (is_write && h->append)
			gpufile__append_end(h, r->offset, size, rc, NULL, 0);
		return rc;
	}
	split_small_read(r);
	/* Into host memory, a task is a few ranges issued at once on the
	 * source's transfer engine (remote.c), enough that the threads
	 * together keep max_in_flight in flight; from a
	 * server that ignores Range, into any memory, one task: the one body
	 * of the whole request (each task would stream the body from its
	 * start). A source of its own (WebHDFS, uploads) keeps its task
	 * size. */
	if (h->remote && !h->source_ops &&
	    (!r->cuda_ctx ||
	     gpufile__remote_source(h) == GPUFILE__SOURCE_REMOTE_STREAM))
		r->cfg.task_size = gpufile__remote_task_size(
		    h, r->cfg.remote_task_size, r->cfg.nthreads, r->offset,
		    r->size);
	gpufile__request_init(r);
	return 0;
}

int gpufile__request_prepare(struct gpufile__request *r, gpufile_t *h,
                             void *buf, size_t size, int64_t offset,
                             int is_write)
{
	return prepare(r, h, buf, size, offset, is_write);
}

/* Ends r, prepared but not submitted (the submission failed with rc):
 * an append placed for it is taken back. */
static void unplace(struct gpufile__request *r, int rc)
{
	if (r->is_write && r->h->append)
		gpufile__append_end(r->h, r->offset, r->size, rc, NULL, 0);
	gpufile__request_destroy(r);
}

/* Whether the write r goes through the page cache: not O_DIRECT
 * (direct_io=on, where the file system takes it). cuFile's writes are
 * asked about apart (r->path). */
static int through_cache(const struct gpufile__request *r)
{
	return r->cfg.direct_io != GPUFILE__DIRECT_ON ||
	       atomic_load_explicit(&r->h->direct_refused,
	                            memory_order_relaxed) ||
	       !gpufile__direct_fd_possible(r->h);
}

/*
 * Reserves the blocks of a write that reaches GPUFILE__PREALLOC_MIN bytes
 * or more past the end of a local file, before it is written
 * (write_prealloc): fallocate with FALLOC_FL_KEEP_SIZE over the part past
 * the end, so that the size still moves only as bytes are written and a
 * write cut short shows no byte nobody wrote. On ext4 a buffered write
 * into reserved blocks skips delayed allocation's work for each page: on
 * the H100 host gpufile's 4 GiB buffered write ran 1.17x with it (and a
 * pwrite loop 6.54 GB/s against 5.62; bench/README.md, "Reserving a
 * write's blocks"). For blocking buffered writes (gpufile_pwrite): not
 * where a write is only prepared (gpufile_stream_info asks without
 * writing), nor for gpufile_pwrite_async, whose caller would wait on the
 * file's lock; not for an "a" handle's appends, whose cut back after a
 * failure (append.c) must not guess whose blocks lie past the end.
 *
 * Not past RLIMIT_FSIZE: tmpfs and f2fs raise SIGXFSZ for a reservation
 * past it, before any byte is written. Not on file systems in memory
 * (tmpfs, ramfs, hugetlbfs), where a reservation is zeroed memory. The
 * file system is asked once per handle (until an fstatfs answers),
 * before anything else: on NFS an fstat flushes the file's dirty pages.
 * A refused reservation is left to the write, which then fails, or not,
 * where it would have; a file that takes none (EOPNOTSUPP, as ext4's
 * files without extents say, or ENOSYS from a kernel or sandbox without
 * the call) is not asked again. Blocks reserved for a write that then
 * fails stay allocated past the end until the file is cut or removed
 * (on ext4 a hole punched past the end frees nothing, and a cut to the
 * size just read could cut another writer's bytes).
 */
static void preallocate(const struct gpufile__request *r)
{
	gpufile_t *h = r->h;
	int64_t end = r->offset + (int64_t)r->size, start;
	struct statfs sfs;
	struct rlimit lim;
	struct stat st;
	long magic;

	if (!r->is_write || r->cfg.write_prealloc == GPUFILE__PREALLOC_OFF ||
	    h->remote || h->source_ops || !h->regular || h->append ||
	    r->size < GPUFILE__PREALLOC_MIN ||
	    atomic_load_explicit(&h->prealloc_refused, memory_order_relaxed))
		return;
	/* O_DIRECT writes (direct_io=on, or cuFile's descriptor) are left
	 * as they are: not measured, and fallocate waits for the file's
	 * O_DIRECT writes in flight. */
	if (r->path == GPUFILE_PATH_CUFILE || !through_cache(r))
		return;
	magic = atomic_load_explicit(&h->fs_magic, memory_order_relaxed);
	if (!magic) {
		/* A failed fstatfs is not kept: asked again next time. */
		if (gpufile__sys.fstatfs(h->fd, &sfs) != 0)
			return;
		magic = (long)sfs.f_type;
		atomic_store_explicit(&h->fs_magic, magic,
		                      memory_order_relaxed);
	}
	if (magic == (long)TMPFS_MAGIC || magic == (long)RAMFS_MAGIC ||
	    magic == (long)HUGETLBFS_MAGIC ||
	    (r->cfg.write_prealloc == GPUFILE__PREALLOC_AUTO &&
	     magic != (long)EXT4_SUPER_MAGIC))
		return;
	if (getrlimit(RLIMIT_FSIZE, &lim) == 0 &&
	    lim.rlim_cur != RLIM_INFINITY &&
	    (uint64_t)end > (uint64_t)lim.rlim_cur)
		end = (int64_t)lim.rlim_cur;
	if (gpufile__sys.fstat(h->fd, &st) < 0 ||
	    end - (int64_t)st.st_size < (int64_t)GPUFILE__PREALLOC_MIN)
		return;
	start =
	    r->offset > (int64_t)st.st_size ? r->offset : (int64_t)st.st_size;
	if (end - start < (int64_t)GPUFILE__PREALLOC_MIN)
		return;
	if (gpufile__sys.fallocate(h->fd, FALLOC_FL_KEEP_SIZE, (off_t)start,
	                           (off_t)(end - start)) != 0 &&
	    (errno == EOPNOTSUPP || errno == ENOSYS))
		atomic_store_explicit(&h->prealloc_refused, 1,
		                      memory_order_relaxed);
}

/*
 * Whether r is a buffered write from host memory into a regular file
 * (not a block device): one writer, the calling thread, runs all its
 * tasks. ext4 (ext4_buffered_
 * write_iter), XFS and btrfs hold the file's inode lock (i_rwsem)
 * exclusively for the whole of a buffered write, so buffered writes into
 * one file run one at a time whatever the number of writers; more writers
 * only wait on the lock, spin on it (rwsem_spin_on_owner) and hand it on.
 * On the H100 host (issue 33) 16 writers reached 3.76 GB/s where one fio
 * job wrote 5.7 and four 6.05; on the 2-core VM one writer ran as fast as
 * 2, 4 or 16 (bench/README.md, "Writes: gpufile against fio"). O_DIRECT
 * writes (direct_io=on, where the file system takes it) keep the workers:
 * they wait on the device, which wants several in flight.
 */
static int one_writer(const struct gpufile__request *r)
{
	return r->is_write && r->path == GPUFILE_PATH_HOST && !r->h->remote &&
	       r->h->regular && through_cache(r);
}

static ssize_t blocking_io(gpufile_t *h, void *buf, size_t size, int64_t offset,
                           int is_write)
{
	struct gpufile__request r;
	ssize_t result;
	int rc = prepare(&r, h, buf, size, offset, is_write);

	if (rc)
		return rc;
	preallocate(&r);
	/* One task into host memory: run here, no worker woken (a remote
	 * one's ranges are driven by this thread on the handle's engine).
	 * One task of a device read through the bounce buffers too: handed
	 * to a worker, a 4 KiB read into an H200 took 42 us at the median,
	 * against ~10 us for its pread, copy and synchronise by hand (the
	 * worker's wake-up, the caller's, and the copy pooled and deferred
	 * for tasks that never came). A buffered write from host memory:
	 * every task here (one_writer). */
	if (((r.path == GPUFILE_PATH_HOST ||
	      (r.path == GPUFILE_PATH_REMOTE && !r.cuda_ctx)) &&
	     r.ntasks <= 1) ||
	    (r.ops == &gpufile__staged_ops && !is_write && r.ntasks == 1) ||
	    one_writer(&r)) {
		if (r.ops == &gpufile__staged_ops)
			r.ops = &gpufile__staged_here_ops;
		gpufile__request_run_inline(&r);
	} else {
		rc = gpufile__request_submit(&r);
	}
	if (rc) {
		unplace(&r, rc);
		return rc;
	}
	result = gpufile__request_wait(&r, -1);
	gpufile__request_destroy(&r);
	if (r.path == GPUFILE_PATH_CUFILE)
		gpufile__cufile_publish_stats();
	return result;
}

ssize_t gpufile_pread(gpufile_t *h, void *buf, size_t size, int64_t offset)
{
	return blocking_io(h, buf, size, offset, 0);
}

ssize_t gpufile_pwrite(gpufile_t *h, const void *buf, size_t size,
                       int64_t offset)
{
	return blocking_io(h, (void *)buf, size, offset, 1);
}

static int async_io(gpufile_t *h, void *buf, size_t size, int64_t offset,
                    int is_write, gpufile_future_t **out)
{
	struct gpufile_future *f;
	int rc;

	if (!out)
		return gpufile__fail(-EINVAL, "future pointer is NULL");
	*out = NULL;
	if (!h)
		return gpufile__fail(-EINVAL, "handle is NULL");
	f = malloc(sizeof(*f));
	if (!f)
		return gpufile__fail(-ENOMEM,
		                     "%s %s at offset %lld (%zu bytes): out of "
		                     "memory for a request",
		                     is_write ? "writing" : "reading", h->path,
		                     (long long)offset, size);
	rc = prepare(&f->r, h, buf, size, offset, is_write);
	if (rc == 0) {
		rc = gpufile__request_submit(&f->r);
		if (rc)
			unplace(&f->r, rc);
	}
	if (rc) {
		free(f);
		return rc;
	}
	*out = f;
	return 0;
}

int gpufile__future_submit(const struct gpufile__request *prepared,
                           gpufile_future_t **out)
{
	struct gpufile_future *f = malloc(sizeof(*f));
	int rc;

	*out = NULL;
	if (!f)
		return gpufile__fail(
		    -ENOMEM,
		    "%s %s at offset %lld (%zu bytes): out of memory for a "
		    "request",
		    prepared->is_write ? "writing" : "reading",
		    prepared->h->path, (long long)prepared->offset,
		    prepared->size);
	memcpy(&f->r, prepared, sizeof(f->r));
	gpufile__request_init(&f->r);
	rc = gpufile__request_submit(&f->r);
	if (rc) {
		gpufile__request_destroy(&f->r);
		free(f);
		return rc;
	}
	*out = f;
	return 0;
}

int gpufile_pread_async(gpufile_t *h, void *buf, size_t size, int64_t offset,
                        gpufile_future_t **out)
{
	return async_io(h, buf, size, offset, 0, out);
}

int gpufile_pwrite_async(gpufile_t *h, const void *buf, size_t size,
                         int64_t offset, gpufile_future_t **out)
{
	return async_io(h, (void *)buf, size, offset, 1, out);
}

int gpufile_future_done(gpufile_future_t *f)
{
	int done;

	if (!f)
		return 1;
	pthread_mutex_lock(&f->r.lock);
	done = f->r.done;
	pthread_mutex_unlock(&f->r.lock);
	return done;
}

/* Waits for f as gpufile__request_wait; once it has ended, cuFile's
 * counters of a cuFile request are published (gpufile stats shows them),
 * however the caller waited. */
static ssize_t future_wait(gpufile_future_t *f, long timeout_ms)
{
	ssize_t result = gpufile__request_wait(&f->r, timeout_ms);

	if (f->r.path == GPUFILE_PATH_CUFILE && gpufile_future_done(f))
		gpufile__cufile_publish_stats();
	return result;
}

ssize_t gpufile_future_wait(gpufile_future_t *f)
{
	if (!f)
		return gpufile__fail(-EINVAL, "future is NULL");
	return future_wait(f, -1);
}

ssize_t gpufile_future_wait_for(gpufile_future_t *f, long timeout_ms)
{
	if (!f)
		return gpufile__fail(-EINVAL, "future is NULL");
	return future_wait(f, timeout_ms < 0 ? 0 : timeout_ms);
}

void gpufile_future_free(gpufile_future_t *f)
{
	if (!f)
		return;
	future_wait(f, -1);
	gpufile__request_destroy(&f->r);
	free(f);
}

/* Adds "; " and what h's O_DIRECT descriptor allows under cfg to reason
 * (len bytes, already holding the device path's reason). */
static void add_direct_reason(struct gpufile *h,
                              const struct gpufile__settings *cfg, char *reason,
                              size_t len)
{
	char direct[320];
	size_t used = strlen(reason);
	int fd;
	/* Before h->lock, which it takes. */
	const int visible =
	    cfg->direct_io != GPUFILE__DIRECT_AUTO || gpufile__cache_visible(h);

	pthread_mutex_lock(&h->lock);
	fd = gpufile__direct_fd_locked(h);
	if (fd >= 0 && !atomic_load(&h->direct_refused) && !visible)
		snprintf(direct, sizeof(direct),
		         "O_DIRECT available, but direct_io=auto reads "
		         "every range through the page cache: this "
		         "process neither owns the file nor may write "
		         "it, so the kernel does not say which of its "
		         "pages are cached (mincore); direct_io=on reads "
		         "with O_DIRECT whatever is cached");
	else if (fd >= 0 && !atomic_load(&h->direct_refused))
		snprintf(direct, sizeof(direct),
		         "O_DIRECT available (direct_io=%s)",
		         cfg->direct_io == GPUFILE__DIRECT_ON ? "on" : "auto");
	else
		snprintf(direct, sizeof(direct), "%s", h->direct_reason);
	pthread_mutex_unlock(&h->lock);
	if (used < len)
		snprintf(reason + used, len - used, "; %s", direct);
}

int gpufile_path_info(gpufile_t *h, gpufile_path_t *device_path, char *reason,
                      size_t len)
{
	struct gpufile__settings cfg;
	int rc;

	if (!h)
		return gpufile__fail(-EINVAL, "handle is NULL");
	rc = gpufile__settings(&cfg);
	if (rc)
		return rc;
	if (h->remote) { /* one path for every buffer, no O_DIRECT */
		struct gpufile__decision d;

		choose(h, &cfg, GPUFILE_MEM_DEVICE, cfg.gds_threshold, NULL,
		       &d);
		if (device_path)
			*device_path = d.path;
		if (reason && len)
			snprintf(reason, len, "%s", d.reason);
		return 0;
	}
	if (device_path)
		*device_path = GPUFILE_PATH_POSIX;
	{
		struct gpufile__decision d = {.path = GPUFILE_PATH_POSIX};
		void *ctx = NULL;

		if (cfg.compat_mode != GPUFILE_COMPAT_ON &&
		    !gpufile__cuda_if_loaded()) {
			snprintf(d.reason, sizeof(d.reason),
			         "posix: no CUDA driver in this process, so no "
			         "device memory; cuFile not consulted");
		} else {
			if (cfg.compat_mode != GPUFILE_COMPAT_ON &&
			    gpufile__current_or_primary(&ctx))
				ctx = NULL;
			/* A device request at gds_threshold: the smallest
			 * that can reach cuFile. */
			rc = choose(h, &cfg, GPUFILE_MEM_DEVICE,
			            cfg.gds_threshold, ctx, &d);
			if (device_path)
				*device_path = d.path;
			if (rc)
				return rc;
		}
		if (device_path)
			*device_path = d.path;
		if (reason && len)
			snprintf(reason, len, "%s", d.reason);
	}
	if (reason && len)
		add_direct_reason(h, &cfg, reason, len);
	return 0;
}

int gpufile_warmup(void)
{
	struct gpufile__settings cfg;
	int rc = gpufile__settings(&cfg);

	if (rc)
		return rc;
	rc = gpufile__pool_start();
	if (rc)
		return rc;
	if (gpufile__cuda_if_loaded() || gpufile_cuda_device_count() > 0)
		return gpufile__staging_warmup(&cfg);
	gpufile__clear_error();
	return 0;
}

size_t gpufile_pinned_bytes_max(void)
{
	struct gpufile__settings cfg;

	if (gpufile__settings(&cfg))
		return 0;
	/* The stagers' buffers, and twice as many for stream-ordered reads
	 * staged on the caller's stream (stream_stage.c); then the batches'
	 * slots, which are not bounce buffers (batch.c). */
	return 3 * (size_t)cfg.nthreads * cfg.bounce_buffers *
	           GPUFILE__BOUNCE_STRIDE(cfg.bounce_buffer_size) +
	       gpufile__batch_pinned_max();
}

void gpufile_release(void)
{
	gpufile__pool_stop();
	gpufile__staging_release();
	gpufile__stage_buffers_free();
}
