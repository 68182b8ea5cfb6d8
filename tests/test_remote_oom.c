/*
 * Remote objects when memory runs out. curl_slist_append, curl_slist_free_all,
 * malloc and calloc are wrapped (-Wl,--wrap, tests/CMakeLists.txt; only
 * where libcurl is built in):
 *   - a request header that cannot be added (the Range of a plain GET; each
 *     header of a signed S3 GET in turn, against tests/remote/s3_server.py)
 *     fails the read with -ENOMEM naming the URL, sends no request and frees
 *     the headers added before. (The Range's failure sent the request
 *     without its Range, or unsigned, and blamed the server: "the server
 *     ignored the Range request" or "HTTP 403"; the Authorization's leaked
 *     the list.)
 *   - each allocation of gpufile_open on a URL fails in turn: every -ENOMEM
 *     names the URL, without its password (it said "opening a URL").
 */
#include "remote/helpers.h"
#include "testlib.h"

#include <errno.h>
#include <gpufile.h>
#include <pthread.h>

#define SIZE ((size_t)(1u << 20) + 777)
#define AK   "AKIDTESTGPUFILE"
#define SK   "sEcReT/Key+ForTestsOnly0123456789abcdefg"
#define OFF  5000
#define LEN  1000

#ifdef TEST_WRAP_CURL
struct curl_slist;
struct curl_slist *__real_curl_slist_append(struct curl_slist *l,
                                            const char *s);
struct curl_slist *__wrap_curl_slist_append(struct curl_slist *l,
                                            const char *s);
void __real_curl_slist_free_all(struct curl_slist *l);
void __wrap_curl_slist_free_all(struct curl_slist *l);
void *__real_malloc(size_t n);
void *__wrap_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size);

/* curl_slist_append's k-th call fails, in whichever thread runs the
 * read's one request (a worker may: hence the lock). */
static pthread_mutex_t append_lock = PTHREAD_MUTEX_INITIALIZER;
static long append_fail_at = -1, appends;
/* The list handed to the append that failed, and whether it was freed. */
static struct curl_slist *refused;
static int refused_freed;
/* The allocators' k-th call fails, of the thread that arms it only. */
static _Thread_local long alloc_fail_at = -1, allocs;

struct curl_slist *__wrap_curl_slist_append(struct curl_slist *l, const char *s)
{
	int fail;

	pthread_mutex_lock(&append_lock);
	fail = append_fail_at >= 0 && appends++ == append_fail_at;
	if (fail)
		refused = l;
	pthread_mutex_unlock(&append_lock);
	return fail ? NULL : __real_curl_slist_append(l, s);
}

void __wrap_curl_slist_free_all(struct curl_slist *l)
{
	pthread_mutex_lock(&append_lock);
	if (l && l == refused)
		refused_freed = 1;
	pthread_mutex_unlock(&append_lock);
	__real_curl_slist_free_all(l);
}

static void arm_append(long k)
{
	pthread_mutex_lock(&append_lock);
	appends = 0;
	refused = NULL;
	refused_freed = 0;
	append_fail_at = k;
	pthread_mutex_unlock(&append_lock);
}

/* Disarms; returns the number of calls made while armed. */
static long disarm_append(void)
{
	long n;

	pthread_mutex_lock(&append_lock);
	append_fail_at = -1;
	n = appends;
	pthread_mutex_unlock(&append_lock);
	return n;
}

void *__wrap_malloc(size_t n)
{
	if (alloc_fail_at >= 0 && allocs++ == alloc_fail_at)
		return NULL;
	return __real_malloc(n);
}

void *__wrap_calloc(size_t n, size_t size)
{
	if (alloc_fail_at >= 0 && allocs++ == alloc_fail_at)
		return NULL;
	return __real_calloc(n, size);
}

static uint64_t requests_sent(void)
{
	gpufile_remote_stats_t st;

	GPUFILE_INIT(st);
	CHECK_EQ(gpufile_stats_remote(0, &st), 0);
	return st.requests;
}

/* Fails the k-th curl_slist_append of a read of h, for every k until the
 * read makes no more calls; shown is the URL as messages show it.
 * Returns the number of reads that failed. */
