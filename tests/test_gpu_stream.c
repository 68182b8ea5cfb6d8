/*
 * Stream-ordered reads and writes on a real GPU. The work before the
 * request is a kernel (PTX embedded here, loaded with cuModuleLoadData:
 * no nvcc at test time) that spins for about 0.1 s and then fills the
 * buffer: a read that did not wait for it would be overwritten, a write
 * that did not wait would write the old bytes. The work after is a
 * cuMemcpyDtoHAsync into pinned memory (it must see the file's bytes)
 * and a cuMemsetD8Async (it must not reach the file). A read or write
 * staged on the stream must return while the kernel still spins. Also the
 * plain variant with a cuMemsetD8Async before, end-of-file, and both paths
 * (compat_mode on: the pipelined bounce buffers; auto: cuFile where the
 * machine accelerates it; off: cuFile's cuFileReadAsync/WriteAsync, or a
 * line saying why not). Skips (77) without a GPU.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"

#include <dlfcn.h>
#include <string.h>
#include <unistd.h>

#define FILE_SIZE  ((64u << 20) + 123)
#define SEED_FILE  81
#define SEED_WRITE 82
#define SPIN       200000000LL /* clock cycles: ~0.1 s, far above a read */

typedef int CUresult;
typedef void *CUstream, *CUmodule, *CUfunction;
typedef unsigned long long CUdeviceptr;

static struct {
	CUresult (*cuStreamCreate)(CUstream *, unsigned);
	CUresult (*cuStreamDestroy)(CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuStreamQuery)(CUstream);
	CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t,
	                            CUstream);
	CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
	CUresult (*cuMemFreeHost)(void *);
	CUresult (*cuModuleLoadData)(CUmodule *, const void *);
	CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*cuModuleUnload)(CUmodule);
	CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned,
	                           unsigned, unsigned, unsigned, unsigned,
	                           CUstream, void **, void **);
} cu;

/* spin_fill(p, n, cycles, v): spins cycles clocks, then p[0, n) = v. */
static const char spin_fill_ptx[] =
    ".version 7.0\n"
    ".target sm_50\n"
    ".address_size 64\n"
    ".visible .entry spin_fill(.param .u64 p, .param .u64 n,\n"
    "                          .param .u64 cycles, .param .u32 v)\n"
    "{\n"
    "  .reg .pred %p<3>;\n"
    "  .reg .b16 %rs<2>;\n"
    "  .reg .b32 %r<8>;\n"
    "  .reg .b64 %rd<12>;\n"
    "  ld.param.u64 %rd1, [p];\n"
    "  ld.param.u64 %rd2, [n];\n"
    "  ld.param.u64 %rd3, [cycles];\n"
    "  ld.param.u32 %r1, [v];\n"
    "  cvt.u16.u32 %rs1, %r1;\n"
    "  cvta.to.global.u64 %rd1, %rd1;\n"
    "  mov.u64 %rd4, %clock64;\n"
    "SPIN:\n"
    "  mov.u64 %rd5, %clock64;\n"
    "  sub.s64 %rd6, %rd5, %rd4;\n"
    "  setp.lt.s64 %p1, %rd6, %rd3;\n"
    "  @%p1 bra SPIN;\n"
    "  mov.u32 %r2, %ctaid.x;\n"
    "  mov.u32 %r3, %ntid.x;\n"
    "  mov.u32 %r4, %tid.x;\n"
    "  mad.lo.u32 %r5, %r2, %r3, %r4;\n"
    "  mov.u32 %r6, %nctaid.x;\n"
    "  mul.lo.u32 %r7, %r6, %r3;\n"
    "  cvt.u64.u32 %rd7, %r5;\n"
    "  cvt.u64.u32 %rd8, %r7;\n"
    "LOOP:\n"
    "  setp.ge.u64 %p2, %rd7, %rd2;\n"
    "  @%p2 bra DONE;\n"
    "  add.s64 %rd9, %rd1, %rd7;\n"
    "  st.global.u8 [%rd9], %rs1;\n"
    "  add.s64 %rd7, %rd7, %rd8;\n"
    "  bra LOOP;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

