/*
 * Reads into more than one GPU from one process, without a GPU: the fake
 * driver (fake_cuda.h) presents NDEV devices, each with its own context,
 * streams and events that belong to a context, and refuses a copy on a
 * stream whose context is not current, as the real driver does.
 *
 * What must hold (issue 14 item 5: two 4 GiB reads into GPUs 0 and 1 at
 * once ran at 0.52x of one GPU because every worker reallocated its pinned
 * bounce buffers each time it moved to the other device's request):
 * - every byte lands on the right device, async and sync, several sizes,
 *   two threads reading into two devices at the same time;
 * - a worker moving between devices keeps its pinned buffers: no
 *   cuMemHostAlloc after the first reads, and no stream made per task;
 * - more devices than a stager keeps streams for still work (a stream is
 *   dropped, not leaked);
 * - gpufile_bounce_buffer_free() and gpufile_release() free every stream
 *   and event of every device.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"

#include <pthread.h>
#include <string.h>

#define DEV_SIZE  (6u << 20)
#define FILE_SIZE ((4u << 20) + 333)
#define NDEV      12 /* more than a stager keeps streams for */
#define SEED      23
#define NBUFS     4
#include "fake_cuda.h"

static const char *path;

/* Reads size bytes at off into device dev (sync, or as two async halves)
 * and checks every byte. 0 when right. */
static int read_check(gpufile_t *h, int dev, size_t size, int64_t off,
                      int async)
{
	unsigned char *dst = fake_dev_base(dev) + 512 * (size_t)dev;
	ssize_t n = -1;

	memset(dst, 0xA5, size);
	if (async) {
		const size_t half = size / 2;
		gpufile_future_t *f[2] = {NULL, NULL};
		ssize_t m[2] = {-1, -1};

		if (gpufile_pread_async(h, dst, half, off, &f[0]) == 0 &&
		    gpufile_pread_async(h, dst + half, size - half,
		                        off + (int64_t)half, &f[1]) == 0) {
			m[0] = gpufile_future_wait(f[0]);
			m[1] = gpufile_future_wait(f[1]);
		} else if (f[0]) {
			gpufile_future_wait(f[0]);
		}
		gpufile_future_free(f[0]);
		gpufile_future_free(f[1]);
		if (m[0] == (ssize_t)half && m[1] == (ssize_t)(size - half))
			n = (ssize_t)size;
	} else {
		n = gpufile_pread(h, dst, size, off);
	}
	if (n != (ssize_t)size ||
	    test_mismatch(dst, size, SEED, (uint64_t)off) != -1) {
		fprintf(stderr,
		        "  device %d %s read of %zu bytes at %lld: %zd %s\n",
		        dev, async ? "async" : "sync", size, (long long)off, n,
		        n < 0 ? gpufile_errmsg() : "(bytes differ)");
		return -1;
	}
	return 0;
}

static const size_t sizes[] = {4096 + 1, 200u << 10, (1u << 20) + 17,
                               FILE_SIZE};

/* Every size, sync and async, into dev. Number of failures. */
static int read_all_sizes(gpufile_t *h, int dev)
{
	int bad = 0;

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		const int64_t off =
		    sizes[i] == FILE_SIZE ? 0 : 777 * (int64_t)i;
		bad += read_check(h, dev, sizes[i], off, 0) != 0;
		bad += read_check(h, dev, sizes[i], off, 1) != 0;
	}
	return bad;
}

/* One worker alternating between two devices: its buffers stay. Before
 * the fix every switch freed and reallocated them. */
