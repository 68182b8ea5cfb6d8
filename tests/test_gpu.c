/*
 * Real GPU round trips: file -> device memory -> host, and device memory
 * -> file, at the edges of gds_threshold and task_size, up to 1 GiB, at
 * unaligned file offsets and unaligned device addresses; reads crossing
 * end-of-file; eight threads with requests in flight into one device
 * buffer; invalid device pointers; pointer classification; the path each
 * request is counted under. Skips (77) on a machine without a GPU.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define SEED_FILE 51
#define SEED_DEV  52
#define CANARY    0x6B
#define GIB       (1ull << 30)
#define DEV_SIZE  (GIB + (64u << 10))
#define FILE_SIZE (GIB + (8u << 20) + 123)

static unsigned char *dev;   /* DEV_SIZE bytes of device memory on GPU 0 */
static unsigned char *host;  /* DEV_SIZE bytes of host memory */
static unsigned char *host2; /* DEV_SIZE bytes of host memory */
static const char *src_path;

/* Fills device memory [p, p+len) with byte c (through host memory). */
static void dev_fill_byte(unsigned char *p, size_t len, unsigned char c)
{
	memset(host2, c, len);
	CHECK_EQ(gpufile_memcpy(p, host2, len), 0);
}

static gpufile_counter_t counter(gpufile_path_t p, int w)
{
	gpufile_stats_t st;

	GPUFILE_INIT(st);
	gpufile_stats_self(&st);
	return st.path[p][w];
}

/* Reads size bytes at off into dev + mis and writes them back to a new
 * file from dev + mis; checks data, canaries and (when check_path) the
 * path counted. */
static void roundtrip(gpufile_t *rh, size_t size, int64_t off, size_t mis,
                      int check_path)
{
	const char *wpath = test_path("gpu-dst");
	size_t threshold = 0;
	gpufile_path_t want;
	gpufile_counter_t a, b;
	gpufile_t *wh = NULL;
	ssize_t n;

	CHECK_EQ(gpufile_get_gds_threshold(&threshold), 0);
	want = size < threshold ? GPUFILE_PATH_SMALL : GPUFILE_PATH_POSIX;

	/* file -> device -> host */
	dev_fill_byte(
	    dev, mis + size + 4096 <= DEV_SIZE ? mis + size + 4096 : DEV_SIZE,
	    CANARY);
	a = counter(want, 0);
	n = gpufile_pread(rh, dev + mis, size, off);
	b = counter(want, 0);
	CHECK_EQ(n, (ssize_t)size);
	if (n != (ssize_t)size)
		fprintf(stderr,
		        "  gpu read size=%zu off=%lld mis=%zu: %zd %s\n", size,
		        (long long)off, mis, n, gpufile_errmsg());
	if (check_path) {
		CHECK_EQ(b.ops - a.ops, 1);
		CHECK_EQ(b.bytes - a.bytes, size);
	}
	{
		size_t span = mis + size + 4096 <= DEV_SIZE ? mis + size + 4096
		                                            : DEV_SIZE;
		CHECK_EQ(gpufile_memcpy(host, dev, span), 0);
		if (test_mismatch(host + mis, size, SEED_FILE, (uint64_t)off) !=
		        -1 ||
		    test_mismatch_byte(host, mis, CANARY) != -1 ||
		    test_mismatch_byte(host + mis + size, span - mis - size,
		                       CANARY) != -1) {
			fprintf(stderr,
			        "  gpu read size=%zu off=%lld mis=%zu: bytes "
			        "differ\n",
			        size, (long long)off, mis);
			test_failures++;
		}
	}

	/* host pattern -> device -> file */
	test_fill(host, size, SEED_DEV, (uint64_t)off);
	CHECK_EQ(gpufile_memcpy(dev + mis, host, size), 0);
	CHECK_EQ(gpufile_open(&wh, wpath, "w+"), 0);
	if (!wh)
		return;
	a = counter(want, 1);
	n = gpufile_pwrite(wh, dev + mis, size, off);
	b = counter(want, 1);
	CHECK_EQ(n, (ssize_t)size);
	if (n != (ssize_t)size)
		fprintf(stderr,
		        "  gpu write size=%zu off=%lld mis=%zu: %zd %s\n", size,
		        (long long)off, mis, n, gpufile_errmsg());
	if (check_path)
		CHECK_EQ(b.ops - a.ops, 1);
	/* Read it back into host memory through gpufile too. */
	memset(host2, 0, size);
	CHECK_EQ(gpufile_pread(wh, host2, size, off), (ssize_t)size);
	CHECK_EQ(test_mismatch(host2, size, SEED_DEV, (uint64_t)off), -1);
	CHECK_EQ(gpufile_size(wh), off + (int64_t)size);
	CHECK_EQ(gpufile_close(wh), 0);
	unlink(wpath);
}

