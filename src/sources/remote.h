/*
 * Remote sources (remote.c): HTTP(S) URLs, s3://BUCKET/KEY and presigned
 * S3 URLs, opened as read-only gpufile handles. api/file.c dispatches to
 * these at open, close and size; gpufile__file_read() (paths/posix_io.c)
 * calls the handle's remote_read, which is gpufile__remote_read(), so the
 * host path and the pinned staging pipeline of device reads serve remote
 * handles unchanged.
 */
#ifndef GPUFILE_REMOTE_H
#define GPUFILE_REMOTE_H

#include "paths/paths.h"

struct gpufile__remote;

/* What gpufile_features() adds for remote sources. */
#if GPUFILE_HAVE_CURL && GPUFILE_HAVE_SIGV4
#define GPUFILE__REMOTE_FEATURES " remote sigv4"
#elif GPUFILE_HAVE_CURL
#define GPUFILE__REMOTE_FEATURES " remote"
#else
#define GPUFILE__REMOTE_FEATURES ""
#endif

/* Opens url read-only ("r" only: anything else is -EROFS or
 * GPUFILE_EFLAGS) and learns its size (HEAD, or a GET of bytes 0-0 for a
 * presigned URL). Returns 0 with *out set, or an error whose message names
 * the redacted URL and the HTTP status or curl error. */
int gpufile__remote_open(struct gpufile **out, const char *url,
                         const char *flags);
/* The same with the handle's options (gpufile_open_remote(); NULL: none),
 * checked here: unknown flags, half-given credentials, unreadable CA
 * files are -EINVAL or -ENOENT naming them. */
int gpufile__remote_open_with(struct gpufile **out, const char *url,
                              const char *flags,
                              const gpufile_remote_opts_t *opts);
/* Frees h (every request on it has ended). Returns 0. */
int gpufile__remote_close(struct gpufile *h);
int64_t gpufile__remote_size(struct gpufile *h);

/* Reads [off, off+len) of h's object into host memory buf, in one HTTP
 * range request on h's transfer engine, retried from its start on a
 * retryable failure. Returns
 * the bytes read (fewer than len only at the end of the object) or an
 * error, with the thread's message naming the URL, range and cause. */
ssize_t gpufile__remote_read(struct gpufile *h, char *buf, size_t len,
                             int64_t off);

/* One range of gpufile__remote_read_ranges: len bytes at off into buf;
 * result the bytes read (fewer only at the end of the object) or an
 * error, msg why (allocated, the caller frees; NULL when none). */
struct gpufile__remote_range {
	char *buf;
	size_t len;
	int64_t off;
	ssize_t result;
	char *msg;
};

/* Reads r[0..n) of h's object, all issued at once on h's transfer engine
 * (http_multi.c: at most http_max_in_flight in flight), each retried from
 * its start as gpufile__remote_read's range (a source with reads of its
 * own, WebHDFS: one by one through h->remote_read). From a server that
 * ignores Range, all from one body read in order once (ranges may
 * overlap), which fails or succeeds for all. Returns 0 (each range's
 * outcome in it) or -ENOMEM with the message set (none was read). */
int gpufile__remote_read_ranges(struct gpufile *h,
                                struct gpufile__remote_range *r, size_t n);

/* The size of a host task of a request of size bytes at offset on h
 * (task_size for the pool): k whole ranges of range_size, k the handle's
 * max_in_flight over nthreads rounded up, each task's ranges in flight
 * together and the tasks taken by whichever thread is free; where the
 * server ignores Range, one task for the whole request, into any memory
 * (one body, in order: offset + size). */
size_t gpufile__remote_task_size(const struct gpufile *h, size_t range_size,
                                 unsigned nthreads, int64_t offset,
                                 size_t size);

/* The source kind of h for the path decision (core/decide.h):
 * GPUFILE__SOURCE_REMOTE, or GPUFILE__SOURCE_REMOTE_STREAM for a server
 * that ignores Range. */
int gpufile__remote_source(const struct gpufile *h);

/* The operations of every request on a remote handle, which
 * gpufile__decide() sends down the remote path: host buffers are filled
 * by gpufile__remote_read(); device buffers go through the staging
 * pipeline (gpufile__staged_task), which reads each chunk with
 * gpufile__remote_read() into a pinned buffer while the previous chunk is
 * copied to the GPU. */
extern const struct gpufile__task_ops gpufile__remote_ops;

