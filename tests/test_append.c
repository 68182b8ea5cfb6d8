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
 *
 * A failed append leaves nothing of itself in the file (issue 32 item 6):
 * an append one of whose tasks failed with ENOSPC while a task above it
 * wrote grew the file by its whole size, zeros where the task failed, and
 * the next append landed after them. Now it is cut back off, at once when
 * it was alone in flight, or once the appends in flight with it have
 * ended; only an append placed after it that was written keeps its range
 * in the file (and its message says so). The ENOSPC and EDQUOT cases of
 * append_after_fault now ask for the file's size before the append, not
 * any size up to the fault. A file system that really fills up:
 * test_append_enospc.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEED     23
#define DEV_SIZE (1u << 20)
#include "fake_cuda.h"

/* pwrite fails with fail_errno at and past file offset fail_from. */
static _Atomic int64_t fail_from = INT64_MAX;
static atomic_int fail_errno;
/* A pwrite whose range holds file offset one_at fails with ENOSPC, once a
 * pwrite at or past offset gate_from has been made (-1: at once): one task
 * of an append fails while a task above it, or a later append, writes
 * (as on a file system that ran out of space for one task only). The
 * wait makes sure the append is still in flight when that write starts,
 * whatever the order the threads run in. */
static _Atomic int64_t one_at = -1;
static _Atomic int64_t gate_from = -1;
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_open;

static ssize_t f_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	const int64_t from = atomic_load(&fail_from);
	const int64_t at = atomic_load(&one_at);
	const int64_t gate = atomic_load(&gate_from);

	if (gate >= 0 && (int64_t)off >= gate) {
		pthread_mutex_lock(&gate_lock);
		gate_open = 1;
		pthread_cond_broadcast(&gate_cond);
		pthread_mutex_unlock(&gate_lock);
	}
	if (at >= 0 && (int64_t)off <= at && at < (int64_t)off + (int64_t)len) {
		pthread_mutex_lock(&gate_lock);
		while (gate >= 0 && !gate_open)
			pthread_cond_wait(&gate_cond, &gate_lock);
		pthread_mutex_unlock(&gate_lock);
		errno = ENOSPC;
		return -1;
	}
	if ((int64_t)off + (int64_t)len > from) {
		if ((int64_t)off >= from) {
			errno = atomic_load(&fail_errno);
			return -1;
		}
		len = (size_t)(from - off); /* a short write up to the limit */
	}
	return pwrite(fd, buf, len, off);
}

static void inject_one(int64_t at, int64_t from)
{
	pthread_mutex_lock(&gate_lock);
	gate_open = 0;
	atomic_store(&gate_from, from);
	atomic_store(&one_at, at);
	pthread_mutex_unlock(&gate_lock);
}

static int64_t file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* The file's first len bytes are test_make_file's (SEED). */
static void check_head(const char *path, size_t len)
{
	size_t got = 0;
	unsigned char *data = test_read_file(path, &got);

	CHECK(data && got >= len && test_mismatch(data, len, SEED, 0) == -1);
	free(data);
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
	/* Cut back to its size before the append: the part written below
	 * the fault is not kept. */
	real_end = file_size(path);
	CHECK_EQ(real_end, 1000);
	CHECK(limit > 1000 || real_end <= limit);
	CHECK_EQ(gpufile_pwrite(h, "hello", 5, 0), 5);
	CHECK_EQ(gpufile_close(h), 0);
	check_hello_at_end(path, 1000 + 5);
	check_head(path, 1000);
	free(data);
}

/* One task in the middle of a multi-task append fails with ENOSPC after
 * the last task has written (issue 32 item 6: the file grew by the whole
 * append, zeros where the failed task should have written, and the next
 * append landed after them). The file is as it was before the append. */
static void append_one_task_fails(const char *path)
{
	const size_t size = 1u << 20;
	unsigned char *data = test_malloc(size);
	gpufile_t *h = NULL;
	ssize_t n;

	CHECK_EQ(test_make_file(path, 1000, SEED), 0);
	test_fill(data, size, SEED, 1000);
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	if (!h) {
		free(data);
		return;
	}
	/* Its last task starts at 1 MiB. Asynchronous: the pool's tasks run
	 * at once (a blocking buffered write runs them one after the other
	 * in the caller: the failing one would wait for the last forever). */
	inject_one(1000 + (300 << 10), 1 << 20);
	{
		gpufile_future_t *f = NULL;

		n = gpufile_pwrite_async(h, data, size, 0, &f);
		if (n == 0)
			n = gpufile_future_wait(f);
		gpufile_future_free(f);
	}
	inject_one(-1, -1);
	CHECK_EQ(n, -ENOSPC);
	CHECK_EQ(file_size(path), 1000);
	CHECK_EQ(gpufile_pwrite(h, "hello", 5, 0), 5);
	CHECK_EQ(gpufile_close(h), 0);
	check_hello_at_end(path, 1000 + 5);
	check_head(path, 1000);
	free(data);
}