static CUfunction spin_fill;
static unsigned char *dev, *pinned;
/* The reads are staged on the stream ("staged:"): the call returns while
 * the kernel before still spins. */
static int staged;
static const char *src_path;

static int load_driver(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	struct {
		void **slot;
		const char *name;
	} syms[] = {
	    {(void **)&cu.cuStreamCreate, "cuStreamCreate"},
	    {(void **)&cu.cuStreamDestroy, "cuStreamDestroy_v2"},
	    {(void **)&cu.cuStreamSynchronize, "cuStreamSynchronize"},
	    {(void **)&cu.cuStreamQuery, "cuStreamQuery"},
	    {(void **)&cu.cuMemsetD8Async, "cuMemsetD8Async"},
	    {(void **)&cu.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
	    {(void **)&cu.cuMemHostAlloc, "cuMemHostAlloc"},
	    {(void **)&cu.cuMemFreeHost, "cuMemFreeHost"},
	    {(void **)&cu.cuModuleLoadData, "cuModuleLoadData"},
	    {(void **)&cu.cuModuleGetFunction, "cuModuleGetFunction"},
	    {(void **)&cu.cuModuleUnload, "cuModuleUnload"},
	    {(void **)&cu.cuLaunchKernel, "cuLaunchKernel"},
	};

	if (!lib)
		return -1;
	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		*syms[i].slot = dlsym(lib, syms[i].name);
		if (!*syms[i].slot) {
			fprintf(stderr, "libcuda.so.1 lacks %s\n",
			        syms[i].name);
			return -1;
		}
	}
	return 0;
}

static void launch_spin_fill(CUstream s, void *p, size_t n, unsigned v)
{
	CUdeviceptr dp = (CUdeviceptr)(uintptr_t)p;
	unsigned long long len = n;
	long long cycles = SPIN;
	void *args[] = {&dp, &len, &cycles, &v};

	CHECK_EQ(
	    cu.cuLaunchKernel(spin_fill, 64, 1, 1, 256, 1, 1, 0, s, args, NULL),
	    0);
}

/* A read of size bytes at off: a slow kernel (or a memset) before fills
 * the buffer with 0xAB; after it, a copy out and a memset. */
static void check_read(gpufile_t *h, CUstream s, size_t size, int64_t off,
                       ssize_t want, int use_kernel)
{
	ssize_t n = -777;

	memset(pinned, 0, size);
	if (use_kernel)
		launch_spin_fill(s, dev, size, 0xAB);
	else
		CHECK_EQ(cu.cuMemsetD8Async((CUdeviceptr)(uintptr_t)dev, 0xAB,
		                            size, s),
		         0);
	CHECK_EQ(gpufile_read_async(h, dev, size, off, s, &n), 0);
	if (staged && use_kernel)
		/* The call did not synchronise the stream: the kernel
		 * (~0.1 s) has not ended. */
		CHECK_EQ(cu.cuStreamQuery(s), 600 /* CUDA_ERROR_NOT_READY */);
	CHECK_EQ(
	    cu.cuMemcpyDtoHAsync(pinned, (CUdeviceptr)(uintptr_t)dev, size, s),
	    0);
	CHECK_EQ(cu.cuMemsetD8Async((CUdeviceptr)(uintptr_t)dev, 0xCD, size, s),
	         0);
	CHECK_EQ(cu.cuStreamSynchronize(s), 0);
	CHECK_EQ(n, want);
	if (want > 0) {
		CHECK_EQ(test_mismatch(pinned, (size_t)want, SEED_FILE,
		                       (uint64_t)off),
		         -1);
		CHECK_EQ(test_mismatch_byte(pinned + want, size - (size_t)want,
		                            0xAB),
		         -1);
	}
}

/* Loads a module while the stream's request is in flight, then waits for
 * the stream. cuModuleLoadData (what CuPy does at the first use of a
 * kernel) waits, holding the driver's lock, for every stream of the
 * context, this one included: the stream must get through without
 * anything of gpufile's that needs that lock. Staged reads and writes hung
 * so (H200: the waiter in cuEventDestroy, python/tests/test_stream.py
 * alone). A hang fails by alarm(). */