static void test_roundtrips(const char *compat)
{
	size_t ts = 0;
	gpufile_t *h = NULL;
	const int check_path = strcmp(compat, "on") == 0;

	CHECK_EQ(gpufile_config_set("compat_mode", compat), 0);
	CHECK_EQ(gpufile_get_task_size(&ts), 0);
	CHECK_EQ(gpufile_open(&h, src_path, "r"), 0);
	if (!h)
		return;
	{
		const size_t sizes[] = {
		    1,        4095,           4096,   (16 << 10) - 1,
		    16 << 10, (16 << 10) + 1, ts - 1, ts,
		    ts + 1,   64u << 20};
		const int64_t offsets[] = {0, 1, 4097};
		const size_t mis[] = {0, 1, 3};

		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
			for (size_t o = 0; o < 3; o++)
				for (size_t m = 0; m < 3; m++)
					roundtrip(h, sizes[s], offsets[o],
					          mis[m], check_path);
	}
	/* 1 GiB, aligned and not. */
	roundtrip(h, GIB, 0, 0, check_path);
	roundtrip(h, GIB, 4097, 3, check_path);

	/* A read crossing end-of-file, and one past it. */
	{
		const size_t size = 8u << 20;
		const int64_t off = FILE_SIZE - 5000;
		ssize_t n;

		dev_fill_byte(dev, size + 1, CANARY);
		n = gpufile_pread(h, dev + 1, size, off);
		CHECK_EQ(n, 5000);
		CHECK_EQ(gpufile_memcpy(host, dev, size + 1), 0);
		CHECK_EQ(test_mismatch_byte(host, 1, CANARY), -1);
		CHECK_EQ(
		    test_mismatch(host + 1, 5000, SEED_FILE, (uint64_t)off),
		    -1);
		CHECK_EQ(test_mismatch_byte(host + 5001, size - 5000, CANARY),
		         -1);
		CHECK_EQ(gpufile_pread(h, dev, size, FILE_SIZE + 1), 0);
	}
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_config_reset();
}

/* ---- eight threads into disjoint slices of one device buffer ---- */

#define NTHREADS 8
#define SLICE    (32u << 20)
#define PIECES   8

static gpufile_t *shared;

static void *thread_main(void *arg)
{
	const int t = (int)(intptr_t)arg;
	const size_t base = (size_t)t * SLICE;
	gpufile_future_t *f[PIECES];

	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < PIECES; i++) {
			size_t off = base + (size_t)i * (SLICE / PIECES);
			/* Offsets a little off the slice, for unaligned I/O. */
			int64_t foff = (int64_t)off + round * 3;
			CHECK_EQ(gpufile_pread_async(shared, dev + off,
			                             SLICE / PIECES, foff,
			                             &f[i]),
			         0);
		}
		for (int i = 0; i < PIECES; i++) {
			if (!f[i])
				continue;
			CHECK_EQ(gpufile_future_wait(f[i]), SLICE / PIECES);
			gpufile_future_free(f[i]);
		}
		/* Blocking requests at the same time as other threads'. */
		CHECK_EQ(gpufile_pread(shared, dev + base, 100,
		                       (int64_t)base + round * 3),
		         100);
		CHECK_EQ(gpufile_pread(shared, dev + base + 100,
		                       SLICE / PIECES - 100,
		                       (int64_t)base + 100 + round * 3),
		         SLICE / PIECES - 100);
	}
	return NULL;
}

static void test_threads(void)
{
	pthread_t threads[NTHREADS];

	CHECK_EQ(gpufile_open(&shared, src_path, "r"), 0);
	if (!shared)
		return;
	dev_fill_byte(dev, NTHREADS * SLICE, 0);
	for (int t = 0; t < NTHREADS; t++)
		pthread_create(&threads[t], NULL, thread_main,
		               (void *)(intptr_t)t);
	for (int t = 0; t < NTHREADS; t++)
		pthread_join(threads[t], NULL);
	CHECK_EQ(gpufile_memcpy(host, dev, NTHREADS * SLICE), 0);
	/* The last round read each slice from slice offset + 3. */
	for (int t = 0; t < NTHREADS; t++)
		CHECK_EQ(test_mismatch(host + (size_t)t * SLICE, SLICE,
		                       SEED_FILE, (uint64_t)t * SLICE + 3),
		         -1);
	CHECK_EQ(gpufile_close(shared), 0);
	shared = NULL;
}

