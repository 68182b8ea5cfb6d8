/*
 * write_source: what a buffered write's source costs (issue 33 item 2).
 * fio writes from one small buffer that stays in the CPU caches;
 * gpufile_pwrite of a checkpoint writes from a buffer as large as the
 * write. This program writes SIZE bytes into a new file through the page
 * cache, BLOCK bytes a pwrite() (one thread), in interleaved rounds:
 *
 *   small      every block from one BLOCK-byte buffer (fio's way)
 *   large      block i from bytes i*BLOCK.. of a SIZE-byte buffer
 *   large+pf   the same while a second thread reads the source lines
 *              AHEAD bytes ahead of the writer (into the shared cache)
 *   gpufile    one gpufile_pwrite of the SIZE-byte buffer (defaults)
 *   huge       as large, from a second SIZE-byte buffer given
 *              MADV_HUGEPAGE before it was touched (fewer TLB misses)
 *   bounce     as large, but a second thread copies the source BLOCK
 *              bytes at a time into a ring of 4 BLOCK-byte buffers and
 *              the writer writes from the ring (a small source, as fio's,
 *              kept full by another core)
 *   self-pf    as large, the writer itself asking for the next block's
 *              lines (software prefetch into L2) before each pwrite, so
 *              that they arrive while the kernel copies this block
 *   touch      as large, the writer reading each block's lines itself
 *              before its pwrite (the kernel's copy then reads the caches)
 *
 *	write_source DIR [SIZE_MiB] [ROUNDS] [BLOCK_KiB] [AHEAD_KiB]
 *
 * Each write goes to a new file, removed after an untimed fsync; the
 * buffers are touched before timing. With WRITE_SOURCE_PREALLOC=1 in the
 * environment each plain-pwrite way's new file is first given SIZE bytes
 * of blocks by fallocate(FALLOC_FL_KEEP_SIZE), untimed, as fio lays its
 * file out before its clock starts (gpufile reserves them itself, inside
 * its call: write_prealloc). Prints each round, the medians and
 * their ratios to "small".
 */
#define _GNU_SOURCE
#include "gpufile.h"
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>

enum { SMALL, LARGE, LARGE_PF, GPUFILE, HUGE, BOUNCE, SELF_PF, TOUCH, NWAYS };
static const char *const names[NWAYS] = {"small",   "large", "large+pf",
                                         "gpufile", "huge",  "bounce",
                                         "self-pf", "touch"};

struct prefetch {
	const char *src;
	size_t size, ahead;
	atomic_size_t written; /* the writer's position */
	atomic_int stop;
	uint64_t sink;
};

static void *prefetcher(void *arg)
{
	struct prefetch *p = arg;
	size_t at = 0;
	uint64_t sum = 0;

	while (!atomic_load(&p->stop) && at < p->size) {
		size_t to = atomic_load(&p->written) + p->ahead;

		if (to > p->size)
			to = p->size;
		if (at >= to) {
			sched_yield();
			continue;
		}
		for (; at < to; at += 64)
			sum += *(const volatile uint64_t *)(p->src + at);
	}
	p->sink = sum;
	return NULL;
}

static size_t reserve; /* bytes new_file() reserves; 0: none */

/* A new file at path for one timed write; the write is synced (untimed)
 * and the file removed by end_file(). */
static int new_file(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0) {
		perror(path);
		exit(1);
	}
	if (reserve &&
	    fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)reserve) != 0) {
		perror("write_source: fallocate");
		exit(1);
	}
	return fd;
}

static void end_file(int fd, const char *path)
{
	fsync(fd);
	close(fd);
	unlink(path);
}

/* How the writer itself readies a block's source: not at all, by
 * prefetching the next block, or by reading this one. */
enum ready { AS_IS, PREFETCH_NEXT, TOUCH_THIS };

static uint64_t touched; /* keeps TOUCH_THIS's loads */

