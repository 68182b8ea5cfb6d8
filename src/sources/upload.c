/*
 * Uploads: gpufile_open(URL, "w") makes a write-only handle whose writes
 * (from host or device memory) become one object, published whole by
 * gpufile_close():
 *   - an S3 object (s3://BUCKET/KEY, signed as the reads are): smaller
 *     than upload_part_size, one PutObject at close; else a multipart
 *     upload whose parts (upload_part_size bytes, the last one shorter)
 *     go up as soon as each is whole, several at once (the requests are
 *     split at part boundaries, one task per part, so the pool's workers
 *     send parts in parallel), and CompleteMultipartUpload at close;
 *   - any other http(s) URL (a WebDAV server, a presigned PUT URL): one
 *     PUT at close of the bytes gathered in host memory (HTTP has no
 *     multipart upload, and a PUT needs its length before its first byte).
 *
 * Invariants:
 *   - each byte of the object is written once: a write overlapping bytes
 *     written before fails (-EINVAL) and leaves the handle as it was;
 *   - the object is published only by a close that finds every byte of
 *     [0, end of the last write) written and every part stored; a close
 *     that finds a hole, or any earlier failure of the handle, sends
 *     AbortMultipartUpload (S3) so that no part stays stored and nothing
 *     is visible at the URL, and returns the first error;
 *   - a failed request (after http_max_attempts tries of the retryable
 *     ones) fails the handle: later writes return that error.
 * Lock order: u->lock alone, never held over a request or a copy; nothing
 * is taken under it.
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
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#if GPUFILE_HAVE_CURL
#include <curl/curl.h>
#if GPUFILE_HAVE_SIGV4
#include <openssl/evp.h>
#endif

/* S3's limit: at most 10,000 parts. */
#define S3_MAX_PARTS 10000

struct span {
	int64_t start, end; /* [start, end) written */
};

struct part {
	char *buf;     /* its bytes while gathered (part_size), else NULL */
	size_t filled; /* bytes written into it */
	char *etag;    /* S3's ETag once stored, else NULL */
};

struct upload {
	struct gpufile__remote *rm; /* the URL's setup (remote.c) */
	struct gpufile__remote_view v;
	struct gpufile__http http; /* how its requests go (http.c) */
	size_t part_size;

	pthread_mutex_t lock; /* guards all below */
	pthread_cond_t created;
	struct span *spans; /* sorted, merged */
	size_t nspans, spans_cap;
	struct part *parts;
	size_t nparts;
	char *upload_id; /* of the multipart upload once created */
	int creating;    /* a thread is creating it (others wait) */
	int failed;      /* the handle's first error, 0 while none */
	char *failure;   /* its message */
};

/* ---- the handle's failure ---- */

/* Records err with the thread's message as the handle's failure (the
 * first one stays) and returns err. */
static int fail_upload(struct upload *u, int err)
{
	pthread_mutex_lock(&u->lock);
	if (!u->failed) {
		u->failed = err;
		u->failure = strdup(gpufile_errmsg());
	}
	pthread_mutex_unlock(&u->lock);
	return err;
}

/* The handle's failure as the thread's error, or 0. Caller holds lock. */
static int failed_locked(struct upload *u)
{
	if (!u->failed)
		return 0;
	return gpufile__fail(u->failed, "%s (upload of %s failed before)",
	                     u->failure ? u->failure : "(message lost)",
	                     u->v.shown);
}

/* ---- requests ---- */

#if GPUFILE_HAVE_SIGV4
/* The hex SHA-256 of the body into hex (65 bytes). Returns 0 or
 * -ENOMEM. */
static int body_sha256(const struct iovec *iov, int iovcnt, char hex[65])
{
	unsigned char md[32];
	unsigned mdlen = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);

	for (int i = 0; ok && i < iovcnt; i++)
		ok = EVP_DigestUpdate(ctx, iov[i].iov_base, iov[i].iov_len);
	ok = ok && EVP_DigestFinal_ex(ctx, md, &mdlen) && mdlen == 32;
	EVP_MD_CTX_free(ctx);
	if (!ok)
		return -ENOMEM;
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	return 0;
}
#endif

