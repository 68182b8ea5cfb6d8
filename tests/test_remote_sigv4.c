/* The SigV4 signer (src/sources/sigv4.c) against AWS's published examples: the
 * signature test suite's get-vanilla and get-vanilla-query-order-key-case
 * (service "service", 20150830T123600Z) and the S3 GetObject example of
 * the S3 API reference (a Range header and x-amz-content-sha256). The
 * expected signatures are AWS's, not computed here. */
#include "sigv4.h"
#include "testlib.h"

#include <errno.h>
#include <gpufile.h>
#include <stdlib.h>

static const char *suite_secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";

static void sign_suite(const char *query, const char *want_sig)
{
	const struct gpufile__sigv4_header hd[] = {
	    /* Out of order and in another case on purpose: sorted by the
	     * signer. */
	    {"x-amz-date", "20150830T123600Z"},
	    {"host", "example.amazonaws.com"},
	};
	struct gpufile__sigv4_request rq = {
	    .method = "GET",
	    .canonical_uri = "/",
	    .query = query,
	    .headers = hd,
	    .nheaders = 2,
	    .payload_sha256 = GPUFILE__SHA256_EMPTY,
	    .amz_date = "20150830T123600Z",
	    .region = "us-east-1",
	    .service = "service",
	    .access_key = "AKIDEXAMPLE",
	    .secret_key = suite_secret,
	};
	char *auth = NULL, want[512];

	CHECK_EQ(gpufile__sigv4_authorization(&rq, &auth), 0);
	if (!auth)
		return;
	snprintf(want, sizeof(want),
	         "AWS4-HMAC-SHA256 "
	         "Credential=AKIDEXAMPLE/20150830/us-east-1/service/"
	         "aws4_request, SignedHeaders=host;x-amz-date, Signature=%s",
	         want_sig);
	CHECK(strcmp(auth, want) == 0);
	if (strcmp(auth, want) != 0)
		fprintf(stderr, "got  %s\nwant %s\n", auth, want);
	free(auth);
}

static void sign_s3_get_object(void)
{
	const struct gpufile__sigv4_header hd[] = {
	    {"host", "examplebucket.s3.amazonaws.com"},
	    {"range", "bytes=0-9"},
	    {"x-amz-content-sha256", GPUFILE__SHA256_EMPTY},
	    {"x-amz-date", "20130524T000000Z"},
	};
	struct gpufile__sigv4_request rq = {
	    .method = "GET",
	    .canonical_uri = "/test.txt",
	    .query = "",
	    .headers = hd,
	    .nheaders = 4,
	    .payload_sha256 = GPUFILE__SHA256_EMPTY,
	    .amz_date = "20130524T000000Z",
	    .region = "us-east-1",
	    .service = "s3",
	    .access_key = "AKIAIOSFODNN7EXAMPLE",
	    .secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	};
	char *auth = NULL, *secret, *access;

	CHECK_EQ(gpufile__sigv4_authorization(&rq, &auth), 0);
	if (!auth)
		return;
	CHECK_CONTAINS(auth, "Credential=AKIAIOSFODNN7EXAMPLE/20130524/"
	                     "us-east-1/s3/aws4_request, SignedHeaders=host;"
	                     "range;x-amz-content-sha256;x-amz-date, ");
	CHECK_CONTAINS(auth, "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44"
	                     "f0170aba48dd91039c6036bdb41");
	free(auth);
	/* A secret key of 300 bytes and an access key of 600 (the header
	 * and the signing key were fixed buffers of 512 and 256 bytes):
	 * sized from them, never cut or refused. */
	secret = malloc(301);
	access = malloc(601);
	if (!secret || !access)
		goto out;
	memset(secret, 's', 300);
	secret[300] = '\0';
	memset(access, 'A', 600);
	access[600] = '\0';
	rq.secret_key = secret;
	rq.access_key = access;
	CHECK_EQ(gpufile__sigv4_authorization(&rq, &auth), 0);
	if (auth) {
		CHECK_CONTAINS(auth, access);
		CHECK(strlen(auth) > 600 + 64);
		free(auth);
	}
out:
	free(secret);
	free(access);
}

static void uri_encoding(void)
{
	char *out, key[801];

	out = gpufile__sigv4_uri_encode("dir/a b+c~_.-Z9", 1);
	CHECK(out && strcmp(out, "dir/a%20b%2Bc~_.-Z9") == 0);
	free(out);
	out = gpufile__sigv4_uri_encode("a/b?c#d", 0);
	CHECK(out && strcmp(out, "a%2Fb%3Fc%23d") == 0);
	free(out);
	/* An 800-byte UTF-8 key (S3 allows 1024) encodes to 2400 bytes, past
	 * the 2047 of the buffer it once had. */
	for (int i = 0; i < 400; i++)
		memcpy(key + 2 * i, "\xc3\xbc", 2); /* u with diaeresis */
	key[800] = '\0';
	out = gpufile__sigv4_uri_encode(key, 1);
	CHECK(out && strlen(out) == 2400 && strncmp(out, "%C3%BC", 6) == 0);
	free(out);
}

int main(void)
{
	if (!strstr(gpufile_features(), "sigv4")) {
		return test_missing("test_remote_sigv4",
		                    "libcrypto (built without it)");
	}
	/* get-vanilla */
	sign_suite("", "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1"
	               "d763fbf31");
	/* get-vanilla-query-order-key-case: sorted before signing */
	sign_suite(
	    "Param2=value2&Param1=value1",
	    "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf"
	    "2500");
	sign_s3_get_object();
	uri_encoding();
	return test_finish("test_remote_sigv4");
}
