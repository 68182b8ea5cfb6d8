/*
 * The core wing (src/core/): gpufile's own state and rules, the same for
 * every path and source: the settings (config.c), the statistics
 * (stats.c), the decision of a request's path from facts (decide.c, with
 * decide.h), the request, its tasks and the worker pool that runs them
 * (pool.c), appends (append.c), and the handle's data (struct gpufile,
 * filled in by api/file.c and sources/remote.c).
 *
 * May include: common/, platform/. Calls nothing above it: a path is
 * reached through the ops table of a request (struct gpufile__task_ops),
 * a source's reads through the handle's remote_read.
 */
#ifndef GPUFILE_CORE_H
#define GPUFILE_CORE_H

#include "platform/platform.h"

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
	int write_prealloc; /* GPUFILE__PREALLOC_*: reserve a write's blocks */
};

/* The pinned bytes one bounce buffer of bounce_buffer_size bytes takes:
 * the size rounded up to GPUFILE_ALIGN, plus GPUFILE_ALIGN, so that a
 * chunk of up to bounce_buffer_size bytes at any file offset fits with its
 * O_DIRECT window (offset rounded down, end rounded up) and every buffer
 * starts aligned. A size below 4 KiB (KvikIO honours any positive size)
 * then still gets whole pages; the chunks stay bounce_buffer_size. */
#define GPUFILE__BOUNCE_STRIDE(size)                                           \
	((((size) + GPUFILE_ALIGN - 1) & ~(size_t)(GPUFILE_ALIGN - 1)) +       \
	 GPUFILE_ALIGN)

/* host_map_copy: auto copies with AVX-512 streaming stores only, and only
 * with GPUFILE__MAP_COPY_MIN_CPUS or more CPUs (the measured win,
 * bench/README.md); on also with AVX2's and on any CPU count; off never. */
enum {
	GPUFILE__MAP_COPY_OFF = 0,
	GPUFILE__MAP_COPY_ON = 1,
	GPUFILE__MAP_COPY_AUTO = 2
};

/* write_prealloc: the part of a write that reaches GPUFILE__PREALLOC_MIN
 * bytes or more past the file's end is reserved before the write
 * (fallocate with FALLOC_FL_KEEP_SIZE; api/file.c): auto on ext4 (the
 * measured win), on on any file system but those in memory, off never. */
enum {
	GPUFILE__PREALLOC_OFF = 0,
	GPUFILE__PREALLOC_ON = 1,
	GPUFILE__PREALLOC_AUTO = 2
};
#define GPUFILE__PREALLOC_MIN (4u << 20)

enum {
	GPUFILE__DIRECT_OFF = 0,
	GPUFILE__DIRECT_ON = 1,
	GPUFILE__DIRECT_AUTO = 2
};

/* Fills *s. Returns 0, or GPUFILE_ECONFIG with the thread's message naming
 * the first bad variable and value. */
int gpufile__settings(struct gpufile__settings *s);
/* A number that changes whenever a setting's value or source may have
 * changed (the environment loaded, a set): whoever keeps a copy of the
 * settings (the statistics segment) copies them again only then. */
unsigned gpufile__config_generation(void);

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
/* Whether variable var (gpufile__path_getenv) is set but ignored. */
int gpufile__path_ignored(const char *var);

/* ---- statistics (stats.c) ---- */

/* A handle's record of per-file counters: which record, of which
 * segment (a forked child's handles name its parent's, and count per
 * path only). Zeroed: none. */
struct gpufile__stats_file_ref {
	uint64_t segment; /* the segment's generation; 0: no record */
	uint32_t index;
};
/* A handle of path is opened: *ref gets the record of path's counters
 * (the file's, shared by its handles; a new one, or the least recently
 * used closed file's), or none when every record is held by an open
 * handle. The name kept is path as gpufile shows it (redacted). */
void gpufile__stats_file_hold(struct gpufile__stats_file_ref *ref,
                              const char *path);
/* The handle is closed (nothing of it in flight): its record may go to
 * another file. *ref is zeroed. */
void gpufile__stats_file_release(struct gpufile__stats_file_ref *ref);

/* A request ended: result bytes (or an error), its task count, its size as
 * asked, and its latency from submission to completion. */
void gpufile__stats_request(gpufile_path_t path, int is_write, ssize_t result,
                            uint64_t tasks, size_t size, uint64_t ns);
/* The same request (or, in a batch, an entry of it) in its file's
 * counters (file may be NULL or hold no record). */
void gpufile__stats_file_request(const struct gpufile__stats_file_ref *file,
                                 gpufile_path_t path, int is_write,
                                 ssize_t result, uint64_t tasks);
/* The worker pool's requests (pool.c) count in steps instead, in the
 * process's counters and in those of the file (may be NULL): a request
 * of ntasks tasks and size bytes starts at start_ns (in flight from
 * now); one of its tasks ran and moved bytes (0 when it failed),
 * credited at once; ntasks of its tasks end unrun; it ends with result,
 * moved bytes in all (what is left of size leaves the in-flight bytes)
 * and its latency. */
void gpufile__stats_request_begin(const struct gpufile__stats_file_ref *file,
                                  uint64_t ntasks, uint64_t size,
                                  uint64_t start_ns);
