/*
 * Preloaded into a program (LD_PRELOAD), pread() and pread64() behave as
 * libc's, except that the first call that reads at file offset
 * SHRINK_AT and returns bytes truncates the file SHRINK_FILE to
 * SHRINK_TO bytes once it has returned: the file changes at a point that
 * the program's own sequence of reads fixes (gpufile read --window 4k:
 * after the last window of the first repeat), not at a moment in time.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

static atomic_int done;

static void maybe_shrink(off_t offset, ssize_t n)
{
	const char *file = getenv("SHRINK_FILE"), *at = getenv("SHRINK_AT");
	const char *to = getenv("SHRINK_TO");

	if (n <= 0 || !file || !at || !to || offset != atoll(at))
		return;
	if (atomic_exchange(&done, 1) == 0 && truncate(file, atoll(to)) != 0)
		_exit(99); /* the test sees the exit status */
}

ssize_t pread(int fd, void *buf, size_t count, off_t offset)
{
	static ssize_t (*real)(int, void *, size_t, off_t);
	ssize_t n;

	if (!real)
		real = (ssize_t(*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT,
		                                                     "pread");
	n = real(fd, buf, count, offset);
	maybe_shrink(offset, n);
	return n;
}

ssize_t pread64(int fd, void *buf, size_t count, off_t offset)
{
	return pread(fd, buf, count, offset);
}
