/*
 * The cuFile backend and the two-layer path decision, on a machine without
 * a GPU or libcufile: a fake CUDA driver table (host memory standing in
 * for device memory) and libfake_cufile.so (tests/fake_cufile) loaded
 * through the cufile_library setting.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include "cuda_shim.h"
#include "cufile_shim.h"
#include "decide.h"
#include "fake_cufile.h"
#include "gpufile.h"
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#ifndef FAKE_CUFILE_PATH
#error "FAKE_CUFILE_PATH must name libfake_cufile.so"
#endif

/* ---- a fake CUDA driver: "device" memory is malloc'ed host memory ---- */

#define MAX_REGIONS 16
static struct {
	char *base;
	size_t size;
} regions[MAX_REGIONS];
static pthread_mutex_t regions_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st *const fake_ctx = (struct CUctx_st *)0x1000;
static _Thread_local CUcontext current;

static CUresult f_init(unsigned flags)
{
	(void)flags;
	return CUDA_SUCCESS;
}
static CUresult f_version(int *v)
{
	*v = 13000;
	return CUDA_SUCCESS;
}
static CUresult f_count(int *n)
{
	*n = 1;
	return CUDA_SUCCESS;
}
static CUresult f_device(CUdevice *d, int o)
{
	*d = o;
	return CUDA_SUCCESS;
}
static CUresult f_retain(CUcontext *c, CUdevice d)
{
	(void)d;
	*c = fake_ctx;
	return CUDA_SUCCESS;
}
static CUresult f_getcur(CUcontext *c)
{
	*c = current;
	return CUDA_SUCCESS;
}
static CUresult f_setcur(CUcontext c)
{
	current = c;
	return CUDA_SUCCESS;
}

static int is_device(CUdeviceptr p)
{
	int found = 0;

	pthread_mutex_lock(&regions_lock);
	for (int i = 0; i < MAX_REGIONS; i++)
		if (regions[i].base &&
		    (char *)(uintptr_t)p >= regions[i].base &&
		    (char *)(uintptr_t)p < regions[i].base + regions[i].size)
			found = 1;
	pthread_mutex_unlock(&regions_lock);
	return found;
}

static CUresult f_attrs(unsigned n, int *attrs, void **data, CUdeviceptr p)
{
	if (!is_device(p))
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < n; i++) {
		switch (attrs[i]) {
		case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
			*(unsigned *)data[i] = CU_MEMORYTYPE_DEVICE;
			break;
		case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
			*(int *)data[i] = 0;
			break;
		case CU_POINTER_ATTRIBUTE_CONTEXT:
			*(CUcontext *)data[i] = fake_ctx;
			break;
		default:
			*(char *)data[i] = 0;
			break;
		}
	}
	return CUDA_SUCCESS;
}

static CUresult f_alloc(CUdeviceptr *p, size_t size)
{
	char *m = malloc(size);

	if (!m)
		return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
	pthread_mutex_lock(&regions_lock);
	for (int i = 0; i < MAX_REGIONS; i++) {
		if (!regions[i].base) {
			regions[i].base = m;
			regions[i].size = size;
			break;
		}
	}
	pthread_mutex_unlock(&regions_lock);
	*p = (CUdeviceptr)(uintptr_t)m;
	return CUDA_SUCCESS;
}

static CUresult f_free(CUdeviceptr p)
{
	pthread_mutex_lock(&regions_lock);
	for (int i = 0; i < MAX_REGIONS; i++)
		if (regions[i].base == (char *)(uintptr_t)p)
			regions[i].base = NULL;
	pthread_mutex_unlock(&regions_lock);
	free((void *)(uintptr_t)p);
	return CUDA_SUCCESS;
}

