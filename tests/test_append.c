/*
 * Append positions follow what the file really holds (issue 10 item 11).
 * After an append that failed (EFAULT from a bad buffer; ENOSPC injected
 * through the system-call table, at the first byte and mid-request), or
 * after another process appended, the next append lands right after the
 * file's real end: no hole, no bytes lost. Before, the position advanced
 * by the failed request's size and the next append left a hole. The same
 * holds for stream-ordered appends (gpufile_write_async, on the fake CUDA
 * driver), whose job's own hold on the handle once counted as another
 * request in flight.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#define SEED     23
#define DEV_SIZE (1u << 20)
#include "fake_cuda.h"

/* pwrite fails with fail_errno at and past file offset fail_from. */
static _Atomic int64_t fail_from = INT64_MAX;
static atomic_int fail_errno;

static ssize_t f_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	const int64_t from = atomic_load(&fail_from);

	if ((int64_t)off + (int64_t)len > from) {
		if ((int64_t)off >= from) {
			errno = atomic_load(&fail_errno);
			return -1;
		}
		len = (size_t)(from - off); /* a short write up to the limit */
	}
	return pwrite(fd, buf, len, off);
}

static int64_t file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* The file's last 5 bytes are "hello" and it is want bytes long. */
static void check_hello_at_end(const char *path, int64_t want)
{
	size_t len = 0;
	unsigned char *data = test_read_file(path, &len);

	CHECK_EQ((int64_t)len, want);
	CHECK(data && len >= 5 && memcmp(data + len - 5, "hello", 5) == 0);
	free(data);
}

static void append_after_efault(const char *path)
{
	const size_t bad_len = 8192;
	void *bad =
	    mmap(NULL, bad_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	gpufile_t *h = NULL;

	CHECK(bad != MAP_FAILED);
	unlink(path);
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	if (!h || bad == MAP_FAILED)
		return;
	CHECK_EQ(gpufile_pwrite(h, bad, bad_len, 0), -EFAULT);
	CHECK_EQ(gpufile_pwrite(h, "hello", 5, 0), 5);
	CHECK_EQ(gpufile_close(h), 0);
	check_hello_at_end(path, 5);
	munmap(bad, bad_len);
}

/* An append of size bytes that fails with err once the file reaches
 * limit bytes; then "hello". */
static void append_after_fault(const char *path, size_t size, int64_t limit,
                               int err)
{
	unsigned char *data = test_malloc(size);
	gpufile_t *h = NULL;
	int64_t real_end;
	ssize_t n;

	CHECK_EQ(test_make_file(path, 1000, SEED), 0);
	test_fill(data, size, SEED, 1000);
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	if (!h) {
		free(data);
		return;
	}
	atomic_store(&fail_errno, err);
	atomic_store(&fail_from, limit);
	n = gpufile_pwrite(h, data, size, 0);
	atomic_store(&fail_from, INT64_MAX);
	CHECK_EQ(n, -err);
	real_end = file_size(path);
	CHECK(real_end >= 1000 && real_end <= limit);
	CHECK_EQ(gpufile_pwrite(h, "hello", 5, 0), 5);
	CHECK_EQ(gpufile_close(h), 0);
	check_hello_at_end(path, real_end + 5);
	free(data);
}

/* Another writer appends between two appends of the handle. */
static void append_after_other_writer(const char *path)
{
	unsigned char other[100];
	gpufile_t *h = NULL;
	int fd;

	unlink(path);
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	if (!h)
		return;
	CHECK_EQ(gpufile_pwrite(h, "12345", 5, 0), 5);
	fd = open(path, O_WRONLY | O_APPEND);
	CHECK(fd >= 0);
	memset(other, 'x', sizeof(other));
	CHECK_EQ(write(fd, other, sizeof(other)), (ssize_t)sizeof(other));
	close(fd);
	CHECK_EQ(gpufile_pwrite(h, "hello", 5, 0), 5);
	CHECK_EQ(gpufile_close(h), 0);
	check_hello_at_end(path, 5 + 100 + 5);
}

/* A stream-ordered append of "hello" from buf (host memory: a flag holds
 * the stream; device memory: the call blocks), run to its end. */
static void stream_append_hello(gpufile_t *h, void *buf)
{
	ssize_t n = -777;
	CUstream s;

	memcpy(buf, "hello", 5);
	CHECK_EQ(fake.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), 0);
	CHECK_EQ(gpufile_write_async(h, buf, 5, 0, s, &n), 0);
	CHECK_EQ(fake.cuStreamSynchronize(s), 0);
	CHECK_EQ(n, 5);
	CHECK_EQ(fake.cuStreamDestroy(s), 0);
}

/* Stream-ordered appends start at the file's real end too, after a failed
 * append and after another writer's: they used to land at the end the
 * handle had reserved (a hole of 8192 bytes; over the other's bytes). */
