/*
 * The back-off, CA and logging rules of every HTTP request of the
 * sources; see http_policy.h.
 */
#define _GNU_SOURCE
#include "sources/http_policy.h"

#include "common/common.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if GPUFILE_HAVE_CURL

int64_t gpufile__http_retry_after(const char *value, size_t len)
{
	char text[128], *end;
	long long v;
	time_t when;

	while (len && (*value == ' ' || *value == '\t')) {
		value++;
		len--;
	}
	while (len && strchr(" \t\r\n", value[len - 1]))
		len--;
	if (!len || len >= sizeof(text)) /* no date is that long */
		return -1;
	memcpy(text, value, len);
	text[len] = '\0';
	v = strtoll(text, &end, 10);
	if (end != text && !*end)
		return v < 0 ? -1 : v;
	when = curl_getdate(text, NULL);
	if (when == (time_t)-1)
		return -1;
	return when > time(NULL) ? (int64_t)(when - time(NULL)) : 0;
}

/* A number in [0, n) from a per-thread xorshift generator: jitter only,
 * no secret depends on it. */
static uint64_t jitter(uint64_t n)
{
	static _Thread_local uint64_t x;

	if (!x) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		x = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
		    (uint64_t)gettid() ^ 0x9e3779b97f4a7c15ull;
	}
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return n ? x % n : 0;
}

/* A Retry-After of the failed response (a 429 or 503 saying when to come
 * back) is honoured, cut to http_retry_after_max so a server cannot hold
 * a request for hours; else an exponential back-off, 50 ms doubling to
 * 2 s, of which a random half is waited (jitter: clients that failed
 * together do not come back together). */
long gpufile__http_back_off_ms(const struct gpufile__http_wait *w)
{
	const unsigned k = w->attempt > 1 ? w->attempt - 1 : 0;
	const long base = 50L << (k < 5 ? k : 5);
	long ms = base / 2 + (long)jitter((uint64_t)base / 2 + 1);
	int cut = 0;

	if (w->retry_after > 0) {
		cut = w->retry_after > w->retry_after_max_s;
		ms =
		    (cut ? w->retry_after_max_s : (long)w->retry_after) * 1000L;
	}
	if (!w->verbose)
		return ms;
	if (w->retry_after > 0)
		fprintf(stderr,
		        "gpufile: http: waiting %ld ms before attempt %u of %u "
		        "(Retry-After: %" PRId64 " s%s)\n",
		        ms, w->attempt + 1, w->max_attempts, w->retry_after,
		        cut ? ", cut to http_retry_after_max" : "");
	else
		fprintf(stderr,
		        "gpufile: http: waiting %ld ms before attempt %u of %u "
		        "(back-off with jitter)\n",
		        ms, w->attempt + 1, w->max_attempts);
	return ms;
}

void gpufile__http_why(char **why, const char *fmt, ...)
{
	va_list ap;

	free(*why);
	va_start(ap, fmt);
	if (vasprintf(why, fmt, ap) < 0)
		*why = NULL;
	va_end(ap);
}

int gpufile__http_curl_failed(CURLcode cc, const char *errbuf, const char *url,
                              char **why)
{
	struct gpufile__url_parts p;
	const char *detail;

	/* libcurl's detail may quote the URL, or a piece of a password it
	 * took for the host: its code's words only then. */
	gpufile__url_parts(url, &p);
	detail =
	    errbuf[0] && !strstr(errbuf, "://") && !p.mark[0] ? errbuf : "";

	gpufile__http_why(why, "curl error %d (%s%s%s)", (int)cc,
	                  curl_easy_strerror(cc), detail[0] ? ": " : "",
	                  detail);
	return cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EIO;
}

int gpufile__http_multi_failed(const char *fn, CURLMcode mc, char **why)
{
	gpufile__http_why(why, "libcurl's multi interface failed (%s: %s)",
	                  fn ? fn : "curl_multi", curl_multi_strerror(mc));
	return mc == CURLM_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

int gpufile__http_curl_retryable(CURLcode cc)
{
	switch (cc) {
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_PARTIAL_FILE:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_COULDNT_CONNECT:
	case CURLE_GOT_NOTHING:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return 1;
	default:
		return 0;
	}
}

void gpufile__http_use_ca(CURL *c, const char *ca_file, const char *ca_path)
{
	if (ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, ca_file);
	if (ca_path)
		curl_easy_setopt(c, CURLOPT_CAPATH, ca_path);
}

void gpufile__http_log_exchange(CURL *c, const char *method, const char *url,
                                const char *detail, CURLcode cc)
{
	char *shown = gpufile__remote_redact(url), *to = NULL;
	const char *eff = NULL;
	const char *at = shown ? shown : GPUFILE__URL_NOT_SHOWN;
	long hops = 0, status = 0;

	curl_easy_getinfo(c, CURLINFO_REDIRECT_COUNT, &hops);
	if (hops > 0 &&
	    curl_easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &eff) == CURLE_OK &&
	    eff)
		to = gpufile__remote_redact(eff);
	if (cc != CURLE_OK) {
		fprintf(stderr,
		        "gpufile: http: %s %s%s -> curl error %d (%s)%s%s\n",
		        method, at, detail, (int)cc, curl_easy_strerror(cc),
		        to ? " after redirects to " : "", to ? to : "");
	} else {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
		fprintf(stderr, "gpufile: http: %s %s%s -> HTTP %ld%s%s%s\n",
		        method, at, detail, status,
		        to ? " (redirected to " : "", to ? to : "",
		        to ? ")" : "");
	}
	free(shown);
	free(to);
}

#endif