static void ready_block(enum ready how, const char *src, size_t size,
                        size_t off, size_t block)
{
	if (how == PREFETCH_NEXT) {
		const size_t from = off + block;
		const size_t to = from + block < size ? from + block : size;

		for (size_t at = from; at < to; at += 64)
			__builtin_prefetch(src + at, 0, 2);
	} else if (how == TOUCH_THIS) {
		const size_t to = off + block < size ? off + block : size;
		uint64_t sum = 0;

		for (size_t at = off; at < to; at += 64)
			sum += *(const volatile uint64_t *)(src + at);
		touched += sum;
	}
}

static double write_blocks(const char *path, const char *src, size_t size,
                           size_t block, int from_small, size_t ahead,
                           enum ready how)
{
	struct prefetch pf = {src, size, ahead, 0, 0, 0};
	pthread_t tid;
	double t0, dt;
	int fd = new_file(path);

	if (ahead && pthread_create(&tid, NULL, prefetcher, &pf)) {
		fprintf(stderr, "write_source: pthread_create failed\n");
		exit(1);
	}
	t0 = bench_now();
	for (size_t off = 0; off < size; off += block) {
		size_t n = size - off < block ? size - off : block;
		const char *s = from_small ? src : src + off;

		ready_block(how, src, size, off, block);
		if (pwrite(fd, s, n, (off_t)off) != (ssize_t)n) {
			perror("write_source: pwrite");
			exit(1);
		}
		atomic_store(&pf.written, off + n);
	}
	dt = bench_now() - t0;
	if (ahead) {
		atomic_store(&pf.stop, 1);
		pthread_join(tid, NULL);
	}
	end_file(fd, path);
	return dt;
}

enum { RING = 4 };

struct ring {
	const char *src;
	size_t size, block;
	char *slot[RING];
	atomic_size_t filled, drained; /* blocks copied in, blocks written */
};

static void *filler(void *arg)
{
	struct ring *r = arg;
	const size_t nblocks = (r->size + r->block - 1) / r->block;

	for (size_t i = 0; i < nblocks; i++) {
		const size_t off = i * r->block;
		const size_t n =
		    r->size - off < r->block ? r->size - off : r->block;

		while (i - atomic_load(&r->drained) >= RING)
			sched_yield();
		memcpy(r->slot[i % RING], r->src + off, n);
		atomic_store(&r->filled, i + 1);
	}
	return NULL;
}

static double write_bounced(const char *path, const char *src, size_t size,
                            size_t block, char *ring_mem)
{
	struct ring r = {src, size, block, {0}, 0, 0};
	const size_t nblocks = (size + block - 1) / block;
	pthread_t tid;
	double t0, dt;
	int fd = new_file(path);

	for (int i = 0; i < RING; i++)
		r.slot[i] = ring_mem + (size_t)i * block;
	t0 = bench_now();
	if (pthread_create(&tid, NULL, filler, &r)) {
		fprintf(stderr, "write_source: pthread_create failed\n");
		exit(1);
	}
	for (size_t i = 0; i < nblocks; i++) {
		const size_t off = i * block;
		const size_t n = size - off < block ? size - off : block;

		while (atomic_load(&r.filled) <= i)
			sched_yield();
		if (pwrite(fd, r.slot[i % RING], n, (off_t)off) != (ssize_t)n) {
			perror("write_source: pwrite");
			exit(1);
		}
		atomic_store(&r.drained, i + 1);
	}
	pthread_join(tid, NULL);
	dt = bench_now() - t0;
	end_file(fd, path);
	return dt;
}

