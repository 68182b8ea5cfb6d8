#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <stdarg.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int test_failures;
static char dir[512];

const char *test_dir(void)
{
	if (!dir[0]) {
		const char *base = getenv("GPUFILE_TEST_DIR");
		char tmpl[512];

		if (!base || !*base)
			base = "/tmp";
		mkdir(base, 0755);
		snprintf(tmpl, sizeof(tmpl), "%s/gpufile-test-XXXXXX", base);
		if (!mkdtemp(tmpl)) {
			perror("mkdtemp");
			exit(1);
		}
		snprintf(dir, sizeof(dir), "%s", tmpl);
	}
	return dir;
}

const char *test_path(const char *name)
{
	static char bufs[8][640];
	static int next;
	char *p = bufs[next++ % 8];

	snprintf(p, sizeof(bufs[0]), "%s/%s", test_dir(), name);
	return p;
}

void test_fill(void *buf, size_t len, uint64_t seed, uint64_t offset)
{
	unsigned char *p = buf;

	for (size_t i = 0; i < len; i++) {
		uint64_t x = (offset + i) * 0x9E3779B97F4A7C15ull ^ seed;
		x ^= x >> 29;
		p[i] = (unsigned char)(x ^ (x >> 17));
	}
}

static int mincore_all(size_t len, unsigned char *vec, int cached)
{
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);

	memset(vec, cached, (len + page - 1) / page);
	return 0;
}

int test_mincore_all_cached(void *addr, size_t len, unsigned char *vec)
{
	(void)addr;
	return mincore_all(len, vec, 1);
}

int test_mincore_none_cached(void *addr, size_t len, unsigned char *vec)
{
	(void)addr;
	return mincore_all(len, vec, 0);
}

int test_cachestat_all_cached(int fd, uint64_t off, uint64_t len,
                              uint64_t *cached)
{
	const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	(void)fd;
	(void)off;
	*cached = (len + page - 1) / page;
	return 0;
}

int test_cachestat_none_cached(int fd, uint64_t off, uint64_t len,
                               uint64_t *cached)
{
	(void)fd;
	(void)off;
	(void)len;
	*cached = 0;
	return 0;
}

int test_cachestat_missing(int fd, uint64_t off, uint64_t len, uint64_t *cached)
{
	(void)fd;
	(void)off;
	(void)len;
	(void)cached;
	errno = ENOSYS;
	return -1;
}

