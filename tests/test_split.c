/*
 * Splitting requests into tasks, at the edges: empty requests, one byte,
 * exactly one task, one byte more, task edges at multiples of task_size in
 * the file (not in the request), unaligned offsets, reads that cross or
 * start past end-of-file. Host memory, on every direct_io backend.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define SEED_FILE  11
#define SEED_WRITE 29
#define CANARY     0xA5

static const char *const backends[] = {"off", "on", "auto"};

static uint64_t expected_tasks(int64_t off, size_t size, size_t ts)
{
	if (size == 0)
		return 0;
	return (uint64_t)((off + (int64_t)size - 1) / (int64_t)ts -
	                  off / (int64_t)ts + 1);
}

static gpufile_counter_t host_counter(int is_write)
{
	gpufile_stats_t st;

	GPUFILE_INIT(st);
	gpufile_stats_self(&st);
	return st.path[GPUFILE_PATH_HOST][is_write];
}

/* ---- recording which ranges each task reads (direct_io=off) ---- */

#define MAX_CALLS 4096
static pthread_mutex_t calls_lock = PTHREAD_MUTEX_INITIALIZER;
static struct call {
	int64_t off;
	size_t len;
} calls[MAX_CALLS];
static int ncalls;

static ssize_t recording_pread(int fd, void *buf, size_t len, off_t off)
{
	pthread_mutex_lock(&calls_lock);
	if (ncalls < MAX_CALLS) {
		calls[ncalls].off = off;
		calls[ncalls].len = len;
	}
	ncalls++;
	pthread_mutex_unlock(&calls_lock);
	return pread(fd, buf, len, off);
}

static ssize_t recording_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	pthread_mutex_lock(&calls_lock);
	if (ncalls < MAX_CALLS) {
		calls[ncalls].off = off;
		calls[ncalls].len = len;
	}
	ncalls++;
	pthread_mutex_unlock(&calls_lock);
	return pwrite(fd, buf, len, off);
}

