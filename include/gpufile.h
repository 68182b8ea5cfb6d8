/*
 * gpufile.h - read files into GPU (and host) memory, and write them back,
 * and tell for every byte which data path carried it.
 *
 * Conventions that hold for every function below unless its comment says
 * otherwise:
 *   - Functions return 0 (or a byte count) on success and a negative code on
 *     failure: -errno for system errors, GPUFILE_E* for the library's own.
 *     They never set errno.
 *   - After a failure, gpufile_errmsg() in the same thread returns a message
 *     that names the file, setting or value at fault.
 *   - Every function is safe to call from several threads at once, except
 *     that a handle must not be closed while another thread still uses it.
 *   - Settings are read from the environment on the first call that needs
 *     them. A malformed value makes every such call fail with
 *     GPUFILE_ECONFIG until it is overridden by a setter.
 */
#ifndef GPUFILE_H
#define GPUFILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define GPUFILE_API __attribute__((visibility("default")))
#else
#define GPUFILE_API
#endif

/* The version: the one place it is written. CMakeLists.txt reads these
 * three lines for project(VERSION), from which the library's SONAME,
 * gpufile.pc, the CMake package and the Python package's version are made;
 * gpufile_version() returns GPUFILE_VERSION_STRING. */
#define GPUFILE_VERSION_MAJOR 0
#define GPUFILE_VERSION_MINOR 1
#define GPUFILE_VERSION_PATCH 0
#define GPUFILE__STR(x)       #x
#define GPUFILE__XSTR(x)      GPUFILE__STR(x)
/* "MAJOR.MINOR.PATCH" of this header. */
#define GPUFILE_VERSION_STRING                                                 \
	GPUFILE__XSTR(GPUFILE_VERSION_MAJOR)                                   \
	"." GPUFILE__XSTR(GPUFILE_VERSION_MINOR) "." GPUFILE__XSTR(            \
	    GPUFILE_VERSION_PATCH)
/* One number to compare: >= 10200 means 1.2.0 or later. */
#define GPUFILE_VERSION_NUMBER                                                 \
	(GPUFILE_VERSION_MAJOR * 10000 + GPUFILE_VERSION_MINOR * 100 +         \
	 GPUFILE_VERSION_PATCH)

/*
 * fork(): the library stays usable in a child made by fork() (Python's
 * multiprocessing does this by default on Linux), whatever other threads
 * of the parent were doing in gpufile at that moment:
 *   - handles opened in the parent work in the child (they share the
 *     parent's descriptors, as any fork does); settings carry over;
 *   - the worker pool starts again in the child on its first request;
 *   - a request that was in flight at the fork is the parent's: in the
 *     child its future completes with -ECANCELED (the message says the
 *     request crossed a fork) and nothing more arrives in the child's
 *     copy of the buffer; the parent's request goes on unaffected. Wait
 *     for requests before forking to keep their bytes in both;
 *   - CUDA does not support use in a child of a process that initialised
 *     it: in such a child gpufile makes no CUDA or cuFile call (it
 *     forgets the parent's context, pinned bounce buffers, streams and
 *     cuFile driver without freeing them), device allocations and device
 *     requests fail with GPUFILE_ENOCUDA naming fork, and host memory
 *     works as before. A child of a process that never initialised CUDA
 *     loads it on first need, as any process. Use exec (Python:
 *     multiprocessing's "spawn" or "forkserver") for GPU work in children.
 * The library's atfork handlers hold its locks across fork() in the lock
 * order written in src/api/fork.c; statistics segments follow stats.c's own
 * handler.
 */

/*
 * Structs that grow. The structs the library fills for the caller and
 * that may gain fields in later versions (gpufile_stats_t,
 * gpufile_remote_stats_t, gpufile_cufile_info_t, gpufile_cufile_config_t,
 * gpufile_plan_t, gpufile_remote_file_info_t) start with a uint32_t size
 * that the caller sets to sizeof the struct it was compiled with, before the
 * call:
 *
 *     gpufile_stats_t st;
 *     GPUFILE_INIT(st);
 *     gpufile_stats_self(&st);
 *
 *   - size 0, or smaller than the struct's first version (this header's
 *     size, as this is the first version with a size, except where a
 *     struct says which field its first version ended before): -EINVAL, and
 *     gpufile_errmsg() names the struct and the field ("gpufile_stats_t.size
 *     is 0: set it to sizeof(gpufile_stats_t)"); nothing is written.
 *   - size larger than the library's struct (a caller built against a
 *     newer header): the library fills its own part and zeroes the
 *     caller's bytes beyond it, so fields it does not know read 0.
 *   - whenever the library writes the struct (on success, and on the
 *     failures after which the function's contract says what it holds),
 *     size becomes the number of bytes it filled: the smaller of the two
 *     sizes. Nothing is ever written beyond the size the caller declared.
 * A struct passed IN (gpufile_explain's cfg, gpufile_open_remote's opts)
 * needs a valid size too.
 * Arrays of fixed records (gpufile_file_stat_t, gpufile_file_counters_t,
 * gpufile_process_t, gpufile_check_item_t, gpufile_batch_entry_t,
 * gpufile_safetensors_tensor_t, gpufile_counter_t) have no size field:
 * they do not grow; a new field would come with a new function.
 */
#define GPUFILE_INIT(s) ((s).size = (uint32_t)sizeof(s))

/* ------------------------------------------------------------------ */
/* Errors                                                             */
/* ------------------------------------------------------------------ */

/* The library's own error codes, all below -4095 so they never collide
 * with -errno. X(name, value, description). */
#define GPUFILE_ERRORS(X)                                                      \
	X(GPUFILE_ECONFIG, -5001, "invalid setting")                           \
	X(GPUFILE_ENOCUDA, -5002, "CUDA driver not available")                 \
	X(GPUFILE_ECUDA, -5003, "CUDA driver call failed")                     \
	X(GPUFILE_ENOCUFILE, -5004, "cuFile library not available")            \
	X(GPUFILE_ECUFILE, -5005, "cuFile call failed")                        \
	X(GPUFILE_EBADPTR, -5006, "buffer is not memory gpufile can use")      \
	X(GPUFILE_EFLAGS, -5007, "invalid open flags")

enum gpufile_error {
#define GPUFILE_X_ENUM(name, value, text) name = value,
	GPUFILE_ERRORS(GPUFILE_X_ENUM)
#undef GPUFILE_X_ENUM
};

/* A static description of err (a GPUFILE_E* code or a -errno value).
 * Never NULL. */
GPUFILE_API const char *gpufile_strerror(int err);

/* The detailed message of the last failed call in this thread (naming the
 * file, offset, setting or value at fault), or "" when none failed; whole
 * however long (cut to 447 bytes only where no memory is left). The
 * string stays valid until the next gpufile call in this thread. */
GPUFILE_API const char *gpufile_errmsg(void);

/* The library version as "MAJOR.MINOR.PATCH". */
GPUFILE_API const char *gpufile_version(void);

/* What this library can use now, as a space-separated list of these words,
 * in this order, each present only when true:
 *   liburing  built with liburing, and the kernel lets this process set up
 *             an io_uring (else cold device reads use pread);
 *   cjson     cufile.json parsing compiled in (cJSON);
 *   stats     the shared-memory counters compiled in (not GPUFILE_NO_STATS);
 *   cuda      the CUDA driver, libcuda.so.1, can be loaded;
 *   cufile    the cuFile library (the cufile_library setting) is loaded or
 *             can be loaded;
 *   remote    built with libcurl: http://, https:// and s3:// URLs open;
 *   sigv4     built with libcrypto: S3 requests are signed (SigV4).
 * CUDA and cuFile are always reached through dlopen, never linked. This
 * call may load (never initialize) libcuda and libcufile; whether a GPU is
 * usable is gpufile_cuda_device_count()'s answer, whether cuFile's driver
 * opens is gpufile_check()'s. Never NULL; the string is valid until the
 * next gpufile_features() call in the same thread. */
GPUFILE_API const char *gpufile_features(void);

/* ------------------------------------------------------------------ */
/* Settings                                                           */
/* ------------------------------------------------------------------ */

/*
 * Each setting NAME (lower case, e.g. "task_size") has a default, the
 * environment variable GPUFILE_<NAME> and, as a fallback, KVIKIO_<NAME>
 * (GPUFILE_ wins when both are set), and a setter. Sizes accept plain
 * bytes or a number with k/m/g, KiB/MiB/GiB or KB/MB/GB (all binary);
 * booleans and modes accept on/off/auto/true/false/yes/no/1/0 in any case.
 */
typedef enum gpufile_compat_mode {
	GPUFILE_COMPAT_AUTO = 0, /* try cuFile, fall back with a reason */
	GPUFILE_COMPAT_ON = 1,   /* never use cuFile */
	GPUFILE_COMPAT_OFF = 2,  /* cuFile or a clear error */
} gpufile_compat_mode_t;

/* Where a setting's current value came from. */
typedef enum gpufile_source {
	GPUFILE_SOURCE_DEFAULT = 0,
	GPUFILE_SOURCE_ENV = 1,        /* GPUFILE_<NAME> */
	GPUFILE_SOURCE_KVIKIO_ENV = 2, /* KVIKIO_<NAME> */
	GPUFILE_SOURCE_SETTER = 3, /* gpufile_config_set() or a typed setter */
} gpufile_source_t;

/* "default", "environment" (GPUFILE_<NAME>), "kvikio-environment"
 * (KVIKIO_<NAME>) or "setter"; gpufile_config_get() gives the variable's
 * exact name. */
GPUFILE_API const char *gpufile_source_name(gpufile_source_t source);

/* Number of settings; their names are gpufile_config_name(0..count-1). */
GPUFILE_API int gpufile_config_count(void);

/* The name of setting index, or NULL when index is out of range. */
GPUFILE_API const char *gpufile_config_name(int index);

/* A one-line description of setting index, or NULL when out of range. */
GPUFILE_API const char *gpufile_config_help(int index);

/* Checks that every setting taken from the environment is valid.
 * Returns 0, or GPUFILE_ECONFIG with a message naming the variable and
 * its value. */
GPUFILE_API int gpufile_config_check(void);

/* Writes the effective value of setting name, in canonical form (sizes in
 * bytes, modes as "auto"/"on"/"off"), into value (len bytes, always
 * NUL-terminated) and, when source is not NULL, where it came from. When
 * the setting came from the environment, variable (if not NULL, len bytes)
 * receives the variable's name, else "". Returns 0, -ENOENT for an unknown
 * name, or GPUFILE_ECONFIG when the environment gave this setting a bad
 * value. */
