/*
 * AWS Signature Version 4 (sigv4.c): the Authorization header of one
 * request, for S3 reads (remote.c) and uploads (upload.c), and for tests
 * against AWS's published vectors. Needs OpenSSL's libcrypto
 * (GPUFILE_HAVE_SIGV4).
 */
#ifndef GPUFILE_SIGV4_H
#define GPUFILE_SIGV4_H

#include <stddef.h>

/* One header to sign: name in lower case, value already trimmed. */
struct gpufile__sigv4_header {
	const char *name;
	const char *value;
};

struct gpufile__sigv4_request {
	const char *method;        /* "GET", "HEAD" */
	const char *canonical_uri; /* URI-encoded path, e.g. "/bucket/key" */
	const char *query;         /* raw query "b=2&a=1" (no '?'), or "" */
	const struct gpufile__sigv4_header *headers; /* host, x-amz-date ... */
	int nheaders;
	const char *payload_sha256; /* hex, or "UNSIGNED-PAYLOAD" */
	const char *amz_date;       /* "YYYYMMDDTHHMMSSZ" */
	const char *region;
	const char *service; /* "s3" */
	const char *access_key;
	const char *secret_key;
};

/* The hex SHA-256 of the empty payload. */
#define GPUFILE__SHA256_EMPTY                                                  \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* The Authorization header value ("AWS4-HMAC-SHA256 Credential=...,
 * SignedHeaders=..., Signature=...") into *out, allocated and sized from
 * the request (the caller wipes and frees it). Headers may come in any
 * order and case of names; they are sorted here. Returns 0, -ENOMEM, or
 * -ENOTSUP when built without libcrypto (*out NULL on failure). */
int gpufile__sigv4_authorization(const struct gpufile__sigv4_request *rq,
                                 char **out);

struct gpufile__remote_view;
struct curl_slist;

/* Signs one S3 request to the object of v (its host, path, region and
 * credentials) now, and appends to *list the headers it signed, then
 * Authorization. Signed: host, range (when not NULL), x-amz-content-sha256
 * (payload_sha256, the hex SHA-256 of the body), x-amz-date,
 * x-amz-security-token (when v has a session token). Not appended: range,
 * which the caller sends itself (signed or not), and host unless send_host
 * (v->s3_host is the URL's host as libcurl would send it). query: encoded,
 * "" for none. Returns 0, -ENOMEM (a header could not be added) or
 * -ENOTSUP (built without libcrypto); *list is the caller's to free either
 * way. Built with libcurl only (GPUFILE_HAVE_CURL). */
int gpufile__sigv4_s3_headers(const struct gpufile__remote_view *v,
                              const char *method, const char *query,
                              const char *range, const char *payload_sha256,
                              int send_host, struct curl_slist **list);

/* text URI-encoded the way SigV4 wants (unreserved A-Z a-z 0-9 - . _ ~
 * kept; '/' kept when keep_slash), allocated and sized from text (the
 * caller frees it), or NULL when out of memory. */
char *gpufile__sigv4_uri_encode(const char *text, int keep_slash);

#endif
