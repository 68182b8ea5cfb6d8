/*
 * The paths wing (src/paths/): the byte movers behind the decision. Each
 * moves the bytes of a request's tasks one way: plain and O_DIRECT I/O
 * loops (posix_io.c) and the O_DIRECT descriptor they use, opened at its
 * first use (direct_fd.c), the copy from a file's map with streaming stores
 * and its SIGBUS guard (map_copy.c), the pinned bounce-buffer pipeline to
 * and from the GPU (staging.c), cuFile (cufile_shim.c, cufile_shim.h),
 * and gathered reads of many ranges (gather.c).
 *
 * May include: common/, platform/, core/. Calls nothing above it.
 */
#ifndef GPUFILE_PATHS_H
#define GPUFILE_PATHS_H

#include "core/core.h"
#include "core/decide.h"
#include "paths/cufile_shim.h"

/* The most copies the warm staged reader sends to the GPU in one call
 * (staging.c, "pooled copies"): 8; 1 sends each on its own, as benchmarks
 * do to compare. */
extern unsigned gpufile__pool_copies;

/* The io_uring calls of cold device reads (staging.c), replaceable by
 * tests like gpufile__sys. Each follows liburing's convention: -errno on
 * failure. Present only when built with liburing. */
struct io_uring;
struct io_uring_cqe;
struct gpufile__uring_ops {
	int (*queue_init)(unsigned entries, struct io_uring *ring,
	                  unsigned flags);
	int (*submit)(struct io_uring *ring);
	int (*wait_cqe)(struct io_uring *ring, struct io_uring_cqe **cqe);
};
extern struct gpufile__uring_ops gpufile__uring;
/* Restores the real io_uring calls. */
void gpufile__uring_reset(void);

/* ---- plain I/O loops (posix_io.c) ---- */

/* Reads len bytes at off into host memory buf through descriptor fd,
 * retrying EINTR/EAGAIN and continuing after short reads. Returns the
 * bytes read (fewer than len only at end-of-file) or -errno. */
ssize_t gpufile__pread_full(int fd, void *buf, size_t len, int64_t off);
/* One O_DIRECT read loop over an aligned range into aligned buf; stops at
 * end-of-file. Returns the bytes read or -errno. */
ssize_t gpufile__direct_pread(int fd, char *buf, size_t len, int64_t off);
/* O_DIRECT failed with EINVAL at I/O time (off): use the page cache for
 * h from now on, and record why. */
void gpufile__refuse_direct(struct gpufile *h, int64_t off, int is_write);
/* ---- the O_DIRECT descriptor, opened at first use (direct_fd.c) ---- */

/* Sets up h's O_DIRECT descriptor at gpufile_open: none with direct_io
 * off (direct_mode), else to be opened at its first use. */
void gpufile__direct_fd_init(struct gpufile *h, int direct_mode);
/* h's O_DIRECT descriptor, opened now if it is the first use (once, under
 * h->lock, whichever thread comes first); -1 where there is none, with
 * h->direct_reason saying why. gpufile__direct_fd_locked: the same for a
 * caller that holds h->lock. */
int gpufile__direct_fd(struct gpufile *h);
int gpufile__direct_fd_locked(struct gpufile *h);
/* 0 when h has no O_DIRECT descriptor and none will be opened; opens
 * nothing. */
int gpufile__direct_fd_possible(struct gpufile *h);
/* A second descriptor on h->fd's file with O_DIRECT and access mode
 * access (through /proc/self/fd: the same file even when it was renamed
 * meanwhile); -ESTALE when another file came back; else -errno. */
int gpufile__reopen_direct(struct gpufile *h, int access);
/* The name of the file system of statfs magic, for messages. */
const char *gpufile__fs_name(long magic);

/* Writes len bytes; returns len or -errno (never a short count). */
ssize_t gpufile__pwrite_full(int fd, const void *buf, size_t len, int64_t off);

/* Reads [off, off+len) of h into host memory buf, choosing buffered or
 * O_DIRECT reads by the direct_io setting and what is in the page cache.
 * scratch is an aligned buffer of scratch_len (>= 2 * GPUFILE_ALIGN)
 * bytes, used for unaligned heads and tails. Returns as pread_full. */
ssize_t gpufile__file_read(struct gpufile *h, int direct_mode, char *buf,
                           size_t len, int64_t off, char *scratch,
                           size_t scratch_len);
/* 1 when every page of [off, off+len) is in the page cache (or when that
 * cannot be known), 0 when some page must come from storage. Starts no
 * I/O: a RWF_NOWAIT read would start readahead for what it misses, and a
 * following O_DIRECT read of the same range would then read it twice. */
int gpufile__range_cached(struct gpufile *h, int64_t off, size_t len);
/* Whether mincore() tells this process which pages of a file are cached:
 * since Linux 5.0 only to a process that owns the file, may write it (the
 * test runs on path, which may be /proc/self/fd/N) or is root; to any
 * other it reports every page cached. */
