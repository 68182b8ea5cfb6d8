/*
 * Remote objects behind a gpufile handle: HTTP(S) through libcurl, S3
 * (s3://BUCKET/KEY and AWS's own https:// S3 URLs, signed with SigV4 when
 * credentials are found: aws_config.c) and presigned S3 URLs.
 *
 * A request on a remote handle is split into tasks by the pool like any
 * other (a host task of a few ranges: gpufile__remote_task_size); each
 * range (or each bounce-buffer chunk of a staged device task) is one HTTP
 * range request driven by the handle's engine (http_multi.c), whose lanes
 * keep at most remote_connections connections open, in use and idle
 * together, between ranges.
 *
 * Invariants of a range (KvikIO's RemoteFile breaks the first: a retried
 * range goes on writing where the failed attempt stopped):
 *   - every attempt writes from the start of the range (sink.got = 0);
 *   - bytes are written only from a response that is exactly the range
 *     asked (206 with a Content-Range naming it, or 200 for the whole
 *     object): an error page, a 200 of a server that ignored Range, or
 *     bytes past the range never reach the destination;
 *   - a range succeeds only when every byte arrived; otherwise the task
 *     fails, naming the redacted URL, the range and the HTTP status or
 *     curl error;
 *   - bytes of two versions of the object are never mixed: a response
 *     whose Content-Range total (a 200's Content-Length) or strong ETag
 *     differs from the object's at open fails the range (-ESTALE) before
 *     any of its bytes land;
 *   - from a server that ignores Range, a call reads one body at most
 *     (one task, its ranges one GET): a body per range would download
 *     the object from its start again each time.
 * Lock order: rm->lock (the handle's lock, h->lock, level 2 of fork.c's
 * order) is held only to take or give a connection, and nothing is taken
 * under it.
 */
#define _GNU_SOURCE
#include "core/decide.h"
#include "sources/http.h"
#include "sources/sources.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#if GPUFILE_HAVE_CURL
#include <curl/curl.h>

struct gpufile__remote {
	char *url;     /* the URL requests go to (may hold a presigned query) */
	char *shown;   /* redacted, for messages (also h->path) */
	int presigned; /* a presigned URL: its size is learned by a GET */
	int size_by_get; /* a URL whose HEAD was refused (or gave no size) */
	int s3, s3_signed;
	char *s3_host;          /* Host header value signed */
	char *s3_canonical_uri; /* URI-encoded path signed */
	char *s3_query;         /* the query signed ("" for none) */
	char *region;
	char *access_key, *secret_key, *session_token;
	char *cred_source;       /* where the credentials came from, in words */
	char *endpoint_from;     /* what named an s3:// URL's endpoint */
	char *ca_file, *ca_path; /* NULL: libcurl's default */
	int verbose;             /* http_verbose: log each request */
	int size_known;          /* the options gave the size: no HEAD */
	int64_t size;
	/* The object's strong ETag when it was opened (NULL when it had
	 * none or a weak one): every later response must carry the same. An
	 * ETag has no length limit; one cut or dropped would turn the check
	 * off. */
	char *etag;
	long size_status; /* HTTP status of the answer that gave the size */

	unsigned max_attempts;
	long timeout_s;
	long retry_after_max_s; /* http_retry_after_max */
	int retry_codes[GPUFILE__MAX_RETRY_CODES];
	int nretry_codes;

	/* This handle's counters (gpufile_remote_file_info), counted by
	 * whichever source moves its bytes (remote.c, http.c). */
	struct gpufile__remote_counters count;

	/* Guards the transfer engine's bookkeeping: the handle's lock once
	 * there is one (fork.c holds it across fork()), own_lock before. */
	pthread_mutex_t *lock;
	pthread_mutex_t own_lock;
	unsigned max_conns;

	/* Every request (the size at open, the ranges) runs on the transfer
	 * engine (http_multi.c), at most max_in_flight at once, on its
	 * connections kept open between requests. */
	struct gpufile__http_engine *engine;
	unsigned max_in_flight;
	/* The server answers a Range with the whole object (200): found at
	 * open; every read then streams the body in order, the bytes
	 * before its offset read and dropped. */
	int ranges_ignored;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- settings ---- */

static int setting_count(const char *name, uint64_t *out)
{
	char value[64], var[64];
	gpufile_source_t src;
	int rc = gpufile_config_get(name, value, sizeof(value), &src, var,
	                            sizeof(var));

	if (rc)
		return rc;
	return gpufile__parse_count(value, out) ? GPUFILE_ECONFIG : 0;
}

/* http_status_codes: a comma-separated list of HTTP statuses to retry,
 * checked when the settings are read (config.c). */
static int load_retry_codes(struct gpufile__remote *rm)
{
	char value[512], var[64];
	gpufile_source_t src;
	int rc = gpufile_config_get("http_status_codes", value, sizeof(value),
	                            &src, var, sizeof(var));

	if (rc)
		return rc;
	rc = gpufile__parse_status_codes(value, rm->retry_codes,
	                                 GPUFILE__MAX_RETRY_CODES);
	if (rc < 0)
		return gpufile__fail(GPUFILE_ECONFIG,
		                     "%s=\"%s\": not a list of HTTP status "
		                     "codes",
		                     var[0] ? var : "http_status_codes", value);
	rm->nretry_codes = rc;
	return 0;
}

static int load_settings(struct gpufile__remote *rm)
{
	uint64_t v;
	int rc = setting_count("http_max_attempts", &v);

	if (rc)
		return rc;
	rm->max_attempts = (unsigned)v;
	rc = setting_count("http_timeout", &v);
	if (rc)
		return rc;
	rm->timeout_s = (long)v;
	rc = setting_count("http_retry_after_max", &v);
	if (rc)
		return rc;
	rm->retry_after_max_s = (long)v;
	rc = setting_count("remote_connections", &v);
	if (rc)
		return rc;
	rm->max_conns = (unsigned)v;
	rc = setting_count("http_verbose", &v);
	if (rc)
		return rc;
	rm->verbose = v != 0;
	rc = setting_count("http_max_in_flight", &v);
	if (rc)
		return rc;
	/* On HTTP/1.1 each range in flight holds a connection: at most
	 * remote_connections of them (a server may take no more). */
	rm->max_in_flight = (unsigned)(v < rm->max_conns ? v : rm->max_conns);
	return load_retry_codes(rm);
}

/* The handle's options over the settings (0: the setting's value). */
static int apply_opts(struct gpufile__remote *rm,
                      const gpufile_remote_opts_t *o)
{
	if (!o)
		return 0;
	/* The settings' own bounds (config.c): max_in_flight sizes an
	 * array. */
	if (o->max_attempts > 100 || o->timeout_s > 86400 ||
	    o->max_in_flight > 1024)
		return gpufile__fail(
		    -EINVAL,
		    "opening %s: %s %u is out of range (at most %u, as the "
		    "setting %s)",
		    rm->shown,
		    o->max_attempts > 100  ? "max_attempts"
		    : o->timeout_s > 86400 ? "timeout_s"
		                           : "max_in_flight",
		    o->max_attempts > 100  ? o->max_attempts
		    : o->timeout_s > 86400 ? o->timeout_s
		                           : o->max_in_flight,
		    o->max_attempts > 100  ? 100u
		    : o->timeout_s > 86400 ? 86400u
		                           : 1024u,
		    o->max_attempts > 100  ? "http_max_attempts"
		    : o->timeout_s > 86400 ? "http_timeout"
		                           : "remote_connections");
	if (o->max_attempts)
		rm->max_attempts = o->max_attempts;
	if (o->timeout_s)
		rm->timeout_s = (long)o->timeout_s;
	if (o->max_in_flight) /* connections, and ranges in flight */
		rm->max_conns = rm->max_in_flight = o->max_in_flight;
	if (o->flags & GPUFILE_REMOTE_KNOWN_SIZE) {
		if (o->known_size > INT64_MAX)
			return gpufile__fail(-EINVAL,
			                     "opening %s: known_size %" PRIu64
			                     " is larger than any object",
			                     rm->shown, o->known_size);
		rm->size = (int64_t)o->known_size;
		rm->size_known = 1;
	}
	return 0;
}

/* ---- connections ---- */

static CURL *conn_new(struct gpufile__remote *rm)
{
	CURL *c = curl_easy_init();

	if (!c)
		return NULL;
	curl_easy_setopt(c, CURLOPT_URL, rm->url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	/* Larger receive chunks: fewer callbacks at tens of GB/s. */
	curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 512L * 1024);
	/* A signed request must not follow a redirect (it would carry the
	 * signature elsewhere); plain URLs may. */
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, rm->s3_signed ? 0L : 1L);
	curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
	/* An S3 key is a name, not a path: "a/../b" is that key, and libcurl
	 * would otherwise remove its dot segments (another object, and a
	 * request that no longer matches its signature). */
	if (rm->s3)
		curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	/* aws_config.c's gpufile__ca_settings(): options, AWS_CA_BUNDLE,
	 * CURL_CA_BUNDLE, SSL_CERT_FILE; options, SSL_CERT_DIR. */
	gpufile__http_use_ca(c, rm->ca_file, rm->ca_path);
	return c;
}

/* ---- one HTTP exchange ---- */

/* One range served by a body read once (ranges_from_body): [off, end) of
 * the object into buf; idx its place in the caller's array. */
struct body_part {
	char *buf;
	int64_t off, end;
	size_t idx;
};

