/*
 * The O_DIRECT descriptor is opened at its first use, not by gpufile_open
 * (paths/direct_fd.c), and direct_io=auto asks cachestat(2) before
 * mincore(2) which ranges are cached:
 *   - a handle read through the page cache (cached ranges, batches,
 *     direct_io=off) never opens it: one descriptor on the file;
 *   - a read that wants O_DIRECT after that opens it and reads the right
 *     bytes, as does direct_io=on, and gpufile_fd(h, 1) gives it;
 *   - threads that all use it first at once open it once;
 *   - the page cache is asked by cachestat where the kernel has it (no
 *     mincore), by mincore where it does not (ENOSYS), and a read past
 *     the end of a cached file is a cached read;
 *   - a host destination not yet in memory is faulted in before a batch
 *     reads into it (gpufile__populate_dest), and memory it cannot write
 *     is left to the read (-EFAULT, no crash).
 * Descriptors are counted in /proc/self/fd: no timing.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_SIZE (8u << 20)
#define SEED      41
#define THREADS   8

static const char *path;
static struct stat file_st;

/* Descriptors of this process on the test file: all, and those with
 * O_DIRECT. */
static void count_fds(int *all, int *direct)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	*all = *direct = 0;
	if (!d) {
		CHECK(0);
		return;
	}
	while ((e = readdir(d))) {
		struct stat st;
		int fd = atoi(e->d_name);

		if (e->d_name[0] == '.' || fd == dirfd(d) || fstat(fd, &st) ||
		    st.st_dev != file_st.st_dev || st.st_ino != file_st.st_ino)
			continue;
		(*all)++;
		if (fcntl(fd, F_GETFL) & O_DIRECT)
			(*direct)++;
	}
	closedir(d);
}

static void *aligned(size_t n)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, n))
		return NULL;
	memset(p, 0, n);
	return p;
}

/* Whether this file system takes O_DIRECT (tmpfs does not). */
static int direct_works(void)
{
	int fd = open(path, O_RDONLY | O_DIRECT);

	if (fd < 0)
		return 0;
	close(fd);
	return 1;
}

/* Read through the page cache, then with O_DIRECT on the same handle. */
static void test_buffered_then_direct(int have_direct)
{
	char *buf = aligned(FILE_SIZE);
	gpufile_t *h = NULL;
	gpufile_batch_t *b = NULL;
	gpufile_batch_entry_t e[2];
	int all, direct;

	CHECK_EQ(gpufile_config_set("direct_io", "auto"), 0);
	/* Every range cached, whatever the kernel evicted meanwhile. */
	gpufile__sys.cachestat = test_cachestat_all_cached;
	gpufile__sys.mincore = test_mincore_all_cached;
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h || !buf)
		goto out;
	count_fds(&all, &direct);
	CHECK_EQ(all, 1);
	CHECK_EQ(gpufile_pread(h, buf, FILE_SIZE, 0), (ssize_t)FILE_SIZE);
	CHECK_EQ(test_mismatch(buf, FILE_SIZE, SEED, 0), -1);
	e[0] = (gpufile_batch_entry_t){h, buf, 1 << 20, 1 << 20};
	e[1] = (gpufile_batch_entry_t){h, buf + (1 << 20), 4096, 0};
	CHECK_EQ(gpufile_batch_create(&b, 2), 0);
	CHECK_EQ(gpufile_batch_submit(b, e, 2), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), 2);
	CHECK_EQ(gpufile_batch_result(b, 0), 1 << 20);
	gpufile_batch_free(b);
	/* Read buffered, never opened with O_DIRECT. */
	count_fds(&all, &direct);
	CHECK_EQ(all, 1);
	CHECK_EQ(direct, 0);

	/* Cold now: O_DIRECT, opened by this read. */
	gpufile__sys.cachestat = test_cachestat_none_cached;
	gpufile__sys.mincore = test_mincore_none_cached;
	memset(buf, 0, FILE_SIZE);
	CHECK_EQ(gpufile_pread(h, buf, FILE_SIZE, 0), (ssize_t)FILE_SIZE);
	CHECK_EQ(test_mismatch(buf, FILE_SIZE, SEED, 0), -1);
	count_fds(&all, &direct);
	CHECK_EQ(all, have_direct ? 2 : 1);
	CHECK_EQ(direct, have_direct ? 1 : 0);
	if (have_direct) {
		CHECK(gpufile_fd(h, 1) >= 0);
		CHECK(fcntl(gpufile_fd(h, 1), F_GETFL) & O_DIRECT);
	} else {
		CHECK_EQ(gpufile_fd(h, 1), -ENOENT);
		CHECK_CONTAINS(gpufile_errmsg(), "O_DIRECT refused");
	}
	/* And again: the same descriptor, not another. */
	memset(buf, 0, FILE_SIZE);
	CHECK_EQ(gpufile_pread(h, buf, FILE_SIZE / 2, 4096),
	         (ssize_t)(FILE_SIZE / 2));
	CHECK_EQ(test_mismatch(buf, FILE_SIZE / 2, SEED, 4096), -1);
	count_fds(&all, &direct);
	CHECK_EQ(all, have_direct ? 2 : 1);
