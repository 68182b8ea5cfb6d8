/*
 * recv_direct: what the receive copy of a remote read costs (issue 36).
 * libcurl hands a body to its write callback from its own buffer, so
 * every byte gpufile receives is copied once more, into the destination;
 * `curl -o /dev/null`, the benchmark's reference, writes no memory at
 * all. libcurl can also leave the HTTP to its caller: with
 * CURLOPT_CONNECT_ONLY it only connects (proxies and TLS included), and
 * curl_easy_send/curl_easy_recv move raw bytes, which curl_easy_recv puts
 * straight into the caller's buffer. This program reads SIZE bytes of
 * URL (plain http://, a server that takes Range and keep-alive) with T
 * threads, each its own connection and its own contiguous slice, in
 * ranges of CHUNK bytes, three ways, in interleaved rounds:
 *
 *   copy    libcurl's HTTP, a write callback copying into the destination
 *           (gpufile's way today)
 *   direct  the request written by hand on a CONNECT_ONLY connection, the
 *           body received by curl_easy_recv straight into the destination
 *   null    the same, the body received into one 256 KiB scratch buffer
 *           per thread (what curl into /dev/null writes: no destination)
 *
 * The destination is one SIZE-byte buffer, touched before timing and
 * reused. Every byte received by copy and direct is checked against the
 * object's pattern afterwards (--pattern sequence of `gpufile write`: the
 * byte at i is i mod 251), untimed.
 *
 *	recv_direct URL SIZE [THREADS] [CHUNK_MiB] [ROUNDS]
 */
#define _GNU_SOURCE
#include "bench_util.h"

#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { COPY, DIRECT, NUL, NWAYS };
static const char *const names[NWAYS] = {"copy", "direct", "null"};

struct job {
	const char *url, *host, *path;
	char *dst;         /* the destination's slice of this thread */
	uint64_t off, len; /* the slice in the object */
	size_t chunk;
	int way;
	int failed;
	char err[256];
};

struct sink {
	char *at;
	size_t left;
};

static size_t into(char *data, size_t size, size_t n, void *arg)
{
	struct sink *s = arg;
	size_t len = size * n;

	if (len > s->left)
		return 0; /* more than the range: an error */
	memcpy(s->at, data, len);
	s->at += len;
	s->left -= len;
	return len;
}

static void fail(struct job *j, const char *what, const char *why)
{
	if (!j->failed)
		snprintf(j->err, sizeof(j->err), "%s: %s", what, why);
	j->failed = 1;
}

static void run_copy(struct job *j)
{
	CURL *c = curl_easy_init();
	char range[64];

	curl_easy_setopt(c, CURLOPT_URL, j->url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, into);
	for (uint64_t at = 0; at < j->len && !j->failed; at += j->chunk) {
		uint64_t n = j->len - at < j->chunk ? j->len - at : j->chunk;
		struct sink s = {j->dst + at, (size_t)n};
		long code = 0;
		CURLcode rc;

		snprintf(range, sizeof(range), "%llu-%llu",
		         (unsigned long long)(j->off + at),
		         (unsigned long long)(j->off + at + n - 1));
		curl_easy_setopt(c, CURLOPT_RANGE, range);
		curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
		rc = curl_easy_perform(c);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
		if (rc != CURLE_OK)
			fail(j, "copy", curl_easy_strerror(rc));
		else if (code != 206 || s.left)
			fail(j, "copy", "not a whole 206 range");
	}
	curl_easy_cleanup(c);
}

/* Waits until c's socket has something to read. */
static int wait_readable(CURL *c)
{
	curl_socket_t fd;
	struct pollfd p;

	if (curl_easy_getinfo(c, CURLINFO_ACTIVESOCKET, &fd) != CURLE_OK)
		return -1;
	p.fd = (int)fd;
	p.events = POLLIN;
	return poll(&p, 1, 30000) == 1 ? 0 : -1;
}

/* Receives up to len bytes into buf (at least one); -1 on an error or the
 * end of the connection. */