struct sink {
	CURL *c;
	char *dst;          /* NULL: discard the body */
	size_t want;        /* bytes of the range */
	int64_t off;        /* its first byte */
	int whole_ok;       /* a 200 carrying the whole object is the range */
	size_t got;         /* bytes written at dst */
	int accepted;       /* -1 unknown, 0 body discarded, 1 written */
	int overflow;       /* the server sent more than the range */
	int range_mismatch; /* 206 naming another range, or 200 for part */
	int changed;        /* the object is not the one opened */
	int size_probe;     /* the GET of bytes 0-0 that learns the size */
	int64_t seen_total; /* the object's size the response gave (changed) */
	/* No Range sent (a server that ignores it): the 200 body's bytes
	 * before off are dropped, the next want bytes are the range, and
	 * the transfer stops after them. */
	int prefix;
	int prefix_done;  /* want bytes arrived; the rest was refused */
	int64_t body_pos; /* bytes of the 200 body seen (prefix) */
	/* Where the range's bytes go instead of dst: a device read's bounce
	 * buffers (staging.c), in order; push_err their failure. */
	struct gpufile__staged_push *push;
	int push_err;
	/* Or the ranges the body's bytes [off, off + want) hold, in order of
	 * offset (ranges_from_body): each gets its part, the rest dropped. */
	const struct body_part *parts;
	size_t nparts, part_first;
	int accept_ranges;    /* Accept-Ranges: 1 bytes, 0 other, -1 none */
	curl_off_t length_dl; /* libcurl's Content-Length of the response */
	long status;          /* of the last response */
	long connects;        /* connections it opened (0: reused one) */
	int64_t cr_start, cr_end, cr_total; /* Content-Range, -1 if none */
	int64_t content_length;             /* -1 if none */
	char *etag;   /* of the last response, NULL if none (sink_done frees) */
	int etag_oom; /* its ETag could not be kept: not compared, failed */
	int64_t retry_after; /* seconds its Retry-After asks, -1 if none */
	/* What the object was when opened: its size (-1 while opening) and
	 * strong ETag ("" for none), to tell a changed object. */
	int64_t expect_total;
	const char *expect_etag;
};

/* A count of bytes in a header at *p (blanks before it skipped): 0 with
 * *v and *p moved past it, or -1 where there is none, or it has a sign,
 * or it overflows (a Content-Range total of 10^23 was taken as the
 * size). */
static int header_count(const char **p, int64_t *v)
{
	const char *q = *p + strspn(*p, " \t");
	char *end;
	long long n;

	if (*q < '0' || *q > '9')
		return -1;
	errno = 0;
	n = strtoll(q, &end, 10);
	if (errno == ERANGE)
		return -1;
	*v = n;
	*p = end;
	return 0;
}

/* Content-Range: "bytes FIRST-LAST/TOTAL", "bytes FIRST-LAST/" and a
 * star (a total not known), or, for an unsatisfiable range (416), "bytes",
 * a star and "/TOTAL"; anything else leaves the sink's fields at -1
 * (none), which the response is judged by. */
static void content_range(struct sink *s, const char *p)
{
	int64_t a, b, total = -1;

	p += strspn(p, " \t");
	if (strncasecmp(p, "bytes", 5) != 0)
		return;
	p += 5;
	p += strspn(p, " \t");
	if (p[0] == '*' && p[1] == '/') {
		p += 2;
		if (header_count(&p, &total) == 0)
			s->cr_total = total;
		return;
	}
	if (header_count(&p, &a) || *p++ != '-' || header_count(&p, &b) ||
	    b < a || *p++ != '/')
		return;
	if (*p != '*' && header_count(&p, &total))
		return;
	s->cr_start = a;
	s->cr_end = b;
	s->cr_total = total;
}

static size_t on_header(char *line, size_t size, size_t n, void *arg)
{
	struct sink *s = arg;
	const size_t len = size * n;

	if (len > 5 && strncasecmp(line, "HTTP/", 5) == 0) {
		/* A new response (after a redirect or a 100): reset. */
		s->cr_start = s->cr_end = s->cr_total = -1;
		s->content_length = -1;
		s->accepted = -1;
		s->retry_after = -1;
		s->accept_ranges = -1;
		free(s->etag);
		s->etag = NULL;
	} else if (len > 12 && strncasecmp(line, "retry-after:", 12) == 0) {
		s->retry_after = gpufile__http_retry_after(line + 12, len - 12);
	} else if (len > 15 && strncasecmp(line, "content-length:", 15) == 0) {
		const char *p = line + 15;
		int64_t v;

		if (header_count(&p, &v) == 0)
			s->content_length = v;
	} else if (len > 14 && strncasecmp(line, "content-range:", 14) == 0) {
		content_range(s, line + 14);
	} else if (len > 14 && strncasecmp(line, "accept-ranges:", 14) == 0) {
		s->accept_ranges = strcasestr(line + 14, "bytes") != NULL;
	} else if (len > 5 && strncasecmp(line, "etag:", 5) == 0) {
		const char *v = line + 5;
		size_t n;

		v += strspn(v, " \t");
		n = strcspn(v, "\r\n");
		while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
			n--;
		free(s->etag);
		s->etag = strndup(v, n);
		if (!s->etag)
			s->etag_oom = 1;
		/* No ETag holds a control byte (RFC 9110); one that does would
		 * reach a terminal through a message: shown as '?' (both
		 * tags of a comparison alike), a C1 control in UTF-8 (0xc2
		 * 0x80-0x9f: CSI is one) as "??". */
		for (unsigned char *c = (unsigned char *)s->etag; c && *c; c++)
			if (*c < 0x20 || *c == 0x7f)
				*c = '?';
			else if (*c == 0xc2 && c[1] >= 0x80 && c[1] <= 0x9f)
				c[0] = c[1] = '?';
	}
	return len;
}

/* A strong entity tag: not W/"..." (a weak one may differ between two
 * servers holding the same bytes). */
static int strong_etag(const char *etag)
{
	return etag && etag[0] == '"';
}

/* Decides once per response whether its body is the range asked. */
static void accept_body(struct sink *s)
{
	curl_easy_getinfo(s->c, CURLINFO_RESPONSE_CODE, &s->status);
	s->accepted = 0;
	if (s->etag_oom)
		return; /* judge() fails it: the version cannot be checked */
	/* The object's size now: a 206's Content-Range total, or a 200's
	 * Content-Length (the whole object: a server that ignores Range
	 * says its size only there). */
	s->seen_total = s->cr_total >= 0   ? s->cr_total
	                : s->status == 200 ? s->content_length
	                                   : -1;
	if ((s->status == 200 || s->status == 206) &&
	    ((s->expect_total >= 0 && s->seen_total >= 0 &&
	      s->seen_total != s->expect_total) ||
	     (s->expect_etag && strong_etag(s->etag) &&
	      strcmp(s->etag, s->expect_etag) != 0))) {
		/* Bytes of another version of the object: never mixed with
		 * the ones already read. */
		s->changed = 1;
		return;
	}
	if (s->status == 206) {
		if (s->cr_start == s->off &&
		    s->cr_end == s->off + (int64_t)s->want - 1)
			s->accepted = 1;
		else
			s->range_mismatch = 1;
	} else if (s->status == 200) {
		if (s->whole_ok)
			s->accepted = 1;
		else
			s->range_mismatch = 1;
	}
}

/* Copies the body's bytes [pos, pos + k) into the parts that hold them
 * (parts overlap where the caller's ranges do). */
static void deliver_parts(struct sink *s, int64_t pos, const char *data,
                          size_t k)
{
	const int64_t end = pos + (int64_t)k;

	while (s->part_first < s->nparts && s->parts[s->part_first].end <= pos)
		s->part_first++;
	for (size_t i = s->part_first; i < s->nparts && s->parts[i].off < end;
	     i++) {
		const struct body_part *p = &s->parts[i];
		const int64_t a = p->off > pos ? p->off : pos;
		const int64_t b = p->end < end ? p->end : end;

		if (a < b)
			memcpy(p->buf + (a - p->off), data + (a - pos),
			       (size_t)(b - a));
	}
}

/* Takes the range's part of a piece of a whole 200 body (prefix): the
 * bytes before off dropped, then want bytes kept; 0 once the range is
 * whole and more came (the rest of the object is not wanted). */
static size_t on_stream(struct sink *s, const char *data, size_t len)
{
	size_t skip = 0, k;

	if (s->body_pos < s->off) {
		skip = (uint64_t)(s->off - s->body_pos) < len
		           ? (size_t)(s->off - s->body_pos)
		           : len;
		s->body_pos += (int64_t)skip;
	}
	k = len - skip < s->want - s->got ? len - skip : s->want - s->got;
	if (k && s->push) {
		s->push_err = gpufile__staged_push(s->push, data + skip, k);
		if (s->push_err)
			return 0;
	} else if (k && s->parts) {
		deliver_parts(s, s->body_pos, data + skip, k);
	} else if (k) {
		memcpy(s->dst + s->got, data + skip, k);
	}
	s->got += k;
	s->body_pos += (int64_t)k;
	if (skip + k < len) {
		s->prefix_done = 1;
		return 0;
	}
	return len;
}

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
	struct sink *s = arg;
	const size_t len = size * n;

	if (s->accepted < 0)
		accept_body(s);
	if (s->range_mismatch || s->changed || s->etag_oom)
		return 0; /* stop now: do not download a whole object */
	if (s->accepted == 0 || (!s->dst && !s->push && !s->parts))
		return len; /* an error page: read and dropped */
	if (s->prefix)
		return on_stream(s, data, len);
	if (len > s->want - s->got) {
		s->overflow = 1;
		return 0;
	}
	memcpy(s->dst + s->got, data, len);
	s->got += len;
	return len;
}

/* "Host" for signing: the authority of url without user information and
 * without the scheme's default port (as libcurl sends it). */
static char *host_of(const char *url)
{
	const char *a = strstr(url, "://");
	size_t n;
	char *host;

	a = a ? a + 3 : url;
	n = strcspn(a, "/?#");
	{
		const char *at = memchr(a, '@', n);
		if (at) {
			n -= (size_t)(at + 1 - a);
			a = at + 1;
		}
	}
	host = strndup(a, n);
	if (host) {
		size_t hl = strlen(host);
		if (strncasecmp(url, "http://", 7) == 0 && hl > 3 &&
		    strcmp(host + hl - 3, ":80") == 0)
			host[hl - 3] = '\0';
		else if (strncasecmp(url, "https://", 8) == 0 && hl > 4 &&
		         strcmp(host + hl - 4, ":443") == 0)
			host[hl - 4] = '\0';
	}
	return host;
}

/* Adds the S3 headers of one request, signed now (with its Host: the
 * value signed is the value sent). */
static int sign_s3(struct gpufile__remote *rm, const char *method,
                   const char *range, struct curl_slist **list)
{
	struct gpufile__remote_view v;

	gpufile__remote_view(rm, &v);
	return gpufile__sigv4_s3_headers(&v, method,
	                                 rm->s3_query ? rm->s3_query : "",
	                                 range, GPUFILE__SHA256_EMPTY, 1, list);
}

/* Forgets what an earlier attempt saw: a retry writes from the start of its
 * range. */