static CUresult f_hostalloc(void **p, size_t size, unsigned flags)
{
	(void)flags;
	*p = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
	return *p ? CUDA_SUCCESS : 2;
}
static CUresult f_freehost(void *p)
{
	free(p);
	return CUDA_SUCCESS;
}
static CUresult f_hostreg(void *p, size_t s, unsigned f)
{
	(void)p, (void)s, (void)f;
	return CUDA_SUCCESS;
}
static CUresult f_hostunreg(void *p)
{
	(void)p;
	return CUDA_SUCCESS;
}
static CUresult f_memcpy(CUdeviceptr d, CUdeviceptr s, size_t n)
{
	memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n);
	return CUDA_SUCCESS;
}
static CUresult f_htod(CUdeviceptr d, const void *s, size_t n, CUstream st)
{
	(void)st;
	memcpy((void *)(uintptr_t)d, s, n);
	return CUDA_SUCCESS;
}
static CUresult f_dtoh(void *d, CUdeviceptr s, size_t n, CUstream st)
{
	(void)st;
	memcpy(d, (void *)(uintptr_t)s, n);
	return CUDA_SUCCESS;
}
static CUresult f_stream(CUstream *s, unsigned f)
{
	(void)f;
	*s = (CUstream)0x2000;
	return CUDA_SUCCESS;
}
static CUresult f_stream1(CUstream s)
{
	(void)s;
	return CUDA_SUCCESS;
}
static CUresult f_event(CUevent *e, unsigned f)
{
	(void)f;
	*e = (CUevent)0x3000;
	return CUDA_SUCCESS;
}
static CUresult f_event1(CUevent e)
{
	(void)e;
	return CUDA_SUCCESS;
}
static CUresult f_record(CUevent e, CUstream s)
{
	(void)e, (void)s;
	return CUDA_SUCCESS;
}
static CUresult f_errname(CUresult rc, const char **name)
{
	(void)rc;
	*name = "FAKE_CUDA_ERROR";
	return CUDA_SUCCESS;
}

static const struct gpufile__cuda fake_cuda = {
    .cuInit = f_init,
    .cuDriverGetVersion = f_version,
    .cuDeviceGetCount = f_count,
    .cuDeviceGet = f_device,
    .cuDevicePrimaryCtxRetain = f_retain,
    .cuCtxGetCurrent = f_getcur,
    .cuCtxSetCurrent = f_setcur,
    .cuPointerGetAttributes = f_attrs,
    .cuMemAlloc = f_alloc,
    .cuMemFree = f_free,
    .cuMemHostAlloc = f_hostalloc,
    .cuMemFreeHost = f_freehost,
    .cuMemHostRegister = f_hostreg,
    .cuMemHostUnregister = f_hostunreg,
    .cuMemcpy = f_memcpy,
    .cuMemcpyHtoDAsync = f_htod,
    .cuMemcpyDtoHAsync = f_dtoh,
    .cuStreamCreate = f_stream,
    .cuStreamDestroy = f_stream1,
    .cuStreamSynchronize = f_stream1,
    .cuEventCreate = f_event,
    .cuEventDestroy = f_event1,
    .cuEventRecord = f_record,
    .cuEventSynchronize = f_event1,
    .cuGetErrorName = f_errname,
};

/* ---- helpers ---- */

static int fake_loaded(void)
{
	void *lib = dlopen(FAKE_CUFILE_PATH, RTLD_NOW | RTLD_NOLOAD);

	if (lib)
		dlclose(lib);
	return lib != NULL;
}

/* The fake's counters (all zero when it is not loaded). */
static struct fake_cufile_counts fake(void)
{
	return fake_cufile_read(FAKE_CUFILE_PATH);
}

static void *dev_alloc(size_t size)
{
	void *p = NULL;

	if (gpufile_device_alloc(0, size, &p))
		return NULL;
	memset(p, 0xAA, size);
	return p;
}

static int check_pattern(const void *buf, size_t len, uint64_t seed,
                         uint64_t offset)
{
	unsigned char *want = malloc(len ? len : 1);
	int same;

	test_fill(want, len, seed, offset);
	same = memcmp(buf, want, len) == 0;
	free(want);
	return same;
}

/* Starts a phase: the given mode, a fresh cuFile state, the fake's
 * failure switches off. */
static void phase(const char *mode)
{
	gpufile__cufile_reset();
	gpufile_config_reset();
	unsetenv("FAKE_CUFILE_FAIL_OPEN");
	unsetenv("FAKE_CUFILE_FAIL_REGISTER");
	unsetenv("FAKE_CUFILE_P2P");
	gpufile__platform_reset();
	CHECK_EQ(gpufile_config_set("cufile_library", FAKE_CUFILE_PATH), 0);
	CHECK_EQ(gpufile_config_set("compat_mode", mode), 0);
}