/* The SigV4 headers of one attempt (signed now), with the payload's real
 * SHA-256, which S3 checks against the body it got. Returns 0 or an
 * error code. */
static int sign(void *arg, const char *method, const char *query,
                const struct iovec *iov, int iovcnt, struct curl_slist **list)
{
#if GPUFILE_HAVE_SIGV4
	struct upload *u = arg;
	char sha[65];
	int rc = body_sha256(iov, iovcnt, sha);

	if (rc)
		return rc;
	/* Host left to libcurl, which sends the s3_host that was signed. */
	return gpufile__sigv4_s3_headers(&u->v, method, query, NULL, sha, 0,
	                                 list);
#else
	(void)arg;
	(void)method;
	(void)query;
	(void)iov;
	(void)iovcnt;
	(void)list;
	return -ENOTSUP;
#endif
}

/* Sends method with query ("" for none) and body to the object's URL.
 * Returns as gpufile__http_send. */
static int send_call(struct upload *u, const char *method, const char *query,
                     const struct iovec *iov, int iovcnt, const char *what,
                     struct gpufile__http_reply *rp)
{
	struct gpufile__http_call k = {.method = method,
	                               .query = query,
	                               .iov = iov,
	                               .iovcnt = iovcnt,
	                               .what = what,
	                               /* a part, or the whole object */
	                               .data = !strcmp(method, "PUT")};
	char *url = NULL;
	int rc;

	if (query[0] ? asprintf(&url, "%s?%s", u->v.url, query) < 0
	             : !(url = strdup(u->v.url)))
		return gpufile__fail(-ENOMEM, "%s %s: out of memory", what,
		                     u->v.shown);
	k.url = url;
	rc = gpufile__http_send(&u->http, &k, rp);
	free(url);
	return rc;
}

/* "uploadId=ID" (with "partNumber=N&" first when part > 0), encoded, or
 * NULL when out of memory. */
static char *id_query(const char *id, size_t part)
{
	char *enc = gpufile__sigv4_uri_encode(id, 0), *q = NULL;

	if (enc && (part ? asprintf(&q, "partNumber=%zu&uploadId=%s", part, enc)
	                 : asprintf(&q, "uploadId=%s", enc)) < 0)
		q = NULL;
	free(enc);
	return q;
}

/* ---- S3 multipart ---- */

/* The text of <tag>...</tag> in xml, XML entities decoded, allocated; NULL
 * when absent or out of memory. */
static char *xml_text(const char *xml, const char *tag)
{
	char open[64], close_[64];
	const char *a, *b;
	char *out;
	size_t o = 0;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close_, sizeof(close_), "</%s>", tag);
	a = xml ? strstr(xml, open) : NULL;
	if (!a)
		return NULL;
	a += strlen(open);
	b = strstr(a, close_);
	if (!b || !(out = malloc((size_t)(b - a) + 1)))
		return NULL;
	while (a < b) {
		static const struct {
			const char *ent;
			char c;
		} ents[] = {{"&amp;", '&'},
		            {"&lt;", '<'},
		            {"&gt;", '>'},
		            {"&quot;", '"'},
		            {"&apos;", '\''}};
		size_t i;

		for (i = 0; i < sizeof(ents) / sizeof(ents[0]); i++)
			if (!strncmp(a, ents[i].ent, strlen(ents[i].ent)))
				break;
		if (i < sizeof(ents) / sizeof(ents[0])) {
			out[o++] = ents[i].c;
			a += strlen(ents[i].ent);
		} else {
			out[o++] = *a++;
		}
	}
	out[o] = '\0';
	return out;
}

/* The upload's id, creating the multipart upload on first need (one
 * thread creates it, the others wait). Returns 0 with *id borrowed (it
 * lives until close), or an error. */
