/*
 * remote_connections bounds the connections a remote handle has open, in
 * use and idle together (README: "HTTP connections per remote handle,
 * kept open between ranges"), however many threads read at once:
 *   - sequential reads reuse the connections kept open between them (at
 *     most remote_connections connects for 20 reads);
 *   - reads of four threads at once, then a batch, never have more than
 *     remote_connections open at any moment (the transfer engine's lanes
 *     each kept up to max_in_flight idle connections of their own:
 *     max_in_flight squared in all);
 *   - closing the handle closes them all.
 * The connections are counted in this process, where libcurl opens and
 * closes them: connect() and close() are defined and exported here
 * (found before libc's, which they call through dlsym(RTLD_NEXT)) and
 * count the sockets
 * connected to the test server's port. A count taken by the server
 * would see a client's close only once its thread reads the end of the
 * stream, possibly after the client's next connect. No timing is
 * assumed: the count is exact at every call.
 */
#define _GNU_SOURCE
#include "remote/helpers.h"
#include "testlib.h"

#include <dlfcn.h>
#include <errno.h>
#include <gpufile.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/socket.h>

#define SIZE     ((size_t)(2u << 20) + 999)
#define RANGE    ((size_t)64 << 10)
#define CONNS    3
#define NTHREADS 4
#define ITERS    8
#define NBATCH   20

/* The server's port (network order), 0 until it is known. */
static _Atomic unsigned short watched_port;
/* tracked[fd]: fd is a socket connected to the server (sized from
 * RLIMIT_NOFILE). Lock-free: close() runs in forked children too. */
static _Atomic unsigned char *tracked;
static size_t ntracked;
static _Atomic long open_now, open_max, connects;

static int (*real_connect)(int, const struct sockaddr *, socklen_t);
static int (*real_close)(int);

static void find_real(void)
{
	if (!real_connect)
		real_connect = (int (*)(int, const struct sockaddr *,
		                        socklen_t))dlsym(RTLD_NEXT, "connect");
	if (!real_close)
		real_close = (int (*)(int))dlsym(RTLD_NEXT, "close");
}

__attribute__((visibility("default"))) int
connect(int fd, const struct sockaddr *sa, socklen_t len)
{
	const unsigned short port = atomic_load(&watched_port);

	find_real();
	if (port && sa && sa->sa_family == AF_INET &&
	    len >= (socklen_t)sizeof(struct sockaddr_in) &&
	    ((const struct sockaddr_in *)sa)->sin_port == port && fd >= 0 &&
	    (size_t)fd < ntracked && !atomic_exchange(&tracked[fd], 1)) {
		long now = atomic_fetch_add(&open_now, 1) + 1;
		long max = atomic_load(&open_max);

		atomic_fetch_add(&connects, 1);
		while (now > max &&
		       !atomic_compare_exchange_weak(&open_max, &max, now))
			;
	}
	return real_connect(fd, sa, len);
}

__attribute__((visibility("default"))) int close(int fd)
{
	find_real();
	if (fd >= 0 && (size_t)fd < ntracked && tracked &&
	    atomic_exchange(&tracked[fd], 0))
		atomic_fetch_sub(&open_now, 1);
	return real_close(fd);
}

static gpufile_t *h;

/* The server, stopped by on_alarm. */
static pid_t server_pid;

/* A hang: the server is stopped (it would outlive the test) and the
 * test fails. */
static void on_alarm(int sig)
{
	static const char msg[] =
	    "test_remote_connections: hung (alarm): FAILED\n";

	(void)sig;
	if (server_pid > 0)
		kill(server_pid, SIGKILL);
	(void)!write(2, msg, sizeof(msg) - 1);
	_exit(1);
}

/* Reads len bytes at off and checks them. */
static void read_check(size_t len, int64_t off)
{
	unsigned char *d = dest_new(len);
	ssize_t n = gpufile_pread(h, d, len, off);

	if (n < 0)
		fprintf(stderr, "  read %zu at %lld: %s\n", len, (long long)off,
		        gpufile_errmsg());
	CHECK_EQ(n, (ssize_t)len);
	CHECK_EQ(dest_bad(d, len, (uint64_t)off, 1), 0);
	dest_free(d);
}

