/* s3://BUCKET/KEY through AWS_ENDPOINT_URL (path style), signed with
 * SigV4, against tests/remote/s3_server.py, which recomputes the
 * signature of every request with botocore and answers 403 when it
 * differs. Keys with characters that need encoding, a session token, a
 * wrong secret (403, no retry, the secret never shown), a missing key
 * (404), and half-set credentials. Skips when python3-botocore is absent
 * (fails under CI, where scripts/deps.sh installs it). */
#include "remote/helpers.h"
#include "testlib.h"

#include <errno.h>
#include <gpufile.h>

#define SIZE   ((size_t)(1u << 20) + 777)
#define AK     "AKIDTESTGPUFILE"
#define SK     "sEcReT/Key+ForTestsOnly0123456789abcdefg"
#define REGION "eu-test-1"
/* STS session tokens run to well over 1 KiB. */
static char token[6000]; /* longer than a 4 KiB header line */

static int port;

static pid_t start(const char *token)
{
	char server[4200], size[32];
	pid_t pid;

	snprintf(server, sizeof(server), "%s/s3_server.py", remote_dir());
	snprintf(size, sizeof(size), "%zu", SIZE);
	{
		char *argv[] = {"python3", server, size,          "bucket", AK,
		                SK,        REGION, (char *)token, NULL};
		pid = server_start(argv, &port);
	}
	if (pid > 0) {
		char ep[64];
		snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", port);
		setenv("AWS_ENDPOINT_URL", ep, 1);
	}
	return pid;
}

static void read_whole(const char *url)
{
	CHECK_EQ(read_whole_and_part(url, SIZE, 12345, 999999), 0);
}

int main(void)
{
	gpufile_t *h = NULL;
	char report[2048];
	pid_t pid;
	int rc;

	if (!strstr(gpufile_features(), "sigv4")) {
		return test_missing(
		    "test_remote_s3",
		    "libcurl and libcrypto (built without them)");
	}
	if (system("python3 -c 'import botocore' 2>/dev/null") != 0) {
		return test_missing(
		    "test_remote_s3",
		    "python3-botocore (import botocore failed)");
	}
	CHECK_EQ(gpufile_config_set("remote_task_size", "256KiB"), 0);
	setenv("AWS_ACCESS_KEY_ID", AK, 1);
	setenv("AWS_SECRET_ACCESS_KEY", SK, 1);
	unsetenv("AWS_SESSION_TOKEN");
	unsetenv("AWS_REGION");
	setenv("AWS_DEFAULT_REGION", REGION, 1);

	pid = start(NULL);
	if (pid < 0) {
		fprintf(stderr, "cannot start s3_server.py: FAILED\n");
		return 1;
	}
	read_whole("s3://bucket/plain.bin");
	read_whole("s3://bucket/dir/sub dir/a+b=c,d~e_(1).bin");
	/* Dot segments are part of the key, signed and sent as written. */
	read_whole("s3://bucket/dir/../dots.bin");
	/* '#' and '?' are characters of a key, sent encoded and signed, and
	 * the handle's name keeps them (read_whole_and_part compares
	 * gpufile_filename() with the URL). */
	read_whole("s3://bucket/hash#frag.bin");
	read_whole("s3://bucket/q?x=1&y=2.bin");
	/* A key of 800 bytes of UTF-8 (S3 allows 1024) encodes to 2400
	 * bytes: it was refused as "key too long" past 2047. */
	{
		char url[16 + 800 + 1] = "s3://bucket/";
		size_t at = strlen(url);

		for (int i = 0; i < 400; i++, at += 2)
			memcpy(url + at, "\xc3\xbc", 2); /* u with diaeresis */
		url[at] = '\0';
		read_whole(url);
	}

	/* gpufile check's report: never the secret. */
	rc = gpufile_remote_info("s3://bucket/plain.bin", report,
	                         sizeof(report));
	CHECK_EQ(rc, 0);
	CHECK_CONTAINS(report, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
	                       "set");
	CHECK_CONTAINS(report, "size: 1049353 bytes");
	CHECK_CONTAINS(report, "region: " REGION);
	CHECK(!strstr(report, SK) && !strstr(report, AK));
	fprintf(stderr, "%s", report);

	/* A missing key: 404, not retried. */
	rc = gpufile_open(&h, "s3://bucket/missing.bin", "r");
	CHECK_EQ(rc, -ENOENT);
	CHECK_CONTAINS(gpufile_errmsg(), "s3://bucket/missing.bin");
	CHECK_CONTAINS(gpufile_errmsg(), "HTTP 404, not retried");

	/* A wrong secret: botocore's signature differs, 403. */
	setenv("AWS_SECRET_ACCESS_KEY", "wrongSECRETwrong", 1);
	rc = gpufile_open(&h, "s3://bucket/plain.bin", "r");
	CHECK_EQ(rc, -EACCES);
	CHECK_CONTAINS(gpufile_errmsg(), "HTTP 403, not retried");
	CHECK(!strstr(gpufile_errmsg(), "wrongSECRET"));
	fprintf(stderr, "  wrong secret: %s\n", gpufile_errmsg());
	setenv("AWS_SECRET_ACCESS_KEY", SK, 1);

	/* Half-set credentials: a clear error before any request. */
	unsetenv("AWS_SECRET_ACCESS_KEY");
	rc = gpufile_open(&h, "s3://bucket/plain.bin", "r");
	CHECK_EQ(rc, -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "AWS_SECRET_ACCESS_KEY is not");
	setenv("AWS_SECRET_ACCESS_KEY", SK, 1);
	rc = gpufile_open(&h, "s3://bucket", "r");
	CHECK_EQ(rc, -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "s3://BUCKET/KEY");
	server_stop(pid);

	/* Temporary credentials: the session token is sent and signed. */
	for (size_t i = 0; i + 1 < sizeof(token); i++)
		token[i] = "FQoGZXIvYXdzEtokenSECRET//+="[i % 28];
	pid = start(token);
	CHECK(pid > 0);
	setenv("AWS_SESSION_TOKEN", token, 1);
	read_whole("s3://bucket/with-token.bin");
	unsetenv("AWS_SESSION_TOKEN");
	rc = gpufile_open(&h, "s3://bucket/with-token.bin", "r");
	CHECK_EQ(rc, -EACCES); /* the server wants the token */
	server_stop(pid);
	return test_finish("test_remote_s3");
}
