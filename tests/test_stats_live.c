/*
 * A single large request is seen moving while it runs: its tasks and
 * bytes are credited as each task ends, and the request, its tasks and
 * its bytes not yet moved show as in flight (issue 35). A read of 16
 * tasks is held half-way (the pool's task hook stops every task of its
 * upper half until released), and its counters are read meanwhile, as
 * gpufile stats reads them: gpufile_stats_read() from another thread and
 * `gpufile stats PID --json` from another process.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "testlib.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TS      (1u << 20)
#define NTASKS  16
#define SIZE    ((size_t)NTASKS * TS)
#define HALF    (SIZE / 2)
#define WORKERS 2

static uint64_t read_bytes(const gpufile_stats_t *s)
{
	uint64_t n = 0;

	for (int p = 0; p < GPUFILE_PATH_COUNT; p++)
		n += s->path[p][0].bytes;
	return n;
}

static uint64_t read_field(const gpufile_stats_t *s, int field)
{
	uint64_t n = 0;

	for (int p = 0; p < GPUFILE_PATH_COUNT; p++)
		n += field ? s->path[p][0].tasks : s->path[p][0].ops;
	return n;
}

int main(void)
{
	const char *path = test_path("live.bin");
	gpufile_stats_t before, during, after;
	gpufile_future_t *f = NULL;
	gpufile_t *h = NULL;
	char *buf = test_malloc(SIZE);
	static char out[1 << 17];

	alarm(300); /* a hold that never ends fails instead of hanging */
	CHECK_EQ(test_make_file(path, SIZE, 35), 0);
	CHECK_EQ(gpufile_set_task_size(TS), 0);
	CHECK_EQ(gpufile_set_nthreads(WORKERS), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		return test_finish("test_stats_live");
	GPUFILE_INIT(before);
	CHECK_EQ(gpufile_stats_read(getpid(), &before), 0);
	CHECK_EQ(before.inflight_requests, 0);
	CHECK_EQ(before.pending_bytes, 0);

	test_hold_tasks_from((int64_t)HALF);
	CHECK_EQ(gpufile_pread_async(h, buf, SIZE, 0, &f), 0);
	test_wait_held(WORKERS);

	/* Half-way: half the bytes and tasks credited, the request not yet
	 * counted as a request, the rest in flight. */
	GPUFILE_INIT(during);
	CHECK_EQ(gpufile_stats_read(getpid(), &during), 0);
	CHECK_EQ(read_bytes(&during) - read_bytes(&before), HALF);
	CHECK_EQ(read_field(&during, 1) - read_field(&before, 1), NTASKS / 2);
	CHECK_EQ(read_field(&during, 0) - read_field(&before, 0), 0);
	CHECK_EQ(during.inflight_requests, 1);
	CHECK_EQ(during.inflight_tasks, NTASKS / 2);
	CHECK_EQ(during.pending_bytes, SIZE - HALF);

	/* The same from another process, as a user would look. */
	if (test_cli_path()) {
		CHECK_EQ(test_cli_run(out, sizeof(out), "stats %d --json",
		                      (int)getpid()),
		         0);
		CHECK_EQ(test_json_number(out, "read_bytes"),
		         read_bytes(&during));
		CHECK_EQ(test_json_number(out, "pending_bytes"), SIZE - HALF);
		CHECK_EQ(test_json_number(out, "requests"), 1); /* in flight */
		CHECK_EQ(
		    test_cli_run(out, sizeof(out), "stats %d", (int)getpid()),
		    0);
		CHECK_CONTAINS(out, "in flight: 1 request, 8 tasks, 8388608 "
		                    "bytes pending (8 MiB)");
	} else {
		fprintf(stderr, "no CLI (GPUFILE_CLI): its part skipped\n");
	}

	test_release_tasks();
	CHECK_EQ(gpufile_future_wait(f), (ssize_t)SIZE);
	gpufile_future_free(f);
	gpufile__pool_task_hook = NULL;
	CHECK_EQ(test_mismatch(buf, SIZE, 35, 0), -1);

	/* Ended: everything credited once, nothing left in flight. */
	GPUFILE_INIT(after);
	CHECK_EQ(gpufile_stats_read(getpid(), &after), 0);
	CHECK_EQ(read_bytes(&after) - read_bytes(&before), SIZE);
	CHECK_EQ(read_field(&after, 1) - read_field(&before, 1), NTASKS);
	CHECK_EQ(read_field(&after, 0) - read_field(&before, 0), 1);
	CHECK_EQ(after.inflight_requests, 0);
	CHECK_EQ(after.inflight_tasks, 0);
	CHECK_EQ(after.pending_bytes, 0);

	/* A read past the end of the file: what it asked for and no task
	 * moved leaves the gauges when it ends. */
	CHECK_EQ(gpufile_pread(h, buf, SIZE, (int64_t)HALF), (ssize_t)HALF);
	GPUFILE_INIT(after);
	CHECK_EQ(gpufile_stats_read(getpid(), &after), 0);
	CHECK_EQ(after.inflight_requests, 0);
	CHECK_EQ(after.inflight_tasks, 0);
	CHECK_EQ(after.pending_bytes, 0);

	/* Collectives credited by the binding's load_distributed. */
	CHECK_EQ(gpufile_stats_add_collective(1000, 10), 0);
	CHECK_EQ(gpufile_stats_add_collective(24, 0), 0);
	GPUFILE_INIT(after);
	CHECK_EQ(gpufile_stats_read(getpid(), &after), 0);
	CHECK_EQ(after.collective_calls, 2);
	CHECK_EQ(after.collective_bytes_received, 1024);
	CHECK_EQ(after.collective_bytes_sent, 10);
	if (test_cli_path()) {
		CHECK_EQ(
		    test_cli_run(out, sizeof(out), "stats %d", (int)getpid()),
		    0);
		CHECK_CONTAINS(out, "collectives (torch.distributed): 2 calls, "
		                    "1024 bytes received (1 KiB), 10 bytes "
		                    "sent");
	}

	gpufile_close(h);
	free(buf);
	test_cleanup();
	return test_finish("test_stats_live");
}
