/* Remote reads measured in one process (bench/remote_bench.sh runs it):
 *
 *   remote_bench big URL REPEAT
 *       the whole object into host memory, REPEAT times into one buffer
 *       touched before the first read ("reused"), then REPEAT times each
 *       into a fresh, never touched buffer ("fresh": its page faults
 *       count); one line per read: "reused|fresh SECONDS GBPS".
 *   remote_bench small URL COUNT SIZE REPEAT
 *       COUNT reads of SIZE bytes at consecutive offsets (wrapping at the
 *       object's end), REPEAT rounds of each of: a bare libcurl loop (one
 *       easy handle, one ranged GET after the other, each written into
 *       its place: the floor of one at a time), gpufile_pread one at a
 *       time through one handle, and all COUNT as one gpufile batch;
 *       lines "curl_loop|pread_loop|batch SECONDS".
 * Last line: "in_flight_max N" (gpufile_stats_remote). Public API only,
 * plus libcurl for the reference loop. */
#define _GNU_SOURCE
#include "bench_util.h"

#include <curl/curl.h>
#include <gpufile.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int die(const char *what)
{
	fprintf(stderr, "remote_bench: %s: %s\n", what, gpufile_errmsg());
	return 1;
}

static int big(const char *url, int repeat)
{
	gpufile_t *h = NULL;
	int64_t size;
	char *buf;

	if (gpufile_open(&h, url, "r"))
		return die(url);
	size = gpufile_size(h);
	buf = malloc((size_t)size);
	if (!buf)
		return die("malloc");
	memset(buf, 1, (size_t)size);
	for (int i = 0; i < repeat; i++) {
		double t0 = bench_now(), dt;

		if (gpufile_pread(h, buf, (size_t)size, 0) != size)
			return die("read");
		dt = bench_now() - t0;
		printf("reused %.6f %.3f\n", dt, (double)size / dt / 1e9);
	}
	free(buf);
	for (int i = 0; i < repeat; i++) {
		double t0, dt;

		buf = malloc((size_t)size); /* mmap'd by glibc: untouched */
		if (!buf)
			return die("malloc");
		t0 = bench_now();
		if (gpufile_pread(h, buf, (size_t)size, 0) != size)
			return die("read");
		dt = bench_now() - t0;
		printf("fresh %.6f %.3f\n", dt, (double)size / dt / 1e9);
		free(buf);
	}
	gpufile_close(h);
	return 0;
}

struct slice {
	char *p;
	size_t got, cap;
};

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
	struct slice *s = arg;
	size_t len = size * n;

	if (len > s->cap - s->got)
		return 0;
	memcpy(s->p + s->got, data, len);
	s->got += len;
	return len;
}

static int curl_loop(const char *url, char *buf, size_t count, size_t size,
                     int64_t object)
{
	CURL *c = curl_easy_init();
	struct slice s;

	if (!c)
		return -1;
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	for (size_t i = 0; i < count; i++) {
		int64_t off = (int64_t)((i * size) % (size_t)(object - size));
		char range[64];

		snprintf(range, sizeof(range), "%" PRId64 "-%" PRId64, off,
		         off + (int64_t)size - 1);
		s = (struct slice){buf + i * size, 0, size};
		curl_easy_setopt(c, CURLOPT_RANGE, range);
		if (curl_easy_perform(c) != CURLE_OK || s.got != size) {
			curl_easy_cleanup(c);
			return -1;
		}
	}
	curl_easy_cleanup(c);
	return 0;
}

static int small(const char *url, size_t count, size_t size, int repeat)
{
	gpufile_t *h = NULL;
	gpufile_batch_t *b = NULL;
	gpufile_batch_entry_t *e = calloc(count, sizeof(*e));
	char *buf = malloc(count * size);
	int64_t object;

	if (!e || !buf)
		return die("malloc");
	memset(buf, 1, count * size);
	if (gpufile_open(&h, url, "r"))
		return die(url);
	object = gpufile_size(h);
	if (object <= (int64_t)size)
		return die("object smaller than a read");
	for (size_t i = 0; i < count; i++)
		e[i] = (gpufile_batch_entry_t){
		    .file = h,
		    .buf = buf + i * size,
		    .size = size,
		    .offset = (int64_t)((i * size) % (size_t)(object - size))};
	if (gpufile_batch_create(&b, (unsigned)count))
		return die("batch");
	for (int r = 0; r < repeat; r++) {
		double t0 = bench_now();

		if (curl_loop(url, buf, count, size, object))
			return die("curl loop");
		printf("curl_loop %.6f\n", bench_now() - t0);
		t0 = bench_now();
		for (size_t i = 0; i < count; i++)
			if (gpufile_pread(h, e[i].buf, size, e[i].offset) !=
			    (ssize_t)size)
				return die("pread");
		printf("pread_loop %.6f\n", bench_now() - t0);
		t0 = bench_now();
		if (gpufile_batch_submit(b, e, (unsigned)count) ||
		    gpufile_batch_wait(b, -1) != (int)count)
			return die("batch");
		for (size_t i = 0; i < count; i++)
			if (gpufile_batch_result(b, (unsigned)i) !=
			    (ssize_t)size)
				return die("batch entry");
		printf("batch %.6f\n", bench_now() - t0);
		fflush(stdout);
	}
	gpufile_batch_free(b);
	gpufile_close(h);
	free(buf);
	free(e);
	return 0;
}

int main(int argc, char **argv)
{
	gpufile_remote_stats_t st;
	int rc;

	if (argc == 4 && !strcmp(argv[1], "big")) {
		rc = big(argv[2], atoi(argv[3]));
	} else if (argc == 6 && !strcmp(argv[1], "small")) {
		rc = small(argv[2], strtoull(argv[3], NULL, 0),
		           strtoull(argv[4], NULL, 0), atoi(argv[5]));
	} else {
		fprintf(stderr, "usage: remote_bench big URL REPEAT\n"
		                "       remote_bench small URL COUNT SIZE "
		                "REPEAT\n");
		return 2;
	}
	GPUFILE_INIT(st);
	gpufile_stats_remote(0, &st);
	printf("in_flight_max %" PRIu64 "\n", st.in_flight_max);
	return rc;
}
