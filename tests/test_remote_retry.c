/* Retry policy, the HTTP log and a handle's counters, against
 * tests/remote/fault_server.py:
 *   - a 503 with "Retry-After: 1" is retried after the second it asks
 *     (said in the log; the read took at least that long);
 *   - a Retry-After HTTP-date an hour ahead is cut to
 *     http_retry_after_max (1 s here; http_timeout, the time a request may
 *     take, stays as it was);
 *   - without Retry-After, the waits double with jitter: each within
 *     [base/2, base], not all equal to base (the fixed waits of before);
 *   - http_verbose logs each request line and status, the URL redacted
 *     (user:password, query, a redirect target's query never shown);
 *   - gpufile_remote_file_info() counts requests, retries, redirect hops
 *     and bytes of the handle. */
#include "remote/helpers.h"
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <gpufile.h>
#include <time.h>

#define SIZE ((size_t)(64u << 10))

static char base[128];
static char log_path[4096];
static int saved_stderr = -1;

/* stderr into log_path until log_end(), which returns what was written
 * (the caller frees it). */
static void log_begin(void)
{
	int fd;

	snprintf(log_path, sizeof(log_path), "%s", test_path("http.log"));
	fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	fflush(stderr);
	saved_stderr = dup(2);
	dup2(fd, 2);
	close(fd);
}

