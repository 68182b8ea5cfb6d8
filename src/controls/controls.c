/*
 * Small controls KvikIO users reach for: a handle's file descriptors, and
 * giving the pinned bounce buffers back without stopping the pool.
 */
#include "controls/controls.h"
#include "sources/remote.h"

#include <errno.h>

int gpufile_fd(gpufile_t *h, int direct)
{
	int fd;

	if (!h)
		return gpufile__fail(-EINVAL, "gpufile_fd: handle is NULL");
	if (h->remote)
		return gpufile__remote_no_fd(h->path, "gpufile_fd");
	if (!direct)
		return h->fd;
	/* Opened now where this is its first use (paths/direct_fd.c). */
	pthread_mutex_lock(&h->lock);
	fd = gpufile__direct_fd_locked(h);
	if (fd < 0)
		fd = gpufile__fail(
		    -ENOENT, "%s has no O_DIRECT descriptor: %s", h->path,
		    h->direct_reason[0] ? h->direct_reason : "not opened");
	pthread_mutex_unlock(&h->lock);
	return fd;
}

size_t gpufile_bounce_buffer_free(void)
{
	return gpufile__staging_free() + gpufile__stage_buffers_free();
}