int gpufile__mincore_tells(const struct stat *st, const char *path);
/* Decodes, in place, the octal escapes (\040 for a space, \011, \012,
 * \134) with which the kernel writes a field of /proc/self/mountinfo
 * (probe.c). */
void gpufile__mountinfo_unescape(char *field);
/* gpufile__mincore_tells for h's file (as when its map was made); 1 where
 * h has no map (no claim is made from it). Takes h->lock. */
int gpufile__cache_visible(struct gpufile *h);

/* Host reads of at least this many bytes are copied from the file's map
 * when the page cache holds them (host_map_copy): below it, the mincore()
 * probe and the populate cost more than a copy saves. */
#define GPUFILE__MAP_COPY_MIN (256u << 10)

/* Copies [off, off+len) of h into host memory buf from the handle's map
 * of the file, with streaming stores (map_copy.c), when cfg allows it, the
 * range is at least GPUFILE__MAP_COPY_MIN bytes, inside the map and in the
 * page cache, buf is writable and the SIGBUS guard holds. Returns len, or
 * 0 when it copied nothing the caller can use (the caller then reads the
 * range as before, which also gives a file cut short meanwhile its real
 * end; buf's bytes past that end may then have been written). */
ssize_t gpufile__map_read(struct gpufile *h,
                          const struct gpufile__settings *cfg, char *buf,
                          size_t len, int64_t off);

/* Faults in, with one MADV_POPULATE_WRITE, the pages of the n bytes at p
 * from the first that is not in memory (mincore), before a read writes
 * them: a read into new memory (fsspec's cat_ranges returns 10,000 new
 * 64 KiB bytes objects) otherwise takes a page fault per 4 KiB page in
 * the middle of the kernel's copy, and on the CI VM (a PVM guest, whose
 * faults go through the hypervisor) those cost as much as the copy:
 * 10,000 x 64 KiB reads into new memory took 3.3 s of CPU, 1.7 s after
 * this (bench/README.md). Nothing for fewer than GPUFILE__POPULATE_MIN
 * bytes (a fault or two cost less than the mincore() call), memory
 * already in place, or a kernel before 5.14; a failure is left to the
 * read. */
void gpufile__populate_dest(void *p, size_t n);
#define GPUFILE__POPULATE_MIN (64u << 10)

/* 1 when MADV_POPULATE_READ/WRITE work here (Linux 5.14). */
int gpufile__populate_works(void);
/* 1 when the n bytes at p can be written (write=1) or read (0) without a
 * signal, their pages faulted in now (MADV_POPULATE_*); 0 when they
 * cannot, or the kernel cannot tell. Where MADV_POPULATE is missing,
 * 1. */
int gpufile__user_range_ok(const void *p, size_t n, int write);

/* map_copy.c. Installs the SIGBUS guard on first use; 1 when a guarded
 * streaming copy can be made now under mode (GPUFILE__MAP_COPY_*: the CPU
 * has AVX-512 streaming stores and the process 8 or more CPUs, or for ON
 * AVX2's and any CPU count, and gpufile__guard_ready says 1), else 0. */
int gpufile__stream_copy_ready(int mode);

/* 1 when the SIGBUS guard is installed (now, unless mode is OFF) and is
 * the process's handler, put back in place where the program installed
 * its own since: gpufile__guarded() may be called. 0 for OFF, or where
 * it cannot be (out of memory for its record of the program's handler):
 * then nothing may be copied from a map but by pread. */
int gpufile__guard_ready(int mode);
/* After gpufile__guard_ready() returned 1: runs fn(arg), which reads a
 * shared map of a file, with the guard armed on this thread. Returns 0,
 * or -EFAULT when a page it read raised SIGBUS (fn stopped there; what it
 * recorded behind arg before then is kept). fn takes no lock and calls
 * nothing that does. */
int gpufile__guarded(void (*fn)(void *arg), void *arg);
/* After gpufile__stream_copy_ready() returned 1 on this thread: copies n
 * bytes from src (a shared map of a file) to dst with streaming stores.
 * Returns 0, or -EFAULT when a page of src raised SIGBUS (the file is
 * shorter than the map): dst's n bytes then hold anything. */
int gpufile__stream_copy(char *dst, const char *src, size_t n);
/* Bytes copied by gpufile__stream_copy and faults it caught, so far. */
void gpufile__stream_copy_counts(uint64_t *bytes, uint64_t *caught);
/* 1 when h's file is at least end bytes long now (fstat). */
int gpufile__file_holds(struct gpufile *h, int64_t end);
/* The size of the file or block device open as fd (st_size, or for a block
 * device BLKGETSIZE64: its st_size is 0). Returns 0 or -errno. */
int gpufile__fd_size(int fd, int64_t *size);
/* 1 when off is before the end of h's file or device: a short read there
 * is not end-of-file. */
