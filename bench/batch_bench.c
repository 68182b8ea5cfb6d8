/*
 * The batch benchmark (issue 13 item 3): random reads from a warm file
 * into one buffer (device memory when a GPU is there, else host memory),
 *   batch   one gpufile_batch of all the reads;
 *   (a)     the same reads as gpufile_pread calls from 16 threads;
 *   (b)     fio randread into host memory, 16 jobs (with --fio PATH);
 * for 16,384 reads of 64 KiB and 65,536 reads of 4 KiB, printing one table
 * (GB/s, IOPS) with the ratios batch/(a) and batch/(b). The batch's bytes
 * are checked against the file once, outside the timing.
 *
 *   batch_bench FILE [--host] [--n64 N] [--n4 N] [--threads T] [--reps R]
 *                    [--fio PATH] [--fio-runtime S] [--verify-dir DIR]
 *
 * Public API only.
 */
#define _GNU_SOURCE
#include "bench_util.h"

#include <gpufile.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void die(const char *what)
{
	fprintf(stderr, "batch_bench: %s: %s\n", what, gpufile_errmsg());
	exit(1);
}

/* ---- (a): gpufile_pread from T threads ---- */

struct pread_job {
	gpufile_batch_entry_t *e;
	unsigned n, stride, first;
	int failed;
};

static void *pread_thread(void *arg)
{
	struct pread_job *j = arg;

	for (unsigned i = j->first; i < j->n; i += j->stride) {
		ssize_t got = gpufile_pread(j->e[i].file, j->e[i].buf,
		                            j->e[i].size, j->e[i].offset);
		if (got != (ssize_t)j->e[i].size)
			j->failed = 1;
	}
	return NULL;
}

static double run_preads(gpufile_batch_entry_t *e, unsigned n, unsigned nt)
{
	pthread_t tid[256];
	struct pread_job job[256];
	double t0 = bench_now();

	for (unsigned t = 0; t < nt; t++) {
		job[t] = (struct pread_job){e, n, nt, t, 0};
		pthread_create(&tid[t], NULL, pread_thread, &job[t]);
	}
	for (unsigned t = 0; t < nt; t++) {
		pthread_join(tid[t], NULL);
		if (job[t].failed) {
			fprintf(stderr, "batch_bench: a pread failed: %s\n",
			        gpufile_errmsg());
			exit(1);
		}
	}
	return bench_now() - t0;
}

static double run_batch(gpufile_batch_t *b, gpufile_batch_entry_t *e,
                        unsigned n)
{
	double t0 = bench_now();

	if (gpufile_batch_submit(b, e, n) < 0)
		die("gpufile_batch_submit");
	if (gpufile_batch_wait(b, -1) != (int)n)
		die("gpufile_batch_wait");
	return bench_now() - t0;
}

/* ---- (b): fio ---- */

/* fio randread, 16 jobs, into host memory; returns IOPS or -1. */
static double run_fio(const char *fio, const char *file, size_t bs,
                      unsigned jobs, unsigned runtime)
{
	char cmd[1024], line[8192];
	double iops = -1;
	FILE *p;

	snprintf(cmd, sizeof(cmd),
	         "%s --name=batchref --filename=%s --rw=randread --bs=%zu "
	         "--numjobs=%u --ioengine=psync --direct=0 --norandommap "
	         "--time_based --runtime=%u --group_reporting --minimal "
	         "--readonly 2>&1",
	         fio, file, bs, jobs, runtime);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	while (fgets(line, sizeof(line), p)) {
		/* Terse format: field 8 is the read IOPS. */
		char *f = line;
		int k = 1;

		if (strncmp(line, "3;", 2) != 0) {
			fputs(line, stderr);
			continue;
		}
		while (k < 8 && (f = strchr(f, ';')) != NULL) {
			f++;
			k++;
		}
		if (f)
			iops = strtod(f, NULL);
	}
	pclose(p);
	return iops;
}

/* ---- verification ---- */

/* Compares every entry's bytes with the file. dst is host memory, or a
 * device buffer written out to a file in dir first. */
static int verify(const char *file, gpufile_batch_entry_t *e, unsigned n,
                  char *dst, size_t total, int device, const char *dir)
{
	char tmp[4096];
	int fd = open(file, O_RDONLY);
	struct stat st;
	char *map, *got = dst;
	int bad = 0;

	if (fd < 0 || fstat(fd, &st) < 0)
		return perror(file), -1;
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return perror("mmap"), -1;
	if (device) {
		gpufile_t *w;
		int tfd;

		snprintf(tmp, sizeof(tmp), "%s/batch_bench_verify.%d", dir,
		         (int)getpid());
		if (gpufile_open(&w, tmp, "w+") < 0)
			die("opening the verify file");
		if (gpufile_pwrite(w, dst, total, 0) != (ssize_t)total)
			die("writing the device buffer out");
		gpufile_close(w);
		tfd = open(tmp, O_RDONLY);
		got = mmap(NULL, total, PROT_READ, MAP_SHARED, tfd, 0);
		close(tfd);
		unlink(tmp);
		if (got == MAP_FAILED)
			return perror("mmap"), -1;
	}
	for (unsigned i = 0; i < n && bad < 5; i++) {
		size_t at = (size_t)((char *)e[i].buf - dst);
		if (memcmp(got + at, map + e[i].offset, e[i].size) != 0) {
			fprintf(stderr, "batch_bench: entry %u differs\n", i);
			bad++;
		}
	}
	if (device)
		munmap(got, total);
	munmap(map, (size_t)st.st_size);
	return bad ? -1 : 0;
}

