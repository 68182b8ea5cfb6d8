/*
 * Page-cache controls: how much of a file range the page cache holds, and
 * dropping it for one file or for the whole system.
 *
 * The count comes from cachestat(2) (Linux 6.5) where the kernel has it:
 * one system call for any range, and no mapping. Elsewhere it falls back
 * to mincore(2) over a read-only mapping of the range, which costs a
 * mapping and one byte of vector per page, but works on every kernel.
 * Both give whole pages; partial pages at the range's ends count only the
 * bytes inside the range, so both methods report the same numbers.
 */
#define _GNU_SOURCE
#include "controls/controls.h"
#include "sources/remote.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_cachestat
#define __NR_cachestat 451 /* the same number on every architecture */
#endif

/* struct cachestat_range and struct cachestat of <linux/mman.h>, which
 * older kernel headers lack. */
struct pc_range {
	uint64_t off, len; /* len 0: to the end of the file */
};
struct pc_stat {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted,
	    nr_recently_evicted;
};

int gpufile__page_cache_method = GPUFILE__PC_AUTO;
const char *gpufile__drop_caches_path = "/proc/sys/vm/drop_caches";

/* Cached pages in [off, off+len) (page-aligned) by cachestat, or -errno
 * (-ENOSYS when the kernel lacks it). */
static int64_t cached_pages_cachestat(int fd, uint64_t off, uint64_t len)
{
	struct pc_range range = {off, len};
	struct pc_stat cs;

	memset(&cs, 0, sizeof(cs));
	if (syscall(__NR_cachestat, fd, &range, &cs, 0) < 0)
		return -errno;
	return (int64_t)cs.nr_cache;
}

/* A descriptor of fd's file that a PROT_READ mapping accepts: fd itself
 * where it was opened for reading, else (a "w" or "a" handle, which
 * mmap refuses with EACCES) a read-only reopen of /proc/self/fd/FD, the
 * same file whatever its path names now. Returns it or -errno; *reopened
 * says whether the caller closes it. */
static int readable_fd(int fd, int *reopened)
{
	char fdpath[64];
	int fl = fcntl(fd, F_GETFL), rfd;

	*reopened = 0;
	if (fl < 0)
		return -errno;
	if ((fl & O_ACCMODE) != O_WRONLY)
		return fd;
	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fd);
	rfd = gpufile__sys.open(fdpath, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);
	if (rfd < 0)
		return -errno;
	*reopened = 1;
	return rfd;
}

/* The same by mincore over a mapping of the range; per page in vec. */
static int mincore_vec(int fd, uint64_t off, uint64_t len, unsigned char **vec)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t npages = (size_t)(len / page);
	void *map;
	int reopened, e = 0;

	fd = readable_fd(fd, &reopened);
	if (fd < 0)
		return fd;
	*vec = malloc(npages ? npages : 1);
	map = *vec ? mmap(NULL, (size_t)len, PROT_READ, MAP_SHARED, fd,
	                  (off_t)off)
	           : MAP_FAILED;
	if (!*vec)
		e = -ENOMEM;
	else if (map == MAP_FAILED)
		e = -errno;
	else if (mincore(map, (size_t)len, *vec) < 0)
		e = -errno;
	if (map != MAP_FAILED)
		munmap(map, (size_t)len);
	if (reopened)
		gpufile__sys.close(fd);
	if (e) {
		free(*vec);
		*vec = NULL;
	}
	return e;
}

/* The error where the kernel does not show this process the file's page
 * cache (cachestat refuses, mincore would report every page cached). */
static int cache_hidden(const char *path, const char *how)
{
	return gpufile__fail(-EPERM,
	                     "%s %s: the kernel does not tell this process "
	                     "which pages of the file are cached, since it "
	                     "neither owns the file nor may write it",
	                     how, path);
}

/* Bytes of [off, end) that lie in cached pages, counted on fd. */
static int count_cached(int fd, const char *path, uint64_t off, uint64_t end,
                        uint64_t *cached)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	const uint64_t first = off / page * page;
	const uint64_t last = (end + page - 1) / page * page;
	int method = gpufile__page_cache_method;

	*cached = 0;
	if (end <= off)
		return 0;
	if (method != GPUFILE__PC_MINCORE) {
		/* Whole pages strictly inside the range count page by page;
		 * the partial head and tail pages are asked separately. */
		uint64_t head_end = first + page < end ? first + page : end;
		uint64_t mid_lo = first + page, mid_hi = last - page;
		int64_t n = cached_pages_cachestat(fd, first, page);

		if (n == -ENOSYS && method == GPUFILE__PC_AUTO)
			goto use_mincore;
		if (n == -EPERM)
			return cache_hidden(path, "cachestat");
		if (n < 0)
			return gpufile__fail((int)n, "cachestat %s: %s", path,
			                     strerror((int)-n));
		if (n)
			*cached += head_end - off;
		if (last - first > page) {
			if (mid_hi > mid_lo) {
				n = cached_pages_cachestat(fd, mid_lo,
				                           mid_hi - mid_lo);
				if (n < 0)
					return gpufile__fail(
					    (int)n, "cachestat %s: %s", path,
					    strerror((int)-n));
				*cached += (uint64_t)n * page;
			}
			n = cached_pages_cachestat(fd, last - page, page);
			if (n < 0)
				return gpufile__fail((int)n, "cachestat %s: %s",
				                     path, strerror((int)-n));
			if (n)
				*cached += end - (last - page);
		}
		return 0;
	}
