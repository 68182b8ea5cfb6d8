/*
 * Asynchronous requests: many in flight from many threads at once (reads
 * and writes of disjoint regions of one handle), every way of waiting
 * (wait, polling done, wait_for with a timeout, free without a wait),
 * the ops counters, back-pressure with a small max_inflight, and changing
 * nthreads between (and while) requests are in flight.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#define NTHREADS  8
#define REGION    (1u << 20) /* bytes per thread */
#define NREQ      32         /* requests per thread per round */
#define ROUNDS    3
#define FILE_SIZE (NTHREADS * REGION)

static gpufile_t *shared_handle;
static unsigned char *src, *dst;
static pthread_barrier_t barrier;

/* Cut points of a thread's region into NREQ disjoint, irregular pieces. */
static size_t cut(int i)
{
	if (i <= 0)
		return 0;
	if (i >= NREQ)
		return REGION;
	return (size_t)i * (REGION / NREQ) + (size_t)(i * 37 % 1000);
}

/* Waits for f in one of four ways, chosen by i; returns its result, or
 * want when the way chosen (free without wait) gives none. */
static ssize_t finish(gpufile_future_t *f, int i, ssize_t want)
{
	ssize_t n;

	switch (i % 4) {
	case 0:
		n = gpufile_future_wait(f);
		CHECK_EQ(gpufile_future_done(f), 1);
		CHECK_EQ(gpufile_future_wait(f), n); /* again: same value */
		break;
	case 1:
		while (!gpufile_future_done(f))
			sched_yield();
		n = gpufile_future_wait_for(f, 0);
		break;
	case 2:
		while ((n = gpufile_future_wait_for(f, 5)) == -ETIMEDOUT)
			;
		break;
	default:
		gpufile_future_free(f); /* must wait for it */
		return want;
	}
	gpufile_future_free(f);
	return n;
}

static void *worker(void *arg)
{
	const int t = (int)(intptr_t)arg;
	const size_t base = (size_t)t * REGION;
	gpufile_future_t *f[NREQ];

	for (int round = 0; round < ROUNDS; round++) {
		const uint64_t seed = 1000 + (uint64_t)round;

		test_fill(src + base, REGION, seed, base);
		for (int i = 0; i < NREQ; i++) {
			size_t off = base + cut(i), size = cut(i + 1) - cut(i);
			int rc =
			    gpufile_pwrite_async(shared_handle, src + off, size,
			                         (int64_t)off, &f[i]);
			CHECK_EQ(rc, 0);
		}
		for (int i = 0; i < NREQ; i++) {
			size_t size = cut(i + 1) - cut(i);
			if (f[i])
				CHECK_EQ(finish(f[i], i + round, (ssize_t)size),
				         (ssize_t)size);
		}
		memset(dst + base, 0, REGION);
		for (int i = 0; i < NREQ; i++) {
			size_t off = base + cut(i), size = cut(i + 1) - cut(i);
			int rc = gpufile_pread_async(shared_handle, dst + off,
			                             size, (int64_t)off, &f[i]);
			CHECK_EQ(rc, 0);
		}
		for (int i = 0; i < NREQ; i++) {
			size_t size = cut(i + 1) - cut(i);
			if (f[i])
				CHECK_EQ(
				    finish(f[i], i + round + 1, (ssize_t)size),
				    (ssize_t)size);
		}
		CHECK_EQ(test_mismatch(dst + base, REGION, seed, base), -1);
		pthread_barrier_wait(&barrier);
	}
	return NULL;
}

static uint64_t ops(int is_write)
{
	gpufile_stats_t st;

	GPUFILE_INIT(st);
	gpufile_stats_self(&st);
	return st.path[GPUFILE_PATH_HOST][is_write].ops;
}

static void test_many_threads(const char *backend)
{
	pthread_t threads[NTHREADS];
	uint64_t r0, w0;

	CHECK_EQ(gpufile_config_set("direct_io", backend), 0);
	CHECK_EQ(gpufile_set_task_size(16 << 10), 0);
	CHECK_EQ(gpufile_open(&shared_handle, test_path("async-many"), "w+"),
	         0);
	if (!shared_handle)
		return;
	r0 = ops(0);
	w0 = ops(1);
	pthread_barrier_init(&barrier, NULL, NTHREADS);
	for (int t = 0; t < NTHREADS; t++)
		pthread_create(&threads[t], NULL, worker, (void *)(intptr_t)t);
	for (int t = 0; t < NTHREADS; t++)
		pthread_join(threads[t], NULL);
	pthread_barrier_destroy(&barrier);
	CHECK_EQ(ops(0) - r0, NTHREADS * NREQ * ROUNDS);
	CHECK_EQ(ops(1) - w0, NTHREADS * NREQ * ROUNDS);
	CHECK_EQ(gpufile_size(shared_handle), FILE_SIZE);
	CHECK_EQ(gpufile_close(shared_handle), 0);
	shared_handle = NULL;
	gpufile_config_reset();
}