static double write_gpufile(const char *path, const char *src, size_t size)
{
	gpufile_t *h;
	double t0, dt;
	ssize_t n;
	int fd;

	if (gpufile_open(&h, path, "w")) {
		fprintf(stderr, "write_source: %s\n", gpufile_errmsg());
		exit(1);
	}
	t0 = bench_now();
	n = gpufile_pwrite(h, src, size, 0);
	dt = bench_now() - t0;
	if (n != (ssize_t)size) {
		fprintf(stderr,
		        "write_source: gpufile_pwrite returned %zd: %s\n", n,
		        gpufile_errmsg());
		exit(1);
	}
	gpufile_close(h);
	fd = open(path, O_RDONLY);
	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
	unlink(path);
	return dt;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : NULL;
	const size_t size = (size_t)(argc > 2 ? atol(argv[2]) : 4096) << 20;
	const int rounds = argc > 3 ? atoi(argv[3]) : 5;
	const size_t block = (size_t)(argc > 4 ? atol(argv[4]) : 1024) << 10;
	const size_t ahead = (size_t)(argc > 5 ? atol(argv[5]) : 4096) << 10;
	double *t[NWAYS];
	char path[4096];
	char *large, *small, *huge, *ring;

	if (!dir || !size || rounds < 1 || rounds > 99 || !block || !ahead) {
		fprintf(stderr,
		        "usage: write_source DIR [SIZE_MiB] [ROUNDS 1-99] "
		        "[BLOCK_KiB] [AHEAD_KiB]\n");
		return 2;
	}
	{
		const char *e = getenv("WRITE_SOURCE_PREALLOC");

		reserve = e && !strcmp(e, "1") ? size : 0;
	}
	snprintf(path, sizeof(path), "%s/write_source.%d.bin", dir,
	         (int)getpid());
	large = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
	small = aligned_alloc(4096, (block + 4095) / 4096 * 4096);
	huge = aligned_alloc(2 << 20,
	                     (size + (2 << 20) - 1) / (2 << 20) * (2 << 20));
	ring = aligned_alloc(4096, (block + 4095) / 4096 * 4096 * RING);
	if (huge)
		madvise(huge, (size + (2 << 20) - 1) / (2 << 20) * (2 << 20),
		        MADV_HUGEPAGE);
	for (int w = 0; w < NWAYS; w++)
		t[w] = calloc((size_t)rounds, sizeof(double));
	if (!large || !small || !huge || !ring || !t[NWAYS - 1]) {
		fprintf(stderr, "write_source: out of memory\n");
		return 1;
	}
	memset(large, 0x5a, size);
	memset(small, 0x5a, block);
	memset(huge, 0x5a, size);
	memset(ring, 0x5a, (block + 4095) / 4096 * 4096 * RING);
	/* Warm-up: a write of the whole size, so that the first timed write
	 * reuses page-cache pages a write freed, as every later one does. */
	write_blocks(path, small, size, block, 1, 0, AS_IS);
	printf("write_source: %zu MiB in %zu KiB pwrites, prefetch %zu KiB "
	       "ahead, %d rounds, %s (GB/s)\n",
	       size >> 20, block >> 10, ahead >> 10, rounds,
	       reserve ? "files reserved by fallocate first"
	               : "no reservation but gpufile's own");
	for (int r = 0; r < rounds; r++) {
		printf("round %d:", r + 1);
		for (int k = 0; k < NWAYS; k++) {
			const int w = (k + r) % NWAYS;
			double dt;

			if (w == GPUFILE)
				dt = write_gpufile(path, large, size);
			else if (w == BOUNCE)
				dt = write_bounced(path, large, size, block,
				                   ring);
			else
				dt = write_blocks(path,
				                  w == SMALL  ? small
				                  : w == HUGE ? huge
				                              : large,
				                  size, block, w == SMALL,
				                  w == LARGE_PF ? ahead : 0,
				                  w == SELF_PF ? PREFETCH_NEXT
				                  : w == TOUCH ? TOUCH_THIS
				                               : AS_IS);
			t[w][r] = dt;
		}
		for (int w = 0; w < NWAYS; w++)
			printf(" %s %.3f", names[w],
			       (double)size / t[w][r] / 1e9);
		printf("\n");
		fflush(stdout);
	}
	for (int w = 0; w < NWAYS; w++)
		qsort(t[w], (size_t)rounds, sizeof(double), bench_cmp_double);
	for (int w = 0; w < NWAYS; w++) {
		const double med = t[w][rounds / 2];

		printf("%-9s median %.3f GB/s, %.2fx small\n", names[w],
		       (double)size / med / 1e9, t[SMALL][rounds / 2] / med);
	}
	return 0;
}
