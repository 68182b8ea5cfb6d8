/*
 * libcufile.so.0 through dlopen: the table of entry points, the driver's
 * life, buffer registrations, cuFile's own counters, and the task function
 * that moves one task through cuFileRead/cuFileWrite. The path decision is
 * not made here (decide.c makes it, gpufile_buf_register included); this
 * module only reports what cuFile can do and does what it is asked.
 *
 * Lock order: a handle's lock (struct gpufile.lock), then cufile_lock
 * (cufile_shim.c). No cuFile I/O runs under either.
 */
#ifndef GPUFILE_CUFILE_SHIM_H
#define GPUFILE_CUFILE_SHIM_H

#include "platform/cufile_abi.h"
#include "core/core.h"

#include <errno.h>

/* Optional entry points, as bits of gpufile__cufile.optional. */
enum {
	GPUFILE__CUFILE_HAS_PROPS = 1 << 0,   /* cuFileDriverGetProperties */
	GPUFILE__CUFILE_HAS_VERSION = 1 << 1, /* cuFileGetVersion */
	GPUFILE__CUFILE_HAS_STATS = 1
	                            << 2, /* cuFileSetStatsLevel, GetStatsL3 */
	GPUFILE__CUFILE_HAS_STREAM = 1 << 3,   /* cuFileReadAsync, WriteAsync */
	GPUFILE__CUFILE_HAS_BATCH = 1 << 4,    /* cuFileBatchIOSetUp, ... */
	GPUFILE__CUFILE_HAS_CLOSE_V2 = 1 << 5, /* cuFileDriverClose_v2 */
};

/* Every cuFile call gpufile makes. Optional ones are NULL when absent. */
struct gpufile__cufile {
	cuFileDriverOpen_fn cuFileDriverOpen;
	cuFileDriverClose_fn cuFileDriverClose; /* _v2 when present */
	cuFileHandleRegister_fn cuFileHandleRegister;
	cuFileHandleDeregister_fn cuFileHandleDeregister;
	cuFileRead_fn cuFileRead;
	cuFileWrite_fn cuFileWrite;
	cuFileBufRegister_fn cuFileBufRegister;
	cuFileBufDeregister_fn cuFileBufDeregister;
	cuFileDriverGetProperties_fn cuFileDriverGetProperties;
	cuFileGetVersion_fn cuFileGetVersion;
	cuFileSetStatsLevel_fn cuFileSetStatsLevel;
	cuFileGetStatsL3_fn cuFileGetStatsL3;
	unsigned optional; /* GPUFILE__CUFILE_HAS_* */
	/* GPUFILE__CUFILE_HAS_STREAM (stream.c); NULL when absent. */
	cuFileReadAsync_fn cuFileReadAsync;
	cuFileWriteAsync_fn cuFileWriteAsync;
	/* The batch API, all five or none (GPUFILE__CUFILE_HAS_BATCH). */
	cuFileBatchIOSetUp_fn cuFileBatchIOSetUp;
	cuFileBatchIOSubmit_fn cuFileBatchIOSubmit;
	cuFileBatchIOGetStatus_fn cuFileBatchIOGetStatus;
	cuFileBatchIOCancel_fn cuFileBatchIOCancel;
	cuFileBatchIODestroy_fn cuFileBatchIODestroy;
};

/* The name of a cuFile status ("CU_FILE_HANDLE_NOT_REGISTERED"), or
 * "CU_FILE_UNKNOWN_STATUS". */
const char *gpufile__cufile_status_name(int status);

/* A negative return n of cuFileRead or cuFileWrite as a negative code:
 * -1 means the error is in errno (saved_errno, read right after the
 * call; -EIO where it is 0), any other value is -errno or -status as
 * returned. */
static inline ssize_t gpufile__cufile_io_error(ssize_t n, int saved_errno)
{
	if (n != -1)
		return n;
	return saved_errno ? -saved_errno : -EIO;
}

/*
 * Makes sure libcufile is loaded (path: the cufile_library setting) and its
 * driver is open, opening it once per process with ctx current in the
 * calling thread (the caller's own current context is restored). Sets
 * stats level from the cufile_stats setting. Returns the table, or NULL
 * with *err set (GPUFILE_ENOCUFILE: library missing or lacking a symbol;
 * GPUFILE_ECUFILE: cuFileDriverOpen failed, *status its cuFile status),
 * and the thread's message naming the cause. A failure is remembered:
 * later calls fail the same way without trying again.
 */
const struct gpufile__cufile *gpufile__cufile_open(void *ctx, int *err,
                                                   int *status);

/*
 * Loads libcufile (the cufile_library setting) without opening its driver
 * and without reading the other settings, so that a caller can tell a
 * missing library from a bad setting. Returns 0, or GPUFILE_ENOCUFILE (or
 * GPUFILE_ECONFIG for a bad cufile_library) with the thread's message;
 * remembered like gpufile__cufile_open's failures.
 */
int gpufile__cufile_load(void);

/* Whether cuFile's driver properties report PCI P2PDMA support (0 until
 * the driver is open). The path decision itself is decide.c's. */
int gpufile__cufile_p2pdma(void);

/* Registers fd (opened with O_DIRECT) with cuFile, with ctx current for
 * the call. Returns 0 with *fh set,
 * or GPUFILE_ECUFILE with *status the cuFile status. */
int gpufile__cufile_handle_register(void *ctx, int fd, CUfileHandle_t *fh,
                                    int *status);
void gpufile__cufile_handle_deregister(CUfileHandle_t fh);

/* The registered buffer containing [buf, buf+size), or NULL. */
char *gpufile__cufile_buf_base(const void *buf, size_t size);

/* The task function of the cufile path: cuFileRead/cuFileWrite of one
 * task, with r->cufile_base as buf_base (a registered buffer, or the
 * request's buffer) and the task's offset inside it as buf_offset. */
ssize_t gpufile__cufile_task(struct gpufile__request *r, char *buf, size_t len,
                             int64_t off, char *msg, size_t msg_len);

/* The loaded table (NULL before gpufile__cufile_open succeeded). */
const struct gpufile__cufile *gpufile__cufile_loaded(void);

/* Reads cuFile's per-GPU counters (when the stats level is 3) and hands
 * them to stats.c. Called after requests that used cuFile. */
void gpufile__cufile_publish_stats(void);

/* For tests: closes the driver, forgets every remembered failure and
 * registration, so that the next use loads the library again. */
void gpufile__cufile_reset(void);

#endif