static void sink_reset(struct sink *s)
{
	s->got = 0;
	s->accepted = -1;
	s->overflow = s->range_mismatch = s->changed = 0;
	s->prefix_done = 0;
	s->body_pos = 0;
	s->part_first = 0;
	s->seen_total = -1;
	s->push_err = 0;
	if (s->push) /* every attempt writes from the start */
		gpufile__staged_push_restart(s->push);
	s->accept_ranges = -1;
	s->status = 0;
	s->connects = 0;
	s->cr_start = s->cr_end = s->cr_total = -1;
	s->content_length = -1;
	s->retry_after = -1;
	free(s->etag);
	s->etag = NULL;
	s->etag_oom = 0;
}

/* Frees what the sink holds once its exchange is over. */
static void sink_done(struct sink *s)
{
	free(s->etag);
	s->etag = NULL;
}

/* The request's headers: the S3 signature when signed, and the Range of a
 * GET (none when range is NULL). Returns 0, -ENOMEM (a header could not be
 * added: the request must not go out, unsigned or without its Range, and then
 * be blamed on the server) or the signing error; *list is the caller's to free.
 */
static int request_headers(struct gpufile__remote *rm, int head,
                           const char *range, struct curl_slist **list)
{
	if (rm->s3_signed) {
		int rc = sign_s3(rm, head ? "HEAD" : "GET", head ? NULL : range,
		                 list);
		if (rc)
			return rc;
	}
	if (!head && range) {
		struct curl_slist *more;
		char line[80];

		snprintf(line, sizeof(line), "Range: %s", range);
		more = curl_slist_append(*list, line);
		if (!more)
			return -ENOMEM;
		*list = more;
	}
	return 0;
}