GPUFILE_API int gpufile_config_get(const char *name, char *value, size_t len,
                                   gpufile_source_t *source, char *variable,
                                   size_t variable_len);

/* Parses value as the environment would and makes it the setting's value
 * (source: setter). Returns 0, -ENOENT for an unknown name, or
 * GPUFILE_ECONFIG (message names the setting and the value) when value is
 * invalid; then nothing changes. Settings that shape the worker pool or the
 * bounce buffers take effect for requests submitted after the call. */
GPUFILE_API int gpufile_config_set(const char *name, const char *value);

/* What the environment got wrong or was not used as given, one line each:
 * a value clamped to what gpufile can use (KVIKIO_BOUNCE_BUFFER_SIZE=32768
 * runs with 64 KiB buffers; the line says so and why), a GPUFILE_ or
 * KVIKIO_ variable that is no setting (naming the closest one, by edit
 * distance: GPUFILE_TASKSIZE -> GPUFILE_TASK_SIZE), a KvikIO variable
 * accepted but unused (remote I/O, logging), a variable naming code to
 * load that a privileged (setuid) process ignores. The first request of a
 * process prints them once to stderr; `gpufile config` lists them.
 * gpufile_config_warning_count() returns how many there are;
 * gpufile_config_warning() copies line index (0-based) into out (len
 * bytes, NUL-terminated) and returns 0, -ENOENT past the last one, or
 * -EINVAL for a NULL out. Thread-safe; the list changes only with the
 * settings (gpufile_config_reset, a setter that clamps). */
GPUFILE_API int gpufile_config_warning_count(void);
GPUFILE_API int gpufile_config_warning(int index, char *out, size_t len);

/* Typed access to the core settings. Getters return 0 or GPUFILE_ECONFIG;
 * setters return 0 or GPUFILE_ECONFIG for an out-of-range value. */
GPUFILE_API int gpufile_set_compat_mode(gpufile_compat_mode_t mode);
GPUFILE_API int gpufile_get_compat_mode(gpufile_compat_mode_t *mode);
GPUFILE_API int gpufile_set_task_size(size_t bytes);
GPUFILE_API int gpufile_get_task_size(size_t *bytes);
GPUFILE_API int gpufile_set_gds_threshold(size_t bytes);
GPUFILE_API int gpufile_get_gds_threshold(size_t *bytes);
GPUFILE_API int gpufile_set_nthreads(unsigned nthreads);
GPUFILE_API int gpufile_get_nthreads(unsigned *nthreads);
GPUFILE_API int gpufile_set_bounce_buffer_size(size_t bytes);
GPUFILE_API int gpufile_get_bounce_buffer_size(size_t *bytes);

/* ------------------------------------------------------------------ */
/* Files                                                              */
/* ------------------------------------------------------------------ */

typedef struct gpufile gpufile_t;

/*
 * Opens path. flags, as for fopen():
 *   "r"   read only; the file must exist.
 *   "r+"  read and write; the file must exist; not truncated.
 *   "w"   write only; created (mode 0644 less umask) or truncated to 0.
 *   "w+"  read and write; created or truncated to 0.
 *   "a"   write only; created if missing, never truncated; file_offset
 *         is ignored. A write request made while no other is in flight on
 *         the handle starts at the file's real end (after another
 *         process's append, the next lands right after it). Requests in
 *         flight together are placed one after another in the order they
 *         were submitted. A failed append (-ENOSPC, -EFAULT, ...; some of
 *         its bytes may have reached the file) is cut back off the file
 *         (ftruncate), so the file holds what it held before it and the
 *         next append lands there: at once when no other append was in
 *         flight on the handle, else when the last of those has ended.
 *         Only where an append placed after the failed one was written,
 *         or another handle or process wrote past the appends' end
 *         meanwhile, does the failed one's range stay (zeros where
 *         nothing was written), and its error message says so. Appends
 *         from other handles are not otherwise coordinated.
 * Anything else fails with GPUFILE_EFLAGS. On success *out owns a handle
 * that gpufile_close() frees. Whether O_DIRECT is used follows the
 * direct_io setting; a file system that refuses O_DIRECT (tmpfs) is read
 * through the page cache and the reason is recorded (gpufile_path_info).
 * The O_DIRECT descriptor (and cuFile's) is opened on the same file as the
 * first, never by name again, so a rename racing with the open cannot put
 * two files behind one handle.
 * Only regular files and block devices are opened: gpufile reads at
 * offsets, in parallel, which a FIFO, socket or character device cannot
 * serve (and a read of one could wait forever on another process). The
 * open itself never blocks on them. A directory fails with -EISDIR, a FIFO
 * or socket with -ESPIPE, a character device with -ENODEV; the message
 * names the path and its kind. A block device's size is the kernel's
 * (BLKGETSIZE64: its st_size is 0), its end is an end of file, it may be
 * read with O_DIRECT, and "a" is refused with -EINVAL (its size is fixed).
 * An http://, https:// or s3:// URL opens a read-only remote object ("r"
 * only, else -EROFS): see gpufile_remote_info() below.
 */
GPUFILE_API int gpufile_open(gpufile_t **out, const char *path,
                             const char *flags);

/* Closes h after every request on it has ended. Accepts NULL (returns 0).
 * Returns 0 or the -errno of close(2); the handle is freed either way. */
GPUFILE_API int gpufile_close(gpufile_t *h);

/* The file's current size in bytes, or -errno. */
GPUFILE_API int64_t gpufile_size(gpufile_t *h);

/* The path h was opened with (for a URL: without user information and
 * query, as in messages). Valid until gpufile_close(h). */
GPUFILE_API const char *gpufile_filename(gpufile_t *h);

/*
 * Reads up to size bytes at file_offset into buf, which may be host memory
 * (pageable or pinned) or device memory of any GPU. The request is split
 * into tasks at multiples of task_size in the file, run in parallel (a
 * device read through the bounce buffers, from the page cache, of fewer
 * tasks than nthreads: at halves of task_size, down to 512 KiB, until it
 * has nthreads tasks).
 * Returns the number of bytes read: size, or fewer when the file ends
 * first, in which case exactly the bytes up to end-of-file are read and the
 * rest of buf is left as it was (unless the file grew during the call: a
 * task above the end the call returns may then have read the new bytes;
 * tasks above an end of file already found are not run).
 * On failure returns the error of the
 * lowest-offset task that failed; then the contents of buf are unspecified,
 * but no task touches buf after the call has returned.
 * Device memory may belong to any CUDA context, a device's primary one or
 * one the program created; the thread need not have it current. Work
 * still queued on a stream that writes buf (a cudaMemset, which returns
 * before it ran, or a kernel) must have ended before the call: gpufile's
 * copies do not wait for it (see gpufile_pwrite). What gpufile keeps for
 * later requests (streams, pinned bounce buffers) lives in the primary
 * contexts it holds, or carries its context's id: a context the program
 * destroys (cuCtxDestroy), or a primary one it resets (cudaDeviceReset),
 * takes none of gpufile's state with it that a later request would use.
 */
GPUFILE_API ssize_t gpufile_pread(gpufile_t *h, void *buf, size_t size,
                                  int64_t file_offset);

/* Writes size bytes from buf (host or device memory) at file_offset.
 * Returns size, or an error; a failed write may have written some of the
 * bytes, and never reports more than reached the file.
 * Device memory must hold its final bytes when the call is made: gpufile
 * copies on its own non-blocking streams, which do not wait for work queued
 * on other streams (a kernel, or the DMA that a cuMemcpy from pageable
 * memory may leave running after it returns). Synchronize that work first.
 * The same holds for reads: nothing else may use buf until the call has
 * returned (or its future has completed). */
GPUFILE_API ssize_t gpufile_pwrite(gpufile_t *h, const void *buf, size_t size,
                                   int64_t file_offset);

/* Reads nruns runs of run_size bytes, run i at file offset offsets[i],
 * packed one after another into host (or pinned) memory: run i lands at
 * buf + i * run_size. For many short runs (a block of columns of a
 * row-major matrix, one run per row), where a request per run costs more
 * than its bytes: the packed result is cut into about nthreads tasks,
 * each copying its runs in turn (from a read-only map of the runs' span
 * when the file holds them all at the call, else by pread), counted as
 * one request on the host path. Device memory is refused (-EINVAL):
 * gather into pinned memory and copy that to the GPU in one copy. A run
 * the file does not fully hold is an error (-EIO naming the run), never a
 * short count, also when the file is cut short during the call (the copy's
 * SIGBUS is caught by gpufile's handler, whatever handlers the program
 * installs: see gpufile_mmap_pread; with host_map_copy=off no handler is
 * installed and such a fault is the process's, as for any map of the
 * file). Returns run_size * nruns (0 when that is 0) or an error. */
GPUFILE_API ssize_t gpufile_pread_gather(gpufile_t *h, void *buf,
                                         size_t run_size, size_t nruns,
                                         const int64_t *offsets);

/* Flushes the file's data to storage (fdatasync). Returns 0 or -errno
 * (0 at once for a remote object, which is read-only). */
GPUFILE_API int gpufile_sync(gpufile_t *h);

/* An asynchronous request. */
typedef struct gpufile_future gpufile_future_t;

/* As gpufile_pread/gpufile_pwrite, but returns at once with *out owning a
 * future. buf must stay valid until the future has completed. Submission
 * blocks while too many requests are already in flight (back-pressure).
 * Returns 0, or an error detected before any I/O (then *out is NULL). */
GPUFILE_API int gpufile_pread_async(gpufile_t *h, void *buf, size_t size,
                                    int64_t file_offset,
                                    gpufile_future_t **out);
GPUFILE_API int gpufile_pwrite_async(gpufile_t *h, const void *buf, size_t size,
                                     int64_t file_offset,
                                     gpufile_future_t **out);

/* 1 when every task of f has ended, else 0. Never blocks. */
GPUFILE_API int gpufile_future_done(gpufile_future_t *f);

/* Waits until f completes; returns what the blocking call would have
 * returned, and sets this thread's gpufile_errmsg() on failure. May be
 * called again and returns the same value. */
GPUFILE_API ssize_t gpufile_future_wait(gpufile_future_t *f);

/* Waits at most timeout_ms milliseconds (the calling thread may run one of
 * f's tasks meanwhile, which can take it past the timeout by that task).
 * Returns as gpufile_future_wait, or -ETIMEDOUT when f has not completed
 * yet. */
GPUFILE_API ssize_t gpufile_future_wait_for(gpufile_future_t *f,
                                            long timeout_ms);