int main(int argc, char **argv)
{
	const char *file = NULL, *fio = NULL, *dir = "/dev/shm";
	unsigned n64 = 16384, n4 = 65536, threads = 16, reps = 5;
	unsigned fio_runtime = 5;
	int host = 0, device;
	gpufile_t *h;
	int64_t fsize;
	char *dst;
	size_t cap;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--host"))
			host = 1;
		else if (!strcmp(argv[i], "--n64") && i + 1 < argc)
			n64 = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--n4") && i + 1 < argc)
			n4 = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
			threads = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
			reps = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--fio") && i + 1 < argc)
			fio = argv[++i];
		else if (!strcmp(argv[i], "--fio-runtime") && i + 1 < argc)
			fio_runtime = (unsigned)atoi(argv[++i]);
		else if (!strcmp(argv[i], "--verify-dir") && i + 1 < argc)
			dir = argv[++i];
		else if (argv[i][0] != '-' && !file)
			file = argv[i];
		else {
			fprintf(stderr,
			        "usage: batch_bench FILE [--host] "
			        "[--n64 N] [--n4 N] [--threads T] "
			        "[--reps R] [--fio PATH] "
			        "[--fio-runtime S] [--verify-dir DIR]\n");
			return 2;
		}
	}
	if (!file || threads == 0 || threads > 256 || reps == 0) {
		fprintf(stderr, "batch_bench: FILE needed; threads 1-256\n");
		return 2;
	}
	if (gpufile_open(&h, file, "r") < 0)
		die("open");
	fsize = gpufile_size(h);
	if (fsize < (64 << 10))
		die("the file must hold at least 64 KiB");
	cap = (size_t)n64 * (64u << 10);
	if ((size_t)n4 * 4096 > cap)
		cap = (size_t)n4 * 4096;
	device = !host && gpufile_cuda_device_count() > 0;
	if (device) {
		if (gpufile_device_alloc(0, cap, (void **)&dst) < 0)
			die("gpufile_device_alloc");
	} else {
		dst = malloc(cap);
		if (!dst)
			return perror("malloc"), 1;
		memset(dst, 0, cap);
	}
	if (gpufile_warmup() < 0)
		die("gpufile_warmup");
	/* Warm the page cache: the whole file, once. */
	{
		char *tmp = malloc(64u << 20);
		for (int64_t off = 0; tmp && off < fsize; off += 64 << 20)
			if (gpufile_pread(h, tmp, 64u << 20, off) < 0)
				die("warming the file");
		free(tmp);
	}
	printf("file %s, %.2f GiB, warm; destination: %s memory; "
	       "%u threads for (a)\n",
	       file, (double)fsize / (1 << 30), device ? "device" : "host",
	       threads);
	printf("%-9s %8s | %10s %10s | %10s %10s | %10s %10s | %7s %7s\n",
	       "reads", "count", "batch GB/s", "IOPS", "(a) GB/s", "IOPS",
	       "(b) GB/s", "IOPS", "b/(a)", "b/(b)");

	static const size_t sizes[2] = {64u << 10, 4u << 10};
	const unsigned counts[2] = {n64, n4};
	int failed = 0;

	for (int c = 0; c < 2; c++) {
		const size_t bs = sizes[c];
		const unsigned n = counts[c];
		const uint64_t slots = (uint64_t)fsize / bs;
		gpufile_batch_entry_t *e = calloc(n ? n : 1, sizeof(*e));
		gpufile_batch_t *b;
		double tb = 1e30, ta = 1e30, fio_iops = -1;

		if (!e || n == 0)
			continue;
		for (unsigned i = 0; i < n; i++)
			e[i] = (gpufile_batch_entry_t){
			    h, dst + (size_t)i * bs, bs,
			    (int64_t)((next_rand() % slots) * bs)};
		if (gpufile_batch_create(&b, n) < 0)
			die("gpufile_batch_create");
		run_batch(b, e, n); /* first use: threads, pinned slots */
		if (verify(file, e, n, dst, (size_t)n * bs, device, dir)) {
			fprintf(stderr,
			        "batch_bench: %zu-byte batch: WRONG "
			        "BYTES\n",
			        bs);
			failed = 1;
		}
		for (unsigned r = 0; r < reps; r++) {
			double t = run_batch(b, e, n);
			if (t < tb)
				tb = t;
		}
		run_preads(e, n, threads);
		for (unsigned r = 0; r < reps; r++) {
			double t = run_preads(e, n, threads);
			if (t < ta)
				ta = t;
		}
		if (fio)
			fio_iops = run_fio(fio, file, bs, 16, fio_runtime);
		{
			const double bytes = (double)n * (double)bs;
			const double bi = n / tb, ai = n / ta;
			char fb[32] = "-", fi[32] = "-", rb[32] = "-";

			if (fio_iops > 0) {
				snprintf(fb, sizeof(fb), "%10.2f",
				         fio_iops * (double)bs / 1e9);
				snprintf(fi, sizeof(fi), "%10.0f", fio_iops);
				snprintf(rb, sizeof(rb), "%7.2f",
				         bi / fio_iops);
			}
			printf("%-9s %8u | %10.2f %10.0f | %10.2f %10.0f | "
			       "%10s %10s | %7.2f %7s\n",
			       bs == 4096 ? "4 KiB" : "64 KiB", n,
			       bytes / tb / 1e9, bi, bytes / ta / 1e9, ai, fb,
			       fi, bi / ai, rb);
		}
		gpufile_batch_free(b);
		free(e);
	}
	printf("goals: batch >= 3x (a), >= 0.8x (b); bytes %s\n",
	       failed ? "WRONG" : "verified");
	if (device)
		gpufile_device_free(dst);
	else
		free(dst);
	gpufile_close(h);
	return failed;
}
