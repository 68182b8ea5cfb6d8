/*
 * Page-cache controls: gpufile_page_cache_info() counts exactly the bytes
 * of a range that lie in cached pages, by cachestat(2) and by mincore(2)
 * alike; gpufile_drop_page_cache() flushes dirty pages and drops them;
 * gpufile_drop_system_page_cache() writes drop_caches as root and refuses
 * anyone else with a message saying why.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const int methods[] = {GPUFILE__PC_CACHESTAT, GPUFILE__PC_MINCORE};
static const char *const method_names[] = {"cachestat", "mincore"};

/* info by both methods; they must agree. Returns cached bytes. */
static uint64_t cached(gpufile_t *h, const char *path, int64_t off, size_t size,
                       uint64_t want_total)
{
	uint64_t c[2] = {0, 0}, t[2] = {0, 0};

	for (int m = 0; m < 2; m++) {
		int rc;

		gpufile__page_cache_method = methods[m];
		rc = gpufile_page_cache_info(h, path, off, size, &c[m], &t[m]);
		if (rc == -ENOSYS && methods[m] == GPUFILE__PC_CACHESTAT) {
			/* An old kernel: only mincore can answer. */
			c[m] = (uint64_t)-1;
			continue;
		}
		if (rc)
			fprintf(stderr, "%s: %s\n", method_names[m],
			        gpufile_errmsg());
		CHECK_EQ(rc, 0);
		CHECK_EQ(t[m], want_total);
	}
	gpufile__page_cache_method = GPUFILE__PC_AUTO;
	if (c[0] != (uint64_t)-1)
		CHECK_EQ(c[0], c[1]);
	return c[1];
}

static void test_counts(void)
{
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);
	const size_t size = (1u << 20) + 100;
	const char *path = test_path("counts.bin");
	char *buf = test_malloc(size);
	gpufile_t *h;
	int fd;

	CHECK_EQ(test_make_file(path, size, 3), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	CHECK_EQ(gpufile_pread(h, buf, size, 0), (long long)size);
	/* All of it was just read through the page cache. */
	CHECK_EQ(cached(h, NULL, 0, 0, size), size);
	CHECK_EQ(cached(NULL, path, 100, 5000, 5000), 5000);
	/* Past the end: nothing; across it: clipped. */
	CHECK_EQ(cached(h, NULL, (int64_t)size + 10, 100, 0), 0);
	CHECK_EQ(cached(h, NULL, (int64_t)size - 50, 1000, 50), 50);
	/* A size whose end passes 2^64 is "to the end", not a wrapped end
	 * before the offset (total 0). */
	CHECK_EQ(cached(h, NULL, 4096, SIZE_MAX, size - 4096), size - 4096);
	CHECK_EQ(cached(h, NULL, 1, SIZE_MAX - 1, size - 1), size - 1);

	CHECK_EQ(gpufile_drop_page_cache(h, 0, 0), 0);
	CHECK_EQ(cached(h, NULL, 0, 0, size), 0);

	/* Bring back exactly page 2 (no readahead: FADV_RANDOM), then ask
	 * about ranges that hold a part of it. */
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	CHECK_EQ(posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM), 0);
	CHECK_EQ(pread(fd, buf, page, 2 * (off_t)page), (long long)page);
	close(fd);
	CHECK_EQ(cached(h, NULL, 0, 0, size), page);
	CHECK_EQ(cached(h, NULL, 2 * (int64_t)page + 100, 100, 100), 100);
	/* 108 bytes of [2p - 92, 2p + 108) are in page 2. */
	CHECK_EQ(cached(h, NULL, 2 * (int64_t)page - 92, 200, 200), 108);
	CHECK_EQ(cached(h, NULL, 0, 2 * page, 2 * page), 0);
	CHECK_EQ(cached(h, NULL, (int64_t)page + 1, 3 * page, 3 * page), page);
	CHECK_EQ(gpufile_close(h), 0);

	/* A write-only handle ("a"; "w" below) counts the same: mincore
	 * maps the file PROT_READ, which its descriptor cannot give (it
	 * failed with EACCES), so the mapping is made from a read-only
	 * reopen of it. */
	CHECK_EQ(gpufile_open(&h, path, "a"), 0);
	CHECK_EQ(cached(h, NULL, 0, 0, size), page);
	CHECK_EQ(cached(h, NULL, 2 * (int64_t)page - 92, 200, 200), 108);
	CHECK_EQ(gpufile_close(h), 0);
	free(buf);
}