/* Waits for f if it is still running, then frees it. Accepts NULL. */
GPUFILE_API void gpufile_future_free(gpufile_future_t *f);

/* ------------------------------------------------------------------ */
/* Paths and their statistics                                         */
/* ------------------------------------------------------------------ */

/* The data paths gpufile counts. */
typedef enum gpufile_path {
	GPUFILE_PATH_HOST = 0, /* host buffer, read/written directly */
	GPUFILE_PATH_POSIX =
	    1, /* device buffer through pinned bounce buffers */
	GPUFILE_PATH_CUFILE = 2, /* device buffer handed to cuFile */
	GPUFILE_PATH_SMALL = 3,  /* device request below gds_threshold */
	GPUFILE_PATH_MMAP = 4,   /* a memory-mapped handle (gpufile_mmap_*) */
	GPUFILE_PATH_REMOTE = 5, /* a remote object (HTTP, S3) over libcurl */
	GPUFILE_PATH_COUNT = 6,
} gpufile_path_t;

/* "host", "posix", "cufile", "small", "mmap" or "remote"; "?" when out of
 * range. */
GPUFILE_API const char *gpufile_path_name(gpufile_path_t path);

/* Which path a device-memory request of at least gds_threshold bytes on h
 * takes, and why, as a sentence written into reason (len bytes,
 * NUL-terminated; may be NULL). Also reports whether O_DIRECT is in use
 * and, if it was refused, why. When the handle falls back from cuFile the
 * reason names the cuFile status code and name. With compat_mode auto or
 * off this may load cuFile and register the file (as the first device
 * request would); with no CUDA driver loaded it reports the posix path.
 * Returns 0 or an error (with compat_mode=off, the error a device request
 * would fail with). */
GPUFILE_API int gpufile_path_info(gpufile_t *h, gpufile_path_t *device_path,
                                  char *reason, size_t len);

/* Requests and errors count when a request ends; tasks and bytes as each
 * task ends, so that a large request is seen moving while it runs (a
 * request that failed keeps the bytes its other tasks moved). Batches and
 * stream-ordered requests count whole when they end. */
typedef struct gpufile_counter {
	uint64_t ops;    /* requests (blocking or async) that ended */
	uint64_t tasks;  /* tasks that ran */
	uint64_t bytes;  /* bytes moved */
	uint64_t errors; /* requests that failed */
} gpufile_counter_t;

#define GPUFILE_HIST_BUCKETS   48
#define GPUFILE_MAX_GPUS       16
#define GPUFILE_MAX_SETTINGS   24
#define GPUFILE_MAX_FILE_STATS 64
/* Files whose counters a process keeps (gpufile_stats_file_counters). */
#define GPUFILE_MAX_FILE_COUNTERS 128

/* cuFile's counters for one GPU (cuFileGetStatsL3). */
typedef struct gpufile_cufile_gpu {
	int gpu;
	uint64_t nvfs_reads, posix_reads, p2p_reads, unaligned_reads;
	uint64_t nvfs_writes, posix_writes, p2p_writes, unaligned_writes;
} gpufile_cufile_gpu_t;

/* One effective setting, as gpufile_config_get() reports it. */
typedef struct gpufile_setting_value {
	char name[32];
	char value[96];
	char source[40]; /* "default", or the variable that set it, or "setter"
	                  */
} gpufile_setting_value_t;

typedef struct gpufile_stats {
	uint32_t size; /* sizeof(gpufile_stats_t), set by the caller */
	/* [path][0 = read, 1 = write] */
	gpufile_counter_t path[GPUFILE_PATH_COUNT][2];
	uint64_t direct_io_fallbacks; /* files where O_DIRECT was refused */

	/* Fields below were added with the shared-memory segment (stats.c). */
	int32_t pid;            /* the process counted */
	uint32_t uid;           /* its owner */
	char command[64];       /* its command name (/proc/PID/comm) */
	uint64_t start_time_ns; /* CLOCK_REALTIME when counting began */
	uint64_t files_opened;  /* handles recorded by gpufile_open() */
	/* Histograms, [path][0 = read, 1 = write][bucket]: bucket i counts
	 * requests whose latency in ns (resp. size in bytes) v has
	 * 2^i <= v < 2^(i+1); bucket 0 also counts 0, and the last bucket
	 * everything above. */
	uint64_t latency_hist[GPUFILE_PATH_COUNT][2][GPUFILE_HIST_BUCKETS];
	uint64_t size_hist[GPUFILE_PATH_COUNT][2][GPUFILE_HIST_BUCKETS];
	/* cuFile's own per-GPU counters (the second layer), as gpufile last
	 * read them; cufile_ngpus is -1 when cuFile never reported any. */
	int cufile_ngpus;
	gpufile_cufile_gpu_t cufile[GPUFILE_MAX_GPUS];
	/* The effective settings when the segment was created or a file was
	 * last opened. */
	int nsettings;
	gpufile_setting_value_t settings[GPUFILE_MAX_SETTINGS];
	/* Of the bytes read on the host path (path[GPUFILE_PATH_HOST][0]),
	 * those the CPU copied from a map of the file instead of reading
	 * them with pread: warm host reads under host_map_copy, and gathered
	 * reads (gpufile_pread_gather). map_copy_faults: copies from a map
	 * (these, and a memory-mapped handle's) that a SIGBUS cut short
	 * because the file shrank; their ranges were read again by pread,
	 * or failed with -EIO. The struct's first version ended before
	 * map_copy_bytes: a caller built without these fields gets the rest. */
	uint64_t map_copy_bytes;
	uint64_t map_copy_faults;
	/* In flight at the moment of reading (requests of the worker pool):
	 * requests started and not yet ended, their tasks not yet ended, and
	 * the bytes they asked for that no task has moved yet. */
	uint64_t inflight_requests;
	uint64_t inflight_tasks;
	uint64_t pending_bytes;
	/* torch.distributed collectives that moved data of this process
	 * (gpufile.safetensors.load_distributed credits them through
	 * gpufile_stats_add_collective): calls, bytes received, bytes sent. */
	uint64_t collective_calls;
	uint64_t collective_bytes_received;
	uint64_t collective_bytes_sent;
	/* Per-file counters (gpufile_stats_file_counters): records dropped
	 * to make room for another file (a closed file's, the least
	 * recently used first), and files opened that got none because
	 * every record was held by an open handle. */
	uint64_t file_counters_dropped;
	uint64_t file_counters_untracked;
} gpufile_stats_t;

/* A snapshot of this process's counters since it started. Returns 0, or
 * -EINVAL when out is NULL or out->size is wrong (see "Structs that
 * grow"), -ENOMEM. Before the first I/O every counter is 0. */
GPUFILE_API int gpufile_stats_self(gpufile_stats_t *out);

/* ---- live statistics of other processes (stats.c) ----
 *
 * From its first gpufile_open() or request a process keeps its counters
 * in a shared-memory segment: an unlinked memfd named "gpufile-stats",
 * mode 0600, its memory reserved when made and sealed against shrinking
 * and growing. It has no name in any file system and goes with the
 * process, however the process ends. Readers find it through
 * /proc/PID/fd (which the kernel opens only for the same user, or root),
 * refuse one that is not sealed against shrinking, and check its magic
 * number, layout version, size, mode and owner. When the segment cannot
 * be made (memory limit, no memfd) the process counts in private memory
 * and gpufile_stats_backing() says why (so does gpufile_stats_read()
 * from another process: an empty memfd's name carries the reason). A
 * forked child counts in a segment of its own. A build with
 * -DGPUFILE_NO_STATS keeps no counters; then the readers return
 * -ENOTSUP. */

/* Reads the counters of process pid (0 or getpid(): this process).
 * Returns 0 (all counters 0 for a process that loaded gpufile but has
 * done no I/O yet), or: -EINVAL out is NULL or out->size is wrong (see
 * "Structs that grow"); -ENOMEM; -ESRCH no such process;
 * -EACCES the process belongs to another user (or is not dumpable);
 * -ENOENT the process does not use gpufile, or counts in private memory
 * (the message says why); -EBADF the process closed the descriptor of
 * its counters, which no other process can then reach (they still
 * count); -ESTALE the PID is gone and an older gpufile
 * left a /dev/shm segment for it; -EPROTO the segment is not one this
 * version can read (magic, version, size, mode or seal).
 * The thread's gpufile_errmsg() says which, naming the PID. */
GPUFILE_API int gpufile_stats_read(int pid, gpufile_stats_t *out);

/* One file handle a process opened: the path its device requests take,
 * and why (e.g. why cuFile was not used). A handle used only with host
 * memory says so ("host", device path not decided yet). */
typedef struct gpufile_file_stat {
	char path[256];
	gpufile_path_t chosen;
	char reason[256];
} gpufile_file_stat_t;

/* Copies up to max of process pid's most recently opened handles (oldest
 * first) into out. Returns how many were copied, -EINVAL when out is NULL
 * and max > 0, or an error as gpufile_stats_read. Only the last
 * GPUFILE_MAX_FILE_STATS are kept. */
GPUFILE_API int gpufile_stats_files(int pid, gpufile_file_stat_t *out, int max);

/* The counters of one file a process has open or has used: per path and
 * direction its requests, tasks, bytes and errors, counted as
 * gpufile_stats_t counts them (tasks and bytes as each task ends), and
 * what is in flight on it now. A fixed record (see "Structs that grow"):
 * it does not grow. */
typedef struct gpufile_file_counters {
	/* The file as gpufile shows it (gpufile_redact_url: a URL without
	 * its credentials and query), its first 255 bytes when longer
	 * (name_len says): files whose shown names agree in those share
	 * one record. */
	char name[256];
	uint32_t name_len; /* the shown name's whole length */
	uint32_t handles;  /* its handles open now */
	/* Nonzero, and new whenever a record is given to a file: samples
	 * of the same id are of the same counting (rates). */
	uint64_t id;
	uint64_t last_used_ns; /* CLOCK_MONOTONIC: its last open or request */
	/* [path][0 = read, 1 = write], as gpufile_stats_t's path. */
	gpufile_counter_t path[GPUFILE_PATH_COUNT][2];
	/* In flight on it (the worker pool's requests), as gpufile_stats_t's
	 * gauges. */
	uint64_t inflight_requests;
	uint64_t inflight_tasks;
	uint64_t pending_bytes;
} gpufile_file_counters_t;