static ssize_t recv_some(CURL *c, char *buf, size_t len)
{
	for (;;) {
		size_t n = 0;
		CURLcode rc = curl_easy_recv(c, buf, len, &n);

		if (rc == CURLE_OK)
			return n ? (ssize_t)n : -1;
		if (rc != CURLE_AGAIN || wait_readable(c))
			return -1;
	}
}

static int send_all(CURL *c, const char *buf, size_t len)
{
	while (len) {
		size_t n = 0;
		CURLcode rc = curl_easy_send(c, buf, len, &n);

		if (rc == CURLE_AGAIN)
			continue;
		if (rc != CURLE_OK)
			return -1;
		buf += n;
		len -= n;
	}
	return 0;
}

static void run_raw(struct job *j)
{
	CURL *c = curl_easy_init();
	char *scratch = j->way == NUL ? malloc(256 << 10) : NULL;
	char head[8192];
	CURLcode rc;

	curl_easy_setopt(c, CURLOPT_URL, j->url);
	curl_easy_setopt(c, CURLOPT_CONNECT_ONLY, 1L);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK)
		fail(j, "connect", curl_easy_strerror(rc));
	for (uint64_t at = 0; at < j->len && !j->failed; at += j->chunk) {
		uint64_t n = j->len - at < j->chunk ? j->len - at : j->chunk;
		size_t have = 0, body_in_head;
		char req[1024], *end, *cl;
		uint64_t got;
		int len = snprintf(req, sizeof(req),
		                   "GET %s HTTP/1.1\r\nHost: %s\r\n"
		                   "Range: bytes=%llu-%llu\r\n\r\n",
		                   j->path, j->host,
		                   (unsigned long long)(j->off + at),
		                   (unsigned long long)(j->off + at + n - 1));

		if (send_all(c, req, (size_t)len)) {
			fail(j, "send", "failed");
			break;
		}
		/* The head, up to its blank line; what follows it is body. */
		for (;;) {
			ssize_t k;

			head[have] = '\0';
			end = strstr(head, "\r\n\r\n");
			if (end)
				break;
			if (have + 1 >= sizeof(head) ||
			    (k = recv_some(c, head + have,
			                   sizeof(head) - 1 - have)) < 0) {
				fail(j, "head", "cut short or too long");
				break;
			}
			have += (size_t)k;
		}
		if (j->failed)
			break;
		cl = strcasestr(head, "\r\nContent-Length:");
		if (strncmp(head, "HTTP/1.1 206", 12) || !cl || cl > end ||
		    strtoull(cl + 17, NULL, 10) != n) {
			fail(j, "head", "not a 206 of the range's length");
			break;
		}
		body_in_head = have - (size_t)(end + 4 - head);
		if (body_in_head > n) {
			fail(j, "body", "longer than the range");
			break;
		}
		if (scratch)
			memcpy(scratch, end + 4, body_in_head);
		else
			memcpy(j->dst + at, end + 4, body_in_head);
		for (got = body_in_head; got < n;) {
			size_t want = (size_t)(n - got);
			ssize_t k;

			if (scratch && want > (256u << 10))
				want = 256u << 10;
			k = recv_some(c, scratch ? scratch : j->dst + at + got,
			              want);
			if (k < 0) {
				fail(j, "body", "cut short");
				break;
			}
			got += (uint64_t)k;
		}
	}
	free(scratch);
	curl_easy_cleanup(c);
}

