/*
 * Where pinned host memory comes from (pinned.c), on the fake CUDA driver:
 *  1. registration allowed: the memory is gpufile's own mapping, at a
 *     2 MiB boundary, registered portable (no cuMemHostAlloc), and a
 *     forked child does not have it (MADV_DONTFORK); freeing unregisters
 *     and unmaps it;
 *  2. freed after its context ended: no driver call, still unmapped;
 *  3. a registration out of memory is the error, naming
 *     cuMemHostRegister: no cuMemHostAlloc of the same pages;
 *  4. a registration refused as an invalid value: cuMemHostAlloc this
 *     time, and registration is tried again the next time;
 *  5. through the library: staged reads and writes over registered
 *     buffers are byte for byte right, and gpufile_release leaves nothing
 *     registered or mapped;
 *  6. a driver that answers CUDA_ERROR_NOT_SUPPORTED: cuMemHostAlloc,
 *     and no registration is tried again in this process (so: last).
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEV_SIZE  (16u << 20)
#define FILE_SIZE ((6u << 20) + 333)
#define SEED      29
#include "fake_cuda.h"

#define LEN ((8u << 20) + 8192) /* two 4 MiB buffers and their slack */

static long read_long(long *v)
{
	long n;

	pthread_mutex_lock(&fake_lock);
	n = *v;
	pthread_mutex_unlock(&fake_lock);
	return n;
}

/* 1 when every page of [p, p + len) is mapped in this process. */
static int mapped(const void *p, size_t len)
{
	static unsigned char vec[(LEN + 4095) / 4096 + 1];

	return mincore((void *)p, len, vec) == 0;
}

