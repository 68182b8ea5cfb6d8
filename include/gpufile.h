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

#define GPUFILE_VERSION_MAJOR 0
#define GPUFILE_VERSION_MINOR 1
#define GPUFILE_VERSION_PATCH 0

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
 * file, offset, setting or value at fault), or "" when none failed. The
 * string stays valid until the next gpufile call in this thread. */
GPUFILE_API const char *gpufile_errmsg(void);

/* The library version as "MAJOR.MINOR.PATCH". */
GPUFILE_API const char *gpufile_version(void);

/* What was compiled in and found at run time, as a space-separated list
 * of words such as "liburing cuda-dlopen cufile-dlopen". Never NULL. */
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

/* Parses text as a size the way settings are parsed: plain bytes or a
 * number with k/m/g/t, KiB/MiB/GiB/TiB or KB/MB/GB/TB (all binary), spaces
 * allowed around the number and the unit. Returns 0 with *out set, -EINVAL
 * for anything else, -ERANGE when it does not fit 64 bits. */
GPUFILE_API int gpufile_parse_size(const char *text, uint64_t *out);

/* Parses text as a whole number (digits, spaces around). Returns 0,
 * -EINVAL or -ERANGE as gpufile_parse_size(). */
GPUFILE_API int gpufile_parse_count(const char *text, uint64_t *out);

/* Forgets every setter and rereads the environment. For tests and tools. */
GPUFILE_API void gpufile_config_reset(void);

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
 *   "a"   write only; created if missing, never truncated; every write
 *         request is placed at the end of the file as this handle knows it
 *         (file_offset is ignored), requests in the order they were
 *         submitted. Appends from other handles or processes are not
 *         coordinated.
 * Anything else fails with GPUFILE_EFLAGS. On success *out owns a handle
 * that gpufile_close() frees. Whether O_DIRECT is used follows the
 * direct_io setting; a file system that refuses O_DIRECT (tmpfs) is read
 * through the page cache and the reason is recorded (gpufile_path_info).
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
 * into tasks at multiples of task_size in the file, run in parallel.
 * Returns the number of bytes read: size, or fewer when the file ends
 * first, in which case exactly the bytes up to end-of-file are read and the
 * rest of buf is left as it was. On failure returns the error of the
 * lowest-offset task that failed; then the contents of buf are unspecified,
 * but no task touches buf after the call has returned.
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

/* Waits at most timeout_ms milliseconds. Returns as gpufile_future_wait,
 * or -ETIMEDOUT when f has not completed yet. */
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
	GPUFILE_PATH_REMOTE = 4, /* a remote object (HTTP, S3) over libcurl */
	GPUFILE_PATH_COUNT = 5,
} gpufile_path_t;

/* "host", "posix", "cufile", "small" or "remote"; "?" when out of
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

typedef struct gpufile_counter {
	uint64_t ops;    /* requests (blocking or async) */
	uint64_t tasks;  /* tasks those requests were split into */
	uint64_t bytes;  /* bytes moved */
	uint64_t errors; /* requests that failed */
} gpufile_counter_t;

#define GPUFILE_HIST_BUCKETS   48
#define GPUFILE_MAX_GPUS       16
#define GPUFILE_MAX_SETTINGS   24
#define GPUFILE_MAX_FILE_STATS 64

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
} gpufile_stats_t;

/* A snapshot of this process's counters since it started. Returns 0.
 * Before the first I/O every counter is 0. */
GPUFILE_API int gpufile_stats_self(gpufile_stats_t *out);

/* ---- live statistics of other processes (stats.c) ----
 *
 * From its first I/O a process keeps its counters in a shared-memory
 * segment, /dev/shm/gpufile-UID-PID, mode 0600, removed at normal exit.
 * Readers check its magic number, layout version, size and owner, and
 * that the process that wrote it is still alive (the same process, not a
 * reused PID). A build with -DGPUFILE_NO_STATS keeps no counters; then the
 * readers return -ENOTSUP. */

/* Reads the counters of process pid (0 or getpid(): this process).
 * Returns 0, or: -ESRCH no such process; -EACCES the process belongs to
 * another user; -ENOENT the process does not use gpufile (no segment);
 * -ESTALE the segment was left by a dead process; -EPROTO the segment is
 * not one this version can read (magic, version, size or mode). The
 * thread's gpufile_errmsg() says which, naming the PID and the file. */
GPUFILE_API int gpufile_stats_read(int pid, gpufile_stats_t *out);

/* One file handle a process opened: the path its device requests take,
 * and why (e.g. why cuFile was not used). */
typedef struct gpufile_file_stat {
	char path[256];
	gpufile_path_t chosen;
	char reason[256];
} gpufile_file_stat_t;

/* Copies up to max of process pid's most recently opened handles (oldest
 * first) into out. Returns how many were copied, or an error as
 * gpufile_stats_read. Only the last GPUFILE_MAX_FILE_STATS are kept. */
GPUFILE_API int gpufile_stats_files(int pid, gpufile_file_stat_t *out, int max);

/* A process with a gpufile segment. */
typedef struct gpufile_process {
	int32_t pid;
	char command[64];
	uint64_t bytes; /* bytes moved on every path, both directions */
	int stale;      /* 1: the process is gone; the segment can be cleaned */
} gpufile_process_t;

/* Lists the segments of this user's processes, up to max of them into out
 * (out may be NULL when max is 0). Returns the number found (which may
 * exceed max) or -errno. */