static int upload_id(struct upload *u, const char **id)
{
	static const char what[] = "starting the multipart upload of";
	struct gpufile__http_reply rp = {0};
	char *got = NULL;
	int rc;

	pthread_mutex_lock(&u->lock);
	while (u->creating)
		pthread_cond_wait(&u->created, &u->lock);
	rc = failed_locked(u);
	if (rc || u->upload_id) {
		*id = u->upload_id;
		pthread_mutex_unlock(&u->lock);
		return rc;
	}
	u->creating = 1;
	pthread_mutex_unlock(&u->lock);

	rc = send_call(u, "POST", "uploads=", NULL, 0, what, &rp);
	if (rc == 0 && !(got = xml_text(rp.text, "UploadId")))
		rc = gpufile__fail(-EPROTO,
		                   "%s %s: the reply (HTTP %ld) has no "
		                   "<UploadId>",
		                   what, u->v.shown, rp.status);
	gpufile__http_reply_free(&rp);
	if (rc)
		fail_upload(u, rc);
	pthread_mutex_lock(&u->lock);
	u->upload_id = got;
	u->creating = 0;
	pthread_cond_broadcast(&u->created);
	*id = got;
	pthread_mutex_unlock(&u->lock);
	return rc;
}

/* Stores part index (0-based) from data, len bytes. Returns 0 or an
 * error (the handle failed). */
static int put_part(struct upload *u, size_t index, const char *data,
                    size_t len)
{
	const struct iovec iov = {(void *)data, len};
	struct gpufile__http_reply rp = {0};
	char *query, what[64];
	const char *id;
	int rc = upload_id(u, &id);

	if (rc)
		return rc;
	query = id_query(id, index + 1);
	if (!query)
		return fail_upload(u, gpufile__fail(-ENOMEM,
		                                    "uploading %s: out of "
		                                    "memory",
		                                    u->v.shown));
	snprintf(what, sizeof(what), "uploading part %zu (%zu bytes) of",
	         index + 1, len);
	rc = send_call(u, "PUT", query, &iov, 1, what, &rp);
	if (rc == 0 && !rp.etag)
		rc = gpufile__fail(-EPROTO,
		                   "%s %s: the reply (HTTP %ld) has no ETag",
		                   what, u->v.shown, rp.status);
	free(query);
	if (rc) {
		gpufile__http_reply_free(&rp);
		return fail_upload(u, rc);
	}
	pthread_mutex_lock(&u->lock);
	u->parts[index].etag = rp.etag;
	rp.etag = NULL;
	free(u->parts[index].buf);
	u->parts[index].buf = NULL;
	pthread_mutex_unlock(&u->lock);
	gpufile__http_reply_free(&rp);
	return 0;
}

/* ---- writes ---- */

/* Records [start, end) as written into the sorted, merged spans, unless it
 * overlaps one. Caller holds lock. Returns 0, -EINVAL or -ENOMEM. */
static int claim_span(struct upload *u, int64_t start, int64_t end)
{
	size_t i = 0, past;

	while (i < u->nspans && u->spans[i].end < start)
		i++;
	/* spans[i] is the first that ends at or after start; spans[past]
	 * the first that ends after it (the next one where spans[i] ends at
	 * start: spans never touch), the only one [start, end) can
	 * overlap. */
	past = i < u->nspans && u->spans[i].end == start ? i + 1 : i;
	if (past < u->nspans && u->spans[past].start < end)
		return -EINVAL;
	if (i < u->nspans && u->spans[i].end == start) {
		u->spans[i].end = end;
		if (i + 1 < u->nspans && u->spans[i + 1].start == end) {
			u->spans[i].end = u->spans[i + 1].end;
			memmove(&u->spans[i + 1], &u->spans[i + 2],
			        (u->nspans - i - 2) * sizeof(*u->spans));
			u->nspans--;
		}
		return 0;
	}
	if (i < u->nspans && u->spans[i].start == end) {
		u->spans[i].start = start;
		return 0;
	}
	if (u->nspans == u->spans_cap) {
		size_t cap = u->spans_cap ? 2 * u->spans_cap : 8;
		struct span *more = realloc(u->spans, cap * sizeof(*more));

		if (!more)
			return -ENOMEM;
		u->spans = more;
		u->spans_cap = cap;
	}
	memmove(&u->spans[i + 1], &u->spans[i],
	        (u->nspans - i) * sizeof(*u->spans));
	u->spans[i] = (struct span){start, end};
	u->nspans++;
	return 0;
}