out:
	gpufile_close(h);
	count_fds(&all, &direct);
	CHECK_EQ(all, 0);
	gpufile__sys_reset();
	free(buf);
}

/* direct_io=on: the first read opens it; direct_io=off at the open: no
 * read ever does, and gpufile_fd says why. */
static void test_settings(int have_direct)
{
	char *buf = aligned(1 << 20);
	gpufile_t *h = NULL;
	int all, direct;

	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_open(&h, path, "r+"), 0);
	count_fds(&all, &direct);
	CHECK_EQ(all, 1);
	CHECK_EQ(gpufile_pread(h, buf, 1 << 20, 1 << 20), 1 << 20);
	CHECK_EQ(test_mismatch(buf, 1 << 20, SEED, 1 << 20), -1);
	count_fds(&all, &direct);
	CHECK_EQ(direct, have_direct ? 1 : 0);
	gpufile_close(h);
	h = NULL;

	CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_pread(h, buf, 1 << 20, 0), 1 << 20);
	CHECK_EQ(test_mismatch(buf, 1 << 20, SEED, 0), -1);
	count_fds(&all, &direct);
	CHECK_EQ(all, 1);
	CHECK_EQ(gpufile_fd(h, 1), -ENOENT);
	CHECK_CONTAINS(gpufile_errmsg(), "direct_io=off");
	gpufile_close(h);
	gpufile_config_reset();
	free(buf);
}

static gpufile_t *shared;
static pthread_barrier_t start;
static int got[THREADS];

static void *first_use(void *arg)
{
	int *out = arg;

	pthread_barrier_wait(&start);
	*out = gpufile_fd(shared, 1);
	return NULL;
}

/* THREADS threads ask for the descriptor at once: one is opened, and
 * every thread gets it. */
static void test_concurrent_first_use(int have_direct)
{
	pthread_t t[THREADS];
	int all, direct;

	CHECK_EQ(gpufile_open(&shared, path, "r"), 0);
	if (!shared)
		return;
	CHECK_EQ(pthread_barrier_init(&start, NULL, THREADS), 0);
	for (int i = 0; i < THREADS; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, first_use, &got[i]), 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&start);
	for (int i = 1; i < THREADS; i++)
		CHECK_EQ(got[i], got[0]);
	CHECK(have_direct ? got[0] >= 0 : got[0] == -ENOENT);
	count_fds(&all, &direct);
	CHECK_EQ(all, have_direct ? 2 : 1);
	CHECK_EQ(direct, have_direct ? 1 : 0);
	gpufile_close(shared);
	shared = NULL;
}

static atomic_int cachestat_calls, mincore_calls;
static int (*real_cachestat)(int, uint64_t, uint64_t, uint64_t *);

static int counting_cachestat(int fd, uint64_t off, uint64_t len,
                              uint64_t *cached)
{
	atomic_fetch_add(&cachestat_calls, 1);
	return real_cachestat(fd, off, len, cached);
}

static int counting_mincore(void *addr, size_t len, unsigned char *vec)
{
	atomic_fetch_add(&mincore_calls, 1);
	return test_mincore_all_cached(addr, len, vec);
}

/* Only the file's pages (the range cut at the end of the file) cached. */
static int cachestat_file_only(int fd, uint64_t off, uint64_t len,
                               uint64_t *cached)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t end = off + len;

	(void)fd;
	if (end > FILE_SIZE)
		end = FILE_SIZE;
	*cached = end > off ? (end - off + page - 1) / page : 0;
	return 0;
}

