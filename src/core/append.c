/*
 * Where the appends of an "a" handle land, and what a failed one leaves.
 *
 * An append is placed (append_begin) when it is submitted and ends
 * (append_end) when its request completes, after its last task, before
 * the request counts as ended on the handle and before its caller sees
 * the result (pool.c). h->lock guards h->appends, h->append_pos,
 * h->append_failed_from and h->append_ok_end; no other lock is held with
 * it here.
 *
 * Rules, as gpufile_open(3) states them:
 *   - an append placed while no other is in flight on the handle starts
 *     at the file's real end (fstat), so another process's append, or
 *     anything else that moved the end, leaves no hole and loses nothing;
 *   - appends in flight together are placed one after another, in the
 *     order they were submitted;
 *   - when the last append in flight ends and one of them failed, the
 *     file is cut (ftruncate) back to where the first failed one began,
 *     or, when an append placed after that one succeeded, to the end of
 *     the last that succeeded: a failed append leaves no byte, and no zero
 *     nobody wrote, in the file unless an append placed after it on the
 *     handle was written, whose bytes are kept where they are, or
 *     the file holds bytes past the appends' end (another handle's or
 *     process's): nothing is cut then, as that would lose them.
 * A failed append is cut at once when it was the only one in flight: its
 * caller sees the file as it was before it (issue 32: an 8 MiB append
 * that failed with ENOSPC in one task grew the file by 8 MiB, the
 * failed task's range zeros, and the next append landed after them).
 * Every write task of a request writes whole or fails (pwrite_full), so
 * a request's result is its size or an error; a short write (the disk
 * filling up inside a task, buffered or O_DIRECT) fails the task, and its
 * bytes are cut with the rest.
 */
#define _GNU_SOURCE
#include "core/core.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int gpufile__append_begin(struct gpufile *h, size_t size, int64_t *offset)
{
	struct stat st;
	int64_t pos;
	int rc = 0;

	pthread_mutex_lock(&h->lock);
	pos = h->append_pos;
	if (h->appends == 0) {
		if (gpufile__sys.fstat(h->fd, &st) == 0)
			pos = (int64_t)st.st_size;
		else
			rc = gpufile__fail(-errno, "appending to %s: fstat: %s",
			                   h->path, strerror(errno));
	}
	if (rc == 0 && (int64_t)size > INT64_MAX - pos)
		rc = gpufile__fail(-EFBIG,
		                   "appending %zu bytes to %s at offset %lld: "
		                   "past the largest file offset",
		                   size, h->path, (long long)pos);
	if (rc == 0) {
		*offset = pos;
		h->append_pos = pos + (int64_t)size;
		if (h->appends++ == 0) {
			h->append_failed_from = INT64_MAX;
			h->append_ok_end = INT64_MIN;
		}
	}
	pthread_mutex_unlock(&h->lock);
	return rc;
}

/* Caller holds h->lock; the last append in flight has ended. Cuts the
 * file back to where the failed appends' bytes begin (see above).
 * Returns 0, 1 when the file holds bytes past the appends' end (another
 * writer's: nothing is cut), or -errno. */
static int cut_back(struct gpufile *h, int64_t *cut)
{
	const int64_t placed_end = h->append_pos;
	struct stat st;

	*cut = h->append_failed_from > h->append_ok_end ? h->append_failed_from
	                                                : h->append_ok_end;
	if (*cut >= placed_end)
		return 0; /* succeeded up to the end: nothing to cut */
	h->append_pos = *cut;
	if (gpufile__sys.fstat(h->fd, &st) != 0)
		return -errno;
	/* Bytes past the appends' end are another writer's (another
	 * handle or process appended meanwhile): cutting would lose them,
	 * so the failed range stays. */
	if ((int64_t)st.st_size > placed_end) {
		h->append_pos = (int64_t)st.st_size;
		return 1;
	}
	/* Never longer: the file may have been cut short meanwhile. */
	if ((int64_t)st.st_size > *cut &&
	    gpufile__sys.ftruncate(h->fd, (off_t)*cut) != 0)
		return -errno;
	return 0;
}

void gpufile__append_end(struct gpufile *h, int64_t offset, size_t size,
                         ssize_t result, char *msg, size_t msg_len)
{
	const int64_t end = offset + (int64_t)size;
	const int failed = result != (ssize_t)size;
	const size_t used = msg ? strnlen(msg, msg_len) : 0;
	int64_t cut = 0, ok_end;
	int rc = 0, last;

	pthread_mutex_lock(&h->lock);
	if (failed && offset < h->append_failed_from)
		h->append_failed_from = offset;
	/* A zero-size append writes nothing: it keeps no failed range. */
	if (!failed && size && end > h->append_ok_end)
		h->append_ok_end = end;
	ok_end = h->append_ok_end;
	last = --h->appends == 0;
	if (last && h->append_failed_from != INT64_MAX)
		rc = cut_back(h, &cut);
	pthread_mutex_unlock(&h->lock);
	if (!failed || !msg || used + 1 >= msg_len)
		return;
	if (rc == 1)
		snprintf(msg + used, msg_len - used,
		         "; %s was written past the appends' end by another "
		         "writer meanwhile, so its range (offsets %lld to "
		         "%lld) stays in the file: zeros where nothing was "
		         "written",
		         h->path, (long long)offset, (long long)end);
	else if (rc)
		snprintf(msg + used, msg_len - used,
		         "; cutting %s back to %lld bytes, where the failed "
		         "appends began, failed: %s",
		         h->path, (long long)cut, strerror(-rc));
	else if (ok_end > offset)
		snprintf(msg + used, msg_len - used,
		         "; an append placed after it on the handle was "
		         "written, so its range of %s (offsets %lld to %lld) "
		         "stays in the file: zeros where nothing was written",
		         h->path, (long long)offset, (long long)end);
	else if (!last)
		snprintf(msg + used, msg_len - used,
		         "; other appends to %s are in flight on the handle: "
		         "its range (offsets %lld to %lld) is cut off once "
		         "they have ended, unless one placed after it is "
		         "written: then the range stays in the file, zeros "
		         "where nothing was written",
		         h->path, (long long)offset, (long long)end);
}