static void test_bad_pointers(void)
{
	gpufile_t *h = NULL;
	void *freed = NULL;
	ssize_t n;

	/* direct_io=off: a garbage pointer taken for host memory then gets
	 * -EFAULT from the kernel rather than a memcpy into it. */
	CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);
	CHECK_EQ(gpufile_open(&h, src_path, "r"), 0);
	if (!h)
		return;
	n = gpufile_pread(h, (void *)0x10, 1 << 20, 0);
	CHECK(n < 0);
	CHECK(gpufile_errmsg()[0] != '\0');

	CHECK_EQ(gpufile_device_alloc(0, 1 << 20, &freed), 0);
	CHECK_EQ(gpufile_device_free(freed), 0);
	n = gpufile_pread(h, freed, 1 << 20, 0);
	CHECK(n < 0);
	CHECK(gpufile_errmsg()[0] != '\0');
	n = gpufile_pread(h, freed, 100, 0);
	CHECK(n < 0);

	/* And the handle still works. */
	CHECK_EQ(gpufile_pread(h, dev, 1 << 20, 0), 1 << 20);
	CHECK_EQ(gpufile_memcpy(host, dev, 1 << 20), 0);
	CHECK_EQ(test_mismatch(host, 1 << 20, SEED_FILE, 0), -1);
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_config_reset();
}

static void test_classify(void)
{
	gpufile_mem_t kind = GPUFILE_MEM_HOST;
	int device = -1;

	CHECK_EQ(gpufile_mem_kind(dev, &kind, &device), 0);
	CHECK_EQ(kind, GPUFILE_MEM_DEVICE);
	CHECK_EQ(device, 0);
	CHECK_EQ(gpufile_mem_kind(dev + 12345, &kind, &device), 0);
	CHECK_EQ(kind, GPUFILE_MEM_DEVICE);
	CHECK_EQ(device, 0);
	CHECK_EQ(gpufile_mem_kind(host, &kind, &device), 0);
	CHECK_EQ(kind, GPUFILE_MEM_HOST);
	CHECK_EQ(device, -1);
	CHECK(strcmp(gpufile_mem_name(GPUFILE_MEM_DEVICE), "device") == 0);
	CHECK_EQ(gpufile_warmup(), 0);
	CHECK(gpufile_pinned_bytes_max() > 0);
}

/* A second GPU, when there is one. */
static void test_other_device(int ndev)
{
	unsigned char *d1 = NULL;
	gpufile_mem_t kind;
	int device = -1;
	gpufile_t *h = NULL;
	const size_t size = (16u << 20) + 1;

	if (ndev < 2)
		return;
	CHECK_EQ(gpufile_device_alloc(1, size + 1, (void **)&d1), 0);
	if (!d1)
		return;
	CHECK_EQ(gpufile_mem_kind(d1, &kind, &device), 0);
	CHECK_EQ(kind, GPUFILE_MEM_DEVICE);
	CHECK_EQ(device, 1);
	CHECK_EQ(gpufile_open(&h, src_path, "r"), 0);
	if (h) {
		CHECK_EQ(gpufile_pread(h, d1 + 1, size, 5), (ssize_t)size);
		CHECK_EQ(gpufile_memcpy(host, d1 + 1, size), 0);
		CHECK_EQ(test_mismatch(host, size, SEED_FILE, 5), -1);
		CHECK_EQ(gpufile_close(h), 0);
	}
	CHECK_EQ(gpufile_device_free(d1), 0);
}

int main(void)
{
	int ndev = gpufile_cuda_device_count();
	void *p = NULL;

	if (ndev <= 0) {
		printf("test_gpu: skipped: %s\n", gpufile_errmsg());
		return TEST_SKIP;
	}
	/* test_path() rotates through 8 static buffers: keep a copy. */
	src_path = strdup(test_path("gpu-src"));
	host = test_malloc(DEV_SIZE);
	host2 = test_malloc(DEV_SIZE);
	if (gpufile_device_alloc(0, DEV_SIZE, &p)) {
		fprintf(stderr, "gpufile_device_alloc: %s\n", gpufile_errmsg());
		return 1;
	}
	dev = p;
	CHECK_EQ(test_make_file(src_path, FILE_SIZE, SEED_FILE), 0);

	test_classify();
	test_roundtrips("on");
	test_roundtrips("auto");
	test_threads();
	test_bad_pointers();
	test_other_device(ndev);

	CHECK_EQ(gpufile_device_free(dev), 0);
	gpufile_release();
	free(host);
	free(host2);
	return test_finish("test_gpu");
}