void gpufile__stats_task(const struct gpufile__stats_file_ref *file,
                         gpufile_path_t path, int is_write, uint64_t bytes);
void gpufile__stats_tasks_skipped(const struct gpufile__stats_file_ref *file,
                                  uint64_t ntasks);
void gpufile__stats_request_end(const struct gpufile__stats_file_ref *file,
                                gpufile_path_t path, int is_write,
                                ssize_t result, size_t size, uint64_t moved,
                                uint64_t ns);
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
/* The transfer engine had n ranges in flight at once (http_multi.c): the
 * most so far is kept. */
void gpufile__stats_remote_in_flight(uint64_t n);
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
	int fd; /* buffered descriptor */
	/* The O_DIRECT descriptor, opened at its first use
	 * (paths/direct_fd.c): direct_fd is valid once direct_state is
	 * GPUFILE__DIRECT_FD_OPEN. */
	int direct_fd;
	atomic_int direct_state; /* GPUFILE__DIRECT_FD_* */
	int readable, writable, append;
	int regular; /* a regular file (not a block device): its page cache
	              * is asked per range (posix_io.c) */
	atomic_int direct_refused; /* O_DIRECT failed at I/O time: use fd */
	/* The file system's statfs magic, asked at the first write that
	 * may reserve blocks (file.c, preallocate); 0 until an fstatfs
	 * answers. */
	atomic_long fs_magic;
	/* fallocate said the file takes no reservation (EOPNOTSUPP, ENOSYS):
	 * preallocate asks no more. */
	atomic_int prealloc_refused;
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
	/* Guards direct_reason, the opening of direct_fd, the map and the
	 * append fields. */
	pthread_mutex_t lock;
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
	/* Its file's per-file counters (gpufile__stats_file_hold). */
	struct gpufile__stats_file_ref stats_file;
	char nvfs_why[96], p2pdma_why[128];
	/* On the list of open handles (fork.c), whose locks the fork
	 * handlers take. Guarded by that list's lock. */
	LIST_ENTRY(gpufile) tracked;
	struct gpufile__remote
	    *remote; /* a remote object (remote.c), or NULL */
	/* A remote object's range read into host memory, set by the source
	 * that opened it (sources/remote.c): what gpufile__file_read() calls
	 * for it. Returns as gpufile__pread_full. */
	ssize_t (*remote_read)(struct gpufile *h, char *buf, size_t len,
	                       int64_t off);
	/* A source with ops of its own (sources/upload.c, webhdfs.c; remote
	 * is set too), or NULL: its state, and what api/file.c calls in
	 * place of remote.c's functions. */
	const struct gpufile__source_ops *source_ops;
	void *source;
};
struct gpufile__task_ops;
struct gpufile__source_ops {
	const struct gpufile__task_ops *task; /* its requests' ops */
	int (*close)(struct gpufile *h);      /* frees h; 0 or an error */
	int64_t (*size)(struct gpufile *h);
	int (*sync)(struct gpufile *h);
	/* Bytes per task of its requests (0: remote_task_size). */
	size_t (*task_size)(struct gpufile *h);
};
enum {
	/* No O_DIRECT descriptor, and none to open (0: a handle made
	 * zeroed, a remote or a mapped one, has none). */
	GPUFILE__DIRECT_FD_NONE = 0,
	GPUFILE__DIRECT_FD_UNOPENED = 1, /* to be opened at first use */
	GPUFILE__DIRECT_FD_OPEN = 2,     /* direct_fd is open */
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

/* ---- the host map copy's rule (decide.c) ---- */

/* auto copies from the map only where the process may run on at least
 * this many CPUs (decide.c says why). */
#define GPUFILE__MAP_COPY_MIN_CPUS 8

/* The rule, pure: 1 when host_map_copy mode lets a CPU with stores kind
 * (GPUFILE__STREAM_*), in a process that may run on cpus CPUs, copy from
 * the map (decide.c words it, paths/map_copy.c applies it). */
int gpufile__stream_copy_allowed(int mode, int kind, int cpus);

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
 *   settle  reports, into *out, one deferred task of the calling thread
 *           whose last step has finished, and returns 1; 0 when there is
 *           none left to report (the pool calls it until it returns 0).
 *           With idle, once nothing finished is left to report, it waits
 *           for the deferred task, if any, and gives back what the thread
 *           keeps between tasks: the pool calls it so before a worker
 *           sleeps or exits, before a thread runs a task of other ops,
 *           and right after each task a thread other than a worker ran.
 *           It may also give back when not idle (another thread waits
 *           for what it keeps). NULL when run never defers.
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

/* ---- fork (api/fork.c calls each wing's part) ---- */

/* Each module's part of fork: prepare takes the module's locks (in the
 * library's lock order, written in fork.c), parent releases them, child
 * releases them and makes the module's state the child's own. */
void gpufile__pool_atfork_prepare(void);
void gpufile__pool_atfork_parent(void);
void gpufile__pool_atfork_child(void);
void gpufile__config_atfork_prepare(void);
void gpufile__config_atfork_parent(void);
void gpufile__config_atfork_child(void);

#endif