/* Makes room for part index and its buffer. Caller holds lock. */
static int part_ready(struct upload *u, size_t index, int need_buf)
{
	if (index >= u->nparts) {
		size_t n =
		    index + 1 > 2 * u->nparts ? index + 1 : 2 * u->nparts;
		struct part *more = realloc(u->parts, n * sizeof(*more));

		if (!more)
			return -ENOMEM;
		memset(more + u->nparts, 0, (n - u->nparts) * sizeof(*more));
		u->parts = more;
		u->nparts = n;
	}
	if (need_buf && !u->parts[index].buf &&
	    !(u->parts[index].buf = malloc(u->part_size)))
		return -ENOMEM;
	return 0;
}

/* [off, off+len) of the object, inside one part, from buf (device memory
 * when on_device). The bytes are copied into the part's buffer; the
 * piece that makes an S3 part whole stores it. A whole part from host
 * memory goes straight from the caller's buffer. Returns 0 or an error
 * (the message set). */
static int upload_piece(struct upload *u, int on_device, char *buf, size_t len,
                        int64_t off)
{
	const size_t index = (size_t)((uint64_t)off / u->part_size);
	const size_t at = (size_t)((uint64_t)off % u->part_size);
	const int direct =
	    u->v.s3 && at == 0 && len == u->part_size && !on_device;
	char *dst = NULL, *part_buf = NULL;
	int rc, whole = 0;

	pthread_mutex_lock(&u->lock);
	rc = failed_locked(u);
	if (rc == 0 && u->v.s3 && index >= S3_MAX_PARTS)
		rc = gpufile__fail(-EFBIG,
		                   "writing bytes %" PRId64 "-%" PRId64
		                   " of %s: past S3's 10000 parts of "
		                   "upload_part_size=%zu bytes (raise it)",
		                   off, off + (int64_t)len - 1, u->v.shown,
		                   u->part_size);
	if (rc == 0 && (rc = part_ready(u, index, !direct)))
		rc = gpufile__fail(rc, "writing %s: out of memory", u->v.shown);
	if (rc == 0 && (rc = claim_span(u, off, off + (int64_t)len)))
		rc = gpufile__fail(rc,
		                   rc == -EINVAL
		                       ? "writing bytes %" PRId64 "-%" PRId64
		                         " of %s: some were written before (an "
		                         "upload takes each byte once)"
		                       : "writing bytes %" PRId64 "-%" PRId64
		                         " of %s: out of memory",
		                   off, off + (int64_t)len - 1, u->v.shown);
	if (rc == 0 && !direct)
		dst = u->parts[index].buf + at;
	pthread_mutex_unlock(&u->lock);
	if (rc)
		return rc;
	if (direct)
		return put_part(u, index, buf, len);
	/* Device memory through the CUDA driver's copy (the handle's one
	 * path for every buffer, as reads of remote objects). */
	if (on_device) {
		rc = gpufile_memcpy(dst, buf, len);
		if (rc)
			return fail_upload(
			    u,
			    gpufile__fail(rc,
			                  "writing %s: copying %zu bytes "
			                  "from device memory: %s",
			                  u->v.shown, len, gpufile_errmsg()));
	} else {
		memcpy(dst, buf, len);
	}
	pthread_mutex_lock(&u->lock);
	u->parts[index].filled += len;
	whole = u->v.s3 && u->parts[index].filled == u->part_size;
	part_buf = u->parts[index].buf; /* parts may move: read under lock */
	pthread_mutex_unlock(&u->lock);
	return whole ? put_part(u, index, part_buf, u->part_size) : 0;
}

/* One task of a write. Requests are split at part boundaries (the
 * handle's task_size is upload_part_size), so a task is one part or a
 * piece of one; a task that spans parts is taken part by part all the
 * same. */
