/*
 * Plain and O_DIRECT read/write loops. They retry EINTR (and EAGAIN a
 * bounded number of times), continue after short transfers, and stop
 * exactly at end-of-file. Every call goes through gpufile__sys.
 */
#define _GNU_SOURCE
#include "paths/paths.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define EAGAIN_RETRIES 1000

static void pause_briefly(void)
{
	struct timespec ts = {0, 50 * 1000};

	nanosleep(&ts, NULL);
}

/* The read loop of gpufile__pread_full and gpufile__direct_pread; with
 * direct, a count that is not a multiple of the alignment ends it (see
 * gpufile__direct_pread). */
static ssize_t pread_loop(int fd, char *buf, size_t len, int64_t off,
                          int direct)
{
	size_t done = 0;
	int again = 0;

	while (done < len) {
		ssize_t n = gpufile__sys.pread(fd, buf + done, len - done,
		                               (off_t)(off + done));
		if (n > 0) {
			done += (size_t)n;
			if (direct && (size_t)n % GPUFILE_ALIGN)
				break;
		} else if (n == 0) {
			break;
		} else if (errno == EINTR) {
			continue;
		} else if (errno == EAGAIN && again++ < EAGAIN_RETRIES) {
			pause_briefly();
		} else {
			return -errno;
		}
	}
	return (ssize_t)done;
}

ssize_t gpufile__pread_full(int fd, void *buf, size_t len, int64_t off)
{
	return pread_loop(fd, buf, len, off, 0);
}

ssize_t gpufile__pwrite_full(int fd, const void *buf, size_t len, int64_t off)
{
	size_t done = 0;
	int again = 0;

	while (done < len) {
		ssize_t n =
		    gpufile__sys.pwrite(fd, (const char *)buf + done,
		                        len - done, (off_t)(off + done));
		if (n > 0) {
			done += (size_t)n;
		} else if (n == 0) {
			/* No progress and no error: the device takes no more.
			 */
			return -EIO;
		} else if (errno == EINTR) {
			continue;
		} else if (errno == EAGAIN && again++ < EAGAIN_RETRIES) {
			pause_briefly();
		} else {
			return -errno;
		}
	}
	return (ssize_t)done;
}

/* One aligned O_DIRECT read loop: a count that is not a multiple of the
 * alignment can only happen at end-of-file, where a further read at the
 * unaligned offset would fail with EINVAL rather than return 0. */
ssize_t gpufile__direct_pread(int fd, char *buf, size_t len, int64_t off)
{
	return pread_loop(fd, buf, len, off, 1);
}

static int is_aligned(uint64_t v)
{
	return (v & (GPUFILE_ALIGN - 1)) == 0;
}

static uint64_t align_up(uint64_t v)
{
	return (v + GPUFILE_ALIGN - 1) & ~(uint64_t)(GPUFILE_ALIGN - 1);
}

/* O_DIRECT failed with EINVAL after open succeeded (some FUSE and network
 * file systems): use the page cache for this handle from now on. */
void gpufile__refuse_direct(struct gpufile *h, int64_t off, int is_write)
{
	if (atomic_exchange(&h->direct_refused, 1))
		return;
	pthread_mutex_lock(&h->lock);
	snprintf(h->direct_reason, sizeof(h->direct_reason),
	         "O_DIRECT %s at offset %lld failed with EINVAL; %s "
	         "through the page cache",
	         is_write ? "write" : "read", (long long)off,
	         is_write ? "writing" : "reading");
	pthread_mutex_unlock(&h->lock);
	gpufile__stats_direct_fallback();
}

/* MADV_POPULATE_READ/WRITE (Linux 5.14) fault a range in as a read or
 * write would, but fail (EFAULT, EINVAL, ENOMEM) where that access would
 * raise SIGSEGV or SIGBUS. */
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ  22
#define MADV_POPULATE_WRITE 23
#endif

static int populate_works = -1; /* set once by probe_populate */
static pthread_once_t populate_once = PTHREAD_ONCE_INIT;

static void probe_populate(void)
{
	static char page[1 << 16] __attribute__((aligned(1 << 16)));

	populate_works = madvise(page, sizeof(page), MADV_POPULATE_WRITE) == 0;
}

int gpufile__populate_works(void)
{
	pthread_once(&populate_once, probe_populate);
	return populate_works;
}

