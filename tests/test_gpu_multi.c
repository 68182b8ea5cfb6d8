/*
 * Reads into more than one real GPU from one process: two threads reading
 * a file into GPU 0 and GPU 1 at the same time (sync and async, several
 * sizes), then one thread moving between every GPU, each byte checked by
 * copying it back. The workers' bounce buffers serve every device, each
 * device through a stream of its own context (test_multi_device.c checks
 * the same with the fake driver; this proves it with the real one). Also
 * checks that gpufile_release() leaves the caller's device pointers
 * usable. Skips (77) with fewer than two GPUs.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"

#include <pthread.h>
#include <string.h>

#define SEED      61
#define FILE_SIZE ((96u << 20) + 123)
#define MAX_GPUS  8

static const char *path;
static void *dev[MAX_GPUS];

/* Reads size bytes at off into GPU g (sync, or four async pieces), copies
 * them back into host and checks them. 0 when right. */
static int read_check(gpufile_t *h, int g, unsigned char *host, size_t size,
                      int64_t off, int async)
{
	unsigned char *dst = (unsigned char *)dev[g] + 4096 + 3;
	ssize_t n = -1;

	memset(host, 0xE7, size);
	if (gpufile_memcpy(dst, host, size) != 0)
		return -1;
	if (async) {
		gpufile_future_t *f[4] = {NULL};
		size_t piece = size / 4, done = 0;
		int ok = 1;

		for (int i = 0; i < 4; i++) {
			size_t len = i == 3 ? size - 3 * piece : piece;
			if (gpufile_pread_async(h, dst + i * piece, len,
			                        off + (int64_t)(i * piece),
			                        &f[i]) != 0)
				ok = 0;
		}
		for (int i = 0; i < 4; i++) {
			if (!f[i])
				continue;
			ssize_t m = gpufile_future_wait(f[i]);
			if (m < 0)
				ok = 0;
			else
				done += (size_t)m;
			gpufile_future_free(f[i]);
		}
		n = ok ? (ssize_t)done : -1;
	} else {
		n = gpufile_pread(h, dst, size, off);
	}
	memset(host, 0, size);
	if (n != (ssize_t)size || gpufile_memcpy(host, dst, size) != 0 ||
	    test_mismatch(host, size, SEED, (uint64_t)off) != -1) {
		fprintf(stderr,
		        "  GPU %d %s read of %zu bytes at %lld: %zd %s\n", g,
		        async ? "async" : "sync", size, (long long)off, n,
		        n < 0 ? gpufile_errmsg() : "(bytes differ)");
		return -1;
	}
	return 0;
}

static const size_t sizes[] = {4096 + 1, (1u << 20) + 17, (16u << 20) - 5,
                               FILE_SIZE};

struct reader {
	int gpu;
	int failures;
};

static void *reader_main(void *arg)
{
	struct reader *rd = arg;
	unsigned char *host = test_malloc(FILE_SIZE);
	gpufile_t *h = NULL;

	if (gpufile_open(&h, path, "r") != 0) {
		rd->failures++;
		free(host);
		return NULL;
	}
	for (int round = 0; round < 3; round++)
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
			for (int async = 0; async < 2; async++)
				rd->failures +=
				    read_check(h, rd->gpu, host, sizes[i],
				               sizes[i] == FILE_SIZE ? 0 : 4099,
				               async) != 0;
	gpufile_close(h);
	free(host);
	return NULL;
}

int main(void)
{
	int ngpu = gpufile_cuda_device_count();
	struct reader rd[2] = {{0, 0}, {1, 0}};
	unsigned char *host;
	gpufile_t *h = NULL;
	pthread_t th[2];

	if (ngpu < 2) {
		printf("test_gpu_multi: %d GPU(s), needs 2: skipped\n",
		       ngpu < 0 ? 0 : ngpu);
		return TEST_SKIP;
	}
	if (ngpu > MAX_GPUS)
		ngpu = MAX_GPUS;
	path = test_path("gpu-multi.bin");
	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED), 0);
	for (int g = 0; g < ngpu; g++) {
		gpufile_mem_t kind = GPUFILE_MEM_HOST;
		int d = -1;

		CHECK_EQ(gpufile_device_alloc(g, FILE_SIZE + 8192, &dev[g]), 0);
		if (!dev[g])
			return test_finish("test_gpu_multi");
		CHECK_EQ(gpufile_mem_kind(dev[g], &kind, &d), 0);
		CHECK_EQ(kind, GPUFILE_MEM_DEVICE);
		CHECK_EQ(d, g);
	}

	/* Two GPUs at once. */
	for (int i = 0; i < 2; i++)
		CHECK_EQ(pthread_create(&th[i], NULL, reader_main, &rd[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(rd[0].failures, 0);
	CHECK_EQ(rd[1].failures, 0);

	/* One thread moving between every GPU, twice round. */
	host = test_malloc(FILE_SIZE);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	for (int round = 0; h && round < 2; round++)
		for (int g = 0; g < ngpu; g++)
			CHECK_EQ(
			    read_check(h, g, host, (16u << 20) + 7, 1, round),
			    0);

	/* Freeing the bounce buffers of every device leaves the pinned
	 * memory within its bound, and reading again works. */
	CHECK(gpufile_bounce_buffer_free() <= gpufile_pinned_bytes_max());
	for (int g = ngpu - 1; h && g >= 0; g--)
		CHECK_EQ(read_check(h, g, host, FILE_SIZE, 0, 0), 0);
	gpufile_close(h);
	for (int g = 0; g < ngpu; g++)
		CHECK_EQ(gpufile_device_free(dev[g]), 0);
	gpufile_release();
	free(host);
	return test_finish("test_gpu_multi");
}