/* gpufile_remote_info()'s report on url, into *report (allocated, sized
 * from it: the caller frees; NULL when the URL could not be looked at).
 * Returns 0 or the error gpufile_open() would return. */
int gpufile__remote_report(const char *url, char **report);

/* ---- for the other sources (upload.c, webhdfs.c) ----
 * They open a URL as remote.c does (settings, redaction, the S3 endpoint,
 * region and credentials: one rule, here) and move bytes their own way.
 * The handle they make has remote set (so every check for a remote
 * handle holds) and source_ops (core.h) naming their close, size and
 * request ops; remote.c's own functions are never called on it. */

/* What one handle's requests did (gpufile_remote_file_info), counted by
 * the source that sends them, relaxed: remote.c's reads, http.c's
 * requests (uploads, WebHDFS). A range is a read's range or a PUT of the
 * object's bytes (a part, the whole object). */
struct gpufile__remote_counters {
	_Atomic uint64_t requests, retries, ranges, bytes, failures, redirects,
	    connects;
};
/* One response of libcurl handle curl: its requests (redirect hops
 * included), hops and connections opened. */
void gpufile__remote_count_response(struct gpufile__remote_counters *c,
                                    void *curl);
/* An attempt repeated after a retryable failure. */
void gpufile__remote_count_retry(struct gpufile__remote_counters *c);
/* A range that arrived (or was sent) whole with bytes, or failed. */
void gpufile__remote_count_range(struct gpufile__remote_counters *c,
                                 uint64_t bytes, int failed);

/* What the setup of a URL found, borrowed from rm (valid while it
 * lives). */
struct gpufile__remote_view {
	const char *url;   /* the HTTP(S) URL requests go to */
	const char *shown; /* redacted, for messages */
	int s3, s3_signed; /* an S3 object; requests signed (SigV4) */
	const char *s3_host, *s3_canonical_uri, *region;
	const char *access_key, *secret_key, *session_token;
	unsigned max_attempts, max_conns;
	long timeout_s;
	long retry_after_max_s;        /* http_retry_after_max */
	int verbose;                   /* http_verbose */
	const char *ca_file, *ca_path; /* NULL: libcurl's default */
	const int *retry_codes;
	int nretry_codes;
	struct gpufile__remote_counters *count; /* the handle's counters */
	struct gpufile__http_engine *engine;    /* its transfer engine */
};

/* Sets url up as gpufile_open() (opts NULL) or gpufile_open_remote() of
 * it does, without a request: *out, or an error with the message naming
 * the redacted URL. */
int gpufile__remote_setup(const char *url, const gpufile_remote_opts_t *opts,
                          struct gpufile__remote **out);
/* Frees what gpufile__remote_setup() made (NULL accepted). */
void gpufile__remote_free(struct gpufile__remote *rm);
void gpufile__remote_view(struct gpufile__remote *rm,
                          struct gpufile__remote_view *v);
/* From now on rm's transfer engine is guarded by h's lock, which fork.c's
 * handlers hold across fork() (h is the handle made over rm). */
void gpufile__remote_bind(struct gpufile__remote *rm, struct gpufile *h);

/* The error of an open of url (a source that reads) with flags other than
 * "r": -EROFS for a mode that writes ("r+", "w", "w+", "a"), else
 * GPUFILE_EFLAGS, the message naming the redacted url and the flags, then
 * why ("WebHDFS files are read-only here; ..."). Built with libcurl only.
 */
int gpufile__remote_flags_error(const char *url, const char *flags,
                                const char *why);

/* Opens url for writing ("w"): an upload (upload.c) to an HTTP PUT URL or
 * an S3 object, published whole by gpufile_close(). */
int gpufile__upload_open(struct gpufile **out, const char *url,
                         const gpufile_remote_opts_t *opts);
/* 1 when url is a WebHDFS one (webhdfs:// or http(s)://HOST/webhdfs/v1/),
 * read by webhdfs.c. */
int gpufile__webhdfs_url(const char *url);
/* Opens a WebHDFS file read-only ("r"; anything else GPUFILE_EFLAGS or
 * -EROFS): its size by GETFILESTATUS, reads by OPEN with offset and
 * length. */
int gpufile__webhdfs_open(struct gpufile **out, const char *url,
                          const char *flags, const gpufile_remote_opts_t *opts);
/* gpufile_remote_info()'s report on a WebHDFS url, as
 * gpufile__remote_report(). */
int gpufile__webhdfs_report(const char *url, char **report);

#endif