static uint64_t path_ops(gpufile_path_t p, int is_write)
{
	gpufile_stats_t s;

	GPUFILE_INIT(s);
	gpufile_stats_self(&s);
	return s.path[p][is_write].ops;
}

static const size_t MiB = 1u << 20;

/* Host buffers never reach cuFile, whatever the mode. */
static void test_host_never(const char *file)
{
	gpufile_t *h;
	char *buf = malloc(4 * MiB);

	phase("off");
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread(h, buf, 4 * MiB, 0), (ssize_t)(4 * MiB));
	CHECK(check_pattern(buf, 4 * MiB, 1, 0));
	CHECK(!fake_loaded());
	gpufile_close(h);
	free(buf);
}

/* compat_mode=on: device memory takes the posix path; cuFile not loaded. */
static void test_on(const char *file)
{
	gpufile_t *h;
	gpufile_path_t p;
	char reason[512];
	char *dev = dev_alloc(4 * MiB);
	uint64_t posix = path_ops(GPUFILE_PATH_POSIX, 0);

	phase("on");
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread(h, dev, 4 * MiB, 0), (ssize_t)(4 * MiB));
	CHECK(check_pattern(dev, 4 * MiB, 1, 0));
	CHECK_EQ(path_ops(GPUFILE_PATH_POSIX, 0), posix + 1);
	CHECK_EQ(gpufile_path_info(h, &p, reason, sizeof(reason)), 0);
	CHECK_EQ(p, GPUFILE_PATH_POSIX);
	CHECK(strstr(reason, "compat_mode=on") != NULL);
	CHECK(!fake_loaded());
	gpufile_close(h);
	gpufile_device_free(dev);
}

/* A machine where the cheap facts leave PCI P2PDMA possible (an NVMe
 * namespace, multipath off): cuFile's own answer then decides. */
static int p2pdma_possible(dev_t dev, char *why, size_t len)
{
	(void)dev;
	snprintf(why, len, "P2PDMA possible (test)");
	return 1;
}

/* compat_mode=auto: cuFile only where it can take an accelerated path. */
static void test_auto_rule(const char *file)
{
	gpufile_t *h;
	gpufile_path_t p;
	char reason[512];
	char *dev = dev_alloc(4 * MiB);
	int nvfs = access("/proc/driver/nvidia-fs", F_OK) == 0;

	phase("auto");
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread(h, dev, 4 * MiB, 0), (ssize_t)(4 * MiB));
	CHECK(check_pattern(dev, 4 * MiB, 1, 0));
	CHECK_EQ(gpufile_path_info(h, &p, reason, sizeof(reason)), 0);
	char p2p_why[128];

	if (!nvfs &&
	    !gpufile__platform.p2pdma_possible(0, p2p_why, sizeof(p2p_why))) {
		/* Issue 14: the cheap facts rule cuFile out, so it is not
		 * even loaded (0.37-0.42 s saved on the first read). */
		CHECK_EQ(p, GPUFILE_PATH_POSIX);
		CHECK(strstr(reason, "nvidia-fs is not loaded") != NULL);
		CHECK(strstr(reason, "cannot accelerate") != NULL);
		CHECK(!fake_loaded());
		CHECK_EQ(fake().handle_register, 0);
	}
	gpufile_close(h);

	/* P2PDMA possible by the cheap facts, but the driver properties
	 * do not report it: cuFile registers the file, gpufile keeps it. */
	phase("auto");
	gpufile__platform.p2pdma_possible = p2pdma_possible;
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread(h, dev, 4 * MiB, 0), (ssize_t)(4 * MiB));
	CHECK(check_pattern(dev, 4 * MiB, 1, 0));
	CHECK_EQ(gpufile_path_info(h, &p, reason, sizeof(reason)), 0);
	if (!nvfs) {
		CHECK_EQ(p, GPUFILE_PATH_POSIX);
		CHECK(strstr(reason, "compatibility path") != NULL);
		CHECK_EQ(fake().reads, 0);
	}
	CHECK_EQ(fake().handle_register, 1);
	CHECK_EQ(fake().handle_register_direct, 1);
	gpufile_close(h);

	/* P2PDMA reported by the driver properties: cuFile is used. */
	phase("auto");
	gpufile__platform.p2pdma_possible = p2pdma_possible;
	setenv("FAKE_CUFILE_P2P", "1", 1);
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread(h, dev, 4 * MiB, 0), (ssize_t)(4 * MiB));
	CHECK(check_pattern(dev, 4 * MiB, 1, 0));
	CHECK_EQ(fake().reads, 1);
	CHECK_EQ(gpufile_path_info(h, &p, reason, sizeof(reason)), 0);
	CHECK_EQ(p, GPUFILE_PATH_CUFILE);
	CHECK(strstr(reason, "P2PDMA") != NULL);
	gpufile_close(h);

	/* compat_mode=off uses cuFile even where it is not accelerated. */
	phase("off");
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread(h, dev, 4 * MiB, 0), (ssize_t)(4 * MiB));
	CHECK_EQ(fake().reads, 1);
	gpufile_close(h);
	gpufile_device_free(dev);
}

