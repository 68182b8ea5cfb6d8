/*
 * WebHDFS reads (Hadoop's REST interface to HDFS): webhdfs://HOST:PORT/PATH
 * (plain HTTP, as Hadoop's own webhdfs:// file system) and
 * http(s)://HOST[:PORT]/webhdfs/v1/PATH[?op=OPEN&...] open a read-only
 * handle. The size is FileStatus.length of GETFILESTATUS; each range (a
 * task, or a chunk of a staged device read) is one OPEN with offset and
 * length, which the namenode answers with a redirect (307) to a datanode
 * that serves the bytes: the redirect is followed (the request is not
 * signed). The URL's other query parameters (user.name=, delegation=, ...)
 * go with every request; op, offset and length are gpufile's.
 *
 * Invariants, as remote.c's ranges: every attempt writes from the start of
 * its range; a range succeeds only when exactly its bytes came in a 2xx
 * reply (a datanode sending more fails it before a byte past the range is
 * written); failures name the redacted URL, the range and the HTTP
 * status or curl error.
 */
#define _GNU_SOURCE
#include "core/decide.h"
#include "sources/http.h"
#include "sources/sources.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifndef GPUFILE_HAVE_CURL
#define GPUFILE_HAVE_CURL 0
#endif
#ifndef GPUFILE_HAVE_CJSON
#define GPUFILE_HAVE_CJSON 0
#endif
#if GPUFILE_HAVE_CJSON
#include <cjson/cJSON.h>
#endif

int gpufile__webhdfs_url(const char *url)
{
	const char *rest, *path;

	if (!url)
		return 0;
	if (strncasecmp(url, "webhdfs://", 10) == 0)
		return 1;
	if (strncasecmp(url, "http://", 7) == 0)
		rest = url + 7;
	else if (strncasecmp(url, "https://", 8) == 0)
		rest = url + 8;
	else
		return 0;
	path = rest + strcspn(rest, "/?#");
	if (*path != '/')
		return 0;
	/* In the path, not in the query. */
	{
		const char *hit = strstr(path, "/webhdfs/v1/");

		return hit && hit < path + strcspn(path, "?#");
	}
}

#if GPUFILE_HAVE_CURL && GPUFILE_HAVE_CJSON

struct webhdfs {
	struct gpufile__remote *rm; /* the URL's setup (remote.c) */
	struct gpufile__remote_view v;
	struct gpufile__http http;
	char *base;  /* http(s)://AUTHORITY/webhdfs/v1/PATH */
	char *extra; /* the URL's other query parameters, "&..." or "" */
	int64_t size;
};

/* Splits url into w->base and w->extra. */
static int split_url(struct webhdfs *w, const char *url)
{
	const char *q;
	size_t n;
	FILE *f;
	char *extra = NULL;
	size_t elen = 0;

	if (strncasecmp(url, "webhdfs://", 10) == 0) {
		const char *auth = url + 10;
		size_t alen = strcspn(auth, "/?#");
		const char *path = auth + alen;
		size_t plen = strcspn(path, "?#");

		if (!alen)
			return gpufile__fail(-EINVAL,
			                     "opening %s: a WebHDFS URL is "
			                     "webhdfs://HOST:PORT/PATH",
			                     w->v.shown);
		while (plen && *path == '/') {
			path++;
			plen--;
		}
		if (asprintf(&w->base, "http://%.*s/webhdfs/v1/%.*s", (int)alen,
		             auth, (int)plen, path) < 0)
			w->base = NULL;
		q = path + plen;
	} else {
		n = strcspn(url, "?#");
		w->base = strndup(url, n);
		q = url + n;
	}
	f = open_memstream(&extra, &elen);
	if (!w->base || !f) {
		if (f)
			fclose(f);
		free(extra);
		return gpufile__fail(-ENOMEM, "opening %s: out of memory",
		                     w->v.shown);
	}
	if (*q == '?') {
		q++;
		while (*q && *q != '#') {
			size_t len = strcspn(q, "&#");

			if (len && strncasecmp(q, "op=", 3) != 0 &&
			    strncasecmp(q, "offset=", 7) != 0 &&
			    strncasecmp(q, "length=", 7) != 0)
				fprintf(f, "&%.*s", (int)len, q);
			q += len;
			if (*q == '&')
				q++;
		}
	}
	if (fclose(f) || !extra) {
		free(extra);
		return gpufile__fail(-ENOMEM, "opening %s: out of memory",
		                     w->v.shown);
	}
	w->extra = extra;
	return 0;
}

