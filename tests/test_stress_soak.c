/*
 * Soak: 32 threads issue random reads and writes (1 B to GPUFILE_SOAK_MAX_IO,
 * default 64 MiB, log-uniform; random offsets; sync and async; host and
 * device buffers) on 8 handles for GPUFILE_SOAK_SECONDS (default 10), and
 * every byte read is checked against a model (4 s and 8 MiB by default
 * under TSan). Each thread owns one quarter of one file, so the model needs no
 * lock: a list of extents, each holding the seed its bytes were written with
 * (test_fill), 0 for the zeros of the sparse file. Device buffers are real GPU
 * memory where a GPU exists, else a fake driver's (tests/fake_cuda.h).
 *
 * Then a flood: GPUFILE_SOAK_FLOOD (default 20000) async requests submitted
 * without waiting, with the default max_inflight: submitters must block
 * (back-pressure), so peak RSS (VmHWM) and pinned memory stay bounded.
 */
#define _GNU_SOURCE
#define NTHREADS 32
#define DEV_SIZE ((size_t)NTHREADS * max_io_const)
#include "testlib.h"
#include "internal.h"

static size_t max_io_const = 64u << 20;

#include "fake_cuda.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define NHANDLES 8
/* Shorter under TSan (scripts/test.sh runs this test there too). */
#if defined(__SANITIZE_THREAD__)
#define DEFAULT_SECONDS 4.0
#define DEFAULT_MAX_IO  (8u << 20)
#else
#define DEFAULT_SECONDS 10.0
#define DEFAULT_MAX_IO  (64u << 20)
#endif
/* Sanitizers' shadow memory inflates RSS several times. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define RSS_SLACK 4
#else
#define RSS_SLACK 1
#endif
#define PER_FILE (NTHREADS / NHANDLES)

static size_t max_io;
static size_t slice; /* bytes each thread owns */
static double seconds;
static gpufile_t *handles[NHANDLES];
static int real_gpu;
static const struct gpufile__cuda *cu; /* real driver when real_gpu */
static CUcontext gpu_ctx;              /* device 0's primary context */
static atomic_ullong ops, bytes_verified, bytes_written, async_ops, dev_ops;
static atomic_int stop;

struct extent {
	int64_t start, end;
	uint64_t seed; /* 0: zeros */
};

struct worker {
	int id;
	gpufile_t *h;
	int64_t base; /* the slice's start in the file */
	struct extent *ext;
	size_t next, cap;
	uint64_t rng;
	unsigned char *host;
	unsigned char *dev;     /* device buffer (fake: inside dev_base) */
	unsigned char *staging; /* host copy of a real device buffer */
	int failed;
};

static uint64_t rnd(struct worker *w)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return w->rng;
}

/* Records that [start, end) now holds seed's pattern. */
static void model_write(struct worker *w, int64_t start, int64_t end,
                        uint64_t seed)
{
	struct extent *out;
	size_t n = 0;

	out = test_malloc((w->next + 3) * sizeof(*out));
	for (size_t i = 0; i < w->next; i++) {
		struct extent e = w->ext[i];
		if (e.end <= start || e.start >= end) {
			out[n++] = e;
			continue;
		}
		if (e.start < start)
			out[n++] = (struct extent){e.start, start, e.seed};
		if (e.end > end)
			out[n++] = (struct extent){end, e.end, e.seed};
	}
	out[n++] = (struct extent){start, end, seed};
	free(w->ext);
	w->ext = out;
	w->next = n;
}

/* Checks buf against the model for [start, start+len). */
static int model_check(struct worker *w, const unsigned char *buf,
                       int64_t start, size_t len)
{
	const int64_t end = start + (int64_t)len;
	uint64_t covered = 0;

	for (size_t i = 0; i < w->next; i++) {
		const struct extent *e = &w->ext[i];
		int64_t s = e->start > start ? e->start : start;
		int64_t t = e->end < end ? e->end : end;
		long long bad;

		if (s >= t)
			continue;
		bad = e->seed
		          ? test_mismatch(buf + (s - start), (size_t)(t - s),
		                          e->seed, (uint64_t)s)
		          : test_mismatch_byte(buf + (s - start),
		                               (size_t)(t - s), 0);
		if (bad != -1) {
			fprintf(stderr,
			        "thread %d: byte at file offset %lld differs "
			        "(read [%lld, +%zu), extent seed %llu)\n",
			        w->id, (long long)(s + bad), (long long)start,
			        len, (unsigned long long)e->seed);
			return -1;
		}
		covered += (uint64_t)(t - s);
	}
	return covered == len ? 0 : -1;
}

