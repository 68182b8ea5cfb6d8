/*
 * A request that cannot get a worker thread or memory fails with a
 * message naming the file, the offset and the size. pthread_create, malloc
 * and calloc are wrapped (-Wl,--wrap, tests/CMakeLists.txt): pthread_create
 * fails with EAGAIN (as under RLIMIT_NPROC) while armed, and the allocators
 * fail their k-th call made by this thread, for every k until the call
 * makes no more. (The messages were "cannot start a worker thread:
 * Resource temporarily unavailable" and "out of memory for a request",
 * naming nothing.)
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define SEED  43
#define TS    (64u << 10)
#define FSIZE (16 * TS)
#define OFF   4096
#define LEN   (8 * TS)

int __real_pthread_create(pthread_t *t, const pthread_attr_t *attr,
                          void *(*fn)(void *), void *arg);
int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *attr,
                          void *(*fn)(void *), void *arg);
void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);

static atomic_int no_threads;
/* Only the thread that arms it: the workers allocate freely. */
static _Thread_local long fail_at = -1, calls;

int __wrap_pthread_create(pthread_t *t, const pthread_attr_t *attr,
                          void *(*fn)(void *), void *arg)
{
	if (atomic_load(&no_threads))
		return EAGAIN;
	return __real_pthread_create(t, attr, fn, arg);
}

static int fail_now(void)
{
	return fail_at >= 0 && calls++ == fail_at;
}

void *__wrap_malloc(size_t n)
{
	return fail_now() ? NULL : __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
	return fail_now() ? NULL : __real_calloc(n, size);
}

/* The message names what was asked: "reading PATH at offset OFF". */
static void check_names(const char *op, const char *path, long long off)
{
	char want[4200];

	snprintf(want, sizeof(want), "%s %s at offset %lld (", op, path, off);
	CHECK_CONTAINS(gpufile_errmsg(), want);
	fprintf(stderr, "  %s\n", gpufile_errmsg());
}

/* Writes a safetensors file of one U8 tensor of LEN bytes. Returns the
 * offset of its data section in the file. */
static long long write_safetensors(const char *path)
{
	char json[128];
	unsigned char len8[8];
	unsigned char *data = test_malloc(LEN);
	size_t hl = (size_t)snprintf(json, sizeof(json),
	                             "{\"t\":{\"dtype\":\"U8\",\"shape\":[%u],"
	                             "\"data_offsets\":[0,%u]}}",
	                             LEN, LEN);
	FILE *f = fopen(path, "wb");

	for (int i = 0; i < 8; i++)
		len8[i] = (unsigned char)(hl >> (8 * i));
	test_fill(data, LEN, SEED, 0);
	if (!f || fwrite(len8, 1, 8, f) != 8 || fwrite(json, 1, hl, f) != hl ||
	    fwrite(data, 1, LEN, f) != LEN || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
	free(data);
	return 8 + (long long)hl;
}

/* No worker thread can start: every request the pool would run fails,
 * naming its file, offset and size; the inline ones (one task, or a
 * buffered write) still run. */
static void test_no_thread(const char *path, const char *st_path, char *buf)
{
	gpufile_safetensors_t *st = NULL;
	gpufile_future_t *f = NULL;
	gpufile_mmap_t *m = NULL;
	gpufile_t *h = NULL;
	long long data_off = write_safetensors(st_path);

	CHECK_EQ(gpufile_open(&h, path, "r+"), 0);
	CHECK_EQ(gpufile_mmap_open(&m, path, "r", 0, 0), 0);
	CHECK_EQ(gpufile_safetensors_open(&st, st_path), 0);
	if (!h || !m || !st)
		goto out;
	gpufile_release(); /* no worker left */
	atomic_store(&no_threads, 1);

	CHECK_EQ(gpufile_pread(h, buf, LEN, OFF), -EAGAIN);
	check_names("reading", path, OFF);
	CHECK_CONTAINS(gpufile_errmsg(), "cannot start a worker thread");
	/* A buffered write runs in the caller (file.c, one_writer): the
	 * file's own bytes, written back. */
	test_fill(buf, LEN, SEED, OFF);
	CHECK_EQ(gpufile_pwrite(h, buf, LEN, OFF), LEN);
	CHECK_EQ(gpufile_pread_async(h, buf, LEN, OFF, &f), -EAGAIN);
	CHECK(f == NULL);
	check_names("reading", path, OFF);
	CHECK_EQ(gpufile_mmap_pread(m, buf, LEN, OFF), -EAGAIN);
	check_names("reading", path, OFF);
	CHECK_EQ(gpufile_safetensors_load(st, buf, FSIZE), -EAGAIN);
	check_names("reading", st_path, data_off);
	/* One task runs in the caller: no worker needed. */
	CHECK_EQ(gpufile_pread(h, buf, 100, OFF), 100);
	CHECK_EQ(test_mismatch(buf, 100, SEED, OFF), -1);

	atomic_store(&no_threads, 0);
	CHECK_EQ(gpufile_pread(h, buf, LEN, OFF), LEN);
	CHECK_EQ(test_mismatch(buf, LEN, SEED, OFF), -1);
	CHECK_EQ(gpufile_safetensors_load(st, buf, FSIZE), LEN);
	CHECK_EQ(test_mismatch(buf, LEN, SEED, 0), -1);
out:
	gpufile_safetensors_close(st);
	gpufile_mmap_close(m);
	CHECK_EQ(gpufile_close(h), 0);
}

/* The k-th allocation of gpufile_pread_async or gpufile_mmap_pread_async
 * fails, for every k: each -ENOMEM names the file and the offset. */
static void test_no_memory(const char *path, char *buf)
{
	gpufile_mmap_t *m = NULL;
	gpufile_t *h = NULL;
	long nomem = 0;

	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	CHECK_EQ(gpufile_mmap_open(&m, path, "r", 0, 0), 0);
	if (!h || !m)
		goto out;
	for (int way = 0; way < 2; way++) {
		for (long k = 0;; k++) {
			gpufile_future_t *f = NULL;
			int rc;

			calls = 0;
			fail_at = k;
			rc =
			    way ? gpufile_mmap_pread_async(m, buf, LEN, OFF, &f)
			        : gpufile_pread_async(h, buf, LEN, OFF, &f);
			fail_at = -1;
			if (rc == 0) {
				CHECK_EQ(gpufile_future_wait(f), LEN);
				gpufile_future_free(f);
				CHECK_EQ(test_mismatch(buf, LEN, SEED, OFF),
				         -1);
				if (calls <= k)
					break; /* no call failed */
				continue;
			}
			CHECK_EQ(rc, -ENOMEM);
			CHECK(f == NULL);
			check_names("reading", path, OFF);
			nomem++;
		}
	}
	/* At least the future's allocation of each way failed. */
	CHECK(nomem >= 2);
out:
	gpufile_mmap_close(m);
	CHECK_EQ(gpufile_close(h), 0);
}

int main(void)
{
	/* test_path's buffers rotate: keep copies. */
	char *path = strdup(test_path("out-of-resources"));
	char *st_path = strdup(test_path("out-of-resources.safetensors"));
	char *buf = test_malloc(FSIZE);

	CHECK_EQ(test_make_file(path, FSIZE, SEED), 0);
	CHECK_EQ(gpufile_set_task_size(TS), 0);
	test_no_thread(path, st_path, buf);
	test_no_memory(path, buf);
	gpufile_release();
	free(buf);
	free(path);
	free(st_path);
	return test_finish("test_out_of_resources");
}