/* Copies the per-file counters of process pid (0: this process), the most
 * recently used file first, up to max of them into out (out may be NULL
 * when max is 0). A process keeps records for GPUFILE_MAX_FILE_COUNTERS
 * files: every file with an open handle holds its record, and a file
 * opened when all are taken gets the record of the closed file used
 * least recently (file_counters_dropped of gpufile_stats_t counts those;
 * file_counters_untracked the files opened while every record was held
 * by an open handle, which are counted per path only). Returns the
 * number of files with a record (which may exceed max), -EINVAL when out
 * is NULL and max > 0, or an error as gpufile_stats_read. */
GPUFILE_API int
gpufile_stats_file_counters(int pid, gpufile_file_counters_t *out, int max);

/* A process with a gpufile segment. */
typedef struct gpufile_process {
	int32_t pid;
	char command[64];
	uint64_t bytes; /* bytes moved on every path, both directions */
	int stale;      /* 1: the process is gone, and an older gpufile left a
	                   /dev/shm segment for it (gpufile_stats_clean) */
} gpufile_process_t;

/* Lists this user's processes with a segment (every user's for root), up
 * to max of them into out (out may be NULL when max is 0; -EINVAL when it
 * is NULL and max > 0). Returns the number found (which may exceed max)
 * or -errno. */
GPUFILE_API int gpufile_stats_list(gpufile_process_t *out, int max);

/* Removes this user's segments left in /dev/shm by gpufile versions
 * before the memfd segment (named gpufile-UID-PID) whose process is
 * gone. The current segment needs no cleaning. Returns how many were
 * removed. */
GPUFILE_API int gpufile_stats_clean(void);

/* Where this process's counters live, made now if they were not yet:
 * writes "shared: ..." or "private: <why the shared segment could not be
 * made>" into buf (len bytes, truncated to fit). Returns 1 shared
 * (gpufile stats PID sees them), 0 private, or -EINVAL (buf NULL, len 0). */
GPUFILE_API int gpufile_stats_backing(char *buf, size_t len);

/* Credits one collective call (torch.distributed broadcast, scatter, ...)
 * that delivered bytes_received bytes to this process and sent bytes_sent
 * from it, in this process's counters (collective_* of gpufile_stats_t,
 * shown by gpufile stats PID). For code that shares what gpufile read
 * through a transport of its own, as the Python binding's
 * load_distributed does. Thread-safe, lock-free. Returns 0, or -ENOTSUP
 * in a build without counters (GPUFILE_NO_STATS). */
GPUFILE_API int gpufile_stats_add_collective(uint64_t bytes_received,
                                             uint64_t bytes_sent);

/* ---- remote sources (remote.c) ----
 *
 * gpufile_open() also takes http://, https:// and s3://BUCKET/KEY URLs
 * (and presigned S3 URLs), read-only ("r"): see gpufile_remote_info(3)
 * and the README's "Remote objects". Their requests count under
 * GPUFILE_PATH_REMOTE; these counters add what HTTP did. */

#define GPUFILE_REMOTE_STATUS_CLASSES 6
typedef struct gpufile_remote_stats {
	uint32_t size; /* sizeof(gpufile_remote_stats_t), set by the caller */
	uint64_t requests; /* HTTP requests sent, retries included */
	uint64_t ranges;   /* ranges that arrived whole */
	uint64_t bytes;    /* bytes of those ranges */
	uint64_t retries;  /* attempts repeated after a retryable failure */
	uint64_t failures; /* ranges that failed after every attempt */
	uint64_t connects; /* connections opened (the rest were reused) */
	/* responses by class: [0] none (a curl error), [1..5] 1xx..5xx */
	uint64_t status[GPUFILE_REMOTE_STATUS_CLASSES];
	/* the most ranges one remote handle had in flight at once
	 * (http_max_in_flight bounds it) */
	uint64_t in_flight_max;
} gpufile_remote_stats_t;

/* Reads process pid's remote counters (0: this process) into *out
 * (out->size set by the caller: see "Structs that grow"). Returns 0 or an
 * error as gpufile_stats_read(). */
GPUFILE_API int gpufile_stats_remote(int pid, gpufile_remote_stats_t *out);

/* Checks url the way gpufile_open() would and writes a report into out
 * (len bytes, lines "key: value"): the endpoint (redacted: no user
 * information, no query), the kind (http, s3, presigned URL), whether
 * credentials are present (never their values), the region (S3), the
 * HEAD (or GET bytes 0-0) result and the size. Returns 0, or the error
 * gpufile_open() would return (the report then says what failed);
 * -ENOTSUP when built without libcurl. */
GPUFILE_API int gpufile_remote_info(const char *url, char *out, size_t len);

/* Options of one remote handle (gpufile_open_remote()): a struct that
 * grows ("Structs that grow"), passed in. Zero (or NULL) in a field means
 * "not given": the value then comes from the environment, the AWS profile
 * files or the settings, as for gpufile_open(). Strings are copied at
 * open; nothing is kept. */
typedef struct gpufile_remote_opts {
	uint32_t size;  /* sizeof(gpufile_remote_opts_t), set by the caller */
	uint32_t flags; /* GPUFILE_REMOTE_* below */
	const char *aws_access_key_id; /* with aws_secret_access_key */
	const char *aws_secret_access_key;
	const char *aws_session_token; /* temporary credentials */
	const char *aws_region;        /* the SigV4 region */
	const char *aws_endpoint_url; /* s3:// URLs: the endpoint, path style */
	const char *aws_profile;      /* the profile of ~/.aws/ files */
	const char *ca_file; /* CA bundle HTTPS servers are checked against */
	const char *ca_path; /* a folder of hashed CA certificates */
	uint64_t known_size; /* with GPUFILE_REMOTE_KNOWN_SIZE: no HEAD */
	uint32_t timeout_s;  /* http_timeout of this handle */
	uint32_t max_in_flight; /* remote_connections of this handle */
	uint32_t max_attempts;  /* http_max_attempts of this handle */
} gpufile_remote_opts_t;

/* known_size is the object's size: the open sends no request. */
#define GPUFILE_REMOTE_KNOWN_SIZE (1u << 0)
/* Never sign (a public bucket), whatever credentials are found. */
#define GPUFILE_REMOTE_UNSIGNED (1u << 1)
/* An http(s):// URL of an S3 object on an endpoint of its own (MinIO,
 * s3rver; path style: ENDPOINT/BUCKET/KEY), signed as AWS's own S3 URLs
 * are when credentials are found. */
#define GPUFILE_REMOTE_S3 (1u << 2)

/* gpufile_open() of a URL (http://, https://, s3://) with the options of
 * opts (NULL: none, as gpufile_open()). Credentials are taken from the
 * first of: opts, the environment (AWS_ACCESS_KEY_ID and
 * AWS_SECRET_ACCESS_KEY), the profile (opts->aws_profile, else
 * AWS_PROFILE, else "default") of AWS_SHARED_CREDENTIALS_FILE (else
 * ~/.aws/credentials) and AWS_CONFIG_FILE (else ~/.aws/config); they are
 * used for s3:// URLs, for AWS's S3 URLs (https://BUCKET.s3.REGION.
 * amazonaws.com/KEY, https://s3.REGION.amazonaws.com/BUCKET/KEY, ...) and
 * with GPUFILE_REMOTE_S3; never for a presigned URL (X-Amz-Signature in
 * its query). Returns 0 with *out set (gpufile_close() frees it), or an
 * error naming the redacted URL and, for a bad option, the option, the
 * variable or the profile file: -EINVAL (url not a URL, opts->size 0 or
 * too small, half-given credentials, an unknown flag, a missing profile),
 * -ENOENT (a CA file or folder that does not exist), or what
 * gpufile_open() returns. See gpufile_open_remote(3). */
GPUFILE_API int gpufile_open_remote(gpufile_t **out, const char *url,
                                    const char *flags,
                                    const gpufile_remote_opts_t *opts);

/* What one remote handle did (gpufile_remote_file_info()): a struct that
 * grows. The strings point into the handle (valid until gpufile_close()). */
typedef struct gpufile_remote_file_info {
	uint32_t size; /* sizeof(gpufile_remote_file_info_t), set by caller */
	int32_t signed_requests; /* 1: requests carry a SigV4 signature */
	const char *url;         /* redacted, as gpufile_filename() */
	const char *kind;        /* "http", "s3", "presigned URL" */
	const char *etag;        /* the object's strong ETag at open, or NULL */
	const char *region;      /* the SigV4 region (S3), or NULL */
	const char *credentials; /* where they came from (never them) */
	int64_t object_size;
	uint64_t requests;  /* HTTP requests sent, retries included */
	uint64_t retries;   /* attempts repeated after a retryable failure */
	uint64_t ranges;    /* ranges that arrived (upload parts sent) whole */
	uint64_t bytes;     /* bytes of those ranges */
	uint64_t failures;  /* ranges (parts) failed after every attempt */
	uint64_t redirects; /* redirect hops followed */
	uint64_t connects;  /* connections opened */
} gpufile_remote_file_info_t;

/* Fills *out (out->size set by the caller) with what h, a remote handle,
 * did since it was opened (the HEAD of the open included). Returns 0,
 * -EINVAL (h or out NULL, a bad size) or -ENOTSUP (h is not a remote
 * object). Thread-safe; the counters are read without a lock, each
 * exact but not all at one instant. */
GPUFILE_API int gpufile_remote_file_info(gpufile_t *h,
                                         gpufile_remote_file_info_t *out);

/* path as gpufile shows it in every message, statistic and report (and
 * gpufile_filename()): an http:// or https:// URL without its user
 * information (user:password@), query (a presigned signature, a token)
 * and fragment; an s3://BUCKET/KEY URL without user information, its key
 * whole ('?' and '#' are characters of a key), or "s3://<redacted>" where
 * what is left of its bucket part is no bucket name (a password with a
 * '/' ends that part early); anything else unchanged.
 * For tools and bindings that print a path they were given. Writes it
 * into out (len bytes, NUL-terminated, cut to fit; out may be NULL when
 * len is 0) and returns its length, as snprintf() does: a result >= len
 * means it was cut, and len = result + 1 holds it. Returns -EINVAL (path
 * NULL, out NULL with len > 0) or -ENOMEM. Thread-safe. */
GPUFILE_API ssize_t gpufile_redact_url(const char *path, char *out, size_t len);

/* ------------------------------------------------------------------ */
/* cuFile, the second layer (cufile_shim.c)                            */
/* ------------------------------------------------------------------ */

