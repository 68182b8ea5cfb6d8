/*
 * The part of NVIDIA's cuFile ABI (libcufile.so.0, cufile.h) that gpufile
 * uses, declared here so that the project builds without cufile.h and
 * never links libcufile. Names follow cufile.h so the code reads like the
 * documentation; values and layouts are those of cuFile 1.15 (CUDA 13.0).
 *
 * Where the layouts were checked: cufile.h as published with cuFile
 * 1.14/1.15, and NVIDIA's cuda-python bindings generated from those headers
 * (cuda.bindings.cufile, "generated across versions from 12.9.1 to 13.0.2"),
 * which assert at import that each NumPy layout has the C struct's size.
 * The _Static_asserts below pin the sizes and offsets derived from them.
 */
#ifndef GPUFILE_CUFILE_ABI_H
#define GPUFILE_CUFILE_ABI_H

#include "platform/cuda_shim.h" /* CUresult */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* CUfileOpError: 0 on success, else CUFILEOP_BASE_ERR + n. The numbering
 * has gaps (5021 and 5032 are unused). X(name, value). */
#define CUFILEOP_BASE_ERR 5000
#define GPUFILE__CUFILE_STATUS(X)                                              \
	X(CU_FILE_SUCCESS, 0)                                                  \
	X(CU_FILE_DRIVER_NOT_INITIALIZED, 5001)                                \
	X(CU_FILE_DRIVER_INVALID_PROPS, 5002)                                  \
	X(CU_FILE_DRIVER_UNSUPPORTED_LIMIT, 5003)                              \
	X(CU_FILE_DRIVER_VERSION_MISMATCH, 5004)                               \
	X(CU_FILE_DRIVER_VERSION_READ_ERROR, 5005)                             \
	X(CU_FILE_DRIVER_CLOSING, 5006)                                        \
	X(CU_FILE_PLATFORM_NOT_SUPPORTED, 5007)                                \
	X(CU_FILE_IO_NOT_SUPPORTED, 5008)                                      \
	X(CU_FILE_DEVICE_NOT_SUPPORTED, 5009)                                  \
	X(CU_FILE_NVFS_DRIVER_ERROR, 5010)                                     \
	X(CU_FILE_CUDA_DRIVER_ERROR, 5011)                                     \
	X(CU_FILE_CUDA_POINTER_INVALID, 5012)                                  \
	X(CU_FILE_CUDA_MEMORY_TYPE_INVALID, 5013)                              \
	X(CU_FILE_CUDA_POINTER_RANGE_ERROR, 5014)                              \
	X(CU_FILE_CUDA_CONTEXT_MISMATCH, 5015)                                 \
	X(CU_FILE_INVALID_MAPPING_SIZE, 5016)                                  \
	X(CU_FILE_INVALID_MAPPING_RANGE, 5017)                                 \
	X(CU_FILE_INVALID_FILE_TYPE, 5018)                                     \
	X(CU_FILE_INVALID_FILE_OPEN_FLAG, 5019)                                \
	X(CU_FILE_DIO_NOT_SET, 5020)                                           \
	X(CU_FILE_INVALID_VALUE, 5022)                                         \
	X(CU_FILE_MEMORY_ALREADY_REGISTERED, 5023)                             \
	X(CU_FILE_MEMORY_NOT_REGISTERED, 5024)                                 \
	X(CU_FILE_PERMISSION_DENIED, 5025)                                     \
	X(CU_FILE_DRIVER_ALREADY_OPEN, 5026)                                   \
	X(CU_FILE_HANDLE_NOT_REGISTERED, 5027)                                 \
	X(CU_FILE_HANDLE_ALREADY_REGISTERED, 5028)                             \
	X(CU_FILE_DEVICE_NOT_FOUND, 5029)                                      \
	X(CU_FILE_INTERNAL_ERROR, 5030)                                        \
	X(CU_FILE_GETNEWFD_FAILED, 5031)                                       \
	X(CU_FILE_NVFS_SETUP_ERROR, 5033)                                      \
	X(CU_FILE_IO_DISABLED, 5034)                                           \
	X(CU_FILE_BATCH_SUBMIT_FAILED, 5035)                                   \
	X(CU_FILE_GPU_MEMORY_PINNING_FAILED, 5036)                             \
	X(CU_FILE_BATCH_FULL, 5037)                                            \
	X(CU_FILE_ASYNC_NOT_SUPPORTED, 5038)                                   \
	X(CU_FILE_INTERNAL_BATCH_SETUP_ERROR, 5039)                            \
	X(CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR, 5040)                           \
	X(CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR, 5041)                        \
	X(CU_FILE_INTERNAL_BATCH_CANCEL_ERROR, 5042)                           \
	X(CU_FILE_NOMEM_ERROR, 5043)                                           \
	X(CU_FILE_IO_ERROR, 5044)                                              \
	X(CU_FILE_INTERNAL_BUF_REGISTER_ERROR, 5045)                           \
	X(CU_FILE_HASH_OPR_ERROR, 5046)                                        \
	X(CU_FILE_INVALID_CONTEXT_ERROR, 5047)                                 \
	X(CU_FILE_NVFS_INTERNAL_DRIVER_ERROR, 5048)                            \
	X(CU_FILE_BATCH_NOCOMPAT_ERROR, 5049)                                  \
	X(CU_FILE_IO_MAX_ERROR, 5050)

