/*
 * Declarations shared between gpufile's source files. Nothing here is
 * part of the public API; names carry the gpufile__ prefix (or a module
 * prefix) and are hidden from the shared library's symbol table.
 */
#ifndef GPUFILE_INTERNAL_H
#define GPUFILE_INTERNAL_H

#include "gpufile.h"
#include "gpufile_private.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>

#define GPUFILE_ALIGN 4096u /* O_DIRECT offset, length and memory alignment */
/* With direct_io=auto, reads shorter than this take the page cache without
 * asking mincore() what it holds: the probe is a system call (about a
 * quarter of a 4 KiB cached read), and O_DIRECT only pays off for large
 * reads, where the cost of the probe is lost in the noise. */
#define GPUFILE__DIRECT_MIN (256u << 10)

/* ---- errors (error.c) ---- */

/* Formats the thread's error message and returns err. */
int gpufile__fail(int err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Sets the thread's error message to msg verbatim and returns err. */
int gpufile__fail_msg(int err, const char *msg);
/* Clears the thread's error message. */
void gpufile__clear_error(void);
/* Sets the thread's message aside: until gpufile__error_restore(), what
 * fails writes a message of its own, and the restore brings the saved one
 * back, whole. One level; per thread (no lock). */
void gpufile__error_save(void);
void gpufile__error_restore(void);

/* ---- structs that grow (sized.c; the rule: include/gpufile.h) ---- */

/* Checks the size field of the caller's struct p (non-NULL) of type type
 * (its name, for the message) whose first version was first_size bytes.
 * Returns 0, or -EINVAL with the message naming type.size. Nothing is
 * written to p. */
int gpufile__sized_check(const void *p, size_t first_size, const char *type);
/* Copies local, a fully filled struct of lib_size bytes, into p (checked
 * by gpufile__sized_check): min(p's size, lib_size) bytes, zeroes p's
 * bytes beyond lib_size, and sets both size fields to the bytes filled. */
void gpufile__sized_put(void *p, void *local, size_t lib_size);
/* The check for struct type T at p: today's struct is its first version. */
#define GPUFILE__SIZED_CHECK(p, T) gpufile__sized_check((p), sizeof(T), #T)

/* ---- settings (config.c) ---- */

/* A consistent copy of the settings, taken once per request. */
struct gpufile__settings {
	gpufile_compat_mode_t compat_mode;
	size_t task_size;
	size_t gds_threshold;
	unsigned nthreads;
	size_t bounce_buffer_size;
	unsigned bounce_buffers; /* per worker, >= 2 */
	int direct_io;           /* GPUFILE__DIRECT_* */
	unsigned max_inflight;   /* requests in flight before submit blocks */
	unsigned cufile_stats;   /* cuFile stats level to request, 0-3 */
	int cufile_accel_only;   /* auto: cuFile only where accelerated */
	/* task_size of remote requests; 0: task_size */
	size_t remote_task_size;
	int host_map_copy; /* GPUFILE__MAP_COPY_*: warm host reads from a map */
};

/* host_map_copy: auto copies with AVX-512 streaming stores only (the
 * measured win, bench/README.md); on also with AVX2's; off never. */
enum {
	GPUFILE__MAP_COPY_OFF = 0,
	GPUFILE__MAP_COPY_ON = 1,
	GPUFILE__MAP_COPY_AUTO = 2
};

enum {
	GPUFILE__DIRECT_OFF = 0,
	GPUFILE__DIRECT_ON = 1,
	GPUFILE__DIRECT_AUTO = 2
};

/* Fills *s. Returns 0, or GPUFILE_ECONFIG with the thread's message naming
 * the first bad variable and value. */
int gpufile__settings(struct gpufile__settings *s);

/* Parsers, exposed for tests and fuzzers. Return 0 or -EINVAL/-ERANGE. */
int gpufile__parse_size(const char *text, uint64_t *out);
int gpufile__parse_mode(const char *text, int *out); /* 0 auto, 1 on, 2 off */
int gpufile__parse_count(const char *text, uint64_t *out);
/* The http_status_codes setting: up to max HTTP statuses (100-599)
 * separated by commas, into codes. Returns their number (at least 1) or
 * -EINVAL. The one rule for the setting (config.c) and its user
 * (remote.c). */
#define GPUFILE__MAX_RETRY_CODES 32
int gpufile__parse_status_codes(const char *text, int *codes, int max);
/* Copies the value of string setting name (e.g. "cufile_library") into
 * out (len bytes). Returns 0, -ENOENT or GPUFILE_ECONFIG. */
int gpufile__config_string(const char *name, char *out, size_t len);
/* Variable var (CUFILE_ENV_PATH_JSON), which names a file to read: NULL
 * when unset, and in secure execution (setuid, setgid, capabilities),
 * where it is ignored and the configuration warnings say so (config.c).
 * gpufile__path_ignored: whether var is set but ignored so. */
const char *gpufile__path_getenv(const char *var);
int gpufile__path_ignored(const char *var);

/* ---- system calls (sys.c) ---- */

/* Every system call gpufile makes on a file goes through this table, so
 * that tests can inject EINTR, short transfers and errors (the way
 * SQLite's test_syscall.c does). Each entry follows libc's convention:
 * -1 with errno set on failure. */
struct gpufile__syscalls {
	int (*open)(const char *path, int flags, mode_t mode);
	int (*close)(int fd);
	ssize_t (*pread)(int fd, void *buf, size_t len, off_t off);
	ssize_t (*pwrite)(int fd, const void *buf, size_t len, off_t off);
	ssize_t (*preadv2)(int fd, const struct iovec *iov, int n, off_t off,
	                   int flags);
	int (*fstat)(int fd, struct stat *st);
	int (*fstatfs)(int fd, struct statfs *st);
	int (*fdatasync)(int fd);
	/* Cuts a failed append back off the file (append.c). */
	int (*ftruncate)(int fd, off_t len);
	/* Whether a range of a file's map is in the page cache: the map copy
	 * and direct_io=auto ask it (posix_io.c). */
	int (*mincore)(void *addr, size_t len, unsigned char *vec);
};
extern struct gpufile__syscalls gpufile__sys;
/* The smallest task a device read of fewer tasks than workers is split
 * into (file.c): 512 KiB; benchmarks set SIZE_MAX to compare. */
extern size_t gpufile__split_min;
/* The most copies the warm staged reader sends to the GPU in one call
 * (staging.c, "pooled copies"): 8; 1 sends each on its own, as benchmarks
 * do to compare. */
extern unsigned gpufile__pool_copies;
/* Restores the real system calls. */
void gpufile__sys_reset(void);

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

/* ---- statistics (stats.c) ---- */

/* A request ended: result bytes (or an error), its task count, its size as
 * asked, and its latency from submission to completion. */
void gpufile__stats_request(gpufile_path_t path, int is_write, ssize_t result,
                            uint64_t tasks, size_t size, uint64_t ns);
void gpufile__stats_direct_fallback(void);
/* bytes copied from a file's map; faulted: the copy was cut short. */
void gpufile__stats_map_copy(uint64_t bytes, int faulted);
/* A handle was opened: the path its device requests take, and why. */
void gpufile__stats_file(const char *path, gpufile_path_t chosen,
                         const char *reason);
/* A use of a handle of path that decides nothing about its device path
 * (a batch): written into the handle's record while that is still pending,
 * which it stays (the first device decision completes it); never a new
 * record, since only gpufile_open() makes one per handle. */
void gpufile__stats_file_note(const char *path, gpufile_path_t chosen,
                              const char *reason);
/* cuFile's own per-GPU counters (second layer), as last read. */
void gpufile__stats_cufile(const gpufile_cufile_gpu_t *per_gpu, int ngpus);
/* Remote sources (remote.c): one HTTP response (status 0: none, a curl
 * error) and the connections opened for it, one retry, one range
 * delivered (bytes) or failed. */
void gpufile__stats_remote_response(long status, long connects);
void gpufile__stats_remote_retry(void);
void gpufile__stats_remote_range(uint64_t bytes, int failed);
/* Monotonic clock in nanoseconds. */
uint64_t gpufile__now_ns(void);
/* Reads the segment behind descriptor fd as gpufile stats would (owner
 * uid, mode, F_SEAL_SHRINK, size, magic and version checked): counters
 * into *out, up to max file records into files. Returns the records
 * copied or a negative error with the message set. For tests and the
 * segment-reader fuzzer. */
int gpufile__stats_read_fd(int fd, unsigned uid, gpufile_stats_t *out,
                           gpufile_file_stat_t *files, int max);
/* A handle of path was opened (gpufile_open): recorded at once, so that
 * host-only users are listed too; the device path decision, when one
 * comes, completes the same record (gpufile__stats_file_set with the
 * number returned, 0 when nothing is counted). */
uint64_t gpufile__stats_file_open(const char *path);
/* The device path of the handle whose record gpufile__stats_file_open
 * numbered record, into that record while it is still the handle's; else
 * as gpufile__stats_file. Called again when the path changes (a setting
 * did), so that the record says what the handle's requests now take. */
void gpufile__stats_file_set(uint64_t record, const char *path,
                             gpufile_path_t chosen, const char *reason);
/* fallocate(fd, 0, offset, len) of the segment's memory; tests replace it
 * to simulate a full tmpfs or memory cgroup. */
extern int (*gpufile__stats_fallocate)(int fd, off_t offset, off_t len);

/* ---- file handles (file.c) ---- */

struct gpufile__old_map {
	struct gpufile__old_map *next;
	void *map;
	size_t len;
};

struct gpufile {
	int fd;        /* buffered descriptor */
	int direct_fd; /* O_DIRECT descriptor, or -1 */
	int readable, writable, append;
	atomic_int direct_refused; /* O_DIRECT failed at I/O time: use fd */
	/* Appends (append.c), under lock: the end of the last placed, how
	 * many are placed and not yet ended, and among these, where the
	 * first that failed began (INT64_MAX: none) and where the last that
	 * succeeded ended (INT64_MIN: none). */
	int64_t append_pos;
	unsigned appends;
	int64_t append_failed_from, append_ok_end;
	char *path;
	/* The file (a local one's; 0 for a remote object): stream-ordered
	 * reads wait for writes to the same file (stream.c). */
	dev_t file_dev;
	ino_t file_ino;
	char direct_reason[192]; /* why O_DIRECT is not used, or "" */
	atomic_int inflight;     /* requests on this handle not yet ended */
	pthread_mutex_t
	    lock; /* guards direct_reason, the map and append fields */
	/* A read-only mapping of the file, made when first needed and
	 * again, longer, once the file has grown past it (posix_io.c):
	 * mincore() asks it what the page cache holds, and warm host reads
	 * are copied from it (gpufile__map_read). */
	void *map;
	size_t map_len;
	int map_tried;
	int map_refused; /* not to be mapped (mmap failed, not a file) */
	int map_mincore; /* mincore() on map tells the page cache (posix_io.c)
	                  */
	/* Maps replaced by a longer one, unmapped by gpufile_close(): a
	 * reader may still be copying from one. */
	struct gpufile__old_map *old_maps;
	/* cuFile state, decided under lock at the first device request at
	 * or above gds_threshold that compat_mode lets reach cuFile (or by
	 * gpufile_path_info): registered, or why not (file.c). */
	int cufile_state;    /* GPUFILE__CUFILE_* */
	void *cufile_handle; /* CUfileHandle_t when registered */
	int cufile_fd;       /* the O_DIRECT descriptor registered, or -1 */
	int cufile_fd_owned; /* cufile_fd is not direct_fd: close it */
	int cufile_error;    /* gpufile error a compat_mode=off request gets */
	int cufile_status;   /* cuFile status of the failure, or 0 */
	char cufile_reason[320]; /* why cuFile is not used, or "" */
	/* The decision's cheap facts (decide.c), gathered once, under lock,
	 * at the first device request that needs them. */
	int facts_known, nvfs_loaded, p2pdma_possible;
	/* The device path decision in the statistics: its record's number
	 * (gpufile__stats_file_open), whether one was recorded, and which
	 * path and reason (a hash), to record it again when it changes. */
	uint64_t stats_record;
	int path_recorded;
	gpufile_path_t recorded_path;
	uint64_t recorded_reason;
	char nvfs_why[96], p2pdma_why[128];
	/* On the list of open handles (fork.c), whose locks the fork
	 * handlers take. Guarded by that list's lock. */
	LIST_ENTRY(gpufile) tracked;
	struct gpufile__remote
	    *remote; /* a remote object (remote.c), or NULL */
};
enum {
	GPUFILE__CUFILE_UNDECIDED = 0,
	GPUFILE__CUFILE_REGISTERED = 1,
	GPUFILE__CUFILE_UNAVAILABLE = 2,
};

/* ---- appends (append.c) ---- */

/* Places an append of size bytes to h ("a"): *offset is where it lands.
 * Returns 0 or an error (the message set); on 0, gpufile__append_end()
 * must follow exactly once. */
int gpufile__append_begin(struct gpufile *h, size_t size, int64_t *offset);
/* The append placed at offset (size bytes) has ended with result (size,
 * or an error): nothing of it is written any more. Where failed appends
 * are cut back off the file, it is done here, before the caller can see
 * the result. A failed append's message (msg, msg_len bytes, may be NULL)
 * gets a note where its range stays in the file or cutting it failed. */
void gpufile__append_end(struct gpufile *h, int64_t offset, size_t size,
                         ssize_t result, char *msg, size_t msg_len);

/* What kind of file mode is, when gpufile refuses it ("a FIFO (named
 * pipe)", "a socket", "a character device", "a directory", ...), or NULL
 * for a regular file or a block device: the only files that can be read
 * at any offset, in parallel, without waiting on another process. */
static inline const char *gpufile__special_kind(mode_t mode)
{
	if (S_ISREG(mode) || S_ISBLK(mode))
		return NULL;
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a FIFO (named pipe)";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISCHR(mode))
		return "a character device";
	return "not a regular file";
}

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

/* 1 when MADV_POPULATE_READ/WRITE work here (Linux 5.14). */
int gpufile__populate_works(void);
/* 1 when the n bytes at p can be written (write=1) or read (0) without a
 * signal, their pages faulted in now (MADV_POPULATE_*); 0 when they
 * cannot, or the kernel cannot tell. Where MADV_POPULATE is missing,
 * 1. */
int gpufile__user_range_ok(const void *p, size_t n, int write);

/* map_copy.c. Installs the SIGBUS guard on first use; 1 when a guarded
 * streaming copy can be made now under mode (GPUFILE__MAP_COPY_*: the CPU
 * has AVX-512 streaming stores, or for ON AVX2's, and gpufile__guard_ready
 * says 1), else 0. */
int gpufile__stream_copy_ready(int mode);
/* The streaming stores this CPU has for the map copy, found once, no
 * handler installed: host_map_copy=auto uses AVX-512's only, on also
 * AVX2's. */
enum { GPUFILE__STREAM_NONE, GPUFILE__STREAM_AVX2, GPUFILE__STREAM_AVX512 };
int gpufile__stream_copy_kind(void);
/* The rule, pure: 1 when host_map_copy mode lets a CPU with stores kind
 * (GPUFILE__STREAM_*) copy from the map (decide.c words it, map_copy.c
 * applies it). */
int gpufile__stream_copy_allowed(int mode, int kind);

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

/* ---- worker pool and requests (pool.c) ---- */

struct gpufile__request;

/* Moves one task: len bytes at file offset off, buf pointing at the task's
 * place in the caller's buffer. Returns bytes moved (fewer than len only at
 * end-of-file for reads) or a negative error; on error it may write a
 * message into msg (msg_len bytes). */
typedef ssize_t (*gpufile__task_fn)(struct gpufile__request *r, char *buf,
                                    size_t len, int64_t off, char *msg,
                                    size_t msg_len);

/* The outcome of a task whose task function returned
 * GPUFILE__TASK_DEFERRED, reported later by its ops' settle. */
struct gpufile__task_result {
	struct gpufile__request *r;
	int64_t off;
	size_t len;
	ssize_t n; /* bytes moved, or a negative error */
	char msg[256];
};

/*
 * What the pool needs to know about a request's tasks: how to run one, and
 * how to collect the ones it left running. The pool knows nothing else of
 * the path (staging, cuFile, host, mmap, ...).
 *   run     moves one task. It may return GPUFILE__TASK_DEFERRED (only
 *           when settle is not NULL): the task's last step is still
 *           running, and the task has not ended.
 *   settle  reports, into *out, a deferred task of the calling thread
 *           whose last step has finished, and returns 1; 0 when there is
 *           none. With idle, it first waits for the deferred task, if
 *           any, and gives back what the thread keeps between tasks: the
 *           pool calls it so before a worker sleeps or exits, before a
 *           thread runs a task of other ops, and right after each task a
 *           thread other than a worker ran. NULL when run never defers.
 */
struct gpufile__task_ops {
	gpufile__task_fn run;
	int (*settle)(struct gpufile__task_result *out, int idle);
};

struct gpufile__request {
	struct gpufile *h;
	const struct gpufile__task_ops *ops;
	char *buf;
	size_t size;
	int64_t offset;
	int is_write;
	gpufile_path_t path;
	struct gpufile__settings cfg;
	uint64_t ntasks;
	int device;     /* CUDA ordinal of buf for device paths */
	void *cuda_ctx; /* context that owns buf */
	unsigned long long cuda_ctx_id; /* its id (gpufile__ctx_id), or 0 */
	void *cufile_handle; /* the cufile path: h's registered handle */
	char *cufile_base;   /* registered buffer holding buf, or buf */

	/* Guarded by the pool lock. */
	uint64_t next_task;                       /* next task to claim */
	TAILQ_ENTRY(gpufile__request) queue_link; /* while queued */
	int queued;
	/* On the pool's list of requests in flight (submitted, not yet
	 * completed), which a forked child cancels (pool.c). */
	LIST_ENTRY(gpufile__request) active_link;

	uint64_t start_ns; /* when the request was initialised */
	atomic_uint_fast64_t tasks_ended;
	atomic_uint_fast64_t bytes;
	atomic_int failed; /* stop starting tasks */
	/* Lowest offset of a task that failed: tasks from there on are
	 * skipped, tasks below it still run, so the error returned is the
	 * lowest-offset one whatever order the threads run in. */
	_Atomic int64_t fail_at;
	_Atomic int64_t eof_at; /* lowest offset where a read hit EOF */

	pthread_mutex_t lock; /* guards everything below */
	pthread_cond_t cond;
	int done;
	ssize_t result;
	int64_t error_offset; /* offset of the task whose error is kept */
	char errmsg[512];
};

/* *out = now (CLOCK_REALTIME, as pthread_cond_timedwait takes) plus
 * timeout_ms milliseconds (> 0). */
void gpufile__deadline(long timeout_ms, struct timespec *out);

/* Initialises r for a request of size bytes split at multiples of
 * cfg.task_size in the file. */
void gpufile__request_init(struct gpufile__request *r);
/* Hands r to the pool (blocks while too many requests are in flight).
 * Returns 0 or an error (then r was not queued). */
int gpufile__request_submit(struct gpufile__request *r);
/* Runs r's tasks in the calling thread (for single-task host requests):
 * no queueing. */
void gpufile__request_run_inline(struct gpufile__request *r);
/* Waits for r (or until deadline_ms, -1 for none); returns its result or
 * -ETIMEDOUT. */
ssize_t gpufile__request_wait(struct gpufile__request *r, long timeout_ms);
void gpufile__request_destroy(struct gpufile__request *r);

/* Returned by a task function (struct gpufile__task_ops.run) whose task
 * has not ended: a staged read whose last copy to the GPU still runs,
 * overlapping the file read of the thread's next task. The task ends when
 * the ops' settle reports it. */
#define GPUFILE__TASK_DEFERRED ((ssize_t)INT64_MIN)

/* Waits until no request on h is in flight (gpufile_close). */
void gpufile__handle_wait_idle(struct gpufile *h);
/* Counts one more piece of work in flight on h outside the pool (a
 * stream-ordered request, stream.c), and its end, which wakes a
 * gpufile_close() waiting for h: both under pool.lock, as the pool's own
 * counts are. */
void gpufile__handle_hold(struct gpufile *h);
void gpufile__handle_release(struct gpufile *h);
/* gpufile__handle_release of n pieces, piece k counted on h[k], under one
 * hold of pool.lock, storing 1 in *marks[k] (release order) in the same
 * step (a batch entry's done flag, batch.c; marks may be NULL): whoever
 * sees a mark unset, a forked child included, knows its piece still
 * counts on its handle. */
void gpufile__handle_release_marks(struct gpufile *const *h,
                                   atomic_int *const *marks, unsigned n);

int gpufile__pool_start(void);
void gpufile__pool_stop(void);

/* Test seam: when set, called by the thread that is about to run the task
 * of r at file offset off, before it decides whether to skip the task
 * (tests make that thread wait to order threads deterministically). */
extern void (*gpufile__pool_task_hook)(struct gpufile__request *r, int64_t off);

/* ---- fork (fork.c and each module's handlers) ---- */

/* Adds a new handle to, and removes a closing one from, the list of open
 * handles whose locks the fork handlers hold across fork(). */
void gpufile__fork_track(struct gpufile *h);
void gpufile__fork_untrack(struct gpufile *h);
/* dl_lock (fork.c), held across fork(): taken around every dlopen,
 * dlclose and dl_iterate_phdr of the library outside the shims' loaders,
 * since glibc's loader is not safe to fork in the middle of. The last
 * lock of the library's order: nothing else is taken while it is held. */
void gpufile__dl_lock(void);
void gpufile__dl_unlock(void);
/* The loader's count of objects loaded into the process so far (it moves
 * whenever any library is loaded). Caller holds dl_lock. */
unsigned long long gpufile__dl_adds(void);
/* Each module's part of fork: prepare takes the module's locks (in the
 * library's lock order, written in fork.c), parent releases them, child
 * releases them and makes the module's state the child's own. */
void gpufile__pool_atfork_prepare(void);
void gpufile__pool_atfork_parent(void);
void gpufile__pool_atfork_child(void);
void gpufile__staging_atfork_prepare(void);
void gpufile__staging_atfork_parent(void);
void gpufile__staging_atfork_child(void);
void gpufile__cuda_atfork_prepare(void);
void gpufile__cuda_atfork_parent(void);
void gpufile__cuda_atfork_child(void);
void gpufile__cufile_atfork_prepare(void);
void gpufile__cufile_atfork_parent(void);
void gpufile__cufile_atfork_child(void);
void gpufile__config_atfork_prepare(void);
void gpufile__config_atfork_parent(void);
void gpufile__config_atfork_child(void);
/* batch.c: every batch not freed; the child ends its copies' entries in
 * flight at the fork (so that closing their handles does not wait). */
void gpufile__batch_atfork_prepare(void);
void gpufile__batch_atfork_parent(void);
void gpufile__batch_atfork_child(void);
/* 1 in a forked child of a process that had initialised CUDA: no CUDA
 * call is made, every pointer counts as host memory, and an -EFAULT names
 * this as the likely cause (a device pointer of the parent). */
int gpufile__cuda_forked(void);

/* ---- CUDA (cuda_shim.c) and staging (staging.c) ---- */

/* Classifies ptr without loading CUDA into a process that has not loaded
 * it: if libcuda.so.1 is not already mapped, every pointer is host. */
int gpufile__classify(const void *ptr, gpufile_mem_t *kind, int *device,
                      void **ctx);

/* Task function for device buffers (staging.c): one task through the
 * pinned bounce buffers, finished before it returns (never deferred), for
 * callers that wrap it in a task function of their own. */
ssize_t gpufile__staged_task(struct gpufile__request *r, char *buf, size_t len,
                             int64_t off, char *msg, size_t msg_len);
/* The staging path as ops (staging.c): a thread keeps its bounce buffers
 * between tasks and leaves each task's last copy running while it reads
 * the next task (settle ends it). */
extern const struct gpufile__task_ops gpufile__staged_ops;
/* Frees every pinned bounce buffer (staging.c). */
void gpufile__staging_release(void);
int gpufile__staging_warmup(const struct gpufile__settings *s);

/* gpufile_pread_gather copies runs from a map of the file (1, the
 * default) or preads them (0); tests set 0 to reach the pread path. */
extern int gpufile__gather_map;

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

/* ---- parity with KvikIO: page cache, mmap, cuFile driver, fds ---- */

/* How gpufile_page_cache_info() counts (page_cache.c): cachestat(2) with a
 * fallback to mincore(2) when the kernel lacks it, or one of them only.
 * Tests set it to run both. */
enum { GPUFILE__PC_AUTO = 0, GPUFILE__PC_CACHESTAT, GPUFILE__PC_MINCORE };
extern int gpufile__page_cache_method;
/* The file gpufile_drop_system_page_cache() writes; tests point it at a
 * file of their own so that they never drop the machine's caches. */
extern const char *gpufile__drop_caches_path;
/* Frees the pinned bounce buffers, streams and events, waiting for those
 * that device requests running at the call still use; the pool keeps
 * running. Returns the pinned bytes freed (staging.c). */
size_t gpufile__staging_free(void);
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
