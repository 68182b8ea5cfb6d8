/*
 * gpufile_pinned_bytes_max() is an upper bound of the pinned memory
 * gpufile holds once batches exist: each batch worker's two 2 MiB slots
 * count, from its start to gpufile_batch_free, as the header says. (The
 * bound left them out: three small batches held 12 MiB against a bound
 * of 816 KiB.) Small bounce buffers, so that the slots are most of it;
 * the fake CUDA driver counts what is held. A batch starts a worker per
 * chunk of its entries, up to nthreads: one for a submit of two small
 * entries, more once a submit has more chunks (they started nthreads at
 * once, and a batch of one 4 KiB read woke them all at every submit).
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"

#define DEV_SIZE (8u << 20)
#include "fake_cuda.h"

#define SEED     17
#define FSIZE    (4u << 20)
#define NBATCH   3
#define NTHREADS 2
#define SLOTS    (2 * (size_t)(2u << 20)) /* per batch worker */
/* Entries of 4 KiB in two of a batch's chunks (512 entries, 4 MiB). */
#define TWO_CHUNKS 1024u

static size_t held(void)
{
	size_t n;

	pthread_mutex_lock(&fake_lock);
	n = pinned_live;
	pthread_mutex_unlock(&fake_lock);
	return n;
}

int main(void)
{
	const char *path = test_path("batch-pinned");
	gpufile_batch_t *b[NBATCH] = {NULL};
	gpufile_t *h = NULL;
	size_t before, max;
	void *mem = NULL;

	if (posix_memalign(&mem, 4096, DEV_SIZE))
		return 1;
	dev_base = mem;
	CHECK_EQ(test_make_file(path, FSIZE, SEED), 0);
	gpufile__cuda_override(&fake);
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
	CHECK_EQ(gpufile_config_set("nthreads", "2"), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffers", "2"), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffer_size", "65536"), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return test_finish("test_batch_pinned");
	before = gpufile_pinned_bytes_max();
	CHECK_EQ(before, 3 * NTHREADS * 2 * (65536 + GPUFILE_ALIGN));

	for (int k = 0; k < NBATCH; k++) {
		unsigned char *dst = dev_base + (size_t)k * 8192;
		gpufile_batch_entry_t e[2] = {{h, dst, 4096, 0},
		                              {h, dst + 4096, 4096, 4096}};

		CHECK_EQ(gpufile_batch_create(&b[k], 2), 0);
		CHECK_EQ(gpufile_batch_submit(b[k], e, 2), 0);
		CHECK_EQ(gpufile_batch_wait(b[k], -1), 2);
		CHECK_EQ(gpufile_batch_result(b[k], 1), 4096);
		CHECK_EQ(test_mismatch(dst, 8192, SEED, 0), -1);
	}
	/* A staged read too: the bounce buffers are held as well. */
	CHECK_EQ(gpufile_pread(h, dev_base + (1u << 20), 1u << 20, 0), 1 << 20);
	max = gpufile_pinned_bytes_max();
	fprintf(stderr, "  pinned held %zu, bound %zu\n", held(), max);
	CHECK(held() <= max);
	/* The documented sum: a worker per chunk of the batch's largest
	 * submit (here one), two slots each. */
	CHECK_EQ(max, before + NBATCH * SLOTS);

	/* A submit of two chunks to b[0]: a second worker starts. */
	{
		static gpufile_batch_entry_t many[TWO_CHUNKS];
		gpufile_batch_t *big;

		for (unsigned i = 0; i < TWO_CHUNKS; i++)
			many[i] = (gpufile_batch_entry_t){
			    h, dev_base + (4u << 20) + (size_t)i * 4096, 4096,
			    (int64_t)i * 4096};
		CHECK_EQ(gpufile_batch_create(&big, TWO_CHUNKS), 0);
		CHECK_EQ(gpufile_batch_submit(big, many, TWO_CHUNKS), 0);
		CHECK_EQ(gpufile_batch_wait(big, -1), (int)TWO_CHUNKS);
		CHECK_EQ(gpufile_batch_result(big, TWO_CHUNKS - 1), 4096);
		CHECK_EQ(test_mismatch(dev_base + (4u << 20), FSIZE, SEED, 0),
		         -1);
		CHECK_EQ(gpufile_pinned_bytes_max(), max + NTHREADS * SLOTS);
		CHECK(held() <= gpufile_pinned_bytes_max());
		/* Again with one chunk: the workers stay (two, not one). */
		CHECK_EQ(gpufile_batch_submit(big, many, 2), 0);
		CHECK_EQ(gpufile_batch_wait(big, -1), 2);
		CHECK_EQ(gpufile_pinned_bytes_max(), max + NTHREADS * SLOTS);
		gpufile_batch_free(big);
		CHECK_EQ(gpufile_pinned_bytes_max(), max);
	}

	for (int k = 0; k < NBATCH; k++)
		gpufile_batch_free(b[k]);
	CHECK_EQ(gpufile_pinned_bytes_max(), before);
	CHECK(held() <= before);
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_release();
	gpufile__cuda_override(NULL);
	gpufile_config_reset();
	free(mem);
	return test_finish("test_batch_pinned");
}