use_mincore : {
	unsigned char *vec;
	char fdpath[64];
	struct stat st;
	int rc;

	/* Where mincore would say "cached" of every page, say why not. */
	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fd);
	if (gpufile__sys.fstat(fd, &st) == 0 &&
	    !gpufile__mincore_tells(&st, fdpath))
		return cache_hidden(path, "mincore");
	rc = mincore_vec(fd, first, last - first, &vec);

	if (rc)
		return gpufile__fail(rc, "mincore over a mapping of %s: %s",
		                     path, strerror(-rc));
	for (uint64_t i = 0; i < (last - first) / page; i++) {
		uint64_t lo = first + i * page, hi = lo + page;

		if (!(vec[i] & 1))
			continue;
		if (lo < off)
			lo = off;
		if (hi > end)
			hi = end;
		*cached += hi - lo;
	}
	free(vec);
	return 0;
}
}

int gpufile_page_cache_info(gpufile_t *h, const char *path, int64_t offset,
                            size_t size, uint64_t *cached_bytes,
                            uint64_t *total_bytes)
{
	struct stat st;
	const char *name;
	uint64_t end, cached = 0;
	int fd, rc;

	if ((h == NULL) == (path == NULL))
		return gpufile__fail(-EINVAL,
		                     "gpufile_page_cache_info: give exactly "
		                     "one of a handle and a path");
	if (!cached_bytes || !total_bytes)
		return gpufile__fail(
		    -EINVAL, "gpufile_page_cache_info: an output is NULL");
	if (h && h->remote)
		return gpufile__remote_no_fd(h->path,
		                             "gpufile_page_cache_info");
	/* As for a remote handle; opened as a local path, a URL failed
	 * with -ENOENT and a message that showed its secrets. */
	if (!h && gpufile__is_url(path))
		return gpufile__remote_not_local(path,
		                                 "gpufile_page_cache_info");
	name = h ? h->path : path;
	if (offset < 0)
		return gpufile__fail(
		    -EINVAL, "page cache of %s: offset %lld is negative", name,
		    (long long)offset);
	if (h) {
		fd = h->fd;
	} else {
		/* O_NONBLOCK: opening a FIFO must not wait for a writer. */
		fd = gpufile__sys.open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK,
		                       0);
		if (fd < 0)
			return gpufile__fail(-errno, "opening %s: %s", path,
			                     strerror(errno));
	}
	if (gpufile__sys.fstat(fd, &st) < 0) {
		rc = gpufile__fail(-errno, "fstat %s: %s", name,
		                   strerror(errno));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = gpufile__fail(
		    -EINVAL, "page cache of %s: not a regular file", name);
		goto out;
	}
	/* size 0 means "to the end of the file", as for posix_fadvise(). */
	end = (uint64_t)st.st_size;
	/* offset + size may pass 2^64 (size SIZE_MAX: "all of it"). */
	if (size && (uint64_t)offset < end && size < end - (uint64_t)offset)
		end = (uint64_t)offset + size;
	rc = count_cached(fd, name, (uint64_t)offset, end, &cached);
	if (rc == 0) {
		*cached_bytes = cached;
		*total_bytes =
		    end > (uint64_t)offset ? end - (uint64_t)offset : 0;
	}
out:
	if (!h)
		gpufile__sys.close(fd);
	return rc;
}

int gpufile_drop_page_cache(gpufile_t *h, int64_t offset, size_t size)
{
	int rc;

	if (!h)
		return gpufile__fail(-EINVAL,
		                     "gpufile_drop_page_cache: handle is NULL");
	if (h->remote)
		return gpufile__remote_no_fd(h->path,
		                             "gpufile_drop_page_cache");
	if (offset < 0 || size > (size_t)INT64_MAX ||
	    (int64_t)size > INT64_MAX - offset)
		return gpufile__fail(-EINVAL,
		                     "dropping the page cache of %s: offset "
		                     "%lld with size %zu is out of range",
		                     h->path, (long long)offset, size);
	/* DONTNEED leaves dirty pages in the cache: write them first. */
	if (gpufile__sys.fdatasync(h->fd) < 0)
		return gpufile__fail(-errno, "fdatasync %s: %s", h->path,
		                     strerror(errno));
	rc = posix_fadvise(h->fd, (off_t)offset, (off_t)size,
	                   POSIX_FADV_DONTNEED);
	if (rc)
		return gpufile__fail(-rc, "posix_fadvise(DONTNEED) on %s: %s",
		                     h->path, strerror(rc));
	return 0;
}

int gpufile_drop_system_page_cache(int reclaim_inodes)
{
	const char *what = reclaim_inodes ? "3\n" : "1\n";
	uid_t euid = geteuid();
	int fd;

	errno = 0;
	/* Checked first so that the message says why, rather than the
	 * EACCES that open() would give. */
	if (euid != 0)
		return gpufile__fail(
		    -EPERM,
		    "dropping the system page cache writes %s, which needs "
		    "root (this process runs as uid %u); "
		    "gpufile_drop_page_cache() drops one file's pages "
		    "without root",
		    gpufile__drop_caches_path, (unsigned)euid);
	/* Dirty pages are not dropped: write them out first. */
	sync();
	fd = open(gpufile__drop_caches_path, O_WRONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		return gpufile__fail(
		    -e, "opening %s: %s%s", gpufile__drop_caches_path,
		    strerror(e),
		    e == EACCES || e == EPERM || e == EROFS
		        ? " (root in a container without CAP_SYS_ADMIN, or "
		          "a read-only /proc/sys, cannot drop the system's "
		          "caches)"
		        : "");
	}
	if (write(fd, what, 2) != 2) {
		int e = errno ? errno : EIO;
		close(fd);
		return gpufile__fail(-e, "writing \"%c\" to %s: %s", what[0],
		                     gpufile__drop_caches_path, strerror(e));
	}
	if (close(fd) < 0)
		return gpufile__fail(-errno, "closing %s: %s",
		                     gpufile__drop_caches_path,
		                     strerror(errno));
	return 0;
}