int test_make_file(const char *path, size_t len, uint64_t seed)
{
	const size_t chunk = 1 << 20;
	unsigned char *buf = malloc(chunk);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	size_t done = 0;

	if (fd < 0 || !buf) {
		free(buf);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	while (done < len) {
		size_t n = len - done < chunk ? len - done : chunk;
		test_fill(buf, n, seed, done);
		if (write(fd, buf, n) != (ssize_t)n) {
			close(fd);
			free(buf);
			return -1;
		}
		done += n;
	}
	free(buf);
	return close(fd);
}

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static char nobody_dir[64];

void test_cleanup(void)
{
	if (dir[0])
		nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	dir[0] = '\0';
	if (nobody_dir[0])
		nftw(nobody_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	nobody_dir[0] = '\0';
}

int test_in_ci(void)
{
	const char *ci = getenv("CI");

	return ci && *ci && strcmp(ci, "0") != 0 && strcmp(ci, "false") != 0;
}

int test_missing(const char *test, const char *what)
{
	if (test_in_ci()) {
		fprintf(stderr,
		        "%s: %s: FAILED: under CI (CI=%s) it must be there "
		        "(scripts/deps.sh or scripts/test.sh installs it)\n",
		        test, what, getenv("CI"));
		return 1;
	}
	fprintf(stderr, "%s: %s: skipped\n", test, what);
	return TEST_SKIP;
}

const char *test_nobody_dir(void)
{
	if (!nobody_dir[0]) {
		char tmpl[] = "/tmp/gpufile-nobody-XXXXXX";

		if (!mkdtemp(tmpl) || chmod(tmpl, 0711) != 0) {
			fprintf(stderr, "%s: %s\n", tmpl, strerror(errno));
			return NULL;
		}
		snprintf(nobody_dir, sizeof(nobody_dir), "%s", tmpl);
	}
	return nobody_dir;
}

/* Copies from to to (created with mode); 0 or -1, the reason printed. */
static int copy_file(const char *from, const char *to, mode_t mode)
{
	size_t len;
	void *data = test_read_file(from, &len);
	int fd = data ? open(to, O_WRONLY | O_CREAT | O_TRUNC, mode) : -1;
	int ok = fd >= 0 && write(fd, data, len) == (ssize_t)len;

	if (fd >= 0 && (close(fd) != 0 || chmod(to, mode) != 0))
		ok = 0;
	if (!ok)
		fprintf(stderr, "copy %s to %s: %s\n", from, to,
		        strerror(errno));
	free(data);
	return ok ? 0 : -1;
}

const char *test_nobody_cli(void)
{
	static char script[128];
	const char *cli = test_cli_path(), *d, *slash;
	char to[128], *lib = NULL;
	FILE *f;
	int rc;

	if (script[0] && access(script, X_OK) == 0)
		return script;
	if (!cli || !(d = test_nobody_dir()))
		return NULL;
	snprintf(to, sizeof(to), "%s/gpufile", d);
	if (copy_file(cli, to, 0755))
		return NULL;
	/* The build's tool finds its library by an absolute RUNPATH into
	 * the build folder, which nobody may not reach. */
	slash = strrchr(cli, '/');
	if (asprintf(&lib, "%.*slibgpufile.so.0",
	             slash ? (int)(slash + 1 - cli) : 0, cli) < 0)
		return NULL;
	snprintf(to, sizeof(to), "%s/libgpufile.so.0", d);
	rc = access(lib, R_OK) == 0 ? copy_file(lib, to, 0644) : 0;
	free(lib);
	if (rc)
		return NULL;
	snprintf(script, sizeof(script), "%s/gpufile.sh", d);
	f = fopen(script, "w");
	rc = !f || fprintf(f,
	                   "#!/bin/sh\n"
	                   "LD_LIBRARY_PATH=%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_"
	                   "PATH}\nexport LD_LIBRARY_PATH\n"
	                   "exec %s/gpufile \"$@\"\n",
	                   d, d) < 0;
	if ((f && fclose(f) != 0) || rc || chmod(script, 0755) != 0) {
		fprintf(stderr, "%s: %s\n", script, strerror(errno));
		script[0] = '\0';
		return NULL;
	}
	return script;
}

int test_finish(const char *name)
{
	test_cleanup();
	if (test_failures) {
		fprintf(stderr, "%s: %d check(s) failed\n", name,
		        test_failures);
		return 1;
	}
	printf("%s: ok\n", name);
	return 0;
}

long long test_mismatch(const void *buf, size_t len, uint64_t seed,
                        uint64_t offset)
{
	const unsigned char *p = buf;
	unsigned char want[4096];

	for (size_t i = 0; i < len; i += sizeof(want)) {
		size_t n = len - i < sizeof(want) ? len - i : sizeof(want);

		test_fill(want, n, seed, offset + i);
		if (memcmp(p + i, want, n) != 0) {
			for (size_t j = 0; j < n; j++)
				if (p[i + j] != want[j])
					return (long long)(i + j);
		}
	}
	return -1;
}

long long test_mismatch_byte(const void *buf, size_t len, unsigned char c)
{
	const unsigned char *p = buf;

	for (size_t i = 0; i < len; i++)
		if (p[i] != c)
			return (long long)i;
	return -1;
}

void *test_malloc(size_t len)
{
	void *p = malloc(len ? len : 1);

	if (!p) {
		fprintf(stderr, "out of memory allocating %zu bytes\n", len);
		exit(1);
	}
	return p;
}

void *test_read_file(const char *path, size_t *len)
{
	struct stat st;
	char *buf;
	size_t done = 0;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return NULL;
	}
	buf = test_malloc((size_t)st.st_size);
	while (done < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + done, (size_t)st.st_size - done);
		if (n <= 0) {
			free(buf);
			close(fd);
			return NULL;
		}
		done += (size_t)n;
	}
	close(fd);
	*len = done;
	return buf;
}

void test_sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) < 0)
		;
}

/* ---- the gpufile tool ---- */

const char *test_cli_path(void)
{
	const char *cli = getenv("GPUFILE_CLI");

	return cli && access(cli, X_OK) == 0 ? cli : NULL;
}

gpufile_stats_t test_stats_self(void)
{
	gpufile_stats_t st;

	GPUFILE_INIT(st);
	CHECK_EQ(gpufile_stats_self(&st), 0);
	return st;
}

int test_become_nobody(void)
{
	return setgroups(0, NULL) || setresgid(65534, 65534, 65534) ||
	               setresuid(65534, 65534, 65534)
	           ? -1
	           : 0;
}

int test_cli_run(char *out, size_t len, const char *fmt, ...)
{
	const char *cli = test_cli_path();
	char args[2048], cmd[4096];
	size_t n = 0;
	va_list ap;
	FILE *p;
	int status;

	if (!cli || len == 0)
		return -1;
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "%s %s 2>&1", cli, args);
	fflush(NULL);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	/* Read to the end even past len, so the tool never blocks on a full
	 * pipe. */
	for (;;) {
		char chunk[4096];
		size_t got = fread(chunk, 1, sizeof(chunk), p);

		if (got == 0)
			break;
		for (size_t i = 0; i < got && n + 1 < len; i++)
			out[n++] = chunk[i];
	}
	out[n] = '\0';
	status = pclose(p);
	if (status < 0)
		return -1;
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

