/*
 * test_stream_queue on a real GPU: stream-ordered reads into host memory
 * while every stream shares one hardware queue
 * (CUDA_DEVICE_MAX_CONNECTIONS=1, set before the driver starts). The
 * caller's stream is held by a host function (the "kernel" before the
 * request) and then by the request's flag wait; a device read of another
 * file keeps both pool workers waiting for copies that the driver queues
 * behind them. The host request, of a local file and of a remote object
 * (tests/remote/fault_server.py), must end all the same, and the device
 * read with it. Whether the driver did hold the copies back is printed
 * (the device read had not ended 2 s into the hold), not asserted: it is
 * the driver's choice. A hang fails by alarm(). Skips (77) without a GPU.
 */
#define _GNU_SOURCE
#include "remote/helpers.h"
#include "testlib.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>

#define NTHREADS   2
#define DEV_READ   (4u << 20)
#define LOCAL_SIZE (4u << 20)
#define SEED_DEV   91
#define SEED_LOCAL 92
#define OBJ_SIZE   ((size_t)(1u << 20) + 77)

typedef int CUresult;
typedef void *CUstream;
typedef void (*CUhostFn)(void *);

static struct {
	CUresult (*cuStreamCreate)(CUstream *, unsigned);
	CUresult (*cuStreamDestroy)(CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuLaunchHostFunc)(CUstream, CUhostFn, void *);
	CUresult (*cuMemcpyDtoH)(void *, unsigned long long, size_t);
} cu;

static int load_driver(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);

	if (!lib)
		return -1;
	cu.cuStreamCreate = dlsym(lib, "cuStreamCreate");
	cu.cuStreamDestroy = dlsym(lib, "cuStreamDestroy_v2");
	cu.cuStreamSynchronize = dlsym(lib, "cuStreamSynchronize");
	cu.cuLaunchHostFunc = dlsym(lib, "cuLaunchHostFunc");
	cu.cuMemcpyDtoH = dlsym(lib, "cuMemcpyDtoH_v2");
	return cu.cuStreamCreate && cu.cuStreamDestroy &&
	               cu.cuStreamSynchronize && cu.cuLaunchHostFunc &&
	               cu.cuMemcpyDtoH
	           ? 0
	           : -1;
}

/* ---- the host function that holds the caller's stream ---- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int gate_entered, gate_open, dev_done;

static void gate(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&lock);
	gate_entered = 1;
	pthread_cond_broadcast(&cond);
	while (!gate_open)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
}

/* ---- the device read ---- */

struct dev_read {
	gpufile_t *h;
	void *dst;
	ssize_t n;
};

static void *dev_read_run(void *arg)
{
	struct dev_read *d = arg;

	d->n = gpufile_pread(d->h, d->dst, DEV_READ, 0);
	pthread_mutex_lock(&lock);
	dev_done = 1;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	return NULL;
}

/* Whether the device read was still running 2 s into the hold. */
static int dev_held_back(void)
{
	struct timespec until;
	int held;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 2;
	pthread_mutex_lock(&lock);
	while (!dev_done &&
	       pthread_cond_timedwait(&cond, &lock, &until) != ETIMEDOUT)
		;
	held = !dev_done;
	pthread_mutex_unlock(&lock);
	return held;
}

static void held_host_read(gpufile_t *src, gpufile_t *dev, void *dst,
                           unsigned char *host, size_t len,
                           size_t (*bad)(const unsigned char *),
                           const char *what)
{
	struct dev_read d = {dev, dst, -777};
	unsigned char *back = malloc(DEV_READ);
	CUstream a = NULL;
	pthread_t t;
	ssize_t n = -777;

	pthread_mutex_lock(&lock);
	gate_entered = gate_open = dev_done = 0;
	pthread_mutex_unlock(&lock);
	CHECK_EQ(cu.cuStreamCreate(&a, 1 /* NON_BLOCKING */), 0);
	CHECK_EQ(cu.cuLaunchHostFunc(a, gate, NULL), 0);
	CHECK_EQ(gpufile_read_async(src, host, len, 0, a, &n), 0);
	pthread_mutex_lock(&lock);
	while (!gate_entered)
		pthread_cond_wait(&cond, &lock);
	pthread_mutex_unlock(&lock);
	CHECK_EQ(pthread_create(&t, NULL, dev_read_run, &d), 0);
	printf("%s: the device read %s\n", what,
	       dev_held_back() ? "was held back behind the stream (one "
	                         "queue reached)"
	                       : "ended during the hold (the driver did not "
	                         "share the queue)");
	pthread_mutex_lock(&lock);
	gate_open = 1;
	pthread_cond_broadcast(&cond);
	pthread_mutex_unlock(&lock);
	pthread_join(t, NULL);
	CHECK_EQ(cu.cuStreamSynchronize(a), 0);
	CHECK_EQ(n, (ssize_t)len);
	CHECK_EQ(bad(host), 0);
	CHECK_EQ(d.n, DEV_READ);
	CHECK(back != NULL);
	if (back) {
		CHECK_EQ(cu.cuMemcpyDtoH(back,
		                         (unsigned long long)(uintptr_t)dst,
		                         DEV_READ),
		         0);
		CHECK_EQ(test_mismatch(back, DEV_READ, SEED_DEV, 0), -1);
	}
	free(back);
	CHECK_EQ(cu.cuStreamDestroy(a), 0);
}

