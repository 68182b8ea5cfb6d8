/*
 * The system calls a batch of host reads makes per entry (batch.c):
 *   - the new memory of host entries is faulted in with one
 *     MADV_POPULATE_WRITE per run of entries on following pages (fsspec's
 *     cat_ranges reads 10,000 new 64 KiB bytes objects, allocated one
 *     after the other), not a mincore() and a madvise() per entry, and
 *     never a page that no entry of the run writes into;
 *   - gpufile_batch_result and gpufile_batch_errmsg, called once per
 *     entry, make no system call (they asked getpid() each, for fork).
 * The calls are counted by defining them here: the test links the static
 * library, whose calls of mincore, madvise and getpid land on these.
 * Both backends of the batch workers: io_uring, and plain preads.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef GPUFILE_HAVE_LIBURING
#include <liburing.h>
#endif

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define SEED      91
#define FILE_SIZE (8u << 20)
#define RANGE     (64u << 10)
#define NRANGES   64u
/* A bytes object's header and malloc's between two ranges' bytes. */
#define STRIDE (RANGE + 48u)

static atomic_long n_populate, n_getpid;

int mincore(void *addr, size_t len, unsigned char *vec)
{
	return (int)syscall(SYS_mincore, addr, len, vec);
}

int madvise(void *addr, size_t len, int advice)
{
	if (advice == MADV_POPULATE_WRITE)
		atomic_fetch_add(&n_populate, 1);
	return (int)syscall(SYS_madvise, addr, len, advice);
}

pid_t getpid(void)
{
	atomic_fetch_add(&n_getpid, 1);
	return (pid_t)syscall(SYS_getpid);
}

#ifdef GPUFILE_HAVE_LIBURING
static int no_ring(unsigned entries, struct io_uring *ring, unsigned flags)
{
	(void)entries;
	(void)ring;
	(void)flags;
	return -ENOSYS;
}
#endif

/* New memory, not faulted in: len bytes mapped, none touched, in 4 KiB
 * pages (where transparent huge pages are "always", a fault in the first
 * run would bring in the pages after it too). */
static char *fresh(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "mmap of %zu bytes: %s\n", len,
		        strerror(errno));
		exit(1);
	}
	madvise(p, len, MADV_NOHUGEPAGE); /* not there: 4 KiB pages anyway */
	return p;
}

/* Pages of [p, p+len) in memory. */
static size_t resident(char *p, size_t len)
{
	const size_t pages = (len + 4095) / 4096;
	unsigned char *vec = calloc(pages, 1);
	size_t n = 0;

	CHECK(vec != NULL);
	if (!vec || mincore(p, len, vec))
		return (size_t)-1;
	for (size_t i = 0; i < pages; i++)
		n += vec[i] & 1;
	free(vec);
	return n;
}

/* Submits the n entries and waits; each must have read its whole range
 * (file offset = its offset). */
static void run(gpufile_batch_entry_t *e, unsigned n)
{
	gpufile_batch_t *b = NULL;

	CHECK_EQ(gpufile_batch_create(&b, n), 0);
	CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
	for (unsigned i = 0; i < n; i++) {
		CHECK_EQ(gpufile_batch_result(b, i), (ssize_t)e[i].size);
		CHECK_EQ(test_mismatch(e[i].buf, e[i].size, SEED,
		                       (uint64_t)e[i].offset),
		         -1);
	}
	gpufile_batch_free(b);
}

/* 64 ranges into new memory, one after another as a heap gives them:
 * one populate for the run (the round), not one per entry. */
static void test_adjacent(gpufile_t *f)
{
	const size_t len = NRANGES * STRIDE + 4096;
	char *mem = fresh(len);
	gpufile_batch_entry_t e[NRANGES];

	for (unsigned i = 0; i < NRANGES; i++)
		e[i] = (gpufile_batch_entry_t){
		    .file = f,
		    .buf = mem + 32 + (size_t)i * STRIDE,
		    .size = RANGE,
		    .offset = (int64_t)((i * 37u) % 120u) * RANGE};
	atomic_store(&n_populate, 0);
	run(e, NRANGES);
	fprintf(stderr, "adjacent: %ld populate calls for %u entries\n",
	        atomic_load(&n_populate), NRANGES);
	CHECK(atomic_load(&n_populate) >= 1);
	CHECK(atomic_load(&n_populate) <= 2);
	munmap(mem, len);
}

