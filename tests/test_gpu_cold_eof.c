/*
 * test_cold_eof on a real GPU (issue 10 item 1): cold O_DIRECT device reads
 * through io_uring that reach end-of-file while a task spans several
 * bounce buffers, in the configurations, into device memory of GPU
 * 0. Checks the count, every byte, and the canary past end-of-file; a
 * watchdog (alarm) turns a hang into a failure. compat_mode=on keeps the
 * request on gpufile's own staging path. Skips (77) without a GPU.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"

#include <signal.h>
#include <unistd.h>

#define SEED_FILE  71
#define CANARY     0x5D
#define WATCHDOG_S 120
#define DEV_BYTES  ((16u << 20) + 4096)

static const char *current_case = "setup";

static void on_alarm(int sig)
{
	static const char msg[] = "test_gpu_cold_eof: hang (watchdog) in ";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0 ||
	    write(2, current_case, strlen(current_case)) < 0 ||
	    write(2, "\n", 1) < 0)
		_exit(1);
	_exit(1);
}

struct cold_case {
	const char *name;
	size_t file_size, read_size;
	int64_t offset;
	size_t bounce_size;
	const char *bounce_buffers;
	size_t task_size;
	unsigned nthreads;
};

static void run_case(const struct cold_case *c, unsigned char *dev,
                     unsigned char *host)
{
	const char *path = test_path("gpu-cold-eof.bin");
	const int64_t left = (int64_t)c->file_size - c->offset;
	const size_t expect = left <= 0                     ? 0
	                      : (size_t)left < c->read_size ? (size_t)left
	                                                    : c->read_size;
	gpufile_t *h = NULL;
	ssize_t n;

	current_case = c->name;
	CHECK_EQ(test_make_file(path, c->file_size, SEED_FILE), 0);
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffers", c->bounce_buffers), 0);
	CHECK_EQ(gpufile_set_bounce_buffer_size(c->bounce_size), 0);
	CHECK_EQ(gpufile_set_task_size(c->task_size), 0);
	CHECK_EQ(gpufile_set_nthreads(c->nthreads), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return;
	memset(host, CANARY, c->read_size + 4096);
	CHECK_EQ(gpufile_memcpy(dev, host, c->read_size + 4096), 0);
	alarm(WATCHDOG_S);
	n = gpufile_pread(h, dev, c->read_size, c->offset);
	alarm(0);
	if (n != (ssize_t)expect) {
		fprintf(stderr, "%s: read returned %zd, expected %zu (%s)\n",
		        c->name, n, expect, n < 0 ? gpufile_errmsg() : "");
		test_failures++;
	}
	memset(host, 0, c->read_size + 4096);
	CHECK_EQ(gpufile_memcpy(host, dev, c->read_size + 4096), 0);
	if (test_mismatch(host, expect, SEED_FILE, (uint64_t)c->offset) != -1 ||
	    test_mismatch_byte(host + expect, c->read_size + 4096 - expect,
	                       CANARY) != -1) {
		fprintf(stderr, "%s: wrong bytes in device memory\n", c->name);
		test_failures++;
	} else {
		printf("%-44s %zd bytes, all correct\n", c->name, n);
	}
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_config_reset();
}

int main(void)
{
	static const struct cold_case cases[] = {
	    {"issue: 2 MiB of 1048676 bytes, 64 KiB x 4", 1048676, 2u << 20, 0,
	     64u << 10, "4", 16u << 20, 1},
	    {"issue: 16 MiB of 10485860 bytes, 1 MiB x 2", 10485860, 16u << 20,
	     0, 1u << 20, "2", 16u << 20, 1},
	    {"eof in middle buffer, offset 7", (64u << 10) * 5 + 4096, 1u << 20,
	     7, 64u << 10, "4", 16u << 20, 1},
	    {"eof, 3 buffers, 2 threads", (3u << 20) + 1, 8u << 20, 12345,
	     64u << 10, "3", 1u << 20, 2},
	};
	unsigned char *dev = NULL, *host;

	signal(SIGALRM, on_alarm);
	if (gpufile_cuda_device_count() <= 0) {
		fprintf(stderr, "no GPU: %s\n", gpufile_errmsg());
		return TEST_SKIP;
	}
	if (gpufile_device_alloc(0, DEV_BYTES, (void **)&dev) != 0) {
		fprintf(stderr, "gpufile_device_alloc: %s\n", gpufile_errmsg());
		return 1;
	}
	host = test_malloc(DEV_BYTES);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_case(&cases[i], dev, host);
	gpufile_device_free(dev);
	free(host);
	gpufile_release();
	return test_finish("test_gpu_cold_eof");
}
