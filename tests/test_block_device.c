/*
 * Block devices, which gpufile_open accepts beside regular files: their
 * st_size is 0, so their size must come from the kernel (BLKGETSIZE64).
 * Before, gpufile_size said 0, direct_io=on silently read through the
 * page cache (no reason given), and an "a" handle wrote over the device's
 * first block. On a loop device over a file of the test's own: the size,
 * whole and past-the-end reads, O_DIRECT with direct_io=on, writes at
 * offsets, "a" refused by name, and gpufile_check's items (which
 * described /dev's devtmpfs and a size of 0). Needs root and a free loop device
 * (losetup): skipped without them.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define DEV_BYTES ((size_t)4 << 20)
#define SEED      41

static atomic_int direct_reads;

static ssize_t counting_pread(int fd, void *buf, size_t len, off_t off)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0 && (fl & O_DIRECT))
		atomic_fetch_add(&direct_reads, 1);
	return pread(fd, buf, len, off);
}

/* Attaches backing to a free loop device; its path into dev. */
static int attach(const char *backing, char *dev, size_t len)
{
	char cmd[1200];
	FILE *p;
	int ok;

	snprintf(cmd, sizeof(cmd), "losetup --find --show '%s' 2>/dev/null",
	         backing);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	ok = fgets(dev, (int)len, p) != NULL;
	if (pclose(p) != 0 || !ok)
		return -1;
	dev[strcspn(dev, "\n")] = '\0';
	return strncmp(dev, "/dev/", 5) == 0 ? 0 : -1;
}

static void detach(const char *dev)
{
	char cmd[200];

	snprintf(cmd, sizeof(cmd), "losetup -d '%s'", dev);
	CHECK_EQ(system(cmd), 0);
}

static void test_reads(const char *dev)
{
	unsigned char *buf = NULL;
	char reason[512] = "";
	gpufile_t *h = NULL;

	CHECK_EQ(posix_memalign((void **)&buf, 4096, DEV_BYTES), 0);
	CHECK_EQ(gpufile_open(&h, dev, "r"), 0);
	if (!h)
		return;
	CHECK_EQ(gpufile_size(h), DEV_BYTES);
	CHECK_EQ(gpufile_pread(h, buf, DEV_BYTES, 0), DEV_BYTES);
	CHECK_EQ(test_mismatch(buf, DEV_BYTES, SEED, 0), -1);
	/* The end of the device is an end of file. */
	CHECK_EQ(gpufile_pread(h, buf, 1000, DEV_BYTES - 100), 100);
	CHECK_EQ(test_mismatch(buf, 100, SEED, DEV_BYTES - 100), -1);
	CHECK_EQ(gpufile_pread(h, buf, 1000, DEV_BYTES), 0);
	CHECK_EQ(gpufile_close(h), 0);

	/* direct_io=on reads the device with O_DIRECT, and says so. */
	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_open(&h, dev, "r"), 0);
	if (h) {
		CHECK_EQ(gpufile_path_info(h, NULL, reason, sizeof(reason)), 0);
		CHECK_CONTAINS(reason, "O_DIRECT available");
		atomic_store(&direct_reads, 0);
		gpufile__sys.pread = counting_pread;
		memset(buf, 0, DEV_BYTES);
		CHECK_EQ(gpufile_pread(h, buf, DEV_BYTES, 0), DEV_BYTES);
		CHECK_EQ(test_mismatch(buf, DEV_BYTES, SEED, 0), -1);
		CHECK(atomic_load(&direct_reads) > 0);
		CHECK_EQ(gpufile_pread(h, buf, 8192, DEV_BYTES - 4096), 4096);
		CHECK_EQ(test_mismatch(buf, 4096, SEED, DEV_BYTES - 4096), -1);
		gpufile__sys_reset();
		CHECK_EQ(gpufile_close(h), 0);
	}
	gpufile_config_reset();
	free(buf);
}

static void test_writes(const char *dev)
{
	unsigned char block[4096], back[4096];
	gpufile_t *h = (gpufile_t *)&h; /* must be reset to NULL */

	/* Nothing can be appended to a device of fixed size: refused at
	 * open, by name, instead of writing at offset 0. */
	CHECK_EQ(gpufile_open(&h, dev, "a"), -EINVAL);
	CHECK(h == NULL);
	CHECK_CONTAINS(gpufile_errmsg(), dev);
	CHECK_CONTAINS(gpufile_errmsg(), "block device");

	CHECK_EQ(gpufile_open(&h, dev, "r+"), 0);
	if (!h)
		return;
	memset(block, 0xA5, sizeof(block));
	CHECK_EQ(gpufile_pwrite(h, block, sizeof(block), 8192), 4096);
	CHECK_EQ(gpufile_sync(h), 0);
	CHECK_EQ(gpufile_pread(h, back, sizeof(back), 8192), 4096);
	CHECK_EQ(test_mismatch_byte(back, sizeof(back), 0xA5), -1);
	/* Its neighbours are as they were. */
	CHECK_EQ(gpufile_pread(h, back, sizeof(back), 0), 4096);
	CHECK_EQ(test_mismatch(back, sizeof(back), SEED, 0), -1);
	CHECK_EQ(gpufile_close(h), 0);
}

/* gpufile check describes the device itself: its size (not st_size, 0),
 * its own block device (st_rdev, not the devtmpfs that holds /dev), no
 * file system, and an O_DIRECT read that is made. */
static void test_check(const char *dev)
{
	static gpufile_check_item_t items[256];
	char want[64];
	struct stat st;
	int n = gpufile_check(dev, items, 256), found = 0;

	CHECK_EQ(stat(dev, &st), 0);
	for (int i = 0; i < n && i < 256; i++) {
		const gpufile_check_item_t *it = &items[i];

		if (strcmp(it->name, "file") == 0) {
			found++;
			CHECK(it->status == GPUFILE_CHECK_PASS);
			CHECK_CONTAINS(it->value, "(4194304 bytes)");
			CHECK_CONTAINS(it->why, "a block device this user can");
		} else if (strcmp(it->name, "file.fs") == 0) {
			found++;
			CHECK(strcmp(it->value, "n/a") == 0);
			CHECK_CONTAINS(it->why, "a raw block device");
		} else if (strcmp(it->name, "file.block_device") == 0) {
			found++;
			snprintf(want, sizeof(want), "%s (%u:%u)",
			         strrchr(dev, '/') + 1, major(st.st_rdev),
			         minor(st.st_rdev));
			CHECK_CONTAINS(it->value, want);
		} else if (strcmp(it->name, "file.o_direct") == 0) {
			found++;
			CHECK(it->status == GPUFILE_CHECK_PASS);
		} else {
			continue;
		}
		fprintf(stderr, "  %s: %s: %s\n", it->name, it->value, it->why);
	}
	CHECK_EQ(found, 4);
}

int main(void)
{
	const char *backing = test_path("block.img");
	char dev[128];

	if (geteuid() != 0) {
		fprintf(stderr, "not root: no loop device; skipped\n");
		return TEST_SKIP;
	}
	CHECK_EQ(test_make_file(backing, DEV_BYTES, SEED), 0);
	if (attach(backing, dev, sizeof(dev))) {
		fprintf(stderr, "losetup cannot attach %s: skipped\n", backing);
		test_cleanup();
		return TEST_SKIP;
	}
	fprintf(stderr, "  %s over %s\n", dev, backing);
	test_reads(dev);
	test_writes(dev);
	test_check(dev);
	detach(dev);
	gpufile_release();
	test_cleanup();
	return test_finish("test_block_device");
}
