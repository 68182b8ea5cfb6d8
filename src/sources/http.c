/*
 * One HTTP request with retries for the sources that send their own
 * (upload.c, webhdfs.c); see http.h. Every attempt starts over: the body
 * is read again from its start and a reply written from dst's start.
 * Requests run on the handle's transfer engine (http_multi.c), as remote
 * reads do: one connection cache per handle, a back-off waited by the
 * engine, and the requests of many threads (an upload's parts) in flight
 * together, driven by one of them. The callbacks (on_read, on_reply)
 * touch only the request's own body and reply, so they may run in
 * whichever thread drives.
 */
#define _GNU_SOURCE
#include "sources/http.h"
#include "sources/http_multi.h"
#include "sources/http_policy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#if GPUFILE_HAVE_CURL
#include <curl/curl.h>

/* The most of a reply text read (an S3 or WebHDFS answer is a few hundred
 * bytes; an error page is cut here, and the transfer stopped). */
#define REPLY_MAX (1u << 20)

/* How many times http_timeout the reply to a request with a body may take
 * once the body is sent: S3's CompleteMultipartUpload may take minutes,
 * keeping the connection alive with spaces, so a server that sends a
 * byte now and then is given that long, not for ever. */
#define REPLY_AFTER_BODY_TIMEOUTS 10

int gpufile__http_init(struct gpufile__http *t,
                       const struct gpufile__remote_view *v)
{
	*t = (struct gpufile__http){
	    .shown = v->shown,
	    .max_attempts = v->max_attempts,
	    .timeout_s = v->timeout_s,
	    .retry_after_max_s = v->retry_after_max_s,
	    .verbose = v->verbose,
	    .ca_file = v->ca_file,
	    .ca_path = v->ca_path,
	    .retry_codes = v->retry_codes,
	    .nretry_codes = v->nretry_codes,
	    .count = v->count,
	    .engine = v->engine,
	};
	return t->engine
	           ? 0
	           : gpufile__fail(-EINVAL, "%s: no transfer engine", t->shown);
}

/* The body being sent. */
struct body {
	const struct iovec *iov;
	int iovcnt;
	uint64_t len, pos;
};

static size_t on_read(char *dst, size_t size, size_t n, void *arg)
{
	struct body *b = arg;
	size_t want = size * n, done = 0;
	uint64_t at = 0;

	for (int i = 0; i < b->iovcnt && done < want; i++) {
		const uint64_t seg = b->iov[i].iov_len;

		if (b->pos < at + seg) {
			size_t from = (size_t)(b->pos - at);
			size_t k =
			    seg - from < want - done ? seg - from : want - done;

			memcpy(dst + done, (char *)b->iov[i].iov_base + from,
			       k);
			done += k;
			b->pos += k;
		}
		at += seg;
	}
	return done;
}

static int on_seek(void *arg, curl_off_t off, int origin)
{
	struct body *b = arg;

	if (origin != SEEK_SET || off < 0 || (uint64_t)off > b->len)
		return CURL_SEEKFUNC_CANTSEEK;
	b->pos = (uint64_t)off;
	return CURL_SEEKFUNC_OK;
}

static size_t on_reply(char *data, size_t size, size_t n, void *arg)
{
	struct gpufile__http_reply *rp = arg;
	size_t len = size * n, k = len;
	long status = 0;

	curl_easy_getinfo(rp->curl, CURLINFO_RESPONSE_CODE, &status);
	if (rp->dst && status >= 200 && status < 300) {
		if (len > rp->want - rp->got) {
			rp->overflow = 1;
			return 0; /* stop: never past the destination */
		}
		memcpy(rp->dst + rp->got, data, len);
		rp->got += len;
		return len;
	}
	if (rp->len + k > REPLY_MAX) {
		/* Not read on: a server sending without end would keep the
		 * request for ever. What was kept is judged (judge). */
		rp->too_long = 1;
		return 0;
	}
	if (k && !rp->oom) {
		char *more = realloc(rp->text, rp->len + k + 1);

		if (!more) {
			rp->oom = 1;
			return len;
		}
		rp->text = more;
		memcpy(rp->text + rp->len, data, k);
		rp->len += k;
		rp->text[rp->len] = '\0';
	}
	return len;
}

