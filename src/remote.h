/*
 * Remote sources (remote.c): HTTP(S) URLs, s3://BUCKET/KEY and presigned
 * S3 URLs, opened as read-only gpufile handles. file.c dispatches to these
 * at open, close and size; gpufile__file_read() (posix_io.c) calls
 * gpufile__remote_read() for a remote handle, so the host path and the
 * pinned staging pipeline of device reads serve remote handles unchanged.
 */
#ifndef GPUFILE_REMOTE_H
#define GPUFILE_REMOTE_H

#include "internal.h"

struct gpufile__remote;

/* What gpufile_features() adds for remote sources. */
#if GPUFILE_HAVE_CURL && GPUFILE_HAVE_SIGV4
#define GPUFILE__REMOTE_FEATURES " remote sigv4"
#elif GPUFILE_HAVE_CURL
#define GPUFILE__REMOTE_FEATURES " remote"
#else
#define GPUFILE__REMOTE_FEATURES ""
#endif

/* 1 when path names a remote object (http://, https://, s3://). */
int gpufile__is_url(const char *path);

/* Opens url read-only ("r" only: anything else is -EROFS or
 * GPUFILE_EFLAGS) and learns its size (HEAD, or a GET of bytes 0-0 for a
 * presigned URL). Returns 0 with *out set, or an error whose message names
 * the redacted URL and the HTTP status or curl error. */
int gpufile__remote_open(struct gpufile **out, const char *url,
                         const char *flags);
/* Frees h (every request on it has ended). Returns 0. */
int gpufile__remote_close(struct gpufile *h);
int64_t gpufile__remote_size(struct gpufile *h);

/* Reads [off, off+len) of h's object into host memory buf, in one HTTP
 * range request, retried from its start on a retryable failure. Returns
 * the bytes read (fewer than len only at the end of the object) or an
 * error, with the thread's message naming the URL, range and cause. */
ssize_t gpufile__remote_read(struct gpufile *h, char *buf, size_t len,
                             int64_t off);

/* The operations of every request on a remote handle, which
 * gpufile__decide() sends down the remote path: host buffers are filled
 * by gpufile__remote_read(); device buffers go through the staging
 * pipeline (gpufile__staged_task), which reads each chunk with
 * gpufile__remote_read() into a pinned buffer while the previous chunk is
 * copied to the GPU. */
extern const struct gpufile__task_ops gpufile__remote_ops;

/* The error of a call that needs a file descriptor (gpufile_fd, the
 * page-cache calls) on remote handle h: -ENOTSUP naming what and h. */
int gpufile__remote_no_fd(struct gpufile *h, const char *what);

/* The same for a call given url (gpufile__is_url) in place of a local
 * path (gpufile_mmap_open, gpufile_page_cache_info): the message names
 * the URL without its credentials and query, as gpufile_open's do. */
int gpufile__remote_not_local(const char *url, const char *what);

/* url as messages, statistics, reports and gpufile_filename() show it:
 * without user information, query and fragment (see remote.c for URLs a
 * password with a raw '/', '?', '#' or '@' makes ambiguous); an s3:// key
 * whole. Returns a string sized from url, the caller's to free, or NULL
 * when out of memory. The one redaction of the library: the public
 * gpufile_redact_url() (the CLI, the Python binding) calls it. */
char *gpufile__remote_redact(const char *url);

/* The same form as pieces of url, for a message that must name it without
 * allocating (out of memory): printf(GPUFILE__URL_FMT,
 * GPUFILE__URL_ARGS(parts)) prints what gpufile__remote_redact() returns.
 * The pointers are into url and static text. */
struct gpufile__url_parts {
	const char *scheme, *mark, *shown, *tail;
	int scheme_len, shown_len;
};
void gpufile__url_parts(const char *url, struct gpufile__url_parts *out);
#define GPUFILE__URL_FMT "%.*s%s%.*s%s"
#define GPUFILE__URL_ARGS(p)                                                   \
	(p).scheme_len, (p).scheme, (p).mark, (p).shown_len, (p).shown, (p).tail

/* What a message shows in place of a URL whose redacted form could not be
 * made (out of memory) where its pieces are not at hand: never the URL. */
#define GPUFILE__URL_NOT_SHOWN "(a URL, not shown: out of memory)"

/* gpufile_remote_info()'s report on url, into *report (allocated, sized
 * from it: the caller frees; NULL when the URL could not be looked at).
 * Returns 0 or the error gpufile_open() would return. */
int gpufile__remote_report(const char *url, char **report);

#endif