/*
 * 1 when the caller's n bytes at p can be written (write=1) or read
 * (write=0) by memcpy without a signal; 0 when they cannot, or when the
 * kernel cannot tell (memory it does not fault in, such as a device
 * mapping). On 0 the caller lets the kernel move the bytes instead (a
 * system call on the buffered descriptor), which fails with EFAULT where
 * memcpy would have raised SIGSEGV: a read into PROT_READ memory or a
 * write from PROT_NONE memory must be an error, not a crash. Kernels
 * before 5.14 cannot check; there the copy goes ahead as before.
 */
int gpufile__user_range_ok(const void *p, size_t n, int write)
{
	const uintptr_t page = GPUFILE_ALIGN;
	uintptr_t a, e;

	if (n == 0)
		return 1;
	pthread_once(&populate_once, probe_populate);
	if (!populate_works)
		return 1;
	a = (uintptr_t)p & ~(page - 1);
	e = ((uintptr_t)p + n + page - 1) & ~(page - 1);
	return madvise((void *)a, e - a,
	               write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0;
}

void gpufile__populate_dest(void *p, size_t n)
{
	const uintptr_t page = GPUFILE_ALIGN;
	uintptr_t a = (uintptr_t)p & ~(page - 1);
	const uintptr_t e = ((uintptr_t)p + n + page - 1) & ~(page - 1);
	unsigned char vec[128];

	if (n < GPUFILE__POPULATE_MIN || !gpufile__populate_works())
		return;
	while (a < e) {
		size_t pages = (e - a) / page;

		if (pages > sizeof(vec))
			pages = sizeof(vec);
		/* Memory mincore() cannot tell (a device mapping): left to
		 * the read. */
		if (mincore((void *)a, pages * page, vec))
			return;
		for (size_t i = 0; i < pages; i++) {
			if (!(vec[i] & 1)) {
				/* A failure (memory the read cannot write
				 * either) is the read's to report. */
				madvise((void *)(a + i * page),
				        e - (a + i * page),
				        MADV_POPULATE_WRITE);
				return;
			}
		}
		a += pages * page;
	}
}

int gpufile__fd_size(int fd, int64_t *size)
{
	struct stat st;
	uint64_t bytes;

	if (gpufile__sys.fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISBLK(st.st_mode)) {
		*size = (int64_t)st.st_size;
		return 0;
	}
	/* A block device's st_size is 0: its size is the kernel's. */
	if (ioctl(fd, BLKGETSIZE64, &bytes) < 0)
		return -errno;
	*size = (int64_t)bytes;
	return 0;
}

int gpufile__before_eof(struct gpufile *h, int64_t off)
{
	int64_t size;

	return gpufile__fd_size(h->fd, &size) == 0 && off < size;
}

/* How one step of direct_range ended, besides a negative error. */
enum {
	STEP_ON,       /* the next step may follow */
	STEP_END,      /* end-of-file: the range is read as far as it goes */
	STEP_BUFFERED, /* O_DIRECT refused (EINVAL): the page cache reads on */
	STEP_REST,     /* short before end-of-file: the page cache finishes */
};

/* The bytes from pos (before end) that go straight into dst with
 * O_DIRECT: whole blocks, when pos and dst are both aligned; 0 when
 * none. */
static size_t direct_span(struct gpufile *h, const char *dst, int64_t pos,
                          int64_t end)
{
	int64_t size;
	size_t n;

	if (!is_aligned((uint64_t)pos) || !is_aligned((uintptr_t)dst) ||
	    end - pos < (int64_t)GPUFILE_ALIGN)
		return 0;
	n = (size_t)(end - pos) & ~(size_t)(GPUFILE_ALIGN - 1);
	/* O_DIRECT moves whole blocks: a read of the block that holds
	 * end-of-file zero-fills the rest of that block in dst (ext4 does),
	 * beyond the count it returns, where the caller's bytes must stay as
	 * they were. That block goes through scratch instead. */
	if (gpufile__fd_size(h->fd, &size) == 0 && pos + (int64_t)n > size) {
		int64_t whole = size & ~(int64_t)(GPUFILE_ALIGN - 1);
		n = whole > pos ? (size_t)(whole - pos) : 0;
	}
	return n;
}

/* Reads n bytes at *pos straight into dst; advances *pos. Returns STEP_*
 * or an error. */
static ssize_t direct_step(struct gpufile *h, char *dst, size_t n, int64_t *pos)
{
	ssize_t got =
	    gpufile__direct_pread(gpufile__direct_fd(h), dst, n, *pos);

	if (got == -EINVAL)
		return STEP_BUFFERED;
	if (got < 0)
		return got;
	*pos += got;
	if ((size_t)got < n)
		return gpufile__before_eof(h, *pos) ? STEP_REST : STEP_END;
	return STEP_ON;
}

/* Reads the blocks holding [*pos, end) (at most scratch_len bytes) into
 * scratch and copies the wanted bytes to dst; advances *pos. Returns
 * STEP_* or an error. */
static ssize_t scratch_step(struct gpufile *h, char *dst, int64_t *pos,
                            int64_t end, char *scratch, size_t scratch_len)
{
	int64_t ws = *pos & ~(int64_t)(GPUFILE_ALIGN - 1);
	size_t wl = (size_t)align_up((uint64_t)(end - ws));
	size_t skip = (size_t)(*pos - ws);
	size_t take;
	ssize_t got;

	if (wl > scratch_len)
		wl = scratch_len;
	/* When buf is congruent with the file offset, only this partial
	 * block needs the scratch buffer. */
	if ((((uintptr_t)dst - (uint64_t)*pos) & (GPUFILE_ALIGN - 1)) == 0 &&
	    wl > GPUFILE_ALIGN)
		wl = GPUFILE_ALIGN;
	got = gpufile__direct_pread(gpufile__direct_fd(h), scratch, wl, ws);
	if (got == -EINVAL)
		return STEP_BUFFERED;
	if (got < 0)
		return got;
	if ((size_t)got <= skip)
		return STEP_END;
	take = (size_t)got - skip;
	if (take > (size_t)(end - *pos))
		take = (size_t)(end - *pos);
	if (gpufile__user_range_ok(dst, take, 1)) {
		memcpy(dst, scratch + skip, take);
	} else {
		/* The kernel copies, from the page cache: -EFAULT where
		 * memcpy would crash. */
		ssize_t k = gpufile__pread_full(h->fd, dst, take, *pos);
		if (k < 0)
			return k;
		if ((size_t)k < take) {
			*pos += k;
			return STEP_END;
		}
	}
	*pos += (int64_t)take;
	if ((size_t)got < wl)
		return *pos < end && gpufile__before_eof(h, *pos) ? STEP_REST
		                                                  : STEP_END;
	return STEP_ON;
}

/* Reads [off, off+len) through the O_DIRECT descriptor. Aligned parts go
 * straight into buf when buf is aligned the same way; heads, tails and
 * misaligned buffers go through scratch. */
static ssize_t direct_range(struct gpufile *h, char *buf, size_t len,
                            int64_t off, char *scratch, size_t scratch_len)
{
	const int64_t end = off + (int64_t)len;
	int64_t pos = off;
	ssize_t step = STEP_ON, rest;

	while (pos < end && step == STEP_ON) {
		char *dst = buf + (pos - off);
		size_t n = direct_span(h, dst, pos, end);

		step =
		    n ? direct_step(h, dst, n, &pos)
		      : scratch_step(h, dst, &pos, end, scratch, scratch_len);
		if (step < 0)
			return step;
	}
	if (step == STEP_ON || step == STEP_END)
		return pos - off;
	if (step == STEP_BUFFERED)
		gpufile__refuse_direct(h, pos, 0);
	/* Also where an O_DIRECT read came back short before end-of-file
	 * (some file systems return any count): the page cache finishes. */
	rest = gpufile__pread_full(h->fd, buf + (pos - off),
	                           (size_t)(end - pos), pos);
	return rest < 0 ? rest : (pos - off) + rest;
}

/* Since Linux 5.0 mincore() reports the page cache only to a process that
 * owns the file, may write it, or holds CAP_FOWNER, and to any other
 * reports every page resident (so that nobody can watch another's reads);
 * cachestat() refuses the same processes. */
int gpufile__mincore_tells(const struct stat *st, const char *path)
{
	if (st->st_uid == geteuid() || geteuid() == 0)
		return 1;
	return faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) == 0;
}

