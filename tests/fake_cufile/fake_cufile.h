/*
 * A stand-in for libcufile.so.0 on machines without one (CI): implements
 * the part of the cuFile ABI gpufile uses (src/platform/cufile_abi.h), moving
 * bytes with pread/pwrite into "device" memory that is really host memory (the
 * tests pair it with a fake CUDA driver table). It counts its calls, and
 * the environment tells it to fail (read at each call):
 *   FAKE_CUFILE_FAIL_OPEN=STATUS      cuFileDriverOpen returns STATUS
 *   FAKE_CUFILE_FAIL_REGISTER=STATUS  cuFileHandleRegister returns STATUS
 *   FAKE_CUFILE_P2P=1                 driver properties report P2PDMA
 *   FAKE_CUFILE_NVFS=MAJOR.MINOR      driver properties report nvidia-fs
 *   FAKE_CUFILE_REFUSE=ENTRYPOINT     that driver setter (cuFileDriverSet...)
 *                                     answers CU_FILE_DRIVER_UNSUPPORTED_LIMIT
 *   FAKE_CUFILE_FAIL_GETSTATUS=STATUS cuFileBatchIOGetStatus returns STATUS
 * Its own per-GPU counters (cuFileGetStatsL3, cuFile 1.15 layout) count
 * every read and write as "posix", like cuFile without nvidia-fs.
 */
#ifndef FAKE_CUFILE_H
#define FAKE_CUFILE_H

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

struct fake_cufile_counts {
	uint64_t driver_open, driver_close;
	uint64_t handle_register, handle_deregister;
	uint64_t handle_register_direct; /* of those, fds with O_DIRECT */
	uint64_t buf_register, buf_deregister;
	uint64_t reads, writes, read_bytes, write_bytes;
	int stats_level;
	const void *last_base; /* buf_base of the last read or write */
	int64_t last_buf_offset, last_file_offset;
	uint64_t min_io, max_io; /* sizes of reads and writes */
	/* The batch API: cuFileBatchIOSubmit calls and the I/Os they held
	 * (each also counted in reads/writes); batches set up, cancelled
	 * and destroyed. */
	uint64_t batch_submits, batch_ios;
	uint64_t batch_setups, batch_cancels, batch_destroys;
};

/* Exported by libfake_cufile.so; reach it with dlsym. */
typedef void (*fake_cufile_counts_fn)(struct fake_cufile_counts *out);

/* For tests: the counters of the fake at lib_path if the process has it
 * loaded, else all zero (it is never loaded by this call). */
static inline struct fake_cufile_counts fake_cufile_read(const char *lib_path)
{
	struct fake_cufile_counts c;
	void *lib = dlopen(lib_path, RTLD_NOW | RTLD_NOLOAD);

	memset(&c, 0, sizeof(c));
	if (lib) {
		fake_cufile_counts_fn fn =
		    (fake_cufile_counts_fn)dlsym(lib, "fake_cufile_counts");
		if (fn)
			fn(&c);
		dlclose(lib);
	}
	return c;
}

/* Faults the fake's cuFileRead and cuFileWrite inject, installed by a
 * test through fake_cufile_inject (dlsym; NULL clears them). A call fails
 * when it is call number `call` (counted from the install, -1: none) or
 * when its range meets [at, at+len) (len 0: none): with -1 and errno err,
 * or, err being 0, with -status (a cuFile status). Every call moves at
 * most max_len bytes (0: all), and short_by bytes fewer than asked when
 * it asks for more. Only calls in the direction is_write. */
struct fake_cufile_fault {
	int is_write;
	long call;
	int64_t at, len;
	int err, status;
	size_t max_len, short_by;
};
typedef void (*fake_cufile_inject_fn)(const struct fake_cufile_fault *f);

#endif
