/*
 * gpufile_fd(): the buffered and the O_DIRECT descriptors of a handle,
 * both on the handle's file; -ENOENT naming why when there is no O_DIRECT
 * one; -EINVAL for a NULL handle.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

int main(void)
{
	const char *path = test_path("fd.bin");
	struct stat a, b;
	gpufile_t *h = NULL;
	int fd, dfd;

	CHECK_EQ(test_make_file(path, 8192, 1), 0);
	CHECK_EQ(stat(path, &a), 0);

	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_open(&h, path, "r+"), 0);
	fd = gpufile_fd(h, 0);
	dfd = gpufile_fd(h, 1);
	CHECK(fd >= 0);
	CHECK_EQ(fstat(fd, &b), 0);
	CHECK(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
	CHECK_EQ(fcntl(fd, F_GETFL) & (O_DIRECT | O_ACCMODE), O_RDWR);
	if (dfd == -ENOENT) {
		/* A file system that refuses O_DIRECT (tmpfs): say so. */
		CHECK_CONTAINS(gpufile_errmsg(), "O_DIRECT refused");
	} else {
		CHECK(dfd >= 0 && dfd != fd);
		CHECK_EQ(fstat(dfd, &b), 0);
		CHECK(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
		CHECK_EQ(fcntl(dfd, F_GETFL) & (O_DIRECT | O_ACCMODE),
		         O_DIRECT | O_RDWR);
	}
	CHECK_EQ(gpufile_close(h), 0);

	CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	CHECK(gpufile_fd(h, 0) >= 0);
	CHECK_EQ(gpufile_fd(h, 1), -ENOENT);
	CHECK_CONTAINS(gpufile_errmsg(), "fd.bin");
	CHECK_CONTAINS(gpufile_errmsg(), "direct_io=off");
	CHECK_EQ(gpufile_close(h), 0);

	CHECK_EQ(gpufile_fd(NULL, 0), -EINVAL);
	gpufile_config_reset();
	test_cleanup();
	return test_finish("test_fd");
}