/* Which of cachestat and mincore direct_io=auto asks. */
static void test_cache_lookup(void)
{
	char *buf = aligned(2 * FILE_SIZE);
	gpufile_t *h = NULL;
	uint64_t dummy;
	int all, direct, have_cachestat;

	gpufile__sys_reset();
	have_cachestat =
	    gpufile__sys.cachestat(0, 0, 4096, &dummy) == 0 || errno != ENOSYS;
	real_cachestat = gpufile__sys.cachestat;
	CHECK_EQ(gpufile_config_set("direct_io", "auto"), 0);
	CHECK_EQ(gpufile_config_set("host_map_copy", "off"), 0);
	CHECK_EQ(gpufile_set_task_size(1 << 20), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h || !buf)
		goto out;
	gpufile__sys.cachestat = counting_cachestat;
	gpufile__sys.mincore = counting_mincore;
	CHECK_EQ(gpufile_pread(h, buf, FILE_SIZE, 0), (ssize_t)FILE_SIZE);
	CHECK_EQ(test_mismatch(buf, FILE_SIZE, SEED, 0), -1);
	if (have_cachestat) {
		CHECK(atomic_load(&cachestat_calls) >= 8);
		CHECK_EQ(atomic_load(&mincore_calls), 0);
	} else {
		printf("no cachestat(2) here: its part not run\n");
	}

	/* No cachestat (an older kernel): mincore tells, and the read is
	 * the same. */
	gpufile__sys.cachestat = test_cachestat_missing;
	atomic_store(&mincore_calls, 0);
	memset(buf, 0, FILE_SIZE);
	CHECK_EQ(gpufile_pread(h, buf, FILE_SIZE, 0), (ssize_t)FILE_SIZE);
	CHECK_EQ(test_mismatch(buf, FILE_SIZE, SEED, 0), -1);
	CHECK(atomic_load(&mincore_calls) > 0);
	gpufile_close(h);
	h = NULL;

	/* A read past the end of a cached file: its part in the file is
	 * cached, so it is a cached read (no O_DIRECT) that ends at the
	 * end of the file. */
	CHECK_EQ(gpufile_set_task_size(4u << 20), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		goto out;
	gpufile__sys.cachestat = cachestat_file_only;
	gpufile__sys.mincore = test_mincore_none_cached;
	CHECK_EQ(gpufile_pread(h, buf, 2 * FILE_SIZE, 2u << 20),
	         (ssize_t)(FILE_SIZE - (2u << 20)));
	CHECK_EQ(test_mismatch(buf, FILE_SIZE - (2u << 20), SEED, 2u << 20),
	         -1);
	count_fds(&all, &direct);
	CHECK_EQ(direct, 0);
out:
	gpufile_close(h);
	gpufile__sys_reset();
	gpufile_config_reset();
	free(buf);
}

/* gpufile__populate_dest: memory not yet in place is faulted in (as far
 * as the range goes), memory in place is left as it is, small ranges are
 * left to the read, and memory nobody may write is left alone. */
static void test_populate(void)
{
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);
	const size_t len = 64u << 10;
	char *m = mmap(NULL, 4 * len, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *ro =
	    mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	unsigned char vec[64];
	gpufile_t *h = NULL;
	gpufile_batch_t *b = NULL;
	gpufile_batch_entry_t e[2];
	int resident;

	if (m == MAP_FAILED || ro == MAP_FAILED || !gpufile__populate_works()) {
		printf("no MADV_POPULATE_WRITE here: populate part not run\n");
		goto out;
	}
	gpufile__populate_dest(m + 100, len);
	CHECK_EQ(mincore(m, 4 * len, vec), 0);
	resident = 0;
	for (size_t i = 0; i < 4 * len / page; i++)
		resident += vec[i] & 1;
	/* [m + 100, m + 100 + len): its 17 pages, nothing past them. */
	CHECK_EQ(resident, (int)((100 + len + page - 1) / page));
	CHECK(vec[0] & 1);
	/* Below GPUFILE__POPULATE_MIN: nothing. */
	gpufile__populate_dest(m + 3 * len, page);
	CHECK_EQ(mincore(m + 3 * len, page, vec), 0);
	CHECK(!(vec[0] & 1));
	/* Read-only memory: no signal, nothing written. */
	gpufile__populate_dest(ro, len);

	/* A batch into new memory, and into memory it may not write. */
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	if (!h)
		goto out;
	e[0] = (gpufile_batch_entry_t){h, m + 2 * len, len, 3 * len};
	e[1] = (gpufile_batch_entry_t){h, ro, len, 0};
	CHECK_EQ(gpufile_batch_create(&b, 2), 0);
	CHECK_EQ(gpufile_batch_submit(b, e, 2), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), 2);
	CHECK_EQ(gpufile_batch_result(b, 0), (ssize_t)len);
	CHECK_EQ(test_mismatch(m + 2 * len, len, SEED, 3 * len), -1);
	CHECK_EQ(gpufile_batch_result(b, 1), -EFAULT);
	gpufile_batch_free(b);
out:
	gpufile_close(h);
	if (m != MAP_FAILED)
		munmap(m, 4 * len);
	if (ro != MAP_FAILED)
		munmap(ro, len);
}

int main(void)
{
	int have_direct;

	path = test_path("lazy.bin");
	if (test_make_file(path, FILE_SIZE, SEED) || stat(path, &file_st))
		return 1;
	have_direct = direct_works();
	if (!have_direct)
		printf("O_DIRECT refused by this file system: its parts check "
		       "the refusal\n");
	test_buffered_then_direct(have_direct);
	test_settings(have_direct);
	test_concurrent_first_use(have_direct);
	test_cache_lookup();
	test_populate();
	gpufile_config_reset();
	test_cleanup();
	return test_finish("test_direct_lazy");
}