/* cuFile's state in this process, and its per-GPU counters. */
typedef struct gpufile_cufile_info {
	uint32_t size;   /* sizeof(gpufile_cufile_info_t), set by the caller */
	int loaded;      /* libcufile loaded with every required symbol */
	int driver_open; /* cuFileDriverOpen succeeded (closed at exit) */
	int status;      /* cuFile status of the failure (5001...), or 0 */
	int version;     /* cuFileGetVersion: 1150 is 1.15.0; 0 unknown */
	unsigned optional; /* optional entry points found: bit 0 driver
	                      properties, 1 version, 2 stats, 3 stream,
	                      4 batch, 5 cuFileDriverClose_v2 */
	int nvfs_loaded;   /* /proc/driver/nvidia-fs present */
	int p2pdma;        /* driver properties report PCI P2PDMA support */
	int stats_level;   /* level given to cuFileSetStatsLevel (0: none) */
	int stats_layout_verified; /* 1: per-GPU offsets checked for this
	                              version (1.14, 1.15) */
	int ngpus; /* entries of gpu[] filled (stats level 3 only) */
	gpufile_cufile_gpu_t gpu[GPUFILE_MAX_GPUS];
	char library[256]; /* the library loaded or tried */
	char message[256]; /* why cuFile is not usable, or "" */
} gpufile_cufile_info_t;

/* Fills *out with cuFile's state and, when the stats level is 3, cuFile's
 * per-GPU counters as of now (cuFileGetStatsL3; nvfs = through nvidia-fs,
 * posix = cuFile's own compatibility path, p2p = PCI P2PDMA; cuFile may
 * split one gpufile task into several). Never loads cuFile: a process that
 * has not needed it reports loaded = 0. Returns 0, or -EINVAL when out is
 * NULL or out->size is wrong (see "Structs that grow"). */
GPUFILE_API int gpufile_cufile_info(gpufile_cufile_info_t *out);

/* The name of a cuFile status (5027: "CU_FILE_HANDLE_NOT_REGISTERED").
 * Never NULL. */
GPUFILE_API const char *gpufile_cufile_status_name(int status);

/*
 * Registers device memory [buf, buf+size) with cuFile (cuFileBufRegister,
 * flags passed through), so that cuFile maps it once rather than per
 * request; requests into any part of it then name the registered base and
 * the offset inside it. A no-op returning 0 where cuFile is not used:
 * compat_mode=on, host memory, or, with compat_mode=auto, when cuFile is
 * unavailable or could not take an accelerated path. With compat_mode=off
 * an unavailable cuFile is an error. Returns 0 or an error (GPUFILE_ECUFILE
 * with the cuFile status in gpufile_errmsg()).
 */
GPUFILE_API int gpufile_buf_register(const void *buf, size_t size, int flags);

/* Undoes gpufile_buf_register(buf, ...). Returns 0 (also when buf was not
 * registered) or GPUFILE_ECUFILE. No request may be using the buffer. */
GPUFILE_API int gpufile_buf_deregister(const void *buf);

/* ------------------------------------------------------------------ */
/* cuFile's configuration (cufile_json.c)                              */
/* ------------------------------------------------------------------ */

/* The cufile.json values gpufile models. Each has gpufile's model of the
 * cuFile 1.15 default, used when the file or the key is absent. */
typedef enum gpufile_cufile_key {
	GPUFILE_CUFILE_PARALLEL_IO = 0,         /* execution.parallel_io */
	GPUFILE_CUFILE_MAX_IO_THREADS,          /* execution.max_io_threads */
	GPUFILE_CUFILE_MAX_REQUEST_PARALLELISM, /* execution.max_request_parallelism
	                                         */
	GPUFILE_CUFILE_MIN_IO_THRESHOLD_SIZE_KB, /* execution.min_io_threshold_size_kb
	                                          */
	GPUFILE_CUFILE_MAX_IO_QUEUE_DEPTH,    /* execution.max_io_queue_depth */
	GPUFILE_CUFILE_MAX_DIRECT_IO_SIZE_KB, /* properties.max_direct_io_size_kb
	                                       */
	GPUFILE_CUFILE_MAX_DEVICE_CACHE_SIZE_KB, /* properties.max_device_cache_size_kb
	                                          */
	GPUFILE_CUFILE_ALLOW_COMPAT_MODE,     /* properties.allow_compat_mode */
	GPUFILE_CUFILE_USE_POLL_MODE,         /* properties.use_poll_mode */
	GPUFILE_CUFILE_POLL_MODE_MAX_SIZE_KB, /* properties.poll_mode_max_size_kb
	                                       */
	GPUFILE_CUFILE_NKEYS
} gpufile_cufile_key_t;

typedef struct gpufile_cufile_value {
	const char *key; /* "execution.parallel_io"; static */
	int64_t value;   /* booleans are 0 or 1 */
	int is_bool;
	int from_file; /* 1: read from the file; 0: gpufile's default */
} gpufile_cufile_value_t;

typedef struct gpufile_cufile_config {
	uint32_t size; /* sizeof(gpufile_cufile_config_t), set by the caller */
	char path[1024];      /* the file read, or "" when none was */
	char path_source[64]; /* "CUFILE_ENV_PATH_JSON", "/etc/cufile.json",
	                       * "argument" or "none" */
	int parsed;           /* 1 when a file was read and parsed */
	gpufile_cufile_value_t v[GPUFILE_CUFILE_NKEYS];
	/* denylist.filesystems, space separated */
	char denied_filesystems[256];
} gpufile_cufile_config_t;

/* Fills *out with cuFile's configuration: from path when not NULL, else
 * from $CUFILE_ENV_PATH_JSON, else /etc/cufile.json; a missing default
 * file is not an error (every value is then the default). The file must
 * be a regular file (cuFile reads it again itself): a FIFO, socket or
 * device fails at once, without blocking, with -EINVAL (a directory with
 * -EISDIR) and a message naming the path and its kind. Returns 0;
 * -errno when the file cannot be read; GPUFILE_ECONFIG when it is not
 * valid JSON or a value has the wrong type or range (the message names the
 * file and line, or the key); -ENOTSUP when a file exists but this build
 * has no JSON parser ("cufile.json parsing not compiled in"); -EINVAL
 * when out is NULL or out->size is wrong (see "Structs that grow": then
 * nothing is written). *out holds the defaults after any other failure. */
GPUFILE_API int gpufile_cufile_config_load(const char *path,
                                           gpufile_cufile_config_t *out);

/* ------------------------------------------------------------------ */
/* The plan of one read (plan.c)                                       */
/* ------------------------------------------------------------------ */

/* How cuFile schedules requests of one size. */
typedef struct gpufile_plan_entry {
	uint64_t request_size; /* bytes in one request cuFile receives */
	uint64_t count;        /* how many such requests */
	uint64_t parts;        /* scheduling units cuFile cuts one into */
	uint64_t part_size;    /* bytes of the largest part: parts split the
	                        * request evenly (they differ by a byte at
	                        * most), so none is below the threshold */
	uint64_t max_transfer; /* largest single nvidia-fs transfer */
	uint64_t transfers_per_part;
	char why[256]; /* which rule decided parts */
} gpufile_plan_entry_t;

typedef struct gpufile_plan {
	uint32_t size;      /* sizeof(gpufile_plan_t), set by the caller */
	uint64_t read_size; /* bytes the read asks for */
	uint64_t offset, task_size, gds_threshold;
	int registered; /* planned for a buffer registered with cuFile */
	uint64_t tasks; /* requests gpufile makes */
	uint64_t cufile_requests; /* how many of them reach cuFile */
	int below_threshold;      /* the whole read is below gds_threshold:
	                           * every task takes the "small" POSIX path */
	/* Distinct task sizes, in file order (head, middle, tail). */
	int ntask_sizes;
	uint64_t task_sizes[3], task_counts[3];
	int nentries;
	gpufile_plan_entry_t entries[3];
	/* A task size at which cuFile receives the read whole, in one
	 * request (the smallest such when offset is 0). */
	uint64_t whole_task_size;
	unsigned nthreads;        /* gpufile workers issuing requests */
	uint64_t parts_in_flight; /* at most, with nthreads requests at once;
	                           * compare execution.max_io_queue_depth */
	gpufile_cufile_config_t cufile; /* the configuration planned with */
	char model_note[256];
} gpufile_plan_t;

/* Plans a read of size bytes at offset: gpufile's split into tasks of
 * task_size (0: the task_size setting) and the gds_threshold setting, and
 * cuFile's schedule of each request under cfg (NULL: loaded as
 * gpufile_cufile_config_load(NULL)). Pure computation; nothing is read.
 * Returns 0, GPUFILE_ECONFIG for a bad setting or cufile.json, or -EINVAL
 * (offset + size out of range; out NULL; out->size, or cfg->size when cfg
 * is given, wrong: see "Structs that grow"). out->read_size is size. */
GPUFILE_API int gpufile_explain(uint64_t size, uint64_t offset,
                                uint64_t task_size, int registered,
                                const gpufile_cufile_config_t *cfg,
                                gpufile_plan_t *out);

/* ------------------------------------------------------------------ */
/* Platform checks (probe.c)                                           */
/* ------------------------------------------------------------------ */

typedef enum gpufile_check_status {
	GPUFILE_CHECK_PASS = 0,
	GPUFILE_CHECK_FAIL = 1,
	GPUFILE_CHECK_UNKNOWN = 2,
} gpufile_check_status_t;

/* "pass", "fail" or "unknown". */
GPUFILE_API const char *gpufile_check_status_name(gpufile_check_status_t s);

typedef struct gpufile_check_item {
	char name[48]; /* "libcufile", "nvidia-fs", "file.o_direct", ... */
	gpufile_check_status_t status;
	char value[256]; /* what was found */
	char why[512];   /* why this status */
} gpufile_check_item_t;

/* Runs the platform checks and, when path is not NULL, the checks of that
 * file and the prediction of each layer's path for a device read of it.
 * Fills up to max items; returns how many there are (which may exceed
 * max), or -errno. May load libcufile and open its driver. */
GPUFILE_API int gpufile_check(const char *path, gpufile_check_item_t *items,
                              int max);

/* ------------------------------------------------------------------ */
/* Memory and the CUDA driver                                          */
/* ------------------------------------------------------------------ */

typedef enum gpufile_mem {
	GPUFILE_MEM_HOST = 0,    /* pageable host memory (or unknown to CUDA) */
	GPUFILE_MEM_PINNED = 1,  /* page-locked host memory known to CUDA */
	GPUFILE_MEM_DEVICE = 2,  /* device memory */
	GPUFILE_MEM_MANAGED = 3, /* managed (unified) memory */
} gpufile_mem_t;