static int cmp_call(const void *a, const void *b)
{
	const struct call *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* The recorded calls must be exactly the tasks of [off, off+size). */
static void check_calls(int64_t off, size_t size, size_t ts, const char *what)
{
	uint64_t want = expected_tasks(off, size, ts);
	int64_t pos = off;
	const int64_t end = off + (int64_t)size;

	if ((uint64_t)ncalls != want || ncalls > MAX_CALLS) {
		fprintf(stderr,
		        "%s off=%lld size=%zu ts=%zu: %d calls, want %llu\n",
		        what, (long long)off, size, ts, ncalls,
		        (unsigned long long)want);
		test_failures++;
		return;
	}
	qsort(calls, (size_t)ncalls, sizeof(calls[0]), cmp_call);
	for (int i = 0; i < ncalls; i++) {
		int64_t tend = (pos / (int64_t)ts + 1) * (int64_t)ts;

		if (tend > end)
			tend = end;
		if (calls[i].off != pos ||
		    (int64_t)calls[i].len != tend - pos) {
			fprintf(stderr,
			        "%s off=%lld size=%zu ts=%zu: task %d is "
			        "[%lld, +%zu), "
			        "want [%lld, +%lld)\n",
			        what, (long long)off, size, ts, i,
			        (long long)calls[i].off, calls[i].len,
			        (long long)pos, (long long)(tend - pos));
			test_failures++;
			return;
		}
		pos = tend;
	}
}

struct range {
	int64_t off;
	size_t size;
};

/* Requests that all lie inside a file of file_size bytes, for task size ts. */
static int make_ranges(struct range *r, size_t ts)
{
	int n = 0;

	r[n++] = (struct range){0, 0};
	r[n++] = (struct range){5, 0};
	r[n++] = (struct range){0, 1};
	r[n++] = (struct range){(int64_t)ts - 1, 1};
	r[n++] = (struct range){(int64_t)ts, 1};
	r[n++] = (struct range){0, ts};
	r[n++] = (struct range){0, ts - 1};
	r[n++] = (struct range){0, ts + 1};
	r[n++] = (struct range){1, ts - 1};
	r[n++] = (struct range){1, ts};
	r[n++] = (struct range){(int64_t)ts - 1, 2};
	r[n++] = (struct range){(int64_t)ts, ts};
	r[n++] = (struct range){3 * (int64_t)ts, 5 * ts};
	r[n++] = (struct range){100, 10 * ts};
	r[n++] = (struct range){(int64_t)ts + 7, 3 * ts - 9};
	r[n++] = (struct range){(int64_t)ts / 2, 7 * ts + 1};
	return n;
}

#define FILE_TASKS 16 /* the test file holds this many tasks, plus a bit */

static void test_reads(const char *backend, size_t ts)
{
	const char *path = test_path("split-read");
	const size_t file_size = FILE_TASKS * ts + 123;
	struct range ranges[32];
	int nranges = make_ranges(ranges, ts);
	unsigned char *buf = test_malloc(file_size + 2 * ts);
	gpufile_t *h = NULL;

	CHECK_EQ(test_make_file(path, file_size, SEED_FILE), 0);
	CHECK_EQ(gpufile_config_set("direct_io", backend), 0);
	CHECK_EQ(gpufile_set_task_size(ts), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h) {
		free(buf);
		return;
	}

	for (int i = 0; i < nranges; i++) {
		const struct range *r = &ranges[i];
		gpufile_counter_t before, after;
		ssize_t n;

		memset(buf, CANARY, r->size + 64);
		ncalls = 0;
		if (strcmp(backend, "off") == 0)
			gpufile__sys.pread = recording_pread;
		before = host_counter(0);
		n = gpufile_pread(h, buf, r->size, r->off);
		after = host_counter(0);
		gpufile__sys_reset();
		CHECK_EQ(n, (ssize_t)r->size);
		if (n != (ssize_t)r->size)
			fprintf(stderr, "  read off=%lld size=%zu: %s\n",
			        (long long)r->off, r->size, gpufile_errmsg());
		CHECK_EQ(after.tasks - before.tasks,
		         expected_tasks(r->off, r->size, ts));
		CHECK_EQ(after.ops - before.ops, 1);
		CHECK_EQ(after.bytes - before.bytes, r->size);
		CHECK_EQ(after.errors - before.errors, 0);
		CHECK_EQ(
		    test_mismatch(buf, r->size, SEED_FILE, (uint64_t)r->off),
		    -1);
		CHECK_EQ(test_mismatch_byte(buf + r->size, 64, CANARY), -1);
		if (strcmp(backend, "off") == 0)
			check_calls(r->off, r->size, ts, "read");
	}

	/* Crossing end-of-file: bytes up to EOF, the rest untouched. */
	{
		static const struct {
			int64_t off_from_end; /* offset = file_size - this */
			size_t tasks;         /* request size in tasks */
			size_t extra;
		} cross[] = {
		    {1, 0, 1},   {1, 0, 2},   {1, 1, 0},     {123, 0, 124},
		    {123, 1, 0}, {124, 1, 0}, {5000, 3, 17}, {0, 0, 0},
		};
		for (size_t i = 0; i < sizeof(cross) / sizeof(cross[0]); i++) {
			int64_t off =
			    (int64_t)file_size - cross[i].off_from_end;
			size_t size = cross[i].tasks * ts + cross[i].extra;
			size_t want;
			gpufile_counter_t before, after;
			ssize_t n;

			if (off < 0)
				continue;
			want = off + (int64_t)size > (int64_t)file_size
			           ? file_size - (size_t)off
			           : size;
			memset(buf, CANARY, size + 64);
			before = host_counter(0);
			n = gpufile_pread(h, buf, size, off);
			after = host_counter(0);
			CHECK_EQ(n, (ssize_t)want);
			CHECK_EQ(
			    test_mismatch(buf, want, SEED_FILE, (uint64_t)off),
			    -1);
			if (test_mismatch_byte(buf + want, size - want + 64,
			                       CANARY) != -1) {
				fprintf(
				    stderr,
				    "direct_io=%s ts=%zu: read of %zu at %lld "
				    "(EOF at %zu) wrote past EOF: byte %lld "
				    "after the %zu returned changed\n",
				    backend, ts, size, (long long)off,
				    file_size,
				    test_mismatch_byte(
				        buf + want, size - want + 64, CANARY),
				    want);
				test_failures++;
			}
			CHECK_EQ(after.bytes - before.bytes, want);
			CHECK_EQ(after.errors - before.errors, 0);
		}
	}

	/* Entirely past end-of-file: 0, and nothing written. */
	{
		static const int64_t past[] = {0, 1, 4096, 1 << 20};
		for (size_t i = 0; i < sizeof(past) / sizeof(past[0]); i++) {
			size_t size = 3 * ts + 5;
			ssize_t n;

			memset(buf, CANARY, size);
			n = gpufile_pread(h, buf, size,
			                  (int64_t)file_size + past[i]);
			CHECK_EQ(n, 0);
			CHECK_EQ(test_mismatch_byte(buf, size, CANARY), -1);
		}
	}

	/* Asynchronous reads split the same way. */
	{
		gpufile_future_t *f = NULL;
		gpufile_counter_t before = host_counter(0), after;

		memset(buf, CANARY, 5 * ts + 64);
		CHECK_EQ(gpufile_pread_async(h, buf, 5 * ts, 3, &f), 0);
		CHECK_EQ(gpufile_future_wait(f), (ssize_t)(5 * ts));
		gpufile_future_free(f);
		after = host_counter(0);
		CHECK_EQ(after.tasks - before.tasks,
		         expected_tasks(3, 5 * ts, ts));
		CHECK_EQ(test_mismatch(buf, 5 * ts, SEED_FILE, 3), -1);
		CHECK_EQ(test_mismatch_byte(buf + 5 * ts, 64, CANARY), -1);

		before = host_counter(0);
		CHECK_EQ(gpufile_pread_async(h, buf, 0, 0, &f), 0);
		CHECK_EQ(gpufile_future_wait(f), 0);
		gpufile_future_free(f);
		after = host_counter(0);
		CHECK_EQ(after.tasks - before.tasks, 0);
	}

	CHECK_EQ(gpufile_close(h), 0);
	free(buf);
}

static void test_writes(const char *backend, size_t ts)
{
	const char *path = test_path("split-write");
	const size_t file_size = FILE_TASKS * ts + 123;
	struct range ranges[32];
	int nranges = make_ranges(ranges, ts);
	unsigned char *src = test_malloc(file_size + 2 * ts);
	gpufile_t *h = NULL;

	CHECK_EQ(gpufile_config_set("direct_io", backend), 0);
	CHECK_EQ(gpufile_set_task_size(ts), 0);

	for (int i = 0; i < nranges; i++) {
		const struct range *r = &ranges[i];
		gpufile_counter_t before, after;
		unsigned char *data;
		size_t len = 0;
		ssize_t n;

		CHECK_EQ(test_make_file(path, file_size, SEED_FILE), 0);
		CHECK_EQ(gpufile_open(&h, path, "r+"), 0);
		if (!h)
			break;
		test_fill(src, r->size, SEED_WRITE, (uint64_t)r->off);
		ncalls = 0;
		if (strcmp(backend, "off") == 0)
			gpufile__sys.pwrite = recording_pwrite;
		before = host_counter(1);
		n = gpufile_pwrite(h, src, r->size, r->off);
		after = host_counter(1);
		gpufile__sys_reset();
		CHECK_EQ(n, (ssize_t)r->size);
		CHECK_EQ(after.tasks - before.tasks,
		         expected_tasks(r->off, r->size, ts));
		CHECK_EQ(after.ops - before.ops, 1);
		CHECK_EQ(after.bytes - before.bytes, r->size);
		if (strcmp(backend, "off") == 0)
			check_calls(r->off, r->size, ts, "write");
		CHECK_EQ(gpufile_close(h), 0);

		data = test_read_file(path, &len);
		CHECK(data != NULL);
		if (!data)
			continue;
		CHECK_EQ(len, file_size);
		/* Before, inside and after the written range. */
		CHECK_EQ(test_mismatch(data, (size_t)r->off, SEED_FILE, 0), -1);
		CHECK_EQ(test_mismatch(data + r->off, r->size, SEED_WRITE,
		                       (uint64_t)r->off),
		         -1);
		CHECK_EQ(test_mismatch(data + r->off + r->size,
		                       file_size - (size_t)r->off - r->size,
		                       SEED_FILE, (uint64_t)r->off + r->size),
		         -1);
		free(data);
	}

	/* A write past end-of-file extends the file; the gap reads as 0. */
	{
		const int64_t off = (int64_t)file_size + 3 * (int64_t)ts + 1;
		const size_t size = 2 * ts + 3;
		unsigned char *data;
		size_t len = 0;

		CHECK_EQ(test_make_file(path, file_size, SEED_FILE), 0);
		CHECK_EQ(gpufile_open(&h, path, "r+"), 0);
		test_fill(src, size, SEED_WRITE, (uint64_t)off);
		CHECK_EQ(gpufile_pwrite(h, src, size, off), (ssize_t)size);
		CHECK_EQ(gpufile_size(h), off + (int64_t)size);
		CHECK_EQ(gpufile_close(h), 0);
		data = test_read_file(path, &len);
		CHECK(data != NULL);
		if (data) {
			CHECK_EQ(len, (size_t)off + size);
			CHECK_EQ(test_mismatch(data, file_size, SEED_FILE, 0),
			         -1);
			CHECK_EQ(test_mismatch_byte(data + file_size,
			                            (size_t)off - file_size, 0),
			         -1);
			CHECK_EQ(test_mismatch(data + off, size, SEED_WRITE,
			                       (uint64_t)off),
			         -1);
			free(data);
		}
	}
	free(src);
}

int main(void)
{
	static const size_t task_sizes[] = {4096, 64 << 10, 1000};

	for (size_t b = 0; b < sizeof(backends) / sizeof(backends[0]); b++) {
		for (size_t t = 0;
		     t < sizeof(task_sizes) / sizeof(task_sizes[0]); t++) {
			test_reads(backends[b], task_sizes[t]);
			test_writes(backends[b], task_sizes[t]);
		}
	}
	gpufile_config_reset();
	gpufile_release();
	return test_finish("test_split");
}