/* The threshold boundary, unaligned offsets, writes, and the split. */
static void test_threshold(const char *file, const char *wfile)
{
	gpufile_t *h;
	char *dev = dev_alloc(8 * MiB);
	const size_t t = 16u << 10;
	uint64_t small = path_ops(GPUFILE_PATH_SMALL, 0);
	uint64_t cuf = path_ops(GPUFILE_PATH_CUFILE, 0);

	phase("auto");
	CHECK_EQ(gpufile_config_set("cufile_accel_only", "off"), 0);
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread(h, dev, t - 1, 12345), (ssize_t)(t - 1));
	CHECK(check_pattern(dev, t - 1, 1, 12345));
	CHECK_EQ(fake().reads, 0);
	CHECK_EQ(path_ops(GPUFILE_PATH_SMALL, 0), small + 1);
	CHECK_EQ(gpufile_pread(h, dev, t, 12345), (ssize_t)t);
	CHECK(check_pattern(dev, t, 1, 12345));
	CHECK_EQ(fake().reads, 1);
	CHECK_EQ(path_ops(GPUFILE_PATH_CUFILE, 0), cuf + 1);

	/* 6 MiB + 3 at offset 1 MiB + 7: tasks cut at 4 MiB multiples in the
	 * file: [1M+7, 4M), [4M, 7M+10); each names the request's buffer as
	 * base and its place in it as the offset. */
	memset(dev, 0, 8 * MiB);
	CHECK_EQ(gpufile_pread(h, dev + 100, 6 * MiB + 3, MiB + 7),
	         (ssize_t)(6 * MiB + 3));
	CHECK(check_pattern(dev + 100, 6 * MiB + 3, 1, MiB + 7));
	CHECK_EQ(fake().reads, 3);
	CHECK(fake().last_base == dev + 100);
	CHECK(fake().last_buf_offset == 0 ||
	      fake().last_buf_offset == (int64_t)(3 * MiB - 7));
	/* Reading past end-of-file (the file is 16 MiB) is short. */
	CHECK_EQ(gpufile_pread(h, dev, 2 * MiB, 15 * MiB), (ssize_t)MiB);
	CHECK(check_pattern(dev, MiB, 1, 15 * MiB));
	gpufile_close(h);

	/* Writes through cuFile. */
	test_fill(dev, 5 * MiB, 9, 0);
	CHECK_EQ(gpufile_open(&h, wfile, "w+"), 0);
	CHECK_EQ(gpufile_pwrite(h, dev, 5 * MiB, 0), (ssize_t)(5 * MiB));
	CHECK_EQ(fake().writes, 2);
	memset(dev, 0, 5 * MiB);
	CHECK_EQ(gpufile_pread(h, dev, 5 * MiB, 0), (ssize_t)(5 * MiB));
	CHECK(check_pattern(dev, 5 * MiB, 9, 0));
	gpufile_close(h);
	gpufile_device_free(dev);
}