/* "host", "pinned", "device" or "managed". */
GPUFILE_API const char *gpufile_mem_name(gpufile_mem_t kind);

/* Number of usable CUDA devices (libcuda.so.1 loaded with dlopen), or
 * GPUFILE_ENOCUDA with a message saying why none is usable. */
GPUFILE_API int gpufile_cuda_device_count(void);

/* Classifies ptr; *device receives the ordinal of the GPU that owns device
 * or managed memory, else -1. Without a CUDA driver every pointer is
 * GPUFILE_MEM_HOST. device may be NULL; kind may not (-EINVAL). Returns
 * 0 or an error. */
GPUFILE_API int gpufile_mem_kind(const void *ptr, gpufile_mem_t *kind,
                                 int *device);

/* Allocates size bytes of device memory on GPU device in its primary
 * context, for tools and tests that do not link CUDA themselves. Returns 0
 * or an error (-EINVAL when out is NULL); free with gpufile_device_free().
 */
GPUFILE_API int gpufile_device_alloc(int device, size_t size, void **out);
GPUFILE_API int gpufile_device_free(void *ptr);

/* Copies between host and device memory (direction from the pointers),
 * and returns once the destination holds the bytes (also for device
 * destinations copied from pageable memory). For tools and tests.
 * Returns 0 or an error: -EINVAL, naming it, when dst or src is NULL and
 * size is not 0. A size of 0 copies nothing and returns 0, whatever the
 * pointers. */
GPUFILE_API int gpufile_memcpy(void *dst, const void *src, size_t size);

/* Starts the worker pool and, when a GPU is usable, allocates the pinned
 * bounce buffers, so that the first request does not pay for them.
 * Returns 0 or an error. */
GPUFILE_API int gpufile_warmup(void);

/* Upper bound, in bytes, of the pinned host memory gpufile holds with the
 * current settings and the batches that exist: 3 * nthreads *
 * buffers_per_worker * (bounce_buffer_size + 4096), plus 4 MiB (two 2 MiB
 * slots) per worker thread of every batch not yet freed (a batch starts a
 * worker per chunk of a submit's entries, up to min(nthreads, 64), and
 * keeps them; see gpufile_batch_create). One
 * third of the first term is the bounce buffers; the rest, at most two
 * arenas for stream-ordered reads staged on their stream
 * (gpufile_read_async), is allocated only once such a read runs, as a
 * batch's slots are only once it reads into device memory. */
GPUFILE_API size_t gpufile_pinned_bytes_max(void);

/* Stops the worker pool and frees every bounce buffer. Requests must not
 * be in flight. Later requests start them again. At process exit nothing
 * is freed explicitly: the CUDA contexts may already be gone, and the
 * operating system reclaims the pinned memory. */
GPUFILE_API void gpufile_release(void);

/* ------------------------------------------------------------------ */
/* Page cache (page_cache.c)                                           */
/* ------------------------------------------------------------------ */

/*
 * How much of a file range the page cache holds. Give exactly one of h
 * (an open handle) and path (opened read-only for the call). The range
 * is [offset, offset+size) clipped to the file's end; size 0 means to the
 * end. *total_bytes receives the clipped range's length, *cached_bytes the
 * bytes of it that lie in cached pages (a page at either end counts only
 * its part inside the range). Counted with cachestat(2) where the kernel
 * has it (Linux 6.5), else with mincore(2) over a mapping of the range;
 * both give the same numbers. Starts no I/O. Returns 0 or an error (-EINVAL
 * for a negative offset or both/neither of h and path; -ENOTSUP for a
 * remote handle or a URL as path, naming it without credentials and
 * query; -errno naming the file when it cannot be opened; -EPERM where the
 * kernel does not tell this process which pages are cached, because it neither
 * owns the file nor may write it: cachestat refuses it on recent kernels, and
 * mincore would report every page cached, so no count is made). KvikIO counts
 * pages; gpufile counts bytes, so a partial last page does not inflate the
 * total.
 */
GPUFILE_API int gpufile_page_cache_info(gpufile_t *h, const char *path,
                                        int64_t offset, size_t size,
                                        uint64_t *cached_bytes,
                                        uint64_t *total_bytes);

/* Flushes h's dirty pages (fdatasync) and then asks the kernel to drop
 * the range's pages from the page cache (posix_fadvise DONTNEED); size 0
 * means to the end of the file. Needs no privilege. Pages another process
 * has mapped or locked may stay. Returns 0 or -errno naming the file. */
GPUFILE_API int gpufile_drop_page_cache(gpufile_t *h, int64_t offset,
                                        size_t size);

/* Drops the whole system's clean page cache (and, when reclaim_inodes is
 * nonzero, dentries and inodes too) by writing 1 (or 3) to
 * /proc/sys/vm/drop_caches, after sync(). Needs root: any other effective
 * uid gets -EPERM, with a message saying so, without trying; a root that
 * the kernel still refuses (a container) gets the -errno of the open, its
 * message naming the file. Returns 0 or that error. */
GPUFILE_API int gpufile_drop_system_page_cache(int reclaim_inodes);

/* ------------------------------------------------------------------ */
/* Descriptors and bounce buffers (controls.c)                         */
/* ------------------------------------------------------------------ */

/* The file descriptor of h: the buffered one (direct 0) or the O_DIRECT
 * one (direct nonzero). It stays owned by h: do not close it, and do not
 * use it after gpufile_close(h). Returns the descriptor, -EINVAL for a
 * NULL h, or -ENOENT when h has no O_DIRECT descriptor (direct_io=off, or
 * the file system refused O_DIRECT; the message says which). Unlike
 * KvikIO, which opens the O_DIRECT descriptor lazily, gpufile opens it at
 * gpufile_open() when direct_io allows. */
GPUFILE_API int gpufile_fd(gpufile_t *h, int direct);

/* Frees every pinned bounce buffer (with its stream and events) and
 * returns how many bytes of pinned memory that gave back; the worker pool
 * keeps running, and the next device request allocates buffers again
 * (tens of milliseconds). Buffers that device requests running at the call
 * still use are freed, and counted, when those requests end: the call
 * waits for them. The arenas of stream-ordered reads staged on their
 * stream are freed, and counted, where no read uses them; the others are
 * kept. Returns 0 when none were held. Unlike gpufile_release(), it may
 * be called while requests are in flight. */
GPUFILE_API size_t gpufile_bounce_buffer_free(void);

/* ------------------------------------------------------------------ */
/* Memory-mapped handles (mmap.c)                                      */
/* ------------------------------------------------------------------ */

typedef struct gpufile_mmap gpufile_mmap_t;

/*
 * Maps [offset, offset+size) of path read-only (size 0: to the end of the
 * file), like KvikIO's MmapHandle. flags must be "r": anything else fails
 * with GPUFILE_EFLAGS naming the flag (KvikIO does not implement writable
 * maps either). A range that does not lie inside the file is -EINVAL; a
 * missing file is -ENOENT; both name the file. A URL (http://, https://,
 * s3://) is -ENOTSUP, its message naming it without credentials and query
 * (as gpufile_open's do). Pages are mapped lazily.
 * On success *out owns a handle that gpufile_mmap_close() frees.
 */
GPUFILE_API int gpufile_mmap_open(gpufile_mmap_t **out, const char *path,
                                  const char *flags, int64_t offset,
                                  size_t size);

/* Waits for every request on m, unmaps and closes it. Accepts NULL
 * (returns 0). Returns 0 or the -errno of close(2); m is freed either
 * way, and using it afterwards is undefined (the Python binding turns
 * that into an error). */
GPUFILE_API int gpufile_mmap_close(gpufile_mmap_t *m);

/* The file's current size in bytes, or -errno. */
GPUFILE_API int64_t gpufile_mmap_file_size(gpufile_mmap_t *m);

/* The mapped range given at open (size resolved). Returns 0 or -EINVAL. */
GPUFILE_API int gpufile_mmap_range(gpufile_mmap_t *m, int64_t *offset,
                                   size_t *size);

/*
 * Reads size bytes at file_offset (a file offset, not one inside the map)
 * into buf, host or device memory. The range must lie inside the mapped
 * range: otherwise -EINVAL naming both ranges (never a short read). Split
 * into tasks at multiples of task_size and run on the worker pool, and
 * counted as path GPUFILE_PATH_MMAP. Host buffers are copied from the
 * mapping; device buffers go through the pinned bounce buffers (see
 * gpufile_mmap_path_info for why). Returns size or an error; -EIO when
 * the file shrank below the mapped range, device or host, whatever the
 * size. Host copies run under gpufile's SIGBUS handler, put back before
 * each copy where the program installed its own since (Python's
 * faulthandler does), which passes every SIGBUS that is not its copy's on
 * to the program's handlers (gpufile_mmap_open(3), SIGBUS, says how and
 * the windows left); only with host_map_copy=off, where gpufile installs
 * no handler, does a host read of lost pages fault (SIGBUS), as any
 * access to the mapping would.
 */
GPUFILE_API ssize_t gpufile_mmap_pread(gpufile_mmap_t *m, void *buf,
                                       size_t size, int64_t file_offset);

/* As gpufile_mmap_pread, but returns at once with *out owning a future
 * (the gpufile_future_* functions apply). buf must stay valid and m open
 * until it has completed. Returns 0 or an error found before any I/O.
 * Where the blocking call reports a file that shrank as -EIO, the future
 * gives the shorter count instead: check it against size. */
GPUFILE_API int gpufile_mmap_pread_async(gpufile_mmap_t *m, void *buf,
                                         size_t size, int64_t file_offset,
                                         gpufile_future_t **out);

/* Writes why reads of m take the paths they take into reason (len bytes,
 * may be NULL) and returns GPUFILE_PATH_MMAP, or -EINVAL. */
GPUFILE_API int gpufile_mmap_path_info(gpufile_mmap_t *m, char *reason,
                                       size_t len);

/* ------------------------------------------------------------------ */
/* The cuFile driver (cufile_shim.c)                                   */
/* ------------------------------------------------------------------ */

/* Loads libcufile (the cufile_library setting) and opens its driver now,
 * rather than at the first device request that needs it, in the calling
 * thread's CUDA context (else device 0's primary one). Opening an open
 * driver does nothing. Returns 0, GPUFILE_ENOCUFILE (library missing or
 * unusable) or GPUFILE_ECUFILE (cuFileDriverOpen failed: the message names
 * the cuFile status). A failure is remembered, as for implicit opens. */
GPUFILE_API int gpufile_cufile_driver_open(void);