/* GETFILESTATUS: the file's length (a directory is -EISDIR). */
static int learn_size(struct webhdfs *w)
{
	static const char what[] = "opening (GETFILESTATUS)";
	struct gpufile__http_reply rp = {0};
	struct gpufile__http_call k = {
	    .method = "GET", .query = "", .what = what};
	const cJSON *st, *len, *type;
	cJSON *root = NULL;
	char *url;
	int rc;

	if (asprintf(&url, "%s?op=GETFILESTATUS%s", w->base, w->extra) < 0)
		return gpufile__fail(-ENOMEM, "opening %s: out of memory",
		                     w->v.shown);
	k.url = url;
	rc = gpufile__http_send(&w->http, &k, &rp);
	free(url);
	if (rc == 0)
		root = cJSON_Parse(rp.text ? rp.text : "");
	st = cJSON_GetObjectItemCaseSensitive(root, "FileStatus");
	len = cJSON_GetObjectItemCaseSensitive(st, "length");
	type = cJSON_GetObjectItemCaseSensitive(st, "type");
	if (rc == 0 && cJSON_IsString(type) &&
	    strcmp(type->valuestring, "DIRECTORY") == 0)
		rc = gpufile__fail(-EISDIR, "%s %s: a directory, not a file",
		                   what, w->v.shown);
	else if (rc == 0 && (!cJSON_IsNumber(len) || len->valuedouble < 0 ||
	                     len->valuedouble > 9007199254740992.0))
		rc = gpufile__fail(-EPROTO,
		                   "%s %s: the reply (HTTP %ld) has no "
		                   "FileStatus.length",
		                   what, w->v.shown, rp.status);
	else if (rc == 0)
		w->size = (int64_t)len->valuedouble;
	cJSON_Delete(root);
	gpufile__http_reply_free(&rp);
	return rc;
}

static ssize_t webhdfs_read(struct gpufile *h, char *buf, size_t len,
                            int64_t off)
{
	struct webhdfs *w = h->source;
	struct gpufile__http_reply rp = {.dst = buf};
	struct gpufile__http_call k = {.method = "GET", .query = "", .data = 1};
	char what[96], *url;
	int rc;

	if (off >= w->size || len == 0)
		return 0;
	if ((int64_t)len > w->size - off)
		len = (size_t)(w->size - off);
	rp.want = len;
	snprintf(what, sizeof(what), "reading bytes %" PRId64 "-%" PRId64 " of",
	         off, off + (int64_t)len - 1);
	if (asprintf(&url, "%s?op=OPEN&offset=%" PRId64 "&length=%zu%s",
	             w->base, off, len, w->extra) < 0)
		return gpufile__fail(-ENOMEM, "%s %s: out of memory", what,
		                     w->v.shown);
	k.url = url;
	k.what = what;
	rc = gpufile__http_send(&w->http, &k, &rp);
	free(url);
	gpufile__http_reply_free(&rp);
	gpufile__stats_remote_range(rc ? 0 : len, rc != 0);
	return rc ? rc : (ssize_t)len;
}

static ssize_t webhdfs_task(struct gpufile__request *r, char *buf, size_t len,
                            int64_t off, char *msg, size_t msg_len)
{
	ssize_t n;

	if (r->cuda_ctx) /* the staging path reads through remote_read */
		n = gpufile__staged_ops.run(r, buf, len, off, msg, msg_len);
	else
		n = webhdfs_read(r->h, buf, len, off);
	if (n < 0 && n != GPUFILE__TASK_DEFERRED && !msg[0])
		snprintf(msg, msg_len, "%s", gpufile_errmsg());
	return n;
}

static int webhdfs_settle(struct gpufile__task_result *out, int idle)
{
	return gpufile__staged_ops.settle(out, idle);
}

static const struct gpufile__task_ops webhdfs_ops = {
    .run = webhdfs_task,
    .settle = webhdfs_settle,
};

static void webhdfs_free(struct webhdfs *w)
{
	if (!w)
		return;
	free(w->base);
	free(w->extra);
	gpufile__remote_free(w->rm);
	free(w);
}

static int webhdfs_close(struct gpufile *h)
{
	webhdfs_free(h->source);
	pthread_mutex_destroy(&h->lock);
	free(h->path);
	free(h);
	return 0;
}

static int64_t webhdfs_size(struct gpufile *h)
{
	return ((struct webhdfs *)h->source)->size;
}

static int webhdfs_sync(struct gpufile *h)
{
	(void)h;
	return 0; /* read-only: nothing to flush */
}

static size_t webhdfs_task_size(struct gpufile *h)
{
	(void)h;
	return 0; /* remote_task_size */
}

static const struct gpufile__source_ops webhdfs_source = {
    .task = &webhdfs_ops,
    .close = webhdfs_close,
    .size = webhdfs_size,
    .sync = webhdfs_sync,
    .task_size = webhdfs_task_size,
};