int gpufile__before_eof(struct gpufile *h, int64_t off);
/* Tests: called by gpufile__map_read after the range is populated and
 * before it is copied, and by a gathered read's task before its copies
 * from the map (to cut the file short in between). */
extern void (*gpufile__map_read_hook)(struct gpufile *h, int64_t off,
                                      size_t len);

/* The direct_io rule for a read of [off, off+len) of h, shared by the
 * host path and the cold device path: off never; on whenever h has an
 * O_DIRECT descriptor that was not refused; auto for reads of at least
 * GPUFILE__DIRECT_MIN bytes that the page cache does not hold. */
int gpufile__direct_read_wanted(struct gpufile *h, int direct_mode, size_t len,
                                int64_t off);

/* Writes [off, off+len) from host memory buf; O_DIRECT for the aligned
 * middle when direct_mode is ON. Returns len or -errno. */
ssize_t gpufile__file_write(struct gpufile *h, int direct_mode, const char *buf,
                            size_t len, int64_t off, char *scratch,
                            size_t scratch_len);

/* A per-thread aligned scratch buffer of GPUFILE__SCRATCH bytes, or NULL
 * when it cannot be allocated. Freed when the thread exits. */
#define GPUFILE__SCRATCH (1u << 20)
char *gpufile__thread_scratch(void);

/* ---- staging (staging.c) and gathered reads (gather.c) ---- */

/* Task function for device buffers (staging.c): one task through the
 * pinned bounce buffers, finished before it returns (never deferred), for
 * callers that wrap it in a task function of their own. */
ssize_t gpufile__staged_task(struct gpufile__request *r, char *buf, size_t len,
                             int64_t off, char *msg, size_t msg_len);
/* A device read whose bytes a source pushes, in order, rather than the
 * staging path pulling them chunk by chunk through gpufile__file_read():
 * one response that cannot be asked for in parts (remote.c: a server
 * that ignores Range). gpufile__staged_pushed() runs fill(arg, p) in the
 * calling thread, which hands the bytes of [off, off+len) of the object,
 * from the first, to gpufile__staged_push(p, ...) in that thread (each
 * bounce buffer goes to the GPU once full, while the next one fills);
 * fill returns the bytes it delivered (fewer than len only at the end of
 * the object) or an error with the thread's message set. A source that
 * starts over (a retried response) calls gpufile__staged_push_restart(p):
 * the bytes pushed after it land from buf's start again. Returns the
 * bytes delivered, or an error with msg (or, for fill's own error, the
 * thread's message) set; no copy of it runs any more. Keeps the thread's
 * bounce buffers as gpufile__staged_ops does (its settle ends them). */
struct gpufile__staged_push;
ssize_t gpufile__staged_pushed(struct gpufile__request *r, char *buf,
                               size_t len, int64_t off,
                               ssize_t (*fill)(void *arg,
                                               struct gpufile__staged_push *p),
                               void *arg, char *msg, size_t msg_len);
/* Takes the next n bytes (at most what is left of len). Returns 0, or the
 * error of a copy to the GPU (the read's msg set; the source stops). */
int gpufile__staged_push(struct gpufile__staged_push *p, const char *data,
                         size_t n);
void gpufile__staged_push_restart(struct gpufile__staged_push *p);
/* The staging path as ops (staging.c): a thread keeps its bounce buffers
 * between tasks and leaves each task's last copy running while it reads
 * the next task (settle ends it). */
extern const struct gpufile__task_ops gpufile__staged_ops;
/* The staging path for a request of one task that the thread asking for
 * it runs itself (gpufile__request_run_inline, file.c): nothing is
 * deferred or kept past the task, and the thread's current CUDA context
 * is left as it was (made the buffer's only for the task, where it was
 * another). A small device read then wakes no worker. */
extern const struct gpufile__task_ops gpufile__staged_here_ops;
/* Threads waiting for a bounce-buffer set now (for tests). */
unsigned gpufile__staging_waiting(void);
/* Frees every pinned bounce buffer (staging.c). */
void gpufile__staging_release(void);
int gpufile__staging_warmup(const struct gpufile__settings *s);
/* Frees the pinned bounce buffers, streams and events, waiting for those
 * that device requests running at the call still use; the pool keeps
 * running. Returns the pinned bytes freed (staging.c). */
size_t gpufile__staging_free(void);
/* staging.c's and cufile_shim.c's part of fork (api/fork.c). */
void gpufile__staging_atfork_prepare(void);
void gpufile__staging_atfork_parent(void);
void gpufile__staging_atfork_child(void);
void gpufile__cufile_atfork_prepare(void);
void gpufile__cufile_atfork_parent(void);
void gpufile__cufile_atfork_child(void);

/* gpufile_pread_gather copies runs from a map of the file (1, the
 * default) or preads them (0); tests set 0 to reach the pread path. */
extern int gpufile__gather_map;

#endif
