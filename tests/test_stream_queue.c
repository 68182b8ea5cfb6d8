/*
 * Stream-ordered reads into host memory when every stream of the GPU
 * shares one hardware queue (fake_cuda.h's fake_one_queue: the worst case
 * a driver can give). The caller's stream is held by a flag wait that only
 * the request's end releases, and work queued after it on gpufile's own
 * copy streams cannot run before it. Here a device read keeps every pool
 * worker waiting for a copy stuck behind the held stream when the stream
 * reaches the host request: the request must end all the same (the thread
 * that waits for it runs its tasks), for a local file and for a remote
 * object (tests/remote/fault_server.py). A hang fails by alarm().
 */
#define _GNU_SOURCE
#include "remote/helpers.h"
#include "testlib.h"

#include "fake_cuda.h"
#include <pthread.h>

#define NTHREADS   2
#define DEV_READ   (4u << 20)
#define LOCAL_SIZE (4u << 20)
#define SEED_DEV   71
#define SEED_LOCAL 72
#define OBJ_SIZE   ((size_t)(1u << 20) + 77)

/* ---- a "kernel" on the caller's stream that runs until opened ---- */

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_entered, gate_open;

static void gate(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&gate_lock);
	gate_entered = 1;
	pthread_cond_broadcast(&gate_cond);
	while (!gate_open)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
}

static void gate_wait_entered(void)
{
	pthread_mutex_lock(&gate_lock);
	while (!gate_entered)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
}

static void gate_set_open(int open)
{
	pthread_mutex_lock(&gate_lock);
	gate_open = open;
	if (!open)
		gate_entered = 0;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

/* ---- the device read that occupies the workers ---- */

struct dev_read {
	gpufile_t *h;
	ssize_t n;
};

static void *dev_read_run(void *arg)
{
	struct dev_read *d = arg;

	d->n = gpufile_pread(d->h, dev_base, DEV_READ, 0);
	return NULL;
}

/* Reads len bytes of src into host (its bytes checked by bad(host)) on a
 * stream held by the gate, while a device read of dev holds every
 * worker behind the stream. */
static void held_host_read(gpufile_t *src, gpufile_t *dev, unsigned char *host,
                           size_t len, size_t (*bad)(const unsigned char *),
                           const char *what)
{
	struct dev_read d = {dev, -777};
	CUstream a;
	pthread_t t;
	ssize_t n = -777;

	printf("%s\n", what);
	memset(dev_base, 0, DEV_READ);
	gate_set_open(0);
	CHECK_EQ(fake.cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), 0);
	CHECK_EQ(fake.cuLaunchHostFunc(a, gate, NULL), 0);
	CHECK_EQ(gpufile_read_async(src, host, len, 0, a, &n), 0);
	/* The request's thread runs the stream up to the request: it is
	 * in the gate now, and the stream's flag wait is queued. */
	gate_wait_entered();
	CHECK_EQ(pthread_create(&t, NULL, dev_read_run, &d), 0);
	/* Each worker's copy queued behind the flag wait: every worker
	 * waits for the stream. */
	while (fake_read_int(&fake_queue_blocked) < NTHREADS)
		sched_yield();
	gate_set_open(1);
	pthread_join(t, NULL);
	CHECK_EQ(fake.cuStreamSynchronize(a), 0);
	CHECK_EQ(n, (ssize_t)len);
	CHECK_EQ(bad(host), 0);
	CHECK_EQ(d.n, DEV_READ);
	CHECK_EQ(test_mismatch(dev_base, DEV_READ, SEED_DEV, 0), -1);
	CHECK_EQ(fake.cuStreamDestroy(a), 0);
}

static size_t local_bad(const unsigned char *p)
{
	return test_mismatch(p, LOCAL_SIZE, SEED_LOCAL, 0) != -1;
}

static size_t object_bad(const unsigned char *p)
{
	return dest_bad(p, OBJ_SIZE, 0, 1);
}

static void remote_read(gpufile_t *dev)
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
		held_host_read(h, dev, host, OBJ_SIZE, object_bad,
		               "remote object into host memory, held stream");
	gpufile_close(h);
	dest_free(host);
	server_stop(pid);
}

int main(void)
{
	const char *dev_path = test_path("queue-dev");
	const char *local_path = test_path("queue-local");
	gpufile_t *dev = NULL, *local = NULL;
	unsigned char *host = malloc(LOCAL_SIZE);

	alarm(120); /* a hang is a failure, not a stuck test */
	fake_one_queue = 1;
	if (!host || fake_install() != 0)
		return 1;
	CHECK_EQ(test_make_file(dev_path, DEV_READ, SEED_DEV), 0);
	CHECK_EQ(test_make_file(local_path, LOCAL_SIZE, SEED_LOCAL), 0);
	CHECK_EQ(gpufile_set_nthreads(NTHREADS), 0);
	CHECK_EQ(gpufile_config_set("task_size", "1MiB"), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffer_size", "256KiB"), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffers", "2"), 0);
	CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);
	CHECK_EQ(gpufile_config_set("host_map_copy", "off"), 0);
	CHECK_EQ(gpufile_config_set("remote_task_size", "64KiB"), 0);
	CHECK_EQ(gpufile_open(&dev, dev_path, "r"), 0);
	CHECK_EQ(gpufile_open(&local, local_path, "r"), 0);
	if (dev && local) {
		held_host_read(local, dev, host, LOCAL_SIZE, local_bad,
		               "local file into host memory, held stream");
		remote_read(dev);
	}
	gpufile_close(local);
	gpufile_close(dev);
	free(host);
	gpufile_release();
	return test_finish("test_stream_queue");
}
