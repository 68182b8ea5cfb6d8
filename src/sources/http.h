/*
 * One HTTP request with retries (http.c), for the sources that send
 * requests of their own (upload.c: PUT, POST and DELETE with a body;
 * webhdfs.c: GETs into a destination): the body from memory, the reply
 * into a destination or a text, the retry rule of remote reads
 * (http_max_attempts, the retryable curl errors, http_status_codes; the
 * waits, CA and http_verbose log of http_policy.h), on the handle's
 * transfer engine (http_multi.h), whose connections are kept between
 * requests.
 */
#ifndef GPUFILE_HTTP_H
#define GPUFILE_HTTP_H

#include "sources/remote.h"

#include <sys/uio.h>

struct curl_slist;

/* How requests to one object go. */
struct gpufile__http {
	const char *shown; /* the redacted URL, for messages */
	unsigned max_attempts;
	long timeout_s;
	long retry_after_max_s;        /* http_retry_after_max */
	int verbose;                   /* http_verbose: log each exchange */
	const char *ca_file, *ca_path; /* NULL: libcurl's default */
	const int *retry_codes;
	int nretry_codes;
	int follow;     /* follow redirects (never for a signed request) */
	int path_as_is; /* an S3 key: no dot-segment removal */
	/* Adds the headers of one attempt (a signature), or NULL. */
	int (*headers)(void *arg, const char *method, const char *query,
	               const struct iovec *iov, int iovcnt,
	               struct curl_slist **list);
	void *headers_arg;
	struct gpufile__remote_counters *count; /* the handle's (remote.h) */
	/* The handle's transfer engine (http_multi.c): its connections,
	 * kept between requests, and its http_max_in_flight. */
	struct gpufile__http_engine *engine;
};

/* One request. */
struct gpufile__http_call {
	const char *method; /* GET, PUT, POST, DELETE */
	const char *url;    /* whole, query included */
	const char *query;  /* the query again, encoded, for the signature */
	const struct iovec *iov; /* the body, read in order */
	int iovcnt;
	const char *what; /* "uploading part 3 of", for messages */
	/* Its body (a PUT of a part or of the object) or its reply (dst: a
	 * range) is the object's bytes: counted as a range. */
	int data;
};

/* Its reply. With dst, a 2xx body goes there (want bytes at most: more is
 * an error); else it is kept in text (up to 1 MiB). */
struct gpufile__http_reply {
	char *dst;
	size_t want, got;
	int overflow;
	char *text; /* NUL-terminated, or NULL */
	size_t len;
	int too_long; /* the text went past what is kept: not read on */
	int oom;
	char *etag;          /* the ETag header, or NULL */
	int64_t retry_after; /* seconds its Retry-After asks, -1 if none */
	long status;
	void *curl; /* during the request */
};

/* Sets t up from v (settings, URL shown, engine; t holds nothing to
 * free). Returns 0, or -EINVAL when v has no engine. */
int gpufile__http_init(struct gpufile__http *t,
                       const struct gpufile__remote_view *v);

/* Sends k, retried: a transfer error a new attempt can cure, a status of
 * http_status_codes, and (with dst) a body shorter than want; each retry
 * writes from dst's start. Returns 0 with *rp the 2xx reply, or an error
 * whose message names k->what, the redacted URL, the HTTP status (and
 * the first words of its reply) or curl error, and the attempts; *rp
 * still holds the last reply (status). The caller frees *rp's text and
 * etag with gpufile__http_reply_free. */
int gpufile__http_send(struct gpufile__http *t,
                       const struct gpufile__http_call *k,
                       struct gpufile__http_reply *rp);
void gpufile__http_reply_free(struct gpufile__http_reply *rp);

/* The first words of an error reply (S3's <Code>, else the body's start),
 * printable, into out. */
void gpufile__http_gist(const struct gpufile__http_reply *rp, char *out,
                        size_t len);

/* Appends "name: value" to *list (sized from them; the copy, which may
 * hold a credential, is wiped). Returns 0 or -ENOMEM. */
int gpufile__http_header(struct curl_slist **list, const char *name,
                         const char *value);

#endif