static ssize_t do_io(struct worker *w, void *buf, size_t len, int64_t off,
                     int is_write, int async)
{
	gpufile_future_t *f;
	ssize_t n;
	int rc;

	if (!async)
		return is_write ? gpufile_pwrite(w->h, buf, len, off)
		                : gpufile_pread(w->h, buf, len, off);
	rc = is_write ? gpufile_pwrite_async(w->h, buf, len, off, &f)
	              : gpufile_pread_async(w->h, buf, len, off, &f);
	if (rc)
		return rc;
	n = gpufile_future_wait(f);
	gpufile_future_free(f);
	atomic_fetch_add(&async_ops, 1);
	return n;
}

/* The test's own copies between its staging buffer and device memory;
 * a failed copy fails the thread (it would leave stale bytes that look
 * like a gpufile error). */
static int test_copy(struct worker *w, void *dst, const void *src, size_t len)
{
	CUresult rc = cu->cuMemcpy((CUdeviceptr)(uintptr_t)dst,
	                           (CUdeviceptr)(uintptr_t)src, len);

	/* cuMemcpy from pageable memory returns once the bytes are staged,
	 * before the DMA to the device has finished; gpufile's copies run on
	 * non-blocking streams, so the device bytes must be final before the
	 * buffer is handed to gpufile_pwrite (the header's contract). */
	if (rc == CUDA_SUCCESS)
		rc = cu->cuStreamSynchronize(NULL);

	if (rc != CUDA_SUCCESS) {
		fprintf(stderr, "thread %d: test's cuMemcpy of %zu bytes: %d\n",
		        w->id, len, rc);
		w->failed = 1;
	}
	return rc != CUDA_SUCCESS;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	/* A new thread has no current context: cuMemcpy would fail. */
	if (real_gpu && cu->cuCtxSetCurrent(gpu_ctx) != CUDA_SUCCESS) {
		w->failed = 1;
		return NULL;
	}

	while (!atomic_load(&stop) && !w->failed) {
		/* log-uniform size in [1, max_io] */
		const unsigned bits = 64 - (unsigned)__builtin_clzll(max_io);
		const unsigned k = (unsigned)(rnd(w) % bits);
		size_t len =
		    ((size_t)1 << k) + (size_t)(rnd(w) % ((size_t)1 << k));
		int is_write = rnd(w) % 2;
		int async = rnd(w) % 2;
		int device = rnd(w) % 3 == 0;
		int64_t off;
		unsigned char *buf = device ? w->dev : w->host;
		ssize_t n;

		if (len < 1)
			len = 1;
		if (len > max_io)
			len = max_io;
		off = w->base + (int64_t)(rnd(w) % (slice - len + 1));
		if (is_write) {
			uint64_t seed = rnd(w) | 1;
			if (device && real_gpu) {
				test_fill(w->staging, len, seed, (uint64_t)off);
				if (test_copy(w, buf, w->staging, len))
					break;
			} else {
				test_fill(buf, len, seed, (uint64_t)off);
			}
			n = do_io(w, buf, len, off, 1, async);
			if (n != (ssize_t)len) {
				fprintf(
				    stderr,
				    "thread %d: write %zu at %lld: %zd %s\n",
				    w->id, len, (long long)off, n,
				    gpufile_errmsg());
				w->failed = 1;
				break;
			}
			model_write(w, off, off + (int64_t)len, seed);
			atomic_fetch_add(&bytes_written, len);
		} else {
			n = do_io(w, buf, len, off, 0, async);
			if (n != (ssize_t)len) {
				fprintf(stderr,
				        "thread %d: read %zu at %lld: %zd %s\n",
				        w->id, len, (long long)off, n,
				        gpufile_errmsg());
				w->failed = 1;
				break;
			}
			if (device && real_gpu) {
				if (test_copy(w, w->staging, buf, len))
					break;
				buf = w->staging;
			}
			if (model_check(w, buf, off, len)) {
				w->failed = 1;
				break;
			}
			atomic_fetch_add(&bytes_verified, len);
		}
		atomic_fetch_add(&ops, 1);
		if (device)
			atomic_fetch_add(&dev_ops, 1);
	}
	return NULL;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long vm_hwm_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;

	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld", &v) == 1)
			break;
	if (f)
		fclose(f);
	return v;
}

