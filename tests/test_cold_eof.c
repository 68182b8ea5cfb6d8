/*
 * Cold O_DIRECT device reads through io_uring that reach end-of-file (issue
 * 10 item 1). With task_size above bounce_buffer_size a task spans several
 * bounce buffers, so several reads are in flight when one of them returns
 * the end of the file; the reader must then wait for exactly the reads
 * still outstanding. It used to count completions it had already consumed
 * as outstanding and wait in io_uring_wait_cqe forever. A watchdog
 * (alarm) turns such a hang into a failure. Every case checks the count
 * returned, every byte, and that nothing past end-of-file was written.
 * Device memory is the fake driver's host region (tests/fake_cuda.h).
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"

#include <signal.h>
#include <unistd.h>

#define DEV_SIZE  (40u << 20)
#define SEED_FILE 61
#define CANARY    0xA7
#include "fake_cuda.h"

/* The longest a case may take on a loaded 2-core machine is far below
 * this; only a hang reaches it. */
#define WATCHDOG_S 120

static const char *current_case = "setup";

static void on_alarm(int sig)
{
	static const char msg[] = "test_cold_eof: hang (watchdog) in case ";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0 ||
	    write(2, current_case, strlen(current_case)) < 0 ||
	    write(2, "\n", 1) < 0)
		_exit(1);
	_exit(1);
}

struct cold_case {
	const char *name;
	size_t file_size;
	size_t read_size;
	int64_t offset;
	size_t bounce_size;
	const char *bounce_buffers;
	size_t task_size;
	unsigned nthreads;
};

static void run_case(const struct cold_case *c)
{
	const char *path = test_path("cold-eof.bin");
	const size_t expect =
	    (int64_t)c->file_size > c->offset
	        ? (size_t)((int64_t)c->file_size - c->offset) < c->read_size
	              ? (size_t)((int64_t)c->file_size - c->offset)
	              : c->read_size
	        : 0;
	gpufile_t *h = NULL;
	ssize_t n;

	current_case = c->name;
	CHECK_EQ(test_make_file(path, c->file_size, SEED_FILE), 0);
	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffers", c->bounce_buffers), 0);
	CHECK_EQ(gpufile_set_bounce_buffer_size(c->bounce_size), 0);
	CHECK_EQ(gpufile_set_task_size(c->task_size), 0);
	CHECK_EQ(gpufile_set_nthreads(c->nthreads), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return;
	memset(dev_base, CANARY, c->read_size + 4096);
	alarm(WATCHDOG_S);
	n = gpufile_pread(h, dev_base, c->read_size, c->offset);
	alarm(0);
	if (n != (ssize_t)expect) {
		fprintf(stderr, "%s: read returned %zd, expected %zu (%s)\n",
		        c->name, n, expect, n < 0 ? gpufile_errmsg() : "");
		test_failures++;
	}
	if (test_mismatch(dev_base, expect, SEED_FILE, (uint64_t)c->offset) !=
	        -1 ||
	    test_mismatch_byte(dev_base + expect, c->read_size + 4096 - expect,
	                       CANARY) != -1) {
		fprintf(stderr, "%s: wrong bytes in device memory\n", c->name);
		test_failures++;
	}
	/* The same handle serves a read after the one that met EOF: the
	 * ring holds no stale completion. */
	alarm(WATCHDOG_S);
	n = gpufile_pread(h, dev_base, expect, c->offset);
	alarm(0);
	CHECK_EQ(n, (ssize_t)expect);
	CHECK_EQ(
	    test_mismatch(dev_base, expect, SEED_FILE, (uint64_t)c->offset),
	    -1);
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_config_reset();
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
}

int main(void)
{
	static const struct cold_case cases[] = {
	    /* The two configurations of the issue. */
	    {"issue: 2 MiB of 1048676 bytes, 64 KiB x 4", 1048676, 2u << 20, 0,
	     64u << 10, "4", 16u << 20, 1},
	    {"issue: 16 MiB of 10485860 bytes, 1 MiB x 2", 10485860, 16u << 20,
	     0, 1u << 20, "2", 16u << 20, 1},
	    /* End-of-file in the first, a middle and the last buffer of a
	     * round, at and off block edges, from unaligned offsets. */
	    {"eof in first buffer", (64u << 10) * 4 + 100, 1u << 20, 0,
	     64u << 10, "4", 16u << 20, 1},
	    {"eof in middle buffer", (64u << 10) * 5 + 4096, 1u << 20, 7,
	     64u << 10, "4", 16u << 20, 1},
	    {"eof at a chunk edge", (64u << 10) * 6, 1u << 20, 4095, 64u << 10,
	     "4", 16u << 20, 1},
	    {"eof, 3 buffers, 2 threads", (3u << 20) + 1, 8u << 20, 12345,
	     64u << 10, "3", 1u << 20, 2},
	    {"offset past eof", 100000, 1u << 20, 200000, 64u << 10, "4",
	     16u << 20, 1},
	};

	signal(SIGALRM, on_alarm);
	if (fake_install())
		return 1;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_case(&cases[i]);
	gpufile_release();
	CHECK_EQ(bad_copies, 0);
	gpufile__cuda_override(NULL);
	free(dev_base);
	return test_finish("test_cold_eof");
}