static char *log_end(void)
{
	FILE *f;
	char *text = NULL;
	size_t cap = 0;

	fflush(stderr);
	dup2(saved_stderr, 2);
	close(saved_stderr);
	f = fopen(log_path, "r");
	if (f) {
		ssize_t n = getdelim(&text, &cap, '\0', f);
		if (n < 0) {
			free(text);
			text = strdup("");
		}
		fclose(f);
	}
	fprintf(stderr, "---- log ----\n%s-------------\n", text ? text : "");
	return text ? text : strdup("");
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Opens and reads the whole object of url (SIZE bytes, one range). */
static int read_all(const char *url, gpufile_remote_file_info_t *info)
{
	unsigned char *d = dest_new(SIZE);
	gpufile_t *h = NULL;
	int rc = gpufile_open(&h, url, "r");

	if (rc == 0) {
		ssize_t n = gpufile_pread(h, d, SIZE, 0);
		rc = n < 0 ? (int)n : 0;
		if (rc == 0)
			CHECK_EQ(dest_bad(d, SIZE, 0, 1), 0);
		if (info) {
			/* Its strings live as long as the handle: kept. */
			static char url_copy[256], kind[32], credentials[256];

			GPUFILE_INIT(*info);
			CHECK_EQ(gpufile_remote_file_info(h, info), 0);
			snprintf(url_copy, sizeof(url_copy), "%s", info->url);
			snprintf(kind, sizeof(kind), "%s", info->kind);
			snprintf(credentials, sizeof(credentials), "%s",
			         info->credentials);
			info->url = url_copy;
			info->kind = kind;
			info->credentials = credentials;
			info->etag = info->region = NULL;
		}
		gpufile_close(h);
	}
	dest_free(d);
	return rc;
}

static void retry_after_seconds(void)
{
	char url[256], *log;
	double t0;

	snprintf(url, sizeof(url), "%s/retryafter/1/obj", base);
	log_begin();
	t0 = now_s();
	CHECK_EQ(read_all(url, NULL), 0);
	/* A lower bound only: a loaded machine makes it longer, never
	 * shorter. */
	CHECK(now_s() - t0 >= 0.99);
	log = log_end();
	CHECK_CONTAINS(log, "waiting 1000 ms before attempt 2 of 3 "
	                    "(Retry-After: 1 s)");
	CHECK_CONTAINS(log, "-> HTTP 503");
	free(log);
}

static void retry_after_date(void)
{
	char url[256], *log;

	CHECK_EQ(gpufile_config_set("http_retry_after_max", "1"), 0);
	snprintf(url, sizeof(url), "%s/retryafterdate/obj", base);
	log_begin();
	CHECK_EQ(read_all(url, NULL), 0);
	log = log_end();
	CHECK_CONTAINS(log, "waiting 1000 ms before attempt 2 of 3");
	CHECK_CONTAINS(log, "s, cut to http_retry_after_max)");
	free(log);
	CHECK_EQ(gpufile_config_set("http_retry_after_max", "60"), 0);
}

static void jitter(void)
{
	char url[256], *log, *p;
	long waits[8];
	int n = 0, all_base = 1;

	CHECK_EQ(gpufile_config_set("http_max_attempts", "6"), 0);
	snprintf(url, sizeof(url), "%s/always503/obj", base);
	log_begin();
	CHECK_EQ(read_all(url, NULL), -EIO);
	log = log_end();
	for (p = log; n < 8 && (p = strstr(p, "gpufile: http: waiting ")); p++)
		waits[n++] = strtol(p + 23, NULL, 10);
	CHECK_EQ(n, 5);
	for (int i = 0; i < n; i++) {
		const long b = 50L << i;
		CHECK(waits[i] >= b / 2 && waits[i] <= b);
		all_base &= waits[i] == b;
	}
	/* Each wait is uniform over b/2 + 1 values: all five at b by chance
	 * is about 1 in 10^10. */
	CHECK(!all_base);
	CHECK_CONTAINS(log, "(back-off with jitter)");
	free(log);
	CHECK_EQ(gpufile_config_set("http_max_attempts", "3"), 0);
}

static void verbose_redacted(int port)
{
	gpufile_remote_file_info_t info;
	char url[256], want[256], *log;

	snprintf(url, sizeof(url),
	         "http://user:PASS-SECRET@127.0.0.1:%d/redirect/obj?"
	         "sig=QUERY-SECRET",
	         port);
	log_begin();
	CHECK_EQ(read_all(url, &info), 0);
	log = log_end();
	snprintf(want, sizeof(want),
	         "gpufile: http: HEAD http://127.0.0.1:%d/redirect/obj?<query "
	         "redacted> -> HTTP 200 (redirected to "
	         "http://127.0.0.1:%d/ok/obj?<query redacted>)",
	         port, port);
	CHECK_CONTAINS(log, want);
	snprintf(want, sizeof(want),
	         "gpufile: http: GET http://127.0.0.1:%d/redirect/obj?<query "
	         "redacted> Range: bytes=0-65535 -> HTTP 206",
	         port);
	CHECK_CONTAINS(log, want);
	CHECK(!strstr(log, "SECRET"));
	free(log);
	/* HEAD and GET, each with one hop: 4 requests, 2 redirects. */
	CHECK_EQ(info.redirects, 2);
	CHECK_EQ(info.requests, 4);
	CHECK_EQ(info.retries, 0);
	CHECK_EQ(info.ranges, 1);
	CHECK_EQ(info.bytes, SIZE);
	CHECK_EQ(info.object_size, SIZE);
	CHECK(strcmp(info.kind, "http") == 0);
	CHECK(!strstr(info.url, "SECRET"));
	CHECK_CONTAINS(info.credentials, "user information in the URL");
}

int main(void)
{
	gpufile_remote_file_info_t info;
	char url[256];
	pid_t pid;
	int port;

	pid = fault_server_ok(SIZE, url, sizeof(url));
	if (pid < 0)
		return test_finish("test_remote_retry");
	sscanf(url, "http://127.0.0.1:%d/", &port);
	snprintf(base, sizeof(base), "http://127.0.0.1:%d", port);
	CHECK_EQ(gpufile_config_set("remote_task_size", "1MiB"), 0);
	CHECK_EQ(gpufile_config_set("http_max_attempts", "3"), 0);
	CHECK_EQ(gpufile_config_set("http_verbose", "1"), 0);
	retry_after_seconds();
	retry_after_date();
	jitter();
	verbose_redacted(port);
	/* Retries counted on the handle. */
	CHECK_EQ(gpufile_config_set("http_verbose", "0"), 0);
	snprintf(url, sizeof(url), "%s/flaky503/obj", base);
	CHECK_EQ(read_all(url, &info), 0);
	CHECK_EQ(info.retries, 1);
	CHECK_EQ(info.requests, 3); /* HEAD, 503, 206 */
	CHECK_EQ(info.failures, 0);
	server_stop(pid);
	test_cleanup();
	return test_finish("test_remote_retry");
}