typedef enum CUfileOpError {
#define GPUFILE__CUFILE_ENUM(name, value) name = value,
	GPUFILE__CUFILE_STATUS(GPUFILE__CUFILE_ENUM)
#undef GPUFILE__CUFILE_ENUM
} CUfileOpError;

/* Returned by value from most entry points (8 bytes, in registers). cu_err
 * holds the CUDA error when err is CU_FILE_CUDA_DRIVER_ERROR. */
typedef struct CUfileError {
	CUfileOpError err;
	CUresult cu_err;
} CUfileError_t;

enum CUfileFileHandleType {
	CU_FILE_HANDLE_TYPE_OPAQUE_FD = 1,
	CU_FILE_HANDLE_TYPE_OPAQUE_WIN32 = 2,
	CU_FILE_HANDLE_TYPE_USERSPACE_FS = 3,
};

typedef void *CUfileHandle_t;

/* fs_ops is NULL for an OPAQUE_FD handle; its type is not needed. */
typedef struct CUfileDescr {
	enum CUfileFileHandleType type;
	union {
		int fd;
		void *handle;
	} handle;
	const void *fs_ops;
} CUfileDescr_t;
_Static_assert(sizeof(CUfileDescr_t) == 24, "CUfileDescr_t is 24 bytes");
_Static_assert(offsetof(CUfileDescr_t, handle) == 8, "handle at 8");
_Static_assert(offsetof(CUfileDescr_t, fs_ops) == 16, "fs_ops at 16");

/* CUfileFeatureFlags_t: bit numbers in CUfileDrvProps_t.fflags. */
#define CU_FILE_P2P_SUPPORTED 4 /* PCI P2PDMA */
/* CUfileDriverControlFlags_t: bit numbers in nvfs.dcontrolflags. */
#define CU_FILE_ALLOW_COMPAT_MODE 1

typedef struct CUfileDrvProps {
	struct {
		unsigned int major_version; /* nvidia-fs version */
		unsigned int minor_version;
		size_t poll_thresh_size;
		size_t max_direct_io_size;
		unsigned int dstatusflags;
		unsigned int dcontrolflags;
	} nvfs;
	unsigned int fflags;
	unsigned int max_device_cache_size;
	unsigned int per_buffer_cache_size;
	unsigned int max_device_pinned_mem_size;
	unsigned int max_batch_io_size;
	unsigned int max_batch_io_timeout_msecs;
} CUfileDrvProps_t;
_Static_assert(offsetof(CUfileDrvProps_t, fflags) == 32, "fflags at 32");
_Static_assert(sizeof(CUfileDrvProps_t) == 56, "CUfileDrvProps_t is 56 bytes");

/* One GPU's entry in CUfileStatsLevel3_t.per_gpu_stats (cuFile 1.14 and
 * 1.15; unchanged in the later headers seen). */
typedef struct CUfilePerGpuStats {
	char uuid[16];
	uint64_t read_bytes;
	uint64_t read_bw_bytes_per_sec;
	uint64_t read_utilization;
	uint64_t read_duration_us;
	uint64_t n_total_reads;
	uint64_t n_p2p_reads;
	uint64_t n_nvfs_reads;
	uint64_t n_posix_reads;
	uint64_t n_unaligned_reads;
	uint64_t n_dr_reads;
	uint64_t n_sparse_regions;
	uint64_t n_inline_regions;
	uint64_t n_reads_err;
	uint64_t writes_bytes;
	uint64_t write_bw_bytes_per_sec;
	uint64_t write_utilization;
	uint64_t write_duration_us;
	uint64_t n_total_writes;
	uint64_t n_p2p_writes;
	uint64_t n_nvfs_writes;
	uint64_t n_posix_writes;
	uint64_t n_unaligned_writes;
	uint64_t n_dr_writes;
	uint64_t n_writes_err;
	uint64_t n_mmap;
	uint64_t n_mmap_ok;
	uint64_t n_mmap_err;
	uint64_t n_mmap_free;
	uint64_t reg_bytes;
} CUfilePerGpuStats_t;
_Static_assert(sizeof(CUfilePerGpuStats_t) == 248, "per-GPU stats: 248 bytes");
_Static_assert(offsetof(CUfilePerGpuStats_t, n_nvfs_reads) == 64, "nvfs at 64");
_Static_assert(offsetof(CUfilePerGpuStats_t, n_posix_writes) == 176,
               "posix writes at 176");