static void test_alternate(void)
{
	gpufile_t *h = NULL;
	long allocs, streams;

	CHECK_EQ(gpufile_set_nthreads(1), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return;
	CHECK_EQ(read_check(h, 0, FILE_SIZE, 0, 0), 0);
	CHECK_EQ(read_check(h, 1, FILE_SIZE, 0, 0), 0);
	allocs = fake_read_long(&hostalloc_calls);
	streams = fake_read_long(&streams_created);
	CHECK(allocs > 0);
	for (int round = 0; round < 3; round++) {
		CHECK_EQ(read_all_sizes(h, 0), 0);
		CHECK_EQ(read_all_sizes(h, 1), 0);
	}
	/* No pinned memory after the first reads, and no new stream: each
	 * device's stream is kept and found again. */
	CHECK_EQ(fake_read_long(&hostalloc_calls), allocs);
	CHECK_EQ(fake_read_long(&streams_created), streams);
	gpufile_close(h);
}

/* A worker whose move to another device fails half-way (the context
 * cannot be made current) is left usable: the next read into that device
 * works. */
static void test_switch_failure(void)
{
	unsigned char *dst = fake_dev_base(1) + 512;
	gpufile_t *h = NULL;

	gpufile_release();
	CHECK_EQ(gpufile_set_nthreads(1), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return;
	CHECK_EQ(read_check(h, 0, FILE_SIZE, 0, 0), 0);
	pthread_mutex_lock(&fake_lock);
	fail_ctxset = 1;
	pthread_mutex_unlock(&fake_lock);
	CHECK(gpufile_pread(h, dst, 1u << 20, 0) < 0);
	CHECK_CONTAINS(gpufile_errmsg(), "CUDA_ERROR_INVALID_CONTEXT");
	CHECK_EQ(fake_read_int(&fail_ctxset), 0);
	CHECK_EQ(read_check(h, 1, FILE_SIZE, 0, 0), 0);
	CHECK_EQ(read_check(h, 0, FILE_SIZE, 0, 1), 0);
	CHECK_EQ(read_check(h, 1, FILE_SIZE, 0, 1), 0);
	gpufile_close(h);
}

struct reader {
	int dev;
	int failures;
};

static void *reader_main(void *arg)
{
	struct reader *rd = arg;
	gpufile_t *h = NULL;

	/* The caller's thread has its own current context: its device. */
	fake_cur = fake_ctx_of(rd->dev);
	if (gpufile_open(&h, path, "r") != 0) {
		rd->failures++;
		return NULL;
	}
	for (int round = 0; round < 4; round++)
		rd->failures += read_all_sizes(h, rd->dev);
	gpufile_close(h);
	return NULL;
}

/* Two threads reading into devices 0 and 1 at the same time. */
static void test_concurrent(void)
{
	const unsigned nthreads = 4;
	struct reader rd[2] = {{0, 0}, {1, 0}};
	pthread_t th[2];
	long allocs, streams, events;

	gpufile_release();
	CHECK_EQ(gpufile_set_nthreads(nthreads), 0);
	streams = fake_read_long(&streams_created);
	events = fake_read_long(&events_created);
	/* Every stager made up front, so that any later allocation is a
	 * reallocation. */
	CHECK_EQ(gpufile_warmup(), 0);
	allocs = fake_read_long(&hostalloc_calls);
	/* One allocation per stager holds its NBUFS buffers. */
	CHECK_EQ(fake_read_int(&pinned_count), (int)nthreads);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, reader_main, &rd[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(rd[0].failures, 0);
	CHECK_EQ(rd[1].failures, 0);
	CHECK_EQ(fake_read_long(&hostalloc_calls), allocs);
	CHECK_EQ(fake_read_int(&pinned_count), (int)nthreads);
	/* At most one stream per stager and device, and its events: not one
	 * per task; and one per device for the pooled copies (staging.c). */
	CHECK(fake_read_long(&streams_created) - streams <=
	      2 * (long)nthreads + 2);
	CHECK(fake_read_long(&events_created) - events <=
	      2 * (long)nthreads * NBUFS);
}

/* One worker cycling through every device, more than it keeps streams
 * for: each read still lands, the pinned buffers stay, and the streams
 * and events it holds stay fewer than the devices (one was dropped). The
 * streams dropped are the least recently used: the device before last
 * keeps its stream. */
static void test_many_devices(void)
{
	gpufile_t *h = NULL;
	long allocs = 0, streams;

	gpufile_release();
	CHECK_EQ(gpufile_set_nthreads(1), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return;
	for (int cycle = 0; cycle < 3; cycle++) {
		for (int d = 0; d < NDEV; d++) {
			CHECK_EQ(read_check(h, d, (1u << 20) + 5, 3, d & 1), 0);
			if (cycle == 0 && d == 0)
				allocs = fake_read_long(&hostalloc_calls);
		}
	}
	CHECK_EQ(fake_read_long(&hostalloc_calls), allocs);
	CHECK(fake_read_int(&streams_live) > 0);
	CHECK(fake_read_int(&streams_live) < NDEV);
	streams = fake_read_long(&streams_created);
	CHECK_EQ(read_check(h, NDEV - 3, 4096, 0, 0), 0);
	CHECK_EQ(read_check(h, NDEV - 2, 4096, 0, 0), 0);
	CHECK_EQ(fake_read_long(&streams_created), streams);
	CHECK_EQ(fake_read_int(&events_live),
	         fake_read_int(&streams_live) * NBUFS);
	gpufile_close(h);
}

/* gpufile_bounce_buffer_free() and gpufile_release() free the streams and
 * events of every device, and the caller's current context is its own
 * afterwards. */
static void test_free(void)
{
	gpufile_t *h = NULL;

	CHECK_EQ(gpufile_set_nthreads(2), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return;
	for (int d = 0; d < NDEV; d++)
		CHECK_EQ(read_check(h, d, FILE_SIZE, 0, 1), 0);
	CHECK(fake_read_int(&streams_live) > 1);
	/* The streams live in other contexts than the caller's: freeing them
	 * must not leave the caller on another device (the CUDA runtime
	 * takes the current context for its current device). */
	fake_cur = fake_ctx_of(2);
	gpufile_bounce_buffer_free();
	CHECK(fake_cur == fake_ctx_of(2));
	CHECK_EQ(fake_read_int(&streams_live), 0);
	CHECK_EQ(fake_read_int(&events_live), 0);
	CHECK_EQ(fake_read_int(&pinned_count), 0);

	for (int d = NDEV - 1; d >= 0; d -= 2)
		CHECK_EQ(read_check(h, d, FILE_SIZE, 0, 0), 0);
	CHECK(fake_read_int(&streams_live) > 1);
	gpufile_close(h);
	fake_cur = fake_ctx_of(3);
	gpufile_release();
	CHECK(fake_cur == fake_ctx_of(3));
	CHECK_EQ(fake_read_int(&streams_live), 0);
	CHECK_EQ(fake_read_int(&events_live), 0);
	CHECK_EQ(fake_read_int(&pinned_count), 0);
}

int main(void)
{
	void *mem[NDEV] = {NULL};

	path = test_path("multi-device.bin");
	for (int d = 0; d < NDEV; d++) {
		if (posix_memalign(&mem[d], 4096, DEV_SIZE)) {
			fprintf(stderr, "out of memory\n");
			return 1;
		}
		fake_dev_mem[d] = mem[d];
	}
	dev_base = mem[0];
	fake_ndev = NDEV;
	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED), 0);
	gpufile__cuda_override(&fake);
	/* Never hand the fake's "device memory" to a real cuFile. */
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffers", "4"), 0);
	CHECK_EQ(gpufile_set_bounce_buffer_size(64 << 10), 0);
	CHECK_EQ(gpufile_set_task_size(256 << 10), 0);

	CHECK_EQ(gpufile_cuda_device_count(), NDEV);
	test_alternate();
	test_concurrent();
	test_many_devices();
	test_switch_failure();
	test_free();

	CHECK_EQ(fake_read_int(&bad_copies), 0);
	CHECK_EQ(fake_read_int(&ctx_mismatches), 0);
	CHECK_EQ(fake_read_int(&cross_device_copies), 0);
	CHECK_EQ(fake_read_int(&nonportable_copies), 0);
	gpufile__cuda_override(NULL);
	gpufile_config_reset();
	for (int d = 0; d < NDEV; d++)
		free(mem[d]);
	return test_finish("test_multi_device");
}
