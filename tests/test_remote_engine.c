/* The transfer engine of remote reads (src/sources/http_multi.c):
 *   - a host read issues its ranges together: more in flight than there
 *     are worker threads, exactly http_max_in_flight at most (the count
 *     gpufile_stats_remote reports), against nginx (skipped without it),
 *     in tasks of max_in_flight / nthreads ranges (rounded up) that any
 *     free thread takes, not one slice of the read per thread;
 *   - a batch of ranged reads on one handle is issued together too;
 *   - ranges whose first attempt is cut half-way are rewritten from their
 *     start while the others are in flight (fault_server.py /closeonce);
 *   - http_max_in_flight out of range is refused, naming it;
 *   - a server that ignores Range (python3 -m http.server's handler,
 *     tests/remote/plain_server.py) serves a whole-object read of more than
 *     8 MiB, streamed in order, a read from offset 0, and a read at
 *     another offset (the bytes before it read and dropped); the path
 *     reason says so. */
#include "remote/helpers.h"
#include "testlib.h"

#include <errno.h>
#include <gpufile.h>
#include <sys/stat.h>

#define SIZE  ((size_t)(4u << 20) + 4097)
#define BIG   ((size_t)(9u << 20) + 12345) /* > 8 MiB: > one range */
#define RANGE ((size_t)64 << 10)

static uint64_t in_flight_max(void)
{
	gpufile_remote_stats_t st;

	GPUFILE_INIT(st);
	CHECK_EQ(gpufile_stats_remote(0, &st), 0);
	return st.in_flight_max;
}

static void write_object(const char *name, size_t size)
{
	unsigned char *data = malloc(size);
	FILE *f = fopen(test_path(name), "wb");

	CHECK(data && f);
	if (data && f) {
		for (size_t i = 0; i < size; i++)
			data[i] = object_byte(i);
		CHECK_EQ(fwrite(data, 1, size, f), size);
	}
	if (f)
		fclose(f);
	free(data);
}

/* /closeonce: every range's first attempt stops half-way; with 4 in
 * flight on one worker, each is rewritten from its start. */
static void test_retry_rewrites(void)
{
	char url[256];
	gpufile_remote_stats_t a, b;
	gpufile_t *h = NULL;
	pid_t pid = fault_server_ok(SIZE, url, sizeof(url));
	unsigned char *d = dest_new(SIZE);

	if (pid < 0) {
		dest_free(d);
		return;
	}
	/* ".../ok/obj" -> ".../closeonce/obj" */
	{
		char tail[64];
		char *ok = strstr(url, "/ok/");

		snprintf(tail, sizeof(tail), "/closeonce/%s", ok + 4);
		snprintf(ok, sizeof(url) - (size_t)(ok - url), "%s", tail);
	}
	CHECK_EQ(gpufile_config_set("http_max_in_flight", "4"), 0);
	CHECK_EQ(gpufile_config_set("remote_connections", "4"), 0);
	CHECK_EQ(gpufile_open(&h, url, "r"), 0);
	GPUFILE_INIT(a);
	GPUFILE_INIT(b);
	gpufile_stats_remote(0, &a);
	CHECK_EQ(gpufile_pread(h, d, SIZE, 0), (ssize_t)SIZE);
	gpufile_stats_remote(0, &b);
	CHECK_EQ(dest_bad(d, SIZE, 0, 1), 0);
	/* 4 MiB + 4097 at 64 KiB: 65 ranges, each retried once. */
	CHECK_EQ(b.retries - a.retries, 65);
	CHECK_EQ(b.ranges - a.ranges, 65);
	/* One worker thread, four ranges in flight. */
	CHECK_EQ(b.in_flight_max, 4);
	gpufile_close(h);
	dest_free(d);
	server_stop(pid);
}

static int have_nginx(void)
{
	return system("if [ -n \"$GPUFILE_NGINX\" ]; then test -x "
	              "\"$GPUFILE_NGINX\"; else command -v nginx >/dev/null "
	              "|| test -x /usr/sbin/nginx; fi") == 0;
}

/* The tasks of one read of SIZE bytes from url into d (opened with o,
 * or the settings for NULL), every byte checked. */