/* Two appends in flight at once, the second ("world") placed after the
 * first (1 MiB), whose task at 300 KiB fails with ENOSPC once the second
 * has started to write. The second writes 2 bytes and fails too with
 * both_fail: the file is as before them; else it is written and the
 * first's range stays, as gpufile_open(3) says. */
static void two_appends(const char *path, int both_fail)
{
	const size_t size = 1u << 20;
	const int64_t end = 1000 + (int64_t)size;
	unsigned char *data = test_malloc(size);
	gpufile_future_t *fa = NULL, *fb = NULL;
	gpufile_t *h = NULL;
	char msg[1024];

	CHECK_EQ(test_make_file(path, 1000, SEED), 0);
	test_fill(data, size, SEED, 1000);
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	if (!h) {
		free(data);
		return;
	}
	atomic_store(&fail_errno, ENOSPC);
	if (both_fail)
		atomic_store(&fail_from, end + 2);
	inject_one(1000 + (300 << 10), end);
	CHECK_EQ(gpufile_pwrite_async(h, data, size, 0, &fa), 0);
	CHECK_EQ(gpufile_pwrite_async(h, "world", 5, 0, &fb), 0);
	CHECK_EQ(gpufile_future_wait(fb), both_fail ? -ENOSPC : 5);
	CHECK_EQ(gpufile_future_wait(fa), -ENOSPC);
	snprintf(msg, sizeof(msg), "%s", gpufile_errmsg());
	gpufile_future_free(fa);
	gpufile_future_free(fb);
	inject_one(-1, -1);
	atomic_store(&fail_from, INT64_MAX);
	if (both_fail) {
		CHECK_EQ(file_size(path), 1000);
	} else {
		CHECK_EQ(file_size(path), end + 5);
		CHECK_CONTAINS(msg, "stays in the file");
	}
	CHECK_EQ(gpufile_pwrite(h, "hello", 5, 0), 5);
	CHECK_EQ(gpufile_close(h), 0);
	check_hello_at_end(path, both_fail ? 1005 : end + 10);
	check_head(path, 1000);
	free(data);
}

/* Opens the gate by hand: a failing write injected with a gate no write
 * reaches (INT64_MAX) waits for this. */
