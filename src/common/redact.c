/*
 * The one redaction of URLs (common.h): every message, statistic, report
 * and name that shows a URL -- the library's, the tool's (through
 * gpufile_redact_url) and the Python binding's -- shows it this way. A
 * file of its own so that code that only names paths (cufile_json.c, the
 * fuzz targets built on it) need not take the remote sources with it.
 */
#define _GNU_SOURCE
#include "common/common.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int gpufile__is_url(const char *path)
{
	return path && (strncasecmp(path, "http://", 7) == 0 ||
	                strncasecmp(path, "https://", 8) == 0 ||
	                strncasecmp(path, "s3://", 5) == 0 ||
	                strncasecmp(path, "webhdfs://", 10) == 0);
}

/* 1 when text, up to the next '/', '?', '#' or its end, could be a host
 * and port: a name (an internationalized one in UTF-8 too, which libcurl
 * takes), an IPv4 or a bracketed IPv6 address. */
static int host_like(const char *text)
{
	size_t n = 0;

	while (text[n] &&
	       ((unsigned char)text[n] >= 0x80 ||
	        strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
	               "vwxyz0123456789.-_~%:[]",
	               text[n])))
		n++;

	return n > 0 && (text[n] == '\0' || text[n] == '/' || text[n] == '?' ||
	                 text[n] == '#');
}

/*
 * scheme://[user:password@]host[:port]/path[?query][#fragment] without the
 * user information, the query (a presigned URL's signature, a token) and
 * the fragment. A password may hold a raw '/', '?', '#' or '@' (not valid
 * in a URL, but typed so): RFC 3986 would end the host at its first '/',
 * '?' or '#' and show the rest of the password as a path or a query. So
 * the user information ends at the LAST '@' that is followed by something
 * shaped like a host:
 *   - inside the authority that RFC 3986 reads: the usual case;
 *   - in what RFC 3986 reads as the path (a password with a '/', or an '@'
 *     in the path): the text after that '@' is shown, "<redacted>@" first;
 *   - in what it reads as the query or fragment (a password with a '?' or
 *     '#', or an '@' in the query): nothing after the scheme can be told
 *     from a secret, and nothing is shown.
 * An s3:// URL is s3://BUCKET/KEY and a key may hold '?', '#' and '@': only
 * user information in the bucket part (up to the first '/') is dropped, the
 * key is shown whole. A bucket part that is not a bucket name after its
 * last '@' (a password with a '/' ends it early: "s3://KEY:SE/CRET@b/k")
 * shows nothing after the scheme.
 */
void gpufile__url_parts(const char *url, struct gpufile__url_parts *out)
{
	const char *sep = strstr(url, "://");
	const char *rest = sep ? sep + 3 : url;
	const size_t auth_len = strcspn(rest, "/?#");
	const char *query = rest + auth_len + strcspn(rest + auth_len, "?#");
	const char *host = rest, *at = NULL, *end, *mark = "";

	/* The lengths are printed with "%.*s", whose precision is an int: a
	 * longer URL (2 GiB) would print whole, query included. */
	if (strnlen(url, (size_t)INT_MAX + 1) > INT_MAX) {
		*out = (struct gpufile__url_parts){
		    .scheme = url,
		    .mark = "<a URL too long to show>",
		    .shown = url,
		    .tail = ""};
		return;
	}
	if (strncasecmp(url, "s3://", 5) == 0) {
		const size_t blen = strcspn(rest, "/");
		const char *a = memrchr(rest, '@', blen);

		host = a ? a + 1 : rest;
		if (strspn(host, GPUFILE__S3_BUCKET_CHARS) <
		    (size_t)(rest + blen - host)) {
			mark = "<redacted>";
			host = rest + strlen(rest);
		}
		end = host + strlen(host);
	} else {
		for (const char *p = rest + strlen(rest); p-- > rest;)
			if (*p == '@' && host_like(p + 1)) {
				at = p;
				break;
			}
		if (!at || at < rest + auth_len) {
			const char *a = memrchr(rest, '@', auth_len);

			host = a ? a + 1 : rest;
			end = query;
		} else if (at < query) {
			mark = "<redacted>@";
			host = at + 1;
			end = host + strcspn(host, "?#");
		} else {
			mark = "<redacted>";
			host = end = rest + strlen(rest);
		}
	}
	out->scheme = url;
	out->scheme_len = (int)(rest - url);
	out->mark = mark;
	out->shown = host;
	out->shown_len = (int)(end - host);
	out->tail = *end == '?' ? "?<query redacted>" : "";
}

char *gpufile__remote_redact(const char *url)
{
	struct gpufile__url_parts p;
	char *out;

	gpufile__url_parts(url, &p);
	/* Sized from url: its parts and the marks. */
	out = malloc((size_t)p.scheme_len + strlen(p.mark) +
	             (size_t)p.shown_len + strlen(p.tail) + 1);
	if (out)
		sprintf(out, GPUFILE__URL_FMT, GPUFILE__URL_ARGS(p));
	return out;
}

ssize_t gpufile_redact_url(const char *path, char *out, size_t len)
{
	char *shown;
	size_t n;

	if (!path || (!out && len))
		return gpufile__fail(-EINVAL, "gpufile_redact_url: %s is NULL",
		                     path ? "out" : "path");
	shown =
	    gpufile__is_url(path) ? gpufile__remote_redact(path) : strdup(path);
	if (!shown)
		return gpufile__fail(-ENOMEM, "gpufile_redact_url: out of "
		                              "memory");
	n = strlen(shown);
	if (len)
		snprintf(out, len, "%s", shown);
	free(shown);
	return (ssize_t)n;
}

static int not_local(const char *shown, const char *what)
{
	return gpufile__fail(-ENOTSUP,
	                     "%s: %s is a remote object, read over HTTP; it "
	                     "has no file descriptor or page cache",
	                     what, shown ? shown : GPUFILE__URL_NOT_SHOWN);
}

int gpufile__remote_no_fd(const char *shown, const char *what)
{
	return not_local(shown, what);
}

int gpufile__remote_not_local(const char *url, const char *what)
{
	char *shown = gpufile__remote_redact(url);
	int rc = not_local(shown, what);

	free(shown);
	return rc;
}