/* Whether mincore() reports the page cache for h's file. The write test
 * goes through the descriptor's own inode (/proc/self/fd), not the path. */
static int mincore_truthful(struct gpufile *h, const struct stat *st)
{
	char fdpath[64];

	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", h->fd);
	return gpufile__mincore_tells(st, fdpath);
}

/* Caller holds h->lock. Maps h's file anew when it has grown past the
 * map (or had no map: it was empty), at least twice as long as before, so
 * that a file growing by small steps gets a few maps, not one per step;
 * the part past the file's end is read by no one (map_read checks the
 * file's end; mincore finds no page there). The old map stays until
 * gpufile_close(). */
static void remap(struct gpufile *h)
{
	struct gpufile__old_map *old = NULL;
	struct stat st;
	size_t len;
	void *m;

	if (gpufile__sys.fstat(h->fd, &st) != 0)
		return;
	if (!S_ISREG(st.st_mode)) {
		h->map_refused = 1; /* a block device's st_size is 0 */
		return;
	}
	if ((uint64_t)st.st_size <= h->map_len)
		return;
	len = h->map_len > (size_t)st.st_size / 2 ? 2 * h->map_len
	                                          : (size_t)st.st_size;
	if (h->map && !(old = malloc(sizeof(*old))))
		return;
	m = mmap(NULL, len, PROT_READ, MAP_SHARED, h->fd, 0);
	if (m == MAP_FAILED) {
		h->map_refused = 1;
		free(old);
		return;
	}
	if (old) {
		*old =
		    (struct gpufile__old_map){h->old_maps, h->map, h->map_len};
		h->old_maps = old;
	}
	h->map = m;
	h->map_len = len;
	h->map_mincore = mincore_truthful(h, &st);
}