/* The handle over w. */
static int make_handle(struct gpufile **out, struct webhdfs *w)
{
	struct gpufile__decision d;
	struct gpufile *h = calloc(1, sizeof(*h));

	if (!h || !(h->path = strdup(w->v.shown))) {
		free(h);
		return gpufile__fail(-ENOMEM, "opening %s: out of memory",
		                     w->v.shown);
	}
	h->fd = h->direct_fd = h->cufile_fd = -1;
	h->readable = 1;
	h->remote = w->rm; /* every check for a remote handle holds */
	h->source = w;
	h->source_ops = &webhdfs_source;
	h->remote_read = webhdfs_read;
	atomic_init(&h->direct_refused, 1);
	atomic_init(&h->inflight, 0);
	pthread_mutex_init(&h->lock, NULL);
	gpufile__remote_bind(w->rm, h);
	h->cufile_state = GPUFILE__CUFILE_UNAVAILABLE;
	snprintf(h->cufile_reason, sizeof(h->cufile_reason),
	         "a remote object: cuFile reads local files only");
	snprintf(h->direct_reason, sizeof(h->direct_reason),
	         "a remote object: no O_DIRECT");
	gpufile__decide_source(GPUFILE__SOURCE_REMOTE, &d);
	gpufile__stats_file(h->path, d.path, d.reason);
	*out = h;
	return 0;
}

int gpufile__webhdfs_open(struct gpufile **out, const char *url,
                          const char *flags, const gpufile_remote_opts_t *opts)
{
	struct webhdfs *w;
	int rc;

	*out = NULL;
	if (!flags || strcmp(flags, "r") != 0)
		return gpufile__remote_flags_error(
		    url, flags,
		    "WebHDFS files are read-only here; open them with \"r\"");
	w = calloc(1, sizeof(*w));
	if (!w)
		return gpufile__fail(-ENOMEM, "opening a URL: out of memory");
	rc = gpufile__remote_setup(url, opts, &w->rm);
	if (rc == 0) {
		gpufile__remote_view(w->rm, &w->v);
		rc = split_url(w, url);
	}
	if (rc == 0)
		rc = gpufile__http_init(&w->http, &w->v);
	if (rc == 0) {
		w->http.follow = 1; /* OPEN's redirect to a datanode */
		rc = learn_size(w);
	}
	if (rc == 0)
		rc = make_handle(out, w);
	if (rc)
		webhdfs_free(w);
	return rc;
}

int gpufile__webhdfs_report(const char *url, char **report)
{
	struct gpufile *h = NULL;
	char *shown = gpufile__remote_redact(url), *probe = NULL;
	int rc = gpufile__webhdfs_open(&h, url, "r", NULL), made;

	*report = NULL;
	if (rc == 0)
		made = asprintf(
		    &probe, "GETFILESTATUS: a file\nsize: %" PRId64 " bytes\n",
		    webhdfs_size(h));
	else
		made =
		    asprintf(&probe, "GETFILESTATUS: %s\n", gpufile_errmsg());
	if (made < 0 || !shown ||
	    asprintf(report, "endpoint: %s\nkind: webhdfs\ncredentials: %s\n%s",
	             shown,
	             strchr(url, '?') ? "in the URL's query, if any (redacted)"
	                              : "none (no user.name or delegation "
	                                "token in the URL)",
	             probe) < 0) {
		*report = NULL;
		rc = gpufile__fail(-ENOMEM, "checking %s: out of memory",
		                   shown ? shown : GPUFILE__URL_NOT_SHOWN);
	}
	if (h)
		webhdfs_close(h);
	free(probe);
	free(shown);
	return rc;
}

#else /* no libcurl or no cJSON */

int gpufile__webhdfs_open(struct gpufile **out, const char *url,
                          const char *flags, const gpufile_remote_opts_t *opts)
{
	char *shown = gpufile__remote_redact(url);
	int rc = gpufile__fail(-ENOTSUP,
	                       "opening %s: gpufile was built without %s, "
	                       "needed for WebHDFS (install %s and rebuild)",
	                       shown ? shown : GPUFILE__URL_NOT_SHOWN,
	                       GPUFILE_HAVE_CURL ? "cJSON" : "libcurl",
	                       GPUFILE_HAVE_CURL ? "libcjson-dev"
	                                         : "libcurl4-openssl-dev");

	(void)flags;
	(void)opts;
	*out = NULL;
	free(shown);
	return rc;
}

int gpufile__webhdfs_report(const char *url, char **report)
{
	struct gpufile *h;

	*report = NULL;
	return gpufile__webhdfs_open(&h, url, "r", NULL);
}

#endif