static uint64_t host_tasks_with(const char *url, unsigned char *d,
                                const gpufile_remote_opts_t *o)
{
	gpufile_stats_t a, b;
	gpufile_t *h = NULL;

	GPUFILE_INIT(a);
	GPUFILE_INIT(b);
	CHECK_EQ(o ? gpufile_open_remote(&h, url, "r", o)
	           : gpufile_open(&h, url, "r"),
	         0);
	if (!h)
		return 0;
	memset(d - CANARY_LEN, CANARY, SIZE + 2 * CANARY_LEN);
	CHECK_EQ(gpufile_stats_self(&a), 0);
	CHECK_EQ(gpufile_pread(h, d, SIZE, 0), (ssize_t)SIZE);
	CHECK_EQ(gpufile_stats_self(&b), 0);
	CHECK_EQ(dest_bad(d, SIZE, 0, 1), 0);
	gpufile_close(h);
	return b.path[GPUFILE_PATH_REMOTE][0].tasks -
	       a.path[GPUFILE_PATH_REMOTE][0].tasks;
}

static uint64_t host_tasks(const char *url, unsigned char *d)
{
	return host_tasks_with(url, d, NULL);
}

/* More ranges in flight than threads, up to exactly the setting: a read
 * through gpufile_pread, then a batch; a host read's ranges in tasks of
 * max_in_flight / nthreads ranges (rounded up). */
static void test_in_flight(void)
{
	char server[4200], line[4400], url[256], ca[4096];
	int http_port = 0, https_port = 0;
	gpufile_t *h = NULL;
	gpufile_batch_t *bt = NULL;
	gpufile_batch_entry_t e[60];
	unsigned char *d = dest_new(SIZE);
	pid_t pid;

	if (!have_nginx()) {
		if (test_missing("in-flight part", "nginx") == 1)
			test_failures++;
		dest_free(d);
		return;
	}
	write_object("object.bin", SIZE);
	if (chmod(test_dir(), 0755) != 0) /* nginx's workers read it */
		perror("chmod");
	snprintf(server, sizeof(server), "%s/nginx_server.py", remote_dir());
	{
		char *argv[] = {"python3", server, (char *)test_dir(), NULL};
		pid = server_start_line(argv, line, sizeof(line));
	}
	if (pid < 0 || sscanf(line, "PORT %d %d %4095s", &http_port,
	                      &https_port, ca) != 3) {
		fprintf(stderr, "nginx did not start: FAILED\n");
		test_failures++;
		dest_free(d);
		return;
	}
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/object.bin", http_port);

	/* 65 ranges on 1 thread: 24 in flight (its tasks are 24 ranges
	 * each, issued together). */
	CHECK_EQ(gpufile_config_set("nthreads", "1"), 0);
	CHECK_EQ(gpufile_config_set("http_max_in_flight", "24"), 0);
	CHECK_EQ(gpufile_config_set("remote_connections", "64"), 0);
	CHECK_EQ(gpufile_open(&h, url, "r"), 0);
	CHECK_EQ(gpufile_pread(h, d, SIZE, 0), (ssize_t)SIZE);
	CHECK_EQ(dest_bad(d, SIZE, 0, 1), 0);
	CHECK_EQ(in_flight_max(), 24);
	gpufile_close(h);

	/* 65 ranges on 4 threads, 16 in flight: tasks of 4 ranges (16 / 4),
	 * 17 of them, taken by whichever thread is free; a task per thread
	 * (4 of 17 ranges) bound each thread to a quarter of the read. */
	CHECK_EQ(gpufile_config_set("nthreads", "4"), 0);
	CHECK_EQ(gpufile_config_set("http_max_in_flight", "16"), 0);
	CHECK_EQ(host_tasks(url, d), 17);
	/* 24 in flight on 4 threads: 6 ranges a task, 11 tasks. */
	CHECK_EQ(gpufile_config_set("http_max_in_flight", "24"), 0);
	CHECK_EQ(host_tasks(url, d), 11);
	/* The handle's max_in_flight (its options) counts, not the
	 * setting's: 4 on 4 threads, a range a task. */
	{
		gpufile_remote_opts_t o = {0};

		GPUFILE_INIT(o);
		o.max_in_flight = 4;
		CHECK_EQ(host_tasks_with(url, d, &o), 65);
	}

	/* A batch of 60 ranged reads of 64 KiB on one handle: 40 in
	 * flight, on 2 batch threads. */
	CHECK_EQ(gpufile_config_set("http_max_in_flight", "40"), 0);
	CHECK_EQ(gpufile_open(&h, url, "r"), 0);
	memset(d - CANARY_LEN, CANARY, SIZE + 2 * CANARY_LEN);
	for (unsigned i = 0; i < 60; i++)
		e[i] = (gpufile_batch_entry_t){.file = h,
		                               .buf = d + i * RANGE,
		                               .size = RANGE,
		                               .offset = (int64_t)(i * RANGE)};
	CHECK_EQ(gpufile_batch_create(&bt, 60), 0);
	CHECK_EQ(gpufile_batch_submit(bt, e, 60), 0);
	CHECK_EQ(gpufile_batch_wait(bt, -1), 60);
	for (unsigned i = 0; i < 60; i++)
		CHECK_EQ(gpufile_batch_result(bt, i), (ssize_t)RANGE);
	CHECK_EQ(dest_bad(d, 60 * RANGE, 0, 1), 0);
	CHECK_EQ(in_flight_max(), 40);
	gpufile_batch_free(bt);
	gpufile_close(h);
	CHECK_EQ(gpufile_config_set("nthreads", "4"), 0);
	dest_free(d);
	server_stop(pid);
}