static void module_load_then_sync(CUstream s)
{
	CUmodule m = NULL;

	CHECK_EQ(cu.cuModuleLoadData(&m, spin_fill_ptx), 0);
	CHECK_EQ(cu.cuStreamSynchronize(s), 0);
	if (m)
		CHECK_EQ(cu.cuModuleUnload(m), 0);
}

/* 1 when the file at path holds size bytes, each of them byte. */
static int file_holds(const char *path, size_t size, int byte)
{
	size_t len = 0;
	unsigned char *file = test_read_file(path, &len);
	int ok =
	    file && len == size && test_mismatch_byte(file, len, byte) == -1;

	free(file);
	return ok;
}

/* A read of 4 MiB into buf (dev: staged; pinned: wait-value) behind the
 * slow kernel, with a module loaded while it is in flight. */
static void check_read_module_load(gpufile_t *h, CUstream s, void *buf)
{
	const size_t size = 4u << 20;
	ssize_t n = -777;

	memset(pinned, 0, size);
	launch_spin_fill(s, dev, size, 0xAB);
	CHECK_EQ(gpufile_read_async(h, buf, size, 0, s, &n), 0);
	if (buf == dev)
		CHECK_EQ(cu.cuMemcpyDtoHAsync(
		             pinned, (CUdeviceptr)(uintptr_t)dev, size, s),
		         0);
	module_load_then_sync(s);
	CHECK_EQ(n, (ssize_t)size);
	CHECK_EQ(test_mismatch(pinned, size, SEED_FILE, 0), -1);
}

/* A staged write of what the slow kernel produces, with a module loaded
 * while it is in flight. */
static void check_write_module_load(CUstream s)
{
	const char *path = test_path("gpu-stream-modload");
	const size_t size = 4u << 20;
	gpufile_t *w = NULL;
	ssize_t n = -777;

	CHECK_EQ(gpufile_open(&w, path, "w"), 0);
	if (!w)
		return;
	launch_spin_fill(s, dev, size, 0x5A);
	CHECK_EQ(gpufile_write_async(w, dev, size, 0, s, &n), 0);
	module_load_then_sync(s);
	CHECK_EQ(n, (ssize_t)size);
	CHECK_EQ(gpufile_close(w), 0);
	CHECK(file_holds(path, size, 0x5A));
}

/* A write: the slow kernel before produces 0x5A, a memset after writes
 * 0x00; the file must hold 0x5A. */
static void check_write(CUstream s, size_t size)
{
	const char *path = test_path("gpu-stream-dst");
	gpufile_t *w = NULL;
	ssize_t n = -777;

	char reason[512];

	CHECK_EQ(gpufile_open(&w, path, "w"), 0);
	if (!w)
		return;
	CHECK_EQ(gpufile_stream_info(w, dev, size, 1, reason, sizeof(reason)),
	         0);
	printf("  write of %zu bytes: %s\n", size, reason);
	CHECK(strncmp(reason, "staged:", 7) == 0 ||
	      strncmp(reason, "cufile:", 7) == 0);
	CHECK_EQ(cu.cuMemsetD8Async((CUdeviceptr)(uintptr_t)dev, 0, size, s),
	         0);
	launch_spin_fill(s, dev, size, 0x5A);
	CHECK_EQ(gpufile_write_async(w, dev, size, 0, s, &n), 0);
	if (strncmp(reason, "staged:", 7) == 0)
		/* Back while the kernel before still spins. */
		CHECK_EQ(cu.cuStreamQuery(s), 600 /* CUDA_ERROR_NOT_READY */);
	CHECK_EQ(cu.cuMemsetD8Async((CUdeviceptr)(uintptr_t)dev, 0, size, s),
	         0);
	CHECK_EQ(cu.cuStreamSynchronize(s), 0);
	CHECK_EQ(n, (ssize_t)size);
	CHECK_EQ(gpufile_close(w), 0);
	CHECK(file_holds(path, size, 0x5A));
}