static void add(_Atomic uint64_t *counter, uint64_t n)
{
	atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

void gpufile__remote_count_response(struct gpufile__remote_counters *c,
                                    void *curl)
{
	long hops = 0, connects = 0;

	curl_easy_getinfo(curl, CURLINFO_REDIRECT_COUNT, &hops);
	curl_easy_getinfo(curl, CURLINFO_NUM_CONNECTS, &connects);
	add(&c->requests, 1 + (uint64_t)hops);
	add(&c->redirects, (uint64_t)hops);
	add(&c->connects, (uint64_t)connects);
}

void gpufile__remote_count_retry(struct gpufile__remote_counters *c)
{
	add(&c->retries, 1);
}

void gpufile__remote_count_range(struct gpufile__remote_counters *c,
                                 uint64_t bytes, int failed)
{
	add(failed ? &c->failures : &c->ranges, 1);
	if (!failed)
		add(&c->bytes, bytes);
}

/* http_verbose: one line on stderr per exchange (http_policy.c), the
 * request's own URL (an s3:// URL's endpoint). */
static void log_exchange(struct gpufile__remote *rm, const struct sink *s,
                         int head, CURLcode cc)
{
	char range[120] = " Range: (none: the whole body)";

	if (head)
		range[0] = '\0';
	else if (s->prefix && s->off > 0)
		snprintf(range, sizeof(range),
		         " Range: (none: the whole body; bytes 0-%" PRId64
		         " dropped)",
		         s->off - 1);
	else if (!s->prefix)
		snprintf(range, sizeof(range),
		         " Range: bytes=%" PRId64 "-%" PRId64, s->off,
		         s->off + (int64_t)s->want - 1);
	gpufile__http_log_exchange(s->c, head ? "HEAD" : "GET", rm->url, range,
	                           cc);
}

/* Sets up the request on s->c (on a new connection when fresh); list and
 * errbuf must live until perform_end. */
static void perform_begin(struct gpufile__remote *rm, struct sink *s, int head,
                          int fresh, struct curl_slist *list, char *errbuf)
{
	curl_easy_setopt(s->c, CURLOPT_HTTPHEADER, list);
	curl_easy_setopt(s->c, CURLOPT_NOBODY, head ? 1L : 0L);
	if (!head)
		curl_easy_setopt(s->c, CURLOPT_HTTPGET, 1L);
	curl_easy_setopt(s->c, CURLOPT_FRESH_CONNECT, fresh ? 1L : 0L);
	curl_easy_setopt(s->c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(s->c, CURLOPT_HEADERDATA, s);
	curl_easy_setopt(s->c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(s->c, CURLOPT_WRITEDATA, s);
	curl_easy_setopt(s->c, CURLOPT_ERRORBUFFER, errbuf);
	/* A stalled server: no byte for http_timeout seconds, or a range
	 * taking longer than that in all, ends the attempt. */
	curl_easy_setopt(s->c, CURLOPT_TIMEOUT, rm->timeout_s);
	curl_easy_setopt(s->c, CURLOPT_CONNECTTIMEOUT, rm->timeout_s);
	curl_easy_setopt(s->c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(s->c, CURLOPT_LOW_SPEED_TIME, rm->timeout_s);
}

/* Counts the response of the request sent (by curl_easy_perform, or by the
 * transfer engine); the handle keeps no pointer to the request's headers
 * or errbuf afterwards. */
static void perform_end(struct gpufile__remote *rm, struct sink *s)
{
	curl_easy_setopt(s->c, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(s->c, CURLOPT_ERRORBUFFER, NULL);
	curl_easy_getinfo(s->c, CURLINFO_RESPONSE_CODE, &s->status);
	curl_easy_getinfo(s->c, CURLINFO_NUM_CONNECTS, &s->connects);
	curl_easy_getinfo(s->c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T,
	                  &s->length_dl);
	gpufile__stats_remote_response(s->status, s->connects);
	gpufile__remote_count_response(&rm->count, s->c);
}

/* EX_FRESH: the attempt failed on a reused connection in a way that
 * connection explains (see transfer_failed): tried again at once on a new
 * one, without counting it as an attempt. */
enum { EX_OK, EX_RETRY, EX_FAIL, EX_FRESH };

/* A transfer of url libcurl could not finish: EX_RETRY for the failures a
 * new attempt can cure (a timeout, a dropped connection), else EX_FAIL. */
static int transfer_failed(const struct sink *s, CURLcode cc,
                           const char *errbuf, const char *url, int *err,
                           char **why)
{
	*err = gpufile__http_curl_failed(cc, errbuf, url, why);
	switch (cc) {
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_WEIRD_SERVER_REPLY:
		/* A server that sent bytes past a response's Content-Length
		 * leaves them on the kept-alive connection, and the next
		 * response read on it starts with them: libcurl 7.88 says
		 * "Received HTTP/0.9 when not allowed" (CURLE_UNSUPPORTED_
		 * PROTOCOL), others a weird server reply. Only a reused
		 * connection explains it; on a new one it is the answer. */
		return s->connects == 0 ? EX_FRESH : EX_FAIL;
	default:
		return gpufile__http_curl_retryable(cc) ? EX_RETRY : EX_FAIL;
	}
}

/* Judges a finished attempt: EX_* with err and why set on failure. */
static int judge(struct gpufile__remote *rm, const struct sink *s, int head,
                 CURLcode cc, const char *errbuf, int *err, char **why)
{
	if (s->etag_oom) {
		*err = -ENOMEM;
		gpufile__http_why(
		    why, "out of memory keeping the response's ETag, so its "
		         "version could not be checked (no byte written)");
		return EX_FAIL;
	}
	if (s->changed) {
		*err = -ESTALE;
		if (s->expect_total >= 0 && s->seen_total >= 0 &&
		    s->seen_total != s->expect_total)
			gpufile__http_why(
			    why,
			    "the object changed since it was opened (%" PRId64
			    " bytes then, %" PRId64 " now)",
			    s->expect_total, s->seen_total);
		else
			gpufile__http_why(
			    why,
			    "the object changed since it was opened (ETag %s "
			    "then, %s now)",
			    s->expect_etag, s->etag);
		return EX_FAIL;
	}
	if (s->push_err) {
		/* staging.c's words are the read's message. */
		*err = s->push_err;
		gpufile__http_why(why,
		                  "copying the body to device memory failed");
		return EX_FAIL;
	}
	if (s->range_mismatch) {
		*err = -EIO;
		if (s->status == 200)
			gpufile__http_why(
			    why, "the server ignored the Range request (HTTP "
			         "200 instead of 206 Partial Content)");
		else if (s->cr_start < 0)
			gpufile__http_why(why,
			                  "HTTP 206 without a Content-Range "
			                  "gpufile can read");
		else
			gpufile__http_why(
			    why,
			    "HTTP 206 with Content-Range bytes %" PRId64
			    "-%" PRId64 " for the range asked",
			    s->cr_start, s->cr_end);
		return EX_FAIL;
	}
	if (s->overflow) {
		*err = -EIO;
		gpufile__http_why(
		    why, "the server sent more bytes than the range holds "
		         "(wrong Content-Length)");
		return EX_FAIL;
	}
	/* The transfer was stopped where the prefix asked ended. */
	if (cc == CURLE_WRITE_ERROR && s->prefix_done)
		cc = CURLE_OK;
	if (cc != CURLE_OK)
		return transfer_failed(s, cc, errbuf, rm->url, err, why);
	if (s->status != 200 && s->status != 206) {
		*err = s->status == 404 || s->status == 410   ? -ENOENT
		       : s->status == 401 || s->status == 403 ? -EACCES
		                                              : -EIO;
		gpufile__http_why(why, "HTTP %ld", s->status);
		for (int i = 0; i < rm->nretry_codes; i++)
			if (rm->retry_codes[i] == s->status)
				return EX_RETRY;
		return EX_FAIL;
	}
	/* The size probe of an empty object from a server that ignores
	 * Range there: 200 with no body (learn_size_by_get). */
	if (s->size_probe && s->status == 200 && s->content_length == 0 &&
	    s->got == 0)
		return EX_OK;
	if (!head && s->got != s->want) {
		*err = -EIO;
		gpufile__http_why(
		    why,
		    "the body ended after %zu of %zu bytes (wrong "
		    "Content-Length)",
		    s->got, s->want);
		return EX_RETRY;
	}
	return EX_OK;
}

/* Sets up one attempt (on a new connection when fresh) on s->c, its
 * headers into *list (the caller frees them after the attempt). Returns
 * EX_OK, or EX_FAIL with err and why set (nothing to send). head: a HEAD
 * request (s->want 0). */
static int exchange_begin(struct gpufile__remote *rm, struct sink *s, int head,
                          int fresh, struct curl_slist **list, char *errbuf,
                          int *err, char **why)
{
	char range[64];
	int rc;

	sink_reset(s);
	errbuf[0] = '\0';
	snprintf(range, sizeof(range), "bytes=%" PRId64 "-%" PRId64, s->off,
	         s->off + (int64_t)s->want - 1);
	*list = NULL;
	rc = request_headers(rm, head, s->prefix ? NULL : range, list);
	if (rc) {
		curl_slist_free_all(*list);
		*list = NULL;
		*err = rc;
		if (rc == -ENOMEM)
			gpufile__http_why(
			    why, "out of memory building the request's "
			         "headers (no request sent)");
		else
			gpufile__http_why(why, "SigV4 signing failed: %s",
			                  gpufile_strerror(rc));
		return EX_FAIL;
	}
	perform_begin(rm, s, head, fresh, *list, errbuf);
	return EX_OK;
}

/* How long to wait before attempt + 1 (ms): http_policy.c's rule; the
 * engine waits it (http_multi.c). */
static long back_off_ms(struct gpufile__remote *rm, const struct sink *s,
                        unsigned attempt)
{
	const struct gpufile__http_wait w = {
	    .attempt = attempt,
	    .max_attempts = rm->max_attempts,
	    .retry_after = s->retry_after,
	    .retry_after_max_s = rm->retry_after_max_s,
	    .verbose = rm->verbose,
	};

	return gpufile__http_back_off_ms(&w);
}

/* Where a range's attempts stand: the attempt number, whether the next
 * goes on a new connection, and the last outcome (EX_*, err, why). */
struct attempts {
	unsigned attempt;
	int fresh, fresh_used;
	int ex, err;
	char *why;
};

/* After an attempt that ended ex: 0 when the range is over (a->ex says
 * how), else 1 with *wait_ms the back-off before the next attempt. */
static int attempt_again(struct gpufile__remote *rm, const struct sink *s,
                         struct attempts *a, int ex, long *wait_ms)
{
	a->fresh = 0;
	*wait_ms = 0;
	if (ex == EX_FRESH && !a->fresh_used) {
		/* Not counted as an attempt. */
		gpufile__stats_remote_retry();
		a->fresh = a->fresh_used = 1;
		return 1;
	}
	if (ex == EX_FRESH) /* once per range */
		ex = EX_FAIL;
	a->ex = ex;
	if (ex != EX_RETRY || a->attempt >= rm->max_attempts)
		return 0;
	gpufile__stats_remote_retry();
	gpufile__remote_count_retry(&rm->count);
	*wait_ms = back_off_ms(rm, s, a->attempt);
	a->attempt++;
	return 1;
}

/* The words of a range that failed after its attempts, e.g. "reading
 * bytes 0-99 of URL: HTTP 404, not retried (attempt 1 of 3)" (allocated;
 * NULL when out of memory). */
static char *attempts_message(const struct gpufile__remote *rm,
                              const struct attempts *a, const char *what)
{
	char *msg = NULL;

	if (asprintf(
	        &msg, "%s %s: %s%s (attempt %u of %u)", what, rm->shown,
	        a->why ? a->why : "(out of memory describing the failure)",
	        a->ex == EX_RETRY ? ", retries exhausted" : ", not retried",
	        a->attempt > rm->max_attempts ? rm->max_attempts : a->attempt,
	        rm->max_attempts) < 0)
		msg = NULL;
	return msg;
}

/* 0 when the attempts succeeded, else their error with the thread's
 * message set (attempts_message). Frees a->why. */
static int attempts_end(const struct gpufile__remote *rm, struct attempts *a,
                        const char *what)
{
	char *msg;
	int rc;

	if (a->ex == EX_OK) {
		free(a->why);
		a->why = NULL;
		return 0;
	}
	msg = attempts_message(rm, a, what);
	rc = msg ? gpufile__fail(a->err, "%s", msg)
	         : gpufile__fail(a->err,
	                         "%s %s: out of memory describing "
	                         "the failure",
	                         what, rm->shown);
	free(msg);
	free(a->why);
	a->why = NULL;
	return rc;
}

static void exchange_run(struct gpufile__remote *rm, struct sink *s, int head,
                         struct attempts *a);

/* Runs one exchange with retries (on the transfer engine, driven by this
 * thread unless another drives). Returns 0 or an error with the thread's
 * message naming what (e.g. "reading bytes 0-99 of URL"). */
static int with_retries(struct gpufile__remote *rm, struct sink *s, int head,
                        const char *what)
{
	struct attempts a;

	exchange_run(rm, s, head, &a);
	return attempts_end(rm, &a, what);
}

/* ---- ranges on the transfer engine (http_multi.c) ---- */

/* One range read through the engine: the sink it fills, its attempts,
 * and the request of the attempt in flight. */
struct range_job {
	struct gpufile__http_xfer x; /* first: the engine's view of it */
	struct gpufile__remote *rm;
	struct sink *s; /* own, or with_retries' caller's */
	struct sink own;
	int head;
	struct attempts a;
	struct curl_slist *list;
	char errbuf[CURL_ERROR_SIZE];
};

static int job_start(struct gpufile__http_xfer *x)
{
	struct range_job *j = (struct range_job *)x;

	j->s->c = x->easy;
	if (!x->easy) {
		sink_reset(j->s);
		j->a.ex = EX_FAIL;
		j->a.err = -ENOMEM;
		gpufile__http_why(&j->a.why, "no curl handle (out of memory)");
		return -ENOMEM;
	}
	j->a.ex = exchange_begin(j->rm, j->s, j->head, j->a.fresh, &j->list,
	                         j->errbuf, &j->a.err, &j->a.why);
	return j->a.ex == EX_OK ? 0 : j->a.err;
}

static long job_finish(struct gpufile__http_xfer *x, CURLcode cc)
{
	struct range_job *j = (struct range_job *)x;
	long ms;
	int ex;

	perform_end(j->rm, j->s);
	curl_slist_free_all(j->list);
	j->list = NULL;
	if (j->rm->verbose)
		log_exchange(j->rm, j->s, j->head, cc);
	if (x->multi_rc != CURLM_OK) { /* not retried */
		j->a.err = gpufile__http_multi_failed(x->multi_fn, x->multi_rc,
		                                      &j->a.why);
		ex = EX_FAIL;
	} else {
		ex = judge(j->rm, j->s, j->head, cc, j->errbuf, &j->a.err,
		           &j->a.why);
	}
	return attempt_again(j->rm, j->s, &j->a, ex, &ms) ? ms
	                                                  : GPUFILE__HTTP_DONE;
}

static const struct gpufile__http_xfer_ops job_ops = {
    .start = job_start,
    .finish = job_finish,
};

/* Sets up job j for len bytes of rm's object at off (clamped by the
 * caller) into buf. */
static void job_init(struct range_job *j, struct gpufile__remote *rm, char *buf,
                     size_t len, int64_t off)
{
	memset(j, 0, sizeof(*j));
	j->x.ops = &job_ops;
	j->rm = rm;
	j->s = &j->own;
	j->s->dst = buf;
	j->s->want = len;
	j->s->off = off;
	j->s->whole_ok = off == 0 && (int64_t)len == rm->size;
	j->s->expect_total = rm->size;
	j->s->expect_etag = rm->etag;
	j->a.attempt = 1;
	j->a.ex = EX_FAIL;
	if (rm->ranges_ignored) {
		/* The 200 body, in order: the bytes before off read and
		 * dropped, then len bytes. */
		j->s->prefix = 1;
		j->s->whole_ok = 1;
	}
}

/* Runs the attempts of one exchange on s (set up by the caller) on rm's
 * engine; their outcome in *a. */
static void exchange_run(struct gpufile__remote *rm, struct sink *s, int head,
                         struct attempts *a)
{
	struct range_job j = {.x.ops = &job_ops,
	                      .rm = rm,
	                      .s = s,
	                      .head = head,
	                      .a = {.attempt = 1, .ex = EX_FAIL}};
	struct gpufile__http_xfer *x = &j.x;

	gpufile__http_run(rm->engine, &x, 1);
	*a = j.a;
}

/* Runs jobs[0..n) on engine e (rm's, or one of the caller's own);
 * counts each range. */
static void jobs_run(struct gpufile__remote *rm, struct gpufile__http_engine *e,
                     struct range_job *jobs, struct gpufile__http_xfer **x,
                     size_t n)
{
	for (size_t i = 0; i < n; i++)
		x[i] = &jobs[i].x;
	gpufile__http_run(e, x, n);
	for (size_t i = 0; i < n; i++) {
		const int ok = jobs[i].a.ex == EX_OK;

		gpufile__stats_remote_range(ok ? jobs[i].s->want : 0, !ok);
		gpufile__remote_count_range(&rm->count, jobs[i].s->want, !ok);
		sink_done(jobs[i].s);
	}
	gpufile__stats_remote_in_flight(gpufile__http_in_flight_max(e));
}

static int part_cmp(const void *a, const void *b)
{
	const struct body_part *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* The outcome of every part of a body read by job j (ranges_from_body)
 * into its range of r. */
static void parts_end(struct gpufile__remote *rm, const struct range_job *j,
                      struct gpufile__remote_range *r)
{
	for (size_t k = 0; k < j->s->nparts; k++) {
		const struct body_part *p = &j->s->parts[k];
		struct gpufile__remote_range *out = &r[p->idx];
		char what[96];

		if (j->a.ex == EX_OK) {
			out->result = (ssize_t)(p->end - p->off);
			continue;
		}
		snprintf(what, sizeof(what),
		         "reading bytes %" PRId64 "-%" PRId64 " of", p->off,
		         p->end - 1);
		out->result = j->a.err ? j->a.err : -EIO;
		out->msg = attempts_message(rm, &j->a, what);
	}
}

/* Clears r's result and message, and returns how many of its bytes the
 * object has (0: none, nothing to ask for). */
static size_t range_begin(const struct gpufile__remote *rm,
                          struct gpufile__remote_range *r)
{
	r->result = 0;
	r->msg = NULL;
	if (r->off >= rm->size || r->len == 0)
		return 0;
	if ((int64_t)r->len > rm->size - r->off)
		return (size_t)(rm->size - r->off);
	return r->len;
}

/* A server that ignores Range: every range of r[0..n) from one 200
 * body, read once in order from the lowest offset asked to the highest
 * end, the bytes before, between and after them dropped. A request per
 * range would download the object from its start once per range (a
 * batch of n entries: about n times the object). */
static int ranges_from_body(struct gpufile__remote *rm,
                            struct gpufile__remote_range *r, size_t n)
{
	struct body_part *parts = calloc(n ? n : 1, sizeof(*parts));
	struct gpufile__http_xfer *x;
	int64_t lo = INT64_MAX, hi = 0;
	struct range_job j;
	size_t np = 0;

	if (!parts)
		return gpufile__fail(-ENOMEM,
		                     "reading %zu ranges of %s: out of memory",
		                     n, rm->shown);
	for (size_t i = 0; i < n; i++) {
		const size_t len = range_begin(rm, &r[i]);

		if (len == 0)
			continue;
		parts[np] = (struct body_part){.buf = r[i].buf,
		                               .off = r[i].off,
		                               .end = r[i].off + (int64_t)len,
		                               .idx = i};
		lo = parts[np].off < lo ? parts[np].off : lo;
		hi = parts[np].end > hi ? parts[np].end : hi;
		np++;
	}
	if (np) {
		qsort(parts, np, sizeof(*parts), part_cmp);
		job_init(&j, rm, NULL, (size_t)(hi - lo), lo);
		j.s->parts = parts;
		j.s->nparts = np;
		jobs_run(rm, rm->engine, &j, &x, 1);
		parts_end(rm, &j, r);
		free(j.a.why);
	}
	free(parts);
	return 0;
}

int gpufile__remote_read_ranges(struct gpufile *h,
                                struct gpufile__remote_range *r, size_t n)
{
	struct gpufile__remote *rm = h->remote;
	struct range_job *jobs;
	struct gpufile__http_xfer **x;
	size_t *which, nj = 0;

	if (h->source_ops) {
		/* A source with reads of its own (webhdfs.c; a batch's
		 * ranges come here): rm is only its URL's setup, which knows
		 * no size. Its reads, one by one. */
		for (size_t i = 0; i < n; i++) {
			r[i].result =
			    h->remote_read(h, r[i].buf, r[i].len, r[i].off);
			r[i].msg =
			    r[i].result < 0 ? strdup(gpufile_errmsg()) : NULL;
		}
		return 0;
	}
	if (rm->ranges_ignored)
		return ranges_from_body(rm, r, n);
	jobs = calloc(n ? n : 1, sizeof(*jobs));
	x = calloc(n ? n : 1, sizeof(*x));
	which = calloc(n ? n : 1, sizeof(*which));
	if (!jobs || !x || !which) {
		free(jobs);
		free(x);
		free(which);
		return gpufile__fail(-ENOMEM,
		                     "reading %zu ranges of %s: out of memory",
		                     n, rm->shown);
	}
	for (size_t i = 0; i < n; i++) {
		const size_t len = range_begin(rm, &r[i]);

		if (len == 0)
			continue;
		job_init(&jobs[nj], rm, r[i].buf, len, r[i].off);
		which[nj++] = i;
	}
	jobs_run(rm, rm->engine, jobs, x, nj);
	for (size_t k = 0; k < nj; k++) {
		struct range_job *j = &jobs[k];
		struct gpufile__remote_range *out = &r[which[k]];

		if (j->a.ex == EX_OK) {
			out->result = (ssize_t)j->s->want;
		} else {
			char what[96];

			snprintf(what, sizeof(what),
			         "reading bytes %" PRId64 "-%" PRId64 " of",
			         j->s->off,
			         j->s->off + (int64_t)j->s->want - 1);
			out->result = j->a.err ? j->a.err : -EIO;
			out->msg = attempts_message(rm, &j->a, what);
		}
		free(j->a.why);
	}
	free(jobs);
	free(x);
	free(which);
	return 0;
}

ssize_t gpufile__remote_read(struct gpufile *h, char *buf, size_t len,
                             int64_t off)
{
	struct gpufile__remote_range r = {.buf = buf, .len = len, .off = off};
	int rc = gpufile__remote_read_ranges(h, &r, 1);

	if (rc)
		return rc;
	if (r.result < 0) {
		rc = r.msg ? gpufile__fail((int)r.result, "%s", r.msg)
		           : gpufile__fail((int)r.result,
		                           "reading %s: out of memory "
		                           "describing the failure",
		                           h->remote->shown);
		free(r.msg);
		return rc;
	}
	return r.result;
}

/* A device read from a server that ignores Range: one 200 body, its
 * bytes before off dropped and the next len pushed through the bounce
 * buffers of the calling thread (gpufile__staged_pushed), every byte
 * delivered whatever the number of buffers. The transfer runs on an
 * engine of its own (one connection), driven by this thread alone: the
 * pushes make CUDA calls on this thread's stream and context, and on the
 * handle's engine another thread may drive the transfer and so run its
 * callbacks. */
struct stream_read {
	struct gpufile *h;
	size_t len;
	int64_t off;
};

static CURL *engine_easy(void *arg);

static ssize_t stream_fill(void *arg, struct gpufile__staged_push *p)
{
	const struct stream_read *sr = arg;
	struct gpufile__remote *rm = sr->h->remote;
	pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_t *const lockp = &lock;
	struct gpufile__http_engine *e;
	struct gpufile__http_xfer *x;
	struct range_job j;
	size_t len = sr->len;
	char what[96];
	ssize_t n;

	if (sr->off >= rm->size || len == 0)
		return 0;
	if ((int64_t)len > rm->size - sr->off)
		len = (size_t)(rm->size - sr->off);
	if (gpufile__http_engine_new(&e, 1, engine_easy, rm, &lockp))
		return gpufile__fail(-ENOMEM, "reading %s: out of memory",
		                     rm->shown);
	job_init(&j, rm, NULL, len, sr->off);
	j.s->push = p;
	jobs_run(rm, e, &j, &x, 1);
	gpufile__http_engine_free(e);
	pthread_mutex_destroy(&lock);
	snprintf(what, sizeof(what), "reading bytes %" PRId64 "-%" PRId64 " of",
	         sr->off, sr->off + (int64_t)len - 1);
	n = attempts_end(rm, &j.a, what);
	return n ? n : (ssize_t)len;
}

static ssize_t stream_to_device(struct gpufile__request *r, char *buf,
                                size_t len, int64_t off, char *msg,
                                size_t msg_len)
{
	struct stream_read sr = {.h = r->h, .len = len, .off = off};

	return gpufile__staged_pushed(r, buf, len, off, stream_fill, &sr, msg,
	                              msg_len);
}

/* ---- opening ---- */

static void remote_free(struct gpufile__remote *rm)
{
	if (!rm)
		return;
	/* In a forked child the connections are its parent's too: the
	 * engine leaves them unclosed (a TLS close would end the parent's
	 * session). */
	gpufile__http_engine_free(rm->engine);
	pthread_mutex_destroy(&rm->own_lock);
	free(rm->url);
	free(rm->shown);
	free(rm->s3_host);
	free(rm->s3_canonical_uri);
	free(rm->s3_query);
	free(rm->cred_source);
	free(rm->endpoint_from);
	free(rm->ca_file);
	free(rm->ca_path);
	free(rm->region);
	free(rm->etag);
	if (rm->secret_key)
		explicit_bzero(rm->secret_key, strlen(rm->secret_key));
	if (rm->session_token)
		explicit_bzero(rm->session_token, strlen(rm->session_token));
	free(rm->access_key);
	free(rm->secret_key);
	free(rm->session_token);
	free(rm);
}

/* rm->url, the HTTP URL of bucket (blen bytes) and the encoded key, at
 * the endpoint aws_config.c found (path style; named in messages by
 * rm->endpoint_from) or at AWS (virtual-host style); *path gets its path,
 * the canonical URI to sign (the caller frees it). Both are sized from
 * the endpoint, bucket and key. */
static int s3_url(struct gpufile__remote *rm, const char *endpoint,
                  const char *bucket, size_t blen, const char *key, char **path)
{
	int n;

	if (endpoint) {
		const int scheme = strncasecmp(endpoint, "http://", 7) == 0 ? 7
		                   : strncasecmp(endpoint, "https://", 8) == 0
		                       ? 8
		                       : 0;
		const char *host = endpoint + scheme;
		const char *ep_path = host + strcspn(host, "/?#");
		size_t eplen = strlen(endpoint);

		if (!scheme || ep_path == host || *ep_path == '?' ||
		    *ep_path == '#') {
			char *shown = gpufile__remote_redact(endpoint);
			int rc = gpufile__fail(
			    -EINVAL,
			    "opening %s: %s=\"%s\" is not an "
			    "http:// or https:// URL with a host (and "
			    "optionally a path, no query)",
			    rm->shown, rm->endpoint_from,
			    shown ? shown : GPUFILE__URL_NOT_SHOWN);

			free(shown);
			return rc;
		}
		/* Trailing slashes of the path, never of the scheme. */
		while (endpoint + eplen > ep_path && endpoint[eplen - 1] == '/')
			eplen--;
		n = asprintf(path, "%.*s/%.*s/%s",
		             (int)(eplen - (size_t)(ep_path - endpoint)),
		             ep_path, (int)blen, bucket, key);
		if (n >= 0 &&
		    asprintf(&rm->url, "%.*s%s", (int)(ep_path - endpoint),
		             endpoint, *path) < 0)
			rm->url = NULL;
	} else {
		n = asprintf(path, "/%s", key);
		if (n >= 0 &&
		    asprintf(&rm->url, "https://%.*s.s3.%s.amazonaws.com%s",
		             (int)blen, bucket, rm->region, *path) < 0)
			rm->url = NULL;
	}
	if (n < 0)
		*path = NULL;
	if (!*path || !rm->url)
		return gpufile__fail(-ENOMEM, "opening %s: out of memory",
		                     rm->shown);
	return 0;
}

/* Takes what aws_config.c resolved: the region (else fallback) and the
 * credentials: none (a public bucket, unsigned requests), or both keys
 * (and a session token) for SigV4 signing of requests to rm->url, whose
 * path is path and query query. */
static int s3_credentials(struct gpufile__remote *rm, struct gpufile__aws *a,
                          const char *fallback_region, const char *path,
                          const char *query)
{
	rm->region = a->region ? a->region : strdup(fallback_region);
	a->region = NULL;
	rm->cred_source = a->source;
	a->source = NULL;
	if (!rm->region || !rm->cred_source)
		return gpufile__fail(-ENOMEM, "opening %s: out of memory",
		                     rm->shown);
	if (!a->access_key)
		return 0;
#if !GPUFILE_HAVE_SIGV4
	(void)path;
	(void)query;
	return gpufile__fail(-ENOTSUP,
	                     "opening %s: S3 credentials are set (%s) but "
	                     "gpufile was built without OpenSSL's libcrypto, "
	                     "needed for SigV4 signing (install libssl-dev and "
	                     "rebuild)",
	                     rm->shown, rm->cred_source);
#endif
	rm->s3_signed = 1;
	rm->access_key = a->access_key;
	rm->secret_key = a->secret_key;
	rm->session_token = a->session_token;
	a->access_key = a->secret_key = a->session_token = NULL;
	rm->s3_host = host_of(rm->url);
	rm->s3_canonical_uri = strdup(path);
	rm->s3_query = strdup(query);
	if (!rm->s3_host || !rm->s3_canonical_uri || !rm->s3_query)
		return gpufile__fail(-ENOMEM, "opening %s: out of memory",
		                     rm->shown);
	return 0;
}

/* s3://BUCKET/KEY: the endpoint (path style; else virtual-hosted
 * https://BUCKET.s3.REGION.amazonaws.com), region and credentials of
 * aws_config.c. The key is a name: '?', '#' and "/../" in it are its
 * characters, sent encoded. */
static int s3_setup(struct gpufile__remote *rm, const char *url,
                    const gpufile_remote_opts_t *opts)
{
	const char *bucket = url + 5, *slash = strchr(bucket, '/');
	struct gpufile__aws a;
	char *key, *path = NULL;
	int rc;

	if (!slash || slash == bucket || !slash[1])
		return gpufile__fail(-EINVAL,
		                     "opening %s: an S3 URL is s3://BUCKET/KEY",
		                     rm->shown);
	/* The bucket becomes part of a host name (virtual-hosted) or of the
	 * path: a ':', '@', '?', '#' or '%' in it could send the signed
	 * request, session token included, to a host the URL names
	 * (s3://127.0.0.1:PORT?/KEY). S3's names, and the legacy ones with
	 * capitals and '_', have none; nothing of the bucket is shown, as
	 * it may be user information ("KEY:SECRET@..."). */
	if ((size_t)(slash - bucket) > GPUFILE__S3_BUCKET_MAX ||
	    strspn(bucket, GPUFILE__S3_BUCKET_CHARS) < (size_t)(slash - bucket))
		return gpufile__fail(
		    -EINVAL,
		    "opening %s: an S3 bucket is at most %d letters, digits, "
		    "'.', '-' and '_', with no user information before it",
		    rm->shown, GPUFILE__S3_BUCKET_MAX);
	rc = gpufile__aws_resolve(opts, rm->shown, 1, &a);
	if (rc)
		return rc;
	rm->endpoint_from = a.endpoint_from;
	a.endpoint_from = NULL;
	key = gpufile__sigv4_uri_encode(slash + 1, 1);
	rc = !key ? gpufile__fail(-ENOMEM, "opening %s: out of memory",
	                          rm->shown)
	          : 0;
	if (rc == 0 && !a.region && !(a.region = strdup("us-east-1")))
		rc = gpufile__fail(-ENOMEM, "opening %s: out of memory",
		                   rm->shown);
	if (rc == 0) {
		/* s3_url names the region in AWS's host. */
		rm->region = a.region;
		rc = s3_url(rm, a.endpoint_url, bucket,
		            (size_t)(slash - bucket), key, &path);
		rm->region = NULL;
	}
	free(key);
	if (rc == 0) {
		rm->s3 = 1;
		rc = s3_credentials(rm, &a, "us-east-1", path, "");
	}
	gpufile__aws_free(&a);
	free(path);
	return rc;
}

/* An http(s):// URL of an S3 object: AWS's own (aws_config.c tells them
 * by their host) or any with GPUFILE_REMOTE_S3. Requests are signed when
 * credentials are found, for the host's region (else the configured one,
 * else us-east-1). The URL sent is the one signed: its path normalised
 * (gpufile__s3_http_path), its query kept (signed too), its fragment dropped.
 */
static int s3_http_setup(struct gpufile__remote *rm, const char *url,
                         const gpufile_remote_opts_t *opts, char *host_region)
{
	const char *auth = strstr(url, "://") + 3;
	const char *path = auth + strcspn(auth, "/?#");
	const size_t plen = strcspn(path, "?#");
	const char *query = path[plen] == '?' ? path + plen + 1 : "";
	const size_t qlen = strcspn(query, "#");
	struct gpufile__aws a;
	char *canon = NULL, *q = NULL;
	int rc = gpufile__aws_resolve(opts, rm->shown, 0, &a);

	if (rc) {
		free(host_region);
		return rc;
	}
	/* The host's region wins over the configured one, unless the
	 * options name one: a request signed for another region fails. */
	if (host_region && !(opts && opts->aws_region && opts->aws_region[0])) {
		free(a.region);
		a.region = host_region;
		host_region = NULL;
	}
	free(host_region);
	canon = gpufile__s3_http_path(path, plen);
	q = strndup(query, qlen);
	if (!canon || !q ||
	    asprintf(&rm->url, "%.*s%s%s%s", (int)(path - url), url, canon,
	             qlen ? "?" : "", q) < 0) {
		rm->url = NULL;
		rc = gpufile__fail(-ENOMEM, "opening %s: out of memory",
		                   rm->shown);
	}
	if (rc == 0) {
		rm->s3 = 1;
		rc = s3_credentials(rm, &a, "us-east-1", canon, q);
	}
	free(canon);
	free(q);
	gpufile__aws_free(&a);
	return rc;
}

/* Asks for byte 0 the size and the version of the object. The fallback
 * of learn_size, and the way for a presigned URL (signed for GET only):
 * the Content-Range of the answer names the total. */
static int learn_size_by_get(struct gpufile__remote *rm, struct sink *s)
{
	char one;
	int rc;

	s->dst = &one;
	s->want = 1;
	s->size_probe = 1;
	rc = with_retries(rm, s, 0, "opening (GET bytes 0-0)");
	/* An empty object from a server that ignores Range on it (judge()
	 * let it through): 200, Content-Length 0, no Content-Range. */
	if (rc == 0 && s->status == 200 && s->content_length == 0 &&
	    s->got == 0)
		s->cr_total = 0;
	/* s3rver 3.7 answers bytes=0-0 with bytes 0 to the end (it reads
	 * an end of 0 as none). Only the size is asked here, and a
	 * Content-Range from 0 carries it whole in its total; no byte of
	 * this response reached a destination (on_body stopped at the
	 * mismatch), and data ranges still must be exactly the range
	 * asked. */
	if (rc && s->range_mismatch && s->status == 206 && s->cr_start == 0 &&
	    s->cr_total > 0 && s->cr_end < s->cr_total)
		rc = 0;
	/* An empty object has no byte 0: "416, bytes *\/0" (RFC 9110). */
	if (rc && s->status == 416 && s->cr_total == 0)
		rc = 0;
	/* A server that ignores Range (python3 -m http.server): 200 with
	 * the whole object, whose length is the size (no byte of it was
	 * kept). */
	if (rc && s->range_mismatch && s->status == 200 &&
	    s->content_length > 0 && s->cr_total < 0) {
		rm->ranges_ignored = 1;
		s->cr_total = s->content_length;
		rc = 0;
	}
	if (rc == 0 && s->cr_total < 0)
		rc = gpufile__fail(-EPROTO,
		                   "opening %s: the response to bytes 0-0 "
		                   "has no Content-Range total, so the "
		                   "size is unknown",
		                   rm->shown);
	rm->size = s->cr_total;
	return rc;
}

/* Whether the server honours Range, asked of one whose HEAD did not say
 * "Accept-Ranges: bytes" (RFC 9110 lets a server that honours it say
 * nothing): a GET of byte 0. A 200 with the whole object
 * (stopped at its first bytes) marks rm->ranges_ignored; reads then
 * stream the body from offset 0 (gpufile__remote_read_ranges). */
static int learn_ranges(struct gpufile__remote *rm, int said_none)
{
	struct sink p = {.expect_total = rm->size};
	char one;
	int rc;

	if (said_none) { /* "Accept-Ranges: none" */
		rm->ranges_ignored = 1;
		return 0;
	}
	p.dst = &one;
	p.want = 1;
	rc = with_retries(rm, &p, 0,
	                  "opening (GET bytes 0-0, to learn "
	                  "whether the server honours Range)");
	if (rc && p.range_mismatch && p.status == 200) {
		rm->ranges_ignored = 1;
		rc = 0;
	}
	sink_done(&p);
	return rc;
}

/* The object's size and strong ETag: HEAD, else (a URL signed for GET
 * only, a server without HEAD or whose HEAD gives no length) a GET of
 * byte 0. */
static int learn_size(struct gpufile__remote *rm)
{
	struct sink s = {.expect_total = -1};
	curl_off_t cl = -1;
	int rc;

	if (rm->size_known) /* the options gave it */
		return 0;
	if (!rm->presigned) {
		rc = with_retries(rm, &s, 1, "opening (HEAD)");
		if (rc == 0)
			cl = s.length_dl;
		rm->size = cl;
		/* A refused HEAD on a signed request means the credentials,
		 * not the method: that error stands. */
		if ((rc == 0 && cl < 0) ||
		    (rc && !rm->s3_signed &&
		     (s.status == 403 || s.status == 405 || s.status == 501))) {
			rc = learn_size_by_get(rm, &s);
			rm->size_by_get = rc == 0;
		} else if (rc == 0 && cl > 0 && s.accept_ranges != 1) {
			rc = learn_ranges(rm, s.accept_ranges == 0);
		}
	} else {
		rc = learn_size_by_get(rm, &s);
	}
	rm->size_status = s.status;
	if (rc == 0 && strong_etag(s.etag)) {
		rm->etag = s.etag; /* sized from the header: never cut */
		s.etag = NULL;
	}
	sink_done(&s);
	return rc;
}

/* Where the requests of url go and how they are signed: s3:// URLs and
 * S3 https:// URLs through aws_config.c, a presigned URL or any other
 * URL as it is, unsigned. */
static int source_setup(struct gpufile__remote *rm, const char *url,
                        const gpufile_remote_opts_t *opts)
{
	char *region = NULL;
	int s3 = 0;

	if (opts && (opts->flags &
	             ~(uint32_t)(GPUFILE_REMOTE_KNOWN_SIZE |
	                         GPUFILE_REMOTE_UNSIGNED | GPUFILE_REMOTE_S3)))
		return gpufile__fail(-EINVAL,
		                     "opening %s: unknown flags 0x%x in "
		                     "gpufile_remote_opts_t.flags",
		                     rm->shown, (unsigned)opts->flags);
	if (strncasecmp(url, "s3://", 5) == 0)
		return s3_setup(rm, url, opts);
	rm->presigned = gpufile__aws_presigned(url);
	if (!rm->presigned) {
		s3 = gpufile__aws_s3_host(url, &region);
		if (s3 < 0)
			return gpufile__fail(
			    -ENOMEM, "opening %s: out of memory", rm->shown);
		if (!s3 && opts && (opts->flags & GPUFILE_REMOTE_S3))
			s3 = 1;
	}
	if (s3)
		return s3_http_setup(rm, url, opts, region);
	rm->url = strdup(url);
	if (!rm->url)
		return gpufile__fail(-ENOMEM, "opening %s: out of memory",
		                     rm->shown);
	return 0;
}

/* The engine's easy handles: set up as the connections of the size. */
static CURL *engine_easy(void *arg)
{
	return conn_new(arg);
}

static int remote_new(struct gpufile__remote **out, const char *url,
                      const gpufile_remote_opts_t *opts)
{
	struct gpufile__url_parts shown;
	struct gpufile__remote *rm;
	int rc;

	*out = NULL;
	/* The messages of a failed allocation name the URL too. */
	gpufile__url_parts(url, &shown);
	rm = calloc(1, sizeof(*rm));
	if (!rm)
		return gpufile__fail(
		    -ENOMEM, "opening " GPUFILE__URL_FMT ": out of memory",
		    GPUFILE__URL_ARGS(shown));
	pthread_mutex_init(&rm->own_lock, NULL);
	rm->lock = &rm->own_lock;
	/* Every message from here names the URL this way. */
	rm->shown = gpufile__remote_redact(url);
	if (!rm->shown) {
		rc = gpufile__fail(
		    -ENOMEM, "opening " GPUFILE__URL_FMT ": out of memory",
		    GPUFILE__URL_ARGS(shown));
		goto fail;
	}
	rc = load_settings(rm);
	if (rc == 0)
		rc = apply_opts(rm, opts);
	if (rc == 0)
		rc = gpufile__ca_settings(opts, rm->shown, &rm->ca_file,
		                          &rm->ca_path);
	if (rc)
		goto fail;
	rc = source_setup(rm, url, opts);
	if (rc)
		goto fail;
	pthread_once(&curl_once, curl_init);
	if (curl_init_rc != CURLE_OK) {
		rc = gpufile__fail(-EIO, "opening %s: curl_global_init: %s",
		                   rm->shown, curl_easy_strerror(curl_init_rc));
		goto fail;
	}
	if (gpufile__http_engine_new(&rm->engine, rm->max_in_flight,
	                             engine_easy, rm, &rm->lock) != 0) {
		rc = gpufile__fail(-ENOMEM, "opening %s: out of memory",
		                   rm->shown);
		goto fail;
	}
	*out = rm;
	return 0;
fail:
	remote_free(rm);
	return rc;
}

int gpufile__remote_open(struct gpufile **out, const char *url,
                         const char *flags)
{
	return gpufile__remote_open_with(out, url, flags, NULL);
}

int gpufile__remote_flags_error(const char *url, const char *flags,
                                const char *why)
{
	char *shown = gpufile__remote_redact(url);
	int rc = gpufile__fail(
	    flags && (!strcmp(flags, "r+") || !strcmp(flags, "w") ||
	              !strcmp(flags, "w+") || !strcmp(flags, "a"))
	        ? -EROFS
	        : GPUFILE_EFLAGS,
	    "opening %s (\"%s\"): %s", shown ? shown : GPUFILE__URL_NOT_SHOWN,
	    flags ? flags : "(null)", why);

	free(shown);
	return rc;
}

int gpufile__remote_open_with(struct gpufile **out, const char *url,
                              const char *flags,
                              const gpufile_remote_opts_t *opts)
{
	struct gpufile__decision d;
	struct gpufile__remote *rm;
	struct gpufile *h;
	int rc;

	*out = NULL;
	if (!flags || strcmp(flags, "r") != 0)
		return gpufile__remote_flags_error(
		    url, flags,
		    "remote objects are read-only (\"r\") or uploaded whole "
		    "(\"w\")");
	rc = remote_new(&rm, url, opts);
	if (rc)
		return rc;
	rc = learn_size(rm);
	if (rc) {
		remote_free(rm);
		return rc;
	}
	h = calloc(1, sizeof(*h));
	if (!h || !(h->path = strdup(rm->shown))) {
		rc = gpufile__fail(-ENOMEM, "opening %s: out of memory",
		                   rm->shown);
		free(h);
		remote_free(rm);
		return rc;
	}
	h->fd = h->direct_fd = h->cufile_fd = -1;
	h->readable = 1;
	h->remote = rm;
	atomic_init(&h->direct_refused, 1);
	atomic_init(&h->inflight, 0);
	pthread_mutex_init(&h->lock, NULL);
	/* From now on the connection set is guarded by the handle's lock,
	 * which fork.c's handlers hold across fork(). */
	rm->lock = &h->lock;
	h->remote_read = gpufile__remote_read;
	h->cufile_state = GPUFILE__CUFILE_UNAVAILABLE;
	snprintf(h->cufile_reason, sizeof(h->cufile_reason),
	         "a remote object: cuFile reads local files only");
	snprintf(h->direct_reason, sizeof(h->direct_reason),
	         "a remote object: no O_DIRECT");
	gpufile__decide_source(gpufile__remote_source(h), &d);
	gpufile__stats_file(h->path, d.path, d.reason);
	*out = h;
	return 0;
}

int gpufile__remote_close(struct gpufile *h)
{
	remote_free(h->remote);
	pthread_mutex_destroy(&h->lock);
	free(h->path);
	free(h);
	return 0;
}

int64_t gpufile__remote_size(struct gpufile *h)
{
	return h->remote->size;
}

int gpufile__remote_source(const struct gpufile *h)
{
	return h->remote->ranges_ignored ? GPUFILE__SOURCE_REMOTE_STREAM
	                                 : GPUFILE__SOURCE_REMOTE;
}

size_t gpufile__remote_task_size(const struct gpufile *h, size_t range_size,
                                 unsigned nthreads, int64_t offset, size_t size)
{
	const unsigned t = nthreads ? nthreads : 1;
	unsigned k;

	/* One body, in order, over one connection: one task, which the
	 * pool's cut at multiples of the task size in the file makes of
	 * [offset, offset + size) only when the task size reaches its end
	 * (a task size of size alone cut a read at an offset in two, each
	 * downloading the body from its start). */
	if (h->remote->ranges_ignored)
		return (size_t)offset + size ? (size_t)offset + size : 1;
	/* k whole ranges per task, k = max_in_flight / nthreads rounded up:
	 * the threads together can keep max_in_flight ranges in flight, and
	 * each drives about its share of them. A task per thread instead
	 * (size / nthreads) bound each thread to its slice of the read: the
	 * first thread to start took every slot and received its ranges
	 * alone on one CPU while the others waited, and the read ended with
	 * its slowest slice. On the 16-CPU H200 machine, 4 GiB from nginx
	 * into host memory ran at 14.8 GB/s that way against 26.9 GB/s into
	 * device memory, whose tasks are one range each, taken by whichever
	 * thread is free (bench/README.md, "Remote objects: the transfer
	 * engine"). */
	k = (h->remote->max_in_flight + t - 1) / t;
	if (k == 0)
		k = 1;
	if (range_size > SIZE_MAX / k)
		return range_size;
	return (size_t)k * range_size;
}

/* 1 when url's authority holds user information (user:password@). */
static int has_userinfo(const char *url)
{
	const char *a = strstr(url, "://");

	a = a ? a + 3 : url;
	return memchr(a, '@', strcspn(a, "/?#")) != NULL;
}

static uint64_t get(_Atomic uint64_t *counter)
{
	return atomic_load_explicit(counter, memory_order_relaxed);
}

int gpufile_remote_file_info(gpufile_t *h, gpufile_remote_file_info_t *out)
{
	gpufile_remote_file_info_t info = {0};
	struct gpufile__remote *rm;
	int rc;

	if (!h || !out)
		return gpufile__fail(-EINVAL,
		                     "gpufile_remote_file_info: %s is "
		                     "NULL",
		                     h ? "out" : "h");
	rc = GPUFILE__SIZED_CHECK(out, gpufile_remote_file_info_t);
	if (rc)
		return rc;
	if (!h->remote)
		return gpufile__fail(-ENOTSUP,
		                     "gpufile_remote_file_info: %s is not a "
		                     "remote object",
		                     h->path);
	rm = h->remote;
	info.signed_requests = rm->s3_signed;
	info.url = rm->shown;
	info.kind = rm->s3 ? "s3" : rm->presigned ? "presigned URL" : "http";
	info.etag = rm->etag;
	info.region = rm->s3 ? rm->region : NULL;
	info.credentials = rm->s3          ? rm->cred_source
	                   : rm->presigned ? "in the URL's query (redacted)"
	                   : has_userinfo(rm->url)
	                       ? "user information in the URL (redacted)"
	                       : "none";
	/* WebHDFS and uploads know it themselves. */
	info.object_size = h->source_ops ? h->source_ops->size(h) : rm->size;
	info.requests = get(&rm->count.requests);
	info.retries = get(&rm->count.retries);
	info.ranges = get(&rm->count.ranges);
	info.bytes = get(&rm->count.bytes);
	info.failures = get(&rm->count.failures);
	info.redirects = get(&rm->count.redirects);
	info.connects = get(&rm->count.connects);
	gpufile__sized_put(out, &info, sizeof(info));
	return 0;
}

int gpufile__remote_report(const char *url, char **report)
{
	struct gpufile__remote *rm;
	char *endpoint, *probe = NULL;
	const char *how;
	int rc, made;

	*report = NULL;
	if (gpufile__webhdfs_url(url)) /* webhdfs.c */
		return gpufile__webhdfs_report(url, report);
	rc = remote_new(&rm, url, NULL);
	if (rc)
		return rc;
	endpoint = gpufile__remote_redact(rm->url);
	rc = learn_size(rm);
	how = rm->presigned || rm->size_by_get ? "GET bytes 0-0" : "HEAD";
	if (rc == 0)
		made = asprintf(
		    &probe, "%s: HTTP %ld\nsize: %" PRId64 " bytes\n%s", how,
		    rm->size_status, rm->size,
		    rm->ranges_ignored
		        ? "ranges: ignored by the server (a Range answered "
		          "with HTTP 200): each read streams the body from its "
		          "start, the bytes before its offset read and "
		          "dropped\n"
		        : "");
	else
		made = asprintf(&probe, "%s: %s\n", how, gpufile_errmsg());
	if (made >= 0 && endpoint &&
	    asprintf(report,
	             "endpoint: %s\nkind: %s\ncredentials: %s\n%s%s%s%s",
	             endpoint,
	             rm->s3          ? "s3"
	             : rm->presigned ? "presigned URL"
	                             : "http",
	             !rm->s3 ? (rm->presigned ? "in the URL's query (redacted)"
	                        : has_userinfo(rm->url)
	                            ? "user information in the URL (redacted)"
	                            : "none needed")
	                     : rm->cred_source, /* words, never the values */
	             rm->s3 ? "region: " : "", rm->s3 ? rm->region : "",
	             rm->s3 ? "\n" : "", probe) < 0)
		*report = NULL;
	if (!*report)
		rc = gpufile__fail(-ENOMEM, "checking %s: out of memory",
		                   rm->shown);
	free(probe);
	free(endpoint);
	remote_free(rm);
	return rc;
}

int gpufile__remote_setup(const char *url, const gpufile_remote_opts_t *opts,
                          struct gpufile__remote **out)
{
	return remote_new(out, url, opts);
}

void gpufile__remote_free(struct gpufile__remote *rm)
{
	remote_free(rm);
}

void gpufile__remote_view(struct gpufile__remote *rm,
                          struct gpufile__remote_view *v)
{
	*v = (struct gpufile__remote_view){
	    .url = rm->url,
	    .shown = rm->shown,
	    .s3 = rm->s3,
	    .s3_signed = rm->s3_signed,
	    .s3_host = rm->s3_host,
	    .s3_canonical_uri = rm->s3_canonical_uri,
	    .region = rm->region,
	    .access_key = rm->access_key,
	    .secret_key = rm->secret_key,
	    .session_token = rm->session_token,
	    .max_attempts = rm->max_attempts,
	    .max_conns = rm->max_conns,
	    .retry_after_max_s = rm->retry_after_max_s,
	    .verbose = rm->verbose,
	    .ca_file = rm->ca_file,
	    .ca_path = rm->ca_path,
	    .timeout_s = rm->timeout_s,
	    .retry_codes = rm->retry_codes,
	    .nretry_codes = rm->nretry_codes,
	    .count = &rm->count,
	    .engine = rm->engine,
	};
}

void gpufile__remote_bind(struct gpufile__remote *rm, struct gpufile *h)
{
	rm->lock = &h->lock;
}

#else /* !GPUFILE_HAVE_CURL */

static int no_curl(const char *url)
{
	char *shown = gpufile__remote_redact(url);
	int rc = gpufile__fail(-ENOTSUP,
	                       "opening %s: gpufile was built without "
	                       "libcurl, so it cannot read remote objects "
	                       "(install libcurl4-openssl-dev and rebuild)",
	                       shown ? shown : GPUFILE__URL_NOT_SHOWN);

	free(shown);
	return rc;
}

/* Never called: without libcurl there is no remote handle. */
static ssize_t stream_to_device(struct gpufile__request *r, char *buf,
                                size_t len, int64_t off, char *msg,
                                size_t msg_len)
{
	(void)r, (void)buf, (void)len, (void)off, (void)msg, (void)msg_len;
	return -ENOTSUP;
}

int gpufile__remote_open(struct gpufile **out, const char *url,
                         const char *flags)
{
	(void)flags;
	*out = NULL;
	return no_curl(url);
}

int gpufile__remote_open_with(struct gpufile **out, const char *url,
                              const char *flags,
                              const gpufile_remote_opts_t *opts)
{
	(void)flags;
	(void)opts;
	*out = NULL;
	return no_curl(url);
}

int gpufile_remote_file_info(gpufile_t *h, gpufile_remote_file_info_t *out)
{
	(void)h;
	(void)out;
	return gpufile__fail(-ENOTSUP, "gpufile_remote_file_info: gpufile "
	                               "was built without libcurl");
}

int gpufile__remote_close(struct gpufile *h)
{
	(void)h;
	return 0;
}

int64_t gpufile__remote_size(struct gpufile *h)
{
	(void)h;
	return -ENOTSUP;
}

int gpufile__remote_source(const struct gpufile *h)
{
	(void)h;
	return GPUFILE__SOURCE_REMOTE;
}

size_t gpufile__remote_task_size(const struct gpufile *h, size_t range_size,
                                 unsigned nthreads, int64_t offset, size_t size)
{
	(void)h;
	(void)nthreads;
	(void)offset;
	(void)size;
	return range_size;
}

int gpufile__remote_read_ranges(struct gpufile *h,
                                struct gpufile__remote_range *r, size_t n)
{
	(void)h;
	for (size_t i = 0; i < n; i++) {
		r[i].result = -ENOTSUP;
		r[i].msg = NULL;
	}
	return 0;
}

ssize_t gpufile__remote_read(struct gpufile *h, char *buf, size_t len,
                             int64_t off)
{
	(void)h;
	(void)buf;
	(void)len;
	(void)off;
	return -ENOTSUP;
}

int gpufile__remote_report(const char *url, char **report)
{
	*report = NULL;
	return no_curl(url);
}

#endif

/* A host task: its ranges of range_size bytes (cut at multiples of it
 * in the object, as the pool cuts tasks) all issued at once on the
 * engine. Returns the bytes read (fewer only at the end of the object)
 * or the error of the lowest range that failed, its words in msg. */
static ssize_t host_ranges(struct gpufile *h, char *buf, size_t len,
                           int64_t off, size_t range_size, char *msg,
                           size_t msg_len)
{
	const int64_t end = off + (int64_t)len;
	struct gpufile__remote_range *rr;
	size_t n = 0, k;
	ssize_t got = 0;
	int rc;

	if (range_size == 0 || gpufile__remote_size(h) <= off)
		return 0;
	/* The whole task, the whole request (gpufile__remote_task_size), as
	 * one range: its one body. */
	if (gpufile__remote_source(h) == GPUFILE__SOURCE_REMOTE_STREAM)
		range_size = (size_t)end;
	for (int64_t a = off; a < end; n++)
		a = a - a % (int64_t)range_size + (int64_t)range_size;
	rr = calloc(n, sizeof(*rr));
	if (!rr)
		return gpufile__fail(-ENOMEM, "reading %s: out of memory",
		                     h->path);
	k = 0;
	for (int64_t a = off; a < end; k++) {
		int64_t b = a - a % (int64_t)range_size + (int64_t)range_size;

		if (b > end)
			b = end;
		rr[k] = (struct gpufile__remote_range){
		    .buf = buf + (a - off), .len = (size_t)(b - a), .off = a};
		a = b;
	}
	/* A fresh destination's page faults, taken in one batch by each
	 * task's thread (MADV_POPULATE_WRITE) rather than one by one inside
	 * the driver's copies: on the 2-core VM, 1 GiB into a fresh buffer
	 * took 15-26 s without this and 10-12 s with it (into a reused one
	 * 2-4 s; populating 1 GiB alone 0.9 s, faulting it by memset 13-16
	 * s: bench/README.md). The contents stay; a failure here (an
	 * unfaultable mapping) is left to the copies, as before. */
	if (len >= (256u << 10))
		(void)gpufile__user_range_ok(buf, len, 1);
	rc = gpufile__remote_read_ranges(h, rr, n);
	for (k = 0; rc == 0 && k < n; k++) {
		if (rr[k].result < 0) {
			got = rr[k].result;
			snprintf(msg, msg_len, "%s",
			         rr[k].msg ? rr[k].msg
			                   : "out of memory describing the "
			                     "failure");
			break;
		}
		got += rr[k].result;
		if ((size_t)rr[k].result < rr[k].len)
			break; /* the end of the object */
	}
	for (k = 0; k < n; k++)
		free(rr[k].msg);
	free(rr);
	return rc ? rc : got;
}

static ssize_t remote_task(struct gpufile__request *r, char *buf, size_t len,
                           int64_t off, char *msg, size_t msg_len)
{
	ssize_t n;

	if (r->cuda_ctx && gpufile__remote_source(r->h) ==
	                       GPUFILE__SOURCE_REMOTE_STREAM) /* one body */
		n = stream_to_device(r, buf, len, off, msg, msg_len);
	else if (r->cuda_ctx) /* the staging path, its cross-task overlap kept
	                       */
		n = gpufile__staged_ops.run(r, buf, len, off, msg, msg_len);
	else
		n = host_ranges(r->h, buf, len, off, r->cfg.remote_task_size,
		                msg, msg_len);
	/* The range's own words (URL, bytes, HTTP status or curl error) are
	 * the task's message. */
	if (n < 0 && n != GPUFILE__TASK_DEFERRED && !msg[0])
		snprintf(msg, msg_len, "%s", gpufile_errmsg());
	return n;
}

int gpufile_remote_info(const char *url, char *out, size_t len)
{
	char *report = NULL;
	int rc;

	if (!url || !out || !len)
		return gpufile__fail(-EINVAL, "gpufile_remote_info: NULL "
		                              "argument");
	out[0] = '\0';
	if (!gpufile__is_url(url))
		return gpufile__fail(
		    -EINVAL, "%s: not an http://, https:// or s3:// URL", url);
	rc = gpufile__remote_report(url, &report);
	if (report)
		snprintf(out, len, "%s", report);
	free(report);
	return rc;
}

static int remote_settle(struct gpufile__task_result *out, int idle)
{
	return gpufile__staged_ops.settle(out, idle);
}

const struct gpufile__task_ops gpufile__remote_ops = {
    .run = remote_task,
    .settle = remote_settle,
};
