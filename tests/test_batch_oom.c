/*
 * A batch submit that runs out of memory fails with -ENOMEM and leaves
 * the batch usable: the next submit reads every entry right. malloc and
 * calloc are wrapped (-Wl,--wrap, tests/CMakeLists.txt) so that the k-th
 * call of either made by the submitting thread fails, for every k until
 * a submit makes no more calls than that. (A submit that failed while
 * allocating the workers' arrays kept them half made, and the next submit
 * started workers with NULL arrays: a segmentation fault.)
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <string.h>

#define SEED  41
#define FSIZE (1u << 20)
#define N     32
#define SIZE  4096

void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);

/* Only the thread that arms it: the batch's workers allocate freely. */
static _Thread_local long fail_at = -1, calls;
static _Thread_local int failed;

static int fail_now(void)
{
	if (fail_at < 0 || calls++ != fail_at)
		return 0;
	failed = 1;
	return 1;
}

void *__wrap_malloc(size_t n)
{
	return fail_now() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
	return fail_now() ? NULL : __real_calloc(n, size);
}

static void arm(long k)
{
	calls = 0;
	failed = 0;
	fail_at = k;
}

int main(void)
{
	const char *path = test_path("batch-oom");
	static char buf[N][SIZE];
	gpufile_batch_entry_t e[N];
	gpufile_t *h = NULL;
	long k, nomem = 0;

	CHECK_EQ(test_make_file(path, FSIZE, SEED), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return test_finish("test_batch_oom");
	for (unsigned i = 0; i < N; i++)
		e[i] = (gpufile_batch_entry_t){h, buf[i], SIZE,
		                               (int64_t)i * 3 * SIZE + 5};
	for (k = 0;; k++) {
		gpufile_batch_t *b = NULL;
		int rc, hit;

		CHECK_EQ(gpufile_batch_create(&b, N), 0);
		if (!b)
			break;
		memset(buf, 0, sizeof(buf));
		arm(k);
		rc = gpufile_batch_submit(b, e, N);
		hit = failed;
		arm(-1);
		if (rc == 0)
			CHECK_EQ(gpufile_batch_wait(b, -1), N);
		if (rc) {
			nomem++;
			CHECK_EQ(rc, -ENOMEM);
			CHECK_CONTAINS(gpufile_errmsg(), "out of memory");
			CHECK(hit);
			CHECK_EQ(gpufile_batch_submit(b, e, N), 0);
			CHECK_EQ(gpufile_batch_wait(b, -1), N);
		}
		for (unsigned i = 0; i < N; i++) {
			CHECK_EQ(gpufile_batch_result(b, i), SIZE);
			CHECK_EQ(test_mismatch(buf[i], SIZE, SEED,
			                       (uint64_t)e[i].offset),
			         -1);
		}
		gpufile_batch_free(b);
		if (!hit)
			break; /* the submit made fewer than k + 1 calls */
	}
	fprintf(stderr,
	        "  %ld allocations in a first submit, %ld refused "
	        "it with -ENOMEM\n",
	        k, nomem);
	/* The workers (one calloc) and their arrays (four mallocs each) are
	 * among them. */
	CHECK(nomem >= 5);
	CHECK_EQ(gpufile_close(h), 0);
	return test_finish("test_batch_oom");
}