static size_t local_bad(const unsigned char *p)
{
	return test_mismatch(p, LOCAL_SIZE, SEED_LOCAL, 0) != -1;
}

static size_t object_bad(const unsigned char *p)
{
	return dest_bad(p, OBJ_SIZE, 0, 1);
}

static void remote_read(gpufile_t *dev, void *dst)
{
	char url[256];
	unsigned char *host;
	gpufile_t *h = NULL;
	pid_t pid = fault_server_ok(OBJ_SIZE, url, sizeof(url));

	if (pid < 0)
		return;
	host = dest_new(OBJ_SIZE);
	CHECK(host != NULL);
	CHECK_EQ(gpufile_open(&h, url, "r"), 0);
	if (h && host)
		held_host_read(h, dev, dst, host, OBJ_SIZE, object_bad,
		               "remote object into host memory");
	gpufile_close(h);
	dest_free(host);
	server_stop(pid);
}

int main(void)
{
	gpufile_t *dev = NULL, *local = NULL;
	unsigned char *host;
	const char *dev_path, *local_path;
	void *dst = NULL;

	/* Before the driver starts: gpufile_cuda_device_count starts it. */
	setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
	if (gpufile_cuda_device_count() <= 0) {
		printf("test_gpu_stream_queue: skipped: %s\n",
		       gpufile_errmsg());
		return TEST_SKIP;
	}
	host = malloc(LOCAL_SIZE);
	if (!host || load_driver()) {
		fprintf(stderr, "cannot reach libcuda.so.1's entry points\n");
		return 1;
	}
	alarm(120); /* a hang is a failure, not a stuck test */
	dev_path = strdup(test_path("gpu-queue-dev"));
	local_path = strdup(test_path("gpu-queue-local"));
	CHECK_EQ(test_make_file(dev_path, DEV_READ, SEED_DEV), 0);
	CHECK_EQ(test_make_file(local_path, LOCAL_SIZE, SEED_LOCAL), 0);
	/* The device read goes through the bounce buffers and copies on
	 * the workers' streams (compat_mode on: no cuFile). */
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
	CHECK_EQ(gpufile_set_nthreads(NTHREADS), 0);
	CHECK_EQ(gpufile_config_set("task_size", "1MiB"), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffer_size", "256KiB"), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffers", "2"), 0);
	CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);
	CHECK_EQ(gpufile_config_set("host_map_copy", "off"), 0);
	CHECK_EQ(gpufile_config_set("remote_task_size", "64KiB"), 0);
	/* Makes device 0's primary context current in this thread. */
	if (gpufile_device_alloc(0, DEV_READ, &dst)) {
		fprintf(stderr, "gpufile_device_alloc: %s\n", gpufile_errmsg());
		return 1;
	}
	CHECK_EQ(gpufile_open(&dev, dev_path, "r"), 0);
	CHECK_EQ(gpufile_open(&local, local_path, "r"), 0);
	if (dev && local) {
		held_host_read(local, dev, dst, host, LOCAL_SIZE, local_bad,
		               "local file into host memory");
		remote_read(dev, dst);
	}
	gpufile_close(local);
	gpufile_close(dev);
	CHECK_EQ(gpufile_device_free(dst), 0);
	free(host);
	gpufile_release();
	test_cleanup();
	return test_finish("test_gpu_stream_queue");
}