/*
 * CUfileStatsLevel3_t = { CUfileStatsLevel2_t detailed; uint32_t num_gpus;
 * CUfilePerGpuStats_t per_gpu_stats[16]; }, with Level2 = { Level1 basic;
 * uint64_t read_size_kb_hist[32], write_size_kb_hist[32]; }.
 *
 * Level1's size is what changes between releases: in 1.14/1.15 it is 6
 * op counters (16 bytes each), 10 uint64, 15 batch op counters and 12
 * uint64 = 512 bytes, so num_gpus sits at 1024 and per_gpu_stats at 1032
 * (the whole struct is 5000 bytes). Later headers append readv/writev
 * counters to Level1 (2 op counters + 8 uint64 = +96 bytes): num_gpus at
 * 1120, per_gpu_stats at 1128. gpufile never declares the struct: it
 * passes cuFileGetStatsL3 a zeroed buffer of GPUFILE__CUFILE_L3_BUFFER
 * bytes (more than any known layout) and reads at these offsets only.
 */
#define GPUFILE__CUFILE_MAX_GPUS        16
#define GPUFILE__CUFILE_L1_SIZE_1_15    512
#define GPUFILE__CUFILE_L1_SIZE_READV   608
#define GPUFILE__CUFILE_L3_NUM_GPUS(l1) ((l1) + 512)
#define GPUFILE__CUFILE_L3_PER_GPU(l1)  ((l1) + 512 + 8)
#define GPUFILE__CUFILE_L3_BUFFER       (64u << 10)

/* Signatures of the entry points gpufile resolves. */
typedef CUfileError_t (*cuFileDriverOpen_fn)(void);
typedef CUfileError_t (*cuFileDriverClose_fn)(void);
typedef CUfileError_t (*cuFileHandleRegister_fn)(CUfileHandle_t *fh,
                                                 CUfileDescr_t *descr);
typedef void (*cuFileHandleDeregister_fn)(CUfileHandle_t fh);
typedef ssize_t (*cuFileRead_fn)(CUfileHandle_t fh, void *buf_base, size_t size,
                                 off_t file_offset, off_t buf_offset);
typedef ssize_t (*cuFileWrite_fn)(CUfileHandle_t fh, const void *buf_base,
                                  size_t size, off_t file_offset,
                                  off_t buf_offset);
typedef CUfileError_t (*cuFileBufRegister_fn)(const void *buf_base,
                                              size_t length, int flags);
typedef CUfileError_t (*cuFileBufDeregister_fn)(const void *buf_base);
typedef CUfileError_t (*cuFileDriverGetProperties_fn)(CUfileDrvProps_t *p);
typedef CUfileError_t (*cuFileGetVersion_fn)(int *version);
typedef CUfileError_t (*cuFileSetStatsLevel_fn)(int level);
typedef CUfileError_t (*cuFileGetStatsL3_fn)(void *stats);
/* Stream-ordered I/O (cuFile 1.7 on): every argument after buf_base is
 * read, and *bytes_done written, when the stream reaches the call. */
typedef CUfileError_t (*cuFileReadAsync_fn)(
    CUfileHandle_t fh, void *buf_base, size_t *size_p, off_t *file_offset_p,
    off_t *buf_offset_p, ssize_t *bytes_read_p, void *stream);
typedef CUfileError_t (*cuFileWriteAsync_fn)(
    CUfileHandle_t fh, void *buf_base, size_t *size_p, off_t *file_offset_p,
    off_t *buf_offset_p, ssize_t *bytes_written_p, void *stream);

/* The driver's tunables (cufile.h, cuFile 1.0 on; sizes in KiB), found
 * with dlsym when gpufile_cufile_driver_set() needs one. cuFile declares
 * the poll flag as C++/C99 bool. */