GPUFILE_API int gpufile_stats_list(gpufile_process_t *out, int max);

/* Removes this user's stale segments. Returns how many were removed. */
GPUFILE_API int gpufile_stats_clean(void);

/* The segment path used for pid (0: this process), written into buf (len
 * bytes). Returns 0 or -ENAMETOOLONG. For tests and tools. */
GPUFILE_API int gpufile_stats_segment_path(int pid, char *buf, size_t len);

/* ---- remote sources (remote.c) ----
 *
 * gpufile_open() also takes http://, https:// and s3://BUCKET/KEY URLs
 * (and presigned S3 URLs), read-only ("r"): see docs/man/man3 and the
 * README's "Remote objects". Their requests count under
 * GPUFILE_PATH_REMOTE; these counters add what HTTP did. */

#define GPUFILE_REMOTE_STATUS_CLASSES 6
typedef struct gpufile_remote_stats {
	uint64_t requests; /* HTTP requests sent, retries included */
	uint64_t ranges;   /* ranges that arrived whole */
	uint64_t bytes;    /* bytes of those ranges */
	uint64_t retries;  /* attempts repeated after a retryable failure */
	uint64_t failures; /* ranges that failed after every attempt */
	uint64_t connects; /* connections opened (the rest were reused) */
	/* responses by class: [0] none (a curl error), [1..5] 1xx..5xx */
	uint64_t status[GPUFILE_REMOTE_STATUS_CLASSES];
} gpufile_remote_stats_t;

/* Reads process pid's remote counters (0: this process) into *out.
 * Returns 0 or an error as gpufile_stats_read(). */
GPUFILE_API int gpufile_stats_remote(int pid, gpufile_remote_stats_t *out);

/* Checks url the way gpufile_open() would and writes a report into out
 * (len bytes, lines "key: value"): the endpoint (redacted: no user
 * information, no query), the kind (http, s3, presigned URL), whether
 * credentials are present (never their values), the region (S3), the
 * HEAD (or GET bytes 0-0) result and the size. Returns 0, or the error
 * gpufile_open() would return (the report then says what failed);
 * -ENOTSUP when built without libcurl. */
GPUFILE_API int gpufile_remote_info(const char *url, char *out, size_t len);

/* ------------------------------------------------------------------ */
/* cuFile, the second layer (cufile_shim.c)                            */
/* ------------------------------------------------------------------ */

/* cuFile's state in this process, and its per-GPU counters. */
typedef struct gpufile_cufile_info {
	int loaded;        /* libcufile loaded with every required symbol */
	int driver_open;   /* cuFileDriverOpen succeeded (closed at exit) */
	int status;        /* cuFile status of the failure (5001...), or 0 */
	int version;       /* cuFileGetVersion: 1150 is 1.15.0; 0 unknown */
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
 * has not needed it reports loaded = 0. Returns 0. */
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
 * file is not an error (every value is then the default). Returns 0;
 * -errno when the file cannot be read; GPUFILE_ECONFIG when it is not
 * valid JSON or a value has the wrong type or range (the message names the
 * file and line, or the key); -ENOTSUP when a file exists but this build
 * has no JSON parser ("cufile.json parsing not compiled in"). *out holds
 * the defaults after any failure. */
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
	uint64_t part_size;    /* bytes per part (the last may be shorter) */
	uint64_t max_transfer; /* largest single nvidia-fs transfer */
	uint64_t transfers_per_part;
	char why[256]; /* which rule decided parts */
} gpufile_plan_entry_t;

typedef struct gpufile_plan {
	uint64_t size, offset, task_size, gds_threshold;
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
 * Returns 0, GPUFILE_ECONFIG for a bad setting or cufile.json, or -EINVAL. */
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
 * GPUFILE_MEM_HOST. Returns 0 or an error. */
GPUFILE_API int gpufile_mem_kind(const void *ptr, gpufile_mem_t *kind,
                                 int *device);

/* Allocates size bytes of device memory on GPU device in its primary
 * context, for tools and tests that do not link CUDA themselves. Returns 0
 * or an error; free with gpufile_device_free(). */
GPUFILE_API int gpufile_device_alloc(int device, size_t size, void **out);
GPUFILE_API int gpufile_device_free(void *ptr);

/* Copies between host and device memory (direction from the pointers),
 * and returns once the destination holds the bytes (also for device
 * destinations copied from pageable memory). For tools and tests.
 * Returns 0 or an error. */
GPUFILE_API int gpufile_memcpy(void *dst, const void *src, size_t size);

/* Starts the worker pool and, when a GPU is usable, allocates the pinned
 * bounce buffers, so that the first request does not pay for them.
 * Returns 0 or an error. */
GPUFILE_API int gpufile_warmup(void);

/* Upper bound, in bytes, of the pinned host memory gpufile holds with the
 * current settings: nthreads * buffers_per_worker * bounce_buffer_size. */
GPUFILE_API size_t gpufile_pinned_bytes_max(void);

/* Stops the worker pool and frees every bounce buffer. Requests must not
 * be in flight. Later requests start them again. At process exit nothing
 * is freed explicitly: the CUDA contexts may already be gone, and the
 * operating system reclaims the pinned memory. */
GPUFILE_API void gpufile_release(void);

#ifdef __cplusplus
}
#endif
#endif /* GPUFILE_H */
