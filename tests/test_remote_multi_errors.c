/*
 * A failure of libcurl's multi interface itself (curl_multi_perform or
 * curl_multi_poll returning an error: out of memory, an internal error,
 * a bad handle) ends the transfers it leaves in libcurl:
 *   - the read fails, its message naming the failing call, libcurl's
 *     words for the error (curl_multi_strerror) and the URL; the next read
 *     on the same handle succeeds;
 *   - a failure at every call fails the read instead of spinning or
 *     hanging (the engine ignored the error and looped), and the slots
 *     and lanes come back: a read that needs every slot succeeds after;
 *   - while four threads read at once and some calls fail, every read
 *     ends (with its bytes or the message), and the reads after succeed.
 * curl_multi_perform and curl_multi_poll are wrapped (-Wl,--wrap,
 * tests/CMakeLists.txt; only where libcurl is built in). The alarm makes
 * a hang a failure.
 */
#include "remote/helpers.h"
#include "testlib.h"

#include <errno.h>
#include <gpufile.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>

#define SIZE     ((size_t)(2u << 20) + 4321)
#define RANGE    ((size_t)64 << 10)
#define NTHREADS 4

#ifdef TEST_WRAP_CURL
#include <curl/curl.h>

CURLMcode __real_curl_multi_perform(CURLM *m, int *running);
CURLMcode __wrap_curl_multi_perform(CURLM *m, int *running);
CURLMcode __real_curl_multi_poll(CURLM *m, struct curl_waitfd extra[],
                                 unsigned n, int ms, int *ret);
CURLMcode __wrap_curl_multi_poll(CURLM *m, struct curl_waitfd extra[],
                                 unsigned n, int ms, int *ret);

/* Which calls fail: those numbered from..from+count-1 (from 0, counted
 * from the arming), or every period-th one when period > 0; with rc. */
struct arm {
	_Atomic long calls, from, count, period;
	_Atomic int rc;
};
static struct arm perform_arm, poll_arm;

static int armed_fails(struct arm *a)
{
	const long k = atomic_fetch_add(&a->calls, 1);
	const long period = atomic_load(&a->period);

	if (period > 0)
		return k % period == period - 1;
	return k >= atomic_load(&a->from) &&
	       k - atomic_load(&a->from) < atomic_load(&a->count);
}

CURLMcode __wrap_curl_multi_perform(CURLM *m, int *running)
{
	if (armed_fails(&perform_arm))
		return (CURLMcode)atomic_load(&perform_arm.rc);
	return __real_curl_multi_perform(m, running);
}

CURLMcode __wrap_curl_multi_poll(CURLM *m, struct curl_waitfd extra[],
                                 unsigned n, int ms, int *ret)
{
	if (armed_fails(&poll_arm))
		return (CURLMcode)atomic_load(&poll_arm.rc);
	return __real_curl_multi_poll(m, extra, n, ms, ret);
}

static void arm(struct arm *a, CURLMcode rc, long from, long count, long period)
{
	atomic_store(&a->rc, (int)rc);
	atomic_store(&a->from, from);
	atomic_store(&a->count, count);
	atomic_store(&a->period, period);
	atomic_store(&a->calls, 0);
}

static void disarm(void)
{
	arm(&perform_arm, CURLM_OK, 0, 0, 0);
	arm(&poll_arm, CURLM_OK, 0, 0, 0);
}

static gpufile_t *h;
static char shown[256];

/* The server, stopped by on_alarm. */
static pid_t server_pid;

/* A hang: the server is stopped (it would outlive the test) and the
 * test fails. */
static void on_alarm(int sig)
{
	static const char msg[] =
	    "test_remote_multi_errors: hung (alarm): FAILED\n";

	(void)sig;
	if (server_pid > 0)
		kill(server_pid, SIGKILL);
	(void)!write(2, msg, sizeof(msg) - 1);
	_exit(1);
}

/* Reads len bytes at off: 1 when they came, checked; 0 when the read
 * failed, its message naming fn, words and the URL. */