static int fail_each_header(gpufile_t *h, const char *shown)
{
	unsigned char *d = dest_new(LEN);
	int failed = 0;

	for (long k = 0;; k++) {
		uint64_t before = requests_sent();
		ssize_t n;

		long calls;

		arm_append(k);
		n = gpufile_pread(h, d, LEN, OFF);
		calls = disarm_append();
		if (calls <= k) { /* none failed */
			CHECK_EQ(n, LEN);
			CHECK_EQ(dest_bad(d, LEN, OFF, 1), 0);
			break;
		}
		failed++;
		fprintf(stderr, "  header %ld refused -> %zd: %s\n", k, n,
		        gpufile_errmsg());
		CHECK_EQ(n, -ENOMEM);
		CHECK_CONTAINS(gpufile_errmsg(), shown);
		CHECK_CONTAINS(gpufile_errmsg(), "out of memory");
		CHECK_EQ(requests_sent(), before);
		CHECK(!refused || refused_freed);
		CHECK_EQ(dest_bad(d, LEN, OFF, 0), 0);
	}
	dest_free(d);
	return failed;
}

static void test_plain_headers(int port)
{
	char url[128];
	gpufile_t *h = NULL;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/ok/o.bin", port);
	CHECK_EQ(gpufile_open(&h, url, "r"), 0);
	if (!h)
		return;
	CHECK_EQ(fail_each_header(h, url), 1); /* the Range */
	gpufile_close(h);
}

static void test_open(int port)
{
	char url[128], shown[128];
	int nomem = 0;

	snprintf(url, sizeof(url), "http://user:pwSECRET@127.0.0.1:%d/ok/o.bin",
	         port);
	snprintf(shown, sizeof(shown), "127.0.0.1:%d/ok/o.bin", port);
	for (long k = 0;; k++) {
		gpufile_t *h = NULL;
		int rc;

		allocs = 0;
		alloc_fail_at = k;
		rc = gpufile_open(&h, url, "r");
		alloc_fail_at = -1;
		if (rc == 0) {
			CHECK_EQ(gpufile_size(h), SIZE);
			gpufile_close(h);
			if (allocs <= k)
				break; /* none failed */
			continue;
		}
		nomem++;
		fprintf(stderr, "  allocation %ld refused -> %d: %s\n", k, rc,
		        gpufile_errmsg());
		CHECK_EQ(rc, -ENOMEM);
		CHECK(h == NULL);
		CHECK_CONTAINS(gpufile_errmsg(), shown);
		CHECK(!strstr(gpufile_errmsg(), "pwSECRET"));
	}
	/* At least the remote's state and the handle. */
	CHECK(nomem >= 2);
}

static void test_s3_headers(void)
{
	char server[4200], size[32], ep[64];
	gpufile_t *h = NULL;
	int port = 0;
	pid_t pid;

	if (!strstr(gpufile_features(), "sigv4") ||
	    system("python3 -c 'import botocore' 2>/dev/null") != 0) {
		fprintf(stderr, "no SigV4 or no python3-botocore: signed "
		                "headers not tried\n");
		return;
	}
	snprintf(server, sizeof(server), "%s/s3_server.py", remote_dir());
	snprintf(size, sizeof(size), "%zu", SIZE);
	{
		char *argv[] = {"python3", server, size,        "bucket",
		                AK,        SK,     "eu-test-1", NULL};
		pid = server_start(argv, &port);
	}
	CHECK(pid > 0);
	if (pid <= 0)
		return;
	snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", port);
	setenv("AWS_ENDPOINT_URL", ep, 1);
	setenv("AWS_ACCESS_KEY_ID", AK, 1);
	setenv("AWS_SECRET_ACCESS_KEY", SK, 1);
	setenv("AWS_DEFAULT_REGION", "eu-test-1", 1);
	unsetenv("AWS_SESSION_TOKEN");
	unsetenv("AWS_REGION");
	CHECK_EQ(gpufile_open(&h, "s3://bucket/plain.bin", "r"), 0);
	if (h) {
		/* host, x-amz-content-sha256, x-amz-date, Authorization,
		 * Range. */
		CHECK_EQ(fail_each_header(h, "s3://bucket/plain.bin"), 5);
		gpufile_close(h);
	}
	server_stop(pid);
}
#endif

int main(void)
{
#ifdef TEST_WRAP_CURL
	int port = 0;
	pid_t pid;

	if (!strstr(gpufile_features(), "remote")) {
		return test_missing("test_remote_oom",
		                    "libcurl (built without it)");
	}
	pid = fault_server_start(SIZE, 3, &port);
	if (pid < 0)
		return 1;
	test_plain_headers(port);
	test_open(port);
	server_stop(pid);
	test_s3_headers();
	return test_finish("test_remote_oom");
#else
	return test_missing("test_remote_oom", "libcurl (built without it)");
#endif
}
