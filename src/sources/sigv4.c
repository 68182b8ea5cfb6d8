/*
 * AWS Signature Version 4, written from AWS's description of the
 * algorithm: canonical request -> string to sign -> HMAC chain over the
 * date, region, service and "aws4_request" -> signature. Checked against
 * AWS's published vectors (tests/test_remote_sigv4.c) and against
 * botocore, recomputing every request gpufile sends (tests/remote/).
 */
#define _GNU_SOURCE
#include "sources/sigv4.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if GPUFILE_HAVE_SIGV4
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#endif

char *gpufile__sigv4_uri_encode(const char *text, int keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	/* Sized from text: each byte takes at most three ("%XX"). */
	char *out = malloc(3 * strlen(text) + 1);
	size_t o = 0;

	if (!out)
		return NULL;
	for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
		/* RFC 3986 unreserved characters, by their ASCII codes:
		 * isalnum() follows the locale, and a single-byte locale
		 * would leave bytes above 0x7f unencoded. */
		const int unreserved = (*p >= 'A' && *p <= 'Z') ||
		                       (*p >= 'a' && *p <= 'z') ||
		                       (*p >= '0' && *p <= '9') || *p == '-' ||
		                       *p == '.' || *p == '_' || *p == '~';

		if (unreserved || (keep_slash && *p == '/')) {
			out[o++] = (char)*p;
		} else {
			out[o++] = '%';
			out[o++] = hex[*p >> 4];
			out[o++] = hex[*p & 15];
		}
	}
	out[o] = '\0';
	return out;
}

#if GPUFILE_HAVE_SIGV4

/* A growing string; on allocation failure it stays failed. */
struct buf {
	char *p;
	size_t n, cap;
	int oom;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = (b->cap ? b->cap * 2 : 512) + n;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
	b->p[b->n] = '\0';
}

static void puts_(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

static void to_hex(const unsigned char *d, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[d[i] >> 4];
		out[2 * i + 1] = hex[d[i] & 15];
	}
	out[2 * n] = '\0';
}

static void hmac(const void *key, size_t key_len, const char *msg,
                 unsigned char out[32])
{
	unsigned int n = 32;

	HMAC(EVP_sha256(), key, (int)key_len, (const unsigned char *)msg,
	     strlen(msg), out, &n);
}

static int cmp_header(const void *a, const void *b)
{
	const struct gpufile__sigv4_header *x = a, *y = b;

	return strcmp(x->name, y->name);
}

/* Query parameters ("name=value", encoded) by name, then value, as
 * SigV4 sorts them: comparing the whole text put "x2=2" before "x=1"
 * ('2' sorts before '=' as a byte). */
static int cmp_param(const void *a, const void *b)
{
	const char *x = *(char *const *)a, *y = *(char *const *)b;
	const size_t nx = strcspn(x, "="), ny = strcspn(y, "=");
	const int c = memcmp(x, y, nx < ny ? nx : ny);

	if (c || nx != ny)
		return c ? c : (nx > ny) - (nx < ny);
	return strcmp(x[nx] ? x + nx + 1 : "", y[ny] ? y + ny + 1 : "");
}

/* Header value as SigV4 wants it: trimmed, inner runs of spaces as one. */
static void put_trimmed(struct buf *b, const char *v)
{
	int space = 0;

	while (*v == ' ' || *v == '\t')
		v++;
	for (; *v; v++) {
		if (*v == ' ' || *v == '\t') {
			space = 1;
			continue;
		}
		if (space)
			put(b, " ", 1);
		space = 0;
		put(b, v, 1);
	}
}

/* The query's parameters sorted by name then value (they come encoded). */
static int put_query(struct buf *b, const char *query)
{
	char *copy = strdup(query), *save = NULL, **parts;
	size_t n = 0, cap = 1;

	if (!copy)
		return -ENOMEM;
	for (const char *p = query; *p; p++)
		cap += *p == '&';
	parts = calloc(cap, sizeof(*parts));
	if (!parts) {
		free(copy);
		return -ENOMEM;
	}
	for (char *t = strtok_r(copy, "&", &save); t;
	     t = strtok_r(NULL, "&", &save))
		parts[n++] = t;
	qsort(parts, n, sizeof(*parts), cmp_param);
	for (size_t i = 0; i < n; i++) {
		if (i)
			put(b, "&", 1);
		puts_(b, parts[i]);
		if (!strchr(parts[i], '='))
			put(b, "=", 1);
	}
	free(parts);
	free(copy);
	return 0;
}

/* The canonical request of rq into canon, and its signed header names
 * (sorted, ';'-separated) into names. Returns 0 or -ENOMEM. */
static int canonical_request(const struct gpufile__sigv4_request *rq,
                             struct buf *canon, struct buf *names)
{
	struct gpufile__sigv4_header *h;
	int rc = 0;