static int read_or_fail(size_t len, int64_t off, const char *fn,
                        const char *words)
{
	unsigned char *d = dest_new(len);
	ssize_t n = gpufile_pread(h, d, len, off);
	int ok = n == (ssize_t)len;

	if (ok) {
		CHECK_EQ(dest_bad(d, len, (uint64_t)off, 1), 0);
	} else {
		const char *msg = gpufile_errmsg();

		fprintf(stderr, "  read %zu at %lld -> %zd: %s\n", len,
		        (long long)off, n, msg);
		CHECK(n < 0);
		CHECK_CONTAINS(msg, fn);
		CHECK_CONTAINS(msg, words);
		CHECK_CONTAINS(msg, shown);
	}
	dest_free(d);
	return ok;
}

static void read_ok(size_t len, int64_t off)
{
	CHECK_EQ(read_or_fail(len, off, "", ""), 1);
}

/* fn fails (its first call after the arming when count is 1, else
 * every call) with rc: a read that made such a call fails, naming it (a
 * call of curl_multi_poll needs a transfer still in flight after a
 * curl_multi_perform: a read that made none is tried again); the reads
 * after succeed, one of them needing every slot. */
static void test_fail(struct arm *a, const char *fn, CURLMcode rc, long count)
{
	int tries = 0;

	alarm(120);
	for (;;) {
		int ok;

		arm(a, rc, 0, count, 0);
		ok = read_or_fail(16 * RANGE, RANGE, fn,
		                  curl_multi_strerror(rc));
		if (atomic_load(&a->calls) > 0 || ++tries == 20) {
			CHECK(atomic_load(&a->calls) > 0);
			CHECK_EQ(ok, 0);
			break;
		}
	}
	disarm();
	read_ok(RANGE, 3 * RANGE);
	read_ok(16 * RANGE, 0);
	alarm(0);
}

static void *reader(void *arg)
{
	const unsigned id = (unsigned)(uintptr_t)arg;

	for (unsigned i = 0; i < 6; i++) {
		read_or_fail(RANGE, (int64_t)((id * 6 + i) * RANGE),
		             "curl_multi_perform",
		             curl_multi_strerror(CURLM_INTERNAL_ERROR));
		read_or_fail(8 * RANGE, (int64_t)((id + i) * RANGE),
		             "curl_multi_perform",
		             curl_multi_strerror(CURLM_INTERNAL_ERROR));
	}
	return NULL;
}

/* Threads reading at once while every 5th curl_multi_perform fails. */
static void test_threads(void)
{
	pthread_t t[NTHREADS];

	alarm(300);
	arm(&perform_arm, CURLM_INTERNAL_ERROR, 0, 0, 5);
	for (unsigned i = 0; i < NTHREADS; i++)
		CHECK_EQ(
		    pthread_create(&t[i], NULL, reader, (void *)(uintptr_t)i),
		    0);
	for (unsigned i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	disarm();
	for (unsigned i = 0; i < NTHREADS; i++)
		read_ok(16 * RANGE, (int64_t)(i * RANGE));
	alarm(0);
}

int main(void)
{
	char url[256];
	pid_t pid;

	if (!strstr(gpufile_features(), "remote"))
		return test_missing("test_remote_multi_errors",
		                    "libcurl (built without it)");
	pid = fault_server_ok(SIZE, url, sizeof(url));
	if (pid < 0)
		return 1;
	server_pid = pid;
	signal(SIGALRM, on_alarm);
	snprintf(shown, sizeof(shown), "%s", url + strlen("http://"));
	CHECK_EQ(gpufile_config_set("remote_task_size", "64KiB"), 0);
	CHECK_EQ(gpufile_config_set("nthreads", "4"), 0);
	CHECK_EQ(gpufile_config_set("remote_connections", "3"), 0);
	CHECK_EQ(gpufile_open(&h, url, "r"), 0);
	if (!h) {
		fprintf(stderr, "  open: %s\n", gpufile_errmsg());
		server_stop(pid);
		return 1;
	}
	test_fail(&perform_arm, "curl_multi_perform", CURLM_INTERNAL_ERROR, 1);
	test_fail(&poll_arm, "curl_multi_poll", CURLM_OUT_OF_MEMORY, 1);
	test_fail(&perform_arm, "curl_multi_perform", CURLM_BAD_HANDLE,
	          LONG_MAX);
	test_fail(&poll_arm, "curl_multi_poll", CURLM_INTERNAL_ERROR, LONG_MAX);
	test_threads();
	gpufile_close(h);
	server_stop(pid);
	test_cleanup();
	return test_finish("test_remote_multi_errors");
}
#else
int main(void)
{
	return test_missing("test_remote_multi_errors",
	                    "libcurl (built without it)");
}
#endif