static ssize_t upload_task(struct gpufile__request *r, char *buf, size_t len,
                           int64_t off, char *msg, size_t msg_len)
{
	struct upload *u = r->h->source;
	size_t done = 0;

	while (done < len) {
		const int64_t at = off + (int64_t)done;
		const size_t room =
		    u->part_size - (size_t)((uint64_t)at % u->part_size);
		const size_t n = len - done < room ? len - done : room;
		int rc =
		    upload_piece(u, r->cuda_ctx != NULL, buf + done, n, at);

		if (rc) {
			snprintf(msg, msg_len, "%s", gpufile_errmsg());
			return rc;
		}
		done += n;
	}
	return (ssize_t)len;
}

static const struct gpufile__task_ops upload_ops = {.run = upload_task};

/* ---- closing: publish or abort ---- */

/* AbortMultipartUpload: no part of it stays stored. Keeps the thread's
 * message (the failure that led here); returns 0 or the abort's error. */
static int abort_upload(struct upload *u)
{
	struct gpufile__http_reply rp = {0};
	char *query;
	int rc;

	if (!u->upload_id)
		return 0;
	query = id_query(u->upload_id, 0);
	if (!query)
		return -ENOMEM;
	gpufile__error_save();
	rc = send_call(u, "DELETE", query, NULL, 0,
	               "aborting the multipart upload of", &rp);
	/* 404 NoSuchUpload: already gone. */
	if (rc == -ENOENT)
		rc = 0;
	gpufile__error_restore();
	free(query);
	gpufile__http_reply_free(&rp);
	return rc;
}

/* CompleteMultipartUpload of the parts stored. */
static int complete_upload(struct upload *u, size_t nparts)
{
	static const char what[] = "completing the multipart upload of";
	struct gpufile__http_reply rp = {0};
	char *query, *xml = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&xml, &len);
	struct iovec iov;
	int rc;

	if (!f)
		return gpufile__fail(-ENOMEM, "%s %s: out of memory", what,
		                     u->v.shown);
	fputs("<CompleteMultipartUpload>", f);
	for (size_t i = 0; i < nparts; i++) {
		fprintf(f, "<Part><PartNumber>%zu</PartNumber><ETag>", i + 1);
		for (const char *e = u->parts[i].etag; *e; e++) {
			if (*e == '&')
				fputs("&amp;", f);
			else if (*e == '<')
				fputs("&lt;", f);
			else
				fputc(*e, f);
		}
		fputs("</ETag></Part>", f);
	}
	fputs("</CompleteMultipartUpload>", f);
	query = id_query(u->upload_id, 0);
	if (fclose(f) || !xml || !query) {
		free(xml);
		free(query);
		return gpufile__fail(-ENOMEM, "%s %s: out of memory", what,
		                     u->v.shown);
	}
	iov = (struct iovec){xml, len};
	rc = send_call(u, "POST", query, &iov, 1, what, &rp);
	/* S3 may answer 200 and then an <Error> in the body. */
	if (rc == 0 && (!rp.text || strstr(rp.text, "<Error>") ||
	                !strstr(rp.text, "CompleteMultipartUploadResult"))) {
		char gist[208];

		gpufile__http_gist(&rp, gist, sizeof(gist));
		rc = gpufile__fail(-EIO, "%s %s: HTTP %ld but %s%s", what,
		                   u->v.shown, rp.status,
		                   rp.text && strstr(rp.text, "<Error>")
		                       ? "an error: "
		                       : "no CompleteMultipartUploadResult",
		                   rp.text && strstr(rp.text, "<Error>") ? gist
		                                                         : "");
	}
	free(query);
	free(xml);
	gpufile__http_reply_free(&rp);
	return rc;
}

/* One PUT of the whole object (size bytes, gathered in the parts). */
static int put_whole(struct upload *u, int64_t size)
{
	const size_t nparts =
	    (size_t)(((uint64_t)size + u->part_size - 1) / u->part_size);
	struct iovec *iov = calloc(nparts ? nparts : 1, sizeof(*iov));
	struct gpufile__http_reply rp = {0};
	int rc;

	if (!iov)
		return gpufile__fail(-ENOMEM, "uploading %s: out of memory",
		                     u->v.shown);
	for (size_t i = 0; i < nparts; i++) {
		uint64_t left = (uint64_t)size - i * u->part_size;

		iov[i].iov_base = u->parts[i].buf;
		iov[i].iov_len = left < u->part_size ? left : u->part_size;
	}
	rc = send_call(u, "PUT", "", iov, (int)nparts, "uploading", &rp);
	gpufile__http_reply_free(&rp);
	free(iov);
	return rc;
}

