/*
 * Batches on a real GPU: 4 KiB reads packed into one device buffer, 4 KiB
 * reads to scattered device addresses (cuMemcpyBatchAsync where the driver
 * has it), 64 KiB reads (at gds_threshold and above: the POSIX path, or
 * cuFile's batch API where auto picks cuFile), and a mix of sizes from
 * 1 B to 1 MiB, host and device, some past end-of-file. Every byte is
 * checked, and the bytes around each entry must be untouched. Skips (77)
 * on a machine without a GPU.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"

#include <errno.h>
#include <string.h>

#define SEED      61
#define FILE_SIZE ((64u << 20) + 555)
#define DEV_SIZE  (160u << 20)
#define CANARY    0x3E

static unsigned char *dev, *host, *back;
static uint64_t rng = 0x1234567887654321ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Runs entries e[0..n) (device ones inside dev, host ones inside host) and
 * checks every entry and the canaries. */
static void run(const char *what, gpufile_batch_entry_t *e, unsigned n)
{
	gpufile_batch_t *b = NULL;
	unsigned bad = 0;

	CHECK_EQ(gpufile_batch_create(&b, n), 0);
	CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
	CHECK_EQ(gpufile_memcpy(back, dev, DEV_SIZE), 0);
	for (unsigned i = 0; i < n && bad < 5; i++) {
		const unsigned char *got =
		    (unsigned char *)e[i].buf >= dev &&
		            (unsigned char *)e[i].buf < dev + DEV_SIZE
		        ? back + ((unsigned char *)e[i].buf - dev)
		        : e[i].buf;
		size_t want = e[i].offset >= (int64_t)FILE_SIZE ? 0
		              : FILE_SIZE - (size_t)e[i].offset < e[i].size
		                  ? FILE_SIZE - (size_t)e[i].offset
		                  : e[i].size;

		if (gpufile_batch_result(b, i) != (ssize_t)want ||
		    test_mismatch(got, want, SEED, (uint64_t)e[i].offset) !=
		        -1 ||
		    test_mismatch_byte(got + want, e[i].size - want, CANARY) !=
		        -1) {
			fprintf(stderr, "%s: entry %u (%zu at %lld): %zd, %s\n",
			        what, i, e[i].size, (long long)e[i].offset,
			        gpufile_batch_result(b, i),
			        gpufile_batch_errmsg(b, i)
			            ? gpufile_batch_errmsg(b, i)
			            : "wrong bytes");
			bad++;
		}
	}
	CHECK_EQ(bad, 0);
	gpufile_batch_free(b);
	/* Canaries again for the next case. */
	memset(host, CANARY, DEV_SIZE);
	CHECK_EQ(gpufile_memcpy(dev, host, DEV_SIZE), 0);
}

int main(void)
{
	const char *path = test_path("batch-gpu");
	const unsigned n = 8192;
	gpufile_batch_entry_t *e;
	gpufile_t *h = NULL;

	if (gpufile_cuda_device_count() <= 0) {
		fprintf(stderr, "test_batch_gpu: no GPU: skipped\n");
		return TEST_SKIP;
	}
	e = test_malloc(n * sizeof(*e));
	host = test_malloc(DEV_SIZE);
	back = test_malloc(DEV_SIZE);
	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED), 0);
	CHECK_EQ(gpufile_device_alloc(0, DEV_SIZE, (void **)&dev), 0);
	memset(host, CANARY, DEV_SIZE);
	CHECK_EQ(gpufile_memcpy(dev, host, DEV_SIZE), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);

	for (unsigned i = 0; i < n; i++)
		e[i] = (gpufile_batch_entry_t){
		    h, dev + (size_t)i * 4096, 4096,
		    (int64_t)(next_rand() % (FILE_SIZE / 4096)) * 4096};
	run("4 KiB packed", e, n);

	for (unsigned i = 0; i < n; i++)
		e[i] = (gpufile_batch_entry_t){
		    h, dev + (size_t)i * 8200 + (i % 13), 4096,
		    (int64_t)(next_rand() % (FILE_SIZE - 4096))};
	run("4 KiB scattered", e, n);

	for (unsigned i = 0; i < 2048; i++)
		e[i] = (gpufile_batch_entry_t){
		    h, dev + (size_t)i * (72u << 10), 64u << 10,
		    (int64_t)(next_rand() % (FILE_SIZE - 4096))};
	run("64 KiB", e, 2048);

	{
		size_t dused = 0, hused = 0;
		unsigned m = 0;

		while (m < n) {
			size_t size = 1 + (size_t)(next_rand() %
			                           (1u << (next_rand() % 21)));
			int on_dev = next_rand() % 2;
			int64_t off =
			    (int64_t)(next_rand() % (FILE_SIZE + 8192));

			if (on_dev && dused + size + 64 > DEV_SIZE)
				break;
			if (!on_dev && hused + size + 64 > DEV_SIZE)
				break;
			e[m++] = (gpufile_batch_entry_t){
			    h, on_dev ? dev + dused : host + hused, size, off};
			if (on_dev)
				dused += size + 64;
			else
				hused += size + 64;
		}
		run("mixed", e, m);
	}

	CHECK_EQ(gpufile_close(h), 0);
	CHECK_EQ(gpufile_device_free(dev), 0);
	free(e);
	free(host);
	free(back);
	return test_finish("test_batch_gpu");
}