static size_t on_header(char *line, size_t size, size_t n, void *arg)
{
	struct gpufile__http_reply *rp = arg;
	const size_t len = size * n;

	if (len > 5 && strncasecmp(line, "HTTP/", 5) == 0) {
		/* A new response (a redirect's target, after a 100). */
		free(rp->etag);
		rp->etag = NULL;
		rp->retry_after = -1;
		rp->len = 0;
		if (rp->text)
			rp->text[0] = '\0';
	} else if (len > 12 && strncasecmp(line, "retry-after:", 12) == 0) {
		rp->retry_after =
		    gpufile__http_retry_after(line + 12, len - 12);
	} else if (len > 5 && strncasecmp(line, "etag:", 5) == 0) {
		const char *v = line + 5 + strspn(line + 5, " \t");
		size_t k = strcspn(v, "\r\n");

		while (k && (v[k - 1] == ' ' || v[k - 1] == '\t'))
			k--;
		free(rp->etag);
		rp->etag = strndup(v, k);
		if (!rp->etag)
			rp->oom = 1;
	}
	return len;
}

void gpufile__http_reply_free(struct gpufile__http_reply *rp)
{
	free(rp->text);
	free(rp->etag);
	rp->text = rp->etag = NULL;
	rp->len = 0;
}

int gpufile__http_header(struct curl_slist **list, const char *name,
                         const char *value)
{
	struct curl_slist *more;
	char *line;

	if (asprintf(&line, "%s: %s", name, value) < 0)
		return -ENOMEM;
	more = curl_slist_append(*list, line);
	explicit_bzero(line, strlen(line));
	free(line);
	if (!more)
		return -ENOMEM;
	*list = more;
	return 0;
}

void gpufile__http_gist(const struct gpufile__http_reply *rp, char *out,
                        size_t len)
{
	const char *code = rp->text ? strstr(rp->text, "<Code>") : NULL;
	const char *from = code ? code + 6 : rp->text;
	size_t n = 0;

	if (!len)
		return;
	while (from && from[n] && from[n] != '<' && from[n] != '\n' &&
	       n < 200 && n + 1 < len) {
		out[n] = (unsigned char)from[n] < 0x20 ? ' ' : from[n];
		n++;
	}
	out[n] = '\0';
}

enum { EX_OK, EX_RETRY, EX_FAIL };

/* A curl failure a new attempt may cure. */
static void setup(struct gpufile__http *t, CURL *c,
                  const struct gpufile__http_call *k, struct body *body,
                  struct gpufile__http_reply *rp)
{
	curl_easy_reset(c);
	curl_easy_setopt(c, CURLOPT_URL, k->url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, t->follow ? 1L : 0L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
	if (t->path_as_is)
		curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
	gpufile__http_use_ca(c, t->ca_file, t->ca_path);
	if (!strcmp(k->method, "PUT")) {
		curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE,
		                 (curl_off_t)body->len);
	} else if (!strcmp(k->method, "POST")) {
		curl_easy_setopt(c, CURLOPT_POST, 1L);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
		                 (curl_off_t)body->len);
	} else if (strcmp(k->method, "GET") != 0) {
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, k->method);
	}
	curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
	curl_easy_setopt(c, CURLOPT_READDATA, body);
	curl_easy_setopt(c, CURLOPT_SEEKFUNCTION, on_seek);
	curl_easy_setopt(c, CURLOPT_SEEKDATA, body);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_reply);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, rp);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, rp);
	/* A stalled server: no byte for http_timeout seconds. A request
	 * without a body (a range, a status, a start or an abort of an
	 * upload) may take that long in all, as a remote read's range does;
	 * one with a body is given the time its bytes take to send, then
	 * REPLY_AFTER_BODY_TIMEOUTS times that for its reply (on_progress). */
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, t->timeout_s);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, t->timeout_s);
	if (!body->len)
		curl_easy_setopt(c, CURLOPT_TIMEOUT, t->timeout_s);
}

/* Judges a finished attempt of the request k: EX_* with *err and *why
 * set on failure; slow: its reply went on too long (on_progress). */