/* h's read-only map of the file, or NULL where it cannot be mapped; *len:
 * its length; *truthful (may be NULL): whether mincore() on it tells the
 * page cache. Made on first need, and made again where a range up to end
 * (0: none) lies past it and the file has grown since: a handle that
 * writes the file, then reads it, used to keep the map of the file as it
 * was before its first write (none for "w+": it was empty), and read
 * every range past it through pread and the page cache, neither copied
 * from the map nor, with direct_io=auto, cold with O_DIRECT. */
static char *handle_map(struct gpufile *h, int64_t end, size_t *len,
                        int *truthful)
{
	char *map;

	pthread_mutex_lock(&h->lock);
	if (!h->map_refused &&
	    (!h->map_tried || (uint64_t)end > (uint64_t)h->map_len)) {
		h->map_tried = 1;
		remap(h);
	}
	map = h->map;
	*len = h->map_len;
	if (truthful)
		*truthful = h->map_mincore;
	pthread_mutex_unlock(&h->lock);
	return map;
}

/* gpufile__range_cached() on h's map (map_len bytes, or NULL). */
static int map_cached(const char *map, size_t map_len, int64_t off, size_t len)
{
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char vec[1024];
	uint64_t start, stop;

	/* Past the mapping (the file grew since): assume cached, so the
	 * read goes through the page cache, which is always correct. */
	if (!map || (uint64_t)off + len > map_len)
		return 1;
	start = (uint64_t)off & ~(uint64_t)(page - 1);
	stop = (uint64_t)off + len;
	while (start < stop) {
		size_t pages = (size_t)((stop - start + page - 1) / page);
		if (pages > sizeof(vec))
			pages = sizeof(vec);
		if (gpufile__sys.mincore((void *)(map + start), pages * page,
		                         vec))
			return 1;
		for (size_t i = 0; i < pages; i++)
			if (!(vec[i] & 1))
				return 0;
		start += pages * page;
	}
	return 1;
}

int gpufile__cache_visible(struct gpufile *h)
{
	size_t map_len;
	int truthful = 1;

	return handle_map(h, 0, &map_len, &truthful) ? truthful : 1;
}

/* gpufile__range_cached() by cachestat(2): 1 or 0, or -1 where it cannot
 * tell and mincore() must. One call per range: mincore() on the file's
 * map looks up each 4 KiB page in the page cache, 215-255 us per 4 MiB
 * task on the 2-core CI VM, 15% of the pread it decides (cachestat: 4 us),
 * and direct_io=auto asks it for every task of every host read. Only for
 * a regular file: a block device has no map, and is taken as cached, as
 * ever. */
static int cachestat_cached(struct gpufile *h, int64_t off, size_t len)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	const uint64_t first = (uint64_t)off & ~(page - 1);
	const uint64_t end = (uint64_t)off + len;
	uint64_t cached;
	int64_t size;

	if (!h->regular)
		return -1;
	/* ENOSYS (a kernel before 6.5; a failed call costs far less than
	 * the mincore() that follows) or any other failure: mincore(). */
	if (gpufile__sys.cachestat(h->fd, first, end - first, &cached) < 0)
		/* EPERM: the kernel hides this file's page cache from this
		 * process, as mincore() then says every page is cached. */
		return errno == EPERM ? 1 : -1;
	if (cached >= (end - first + page - 1) / page)
		return 1;
	/* Pages past the end of the file are in no cache: a read that
	 * runs past it is cached when the part before it is. */
	if (gpufile__fd_size(h->fd, &size) || end <= (uint64_t)size)
		return 0;
	if (off >= size)
		return 1;
	return cached >= ((uint64_t)size - first + page - 1) / page;
}