/* Publishes the object, or says why not. */
static int finish(struct upload *u)
{
	int64_t size = u->nspans ? u->spans[u->nspans - 1].end : 0;
	size_t last;
	int rc;

	if (u->failed)
		return gpufile__fail(u->failed,
		                     "%s; the upload was aborted: nothing was "
		                     "stored at %s",
		                     u->failure ? u->failure : "(message lost)",
		                     u->v.shown);
	if (u->nspans > 1 || (u->nspans == 1 && u->spans[0].start != 0)) {
		/* The first hole: before the first span, or after it. */
		const int64_t from = u->spans[0].start ? 0 : u->spans[0].end;
		const int64_t to =
		    u->spans[0].start ? u->spans[0].start : u->spans[1].start;

		return gpufile__fail(-EIO,
		                     "closing %s: bytes %" PRId64 "-%" PRId64
		                     " of the %" PRId64
		                     " written were never written; the upload "
		                     "was aborted: nothing was stored",
		                     u->v.shown, from, to - 1, size);
	}
	if (!u->v.s3 || !u->upload_id) {
		/* Every part is gathered: one PUT. */
		if (size > 0 && u->nparts == 0)
			return gpufile__fail(-EIO, "closing %s: lost its parts",
			                     u->v.shown);
		return put_whole(u, size);
	}
	last = (size_t)(((uint64_t)size - 1) / u->part_size);
	if (!u->parts[last].etag) {
		rc = put_part(u, last, u->parts[last].buf,
		              (size_t)(size - (int64_t)(last * u->part_size)));
		if (rc)
			return rc;
	}
	for (size_t i = 0; i <= last; i++)
		if (!u->parts[i].etag)
			return gpufile__fail(-EIO,
			                     "closing %s: part %zu was never "
			                     "stored",
			                     u->v.shown, i + 1);
	return complete_upload(u, last + 1);
}

static void upload_free(struct upload *u)
{
	if (!u)
		return;
	for (size_t i = 0; i < u->nparts; i++) {
		free(u->parts[i].buf);
		free(u->parts[i].etag);
	}
	free(u->parts);
	free(u->spans);
	free(u->upload_id);
	free(u->failure);
	pthread_mutex_destroy(&u->lock);
	pthread_cond_destroy(&u->created);
	gpufile__remote_free(u->rm);
	free(u);
}

static int upload_close(struct gpufile *h)
{
	struct upload *u = h->source;
	int rc = finish(u);

	if (rc) {
		int arc = abort_upload(u);

		if (arc) /* parts may stay stored: say so */
			gpufile__fail(rc,
			              "%s; and aborting the multipart upload "
			              "(id not shown) failed too (error %d): "
			              "its parts may stay stored until a "
			              "lifecycle rule removes them",
			              gpufile_errmsg(), arc);
	}
	upload_free(u);
	pthread_mutex_destroy(&h->lock);
	free(h->path);
	free(h);
	return rc;
}

/* The bytes written so far (the object's size once closed). */
static int64_t upload_size(struct gpufile *h)
{
	struct upload *u = h->source;
	int64_t size;

	pthread_mutex_lock(&u->lock);
	size = u->nspans ? u->spans[u->nspans - 1].end : 0;
	pthread_mutex_unlock(&u->lock);
	return size;
}

/* The parts stored so far are stored; the object appears at close. The
 * handle's failure, if any. */
static int upload_sync(struct gpufile *h)
{
	struct upload *u = h->source;
	int rc;

	pthread_mutex_lock(&u->lock);
	rc = failed_locked(u);
	pthread_mutex_unlock(&u->lock);
	return rc;
}