/* 1 when a forked child finds [p, p + 4096) not mapped. */
static int child_lacks(const void *p)
{
	unsigned char v;
	pid_t pid = fork();
	int st;

	if (pid == 0)
		_exit(mincore((void *)p, 4096, &v) == -1 && errno == ENOMEM
		          ? 0
		          : 1);
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return 0;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void set_register(int on, CUresult refusal)
{
	pthread_mutex_lock(&fake_lock);
	fake_register = on;
	fake_register_rc = refusal;
	pthread_mutex_unlock(&fake_lock);
}

static void test_registered(const struct gpufile__cuda *t)
{
	struct gpufile__pinned pm;
	const char *call = NULL;
	long allocs = read_long(&hostalloc_calls);
	long regs = read_long(&register_calls);

	set_register(1, CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(gpufile__pinned_alloc(t, LEN, &pm, &call), CUDA_SUCCESS);
	CHECK(pm.p != NULL);
	CHECK_EQ(pm.map_len, (size_t)LEN);
	CHECK_EQ((uintptr_t)pm.p % (2u << 20), 0);
	CHECK_EQ(read_long(&register_calls), regs + 1);
	CHECK_EQ(read_long(&hostalloc_calls), allocs + 1); /* counts both */
	pthread_mutex_lock(&fake_lock);
	CHECK_EQ(pinned_count, 1);
	CHECK_EQ(pinned_live, (size_t)LEN);
	CHECK(pinned[0].registered || pinned[1].registered);
	CHECK(pinned[0].flags & CU_MEMHOSTREGISTER_PORTABLE ||
	      pinned[1].flags & CU_MEMHOSTREGISTER_PORTABLE);
	pthread_mutex_unlock(&fake_lock);
	if (pm.p) {
		memset(pm.p, 0x5a, LEN); /* writable, every byte */
		CHECK(mapped(pm.p, LEN));
		CHECK(child_lacks(pm.p));
	}
	gpufile__pinned_free(t, &pm, 1);
	CHECK(pm.p == NULL);
	CHECK_EQ(read_long(&unregister_calls) > 0, 1);
	pthread_mutex_lock(&fake_lock);
	CHECK_EQ(pinned_count, 0);
	CHECK_EQ(pinned_live, 0);
	pthread_mutex_unlock(&fake_lock);
}

static void test_dead_context(const struct gpufile__cuda *t)
{
	struct gpufile__pinned pm;
	const char *call = NULL;
	long unregs;
	void *p;

	set_register(1, CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(gpufile__pinned_alloc(t, LEN, &pm, &call), CUDA_SUCCESS);
	p = pm.p;
	unregs = read_long(&unregister_calls);
	gpufile__pinned_free(t, &pm, 0);
	CHECK_EQ(read_long(&unregister_calls), unregs); /* no driver call */
	CHECK(p && !mapped(p, 4096));
	/* The fake still counts what the "ended context" would have taken
	 * with it. */
	pthread_mutex_lock(&fake_lock);
	for (int i = 0; i < MAX_PINNED; i++)
		if (pinned[i].ptr == p) {
			pinned_live -= pinned[i].size;
			pinned_count--;
			pinned[i].ptr = NULL;
			pinned[i].registered = 0;
		}
	pthread_mutex_unlock(&fake_lock);
}

static void test_out_of_memory(const struct gpufile__cuda *t)
{
	struct gpufile__pinned pm;
	const char *call = NULL;
	long regs = read_long(&register_calls);
	long allocs = read_long(&hostalloc_calls);

	set_register(1, CUDA_ERROR_INVALID_VALUE);
	pthread_mutex_lock(&fake_lock);
	fail_hostalloc = 1;
	pthread_mutex_unlock(&fake_lock);
	CHECK_EQ(gpufile__pinned_alloc(t, LEN, &pm, &call),
	         CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(pm.p == NULL);
	CHECK(call && !strcmp(call, "cuMemHostRegister"));
	CHECK_EQ(read_long(&register_calls), regs + 1);
	/* The registration's count only: no cuMemHostAlloc after it. */
	CHECK_EQ(read_long(&hostalloc_calls), allocs + 1);
	pthread_mutex_lock(&fake_lock);
	CHECK_EQ(fail_hostalloc, 0);
	CHECK_EQ(pinned_count, 0);
	pthread_mutex_unlock(&fake_lock);
}

static void test_refused(const struct gpufile__cuda *t, CUresult refusal,
                         int tried_again)
{
	struct gpufile__pinned pm;
	const char *call = NULL;
	long regs = read_long(&register_calls);

	set_register(0, refusal);
	CHECK_EQ(gpufile__pinned_alloc(t, LEN, &pm, &call), CUDA_SUCCESS);
	CHECK(pm.p != NULL);
	CHECK_EQ(pm.map_len, 0); /* cuMemHostAlloc's */
	CHECK(call && !strcmp(call, "cuMemHostAlloc"));
	CHECK_EQ(read_long(&register_calls), regs + 1);
	gpufile__pinned_free(t, &pm, 1);
	pthread_mutex_lock(&fake_lock);
	CHECK_EQ(pinned_count, 0);
	pthread_mutex_unlock(&fake_lock);

	/* Allowed again: registered, unless the driver said it never will. */
	set_register(1, refusal);
	CHECK_EQ(gpufile__pinned_alloc(t, LEN, &pm, &call), CUDA_SUCCESS);
	CHECK_EQ(read_long(&register_calls), regs + 1 + tried_again);
	CHECK_EQ(pm.map_len != 0, tried_again);
	gpufile__pinned_free(t, &pm, 1);
	pthread_mutex_lock(&fake_lock);
	CHECK_EQ(pinned_count, 0);
	pthread_mutex_unlock(&fake_lock);
}

static void test_through_library(void)
{
	const char *path = test_path("pinned.bin");
	const char *wpath = test_path("pinned-out.bin");
	unsigned char *back;
	gpufile_t *h = NULL, *w = NULL;
	size_t len = 0;

	set_register(1, CUDA_ERROR_INVALID_VALUE);
	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED), 0);
	CHECK_EQ(gpufile_set_nthreads(4), 0);
	CHECK_EQ(gpufile_set_task_size(1u << 20), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	CHECK_EQ(gpufile_open(&w, wpath, "w"), 0);
	if (!h || !w)
		return;
	memset(dev_base, 0, FILE_SIZE);
	CHECK_EQ(gpufile_pread(h, dev_base, FILE_SIZE, 0), FILE_SIZE);
	CHECK_EQ(test_mismatch(dev_base, FILE_SIZE, SEED, 0), -1);
	CHECK_EQ(gpufile_pwrite(w, dev_base, FILE_SIZE, 0), FILE_SIZE);
	pthread_mutex_lock(&fake_lock);
	CHECK(pinned_count > 0);
	for (int i = 0; i < MAX_PINNED; i++)
		CHECK(!pinned[i].ptr || pinned[i].registered);
	pthread_mutex_unlock(&fake_lock);
	back = test_read_file(wpath, &len);
	CHECK_EQ(len, FILE_SIZE);
	CHECK(back && test_mismatch(back, FILE_SIZE, SEED, 0) == -1);
	free(back);
	gpufile_close(h);
	gpufile_close(w);
	gpufile_release();
	pthread_mutex_lock(&fake_lock);
	CHECK_EQ(pinned_count, 0);
	CHECK_EQ(pinned_live, 0);
	pthread_mutex_unlock(&fake_lock);
}

int main(void)
{
	const struct gpufile__cuda *t;

	if (fake_install())
		return 1;
	t = gpufile__cuda();
	CHECK(t != NULL);
	if (t) {
		test_registered(t);
		test_dead_context(t);
		test_out_of_memory(t);
		test_refused(t, CUDA_ERROR_INVALID_VALUE, 1);
		test_through_library();
		test_refused(t, CUDA_ERROR_NOT_SUPPORTED, 0);
	}
	gpufile__cuda_override(NULL);
	CHECK_EQ(bad_copies, 0);
	CHECK_EQ(stale_uses, 0);
	return test_finish("test_pinned");
}