static void run(const char *compat)
{
	char reason[512];
	gpufile_t *h = NULL;
	CUstream s = NULL;
	int rc;

	CHECK_EQ(gpufile_config_set("compat_mode", compat), 0);
	CHECK_EQ(gpufile_open(&h, src_path, "r"), 0);
	if (!h)
		return;
	rc = gpufile_stream_info(h, dev, FILE_SIZE, 0, reason, sizeof(reason));
	if (rc && strcmp(compat, "off") == 0) {
		/* compat_mode=off needs cuFile for this file. */
		printf("compat_mode=off: skipped: %s\n", gpufile_errmsg());
		gpufile_close(h);
		return;
	}
	CHECK_EQ(rc, 0);
	printf("compat_mode=%s: %s\n", compat, reason);
	if (strcmp(compat, "off") == 0) {
		/* cuFile's own stream calls: it may refuse to queue (a
		 * compat-mode cuFile without stream support). */
		ssize_t n = -777;

		CHECK_EQ(cu.cuStreamCreate(&s, 1), 0);
		rc = gpufile_read_async(h, dev, 1u << 20, 0, s, &n);
		CHECK_EQ(cu.cuStreamSynchronize(s), 0);
		if (rc == GPUFILE_ECUFILE) {
			printf("compat_mode=off: cuFile refused to queue: "
			       "%s\n",
			       gpufile_errmsg());
			CHECK_EQ(n, -777);
			CHECK_EQ(cu.cuStreamDestroy(s), 0);
			gpufile_close(h);
			return;
		}
		CHECK_EQ(rc, 0);
		CHECK_EQ(n, 1 << 20);
		CHECK_EQ(cu.cuStreamDestroy(s), 0);
		s = NULL;
	}
	CHECK(strncmp(reason, "staged:", 7) == 0 ||
	      strncmp(reason, "cufile:", 7) == 0);
	staged = strncmp(reason, "staged:", 7) == 0;
	CHECK_EQ(cu.cuStreamCreate(&s, 1 /* CU_STREAM_NON_BLOCKING */), 0);
	check_read(h, s, FILE_SIZE, 0, FILE_SIZE, 1);
	check_read(h, s, (8u << 20) + 5, 4096 + 3, (8u << 20) + 5, 0);
	check_read(h, s, 1u << 20, FILE_SIZE - 1000, 1000, 1);
	/* Several requests queued back to back on one stream. */
	for (int i = 0; i < 8; i++)
		check_read(h, s, 1u << 20, (int64_t)i << 20, 1 << 20, 0);
	if (staged) {
		check_read_module_load(h, s, dev);
		check_read_module_load(h, s, pinned);
		check_write_module_load(s);
	}
	check_write(s, 16u << 20);
	CHECK_EQ(cu.cuStreamDestroy(s), 0);
	CHECK_EQ(gpufile_close(h), 0);
}

int main(void)
{
	int ndev = gpufile_cuda_device_count();
	CUmodule mod = NULL;
	void *p = NULL;
	CUresult rc;

	if (ndev <= 0) {
		printf("test_gpu_stream: skipped: %s\n", gpufile_errmsg());
		return TEST_SKIP;
	}
	if (load_driver()) {
		fprintf(stderr, "cannot reach libcuda.so.1's entry points\n");
		return 1;
	}
	alarm(300); /* a hang is a failure, not a stuck test */
	src_path = strdup(test_path("gpu-stream-src"));
	CHECK_EQ(test_make_file(src_path, FILE_SIZE, SEED_FILE), 0);
	/* Makes device 0's primary context current in this thread. */
	if (gpufile_device_alloc(0, FILE_SIZE, &p)) {
		fprintf(stderr, "gpufile_device_alloc: %s\n", gpufile_errmsg());
		return 1;
	}
	dev = p;
	CHECK_EQ(cu.cuMemHostAlloc((void **)&pinned, FILE_SIZE, 0), 0);
	rc = cu.cuModuleLoadData(&mod, spin_fill_ptx);
	if (rc == 0)
		rc = cu.cuModuleGetFunction(&spin_fill, mod, "spin_fill");
	if (rc != 0) {
		fprintf(stderr, "loading the spin_fill PTX: CUresult %d\n", rc);
		return 1;
	}

	run("on");
	run("auto");
	run("off");

	cu.cuMemFreeHost(pinned);
	CHECK_EQ(gpufile_device_free(dev), 0);
	gpufile_release();
	test_cleanup();
	return test_finish("test_gpu_stream");
}
