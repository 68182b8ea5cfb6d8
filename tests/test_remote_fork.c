/* A forked child reading a remote handle its parent opened must not use
 * the parent's open connections (one socket, or one TLS session, used by
 * two processes corrupts both streams): the child opens its own, and the
 * parent's stays usable. Seen through the connection counter of
 * gpufile_stats_remote(). The child reads with gpufile__remote_read()
 * (one range, in the calling thread), so the test does not depend on the
 * worker pool's own fork handling. */
#include "remote/helpers.h"
#include "testlib.h"

#include "remote.h"
#include <dirent.h>
#include <gpufile.h>
#include <limits.h>

#define SIZE ((size_t)300000)

static uint64_t connects(void)
{
	gpufile_remote_stats_t st;

	GPUFILE_INIT(st);
	CHECK_EQ(gpufile_stats_remote(0, &st), 0);
	return st.connects;
}

/* The sockets this process has open. */
static int open_sockets(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		char link[PATH_MAX], target[64];
		ssize_t len;

		snprintf(link, sizeof(link), "/proc/self/fd/%s", e->d_name);
		len = readlink(link, target, sizeof(target) - 1);
		if (len > 0) {
			target[len] = '\0';
			n += strncmp(target, "socket:", 7) == 0;
		}
	}
	closedir(d);
	return n;
}

/* Reads 100000 bytes at off with the calling thread; 0 when all in place. */
static int read_range(gpufile_t *h, uint64_t off)
{
	unsigned char *d = dest_new(100000);
	ssize_t n = gpufile__remote_read(h, (char *)d, 100000, (int64_t)off);
	int bad = n != 100000 || dest_bad(d, 100000, off, 1) != 0;

	if (n < 0)
		fprintf(stderr, "  %s\n", gpufile_errmsg());
	dest_free(d);
	return bad;
}

int main(void)
{
	char url[128];
	gpufile_t *h = NULL;
	uint64_t c0;
	int port, status = -1;
	pid_t pid, child;

	if (!strstr(gpufile_features(), "remote")) {
		return test_missing("test_remote_fork",
		                    "libcurl (built without it)");
	}
	pid = fault_server_start(SIZE, 0, &port);
	if (pid < 0)
		return 1;
	CHECK_EQ(gpufile_config_set("remote_connections", "1"), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/ok/o.bin", port);
	CHECK_EQ(gpufile_open(&h, url, "r"), 0);
	if (!h) {
		server_stop(pid);
		return 1;
	}
	c0 = connects();
	CHECK_EQ(read_range(h, 0), 0);
	CHECK_EQ(read_range(h, 100000), 0);
	/* One connection, kept open between requests (HEAD included). */
	CHECK_EQ(connects() - c0, 0);

	child = fork();
	if (child == 0) {
		uint64_t before = connects();
		int bad = read_range(h, 200000) + read_range(h, 1000);
		/* Exactly one new connection: the parent's is not used. */
		_exit(bad || connects() - before != 1 ? 1 : 0);
	}
	CHECK(child > 0);
	waitpid(child, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	/* The parent's connection still serves it, untouched. */
	c0 = connects();
	CHECK_EQ(read_range(h, 150000), 0);
	CHECK_EQ(connects() - c0, 0);

	/* A child that only closes the handle leaves the parent's
	 * connection open: a close would end a TLS session the parent
	 * goes on using (close_notify on the shared socket). */
	child = fork();
	if (child == 0) {
		int before = open_sockets();

		gpufile_close(h);
		_exit(before >= 1 && open_sockets() == before ? 0 : 1);
	}
	CHECK(child > 0);
	waitpid(child, &status, 0);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	c0 = connects();
	CHECK_EQ(read_range(h, 50000), 0);
	CHECK_EQ(connects() - c0, 0);
	gpufile_close(h);
	server_stop(pid);
	return test_finish("test_remote_fork");
}