/* ---- a gate that holds reads until the test opens it ---- */

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_open, gate_entered, gate_left;

static ssize_t gated_pread(int fd, void *buf, size_t len, off_t off)
{
	ssize_t n;

	pthread_mutex_lock(&gate_lock);
	gate_entered++;
	pthread_cond_broadcast(&gate_cond);
	while (!gate_open)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
	n = pread(fd, buf, len, off);
	pthread_mutex_lock(&gate_lock);
	gate_left++;
	pthread_mutex_unlock(&gate_lock);
	return n;
}

static void gate_reset(void)
{
	pthread_mutex_lock(&gate_lock);
	gate_open = 0;
	gate_entered = gate_left = 0;
	pthread_mutex_unlock(&gate_lock);
}

static void gate_wait_entered(int n)
{
	pthread_mutex_lock(&gate_lock);
	while (gate_entered < n)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
}

static void gate_release(void)
{
	pthread_mutex_lock(&gate_lock);
	gate_open = 1;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

static int gate_left_count(void)
{
	int n;

	pthread_mutex_lock(&gate_lock);
	n = gate_left;
	pthread_mutex_unlock(&gate_lock);
	return n;
}

static void *open_gate_later(void *arg)
{
	(void)arg;
	test_sleep_ms(100);
	gate_release();
	return NULL;
}

/* wait_for and done report a request still running; free waits. */
static void test_pending(void)
{
	const char *path = test_path("async-pending");
	unsigned char buf[8192];
	gpufile_future_t *f = NULL;
	gpufile_t *h = NULL;
	pthread_t opener;

	CHECK_EQ(test_make_file(path, sizeof(buf), 5), 0);
	CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return;

	gate_reset();
	gpufile__sys.pread = gated_pread;
	memset(buf, 0, sizeof(buf));
	CHECK_EQ(gpufile_pread_async(h, buf, sizeof(buf), 0, &f), 0);
	gate_wait_entered(1); /* a worker holds the only task */
	CHECK_EQ(gpufile_future_done(f), 0);
	CHECK_EQ(gpufile_future_wait_for(f, 0), -ETIMEDOUT);
	CHECK_EQ(gpufile_future_wait_for(f, 20), -ETIMEDOUT);
	CHECK_EQ(gpufile_future_wait_for(f, -5), -ETIMEDOUT);
	CHECK_EQ(gpufile_future_done(f), 0);
	gate_release();
	CHECK_EQ(gpufile_future_wait(f), (ssize_t)sizeof(buf));
	CHECK_EQ(gpufile_future_done(f), 1);
	CHECK_EQ(gpufile_future_wait_for(f, 0), (ssize_t)sizeof(buf));
	CHECK_EQ(test_mismatch(buf, sizeof(buf), 5, 0), -1);
	gpufile_future_free(f);

	/* free without wait: returns only after the request ended. */
	gate_reset();
	memset(buf, 0, sizeof(buf));
	CHECK_EQ(gpufile_pread_async(h, buf, sizeof(buf), 0, &f), 0);
	gate_wait_entered(1);
	pthread_create(&opener, NULL, open_gate_later, NULL);
	gpufile_future_free(f);
	CHECK_EQ(gate_left_count(), 1);
	CHECK_EQ(test_mismatch(buf, sizeof(buf), 5, 0), -1);
	pthread_join(opener, NULL);

	/* close waits for futures nobody waited for; they are freed after. */
	gate_reset();
	memset(buf, 0, sizeof(buf));
	CHECK_EQ(gpufile_pread_async(h, buf, sizeof(buf), 0, &f), 0);
	gate_wait_entered(1);
	pthread_create(&opener, NULL, open_gate_later, NULL);
	CHECK_EQ(gpufile_close(h), 0);
	CHECK_EQ(gate_left_count(), 1);
	CHECK_EQ(gpufile_future_wait(f), (ssize_t)sizeof(buf));
	gpufile_future_free(f);
	CHECK_EQ(test_mismatch(buf, sizeof(buf), 5, 0), -1);
	pthread_join(opener, NULL);

	gpufile__sys_reset();
	gpufile_future_free(NULL);
	CHECK_EQ(gpufile_future_done(NULL), 1);
	CHECK(gpufile_future_wait(NULL) < 0);
	CHECK_EQ(gpufile_pread_async(NULL, buf, 1, 0, &f), -EINVAL);
	CHECK(f == NULL);
	gpufile_config_reset();
}

/* ---- back-pressure ---- */

#define BP_REQUESTS 200
#define BP_SIZE     4096

static gpufile_t *bp_handle;

static void *bp_thread(void *arg)
{
	const int t = (int)(intptr_t)arg;
	gpufile_future_t *f[BP_REQUESTS / 8];
	unsigned char *buf = test_malloc(BP_REQUESTS / 8 * BP_SIZE);

	for (int i = 0; i < BP_REQUESTS / 8; i++) {
		int64_t off = (int64_t)(t * (BP_REQUESTS / 8) + i) * BP_SIZE;
		CHECK_EQ(gpufile_pread_async(bp_handle, buf + i * BP_SIZE,
		                             BP_SIZE, off, &f[i]),
		         0);
	}
	for (int i = 0; i < BP_REQUESTS / 8; i++) {
		CHECK_EQ(gpufile_future_wait(f[i]), BP_SIZE);
		gpufile_future_free(f[i]);
	}
	CHECK_EQ(test_mismatch(buf, BP_REQUESTS / 8 * BP_SIZE, 9,
	                       (uint64_t)t * (BP_REQUESTS / 8) * BP_SIZE),
	         -1);
	free(buf);
	return NULL;
}

static void test_back_pressure(void)
{
	const char *path = test_path("async-bp");
	unsigned char *buf = test_malloc(BP_REQUESTS * BP_SIZE);
	gpufile_future_t *f[BP_REQUESTS];
	pthread_t threads[8];
	uint64_t r0;

	CHECK_EQ(test_make_file(path, BP_REQUESTS * BP_SIZE, 9), 0);
	CHECK_EQ(gpufile_config_set("max_inflight", "4"), 0);
	CHECK_EQ(gpufile_set_task_size(1024), 0); /* 4 tasks per request */
	CHECK_EQ(gpufile_open(&bp_handle, path, "r"), 0);
	if (!bp_handle) {
		free(buf);
		return;
	}

	/* One thread holds 200 futures while submission blocks. */
	r0 = ops(0);
	memset(buf, 0, BP_REQUESTS * BP_SIZE);
	for (int i = 0; i < BP_REQUESTS; i++)
		CHECK_EQ(gpufile_pread_async(bp_handle, buf + i * BP_SIZE,
		                             BP_SIZE, (int64_t)i * BP_SIZE,
		                             &f[i]),
		         0);
	for (int i = BP_REQUESTS - 1; i >= 0; i--) {
		CHECK_EQ(gpufile_future_wait(f[i]), BP_SIZE);
		gpufile_future_free(f[i]);
	}
	CHECK_EQ(test_mismatch(buf, BP_REQUESTS * BP_SIZE, 9, 0), -1);
	CHECK_EQ(ops(0) - r0, BP_REQUESTS);

	/* Eight threads at once, max_inflight 4, one worker. */
	CHECK_EQ(gpufile_set_nthreads(1), 0);
	for (int t = 0; t < 8; t++)
		pthread_create(&threads[t], NULL, bp_thread,
		               (void *)(intptr_t)t);
	for (int t = 0; t < 8; t++)
		pthread_join(threads[t], NULL);

	/* max_inflight 1, blocking and async mixed. */
	CHECK_EQ(gpufile_config_set("max_inflight", "1"), 0);
	CHECK_EQ(gpufile_set_nthreads(2), 0);
	memset(buf, 0, BP_REQUESTS * BP_SIZE);
	for (int i = 0; i < BP_REQUESTS; i++) {
		if (i % 2)
			CHECK_EQ(gpufile_pread(bp_handle, buf + i * BP_SIZE,
			                       BP_SIZE, (int64_t)i * BP_SIZE),
			         BP_SIZE);
		else
			CHECK_EQ(gpufile_pread_async(
			             bp_handle, buf + i * BP_SIZE, BP_SIZE,
			             (int64_t)i * BP_SIZE, &f[i]),
			         0);
	}
	for (int i = 0; i < BP_REQUESTS; i += 2) {
		CHECK_EQ(gpufile_future_wait(f[i]), BP_SIZE);
		gpufile_future_free(f[i]);
	}
	CHECK_EQ(test_mismatch(buf, BP_REQUESTS * BP_SIZE, 9, 0), -1);

	CHECK_EQ(gpufile_close(bp_handle), 0);
	bp_handle = NULL;
	free(buf);
	gpufile_config_reset();
}

/* ---- nthreads changed between requests ---- */

#define NT_REQ  16
#define NT_SIZE (256u << 10)

static void batch(gpufile_t *h, unsigned char *buf, int is_write,
                  gpufile_future_t **f)
{
	for (int i = 0; i < NT_REQ; i++) {
		int64_t off = (int64_t)i * NT_SIZE;
		int rc = is_write ? gpufile_pwrite_async(h, buf + off, NT_SIZE,
		                                         off, &f[i])
		                  : gpufile_pread_async(h, buf + off, NT_SIZE,
		                                        off, &f[i]);
		CHECK_EQ(rc, 0);
	}
}

static void wait_batch(gpufile_future_t **f)
{
	for (int i = 0; i < NT_REQ; i++) {
		CHECK_EQ(gpufile_future_wait(f[i]), NT_SIZE);
		gpufile_future_free(f[i]);
	}
}

static void test_nthreads_changes(void)
{
	static const unsigned counts[] = {1, 8, 2, 16, 1, 3};
	const size_t size = NT_REQ * NT_SIZE;
	unsigned char *a = test_malloc(size), *b = test_malloc(size);
	gpufile_future_t *f[NT_REQ], *g[NT_REQ];
	gpufile_t *h = NULL;

	CHECK_EQ(gpufile_set_task_size(32 << 10), 0);
	CHECK_EQ(gpufile_open(&h, test_path("async-nthreads"), "w+"), 0);
	if (!h)
		goto out;
	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
		unsigned n = 0;

		CHECK_EQ(gpufile_set_nthreads(counts[k]), 0);
		CHECK_EQ(gpufile_get_nthreads(&n), 0);
		CHECK_EQ(n, counts[k]);
		test_fill(a, size, k, 0);
		batch(h, a, 1, f);
		wait_batch(f);
		memset(b, 0, size);
		batch(h, b, 0, f);
		wait_batch(f);
		CHECK_EQ(test_mismatch(b, size, k, 0), -1);
		/* Blocking requests too. */
		memset(b, 0, size);
		CHECK_EQ(gpufile_pread(h, b, size, 0), (ssize_t)size);
		CHECK_EQ(test_mismatch(b, size, k, 0), -1);
	}

	/* Changed while requests are in flight. */
	CHECK_EQ(gpufile_set_nthreads(8), 0);
	memset(b, 0, size);
	memset(a, 0, size);
	batch(h, a, 0, f);
	CHECK_EQ(gpufile_set_nthreads(1), 0);
	batch(h, b, 0, g);
	CHECK_EQ(gpufile_set_nthreads(4), 0);
	wait_batch(g);
	wait_batch(f);
	CHECK_EQ(test_mismatch(a, size, 5, 0), -1);
	CHECK_EQ(test_mismatch(b, size, 5, 0), -1);

	/* The pool can be stopped and restarted. */
	gpufile_release();
	memset(b, 0, size);
	CHECK_EQ(gpufile_pread(h, b, size, 0), (ssize_t)size);
	CHECK_EQ(test_mismatch(b, size, 5, 0), -1);
	CHECK_EQ(gpufile_warmup(), 0);
	gpufile_release();
	gpufile_release();
	memset(b, 0, size);
	batch(h, b, 0, f);
	wait_batch(f);
	CHECK_EQ(test_mismatch(b, size, 5, 0), -1);
	CHECK_EQ(gpufile_close(h), 0);
out:
	free(a);
	free(b);
	gpufile_config_reset();
}

