/*
 * The rules every HTTP request of the sources follows, written once
 * (http_policy.c): remote.c's ranged reads and http.c's own requests
 * (uploads, WebHDFS) wait the same back-off between attempts (Retry-After
 * honoured up to http_retry_after_max, else exponential with jitter),
 * retry the same transfer errors and name them in the
 * same words, check peers against the same CA bundle and folder (chosen
 * by aws_config.c's gpufile__ca_settings()), and log each exchange the
 * same way under http_verbose, the URL redacted.
 */
#ifndef GPUFILE_HTTP_POLICY_H
#define GPUFILE_HTTP_POLICY_H

#include <stddef.h>
#include <stdint.h>

#if GPUFILE_HAVE_CURL
#include <curl/curl.h>

/* A Retry-After value (RFC 9110: delay-seconds or an HTTP-date), len
 * bytes, as seconds from now, or -1 when it is neither (or too long to be
 * one). */
int64_t gpufile__http_retry_after(const char *value, size_t len);

/* What the wait after a failed attempt depends on. */
struct gpufile__http_wait {
	unsigned attempt;       /* the attempt that failed, from 1 */
	unsigned max_attempts;  /* for the log line */
	int64_t retry_after;    /* seconds its Retry-After asked, -1: none */
	long retry_after_max_s; /* http_retry_after_max */
	int verbose;            /* http_verbose: say the wait on stderr */
};

/* How long to wait before attempt + 1 (ms), said on stderr under
 * verbose. */
long gpufile__http_back_off_ms(const struct gpufile__http_wait *w);

/* Sets *why, the reason an attempt failed, to the formatted text, sized
 * from it (an ETag, a URL: no limit), after freeing the one before; NULL
 * when out of memory. */
void gpufile__http_why(char **why, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A transfer of url that libcurl could not finish (cc, with errbuf its
 * CURLOPT_ERRORBUFFER): *why (gpufile__http_why) says "curl error N
 * (its words: errbuf)", errbuf left out when it quotes a URL, which may
 * hold a credential, and when url's user information has a raw '/' (the
 * redaction marks it: libcurl took a piece of the password as the host
 * and port, and its words would quote them). Returns -ETIMEDOUT for a
 * timeout, else -EIO. */
int gpufile__http_curl_failed(CURLcode cc, const char *errbuf, const char *url,
                              char **why);

/* An attempt that a failure of libcurl's multi interface ended (mc,
 * returned by fn: http_multi.h's x->multi_rc and x->multi_fn): *why says
 * "libcurl's multi interface failed (fn: its words)", its words
 * curl_multi_strerror's. Returns -ENOMEM for CURLM_OUT_OF_MEMORY, else
 * -EIO. */
int gpufile__http_multi_failed(const char *fn, CURLMcode mc, char **why);

/* 1 when a new attempt can cure a transfer that ended with cc (a timeout,
 * a dropped, refused or cut connection, an HTTP/2 stream error), else 0. */
int gpufile__http_curl_retryable(CURLcode cc);

/* Checks c's peers against ca_file and ca_path (NULL: libcurl's
 * default). */
void gpufile__http_use_ca(CURL *c, const char *ca_file, const char *ca_path);

/* http_verbose's line for the exchange that ended on c with cc: method,
 * url (redacted here), detail (e.g. " Range: bytes=0-9", or ""), then
 * the HTTP status or curl error and where redirects led (redacted). */
void gpufile__http_log_exchange(CURL *c, const char *method, const char *url,
                                const char *detail, CURLcode cc);

#endif
#endif
