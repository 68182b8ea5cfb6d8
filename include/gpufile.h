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
#define GPUFILE_ERRORS(X)                                                   \
	X(GPUFILE_ECONFIG, -5001, "invalid setting")                        \
	X(GPUFILE_ENOCUDA, -5002, "CUDA driver not available")              \
	X(GPUFILE_ECUDA, -5003, "CUDA driver call failed")                  \
	X(GPUFILE_ENOCUFILE, -5004, "cuFile library not available")         \
	X(GPUFILE_ECUFILE, -5005, "cuFile call failed")                     \
	X(GPUFILE_EBADPTR, -5006, "buffer is not memory gpufile can use")   \
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
	GPUFILE_SOURCE_SETTER = 3,     /* gpufile_config_set() or a typed setter */
} gpufile_source_t;

/* "default", "GPUFILE_*", "KVIKIO_*" or "setter"... with the variable name
 * filled in by gpufile_config_get(); this returns the generic word. */
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
 */
GPUFILE_API int gpufile_open(gpufile_t **out, const char *path,
                             const char *flags);

/* Closes h after every request on it has ended. Accepts NULL (returns 0).
 * Returns 0 or the -errno of close(2); the handle is freed either way. */
GPUFILE_API int gpufile_close(gpufile_t *h);

/* The file's current size in bytes, or -errno. */
GPUFILE_API int64_t gpufile_size(gpufile_t *h);

/* The path h was opened with. Valid until gpufile_close(h). */
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
 * bytes, and never reports more than reached the file. */
GPUFILE_API ssize_t gpufile_pwrite(gpufile_t *h, const void *buf, size_t size,
                                   int64_t file_offset);

/* Flushes the file's data to storage (fdatasync). Returns 0 or -errno. */
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
GPUFILE_API int gpufile_pwrite_async(gpufile_t *h, const void *buf,
                                     size_t size, int64_t file_offset,
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
	GPUFILE_PATH_HOST = 0,   /* host buffer, read/written directly */
	GPUFILE_PATH_POSIX = 1,  /* device buffer through pinned bounce buffers */
	GPUFILE_PATH_CUFILE = 2, /* device buffer handed to cuFile */
	GPUFILE_PATH_SMALL = 3,  /* device request below gds_threshold */
	GPUFILE_PATH_COUNT = 4,
} gpufile_path_t;

/* "host", "posix", "cufile" or "small"; "?" when out of range. */
GPUFILE_API const char *gpufile_path_name(gpufile_path_t path);

/* Which path a device-memory request of at least gds_threshold bytes on h
 * takes, and why, as a sentence written into reason (len bytes,
 * NUL-terminated; may be NULL). Also reports whether O_DIRECT is in use
 * and, if it was refused, why. Returns 0 or an error. */
GPUFILE_API int gpufile_path_info(gpufile_t *h, gpufile_path_t *device_path,
                                  char *reason, size_t len);

typedef struct gpufile_counter {
	uint64_t ops;    /* requests (blocking or async) */
	uint64_t tasks;  /* tasks those requests were split into */
	uint64_t bytes;  /* bytes moved */
	uint64_t errors; /* requests that failed */
} gpufile_counter_t;

typedef struct gpufile_stats {
	/* [path][0 = read, 1 = write] */
	gpufile_counter_t path[GPUFILE_PATH_COUNT][2];
	uint64_t direct_io_fallbacks; /* files where O_DIRECT was refused */
} gpufile_stats_t;

/* A snapshot of this process's counters since it started. Returns 0. */
GPUFILE_API int gpufile_stats_self(gpufile_stats_t *out);

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

/* Copies between host and device memory (direction from the pointers).
 * For tools and tests. Returns 0 or an error. */
GPUFILE_API int gpufile_memcpy(void *dst, const void *src, size_t size);

/* Starts the worker pool and, when a GPU is usable, allocates the pinned
 * bounce buffers, so that the first request does not pay for them.
 * Returns 0 or an error. */
GPUFILE_API int gpufile_warmup(void);

/* Upper bound, in bytes, of the pinned host memory gpufile holds with the
 * current settings: nthreads * buffers_per_worker * bounce_buffer_size. */
GPUFILE_API size_t gpufile_pinned_bytes_max(void);

/* Stops the worker pool and frees every bounce buffer. Requests must not
 * be in flight. Later requests start them again. Also runs at exit. */
GPUFILE_API void gpufile_release(void);

#ifdef __cplusplus
}
#endif
#endif /* GPUFILE_H */