static int judge(struct gpufile__http *t, const struct gpufile__http_call *k,
                 struct gpufile__http_reply *rp, CURLcode cc,
                 const char *errbuf, int slow, int *err, char **why)
{
	char gist[208];

	if (slow) {
		*err = -ETIMEDOUT;
		gpufile__http_why(why,
		                  "the reply went on for more than %ld s (%d x "
		                  "http_timeout) once the request's body was "
		                  "sent or answered",
		                  REPLY_AFTER_BODY_TIMEOUTS * t->timeout_s,
		                  REPLY_AFTER_BODY_TIMEOUTS);
		return EX_RETRY;
	}
	/* Stopped past REPLY_MAX: its status says what it was. */
	if (rp->too_long && cc == CURLE_WRITE_ERROR)
		cc = CURLE_OK;
	if (rp->overflow) {
		*err = -EIO;
		gpufile__http_why(
		    why, "the server sent more than the %zu bytes asked",
		    rp->want);
		return EX_FAIL;
	}
	if (cc != CURLE_OK) {
		*err = gpufile__http_curl_failed(cc, errbuf, k->url, why);
		return gpufile__http_curl_retryable(cc) ? EX_RETRY : EX_FAIL;
	}
	if (rp->oom) {
		*err = -ENOMEM;
		gpufile__http_why(why, "out of memory keeping the reply");
		return EX_FAIL;
	}
	if (rp->status < 200 || rp->status >= 300) {
		*err = rp->status == 404 || rp->status == 410   ? -ENOENT
		       : rp->status == 401 || rp->status == 403 ? -EACCES
		                                                : -EIO;
		gpufile__http_gist(rp, gist, sizeof(gist));
		gpufile__http_why(why, "HTTP %ld%s%s", rp->status,
		                  gist[0] ? ": " : "", gist);
		for (int i = 0; i < t->nretry_codes; i++)
			if (t->retry_codes[i] == rp->status)
				return EX_RETRY;
		return EX_FAIL;
	}
	/* A reply read as text (an upload's start or end, a WebHDFS
	 * status) past what is kept is not one; the reply to an object's
	 * bytes (a part's PUT, whose ETag is a header) is not read. */
	if (rp->too_long && !k->data) {
		*err = -EPROTO;
		gpufile__http_why(why,
		                  "HTTP %ld with a reply longer than %u bytes "
		                  "(not read on)",
		                  rp->status, REPLY_MAX);
		return EX_FAIL;
	}
	if (rp->dst && rp->got != rp->want) {
		*err = -EIO;
		gpufile__http_why(why, "the body ended after %zu of %zu bytes",
		                  rp->got, rp->want);
		return EX_RETRY;
	}
	return EX_OK;
}

/* One request on the handle's transfer engine (http_multi.c): its
 * attempts, each set up on the easy handle the engine lends it. */
struct http_job {
	struct gpufile__http_xfer x; /* first: the engine's view of it */
	struct gpufile__http *t;
	const struct gpufile__http_call *k;
	struct gpufile__http_reply *rp;
	struct body body;
	struct curl_slist *list; /* the attempt's headers */
	char errbuf[CURL_ERROR_SIZE];
	unsigned n; /* the attempt */
	int ex, err;
	char *why;
	/* CLOCK_MONOTONIC ns when the attempt's body was all sent (0: not
	 * yet); slow: its reply then took too long (on_progress). */
	uint64_t sent_ns;
	int slow;
};

/* libcurl's progress of a request with a body: once the body is sent,
 * or a final status came before it was (libcurl then stops sending), the
 * reply has REPLY_AFTER_BODY_TIMEOUTS x http_timeout to end. */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow,
                       curl_off_t ultotal, curl_off_t ulnow)
{
	struct http_job *j = arg;
	long status = 0;
	uint64_t now;

	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	if (ulnow < 0 || (uint64_t)ulnow < j->body.len) {
		curl_easy_getinfo(j->rp->curl, CURLINFO_RESPONSE_CODE, &status);
		if (status < 200)
			return 0;
	}
	now = gpufile__now_ns();
	if (!j->sent_ns) {
		j->sent_ns = now;
		return 0;
	}
	if (now - j->sent_ns > (uint64_t)REPLY_AFTER_BODY_TIMEOUTS *
	                           (uint64_t)j->t->timeout_s * 1000000000u) {
		j->slow = 1;
		return 1; /* ends the transfer: CURLE_ABORTED_BY_CALLBACK */
	}
	return 0;
}

