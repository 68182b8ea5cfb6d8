/*
 * A handle's O_DIRECT descriptor, opened at its first use.
 *
 * gpufile_open() used to open it at once, beside the buffered one: a
 * second open through /proc/self/fd, two fstat and an fstatfs, and a
 * second close, for every handle. Most handles never use it: a read of
 * cached data, every batch entry and every host read on a machine where
 * the page cache is warm go through the buffered descriptor. Opening 2,048
 * Zarr chunk files cost gpufile 3x Python's open() (bench/README.md,
 * issue 38). It is now opened by the first read or write that wants
 * O_DIRECT, by gpufile_fd(h, 1), by cuFile's registration and by
 * gpufile_path_info; once, under h->lock, however many threads ask at
 * once.
 *
 * h->direct_state says where it stands: NONE (none will be opened: not a
 * file that takes it, direct_io=off when the handle was opened, a remote
 * or mapped handle, or the open failed; h->direct_reason says why),
 * UNOPENED (to be opened at first use) or OPEN (h->direct_fd). It moves
 * once, from UNOPENED, under h->lock; the store is a release and the
 * unlocked load an acquire, so a thread that sees OPEN sees direct_fd.
 */
#define _GNU_SOURCE
#include "paths/paths.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>

const char *gpufile__fs_name(long magic)
{
	switch (magic) {
	case TMPFS_MAGIC:
		return "tmpfs";
	case EXT4_SUPER_MAGIC:
		return "ext4";
	case XFS_SUPER_MAGIC:
		return "xfs";
	case BTRFS_SUPER_MAGIC:
		return "btrfs";
	case OVERLAYFS_SUPER_MAGIC:
		return "overlayfs";
	case NFS_SUPER_MAGIC:
		return "nfs";
	case FUSE_SUPER_MAGIC:
		return "fuse";
	default:
		return "this file system";
	}
}

/*
 * Opens a second descriptor, with O_DIRECT and access mode access, on the
 * file behind h->fd. It goes through /proc/self/fd, not h->path: a rename
 * between the two opens (measured: 195-910 of 3,000 handles under a
 * RENAME_EXCHANGE loop) would otherwise bind one handle to two files.
 * Where /proc is not mounted it opens h->path; either way device and inode
 * are compared, and a different file is refused with -ESTALE. Returns the
 * descriptor or -errno.
 */
int gpufile__reopen_direct(struct gpufile *h, int access)
{
	char proc[64];
	struct stat b;
	int fd, e;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", h->fd);
	fd = gpufile__sys.open(proc, access | O_DIRECT | O_CLOEXEC, 0);
	if (fd < 0 && errno == ENOENT)
		fd = gpufile__sys.open(h->path, access | O_DIRECT | O_CLOEXEC,
		                       0);
	if (fd < 0)
		return -errno;
	/* h->file_dev and h->file_ino are h->fd's, from its open. */
	if (gpufile__sys.fstat(fd, &b) < 0) {
		e = -errno;
		gpufile__sys.close(fd);
		return e;
	}
	if (h->file_dev != b.st_dev || h->file_ino != b.st_ino) {
		gpufile__sys.close(fd);
		return -ESTALE;
	}
	return fd;
}

/* The access mode of h's descriptors. */
static int access_mode(const struct gpufile *h)
{
	return h->readable && h->writable ? O_RDWR
	       : h->writable              ? O_WRONLY
	                                  : O_RDONLY;
}

/* Caller holds h->lock, h->direct_state is UNOPENED: opens the O_DIRECT
 * descriptor, or records why there is none. */
static void open_now(struct gpufile *h)
{
	struct statfs sfs;
	const char *fs = "this file system";
	int fd = gpufile__reopen_direct(h, access_mode(h));

	if (fd >= 0) {
		h->direct_fd = fd;
		atomic_store_explicit(&h->direct_state, GPUFILE__DIRECT_FD_OPEN,
		                      memory_order_release);
		return;
	}
	if (fd == -ESTALE) {
		snprintf(h->direct_reason, sizeof(h->direct_reason),
		         "%s was replaced while it was opened: reading "
		         "through the page cache of the file first opened",
		         h->path);
	} else {
		if (gpufile__sys.fstatfs(h->fd, &sfs) == 0)
			fs = gpufile__fs_name((long)sfs.f_type);
		snprintf(h->direct_reason, sizeof(h->direct_reason),
		         "O_DIRECT refused by %s (%s): reading through the "
		         "page cache",
		         fs, strerror(-fd));
	}
	h->direct_fd = -1;
	atomic_store_explicit(&h->direct_state, GPUFILE__DIRECT_FD_NONE,
	                      memory_order_release);
	gpufile__stats_direct_fallback();
}

int gpufile__direct_fd_locked(struct gpufile *h)
{
	int state =
	    atomic_load_explicit(&h->direct_state, memory_order_relaxed);

	if (state == GPUFILE__DIRECT_FD_UNOPENED) {
		open_now(h);
		state = atomic_load_explicit(&h->direct_state,
		                             memory_order_relaxed);
	}
	return state == GPUFILE__DIRECT_FD_OPEN ? h->direct_fd : -1;
}

int gpufile__direct_fd(struct gpufile *h)
{
	int state =
	    atomic_load_explicit(&h->direct_state, memory_order_acquire);
	int fd;

	if (state == GPUFILE__DIRECT_FD_OPEN)
		return h->direct_fd;
	if (state == GPUFILE__DIRECT_FD_NONE)
		return -1;
	pthread_mutex_lock(&h->lock);
	fd = gpufile__direct_fd_locked(h);
	pthread_mutex_unlock(&h->lock);
	return fd;
}

int gpufile__direct_fd_possible(struct gpufile *h)
{
	return atomic_load_explicit(&h->direct_state, memory_order_relaxed) !=
	       GPUFILE__DIRECT_FD_NONE;
}

void gpufile__direct_fd_init(struct gpufile *h, int direct_mode)
{
	h->direct_fd = -1;
	if (direct_mode == GPUFILE__DIRECT_OFF) {
		snprintf(h->direct_reason, sizeof(h->direct_reason),
		         "direct_io=off");
		atomic_init(&h->direct_state, GPUFILE__DIRECT_FD_NONE);
		return;
	}
	atomic_init(&h->direct_state, GPUFILE__DIRECT_FD_UNOPENED);
}