int gpufile__range_cached(struct gpufile *h, int64_t off, size_t len)
{
	size_t map_len;
	char *map;
	int cached = cachestat_cached(h, off, len);

	if (cached >= 0)
		return cached;
	map = handle_map(h, off + (int64_t)len, &map_len, NULL);
	return map_cached(map, map_len, off, len);
}

void (*gpufile__map_read_hook)(struct gpufile *h, int64_t off, size_t len);

int gpufile__file_holds(struct gpufile *h, int64_t end)
{
	struct stat st;

	return gpufile__sys.fstat(h->fd, &st) == 0 && end <= st.st_size;
}

ssize_t gpufile__map_read(struct gpufile *h,
                          const struct gpufile__settings *cfg, char *buf,
                          size_t len, int64_t off)
{
	const uintptr_t page = GPUFILE_ALIGN;
	size_t map_len;
	int truthful;
	char *map;

	/* direct_io=on asks for O_DIRECT reads whatever is cached. */
	if (cfg->host_map_copy == GPUFILE__MAP_COPY_OFF ||
	    cfg->direct_io == GPUFILE__DIRECT_ON || h->remote ||
	    len < GPUFILE__MAP_COPY_MIN)
		return 0;
	/* Without MADV_POPULATE (before Linux 5.14) neither the caller's
	 * buffer nor the map can be checked before the copy. Where the rule
	 * takes pread (host_map_copy=auto on a machine of few CPUs), the
	 * range is not looked up in the page cache for nothing: that
	 * mincore() made every task's pread 5-10% slower on 2 cores. */
	if (!gpufile__populate_works() ||
	    !gpufile__stream_copy_allowed(cfg->host_map_copy,
	                                  gpufile__stream_copy_kind(),
	                                  gpufile__usable_cpus()))
		return 0;
	map = handle_map(h, off + (int64_t)len, &map_len, &truthful);
	/* Where mincore() says "cached" of every page whatever the truth,
	 * a cold range would be faulted in page by page: pread's
	 * readahead does that better. */
	if (!map || !truthful || (uint64_t)off + len > map_len ||
	    !map_cached(map, map_len, off, len) ||
	    !gpufile__stream_copy_ready(cfg->host_map_copy))
		return 0;
	/* The copy is made by this process, not the kernel: memory the
	 * caller cannot write must be pread's -EFAULT, not a crash. */
	if (!gpufile__user_range_ok(buf, len, 1))
		return 0;
	/* One call maps the range's pages (where a copy would fault them in
	 * 16 at a time); it fails where the file no longer holds them. */
	if (!gpufile__user_range_ok(map + off, len, 0) ||
	    !gpufile__file_holds(h, off + (int64_t)len))
		return 0;
	if (gpufile__map_read_hook)
		gpufile__map_read_hook(h, off, len);
	/* A fault is the file cut short during the copy. Without one, the
	 * file may still have been cut inside the range's last page (whose
	 * tail then reads as zeros): the second check sees it. Either way
	 * the caller's pread then returns the file's real end; bytes past
	 * it that the copy had reached may hold the file's old bytes or
	 * zeros, as they were when the copy read them. */
	if (gpufile__stream_copy(buf, map + off, len) ||
	    !gpufile__file_holds(h, off + (int64_t)len))
		return 0;
	/* Drop the range's page-table entries (not its page cache): a
	 * process reading a large file through its map would otherwise
	 * hold page tables and RSS for all of it. Measured free (70.1 GB/s
	 * without, 71.0 with, bench/README.md). */
	{
		uintptr_t a = (uintptr_t)(map + off) & ~(page - 1);
		uintptr_t e =
		    ((uintptr_t)(map + off) + len + page - 1) & ~(page - 1);

		madvise((void *)a, e - a, MADV_DONTNEED);
	}
	gpufile__stats_map_copy(len, 0);
	return (ssize_t)len;
}