/* Per-file fallback with its reason; compat_mode=off's errors. */
static void test_fallback(const char *file, const char *file2)
{
	gpufile_t *a, *b;
	gpufile_path_t p;
	char reason[512];
	char *dev = dev_alloc(4 * MiB);
	ssize_t n;

	phase("auto");
	CHECK_EQ(gpufile_config_set("cufile_accel_only", "off"), 0);
	CHECK_EQ(gpufile_open(&a, file, "r"), 0);
	CHECK_EQ(gpufile_pread(a, dev, 4 * MiB, 0), (ssize_t)(4 * MiB));
	CHECK_EQ(fake().reads, 1);
	setenv("FAKE_CUFILE_FAIL_REGISTER", "5027", 1);
	CHECK_EQ(gpufile_open(&b, file2, "r"), 0);
	CHECK_EQ(gpufile_pread(b, dev, 4 * MiB, 0), (ssize_t)(4 * MiB));
	CHECK(check_pattern(dev, 4 * MiB, 2, 0));
	CHECK_EQ(fake().reads, 1); /* b fell back */
	CHECK_EQ(gpufile_path_info(b, &p, reason, sizeof(reason)), 0);
	CHECK_EQ(p, GPUFILE_PATH_POSIX);
	CHECK(strstr(reason, "CU_FILE_HANDLE_NOT_REGISTERED (5027)") != NULL);
	/* a keeps its registration. */
	CHECK_EQ(gpufile_pread(a, dev, 4 * MiB, 0), (ssize_t)(4 * MiB));
	CHECK_EQ(fake().reads, 2);
	gpufile_close(b);

	/* off: the same refusal is an error naming the status. */
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_OFF), 0);
	CHECK_EQ(gpufile_open(&b, file2, "r"), 0);
	n = gpufile_pread(b, dev, 4 * MiB, 0);
	CHECK_EQ(n, GPUFILE_ECUFILE);
	CHECK(strstr(gpufile_errmsg(), "5027") != NULL);
	CHECK(strstr(gpufile_errmsg(), "compat_mode=off") != NULL);
	CHECK_EQ(gpufile_path_info(b, &p, reason, sizeof(reason)),
	         GPUFILE_ECUFILE);
	/* Below the threshold off still takes the posix path. */
	CHECK_EQ(gpufile_pread(b, dev, 100, 0), 100);
	/* The refused request fell back to nothing: the file's record
	 * is the fallback the handle makes under auto, with its reason. */
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_AUTO), 0);
	CHECK_EQ(gpufile_pread(b, dev, 4 * MiB, 0), (ssize_t)(4 * MiB));
	{
		gpufile_file_stat_t fs[GPUFILE_MAX_FILE_STATS];
		int nf = gpufile_stats_files(0, fs, GPUFILE_MAX_FILE_STATS);

		CHECK(nf > 0);
		if (nf > 0) {
			CHECK(strcmp(fs[nf - 1].path, file2) == 0);
			CHECK_EQ(fs[nf - 1].chosen, GPUFILE_PATH_POSIX);
			CHECK_CONTAINS(fs[nf - 1].reason, "5027");
			CHECK(!strstr(fs[nf - 1].reason, "compat_mode=off"));
		}
	}
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_OFF), 0);
	gpufile_close(b);
	gpufile_close(a);

	/* Driver open refused. */
	phase("off");
	setenv("FAKE_CUFILE_FAIL_OPEN", "5001", 1);
	CHECK_EQ(gpufile_open(&b, file2, "r"), 0);
	n = gpufile_pread(b, dev, 4 * MiB, 0);
	CHECK_EQ(n, GPUFILE_ECUFILE);
	CHECK(strstr(gpufile_errmsg(),
	             "CU_FILE_DRIVER_NOT_INITIALIZED (5001)") != NULL);
	gpufile_close(b);
	gpufile_set_compat_mode(GPUFILE_COMPAT_AUTO);
	gpufile__platform.p2pdma_possible = p2pdma_possible;
	CHECK_EQ(gpufile_open(&b, file2, "r"), 0);
	CHECK_EQ(gpufile_pread(b, dev, 4 * MiB, 0), (ssize_t)(4 * MiB));
	CHECK_EQ(gpufile_path_info(b, &p, reason, sizeof(reason)), 0);
	CHECK(strstr(reason, "cuFileDriverOpen failed") != NULL);
	CHECK_EQ(fake().driver_open, 1); /* not retried */
	gpufile_close(b);

	/* Library missing. */
	phase("off");
	CHECK_EQ(
	    gpufile_config_set("cufile_library", "/nonexistent/libcufile.so.0"),
	    0);
	CHECK_EQ(gpufile_open(&b, file2, "r"), 0);
	CHECK_EQ(gpufile_pread(b, dev, 4 * MiB, 0), GPUFILE_ENOCUFILE);
	CHECK(strstr(gpufile_errmsg(), "/nonexistent/libcufile.so.0") != NULL);
	gpufile_close(b);
	gpufile_set_compat_mode(GPUFILE_COMPAT_AUTO);
	gpufile__platform.p2pdma_possible = p2pdma_possible;
	CHECK_EQ(gpufile_open(&b, file2, "r"), 0);
	CHECK_EQ(gpufile_pread(b, dev, 4 * MiB, 0), (ssize_t)(4 * MiB));
	CHECK(check_pattern(dev, 4 * MiB, 2, 0));
	gpufile_close(b);
	gpufile_device_free(dev);
}

