/*
 * Appends to a file system that really runs out of space (issue 32 item
 * 6): a small ext4 image on a loop device (buffered and O_DIRECT), or,
 * without mkfs.ext4 or a loop device, a 4 MiB tmpfs. Appends of 1 MiB,
 * then smaller, until even 4 KiB no longer fit. Every append that fails
 * leaves the file exactly as it was (it used to grow by the whole append,
 * zeros where a task had failed), every one that succeeds adds exactly its
 * bytes right after the last, and the file reads back whole. Needs root
 * to mount; skipped (77) where mounting is not permitted.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEED 41

static int64_t file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* Runs a shell command quietly; returns 1 when it exited with 0. */
static int run_quiet(const char *fmt, const char *a, const char *b)
{
	char *cmd = NULL;
	int rc;

	if (asprintf(&cmd, fmt, a, b) < 0)
		return 0;
	rc = system(cmd);
	free(cmd);
	return rc == 0;
}

/* Mounts a small file system on dir: 1 for ext4, 2 for tmpfs, 0 for none
 * (*why says why). */
static int mount_small(const char *dir, const char *image, const char **why)
{
	if (geteuid() != 0) {
		*why = "mounting a small file system needs root";
		return 0;
	}
	if (run_quiet("truncate -s 8M '%s' && mkfs.ext4 -q -F '%s' "
	              ">/dev/null 2>&1",
	              image, image) &&
	    run_quiet("mount -o loop '%s' '%s' >/dev/null 2>&1", image, dir))
		return 1;
	unlink(image);
	if (mount("none", dir, "tmpfs", 0, "size=4m") == 0)
		return 2;
	*why = "neither a loop-mounted ext4 image nor a tmpfs could be "
	       "mounted here";
	return 0;
}

/* Appends to path on the full file system, direct_io as given. */
static void fill(const char *path, const char *direct_io)
{
	const size_t max = 1u << 20;
	unsigned char *data = test_malloc(max);
	int64_t expected = 0;
	int failures = 0;
	gpufile_t *h = NULL;
	size_t len = 0;
	unsigned char *back;

	unlink(path);
	CHECK_EQ(gpufile_config_set("direct_io", direct_io), 0);
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	if (!h) {
		free(data);
		return;
	}
	for (size_t chunk = max; chunk >= 4096;) {
		ssize_t n;

		test_fill(data, chunk, SEED, (uint64_t)expected);
		n = gpufile_pwrite(h, data, chunk, 0);
		if (n == (ssize_t)chunk) {
			expected += (int64_t)chunk;
		} else {
			if (n != -ENOSPC)
				fprintf(stderr, "direct_io=%s: %s\n", direct_io,
				        gpufile_errmsg());
			CHECK_EQ(n, -ENOSPC);
			failures++;
			chunk /= 2;
		}
		/* A failed append leaves the file as it was. */
		CHECK_EQ(file_size(path), expected);
		if (file_size(path) != expected)
			break;
	}
	CHECK_EQ(gpufile_close(h), 0);
	CHECK(failures > 0); /* it did run out of space */
	CHECK(expected > 0);
	back = test_read_file(path, &len);
	CHECK_EQ((int64_t)len, expected);
	CHECK(back && test_mismatch(back, len, SEED, 0) == -1);
	free(back);
	free(data);
	unlink(path);
}

int main(void)
{
	const char *dir = test_path("full");
	char *image = strdup(test_path("full.img"));
	char *file = NULL;
	const char *why = NULL;
	int kind;

	if (!image || mkdir(dir, 0755) != 0 ||
	    asprintf(&file, "%s/appended.bin", dir) < 0) {
		fprintf(stderr, "test_append_enospc: cannot set up %s\n", dir);
		return 1;
	}
	kind = mount_small(dir, image, &why);
	if (!kind) {
		fprintf(stderr, "test_append_enospc: skipped: %s\n", why);
		rmdir(dir);
		free(file);
		free(image);
		test_cleanup();
		return 77;
	}
	CHECK_EQ(gpufile_set_task_size(64 << 10), 0);
	CHECK_EQ(gpufile_set_nthreads(4), 0);
	fill(file, "off");
	if (kind == 1)
		fill(file, "on"); /* tmpfs refuses O_DIRECT */
	gpufile_config_reset();
	gpufile_release();
	CHECK_EQ(umount(dir), 0);
	if (kind == 1)
		unlink(image);
	rmdir(dir);
	free(file);
	free(image);
	return test_finish("test_append_enospc");
}