static void test_setting(void)
{
	CHECK_EQ(gpufile_config_set("http_max_in_flight", "0"),
	         GPUFILE_ECONFIG);
	CHECK_CONTAINS(gpufile_errmsg(),
	               "http_max_in_flight=\"0\": out of range [1, 4096]");
	CHECK_EQ(gpufile_config_set("http_max_in_flight", "4097"),
	         GPUFILE_ECONFIG);
	CHECK_CONTAINS(gpufile_errmsg(), "http_max_in_flight=\"4097\"");
	CHECK_EQ(gpufile_config_set("http_max_in_flight", "256"), 0);
}

/* HTTP requests h sent so far (gpufile_remote_file_info). */
static uint64_t requests_of(gpufile_t *h)
{
	gpufile_remote_file_info_t info = {.size = sizeof(info)};

	CHECK_EQ(gpufile_remote_file_info(h, &info), 0);
	return info.requests;
}

/* BATCH_N host entries of 100 bytes at scattered offsets, more than one
 * chunk of the batch's workers (512 entries), into d: one GET, each
 * entry its bytes. */
#define BATCH_N 600
static void batch_of_one_body(gpufile_t *h, unsigned char *d)
{
	static gpufile_batch_entry_t e[BATCH_N];
	gpufile_batch_t *b = NULL;
	uint64_t before = requests_of(h);
	size_t bad = 0;

	for (unsigned k = 0; k < BATCH_N; k++)
		e[k] = (gpufile_batch_entry_t){
		    .file = h,
		    .buf = d + (size_t)k * 100,
		    .size = 100,
		    .offset = (int64_t)(((uint64_t)k * 104729) % (BIG - 100))};
	CHECK_EQ(gpufile_batch_create(&b, BATCH_N), 0);
	if (!b)
		return;
	CHECK_EQ(gpufile_batch_submit(b, e, BATCH_N), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), BATCH_N);
	for (unsigned k = 0; k < BATCH_N; k++) {
		CHECK_EQ(gpufile_batch_result(b, k), 100);
		for (unsigned i = 0; i < 100; i++)
			bad += d[k * 100 + i] !=
			       object_byte((uint64_t)e[k].offset + i);
	}
	CHECK_EQ(bad, 0);
	CHECK_EQ(requests_of(h) - before, 1);
	gpufile_batch_free(b);
}

/* A server that ignores Range: every read streams the 200 body, a read
 * at an offset dropping the bytes before it; one call, one GET (a
 * request per task or range downloads the body from its start again). */