/* Closes the cuFile driver (it is also closed at exit). Refused with
 * -EBUSY, naming how many, while files or buffers are registered with
 * cuFile (close those files and deregister the buffers first); a later
 * request that needs cuFile opens it again. Returns 0 (also when it was
 * not open) or that error, or GPUFILE_ECUFILE when cuFileDriverClose
 * fails. */
GPUFILE_API int gpufile_cufile_driver_close(void);

/*
 * cuFile's driver properties, by name (as KvikIO's cufile_driver module):
 *   read-write: poll_mode (0/1), poll_thresh_size, max_direct_io_size,
 *     max_device_cache_size, max_pinned_memory_size (sizes in KiB);
 *   read-only: major_version, minor_version (nvidia-fs), is_gds_available
 *     (nvidia-fs reported a version), p2pdma (PCI P2PDMA support),
 *     allow_compat_mode, per_buffer_cache_size, max_batch_io_size,
 *     max_batch_io_timeout_msecs, status_flags (nvfs.dstatusflags),
 *     feature_flags (fflags).
 * Both open the driver first when it is not open. get reads the value
 * through cuFileDriverGetProperties. set calls cuFile's setter
 * (cuFileDriverSetPollMode, ...SetMaxDirectIOSize, ...SetMaxCacheSize,
 * ...SetMaxPinnedMemSize). Return 0, or: -ENOENT an unknown name; -EPERM
 * setting a read-only one; -EINVAL poll_mode not 0 or 1; -ENOTSUP the
 * library lacks the entry point; GPUFILE_ECUFILE cuFile refused (the
 * message names the property, the value and the cuFile status); or the
 * error of gpufile_cufile_driver_open(). */
GPUFILE_API int gpufile_cufile_driver_get(const char *name, uint64_t *value);
GPUFILE_API int gpufile_cufile_driver_set(const char *name, uint64_t value);

/* The name of driver property index (0, 1, ... until NULL) and, when
 * writable is not NULL, whether it can be set. */
GPUFILE_API const char *gpufile_cufile_driver_prop_name(int index,
                                                        int *writable);
/* safetensors checkpoints (safetensors.c)                             */
/* ------------------------------------------------------------------ */

/*
 * A safetensors file (8-byte little-endian header length, JSON header,
 * data section) with its header parsed and validated. Immutable once
 * open: accessors and loads may run from several threads at once.
 */
typedef struct gpufile_safetensors gpufile_safetensors_t;

/* One tensor, as the header describes it. Pointers stay valid until
 * gpufile_safetensors_close(). */
typedef struct gpufile_safetensors_tensor {
	const char *name;
	const char *dtype;     /* "BF16", "F8_E4M3", ... (static) */
	unsigned dtype_bits;   /* bits per element: 16; 4 for F4, 6 for F6 */
	int dtype_order;       /* rank in the format's dtype order (the
	                        * order save_file lays tensors out by) */
	int ndim;              /* 0 for a scalar */
	const uint64_t *shape; /* ndim entries */
	uint64_t begin, end;   /* byte offsets within the data section */
	uint64_t file_offset;  /* begin's offset in the file */
} gpufile_safetensors_tensor_t;

/*
 * Opens path read-only (a gpufile handle, settings as gpufile_open) and
 * parses its header. The header must be at most 100,000,000 bytes and
 * inside the file, valid UTF-8, a JSON object in strict RFC 8259 JSON as
 * the reference reads it (no byte-order mark; between tokens only space,
 * tab, LF and CR; no raw control character in a string; no leading
 * zeros), with no \u0000 in any string (names and metadata are C
 * strings); every tensor entry must have a known dtype (BOOL, U8, I8,
 * I16, U16, I32, U32, I64, U64, F16, BF16, F32, F64, C64, F8_E4M3,
 * F8_E5M2, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ, F6_E2M3, F6_E3M2, F4), a
 * shape and data_offsets [begin, end] of plain integers below 2^53 (no
 * "4.0", "4e0" or "-0"), each given once, with
 * prod(shape) * bits / 8 == end - begin (no overflow); sorted by offset
 * the tensors must cover the data section exactly (no overlap, gap or
 * trailing bytes, as the reference reader requires); no name twice;
 * __metadata__, at most once, maps strings to strings. Tensors are
 * indexed in offset order.
 * Returns 0 with *out owning the object, or: -errno from opening or
 * reading; -EBADMSG for a malformed header, the message naming the file,
 * the tensor and the field at fault; -ENOTSUP when gpufile was built
 * without cJSON.
 */
GPUFILE_API int gpufile_safetensors_open(gpufile_safetensors_t **out,
                                         const char *path);

/* Closes the file and frees st. Accepts NULL (returns 0). Returns 0 or
 * the error of gpufile_close(); st is freed either way. No load may be
 * running on st. */
GPUFILE_API int gpufile_safetensors_close(gpufile_safetensors_t *st);

/* The number of tensors, or -EINVAL for NULL. */
GPUFILE_API int gpufile_safetensors_count(const gpufile_safetensors_t *st);

/* Describes tensor index (0..count-1, in offset order) into *out.
 * Returns 0 or -EINVAL. */
GPUFILE_API int gpufile_safetensors_tensor(const gpufile_safetensors_t *st,
                                           int index,
                                           gpufile_safetensors_tensor_t *out);

/* Describes tensors first, first+1, ... into out[0..n-1], stopping at the
 * last tensor: the whole table in one call. Returns the number filled
 * (0 when first == count), or -EINVAL for NULL, a negative first or n,
 * or first > count. */
GPUFILE_API int gpufile_safetensors_tensors(const gpufile_safetensors_t *st,
                                            int first, int n,
                                            gpufile_safetensors_tensor_t *out);

/* The index of the tensor called name, or -ENOENT (message names the file
 * and the tensor). O(log count). */
GPUFILE_API int gpufile_safetensors_find(const gpufile_safetensors_t *st,
                                         const char *name);

/* 1 when the header has a __metadata__ object, even an empty one; 0 when
 * it has none or "__metadata__": null (the reference's metadata() is {}
 * and None for these); -EINVAL for NULL. */
GPUFILE_API int
gpufile_safetensors_has_metadata(const gpufile_safetensors_t *st);

/* The number of __metadata__ entries (0 when there is none), one per
 * key: a key given twice counts once, with the last value given. */
GPUFILE_API int
gpufile_safetensors_metadata_count(const gpufile_safetensors_t *st);

/* Entry index of __metadata__, in header order (of each key's first
 * appearance): *key and *value (either may be NULL) stay valid until
 * close. Returns 0 or -EINVAL. */
GPUFILE_API int gpufile_safetensors_metadata(const gpufile_safetensors_t *st,
                                             int index, const char **key,
                                             const char **value);

/* The __metadata__ value of key, or NULL when absent. */
GPUFILE_API const char *
gpufile_safetensors_metadata_get(const gpufile_safetensors_t *st,
                                 const char *key);

/* Where the data section starts in the file (8 + header length), and its
 * size in bytes. 0 for NULL. */
GPUFILE_API uint64_t
gpufile_safetensors_data_offset(const gpufile_safetensors_t *st);
GPUFILE_API uint64_t
gpufile_safetensors_data_size(const gpufile_safetensors_t *st);

/* The gpufile handle the loads read through (for gpufile_path_info).
 * Owned by st. */
GPUFILE_API gpufile_t *
gpufile_safetensors_handle(const gpufile_safetensors_t *st);

/* The dtype at rank order of the format's dtype order ("BOOL" is 0), or
 * NULL past the last; and the bits per element of dtype, or -ENOENT. */
GPUFILE_API const char *gpufile_safetensors_dtype_name(int order);
GPUFILE_API int gpufile_safetensors_dtype_bits(const char *dtype);

/*
 * Reads the whole data section into buf (host or device memory, size >=
 * gpufile_safetensors_data_size()), so that tensor i lies at buf +
 * begin(i). One request split into task_size tasks across the worker
 * pool, on the paths gpufile_pread() takes (counted in the statistics).
 * For full speed place buf at an address congruent to
 * gpufile_safetensors_data_offset() modulo 4096: then every task's
 * page-aligned file range lands page-aligned in memory, as O_DIRECT and
 * cuFile's direct path want (other addresses work, at the cost of
 * bounces). Returns the bytes read (the data size), -EINVAL when buf is
 * too small, -EIO when the file has shrunk since it was opened, or the
 * error of gpufile_pread(). Nothing writes into buf after the call has
 * returned.
 */
GPUFILE_API ssize_t gpufile_safetensors_load(const gpufile_safetensors_t *st,
                                             void *buf, size_t size);

/*
 * Reads n tensors: tensor indices[i] into dsts[i] (host or device memory
 * of end - begin bytes; may be NULL for an empty tensor). Tensors next to
 * each other both in the file and in memory are read as one request; all
 * requests run at once (asynchronously) and every one has ended when the
 * call returns. Returns the bytes read, -EINVAL for a bad index or a NULL
 * destination, or the error of the lowest-offset read that failed.
 */
GPUFILE_API ssize_t
gpufile_safetensors_load_tensors(const gpufile_safetensors_t *st, int n,
                                 const int *indices, void *const *dsts);

/* ------------------------------------------------------------------ */
/* Stream-ordered reads and writes                                    */
/* ------------------------------------------------------------------ */