static void *worker(void *arg)
{
	struct job *j = arg;

	if (j->way == COPY)
		run_copy(j);
	else
		run_raw(j);
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	const double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	const char *url = argc > 1 ? argv[1] : NULL;
	const uint64_t size = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
	const int threads = argc > 3 ? atoi(argv[3]) : 16;
	const size_t chunk = (size_t)(argc > 4 ? atoi(argv[4]) : 8) << 20;
	const int rounds = argc > 5 ? atoi(argv[5]) : 5;
	char host[256], path[2048];
	const char *p, *slash;
	double *t[NWAYS];
	struct job *jobs;
	pthread_t *tid;
	char *dst;

	if (!url || strncmp(url, "http://", 7) || !size || threads < 1 ||
	    threads > 256 || !chunk || rounds < 1 || rounds > 99) {
		fprintf(stderr,
		        "usage: recv_direct http://HOST[:PORT]/PATH "
		        "SIZE [THREADS 1-256] [CHUNK_MiB] [ROUNDS 1-99]\n");
		return 2;
	}
	p = url + 7;
	slash = strchr(p, '/');
	if (!slash || (size_t)(slash - p) >= sizeof(host) ||
	    strlen(slash) >= sizeof(path)) {
		fprintf(stderr, "recv_direct: %s: no path, or too long\n", url);
		return 2;
	}
	snprintf(host, sizeof(host), "%.*s", (int)(slash - p), p);
	snprintf(path, sizeof(path), "%s", slash);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	dst = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
	jobs = calloc((size_t)threads, sizeof(*jobs));
	tid = calloc((size_t)threads, sizeof(*tid));
	for (int w = 0; w < NWAYS; w++)
		t[w] = calloc((size_t)rounds, sizeof(double));
	if (!dst || !jobs || !tid || !t[NWAYS - 1]) {
		fprintf(stderr, "recv_direct: out of memory\n");
		return 1;
	}
	memset(dst, 0, size);
	printf("recv_direct: %llu bytes of %s, %d threads, %zu MiB ranges, "
	       "%d rounds (GB/s)\n",
	       (unsigned long long)size, url, threads, chunk >> 20, rounds);
	for (int r = 0; r < rounds; r++) {
		printf("round %d:", r + 1);
		for (int k = 0; k < NWAYS; k++) {
			const int w = (k + r) % NWAYS;
			const uint64_t slice =
			    (size / (uint64_t)threads + 4095) / 4096 * 4096;
			double t0;
			int bad = 0;

			if (w != NUL)
				memset(dst, 0,
				       size); /* last round's bytes gone */
			t0 = bench_now();
			for (int i = 0; i < threads; i++) {
				uint64_t off = slice * (uint64_t)i;

				jobs[i] = (struct job){
				    .url = url,
				    .host = host,
				    .path = path,
				    .dst = dst + (off < size ? off : size),
				    .off = off,
				    .len = off >= size          ? 0
				           : size - off < slice ? size - off
				                                : slice,
				    .chunk = chunk,
				    .way = w};
				pthread_create(&tid[i], NULL, worker, &jobs[i]);
			}
			for (int i = 0; i < threads; i++)
				pthread_join(tid[i], NULL);
			t[w][r] = bench_now() - t0;
			for (int i = 0; i < threads; i++)
				if (jobs[i].failed) {
					fprintf(stderr, "\n%s, thread %d: %s\n",
					        names[w], i, jobs[i].err);
					bad = 1;
				}
			if (bad)
				return 1;
			for (uint64_t i = 0; w != NUL && i < size; i++)
				if ((unsigned char)dst[i] != i % 251) {
					fprintf(stderr,
					        "\n%s: byte %llu is %u, not "
					        "%u\n",
					        names[w], (unsigned long long)i,
					        (unsigned char)dst[i],
					        (unsigned)(i % 251));
					return 1;
				}
		}
		for (int w = 0; w < NWAYS; w++)
			printf(" %s %.2f", names[w],
			       (double)size / t[w][r] / 1e9);
		printf("\n");
		fflush(stdout);
	}
	for (int w = 0; w < NWAYS; w++)
		qsort(t[w], (size_t)rounds, sizeof(double), cmp);
	for (int w = 0; w < NWAYS; w++)
		printf("%-6s median %.2f GB/s, %.2fx null\n", names[w],
		       (double)size / t[w][rounds / 2] / 1e9,
		       t[NUL][rounds / 2] / t[w][rounds / 2]);
	return 0;
}