/* Two runs with untouched pages between them: two populates, and the
 * pages between stay out of memory. */
static void test_gap(gpufile_t *f)
{
	const size_t len = 2u << 20;
	char *mem = fresh(len);
	gpufile_batch_entry_t e[8];

	for (unsigned i = 0; i < 8; i++)
		e[i] = (gpufile_batch_entry_t){
		    .file = f,
		    .buf = mem + (i < 4 ? 0 : (1u << 20)) +
		           (size_t)(i % 4) * RANGE,
		    .size = RANGE,
		    .offset = (int64_t)(i + 3) * RANGE};
	atomic_store(&n_populate, 0);
	run(e, 8);
	CHECK_EQ(atomic_load(&n_populate), 2);
	/* 4 x 64 KiB from 0 and from 1 MiB: 256 KiB to 1 MiB untouched. */
	CHECK_EQ(resident(mem + (256u << 10), 768u << 10), 0);
	CHECK_EQ(resident(mem + (1u << 20) + (256u << 10), 768u << 10), 0);
	munmap(mem, len);
}

/* A result and a message per entry: no system call each. */
static void test_results(gpufile_t *f)
{
	static char buf[NRANGES][4096];
	gpufile_batch_entry_t e[NRANGES];
	gpufile_batch_t *b = NULL;

	for (unsigned i = 0; i < NRANGES; i++)
		e[i] = (gpufile_batch_entry_t){.file = f,
		                               .buf = buf[i],
		                               .size = sizeof(buf[i]),
		                               .offset = (int64_t)i * 4096};
	CHECK_EQ(gpufile_batch_create(&b, NRANGES), 0);
	CHECK_EQ(gpufile_batch_submit(b, e, NRANGES), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)NRANGES);
	atomic_store(&n_getpid, 0);
	for (unsigned i = 0; i < NRANGES; i++) {
		CHECK_EQ(gpufile_batch_result(b, i), 4096);
		CHECK(gpufile_batch_errmsg(b, i) == NULL);
	}
	CHECK_EQ(atomic_load(&n_getpid), 0);
	/* Out of range: still an error naming it. */
	CHECK_EQ(gpufile_batch_result(b, NRANGES), -EINVAL);
	CHECK(gpufile_batch_errmsg(b, NRANGES) == NULL);
	gpufile_batch_free(b);
}

int main(void)
{
	const char *path = test_path("batch-populate");
	gpufile_t *f = NULL;

	CHECK_EQ(test_make_file(path, FILE_SIZE, SEED), 0);
	CHECK_EQ(gpufile_open(&f, path, "r"), 0);
	if (!f)
		return test_finish("test_batch_populate");
	/* Its probe is one populate of its own: before the counts. */
	if (!gpufile__populate_works()) {
		fprintf(stderr, "MADV_POPULATE_WRITE is not available (Linux "
		                "< 5.14): populate counts not checked\n");
		test_results(f);
		gpufile_close(f);
		return test_finish("test_batch_populate");
	}
	for (int uring = 0; uring < 2; uring++) {
		gpufile__uring_reset();
#ifdef GPUFILE_HAVE_LIBURING
		if (!uring)
			gpufile__uring.queue_init = no_ring;
#else
		if (uring)
			break;
#endif
		fprintf(stderr, "-- %s\n", uring ? "io_uring" : "preads");
		test_adjacent(f);
		test_gap(f);
		test_results(f);
	}
	gpufile__uring_reset();
	CHECK_EQ(gpufile_close(f), 0);
	return test_finish("test_batch_populate");
}