/*
 * Places a read (or write) of size bytes at file_offset into (from) buf on
 * the CUDA stream stream (a CUstream or cudaStream_t; NULL is the legacy
 * default stream of the current context) and returns at once:
 *   - work queued on stream before the call has finished before gpufile
 *     touches buf (a kernel that fills buf before a write is written);
 *   - work queued on stream after the call starts only once the request
 *     has ended: it sees the file's bytes in buf, and *n_out;
 *   - *n_out (host memory owned by the caller, valid until the stream has
 *     reached that point) then holds the bytes moved, as gpufile_pread or
 *     gpufile_pwrite would have returned them, or a negative code (-errno
 *     or GPUFILE_E*) when the request failed. It is written once, with an
 *     atomic store, so peeking earlier sees the old value or the final
 *     one. The stream is released on failure too: an error never leaves
 *     it waiting. The detailed message of such a failure is not available
 *     (it happened in another thread).
 * buf may be device memory or host memory. The call itself returns 0
 * when the request is queued, or an error found before anything was queued
 * (then *n_out is untouched and the stream is unchanged): bad handle,
 * buffer, range or open mode as gpufile_pread, GPUFILE_ENOCUDA without a
 * driver, GPUFILE_ECUDA when the driver refuses the event or the wait,
 * -EINVAL when the stream is capturing a CUDA graph (a graph cannot
 * replay a host-side read), and with compat_mode=off the error cuFile
 * gives.
 *
 * How the order is kept (gpufile_stream_info() says which, and why):
 * where the file's device requests take cuFile and libcufile has
 * cuFileReadAsync/cuFileWriteAsync, cuFile queues the request on the
 * stream ("cufile"). A read into, or a write from, device (or managed)
 * memory on the posix path of up to nthreads * bounce_buffers *
 * bounce_buffer_size bytes (nthreads * 8 MiB at the defaults: 128 MiB
 * with 16 threads, 32 MiB with 4; counted from file_offset rounded down
 * to bounce_buffer_size), on a stream of the
 * buffer's context, is staged on the stream ("staged"): the stream itself
 * copies the bytes between the buffer and pinned memory of gpufile's. A
 * read's copies each wait for a flag (cuStreamWaitValue32) that gpufile's
 * threads release once they have read its part of the file; a write's
 * copies come first, and gpufile's threads write the file once they have
 * run (nothing is written when a copy failed), while the stream waits for
 * the end. The call returns at once, unless gpufile's two staging arenas
 * have no room for the request (one of more than half an arena takes
 * most of one; an arena serves one device's requests at a time): it then
 * waits until an earlier staged request has ended, so the streams of
 * earlier staged requests must not wait for anything the caller does
 * after the call. Where the driver refuses the wait for the request's
 * end, once its copies are queued, the call runs the request to its end
 * (*n_out is written when it returns), so that the work queued after
 * the call still comes after it. A staged read reads the file ahead of
 * the stream, from the call on, unless a stream-ordered write to the
 * same file (gpufile_write_async on any handle of it, on any stream) was
 * queued before the call and has not ended: the read then reads the file
 * only once the stream has reached it, and so sees the bytes of every
 * such write ordered before it (on this stream, or on one the caller
 * made the stream wait for). Changes made to the file otherwise while a
 * read is queued (gpufile_pwrite, another process, a host function on
 * the stream) may or may not be seen by a read read ahead. *n_out and
 * the bytes past the file's end are as with gpufile_pread, except that
 * where the file is cut short after the call, the destination past its
 * new end may get zeros. Larger
 * requests, and appends, of device memory run gpufile's own copies on the
 * GPU, which a held stream must not wait for (CUDA's rule for flag waits
 * and host functions): the call synchronises the stream and runs the
 * request through the pipelined bounce buffers before returning
 * ("blocking"). For host memory the stream waits (cuStreamWaitValue32)
 * for a flag that gpufile sets once the request has run ("wait-value");
 * where the driver refuses stream memory operations, a host function
 * holds the stream instead ("host-func"); a driver with neither makes
 * the call block as for device memory. A call on another thread that
 * synchronises the whole context while a request is in flight (loading
 * a module, as CuPy's or PyTorch's first use of a kernel does) no
 * longer deadlocks with it: gpufile's threads destroy no event while a
 * stream waits for them (gpufile_read_async(3) says what was tested).
 *
 * Where gpufile differs from KvikIO's FileHandle::read_async and from
 * cuFileReadAsync on purpose: size and offsets are values read at the
 * call, not pointers read when the stream reaches the request (a staged
 * read may start reading before then); there is no separate buffer
 * offset (pass buf + offset); no future object is returned (the stream
 * is the future: synchronise it, then read *n_out). The stream is not
 * registered with cuFileStreamRegister: gpufile cannot know when the
 * caller destroys it. gpufile_close() of the handle waits until the
 * stream has passed every request queued on it, whatever the mechanism,
 * so the stream must be able to get there without the caller's work
 * queued after the close.
 */
GPUFILE_API int gpufile_read_async(gpufile_t *h, void *buf, size_t size,
                                   int64_t file_offset, void *stream,
                                   ssize_t *n_out);
GPUFILE_API int gpufile_write_async(gpufile_t *h, const void *buf, size_t size,
                                    int64_t file_offset, void *stream,
                                    ssize_t *n_out);

/* How a stream-ordered read (is_write 0) or write (1) of size bytes
 * into/from buf on h would keep its order, as a sentence starting with
 * "cufile:", "staged:", "wait-value:", "host-func:" or "blocking:",
 * written into reason (len bytes, NUL-terminated; may be NULL; 1024 holds
 * any). A request of device memory too large to be staged names the limit
 * (nthreads x bounce_buffers x bounce_buffer_size, in bytes). Without a
 * usable CUDA driver the sentence starts with "none:" and says why (the
 * requests would fail with GPUFILE_ENOCUDA). Queues nothing; may load the
 * CUDA driver and, as gpufile_path_info(), cuFile. Returns 0, or the
 * error gpufile_read_async() would return for these arguments other than
 * GPUFILE_ENOCUDA. */
GPUFILE_API int gpufile_stream_info(gpufile_t *h, const void *buf, size_t size,
                                    int is_write, char *reason, size_t len);

/* ------------------------------------------------------------------ */
/* Batches of small reads                                             */
/* ------------------------------------------------------------------ */

/*
 * A batch reads many (file, buffer, size, offset) ranges at once, host or
 * device buffers, mixed files: for the many small reads that would each
 * pay a request's fixed costs through gpufile_pread. Like cuFile's batch
 * API (cuFileBatchIOSetUp / Submit / GetStatus / Destroy) and KvikIO's
 * BatchHandle, a batch is created for a capacity, submitted, then waited
 * for or polled, and gives a result per entry. Where gpufile differs:
 *   - any number of entries up to the capacity (cuFile limits a batch to
 *     its io_batchsize, 128 by default), host buffers too, and files on
 *     any path; nothing needs registering;
 *   - device entries on the POSIX path are read with io_uring (many reads
 *     in flight) into pinned memory, packed, and copied to the GPU with
 *     one copy per run of entries whose destinations follow each other,
 *     and all the runs of a round (up to 256 entries) in one
 *     cuMemcpyBatchAsync where the driver has it (CUDA 13), so 65,536
 *     4 KiB reads do not become 65,536 copies; host entries are read
 *     straight into their buffer; entries whose file the path decision
 *     gives to cuFile go through cuFile's batch API, 128 per cuFile batch
 *     (one by one where libcufile lacks it); entries over 2 MiB are read
 *     as gpufile_pread would, each on a batch worker;
 *   - reads go through the page cache (no O_DIRECT: small random reads
 *     gain nothing from it on warm data);
 *   - there is no cancel: a submitted batch runs to its end, and
 *     gpufile_batch_free waits for it;
 *   - reads only (no writes).
 * The batch owns worker threads: a submit starts one per chunk of its
 * entries (up to 512 entries and 4 MiB) that it has not yet, up to the
 * nthreads setting of its first submit (at most 64), and each is kept
 * until gpufile_batch_free, woken at every later submit; each holds two
 * 2 MiB pinned slots once it reads into device memory (counted by
 * gpufile_pinned_bytes_max). A batch is used by one thread at a time;
 * different batches are independent. In a forked child the batch starts
 * threads of its own; entries in flight at the fork end there with
 * -ECANCELED. Counted in the statistics as one request per path and
 * submit, whose tasks are the entries; a handle's file record (opened by
 * gpufile_open) says "batch" while its device path is undecided, and the
 * first device entry decides it, with its reason, as a gpufile_pread
 * would. A submit adds no file record.
 */
typedef struct gpufile_batch gpufile_batch_t;

/* One read of a batch: size bytes of file at offset into buf. */
typedef struct gpufile_batch_entry {
	gpufile_t *file; /* opened for reading */
	void *buf;       /* host or device memory, size bytes */
	size_t size;
	int64_t offset;
} gpufile_batch_entry_t;

/* The largest capacity of a batch. */
#define GPUFILE_BATCH_MAX (1u << 24)

/* Creates a batch for up to capacity (1 to GPUFILE_BATCH_MAX) entries per
 * submit. Returns 0 with *out set, or -EINVAL / -ENOMEM (then *out is
 * NULL). */
GPUFILE_API int gpufile_batch_create(gpufile_batch_t **out, unsigned capacity);

/* Submits entries[0..n) (n <= capacity; copied, the array may be reused at
 * once) and returns at once. Every entry is checked first: a NULL handle
 * or buffer, an out-of-range offset, a file not opened for reading, or
 * device memory gpufile cannot use fails the whole submit with nothing
 * started (-EINVAL, -EFAULT, -EBADF, GPUFILE_ECUDA...) and a message
 * naming the entry's index. n == 0 is an empty batch, complete at once.
 * Buffers must stay untouched until the batch is complete; a handle may
 * be closed meanwhile, from any thread: gpufile_close waits for its
 * entries in flight. -EBUSY while the previous submit of b is not
 * complete. Returns 0 or an error. */
GPUFILE_API int gpufile_batch_submit(gpufile_batch_t *b,
                                     const gpufile_batch_entry_t *entries,
                                     unsigned n);

/* The number of entries of the last submit that are done (their result
 * final, their bytes in place). It reaches n only once the batch is
 * complete: a submit or gpufile_batch_wait(b, 0) after it sees the batch
 * complete. Never blocks. -EINVAL for NULL. */
GPUFILE_API int gpufile_batch_poll(gpufile_batch_t *b);

/* Waits until every entry of the last submit is done, or at most
 * timeout_ms milliseconds (-1: no limit, 0: do not wait). Returns the
 * number of entries submitted (failed entries included: see
 * gpufile_batch_result), or -ETIMEDOUT with the message saying how many
 * are done. A batch never submitted is complete (returns 0). */
GPUFILE_API int gpufile_batch_wait(gpufile_batch_t *b, long timeout_ms);

/* Entry i's result: the bytes read (fewer than its size only where the
 * file ends), a negative error (-EIO, GPUFILE_ECUDA, ...), or
 * -EINPROGRESS while the entry is not done. -EINVAL for i out of range.
 * An entry's failure never changes another entry's bytes or result. */
GPUFILE_API ssize_t gpufile_batch_result(gpufile_batch_t *b, unsigned i);

/* Why entry i failed ("batch entry I: reading FILE at offset ...: ..."),
 * whole however long, owned by b until its next submit; where no memory
 * was left for the message, gpufile_strerror() of its result; NULL when
 * it did not fail or is not done. */
GPUFILE_API const char *gpufile_batch_errmsg(gpufile_batch_t *b, unsigned i);

/* Waits for the entries in flight, ends the batch's threads and frees its
 * pinned memory. Accepts NULL. */
GPUFILE_API void gpufile_batch_free(gpufile_batch_t *b);

#ifdef __cplusplus
}
#endif
#endif /* GPUFILE_H */