typedef CUfileError_t (*cuFileDriverSetPollMode_fn)(_Bool poll,
                                                    size_t poll_threshold_size);
typedef CUfileError_t (*cuFileDriverSetMaxDirectIOSize_fn)(size_t kb);
typedef CUfileError_t (*cuFileDriverSetMaxCacheSize_fn)(size_t kb);
typedef CUfileError_t (*cuFileDriverSetMaxPinnedMemSize_fn)(size_t kb);
/* CUfileDriverControlFlags_t: bit numbers in nvfs.dcontrolflags (with
 * CU_FILE_ALLOW_COMPAT_MODE above). */
#define CU_FILE_USE_POLL_MODE 0
_Static_assert(offsetof(CUfileDrvProps_t, nvfs.poll_thresh_size) == 8,
               "poll_thresh_size at 8");
_Static_assert(offsetof(CUfileDrvProps_t, nvfs.max_direct_io_size) == 16,
               "max_direct_io_size at 16");
_Static_assert(offsetof(CUfileDrvProps_t, nvfs.dstatusflags) == 24,
               "dstatusflags at 24");
_Static_assert(offsetof(CUfileDrvProps_t, max_device_cache_size) == 36,
               "max_device_cache_size at 36");
_Static_assert(offsetof(CUfileDrvProps_t, max_device_pinned_mem_size) == 44,
               "max_device_pinned_mem_size at 44");
_Static_assert(sizeof(_Bool) == 1, "cuFile's bool is one byte");

/* The batch API (cufile.h, cuFile 1.4 on): gpufile_batch_* hands the
 * entries whose file is on the cuFile path to it (batch.c). */
typedef enum CUfileOpcode { CUFILE_READ = 0, CUFILE_WRITE = 1 } CUfileOpcode_t;
typedef enum CUFILEStatus_enum {
	CUFILE_WAITING = 0x01,
	CUFILE_PENDING = 0x02,
	CUFILE_INVALID = 0x04,
	CUFILE_CANCELED = 0x08,
	CUFILE_COMPLETE = 0x10,
	CUFILE_TIMEOUT = 0x20,
	CUFILE_FAILED = 0x40,
} CUfileStatus_t;
typedef enum cufileBatchMode { CUFILE_BATCH = 1 } CUfileBatchMode_t;
typedef struct CUfileIOParams {
	CUfileBatchMode_t mode; /* first, always */
	union {
		struct {
			void *devPtr_base;
			off_t file_offset;
			off_t devPtr_offset;
			size_t size;
		} batch;
	} u;
	CUfileHandle_t fh;
	CUfileOpcode_t opcode;
	void *cookie;
} CUfileIOParams_t;
typedef struct CUfileIOEvents {
	void *cookie;
	CUfileStatus_t status;
	size_t ret; /* bytes moved, or a negative error as size_t */
} CUfileIOEvents_t;
typedef void *CUfileBatchHandle_t;
_Static_assert(sizeof(CUfileIOParams_t) == 64, "CUfileIOParams_t is 64 bytes");
_Static_assert(offsetof(CUfileIOParams_t, u) == 8, "u at 8");
_Static_assert(offsetof(CUfileIOParams_t, fh) == 40, "fh at 40");
_Static_assert(offsetof(CUfileIOParams_t, opcode) == 48, "opcode at 48");
_Static_assert(offsetof(CUfileIOParams_t, cookie) == 56, "cookie at 56");
_Static_assert(sizeof(CUfileIOEvents_t) == 24, "CUfileIOEvents_t is 24 bytes");
_Static_assert(offsetof(CUfileIOEvents_t, ret) == 16, "ret at 16");
struct timespec;
typedef CUfileError_t (*cuFileBatchIOSetUp_fn)(CUfileBatchHandle_t *batch,
                                               unsigned nr);
typedef CUfileError_t (*cuFileBatchIOSubmit_fn)(CUfileBatchHandle_t batch,
                                                unsigned nr,
                                                CUfileIOParams_t *iocbp,
                                                unsigned flags);
typedef CUfileError_t (*cuFileBatchIOGetStatus_fn)(CUfileBatchHandle_t batch,
                                                   unsigned min_nr,
                                                   unsigned *nr,
                                                   CUfileIOEvents_t *events,
                                                   struct timespec *timeout);
typedef CUfileError_t (*cuFileBatchIOCancel_fn)(CUfileBatchHandle_t batch);
typedef void (*cuFileBatchIODestroy_fn)(CUfileBatchHandle_t batch);

#endif