/* A "w" handle on a file it has just written: its counts are those of
 * the path (the same pages), by both methods. */
static void test_write_only(void)
{
	const size_t len = 3 * (size_t)sysconf(_SC_PAGESIZE) + 10;
	const char *path = test_path("written.bin");
	char *buf = test_malloc(len);
	uint64_t by_path;
	gpufile_t *h;

	test_fill(buf, len, 7, 0);
	CHECK_EQ(gpufile_open(&h, path, "w"), 0);
	if (!h) {
		free(buf);
		return;
	}
	CHECK_EQ(gpufile_pwrite(h, buf, len, 0), (long long)len);
	by_path = cached(NULL, path, 0, 0, len);
	CHECK_EQ(cached(h, NULL, 0, 0, len), by_path);
	CHECK_EQ(gpufile_close(h), 0);
	free(buf);
}

/* Dirty pages are flushed before the drop: DONTNEED alone keeps them. */
static void test_drop_dirty(void)
{
	const size_t size = 256u << 10;
	const char *path = test_path("dirty.bin");
	char *buf = test_malloc(size);
	gpufile_t *h;

	test_fill(buf, size, 5, 0);
	CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);
	CHECK_EQ(gpufile_open(&h, path, "w+"), 0);
	CHECK_EQ(gpufile_pwrite(h, buf, size, 0), (long long)size);
	CHECK_EQ(cached(h, NULL, 0, 0, size), size);
	CHECK_EQ(gpufile_drop_page_cache(h, 0, 0), 0);
	CHECK_EQ(cached(h, NULL, 0, 0, size), 0);
	/* The bytes reached the file. */
	memset(buf, 0, size);
	CHECK_EQ(gpufile_pread(h, buf, size, 0), (long long)size);
	CHECK_EQ(test_mismatch(buf, size, 5, 0), -1);
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_config_reset();
	free(buf);
}

static void test_errors(void)
{
	uint64_t c, t;
	gpufile_t *h;
	const char *missing = test_path("missing.bin");

	CHECK_EQ(gpufile_page_cache_info(NULL, NULL, 0, 0, &c, &t), -EINVAL);
	/* Not regular files: a clear error, and no wait for a FIFO writer. */
	CHECK_EQ(mkfifo(test_path("fifo"), 0600), 0);
	CHECK_EQ(gpufile_page_cache_info(NULL, test_path("fifo"), 0, 0, &c, &t),
	         -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "not a regular file");
	CHECK_EQ(gpufile_page_cache_info(NULL, test_dir(), 0, 0, &c, &t),
	         -EINVAL);
	CHECK_EQ(gpufile_page_cache_info(NULL, missing, 0, 0, &c, &t), -ENOENT);
	CHECK_CONTAINS(gpufile_errmsg(), "missing.bin");
	CHECK_EQ(test_make_file(test_path("e.bin"), 4096, 1), 0);
	CHECK_EQ(gpufile_open(&h, test_path("e.bin"), "r"), 0);
	CHECK_EQ(gpufile_page_cache_info(h, test_path("e.bin"), 0, 0, &c, &t),
	         -EINVAL);
	CHECK_EQ(gpufile_page_cache_info(h, NULL, -1, 0, &c, &t), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "e.bin");
	CHECK_EQ(gpufile_page_cache_info(h, NULL, 0, 0, NULL, &t), -EINVAL);
	CHECK_EQ(gpufile_drop_page_cache(h, -4, 0), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "e.bin");
	CHECK_EQ(gpufile_drop_page_cache(NULL, 0, 0), -EINVAL);
	CHECK_EQ(gpufile_close(h), 0);
}

