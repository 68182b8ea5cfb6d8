/* The table of system calls gpufile makes on files (see common.h). */
#define _GNU_SOURCE
#include "common/common.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

static int sys_open(const char *path, int flags, mode_t mode)
{
	return open(path, flags, mode);
}

#ifndef __NR_cachestat
#define __NR_cachestat 451 /* the same number on every architecture */
#endif

static int sys_cachestat(int fd, uint64_t off, uint64_t len, uint64_t *cached)
{
	/* struct cachestat_range and struct cachestat of <linux/mman.h>,
	 * which older kernel headers lack. */
	struct {
		uint64_t off, len;
	} range = {off, len};
	struct {
		uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted,
		    nr_recently_evicted;
	} cs = {0};

	if (syscall(__NR_cachestat, fd, &range, &cs, 0) < 0)
		return -1;
	*cached = cs.nr_cache;
	return 0;
}

static ssize_t sys_preadv2(int fd, const struct iovec *iov, int n, off_t off,
                           int flags)
{
	return preadv2(fd, iov, n, off, flags);
}

/* A macro, not a copy of real_syscalls: C (clang) wants a constant
 * initializer for gpufile__sys. */
#define REAL_SYSCALLS                                                          \
	{                                                                      \
		.open = sys_open, .close = close, .pread = pread,              \
		.pwrite = pwrite, .preadv2 = sys_preadv2, .fstat = fstat,      \
		.fstatfs = fstatfs, .fdatasync = fdatasync,                    \
		.ftruncate = ftruncate, .fallocate = fallocate,                \
		.mincore = mincore, .cachestat = sys_cachestat,                \
	}

static const struct gpufile__syscalls real_syscalls = REAL_SYSCALLS;

struct gpufile__syscalls gpufile__sys = REAL_SYSCALLS;

void gpufile__sys_reset(void)
{
	gpufile__sys = real_syscalls;
}

const char *gpufile__path_getenv(const char *var)
{
	return secure_getenv(var);
}