static void test_range_ignored(void)
{
	char server[4200], url[256], reason[512];
	unsigned char *d = dest_new(BIG);
	gpufile_path_t path;
	gpufile_t *h = NULL;
	uint64_t req;
	int port = 0;
	pid_t pid;
	ssize_t n;

	write_object("big.bin", BIG);
	snprintf(server, sizeof(server), "%s/plain_server.py", remote_dir());
	{
		char *argv[] = {"python3", server, (char *)test_dir(), NULL};
		pid = server_start(argv, &port);
	}
	if (pid < 0) {
		fprintf(stderr, "cannot start %s: FAILED\n", server);
		test_failures++;
		dest_free(d);
		return;
	}
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/big.bin", port);
	CHECK_EQ(gpufile_open(&h, url, "r"), 0);
	if (!h) {
		fprintf(stderr, "  %s\n", gpufile_errmsg());
		server_stop(pid);
		dest_free(d);
		return;
	}
	CHECK_EQ(gpufile_size(h), (int64_t)BIG);
	n = gpufile_pread(h, d, BIG, 0);
	if (n < 0)
		fprintf(stderr, "  whole read: %s\n", gpufile_errmsg());
	CHECK_EQ(n, (ssize_t)BIG);
	CHECK_EQ(dest_bad(d, BIG, 0, 1), 0);
	/* From offset 0, a part: the body's first bytes. */
	memset(d - CANARY_LEN, CANARY, BIG + 2 * CANARY_LEN);
	CHECK_EQ(gpufile_pread(h, d, 100000, 0), 100000);
	CHECK_EQ(dest_bad(d, 100000, 0, 1), 0);
	/* At an offset, past the first 8 MiB: its bytes, nothing around
	 * them. */
	memset(d - CANARY_LEN, CANARY, BIG + 2 * CANARY_LEN);
	req = requests_of(h);
	n = gpufile_pread(h, d, 1000, (int64_t)BIG - 1500);
	if (n < 0)
		fprintf(stderr, "  read at an offset: %s\n", gpufile_errmsg());
	CHECK_EQ(n, 1000);
	CHECK_EQ(dest_bad(d, 1000, BIG - 1500, 1), 0);
	CHECK_EQ(requests_of(h) - req, 1);
	/* Across a multiple of remote_task_size (64 KiB): one GET. */
	req = requests_of(h);
	CHECK_EQ(gpufile_pread(h, d, 300000, 5000000), 300000);
	CHECK_EQ(dest_bad(d, 300000, 5000000, 1), 0);
	CHECK_EQ(requests_of(h) - req, 1);
	batch_of_one_body(h, d);
	CHECK_EQ(gpufile_path_info(h, &path, reason, sizeof(reason)), 0);
	CHECK_EQ(path, GPUFILE_PATH_REMOTE);
	CHECK_CONTAINS(reason, "one connection");
	CHECK_CONTAINS(reason, "ignores Range");
	CHECK_CONTAINS(reason, "dropped");
	gpufile_close(h);
	/* gpufile check URL predicts the same. */
	{
		gpufile_check_item_t items[64];
		int n = gpufile_check(url, items, 64), seen = 0;

		CHECK(n > 0);
		for (int i = 0; i < n && i < 64; i++) {
			if (!strcmp(items[i].name, "remote.ranges"))
				seen |= 1;
			if (!strcmp(items[i].name, "predict.gpufile") &&
			    strstr(items[i].why, "one connection"))
				seen |= 2;
		}
		CHECK_EQ(seen, 3);
	}
	dest_free(d);
	server_stop(pid);
}

int main(void)
{
	if (!strstr(gpufile_features(), "remote"))
		return test_missing("test_remote_engine",
		                    "libcurl (built without it)");
	CHECK_EQ(gpufile_config_set("remote_task_size", "64KiB"), 0);
	CHECK_EQ(gpufile_config_set("nthreads", "1"), 0);
	test_retry_rewrites();
	CHECK_EQ(gpufile_config_set("nthreads", "4"), 0);
	test_in_flight();
	test_setting();
	CHECK_EQ(gpufile_config_set("remote_task_size", "8MiB"), 0);
	test_range_ignored();
	test_cleanup();
	return test_finish("test_remote_engine");
}