static void *reader(void *arg)
{
	const unsigned id = (unsigned)(uintptr_t)arg;

	for (unsigned i = 0; i < ITERS; i++) {
		/* One range, then eight (tasks of one range: 3 in flight
		 * over 4 threads). */
		read_check(RANGE, (int64_t)(((id * ITERS + i) * RANGE) %
		                            (SIZE - RANGE)));
		read_check(8 * RANGE, (int64_t)((id + i) * RANGE));
	}
	return NULL;
}

static void batch_check(void)
{
	gpufile_batch_t *bt = NULL;
	gpufile_batch_entry_t e[NBATCH];
	unsigned char *d = dest_new(NBATCH * RANGE);

	for (unsigned i = 0; i < NBATCH; i++)
		e[i] = (gpufile_batch_entry_t){.file = h,
		                               .buf = d + i * RANGE,
		                               .size = RANGE,
		                               .offset = (int64_t)(i * RANGE)};
	CHECK_EQ(gpufile_batch_create(&bt, NBATCH), 0);
	CHECK_EQ(gpufile_batch_submit(bt, e, NBATCH), 0);
	CHECK_EQ(gpufile_batch_wait(bt, -1), NBATCH);
	for (unsigned i = 0; i < NBATCH; i++)
		CHECK_EQ(gpufile_batch_result(bt, i), (ssize_t)RANGE);
	CHECK_EQ(dest_bad(d, NBATCH * RANGE, 0, 1), 0);
	gpufile_batch_free(bt);
	dest_free(d);
}

int main(void)
{
	char url[256];
	struct rlimit rl;
	pthread_t t[NTHREADS];
	unsigned short port;
	pid_t pid;

	if (!strstr(gpufile_features(), "remote"))
		return test_missing("test_remote_connections",
		                    "libcurl (built without it)");
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		rl.rlim_cur = 65536;
	ntracked = (size_t)rl.rlim_cur;
	tracked = calloc(ntracked, sizeof(*tracked));
	if (!tracked)
		return 1;
	pid = fault_server_ok(SIZE, url, sizeof(url));
	if (pid < 0)
		return 1;
	if (sscanf(url, "http://127.0.0.1:%hu/", &port) != 1) {
		server_stop(pid);
		return 1;
	}
	atomic_store(&watched_port, htons(port));
	server_pid = pid;
	signal(SIGALRM, on_alarm);
	/* A hang (a call that never gets a connection) fails the test. */
	alarm(300);
	CHECK_EQ(gpufile_config_set("remote_task_size", "64KiB"), 0);
	CHECK_EQ(gpufile_config_set("nthreads", "4"), 0);
	CHECK_EQ(gpufile_config_set("remote_connections", "3"), 0);
	CHECK_EQ(gpufile_open(&h, url, "r"), 0);
	if (!h) {
		fprintf(stderr, "  open: %s\n", gpufile_errmsg());
		server_stop(pid);
		return test_finish("test_remote_connections");
	}

	/* Sequential reads of one range (one transfer at a time): the
	 * connection of the open is kept between them. */
	for (unsigned i = 0; i < 20; i++)
		read_check(RANGE, (int64_t)(i * RANGE));
	fprintf(stderr, "sequential: %ld connects, at most %ld open\n",
	        atomic_load(&connects), atomic_load(&open_max));
	CHECK(atomic_load(&connects) <= CONNS);
	/* Reads of 16 ranges, one after another. */
	for (unsigned i = 0; i < 3; i++)
		read_check(16 * RANGE, (int64_t)(i * RANGE));

	/* Four threads at once, each read's tasks on four workers, then a
	 * batch. */
	for (unsigned i = 0; i < NTHREADS; i++)
		CHECK_EQ(
		    pthread_create(&t[i], NULL, reader, (void *)(uintptr_t)i),
		    0);
	for (unsigned i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	batch_check();
	fprintf(stderr, "concurrent: %ld connects, at most %ld open\n",
	        atomic_load(&connects), atomic_load(&open_max));
	CHECK(atomic_load(&open_max) <= CONNS);
	CHECK(atomic_load(&open_max) >= 1);

	gpufile_close(h);
	CHECK_EQ(atomic_load(&open_now), 0);
	alarm(0);
	server_stop(pid);
	test_cleanup();
	return test_finish("test_remote_connections");
}