/* Never the real drop_caches: a file of the test's own stands in. */
static void test_system_drop(void)
{
	const char *fake = test_path("drop_caches");
	size_t len;
	char *text;
	pid_t pid;
	int status;

	CHECK_EQ(test_make_file(fake, 0, 0), 0);
	gpufile__drop_caches_path = fake;
	if (geteuid() == 0) {
		CHECK_EQ(gpufile_drop_system_page_cache(1), 0);
		text = test_read_file(fake, &len);
		CHECK(text && len == 2 && memcmp(text, "3\n", 2) == 0);
		free(text);
		CHECK_EQ(gpufile_drop_system_page_cache(0), 0);
		text = test_read_file(fake, &len);
		CHECK(text && len == 2 && memcmp(text, "1\n", 2) == 0);
		free(text);
		/* A file that cannot be opened: the error names it. */
		gpufile__drop_caches_path = test_path("no/such/dir");
		CHECK_EQ(gpufile_drop_system_page_cache(0), -ENOENT);
		CHECK_CONTAINS(gpufile_errmsg(), "no/such/dir");
		gpufile__drop_caches_path = fake;
	}
	/* Not root: refused before anything is written. */
	pid = fork();
	if (pid == 0) {
		int ok = 1;

		if (geteuid() == 0 && setresuid(65534, 65534, 65534) != 0)
			_exit(TEST_SKIP);
		ok &= gpufile_drop_system_page_cache(1) == -EPERM;
		ok &= strstr(gpufile_errmsg(), "needs root") != NULL;
		ok &= strstr(gpufile_errmsg(), fake) != NULL;
		_exit(ok ? 0 : 1);
	}
	CHECK(pid > 0);
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) != 1);
	gpufile__drop_caches_path = "/proc/sys/vm/drop_caches";
}

/* gpufile cache FILE --drop --json reports the drop; a missing file is
 * exit status 1 with its name. */
static void test_cli(void)
{
	const char *cli = getenv("GPUFILE_CLI");
	const char *path = test_path("cli.bin");
	char cmd[1024], out[4096];
	size_t n;
	FILE *p;

	if (!cli) {
		fprintf(stderr, "no CLI (GPUFILE_CLI): CLI part skipped\n");
		return;
	}
	CHECK_EQ(test_make_file(path, 100000, 9), 0);
	snprintf(cmd, sizeof(cmd), "%s cache %s --drop --json", cli, path);
	p = popen(cmd, "r");
	CHECK(p != NULL);
	n = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
	out[n] = 0;
	CHECK_EQ(p ? pclose(p) : -1, 0);
	CHECK_CONTAINS(out, "\"total_bytes\": 100000");
	CHECK_CONTAINS(out, "\"after_drop\": {\n    \"cached_bytes\": 0,");
	snprintf(cmd, sizeof(cmd), "%s cache %s 2>&1", cli,
	         test_path("absent.bin"));
	p = popen(cmd, "r");
	CHECK(p != NULL);
	n = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
	out[n] = 0;
	CHECK_EQ(p ? WEXITSTATUS(pclose(p)) : -1, 1);
	CHECK_CONTAINS(out, "absent.bin");
}

/* As nobody, root's file read-only through a handle root opened: the
 * kernel does not show us its page cache (cachestat refuses; mincore
 * would call every page cached), so both methods are -EPERM saying why,
 * never a count. */
static void test_not_owner(void)
{
	const char *path = test_path("not_owner.bin");
	pid_t pid;
	int st = 0;

	if (geteuid() != 0) {
		fprintf(stderr, "not root: the not-owner case skipped\n");
		return;
	}
	CHECK_EQ(test_make_file(path, 1u << 20, 5), 0);
	CHECK_EQ(chmod(path, 0644), 0);
	pid = fork();
	if (pid == 0) {
		uint64_t c = 0, t = 0;
		gpufile_t *h = NULL;

		if (gpufile_open(&h, path, "r"))
			_exit(2);
		if (test_become_nobody())
			_exit(9);
		for (int m = 0; m < 2; m++) {
			int rc;

			gpufile__page_cache_method = methods[m];
			rc = gpufile_page_cache_info(h, NULL, 0, 0, &c, &t);
			if (rc == -ENOSYS &&
			    methods[m] == GPUFILE__PC_CACHESTAT)
				continue; /* an old kernel */
			/* Linux 6.5-6.13 tells anyone by cachestat. */
			if (rc == 0 && methods[m] == GPUFILE__PC_CACHESTAT)
				continue;
			if (rc != -EPERM ||
			    !strstr(gpufile_errmsg(), "neither owns the file "
			                              "nor may write it") ||
			    !strstr(gpufile_errmsg(), path))
				_exit(3 + m);
		}
		_exit(0);
	}
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	fprintf(stderr, "not the owner: status 0x%x\n", st);
}

int main(void)
{
	test_counts();
	test_write_only();
	test_not_owner();
	test_drop_dirty();
	test_errors();
	test_system_drop();
	test_cli();
	test_cleanup();
	return test_finish("test_page_cache");
}