static int job_start(struct gpufile__http_xfer *x)
{
	struct http_job *j = (struct http_job *)x;
	struct gpufile__http *t = j->t;
	const struct gpufile__http_call *k = j->k;
	struct gpufile__http_reply *rp = j->rp;
	int rc;

	gpufile__http_reply_free(rp);
	rp->got = 0;
	rp->overflow = rp->oom = rp->too_long = 0;
	j->sent_ns = 0;
	j->slow = 0;
	rp->status = 0;
	rp->retry_after = -1;
	rp->curl = x->easy;
	j->body.pos = 0;
	j->errbuf[0] = '\0';
	j->ex = EX_FAIL;
	if (!x->easy) {
		j->err = -ENOMEM;
		gpufile__http_why(&j->why, "no curl handle (out of memory)");
		return -ENOMEM;
	}
	/* A body goes without waiting for "100 Continue" (a server that
	 * never sends one would cost a second a request). */
	rc = gpufile__http_header(&j->list, "Expect", "");
	if (rc == 0 && t->headers)
		rc = t->headers(t->headers_arg, k->method, k->query, k->iov,
		                k->iovcnt, &j->list);
	if (rc) {
		curl_slist_free_all(j->list);
		j->list = NULL;
		j->err = rc;
		gpufile__http_why(&j->why, "%s (no request sent)",
		                  rc == -ENOMEM
		                      ? "out of memory building the request"
		                      : "SigV4 signing failed");
		return rc;
	}
	setup(t, x->easy, k, &j->body, rp);
	if (j->body.len) {
		curl_easy_setopt(x->easy, CURLOPT_XFERINFOFUNCTION,
		                 on_progress);
		curl_easy_setopt(x->easy, CURLOPT_XFERINFODATA, j);
		curl_easy_setopt(x->easy, CURLOPT_NOPROGRESS, 0L);
	}
	curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, j->list);
	curl_easy_setopt(x->easy, CURLOPT_ERRORBUFFER, j->errbuf);
	return 0;
}

static long job_finish(struct gpufile__http_xfer *x, CURLcode cc)
{
	struct http_job *j = (struct http_job *)x;
	struct gpufile__http *t = j->t;
	struct gpufile__http_reply *rp = j->rp;
	CURL *c = x->easy;
	long connects = 0;

	curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, NULL);
	/* The job (on_progress's) ends with this call. */
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 1L);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, NULL);
	curl_slist_free_all(j->list);
	j->list = NULL;
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &rp->status);
	if (t->verbose)
		gpufile__http_log_exchange(c, j->k->method, j->k->url, "", cc);
	curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &connects);
	gpufile__stats_remote_response(rp->status, connects);
	gpufile__remote_count_response(t->count, c);
	rp->curl = NULL;
	if (x->multi_rc != CURLM_OK) { /* not retried */
		j->err = gpufile__http_multi_failed(x->multi_fn, x->multi_rc,
		                                    &j->why);
		j->ex = EX_FAIL;
	} else {
		j->ex = judge(t, j->k, rp, cc, j->errbuf, j->slow, &j->err,
		              &j->why);
	}
	if (j->ex != EX_RETRY || j->n >= t->max_attempts)
		return GPUFILE__HTTP_DONE;
	gpufile__stats_remote_retry();
	gpufile__remote_count_retry(t->count);
	{
		/* The wait rule of remote reads (http_policy.c); the engine
		 * waits it. */
		const struct gpufile__http_wait w = {
		    .attempt = j->n,
		    .max_attempts = t->max_attempts,
		    .retry_after = rp->retry_after,
		    .retry_after_max_s = t->retry_after_max_s,
		    .verbose = t->verbose,
		};

		j->n++;
		return gpufile__http_back_off_ms(&w);
	}
}

static const struct gpufile__http_xfer_ops job_ops = {
    .start = job_start,
    .finish = job_finish,
};

int gpufile__http_send(struct gpufile__http *t,
                       const struct gpufile__http_call *k,
                       struct gpufile__http_reply *rp)
{
	struct http_job j = {.x.ops = &job_ops,
	                     .t = t,
	                     .k = k,
	                     .rp = rp,
	                     .body = {.iov = k->iov, .iovcnt = k->iovcnt},
	                     .n = 1,
	                     .ex = EX_FAIL,
	                     .err = -EIO};
	struct gpufile__http_xfer *x = &j.x;
	int rc;

	for (int i = 0; i < k->iovcnt; i++)
		j.body.len += k->iov[i].iov_len;
	gpufile__http_run(t->engine, &x, 1);
	if (k->data) {
		uint64_t bytes = rp->got;

		for (int i = 0; !rp->dst && i < k->iovcnt; i++)
			bytes += k->iov[i].iov_len;
		gpufile__remote_count_range(t->count, bytes, j.ex != EX_OK);
	}
	if (j.ex == EX_OK) {
		free(j.why);
		return 0;
	}
	rc = gpufile__fail(
	    j.err, "%s %s: %s%s (attempt %u of %u)", k->what, t->shown,
	    j.why ? j.why : "(out of memory)",
	    j.ex == EX_RETRY ? ", retries exhausted" : ", not retried",
	    j.n > t->max_attempts ? t->max_attempts : j.n, t->max_attempts);
	free(j.why);
	return rc;
}

#endif
