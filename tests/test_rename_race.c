/*
 * One handle, one file (issue 10 item 10): while another thread swaps two
 * files' names (renameat2 RENAME_EXCHANGE) in a loop, every handle that
 * gpufile_open returns has its buffered and O_DIRECT descriptors on the
 * same file (device and inode), and a read through each gives that file's
 * bytes. Before, the O_DIRECT descriptor was opened by name a second time,
 * and a swap between the two opens bound one handle to two files. (It is
 * opened at first use now: gpufile_fd(h, 1) opens it, while the swaps go
 * on.)
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#define OPENS     3000
#define FILE_LEN  (64u << 10)
#define SEED_A    11
#define SEED_B    12
#define READ_SIZE 4096

static const char *path_a, *path_b;
static atomic_int stop;
static atomic_long swaps;

static int exchange(const char *a, const char *b)
{
	return (int)syscall(SYS_renameat2, AT_FDCWD, a, AT_FDCWD, b,
	                    RENAME_EXCHANGE);
}

static void *swapper(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop))
		if (exchange(path_a, path_b) == 0)
			atomic_fetch_add(&swaps, 1);
	return NULL;
}

/* The seed of the file behind fd, from its first bytes: SEED_A, SEED_B or
 * -1. Reads with O_DIRECT alignment (fd may be the O_DIRECT one). */
static int seed_of(int fd, void *buf)
{
	if (pread(fd, buf, READ_SIZE, 0) != READ_SIZE)
		return -1;
	if (test_mismatch(buf, READ_SIZE, SEED_A, 0) == -1)
		return SEED_A;
	if (test_mismatch(buf, READ_SIZE, SEED_B, 0) == -1)
		return SEED_B;
	return -1;
}

int main(void)
{
	pthread_t t;
	void *buf = NULL;
	int mismatched = 0, unreadable = 0, with_direct = 0;

	path_a = test_path("race-a");
	path_b = test_path("race-b");
	if (test_make_file(path_a, FILE_LEN, SEED_A) ||
	    test_make_file(path_b, FILE_LEN, SEED_B) ||
	    posix_memalign(&buf, 4096, READ_SIZE))
		return 1;
	if (exchange(path_a, path_b) != 0) {
		fprintf(stderr, "renameat2(RENAME_EXCHANGE): %s: skipped\n",
		        strerror(errno));
		return TEST_SKIP;
	}
	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(pthread_create(&t, NULL, swapper, NULL), 0);
	for (int i = 0; i < OPENS; i++) {
		gpufile_t *h = NULL;
		struct stat a, b;
		int dfd;

		if (gpufile_open(&h, path_a, i % 2 ? "r" : "r+") != 0) {
			fprintf(stderr, "open %d: %s\n", i, gpufile_errmsg());
			test_failures++;
			break;
		}
		if ((dfd = gpufile_fd(h, 1)) >= 0) {
			with_direct++;
			if (fstat(h->fd, &a) || fstat(dfd, &b) ||
			    a.st_dev != b.st_dev || a.st_ino != b.st_ino)
				mismatched++;
			else if (seed_of(h->fd, buf) != seed_of(dfd, buf))
				unreadable++;
		}
		gpufile_close(h);
	}
	atomic_store(&stop, 1);
	pthread_join(t, NULL);
	printf("%d opens, %d with O_DIRECT, %ld swaps: %d bound to two files, "
	       "%d reading different bytes\n",
	       OPENS, with_direct, atomic_load(&swaps), mismatched, unreadable);
	CHECK_EQ(mismatched, 0);
	CHECK_EQ(unreadable, 0);
	gpufile_config_reset();
	free(buf);
	if (with_direct == 0) {
		fprintf(stderr, "O_DIRECT refused here: skipped\n");
		return test_finish("test_rename_race") ? 1 : TEST_SKIP;
	}
	return test_finish("test_rename_race");
}