static int refuse_direct(const char *path, int flags, mode_t mode)
{
	if (flags & O_DIRECT) {
		errno = EINVAL;
		return -1;
	}
	return open(path, flags, mode);
}

/* A file system that refuses O_DIRECT. */
static void test_no_direct(const char *file)
{
	gpufile_t *h;
	gpufile_path_t p;
	char reason[512];
	char *dev = dev_alloc(4 * MiB);

	phase("off");
	gpufile__sys.open = refuse_direct;
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread(h, dev, 4 * MiB, 0), -EINVAL);
	CHECK(strstr(gpufile_errmsg(), "O_DIRECT refused") != NULL);
	gpufile_close(h);
	gpufile_set_compat_mode(GPUFILE_COMPAT_AUTO);
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread(h, dev, 4 * MiB, 0), (ssize_t)(4 * MiB));
	CHECK(check_pattern(dev, 4 * MiB, 1, 0));
	CHECK_EQ(gpufile_path_info(h, &p, reason, sizeof(reason)), 0);
	CHECK(strstr(reason, "O_DIRECT refused") != NULL);
	gpufile_close(h);
	gpufile__sys_reset();
	gpufile_device_free(dev);
}

/* Registered buffers, and cuFile's counters as the second layer. */
static void test_buffers_and_stats(const char *file)
{
	gpufile_t *h;
	gpufile_cufile_info_t info;
	char *dev = dev_alloc(8 * MiB);
	char *host = malloc(MiB);

	phase("on");
	CHECK_EQ(gpufile_buf_register(dev, 8 * MiB, 0), 0); /* no-op */
	CHECK(!fake_loaded());

	phase("auto");
	CHECK_EQ(gpufile_config_set("cufile_accel_only", "off"), 0);
	CHECK_EQ(gpufile_config_set("cufile_stats", "3"), 0);
	CHECK_EQ(gpufile_buf_register(host, MiB, 0), 0); /* host: no-op */
	CHECK_EQ(gpufile_buf_register(dev, 8 * MiB, 0), 0);
	CHECK_EQ(fake().buf_register, 1);
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread(h, dev + MiB + 4096, 2 * MiB, 0),
	         (ssize_t)(2 * MiB));
	CHECK(check_pattern(dev + MiB + 4096, 2 * MiB, 1, 0));
	CHECK(fake().last_base == dev);
	CHECK_EQ(fake().last_buf_offset, (int64_t)(MiB + 4096));
	GPUFILE_INIT(info);
	CHECK_EQ(gpufile_cufile_info(&info), 0);
	CHECK(info.loaded && info.driver_open);
	CHECK_EQ(info.version, 1150);
	CHECK_EQ(info.stats_level, 3);
	CHECK(info.stats_layout_verified);
	CHECK_EQ(info.ngpus, 1);
	CHECK_EQ(info.gpu[0].posix_reads, 1);
	CHECK_EQ(info.gpu[0].nvfs_reads, 0);
	CHECK(info.optional & 4);
	CHECK_EQ(gpufile_buf_deregister(dev), 0);
	CHECK_EQ(fake().buf_deregister, 1);
	CHECK_EQ(gpufile_pread(h, dev + MiB, MiB, 0), (ssize_t)MiB);
	CHECK(fake().last_base == dev + MiB);
	/* cuFile's counters reach the statistics (gpufile stats PID)
	 * however an asynchronous read is waited for: wait_for, or a free
	 * without a wait. */
	{
		gpufile_future_t *f = NULL;
		gpufile_stats_t s;

		CHECK_EQ(gpufile_pread_async(h, dev, MiB, 0, &f), 0);
		while (gpufile_future_wait_for(f, 1000) == -ETIMEDOUT)
			;
		GPUFILE_INIT(s);
		gpufile_stats_self(&s);
		CHECK_EQ(s.cufile_ngpus, 1);
		CHECK_EQ(s.cufile[0].posix_reads, 3);
		gpufile_future_free(f);
		CHECK_EQ(gpufile_pread_async(h, dev, MiB, 0, &f), 0);
		gpufile_future_free(f);
		gpufile_stats_self(&s);
		CHECK_EQ(s.cufile[0].posix_reads, 4);
	}
	gpufile_close(h);
	CHECK_EQ(fake().handle_deregister, 1);
	CHECK(strcmp(gpufile_cufile_status_name(5027),
	             "CU_FILE_HANDLE_NOT_REGISTERED") == 0);
	free(host);
	gpufile_device_free(dev);
}