static size_t upload_task_size(struct gpufile *h)
{
	return ((struct upload *)h->source)->part_size;
}

static const struct gpufile__source_ops upload_source = {
    .task = &upload_ops,
    .close = upload_close,
    .size = upload_size,
    .sync = upload_sync,
    .task_size = upload_task_size,
};

static int part_size_setting(size_t *out)
{
	char value[64], var[64];
	gpufile_source_t src;
	uint64_t v;
	int rc = gpufile_config_get("upload_part_size", value, sizeof(value),
	                            &src, var, sizeof(var));

	if (rc)
		return rc;
	rc = gpufile__parse_size(value, &v);
	if (rc)
		return gpufile__fail(GPUFILE_ECONFIG,
		                     "upload_part_size=\"%s\": not a size",
		                     value);
	*out = (size_t)v;
	return 0;
}

int gpufile__upload_open(struct gpufile **out, const char *url,
                         const gpufile_remote_opts_t *opts)
{
	struct gpufile__decision d;
	struct upload *u;
	struct gpufile *h;
	int rc;

	*out = NULL;
	u = calloc(1, sizeof(*u));
	if (!u)
		return gpufile__fail(-ENOMEM, "opening a URL: out of memory");
	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->created, NULL);
	rc = gpufile__remote_setup(url, opts, &u->rm);
	if (rc) {
		upload_free(u);
		return rc;
	}
	gpufile__remote_view(u->rm, &u->v);
	rc = part_size_setting(&u->part_size);
	if (rc == 0 && !u->v.s3 && strcasestr(u->v.url, "X-Amz-Signature=") &&
	    strcasestr(u->v.url, "uploadId="))
		rc = gpufile__fail(-EINVAL,
		                   "opening %s (\"w\"): a presigned URL of one "
		                   "part of a multipart upload; give the "
		                   "object's s3:// URL",
		                   u->v.shown);
	if (rc == 0)
		rc = gpufile__http_init(&u->http, &u->v);
	u->http.path_as_is = u->v.s3;
	if (u->v.s3_signed) {
		u->http.headers = sign;
		u->http.headers_arg = u;
	}
	h = calloc(1, sizeof(*h));
	if (rc == -ENOMEM ||
	    (rc == 0 && (!h || !(h->path = strdup(u->v.shown)))))
		rc = gpufile__fail(-ENOMEM, "opening %s: out of memory",
		                   u->v.shown);
	if (rc) {
		free(h);
		upload_free(u);
		return rc;
	}
	h->fd = h->direct_fd = h->cufile_fd = -1;
	h->writable = 1;
	h->remote = u->rm; /* every check for a remote handle holds */
	h->source = u;
	h->source_ops = &upload_source;
	atomic_init(&h->direct_refused, 1);
	atomic_init(&h->inflight, 0);
	pthread_mutex_init(&h->lock, NULL);
	gpufile__remote_bind(u->rm, h);
	h->cufile_state = GPUFILE__CUFILE_UNAVAILABLE;
	snprintf(h->cufile_reason, sizeof(h->cufile_reason),
	         "an upload to a remote object: cuFile writes local files "
	         "only");
	snprintf(h->direct_reason, sizeof(h->direct_reason),
	         "an upload to a remote object: no O_DIRECT");
	gpufile__decide_source(GPUFILE__SOURCE_REMOTE, &d);
	gpufile__stats_file(h->path, d.path, d.reason);
	*out = h;
	return 0;
}

#else /* !GPUFILE_HAVE_CURL */

int gpufile__upload_open(struct gpufile **out, const char *url,
                         const gpufile_remote_opts_t *opts)
{
	char *shown = gpufile__remote_redact(url);
	int rc = gpufile__fail(-ENOTSUP,
	                       "opening %s (\"w\"): gpufile was built without "
	                       "libcurl, so it cannot upload (install "
	                       "libcurl4-openssl-dev and rebuild)",
	                       shown ? shown : GPUFILE__URL_NOT_SHOWN);

	(void)opts;
	*out = NULL;
	free(shown);
	return rc;
}

#endif
