/*
 * A CUDA context that ends under gpufile, without a GPU: the fake driver
 * (fake_cuda.h, fake_ctx_reset) does to a primary context what
 * cudaDeviceReset does, taking with it the streams, events and pinned
 * memory gpufile made there (test_gpu_contexts.c does the same, and
 * destroys a created context, on a real GPU).
 *
 * What must hold:
 * - after the reset, reads into the other device, and into that one once
 *   its context lives again (sync, async, stream-ordered into host
 *   memory), are right, and gpufile made new pinned memory;
 * - no call names a stream, event or pinned buffer of the ended context,
 *   no copy reads from its memory, and nothing is written into it, then
 *   or at gpufile_release() (before, the next read copied from the freed
 *   bounce buffers: EFAULT, or a crash);
 * - reads into the other device are not disturbed;
 * - a batch used for one device, then for another, copies on a stream of
 *   the second device's context;
 * - a saved context that ended is not made current again.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"

#include <pthread.h>
#include <string.h>

#define DEV_SIZE  (24u << 20)
#define FILE_SIZE ((16u << 20) + 333)
#define SEED      71
#include "fake_cuda.h"

static const char *path;

/* Reads the file into device dev, sync then async. 0 when right. */
static int read_device(gpufile_t *h, int dev)
{
	unsigned char *dst = fake_dev_base(dev) + 4096 + 3;
	int bad = 0;

	for (int async = 0; async < 2; async++) {
		gpufile_future_t *f = NULL;
		ssize_t n = -1;

		memset(dst, 0xA5, FILE_SIZE);
		fake_cur = fake_ctx_of(dev);
		if (!async)
			n = gpufile_pread(h, dst, FILE_SIZE, 0);
		else if (gpufile_pread_async(h, dst, FILE_SIZE, 0, &f) == 0)
			n = gpufile_future_wait(f);
		gpufile_future_free(f);
		if (n != (ssize_t)FILE_SIZE ||
		    test_mismatch(dst, FILE_SIZE, SEED, 0) != -1) {
			fprintf(stderr, "  device %d %s read: %zd %s\n", dev,
			        async ? "async" : "sync", n,
			        n < 0 ? gpufile_errmsg() : "(bytes differ)");
			bad++;
		}
	}
	return bad;
}

/* A stream-ordered read into host memory on a stream of device dev's
 * context (a flag in gpufile's pinned memory holds the stream). 0 when
 * right. */
static int read_stream_host(gpufile_t *h, int dev)
{
	unsigned char *host = test_malloc(1u << 20);
	CUstream s = NULL;
	ssize_t n = -1;
	int bad = 0;

	fake_cur = fake_ctx_of(dev);
	memset(host, 0, 1u << 20);
	if (fake.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING) != 0 ||
	    gpufile_read_async(h, host, 1u << 20, 4096, s, &n) != 0 ||
	    fake.cuStreamSynchronize(s) != 0 || n != (ssize_t)(1u << 20) ||
	    test_mismatch(host, 1u << 20, SEED, 4096) != -1) {
		fprintf(stderr, "  device %d stream-ordered read: %zd %s\n",
		        dev, n, gpufile_errmsg());
		bad = 1;
	}
	if (s)
		fake.cuStreamDestroy(s);
	free(host);
	return bad;
}

static int retain(int dev)
{
	CUcontext ctx;

	return fake.cuDevicePrimaryCtxRetain(&ctx, dev);
}

