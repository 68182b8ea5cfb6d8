/*
 * The KvikIO-parity features on a real GPU: memory-mapped reads into
 * device memory (sync, async, unaligned) counted as "mmap";
 * gpufile_bounce_buffer_free() after real pinned allocations; and the real
 * cuFile driver's properties, read and set back (printed for the record).
 * Skips (77) on a machine without a GPU.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"

#include <errno.h>
#include <string.h>

#define SEED      61
#define FILE_SIZE ((64u << 20) + 123)

static gpufile_counter_t counter(gpufile_path_t p)
{
	gpufile_stats_t st;

	GPUFILE_INIT(st);
	gpufile_stats_self(&st);
	return st.path[p][0];
}

static void test_mmap(const char *path, unsigned char *dev, unsigned char *host)
{
	gpufile_counter_t a = counter(GPUFILE_PATH_MMAP), b;
	gpufile_future_t *f = NULL;
	gpufile_mmap_t *m = NULL;

	CHECK_EQ(gpufile_mmap_open(&m, path, "r", 0, 0), 0);
	if (!m)
		return;
	CHECK_EQ(gpufile_mmap_pread(m, dev, FILE_SIZE, 0), FILE_SIZE);
	memset(host, 0, FILE_SIZE);
	CHECK_EQ(gpufile_memcpy(host, dev, FILE_SIZE), 0);
	CHECK_EQ(test_mismatch(host, FILE_SIZE, SEED, 0), -1);
	CHECK_EQ(gpufile_mmap_pread_async(m, dev + 3, 5u << 20, 4097, &f), 0);
	CHECK_EQ(gpufile_future_wait(f), 5u << 20);
	gpufile_future_free(f);
	CHECK_EQ(gpufile_memcpy(host, dev + 3, 5u << 20), 0);
	CHECK_EQ(test_mismatch(host, 5u << 20, SEED, 4097), -1);
	b = counter(GPUFILE_PATH_MMAP);
	CHECK_EQ(b.ops - a.ops, 2);
	CHECK_EQ(b.bytes - a.bytes, FILE_SIZE + (5u << 20));
	CHECK_EQ(gpufile_mmap_close(m), 0);
	printf("mmap: %llu bytes into device memory in %llu tasks\n",
	       (unsigned long long)(b.bytes - a.bytes),
	       (unsigned long long)(b.tasks - a.tasks));
}

static void test_bounce_free(const char *path, unsigned char *dev,
                             unsigned char *host)
{
	gpufile_t *h = NULL;
	size_t freed;

	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return;
	CHECK_EQ(gpufile_pread(h, dev, FILE_SIZE, 0), FILE_SIZE);
	freed = gpufile_bounce_buffer_free();
	CHECK(freed > 0);
	CHECK(freed <= gpufile_pinned_bytes_max());
	CHECK_EQ(gpufile_bounce_buffer_free(), 0);
	CHECK_EQ(gpufile_pread(h, dev, FILE_SIZE, 0), FILE_SIZE);
	CHECK_EQ(gpufile_memcpy(host, dev, FILE_SIZE), 0);
	CHECK_EQ(test_mismatch(host, FILE_SIZE, SEED, 0), -1);
	CHECK_EQ(gpufile_close(h), 0);
	printf("bounce_buffer_free: %zu bytes freed (bound %zu)\n", freed,
	       gpufile_pinned_bytes_max());
	gpufile_config_reset();
}

static void test_driver(void)
{
	uint64_t v, dio, poll;
	const char *name;
	int rc = gpufile_cufile_driver_open(), w;

	if (rc == GPUFILE_ENOCUFILE || rc == GPUFILE_ECUFILE) {
		printf("cuFile driver: not usable here (%s)\n",
		       gpufile_errmsg());
		return;
	}
	CHECK_EQ(rc, 0);
	for (int i = 0; (name = gpufile_cufile_driver_prop_name(i, &w)); i++) {
		rc = gpufile_cufile_driver_get(name, &v);
		CHECK_EQ(rc, 0);
		printf("cuFile driver %-28s %-3s %llu\n", name, w ? "rw" : "ro",
		       (unsigned long long)v);
	}
	CHECK_EQ(gpufile_cufile_driver_get("max_direct_io_size", &dio), 0);
	CHECK_EQ(gpufile_cufile_driver_set("max_direct_io_size", dio), 0);
	CHECK_EQ(gpufile_cufile_driver_get("max_direct_io_size", &v), 0);
	CHECK_EQ(v, dio);
	CHECK_EQ(gpufile_cufile_driver_get("poll_mode", &poll), 0);
	rc = gpufile_cufile_driver_set("poll_mode", !poll);
	printf("cuFile driver: poll_mode %llu -> %llu: %s\n",
	       (unsigned long long)poll, (unsigned long long)!poll,
	       rc ? gpufile_errmsg() : "accepted");
	if (rc == 0) {
		CHECK_EQ(gpufile_cufile_driver_get("poll_mode", &v), 0);
		CHECK_EQ(v, !poll);
		CHECK_EQ(gpufile_cufile_driver_set("poll_mode", poll), 0);
	} else {
		CHECK_EQ(rc, GPUFILE_ECUFILE);
		CHECK_CONTAINS(gpufile_errmsg(), "poll_mode=");
	}
	CHECK_EQ(gpufile_cufile_driver_set("is_gds_available", 1), -EPERM);
}

int main(void)
{
	const char *path = test_path("parity-gpu.bin");
	unsigned char *host;
	void *dev = NULL;

	if (gpufile_cuda_device_count() <= 0) {
		fprintf(stderr, "no GPU: %s\n", gpufile_errmsg());
		return TEST_SKIP;
	}
	host = test_malloc(FILE_SIZE);
	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED), 0);
	CHECK_EQ(gpufile_device_alloc(0, FILE_SIZE + 64, &dev), 0);
	if (dev) {
		test_mmap(path, dev, host);
		test_bounce_free(path, dev, host);
		gpufile_device_free(dev);
	}
	test_driver();
	free(host);
	test_cleanup();
	return test_finish("test_parity_gpu");
}