	h = calloc((size_t)rq->nheaders + 1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	memcpy(h, rq->headers, (size_t)rq->nheaders * sizeof(*h));
	qsort(h, (size_t)rq->nheaders, sizeof(*h), cmp_header);

	puts_(canon, rq->method);
	put(canon, "\n", 1);
	puts_(canon, rq->canonical_uri[0] ? rq->canonical_uri : "/");
	put(canon, "\n", 1);
	if (put_query(canon, rq->query ? rq->query : "")) {
		rc = -ENOMEM;
		goto out;
	}
	put(canon, "\n", 1);
	for (int i = 0; i < rq->nheaders; i++) {
		puts_(canon, h[i].name);
		put(canon, ":", 1);
		put_trimmed(canon, h[i].value);
		put(canon, "\n", 1);
		if (i)
			put(names, ";", 1);
		puts_(names, h[i].name);
	}
	put(canon, "\n", 1);
	puts_(canon, names->p ? names->p : "");
	put(canon, "\n", 1);
	puts_(canon, rq->payload_sha256);
	if (canon->oom || names->oom)
		rc = -ENOMEM;
out:
	free(h);
	return rc;
}

/* The string to sign into sts, for the canonical request's hash (hex) on
 * date (YYYYMMDD). Returns 0 or -ENOMEM. */
static int string_to_sign(const struct gpufile__sigv4_request *rq,
                          const char *hash_hex, const char *date,
                          struct buf *sts)
{
	puts_(sts, "AWS4-HMAC-SHA256\n");
	puts_(sts, rq->amz_date);
	put(sts, "\n", 1);
	puts_(sts, date);
	put(sts, "/", 1);
	puts_(sts, rq->region);
	put(sts, "/", 1);
	puts_(sts, rq->service);
	puts_(sts, "/aws4_request\n");
	puts_(sts, hash_hex);
	return sts->oom ? -ENOMEM : 0;
}

/* The signature (hex) of sts with the key derived from the secret for
 * date, region and service. Returns 0 or -ENOMEM. */
static int signature(const struct gpufile__sigv4_request *rq, const char *date,
                     const char *sts, char *sig_hex)
{
	unsigned char digest[32], k[32];
	char *secret;
	int n = asprintf(&secret, "AWS4%s", rq->secret_key);

	if (n < 0)
		return -ENOMEM;
	hmac(secret, (size_t)n, date, k);
	hmac(k, 32, rq->region, k);
	hmac(k, 32, rq->service, k);
	hmac(k, 32, "aws4_request", k);
	hmac(k, 32, sts, digest);
	to_hex(digest, 32, sig_hex);
	/* The secret and the derived key are not left in memory. */
	explicit_bzero(secret, (size_t)n);
	free(secret);
	explicit_bzero(k, sizeof(k));
	return 0;
}

int gpufile__sigv4_authorization(const struct gpufile__sigv4_request *rq,
                                 char **out)
{
	struct buf canon = {0}, names = {0}, sts = {0};
	unsigned char digest[32];
	char hash_hex[65], sig_hex[65], date[9];
	int rc;

	*out = NULL;

	rc = canonical_request(rq, &canon, &names);
	if (rc)
		goto out;
	SHA256((const unsigned char *)canon.p, canon.n, digest);
	to_hex(digest, 32, hash_hex);
	snprintf(date, sizeof(date), "%.8s", rq->amz_date);
	rc = string_to_sign(rq, hash_hex, date, &sts);
	if (rc == 0)
		rc = signature(rq, date, sts.p, sig_hex);
	if (rc)
		goto out;
	if (asprintf(out,
	             "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, "
	             "SignedHeaders=%s, Signature=%s",
	             rq->access_key, date, rq->region, rq->service,
	             names.p ? names.p : "", sig_hex) < 0) {
		*out = NULL;
		rc = -ENOMEM;
	}
out:
	free(canon.p);
	free(names.p);
	free(sts.p);
	return rc;
}

#else

int gpufile__sigv4_authorization(const struct gpufile__sigv4_request *rq,
                                 char **out)
{
	(void)rq;
	*out = NULL;
	return -ENOTSUP;
}

#endif

#if GPUFILE_HAVE_CURL
#include "sources/http.h"

int gpufile__sigv4_s3_headers(const struct gpufile__remote_view *v,
                              const char *method, const char *query,
                              const char *range, const char *payload_sha256,
                              int send_host, struct curl_slist **list)
{
	struct gpufile__sigv4_header hd[5];
	struct gpufile__sigv4_request rq = {0};
	char date[20], *auth = NULL;
	time_t now = time(NULL);
	struct tm tm;
	int n = 0, rc;

	gmtime_r(&now, &tm);
	strftime(date, sizeof(date), "%Y%m%dT%H%M%SZ", &tm);
	hd[n++] = (struct gpufile__sigv4_header){"host", v->s3_host};
	if (range)
		hd[n++] = (struct gpufile__sigv4_header){"range", range};
	hd[n++] = (struct gpufile__sigv4_header){"x-amz-content-sha256",
	                                         payload_sha256};
	hd[n++] = (struct gpufile__sigv4_header){"x-amz-date", date};
	if (v->session_token)
		hd[n++] = (struct gpufile__sigv4_header){"x-amz-security-token",
		                                         v->session_token};
	rq.method = method;
	rq.canonical_uri = v->s3_canonical_uri;
	rq.query = query;
	rq.headers = hd;
	rq.nheaders = n;
	rq.payload_sha256 = payload_sha256;
	rq.amz_date = date;
	rq.region = v->region;
	rq.service = "s3";
	rq.access_key = v->access_key;
	rq.secret_key = v->secret_key;
	rc = gpufile__sigv4_authorization(&rq, &auth);
	for (int i = 0; i < n && rc == 0; i++) {
		if (strcmp(hd[i].name, "range") == 0 ||
		    (!send_host && strcmp(hd[i].name, "host") == 0))
			continue;
		rc = gpufile__http_header(list, hd[i].name, hd[i].value);
	}
	if (rc == 0)
		rc = gpufile__http_header(list, "Authorization", auth);
	if (auth) {
		explicit_bzero(auth, strlen(auth));
		free(auth);
	}
	return rc;
}
#endif