static void test_reset(void)
{
	gpufile_t *h = NULL;
	long allocs;

	CHECK_EQ(gpufile_set_nthreads(2), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return;
	CHECK_EQ(read_device(h, 0), 0);
	CHECK_EQ(read_device(h, 1), 0);
	CHECK_EQ(read_stream_host(h, 0), 0);
	allocs = fake_read_long(&hostalloc_calls);

	fake_ctx_reset(0);
	/* Device 1, before anyone retains device 0's context again: the
	 * stagers' buffers were there. */
	CHECK_EQ(read_device(h, 1), 0);
	CHECK_EQ(read_stream_host(h, 1), 0);
	/* Device 0 once its context lives again, as the CUDA runtime makes
	 * it at its next call (memory can only come from it then). */
	CHECK_EQ(retain(0), 0);
	CHECK_EQ(read_device(h, 0), 0);
	CHECK_EQ(read_stream_host(h, 0), 0);
	CHECK(fake_read_long(&hostalloc_calls) > allocs);
	CHECK_EQ(fake_read_int(&stale_uses), 0);
	CHECK_EQ(fake_read_int(&bad_copies), 0);
	CHECK(fake_dead_intact());

	/* Twice: what was made after the first reset ends too. */
	fake_ctx_reset(0);
	CHECK_EQ(retain(0), 0);
	CHECK_EQ(read_stream_host(h, 0), 0);
	CHECK_EQ(read_device(h, 0), 0);
	gpufile_close(h);
	gpufile_release();
	CHECK_EQ(fake_read_int(&stale_uses), 0);
	CHECK_EQ(fake_read_int(&bad_copies), 0);
	CHECK(fake_dead_intact());
	CHECK_EQ(fake_read_int(&ctx_mismatches), 0);
}

/* One batch, its entries in device 0's memory, then in device 1's. */
static void test_batch_moves(void)
{
	enum { N = 8, ENTRY = 64 << 10 };
	gpufile_batch_entry_t e[N];
	gpufile_batch_t *b = NULL;
	gpufile_t *h = NULL;

	/* One worker: the one that read into device 0 reads into device 1. */
	CHECK_EQ(gpufile_set_nthreads(1), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	CHECK_EQ(gpufile_batch_create(&b, N), 0);
	if (!h || !b)
		return;
	for (int dev = 0; dev < 2; dev++) {
		unsigned char *base = fake_dev_base(dev) + (1u << 20);

		fake_cur = fake_ctx_of(dev);
		memset(base, 0xA5, (size_t)N * ENTRY);
		for (int i = 0; i < N; i++)
			e[i] = (gpufile_batch_entry_t){
			    h, base + (size_t)i * ENTRY, ENTRY,
			    (int64_t)i * 3 * ENTRY + 17};
		CHECK_EQ(gpufile_batch_submit(b, e, N), 0);
		CHECK_EQ(gpufile_batch_wait(b, -1), N);
		for (int i = 0; i < N; i++) {
			CHECK_EQ(gpufile_batch_result(b, (unsigned)i), ENTRY);
			CHECK_EQ(test_mismatch(e[i].buf, ENTRY, SEED,
			                       (uint64_t)e[i].offset),
			         -1);
		}
	}
	CHECK_EQ(fake_read_int(&ctx_mismatches), 0);
	gpufile_batch_free(b);
	gpufile_close(h);
}

/* A context a call saved, to put back after it switched, may have ended
 * since (a worker's current context is whatever its last task left): it
 * is not made current again, NULL is; a live one is. Before
 * gpufile__ctx_restore, a worker that freed a stager put the reset
 * context of device 0 back: a stale use in test_reset, one run in ten. */
static void test_restore_dead(void)
{
	int stale = fake_read_int(&stale_uses);

	CHECK_EQ(retain(0), 0);
	fake_cur = fake_ctx_of(0);
	fake_ctx_reset(0);
	CHECK_EQ(gpufile__ctx_restore(&fake, fake_ctx_of(0)), CUDA_SUCCESS);
	CHECK(fake_cur == NULL);
	CHECK_EQ(gpufile__ctx_restore(&fake, fake_ctx_of(1)), CUDA_SUCCESS);
	CHECK(fake_cur == fake_ctx_of(1));
	CHECK_EQ(fake_read_int(&stale_uses), stale);
	CHECK_EQ(retain(0), 0);
}

int main(void)
{
	if (fake_install_devices(2) != 0)
		return 1;
	path = test_path("context-reset.bin");
	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED), 0);
	test_reset();
	test_batch_moves();
	test_restore_dead();
	gpufile_release();
	fake_uninstall();
	return test_finish("test_context_reset");
}