static void open_gate(void)
{
	pthread_mutex_lock(&gate_lock);
	gate_open = 1;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

/* A zero-size append placed after a failing one, ended while that one is
 * in flight, wrote nothing: the failed one is still cut back off (it
 * counted as an append placed after it that was written, and the failed
 * range stayed in the file, zeros where its task failed). */
static void zero_size_after_failed(const char *path)
{
	const size_t size = 1u << 20;
	unsigned char *data = test_malloc(size);
	gpufile_future_t *fa = NULL;
	gpufile_t *h = NULL;

	CHECK_EQ(test_make_file(path, 1000, SEED), 0);
	test_fill(data, size, SEED, 1000);
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	if (!h) {
		free(data);
		return;
	}
	inject_one(1000 + (300 << 10), INT64_MAX);
	CHECK_EQ(gpufile_pwrite_async(h, data, size, 0, &fa), 0);
	CHECK_EQ(gpufile_pwrite(h, data, 0, 0), 0);
	open_gate();
	CHECK_EQ(gpufile_future_wait(fa), -ENOSPC);
	gpufile_future_free(fa);
	inject_one(-1, -1);
	CHECK_EQ(file_size(path), 1000);
	CHECK_EQ(gpufile_close(h), 0);
	check_head(path, 1000);
	free(data);
}

/* Another writer appends after a failing append's last byte was written,
 * while the failed task still waits: the cut must not take the other
 * writer's bytes with it (the file was cut back to the append's start,
 * and the other writer's 100 bytes were lost). */
static void other_writer_after_failed(const char *path)
{
	const size_t size = 1u << 20;
	const int64_t end = 1000 + (int64_t)size;
	unsigned char *data = test_malloc(size), other[100], *back;
	gpufile_future_t *fa = NULL;
	gpufile_t *h = NULL;
	size_t len = 0;
	int fd;
	char msg[1024];

	CHECK_EQ(test_make_file(path, 1000, SEED), 0);
	test_fill(data, size, SEED, 1000);
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	if (!h) {
		free(data);
		return;
	}
	inject_one(1000 + (300 << 10), INT64_MAX);
	CHECK_EQ(gpufile_pwrite_async(h, data, size, 0, &fa), 0);
	/* Every other task writes; the last brings the file to end. */
	while (file_size(path) < end)
		sched_yield();
	fd = open(path, O_WRONLY | O_APPEND);
	CHECK(fd >= 0);
	memset(other, 'x', sizeof(other));
	CHECK_EQ(write(fd, other, sizeof(other)), (ssize_t)sizeof(other));
	close(fd);
	open_gate();
	CHECK_EQ(gpufile_future_wait(fa), -ENOSPC);
	snprintf(msg, sizeof(msg), "%s", gpufile_errmsg());
	gpufile_future_free(fa);
	inject_one(-1, -1);
	CHECK_EQ(gpufile_close(h), 0);
	back = test_read_file(path, &len);
	CHECK_EQ((int64_t)len, end + 100);
	CHECK(back && len == (size_t)end + 100 &&
	      test_mismatch_byte(back + end, 100, 'x') == -1);
	CHECK_CONTAINS(msg, "stays in the file");
	check_head(path, 1000);
	free(back);
	free(data);
}

/* A child forked while an append is in flight (its failing task held):
 * the child's copy of that append is cancelled, and an append of the
 * child that fails is cut back off at once, as in any process (the
 * cancelled append stayed counted in flight in the child: nothing the
 * child appended was ever cut back, and its failed bytes stayed, which
 * also kept the parent's failed append from being cut back). */
static void fork_during_append(const char *path)
{
	const size_t size = 1u << 20;
	const int64_t end = 1000 + (int64_t)size;
	unsigned char *data = test_malloc(size);
	gpufile_future_t *fa = NULL;
	gpufile_t *h = NULL;
	int status = -1;
	pid_t pid;

	CHECK_EQ(test_make_file(path, 1000, SEED), 0);
	test_fill(data, size, SEED, 1000);
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	if (!h) {
		free(data);
		return;
	}
	inject_one(1000 + (300 << 10), INT64_MAX);
	CHECK_EQ(gpufile_pwrite_async(h, data, size, 0, &fa), 0);
	while (file_size(path) < end)
		sched_yield();
	pid = fork();
	if (pid == 0) {
		ssize_t n;

		atomic_store(&fail_errno, ENOSPC);
		atomic_store(&fail_from, end + 100);
		n = gpufile_pwrite(h, data, 8192, 0);
		_exit(n == -ENOSPC && file_size(path) == end ? 0 : 1);
	}
	CHECK(pid > 0);
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	open_gate();
	CHECK_EQ(gpufile_future_wait(fa), -ENOSPC);
	gpufile_future_free(fa);
	inject_one(-1, -1);
	CHECK_EQ(file_size(path), 1000);
	CHECK_EQ(gpufile_close(h), 0);
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
	/* A stream-ordered append that writes 2 of its bytes and fails
	 * leaves the file as it was; the next lands right after. */
	for (int i = 0; i < 2; i++) {
		void *buf = i == 0 ? (void *)host : dev_base;
		const int64_t before = file_size(path);
		ssize_t n = -777;
		CUstream s;

		memcpy(buf, "hello", 5);
		atomic_store(&fail_errno, ENOSPC);
		atomic_store(&fail_from, before + 2);
		CHECK_EQ(fake.cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), 0);
		CHECK_EQ(gpufile_write_async(h, buf, 5, 0, s, &n), 0);
		CHECK_EQ(fake.cuStreamSynchronize(s), 0);
		CHECK_EQ(fake.cuStreamDestroy(s), 0);
		atomic_store(&fail_from, INT64_MAX);
		CHECK_EQ(n, -ENOSPC);
		CHECK_EQ(file_size(path), before);
		stream_append_hello(h, buf);
		check_hello_at_end(path, before + 5);
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
	append_one_task_fails(path);
	two_appends(path, 1);
	two_appends(path, 0);
	append_after_other_writer(path);
	zero_size_after_failed(path);
	other_writer_after_failed(path);
	fork_during_append(path);
	append_ignores_offset(path);
	appends_in_flight(path);
	appends_from_threads(path);
	stream_appends(path);

	gpufile__sys_reset();
	gpufile_config_reset();
	return test_finish("test_append");
}
