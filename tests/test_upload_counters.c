/* The per-handle counters of gpufile_remote_file_info() for the requests
 * of uploads and WebHDFS (http.c), against tests/remote/put_server.py:
 *   - an HTTP PUT upload's one PUT, sent at close, counts on the handle's
 *     counters (a request, a range of its bytes), as remote reads do;
 *     since the handle is gone after close, the counters are read
 *     through the setup the upload makes (gpufile__remote_setup) and the
 *     request helper it sends with (gpufile__http_send);
 *   - a PUT answered 503 counts its retry and both requests;
 *   - a PUT refused (403) counts a failure, no range;
 *   - a request that does not carry the object's bytes (data 0: an S3
 *     CreateMultipartUpload) counts as a request only.
 * (The counts of an S3 multipart upload and of WebHDFS reads seen through
 * the public API: python/tests/test_upload.py, test_webhdfs.py.) */
#include "internal.h"
#include "remote/helpers.h"
#include "sources/http.h"
#include "testlib.h"

#include <errno.h>
#include <gpufile.h>

#ifdef TEST_HAVE_CURL
static char body[1000];

static int put(struct gpufile__http *t, const char *url, int data)
{
	const struct iovec iov = {body, sizeof(body)};
	struct gpufile__http_call k = {.method = "PUT",
	                               .url = url,
	                               .query = "",
	                               .iov = &iov,
	                               .iovcnt = 1,
	                               .what = "uploading",
	                               .data = data};
	struct gpufile__http_reply rp = {0};
	int rc = gpufile__http_send(t, &k, &rp);

	gpufile__http_reply_free(&rp);
	return rc;
}

static uint64_t get(_Atomic uint64_t *c)
{
	return atomic_load(c);
}

static void counts(const char *base)
{
	struct gpufile__remote *rm = NULL;
	struct gpufile__remote_view v;
	struct gpufile__http t;
	char url[256];

	snprintf(url, sizeof(url), "%s/obj/a.bin", base);
	CHECK_EQ(gpufile__remote_setup(url, NULL, &rm), 0);
	if (!rm)
		return;
	gpufile__remote_view(rm, &v);
	CHECK_EQ(gpufile__http_init(&t, &v), 0);
	CHECK(v.count != NULL);

	CHECK_EQ(put(&t, url, 1), 0);
	CHECK_EQ(get(&v.count->requests), 1);
	CHECK_EQ(get(&v.count->ranges), 1);
	CHECK_EQ(get(&v.count->bytes), sizeof(body));
	CHECK_EQ(get(&v.count->retries), 0);
	CHECK_EQ(get(&v.count->failures), 0);
	CHECK(get(&v.count->connects) >= 1);

	snprintf(url, sizeof(url), "%s/busy/b.bin", base);
	CHECK_EQ(put(&t, url, 1), 0);
	CHECK_EQ(get(&v.count->requests), 3);
	CHECK_EQ(get(&v.count->retries), 1);
	CHECK_EQ(get(&v.count->ranges), 2);
	CHECK_EQ(get(&v.count->bytes), 2 * sizeof(body));

	snprintf(url, sizeof(url), "%s/deny/c.bin", base);
	CHECK_EQ(put(&t, url, 1), -EACCES);
	CHECK_EQ(get(&v.count->requests), 4);
	CHECK_EQ(get(&v.count->failures), 1);
	CHECK_EQ(get(&v.count->ranges), 2);

	snprintf(url, sizeof(url), "%s/obj/control", base);
	CHECK_EQ(put(&t, url, 0), 0);
	CHECK_EQ(get(&v.count->requests), 5);
	CHECK_EQ(get(&v.count->ranges), 2);
	CHECK_EQ(get(&v.count->failures), 1);
	CHECK_EQ(get(&v.count->redirects), 0);

	gpufile__remote_free(rm);
}
#endif

int main(void)
{
#ifdef TEST_HAVE_CURL
	char server[4200], base[128];
	int port = 0;
	pid_t pid;

	snprintf(server, sizeof(server), "%s/put_server.py", remote_dir());
	{
		char *argv[] = {"python3", server, NULL};
		pid = server_start(argv, &port);
	}
	if (pid < 0) {
		fprintf(stderr, "cannot start %s: FAILED\n", server);
		return 1;
	}
	snprintf(base, sizeof(base), "http://127.0.0.1:%d", port);
	CHECK_EQ(gpufile_config_set("http_max_attempts", "3"), 0);
	counts(base);
	server_stop(pid);
	return test_finish("test_upload_counters");
#else
	return test_missing("test_upload_counters",
	                    "libcurl (built without it)");
#endif
}
