/* The table of system calls gpufile makes on files (see common.h). */
#define _GNU_SOURCE
#include "common/common.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static int sys_open(const char *path, int flags, mode_t mode)
{
	return open(path, flags, mode);
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
		.ftruncate = ftruncate, .mincore = mincore,                    \
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
