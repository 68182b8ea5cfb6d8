/*
 * The common wing (src/common/): what every other wing uses and that uses
 * nothing of theirs: the thread's error message (error.c), the rule for
 * structs that grow (sized.c), the table of system calls and the
 * environment (sys.c), and the one redaction of URLs (redact.c).
 *
 * May include: the public headers, libc. Nothing under src/ but itself.
 * Names carry the gpufile__ prefix and are hidden from the shared
 * library's symbol table; nothing here is public API.
 */
#ifndef GPUFILE_COMMON_H
#define GPUFILE_COMMON_H

#include "gpufile.h"
#include "gpufile_private.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>

#define GPUFILE_ALIGN 4096u /* O_DIRECT offset, length and memory alignment */
/* With direct_io=auto, reads shorter than this take the page cache without
 * asking mincore() what it holds: the probe is a system call (about a
 * quarter of a 4 KiB cached read), and O_DIRECT only pays off for large
 * reads, where the cost of the probe is lost in the noise. */
#define GPUFILE__DIRECT_MIN (256u << 10)

/* ---- errors (error.c) ---- */

/* Formats the thread's error message and returns err. */
int gpufile__fail(int err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Sets the thread's error message to msg verbatim and returns err. */
int gpufile__fail_msg(int err, const char *msg);
/* Clears the thread's error message. */
void gpufile__clear_error(void);
/* Sets the thread's message aside: until gpufile__error_restore(), what
 * fails writes a message of its own, and the restore brings the saved one
 * back, whole. One level; per thread (no lock). */
void gpufile__error_save(void);
void gpufile__error_restore(void);

/* ---- structs that grow (sized.c; the rule: include/gpufile.h) ---- */

/* Checks the size field of the caller's struct p (non-NULL) of type type
 * (its name, for the message) whose first version was first_size bytes.
 * Returns 0, or -EINVAL with the message naming type.size. Nothing is
 * written to p. */
int gpufile__sized_check(const void *p, size_t first_size, const char *type);
/* Copies local, a fully filled struct of lib_size bytes, into p (checked
 * by gpufile__sized_check): min(p's size, lib_size) bytes, zeroes p's
 * bytes beyond lib_size, and sets both size fields to the bytes filled. */
void gpufile__sized_put(void *p, void *local, size_t lib_size);
/* The check for struct type T at p: today's struct is its first version. */
#define GPUFILE__SIZED_CHECK(p, T) gpufile__sized_check((p), sizeof(T), #T)

/* ---- system calls and the environment (sys.c) ---- */

/* Every system call gpufile makes on a file goes through this table, so
 * that tests can inject EINTR, short transfers and errors (the way
 * SQLite's test_syscall.c does). Each entry follows libc's convention:
 * -1 with errno set on failure. */
struct gpufile__syscalls {
	int (*open)(const char *path, int flags, mode_t mode);
	int (*close)(int fd);
	ssize_t (*pread)(int fd, void *buf, size_t len, off_t off);
	ssize_t (*pwrite)(int fd, const void *buf, size_t len, off_t off);
	ssize_t (*preadv2)(int fd, const struct iovec *iov, int n, off_t off,
	                   int flags);
	int (*fstat)(int fd, struct stat *st);
	int (*fstatfs)(int fd, struct statfs *st);
	int (*fdatasync)(int fd);
	/* Cuts a failed append back off the file (append.c). */
	int (*ftruncate)(int fd, off_t len);
	/* Reserves the blocks of a large write past the end (file.c,
	 * write_prealloc). */
	int (*fallocate)(int fd, int mode, off_t off, off_t len);
	/* Whether a range of a file's map is in the page cache: the map copy
	 * and direct_io=auto ask it (posix_io.c). */
	int (*mincore)(void *addr, size_t len, unsigned char *vec);
	/* cachestat(2) (Linux 6.5) of [off, off+len) of fd's file: *cached
	 * gets the pages of it in the page cache. direct_io=auto asks it
	 * first: one call, where mincore() walks every page (posix_io.c). */
	int (*cachestat)(int fd, uint64_t off, uint64_t len, uint64_t *cached);
};
extern struct gpufile__syscalls gpufile__sys;
/* Restores the real system calls. */
void gpufile__sys_reset(void);

/* Variable var (CUFILE_ENV_PATH_JSON), which names a file to read: NULL
 * when unset, and in secure execution (setuid, setgid, capabilities),
 * where it is ignored and the configuration warnings say so (config.c,
 * gpufile__path_ignored). */
const char *gpufile__path_getenv(const char *var);

/* What kind of file mode is, when gpufile refuses it ("a FIFO (named
 * pipe)", "a socket", "a character device", "a directory", ...), or NULL
 * for a regular file or a block device: the only files that can be read
 * at any offset, in parallel, without waiting on another process. */
static inline const char *gpufile__special_kind(mode_t mode)
{
	if (S_ISREG(mode) || S_ISBLK(mode))
		return NULL;
	if (S_ISDIR(mode))
		return "a directory";
	if (S_ISFIFO(mode))
		return "a FIFO (named pipe)";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISCHR(mode))
		return "a character device";
	return "not a regular file";
}

/* ---- URLs (redact.c) ---- */

/* 1 when path names a remote object (http://, https://, s3://,
 * webhdfs://). */
int gpufile__is_url(const char *path);

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

/* What the bucket of an s3://BUCKET/KEY URL may hold (S3's names, and the
 * legacy ones with capitals and '_'), and its longest: remote.c takes no
 * other bucket, redact.c shows none (it may be user information with a
 * '/' in the password). */
#define GPUFILE__S3_BUCKET_CHARS                                               \
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-_"
#define GPUFILE__S3_BUCKET_MAX 255

/* What a message shows in place of a URL whose redacted form could not be
 * made (out of memory) where its pieces are not at hand: never the URL. */
#define GPUFILE__URL_NOT_SHOWN "(a URL, not shown: out of memory)"

/* The error of a call that needs a file descriptor (gpufile_fd, the
 * page-cache calls) on a remote handle whose shown (redacted) name is
 * shown: -ENOTSUP naming what and shown. */
int gpufile__remote_no_fd(const char *shown, const char *what);
/* The same for a call given url (gpufile__is_url) in place of a local
 * path (gpufile_mmap_open, gpufile_page_cache_info): the message names
 * the URL without its credentials and query, as gpufile_open's do. */
int gpufile__remote_not_local(const char *url, const char *what);

#endif