static void stream_appends(const char *path)
{
	const size_t bad_len = 8192;
	void *bad =
	    mmap(NULL, bad_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned char host[16], other[100];
	gpufile_t *h = NULL;
	int fd;

	CHECK(bad != MAP_FAILED);
	CHECK_EQ(fake_install(), 0);
	unlink(path);
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	if (!h || bad == MAP_FAILED || !dev_base)
		return;
	CHECK_EQ(gpufile_pwrite(h, bad, bad_len, 0), -EFAULT);
	stream_append_hello(h, host);
	check_hello_at_end(path, 5);
	memset(other, 'x', sizeof(other));
	for (int i = 0; i < 2; i++) {
		fd = open(path, O_WRONLY | O_APPEND);
		CHECK(fd >= 0);
		CHECK_EQ(write(fd, other, sizeof(other)),
		         (ssize_t)sizeof(other));
		close(fd);
		stream_append_hello(h, i == 0 ? (void *)host : dev_base);
		check_hello_at_end(path, 5 + (i + 1) * (100 + 5));
	}
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_release();
	gpufile__cuda_override(NULL);
	free(dev_base);
	munmap(bad, bad_len);
}

/* An "a" handle ignores file_offset, whatever its value: -1 and INT64_MAX
 * append as 0 does (they were refused as out of range). */
static void append_ignores_offset(const char *path)
{
	gpufile_future_t *f = NULL;
	gpufile_t *h = NULL;

	unlink(path);
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	if (!h)
		return;
	CHECK_EQ(gpufile_pwrite(h, "12345", 5, -1), 5);
	CHECK_EQ(gpufile_pwrite(h, "67890", 5, INT64_MAX), 5);
	CHECK_EQ(gpufile_pwrite_async(h, "hello", 5, INT64_MIN, &f), 0);
	CHECK_EQ(gpufile_future_wait(f), 5);
	gpufile_future_free(f);
	CHECK_EQ(gpufile_close(h), 0);
	check_hello_at_end(path, 15);
}

/* Appends in flight together are placed one after another. */
static void appends_in_flight(const char *path)
{
	enum { N = 6, LEN = 300000 };
	unsigned char *data = test_malloc((size_t)N * LEN);
	gpufile_future_t *f[N];
	gpufile_t *h = NULL;
	size_t len = 0;
	unsigned char *back;

	unlink(path);
	test_fill(data, (size_t)N * LEN, SEED, 0);
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	if (!h) {
		free(data);
		return;
	}
	for (int i = 0; i < N; i++)
		CHECK_EQ(gpufile_pwrite_async(h, data + (size_t)i * LEN, LEN, 0,
		                              &f[i]),
		         0);
	for (int i = 0; i < N; i++) {
		CHECK_EQ(gpufile_future_wait(f[i]), LEN);
		gpufile_future_free(f[i]);
	}
	CHECK_EQ(gpufile_close(h), 0);
	back = test_read_file(path, &len);
	CHECK_EQ(len, (size_t)N * LEN);
	CHECK(back && test_mismatch(back, len, SEED, 0) == -1);
	free(back);
	free(data);
}

/* Threads appending at once on one handle: every record lands whole, in
 * its own place, none lost (two appends placed at the same end would
 * overwrite each other). */
enum { THREADS = 4, RECORDS = 200, RECORD = 512 };
static gpufile_t *shared_h;

static void *appender(void *arg)
{
	const int id = (int)(intptr_t)arg;
	unsigned char rec[RECORD];

	for (int i = 0; i < RECORDS; i++) {
		memset(rec, 'a' + id, sizeof(rec));
		memcpy(rec, &i, sizeof(i));
		if (gpufile_pwrite(shared_h, rec, RECORD, 0) != RECORD)
			return (void *)1;
	}
	return NULL;
}

static void appends_from_threads(const char *path)
{
	pthread_t t[THREADS];
	int seen[THREADS][RECORDS] = {{0}};
	unsigned char *data;
	size_t len = 0;
	int bad = 0;

	unlink(path);
	CHECK_EQ(gpufile_open(&shared_h, path, "a"), 0);
	if (!shared_h)
		return;
	for (int i = 0; i < THREADS; i++)
		CHECK_EQ(
		    pthread_create(&t[i], NULL, appender, (void *)(intptr_t)i),
		    0);
	for (int i = 0; i < THREADS; i++) {
		void *ret = NULL;
		pthread_join(t[i], &ret);
		CHECK(ret == NULL);
	}
	CHECK_EQ(gpufile_close(shared_h), 0);
	data = test_read_file(path, &len);
	CHECK_EQ(len, (size_t)THREADS * RECORDS * RECORD);
	for (size_t off = 0; data && off + RECORD <= len; off += RECORD) {
		const unsigned char *rec = data + off;
		int id = rec[RECORD - 1] - 'a', i;

		memcpy(&i, rec, sizeof(i));
		if (id < 0 || id >= THREADS || i < 0 || i >= RECORDS ||
		    test_mismatch_byte(rec + sizeof(i), RECORD - sizeof(i),
		                       rec[RECORD - 1]) != -1) {
			bad++;
			continue;
		}
		seen[id][i]++;
	}
	for (int id = 0; id < THREADS; id++)
		for (int i = 0; i < RECORDS; i++)
			if (seen[id][i] != 1)
				bad++;
	CHECK_EQ(bad, 0);
	free(data);
}

int main(void)
{
	const char *path = test_path("append.bin");

	gpufile__sys.pwrite = f_pwrite;
	CHECK_EQ(gpufile_set_task_size(64 << 10), 0);
	CHECK_EQ(gpufile_set_nthreads(4), 0);

	append_after_efault(path);
	/* ENOSPC and EDQUOT at the first byte, in the first task, and in a
	 * middle task of a multi-task append. */
	append_after_fault(path, 8192, 1000, ENOSPC);
	append_after_fault(path, 8192, 1000 + 100, ENOSPC);
	append_after_fault(path, 1u << 20, 1000 + (300 << 10) + 7, ENOSPC);
	append_after_fault(path, 1u << 20, 1000 + (500 << 10), EDQUOT);
	append_after_other_writer(path);
	append_ignores_offset(path);
	appends_in_flight(path);
	appends_from_threads(path);
	stream_appends(path);

	gpufile__sys_reset();
	gpufile_config_reset();
	return test_finish("test_append");
}