/* Many workers told to leave at once must leave the right number behind:
 * once, all surplus workers of a shrinking pool left, and a request queued
 * behind them waited for ever. Each round grows the pool to 16, shrinks it
 * to 1 and needs the one request to finish within 10 s. */
static void test_shrink_keeps_a_worker(void)
{
	unsigned char buf[4096];
	gpufile_t *h = NULL;
	const char *path = test_path("async-shrink");

	CHECK_EQ(test_make_file(path, sizeof(buf), 6), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return;
	for (int round = 0; round < 100 && !test_failures; round++) {
		gpufile_future_t *f = NULL;

		CHECK_EQ(gpufile_set_nthreads(16), 0);
		CHECK_EQ(gpufile_warmup(), 0);
		CHECK_EQ(gpufile_set_nthreads(1), 0);
		CHECK_EQ(gpufile_pread_async(h, buf, sizeof(buf), 0, &f), 0);
		if (!f)
			break;
		CHECK_EQ(gpufile_future_wait_for(f, 10000),
		         (ssize_t)sizeof(buf));
		gpufile_future_free(f);
	}
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_config_reset();
}

static atomic_long tasks_run;

static void count_task(struct gpufile__request *r, int64_t off)
{
	(void)r;
	(void)off;
	atomic_fetch_add(&tasks_run, 1);
}

static pthread_t waiting_thread; /* the test's, lent to the tasks */
static atomic_int workers_go;

/* A task run by the waiting thread takes 20 ms; one run by a worker waits
 * until workers_go, so that the request cannot end by itself however
 * late the test thread gets to its wait on a loaded machine (with plain
 * 20 ms tasks on the worker, the 64 could end before the wait began). */
static void slow_task(struct gpufile__request *r, int64_t off)
{
	count_task(r, off);
	if (pthread_equal(pthread_self(), waiting_thread)) {
		test_sleep_ms(20);
		return;
	}
	while (!atomic_load(&workers_go))
		test_sleep_ms(1);
}

/* A wait with a timeout lends its thread to the request's tasks (host
 * reads) only until the deadline: of 64 tasks of 20 ms, the wait can run
 * one or two within 1 ms, so it must give up, not run them all (it did,
 * in 650 ms). The one worker is held meanwhile (slow_task). */
static void test_wait_for_keeps_its_deadline(void)
{
	const char *path = test_path("waitfor.bin");
	gpufile_future_t *f = NULL;
	gpufile_t *h = NULL;
	char *buf = test_malloc(64 << 10);

	CHECK_EQ(test_make_file(path, 64 << 10, 5), 0);
	CHECK_EQ(gpufile_set_nthreads(1), 0);
	CHECK_EQ(gpufile_set_task_size(1 << 10), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	atomic_store(&tasks_run, 0);
	waiting_thread = pthread_self();
	atomic_store(&workers_go, 0);
	gpufile__pool_task_hook = slow_task;
	CHECK_EQ(gpufile_pread_async(h, buf, 64 << 10, 0, &f), 0);
	CHECK_EQ(gpufile_future_wait_for(f, 1), -ETIMEDOUT);
	CHECK(atomic_load(&tasks_run) < 64);
	atomic_store(&workers_go, 1);
	CHECK_EQ(gpufile_future_wait(f), 64 << 10);
	CHECK_EQ(atomic_load(&tasks_run), 64);
	gpufile__pool_task_hook = NULL;
	gpufile_future_free(f);
	CHECK_EQ(test_mismatch(buf, 64 << 10, 5, 0), -1);
	gpufile_close(h);
	free(buf);
	gpufile_config_reset();
}

/* Tasks above a read's end of file are not run: a read of INT64_MAX bytes
 * of a 4 KiB file (2^43 tasks at 1 MiB) returns 4096 after a few tasks,
 * blocking or not (it ran for days). */
static void test_huge_read_past_eof(void)
{
	const char *path = test_path("small.bin");
	const size_t huge = (size_t)INT64_MAX;
	gpufile_future_t *f = NULL;
	gpufile_t *h = NULL;
	char *buf = test_malloc(1 << 20);

	CHECK_EQ(test_make_file(path, 4096, 6), 0);
	CHECK_EQ(gpufile_set_task_size(1 << 20), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	atomic_store(&tasks_run, 0);
	gpufile__pool_task_hook = count_task;
	/* buf is far smaller than the read: only its first 4096 bytes may
	 * be written (ASan would see any other). */
	CHECK_EQ(gpufile_pread(h, buf, huge, 0), 4096);
	CHECK_EQ(gpufile_pread_async(h, buf, huge - 5, 5, &f), 0);
	CHECK_EQ(gpufile_future_wait(f), 4091);
	gpufile_future_free(f);
	CHECK_EQ(gpufile_pread_async(h, buf, huge, 0, &f), 0);
	CHECK_EQ(gpufile_future_wait_for(f, 60000), 4096);
	gpufile_future_free(f);
	CHECK(atomic_load(&tasks_run) < 1000);
	gpufile__pool_task_hook = NULL;
	CHECK_EQ(test_mismatch(buf, 4096, 6, 0), -1);
	gpufile_close(h);
	free(buf);
	gpufile_config_reset();
}

int main(void)
{
	static const char *const backends[] = {"off", "on", "auto"};

	alarm(300); /* a deadlock fails the test instead of hanging */
	src = test_malloc(FILE_SIZE);
	dst = test_malloc(FILE_SIZE);
	for (size_t b = 0; b < sizeof(backends) / sizeof(backends[0]); b++)
		test_many_threads(backends[b]);
	test_pending();
	test_back_pressure();
	test_nthreads_changes();
	test_shrink_keeps_a_worker();
	test_wait_for_keeps_its_deadline();
	test_huge_read_past_eof();
	free(src);
	free(dst);
	gpufile_release();
	return test_finish("test_async");
}