static void soak(void)
{
	static struct worker w[NTHREADS];
	pthread_t t[NTHREADS];
	double t0 = now(), elapsed;
	int failed = 0;

	for (int i = 0; i < NTHREADS; i++) {
		w[i].id = i;
		w[i].h = handles[i / PER_FILE];
		w[i].base = (int64_t)(i % PER_FILE) * (int64_t)slice;
		w[i].rng = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
		w[i].host = test_malloc(max_io);
		w[i].ext = test_malloc(sizeof(struct extent));
		w[i].ext[0] =
		    (struct extent){w[i].base, w[i].base + (int64_t)slice, 0};
		w[i].next = 1;
		if (real_gpu) {
			CUdeviceptr p = 0;
			if (cu->cuMemAlloc(&p, max_io) != CUDA_SUCCESS)
				w[i].dev = w[i].host; /* no room: host only */
			w[i].dev =
			    p ? (unsigned char *)(uintptr_t)p : w[i].host;
			w[i].staging = test_malloc(max_io);
		} else {
			w[i].dev = dev_base + (size_t)i * max_io;
		}
		CHECK_EQ(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
	}
	while (now() - t0 < seconds) {
		int any = 0;
		for (int i = 0; i < NTHREADS; i++)
			any |= w[i].failed;
		if (any)
			break;
		test_sleep_ms(100);
	}
	atomic_store(&stop, 1);
	for (int i = 0; i < NTHREADS; i++) {
		pthread_join(t[i], NULL);
		failed |= w[i].failed;
		free(w[i].host);
		free(w[i].staging);
		free(w[i].ext);
		if (real_gpu && w[i].dev != w[i].host)
			cu->cuMemFree((CUdeviceptr)(uintptr_t)w[i].dev);
	}
	elapsed = now() - t0;
	CHECK(!failed);
	CHECK(atomic_load(&ops) > 0);
	printf("soak: %.1f s, %d threads, %d handles, %s device buffers: "
	       "%llu ops (%llu async, %llu device), %llu bytes verified, "
	       "%llu bytes written\n",
	       elapsed, NTHREADS, NHANDLES, real_gpu ? "GPU" : "fake",
	       (unsigned long long)ops, (unsigned long long)async_ops,
	       (unsigned long long)dev_ops, (unsigned long long)bytes_verified,
	       (unsigned long long)bytes_written);
}

/* Many thousands of async requests submitted without waiting. */
static void flood(void)
{
	const char *e = getenv("GPUFILE_SOAK_FLOOD");
	const int n = e && *e ? atoi(e) : 20000;
	const size_t req = 16u << 10, nslots = 256;
	gpufile_future_t **f = test_malloc((size_t)n * sizeof(*f));
	unsigned char *host = test_malloc(nslots * req);
	unsigned char *dev = real_gpu ? NULL : dev_base;
	long hwm0 = vm_hwm_kib(), hwm1;
	size_t pinned_before;
	int bad = 0, ndev = 0;
	double t0 = now();

	pthread_mutex_lock(&fake_lock);
	pinned_before = pinned_live;
	pinned_peak = pinned_live;
	pthread_mutex_unlock(&fake_lock);
	for (int i = 0; i < n; i++) {
		/* Every 4th into (fake) device memory; distinct slots so no two
		 * requests in flight share bytes. */
		size_t slot = (size_t)i % nslots;
		int device = dev && i % 4 == 0;
		unsigned char *buf =
		    device ? dev + slot * req : host + slot * req;
		int rc;

		if (i >= (int)nslots) {
			/* The slot's previous request must have ended. */
			CHECK(gpufile_future_wait(f[i - nslots]) ==
			      (ssize_t)req);
			gpufile_future_free(f[i - nslots]);
			f[i - nslots] = NULL;
		}
		rc = gpufile_pread_async(handles[i % NHANDLES], buf, req,
		                         (int64_t)(slot * req), &f[i]);
		if (rc) {
			fprintf(stderr, "flood: submit %d: %s\n", i,
			        gpufile_errmsg());
			f[i] = NULL;
			bad++;
		}
		ndev += device;
	}
	for (int i = n > (int)nslots ? n - (int)nslots : 0; i < n; i++) {
		if (f[i] && gpufile_future_wait(f[i]) != (ssize_t)req)
			bad++;
		gpufile_future_free(f[i]);
	}
	hwm1 = vm_hwm_kib();
	CHECK_EQ(bad, 0);
	pthread_mutex_lock(&fake_lock);
	printf("flood: %d async requests (%d device) in %.2f s; peak RSS "
	       "%ld KiB (+%ld KiB); pinned peak %zu bytes (bound %zu)\n",
	       n, ndev, now() - t0, hwm1, hwm1 - hwm0, pinned_peak,
	       gpufile_pinned_bytes_max());
	if (!real_gpu) {
		CHECK(pinned_peak <= gpufile_pinned_bytes_max() ||
		      pinned_peak <= pinned_before);
	}
	pthread_mutex_unlock(&fake_lock);
	CHECK(hwm1 - hwm0 <
	      RSS_SLACK * 256 * 1024); /* bounded: not per-request growth */
	free(f);
	free(host);
}

/* The same, but 20000 requests whose futures are all held at once:
 * submission blocks at max_inflight (back-pressure). */
static void flood_held(void)
{
	const char *e = getenv("GPUFILE_SOAK_FLOOD");
	const int n = e && *e ? atoi(e) : 20000;
	gpufile_future_t **f = test_malloc((size_t)n * sizeof(*f));
	unsigned char *buf = test_malloc((size_t)n);
	long hwm0 = vm_hwm_kib(), hwm1;
	int bad = 0;

	/* Request i reads byte i of the file into buf[i]: only the
	 * library's memory grows with the number of requests. */
	for (int i = 0; i < n; i++)
		if (gpufile_pread_async(handles[0], buf + i, 1, i, &f[i])) {
			f[i] = NULL;
			bad++;
		}
	for (int i = 0; i < n; i++) {
		if (f[i] && gpufile_future_wait(f[i]) != 1)
			bad++;
		gpufile_future_free(f[i]);
	}
	CHECK_EQ(test_mismatch_byte(buf, (size_t)n, 0), -1); /* sparse */
	hwm1 = vm_hwm_kib();
	CHECK_EQ(bad, 0);
	printf("flood (all futures held): %d requests, peak RSS %ld KiB "
	       "(+%ld KiB, %.0f bytes per request)\n",
	       n, hwm1, hwm1 - hwm0, (hwm1 - hwm0) * 1024.0 / n);
	CHECK(hwm1 - hwm0 < RSS_SLACK * 128 * 1024);
	free(f);
	free(buf);
}

int main(void)
{
	const char *e = getenv("GPUFILE_SOAK_SECONDS");
	const char *m = getenv("GPUFILE_SOAK_MAX_IO");
	uint64_t v;

	setvbuf(stdout, NULL, _IOLBF, 0);
	seconds = e && *e ? atof(e) : DEFAULT_SECONDS;
	max_io = DEFAULT_MAX_IO;
	if (m && *m && gpufile__parse_size(m, &v) == 0 && v >= 4096)
		max_io = (size_t)v;
	max_io_const = max_io;
	slice = max_io + (1u << 20);

	real_gpu = gpufile_cuda_device_count() > 0;
	if (real_gpu) {
		cu = gpufile__cuda();
		CUdevice d;
		if (!cu || cu->cuDeviceGet(&d, 0) ||
		    cu->cuDevicePrimaryCtxRetain(&gpu_ctx, d) ||
		    cu->cuCtxSetCurrent(gpu_ctx))
			real_gpu = 0;
	}
	gpufile__clear_error();
	if (!real_gpu) {
		/* Reserved, not committed: only pages used take memory. */
		dev_base =
		    mmap(NULL, DEV_SIZE, PROT_READ | PROT_WRITE,
		         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (dev_base == MAP_FAILED)
			return 1;
		gpufile__cuda_override(&fake);
		gpufile_config_set("compat_mode", "on");
	}
	for (int i = 0; i < NHANDLES; i++) {
		char name[32];
		const char *p;
		int fd;

		snprintf(name, sizeof(name), "soak%d.bin", i);
		p = test_path(name);
		fd = open(p, O_RDWR | O_CREAT | O_TRUNC, 0644);
		if (fd < 0 || ftruncate(fd, (off_t)(slice * PER_FILE)) < 0)
			return 1;
		close(fd);
		if (gpufile_open(&handles[i], p, "r+")) {
			fprintf(stderr, "open %s: %s\n", p, gpufile_errmsg());
			return 1;
		}
	}
	/* The floods first: VmHWM is a high-water mark, and the soak's
	 * 64 MiB buffers would hide theirs. */
	flood();
	flood_held();
	soak();
	for (int i = 0; i < NHANDLES; i++)
		CHECK_EQ(gpufile_close(handles[i]), 0);
	gpufile_release();
	if (!real_gpu) {
		pthread_mutex_lock(&fake_lock);
		CHECK_EQ(bad_copies, 0);
		CHECK_EQ(pinned_count, 0);
		pthread_mutex_unlock(&fake_lock);
		gpufile__cuda_override(NULL);
		munmap(dev_base, DEV_SIZE);
	}
	return test_finish("test_stress_soak");
}