/* 1 GiB at the default 4 MiB task size reaches cuFile as 256 reads. */
static void test_split(void)
{
	const size_t gib = 1u << 30;
	const char *big = test_path("big");
	gpufile_t *h;
	char *dev;
	int fd = open(big, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	unsigned char tail[4096];

	CHECK(fd >= 0);
	if (fd < 0)
		return;
	/* Sparse, with a pattern in the last page. */
	test_fill(tail, sizeof(tail), 5, gib - sizeof(tail));
	CHECK_EQ(pwrite(fd, tail, sizeof(tail), (off_t)(gib - sizeof(tail))),
	         (ssize_t)sizeof(tail));
	close(fd);
	dev = dev_alloc(gib);
	CHECK(dev != NULL);
	if (!dev)
		return;
	phase("off");
	CHECK_EQ(gpufile_open(&h, big, "r"), 0);
	CHECK_EQ(gpufile_pread(h, dev, gib, 0), (ssize_t)gib);
	CHECK_EQ(fake().reads, 256);
	CHECK_EQ(fake().min_io, 4 * MiB);
	CHECK_EQ(fake().max_io, 4 * MiB);
	CHECK_EQ(fake().read_bytes, gib);
	CHECK(memcmp(dev + gib - sizeof(tail), tail, sizeof(tail)) == 0);
	CHECK(dev[0] == 0 && dev[gib / 2] == 0);
	gpufile_close(h);
	gpufile_device_free(dev);
	unlink(big);
}

int main(void)
{
	const char *file = test_path("data");
	const char *file2 = test_path("data2");
	const char *wfile = test_path("written");
	int fd;

	/* The tests need a file system that takes O_DIRECT. */
	if (test_make_file(file, 16 * MiB, 1) ||
	    test_make_file(file2, 4 * MiB, 2))
		return 1;
	fd = open(file, O_RDONLY | O_DIRECT);
	if (fd < 0) {
		fprintf(stderr, "test_cufile: %s refuses O_DIRECT: skipped\n",
		        test_dir());
		test_cleanup();
		return TEST_SKIP;
	}
	close(fd);
	gpufile__cuda_override(&fake_cuda);

	test_host_never(file);
	test_on(file);
	test_auto_rule(file);
	test_threshold(file, wfile);
	test_fallback(file, file2);
	test_no_direct(file);
	test_buffers_and_stats(file);
	test_split();

	gpufile__cufile_reset();
	gpufile_release();
	gpufile__cuda_override(NULL);
	return test_finish("test_cufile");
}