ssize_t gpufile__file_read(struct gpufile *h, int direct_mode, char *buf,
                           size_t len, int64_t off, char *scratch,
                           size_t scratch_len)
{
	if (h->remote) /* the source's read: an HTTP range request */
		return h->remote_read(h, buf, len, off);
	if (!scratch || !gpufile__direct_read_wanted(h, direct_mode, len, off))
		return gpufile__pread_full(h->fd, buf, len, off);
	return direct_range(h, buf, len, off, scratch, scratch_len);
}

int gpufile__direct_read_wanted(struct gpufile *h, int direct_mode, size_t len,
                                int64_t off)
{
	/* O_DIRECT reads whole blocks: a range whose last block ends past
	 * INT64_MAX cannot be read so (the kernel's EINVAL would read as a
	 * refusal of O_DIRECT, for the whole handle). */
	const int64_t last_block = INT64_MAX & ~(int64_t)(GPUFILE_ALIGN - 1);

	if (direct_mode == GPUFILE__DIRECT_OFF ||
	    !gpufile__direct_fd_possible(h) ||
	    atomic_load_explicit(&h->direct_refused, memory_order_relaxed) ||
	    off > last_block || (int64_t)len > last_block - off)
		return 0;
	/* The descriptor is opened here, by the first read that wants it,
	 * and only then: a cached range never opens it. */
	if (direct_mode == GPUFILE__DIRECT_ON)
		return gpufile__direct_fd(h) >= 0;
	return len >= GPUFILE__DIRECT_MIN &&
	       !gpufile__range_cached(h, off, len) &&
	       gpufile__direct_fd(h) >= 0;
}

ssize_t gpufile__file_write(struct gpufile *h, int direct_mode, const char *buf,
                            size_t len, int64_t off, char *scratch,
                            size_t scratch_len)
{
	const int64_t end = off + (int64_t)len;
	int64_t mid_start, mid_end, pos;
	ssize_t rc;
	int direct_fd;

	if (direct_mode != GPUFILE__DIRECT_ON ||
	    atomic_load_explicit(&h->direct_refused, memory_order_relaxed) ||
	    !scratch || (direct_fd = gpufile__direct_fd(h)) < 0)
		return gpufile__pwrite_full(h->fd, buf, len, off);

	/* Partial blocks at either end go through the page cache: an
	 * O_DIRECT write of a partial block would need a read-modify-write
	 * that could race with a neighbouring task. */
	mid_start = (int64_t)align_up((uint64_t)off);
	mid_end = end & ~(int64_t)(GPUFILE_ALIGN - 1);
	if (mid_start >= mid_end)
		return gpufile__pwrite_full(h->fd, buf, len, off);
	rc = gpufile__pwrite_full(h->fd, buf, (size_t)(mid_start - off), off);
	if (rc < 0)
		return rc;
	for (pos = mid_start; pos < mid_end;) {
		const char *src = buf + (pos - off);
		size_t n = (size_t)(mid_end - pos);

		if (!is_aligned((uintptr_t)src)) {
			if (n > scratch_len)
				n = scratch_len;
			if (!gpufile__user_range_ok(src, n, 0)) {
				/* The kernel copies, through the page cache:
				 * -EFAULT where memcpy would crash. */
				rc = gpufile__pwrite_full(h->fd, src, n, pos);
				if (rc < 0)
					return rc;
				pos += (int64_t)n;
				continue;
			}
			memcpy(scratch, src, n);
			src = scratch;
		}
		rc = gpufile__pwrite_full(direct_fd, src, n, pos);
		if (rc == -EINVAL) {
			gpufile__refuse_direct(h, pos, 1);
			rc = gpufile__pwrite_full(h->fd, buf + (pos - off),
			                          (size_t)(mid_end - pos), pos);
			if (rc < 0)
				return rc;
			break;
		}
		if (rc < 0)
			return rc;
		pos += (int64_t)n;
	}
	rc = gpufile__pwrite_full(h->fd, buf + (mid_end - off),
	                          (size_t)(end - mid_end), mid_end);
	return rc < 0 ? rc : (ssize_t)len;
}

static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void make_scratch_key(void)
{
	pthread_key_create(&scratch_key, free);
}

char *gpufile__thread_scratch(void)
{
	void *p;

	pthread_once(&scratch_once, make_scratch_key);
	p = pthread_getspecific(scratch_key);
	if (!p) {
		if (posix_memalign(&p, GPUFILE_ALIGN, GPUFILE__SCRATCH))
			return NULL;
		pthread_setspecific(scratch_key, p);
	}
	return p;
}