void test_make_st_u8(const char *path, const char *name, int value)
{
	static const char pad[] = "       "; /* at most 7 */
	unsigned char data[8];
	char *header = NULL;
	uint64_t len;
	FILE *f;
	int n = asprintf(&header,
	                 "{\"%s\":{\"dtype\":\"U8\",\"shape\":[8],"
	                 "\"data_offsets\":[0,8]}}",
	                 name);

	CHECK(n > 0);
	if (n <= 0)
		return;
	/* The header padded with spaces to a multiple of 8 bytes. */
	len = ((uint64_t)n + 7) & ~(uint64_t)7;
	memset(data, value, sizeof(data));
	f = fopen(path, "wb");
	CHECK(f != NULL);
	if (f) {
		CHECK(fwrite(&len, 8, 1, f) == 1);
		CHECK(fwrite(header, 1, (size_t)n, f) == (size_t)n);
		CHECK(fwrite(pad, 1, len - (uint64_t)n, f) ==
		      len - (uint64_t)n);
		CHECK(fwrite(data, 1, 8, f) == 8);
		CHECK(fclose(f) == 0);
	}
	free(header);
}

int test_cli_fake_driver_begin(const char *part, char **saved)
{
	const char *cli = test_cli_path(),
	           *slash = cli ? strrchr(cli, '/') : NULL;
	const char *old = getenv("LD_LIBRARY_PATH");
	char *lib = NULL, *driver = NULL;
	int rc = -1;

	*saved = NULL;
	if (slash &&
	    asprintf(&lib, "%.*s/tests/fake_libcuda/lib", (int)(slash - cli),
	             cli) > 0 &&
	    asprintf(&driver, "%s/libcuda.so.1", lib) > 0 &&
	    access(driver, R_OK) == 0) {
		*saved = old ? strdup(old) : NULL;
		setenv("LD_LIBRARY_PATH", lib, 1);
		rc = 0;
	} else {
		fprintf(stderr, "no %s: %s part skipped\n",
		        driver ? driver : "fake libcuda.so.1", part);
	}
	free(lib);
	free(driver);
	return rc;
}

void test_cli_fake_driver_end(char *saved)
{
	if (saved)
		setenv("LD_LIBRARY_PATH", saved, 1);
	else
		unsetenv("LD_LIBRARY_PATH");
	free(saved);
}

int test_cli_expect(char *out, size_t len, int want, const char *needle,
                    const char *fmt, ...)
{
	char *args = NULL;
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vasprintf(&args, fmt, ap);
	va_end(ap);
	if (rc < 0) {
		fprintf(stderr, "test_cli_expect: out of memory\n");
		test_failures++;
		return -1;
	}
	rc = test_cli_run(out, len, "%s", args);
	if (rc != want || !strstr(out, needle)) {
		fprintf(stderr,
		        "gpufile %s: exit %d (want %d), output:\n%s\n"
		        "wanted it to contain: %s\n",
		        args, rc, want, out, needle);
		test_failures++;
	}
	free(args);
	return rc;
}

void *test_close_thread(void *arg)
{
	struct test_closer *c = arg;

	c->rc = gpufile_close(c->h);
	__atomic_store_n(&c->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int64_t gate_from;
static int gate_held, gate_open;

static void hold_task(struct gpufile__request *r, int64_t off)
{
	(void)r;
	pthread_mutex_lock(&gate_lock);
	if (off >= gate_from) {
		gate_held++;
		pthread_cond_broadcast(&gate_cond);
		while (!gate_open)
			pthread_cond_wait(&gate_cond, &gate_lock);
	}
	pthread_mutex_unlock(&gate_lock);
}

void test_hold_tasks_from(int64_t off)
{
	pthread_mutex_lock(&gate_lock);
	gate_from = off;
	gate_held = 0;
	gate_open = 0;
	pthread_mutex_unlock(&gate_lock);
	gpufile__pool_task_hook = hold_task;
}

void test_wait_held(int n)
{
	pthread_mutex_lock(&gate_lock);
	while (gate_held < n)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
}

void test_release_tasks(void)
{
	pthread_mutex_lock(&gate_lock);
	gate_open = 1;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

uint64_t test_json_number(const char *j, const char *key)
{
	size_t klen = strlen(key);
	unsigned long long v;

	if (!j)
		return UINT64_MAX;
	for (const char *at = strstr(j, key); at; at = strstr(at + 1, key))
		if (at > j && at[-1] == '"' && at[klen] == '"' &&
		    at[klen + 1] == ':' &&
		    sscanf(at + klen + 2, " %llu", &v) == 1)
			return v;
	return UINT64_MAX;
}
