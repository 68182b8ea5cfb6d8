/*
 * Every fault on every path. For each path (host, posix staging, cold
 * O_DIRECT into host memory, cold O_DIRECT into device memory through
 * io_uring, cufile through libfake_cufile.so) and each fault (EINTR and
 * EAGAIN on every call in turn, short transfers of every remainder, EIO at
 * the first, a middle and the last task, ENOSPC and EDQUOT on writes,
 * pinned-memory and copy failures, cuFile errors mid-request) the request
 * is run once with the fault and checked:
 *   - the result: the right bytes, or the first error with its errno and
 *     a message naming the file and the failing task's offset;
 *   - every task ended before it returned (no injected call is running or
 *     starts afterwards), and nothing lands in the caller's buffer after
 *     it returned (the buffer, canaries around it included, is unchanged
 *     20 ms later);
 *   - no descriptor or pinned buffer is left (counted), no memory leaks
 *     (LeakSanitizer in the ASan build);
 *   - the handle still works: the same request, retried without faults,
 *     returns the right bytes; a write never reports more than reached the
 *     file.
 * One line per cell: PATH FAULT PASS|FAIL|n/a. Device paths use a fake CUDA
 * driver (tests/fake_cuda.h) with host memory standing in for the GPU.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cufile_shim.h"
#include "fake_cuda.h"
#include "fake_cufile.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <unistd.h>
#ifdef GPUFILE_HAVE_LIBURING
#include <liburing.h>
#endif

#ifndef FAKE_CUFILE_PATH
#error "FAKE_CUFILE_PATH must name libfake_cufile.so"
#endif

#define TS       (64u << 10) /* task size */
#define NTASKS   16
#define FSIZE    (NTASKS * TS)
#define FILE_LEN (FSIZE + 777) /* the request never reaches end-of-file */
#define GUARD    4096
#define SEED_OLD 7
#define SEED_NEW 8
#define CANARY   0xC5

enum path { P_HOST, P_POSIX, P_COLD_HOST, P_COLD_DEV, P_CUFILE, NPATHS };
static const char *const path_names[NPATHS] = {
    "host", "posix-staging", "cold-odirect-host", "cold-odirect-dev", "cufile"};

/* ---- injection ---- */

enum kind {
	F_NONE,
	F_CALL_ERR,  /* call number `call` fails once with err */
	F_SHORT,     /* every call moves short_by bytes fewer than asked */
	F_RANGE_ERR, /* calls meeting [at, at+len) fail with err */
};

static struct {
	pthread_mutex_t lock;
	enum kind kind;
	long call;
	int err;
	size_t short_by;
	int64_t at, len;
	int is_write; /* the direction faults apply to */
} inj = {.lock = PTHREAD_MUTEX_INITIALIZER};

static atomic_long ncalls; /* injectable calls since inject_set */
static atomic_int active;  /* injectable calls running now */
static atomic_int late;    /* calls started while no request ran */
static atomic_int in_request;
static atomic_int injected; /* faults actually injected */

static void inject_set(enum kind k, int is_write, long call, int err,
                       size_t short_by, int64_t at, int64_t len)
{
	pthread_mutex_lock(&inj.lock);
	inj.kind = k;
	inj.is_write = is_write;
	inj.call = call;
	inj.err = err;
	inj.short_by = short_by;
	inj.at = at;
	inj.len = len;
	pthread_mutex_unlock(&inj.lock);
	atomic_store(&ncalls, 0);
	atomic_store(&injected, 0);
}

/* What a call of len bytes at off (direction is_write) does: -1 with
 * errno set to fail it, else 0 with *n the bytes to move. */
static int decide(int is_write, size_t len, int64_t off, size_t *n)
{
	int err = 0;

	*n = len;
	if (!atomic_load(&in_request))
		atomic_fetch_add(&late, 1);
	pthread_mutex_lock(&inj.lock);
	if (inj.kind != F_NONE && inj.is_write == is_write) {
		long k = atomic_fetch_add(&ncalls, 1);
		switch (inj.kind) {
		case F_CALL_ERR:
			if (k == inj.call)
				err = inj.err;
			break;
		case F_SHORT:
			if (len > inj.short_by) {
				*n = len - inj.short_by;
				atomic_fetch_add(&injected, 1);
			}
			break;
		case F_RANGE_ERR:
			if (off < inj.at + inj.len &&
			    off + (int64_t)len > inj.at)
				err = inj.err;
			break;
		default:
			break;
		}
	}
	pthread_mutex_unlock(&inj.lock);
	if (err) {
		atomic_fetch_add(&injected, 1);
		errno = err;
		return -1;
	}
	return 0;
}

static ssize_t f_pread(int fd, void *buf, size_t len, off_t off)
{
	size_t n;
	ssize_t r;

	atomic_fetch_add(&active, 1);
	r = decide(0, len, off, &n) ? -1 : pread(fd, buf, n, off);
	atomic_fetch_sub(&active, 1);
	return r;
}

static ssize_t f_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	size_t n;
	ssize_t r;

	atomic_fetch_add(&active, 1);
	r = decide(1, len, off, &n) ? -1 : pwrite(fd, buf, n, off);
	atomic_fetch_sub(&active, 1);
	return r;
}

static ssize_t f_preadv2(int fd, const struct iovec *iov, int cnt, off_t off,
                         int flags)
{
	size_t n, len = 0;
	ssize_t r;

	for (int i = 0; i < cnt; i++)
		len += iov[i].iov_len;
	atomic_fetch_add(&active, 1);
	if (decide(0, len, off, &n)) {
		r = -1;
	} else if (cnt == 1) {
		struct iovec one = {iov[0].iov_base, n};
		r = preadv2(fd, &one, 1, off, flags);
	} else {
		r = preadv2(fd, iov, cnt, off, flags);
	}
	atomic_fetch_sub(&active, 1);
	return r;
}

#ifdef GPUFILE_HAVE_LIBURING
/* The file offset of each read in flight, by ring and user_data (the
 * buffer index), seen in the SQ ring before it is submitted. */
#define MAX_RINGS 64
static pthread_mutex_t sq_lock = PTHREAD_MUTEX_INITIALIZER;
static struct io_uring *sq_ring[MAX_RINGS];
static int64_t sq_off[MAX_RINGS][64];

/* Caller holds sq_lock. */
static int ring_slot(struct io_uring *ring)
{
	for (int i = 0; i < MAX_RINGS; i++)
		if (sq_ring[i] == ring)
			return i;
	for (int i = 0; i < MAX_RINGS; i++)
		if (!sq_ring[i]) {
			sq_ring[i] = ring;
			return i;
		}
	return 0;
}

static int f_submit(struct io_uring *ring)
{
	size_t n;

	pthread_mutex_lock(&sq_lock);
	for (unsigned i = ring->sq.sqe_head; i != ring->sq.sqe_tail; i++) {
		struct io_uring_sqe *sqe =
		    &ring->sq.sqes[i & ring->sq.ring_mask];
		if (sqe->user_data < 64)
			sq_off[ring_slot(ring)][sqe->user_data] =
			    (int64_t)sqe->off;
	}
	pthread_mutex_unlock(&sq_lock);
	if (decide(0, 0, -1, &n))
		return -errno;
	atomic_fetch_add(&active, 1);
	return io_uring_submit(ring);
}

/* A wait fails like a call; a completion is a call too, whose result
 * the fault rewrites (short count, error). */
static int f_wait_cqe(struct io_uring *ring, struct io_uring_cqe **cqe)
{
	size_t n;
	int rc;

	if (decide(0, 0, -1, &n))
		return -errno;
	rc = io_uring_wait_cqe(ring, cqe);
	if (rc == 0) {
		unsigned b = (unsigned)(*cqe)->user_data;
		if ((*cqe)->res > 0 && b < 64) {
			int64_t off;

			pthread_mutex_lock(&sq_lock);
			off = sq_off[ring_slot(ring)][b];
			pthread_mutex_unlock(&sq_lock);
			if (decide(0, (size_t)(*cqe)->res, off, &n))
				(*cqe)->res = -errno;
			else
				(*cqe)->res = (int)n;
		}
		atomic_fetch_sub(&active, 1);
	}
	return rc;
}
#endif

static void install_sys(void)
{
	gpufile__sys.pread = f_pread;
	gpufile__sys.pwrite = f_pwrite;
	gpufile__sys.preadv2 = f_preadv2;
#ifdef GPUFILE_HAVE_LIBURING
	gpufile__uring.submit = f_submit;
	gpufile__uring.wait_cqe = f_wait_cqe;
#endif
}

static fake_cufile_inject_fn cufile_inject;

static void cufile_set(enum kind k, int is_write, long call, int err,
                       size_t short_by, int64_t at, int64_t len)
{
	struct fake_cufile_fault f = {.is_write = is_write, .call = -1};

	if (!cufile_inject)
		return;
	if (k == F_NONE) {
		cufile_inject(NULL);
		return;
	}
	if (k == F_CALL_ERR) {
		f.call = call;
		f.err = err;
	} else if (k == F_SHORT) {
		f.short_by = short_by;
	} else if (k == F_RANGE_ERR) {
		f.at = at;
		f.len = len;
		f.err = err;
	}
	cufile_inject(&f);
}

/* ---- the world ---- */

static const char *file;

static int count_fds(void)
{
	DIR *d;
	struct dirent *e;
	char backing[8];
	int n = 0;

	/* The statistics segment's memfd is held for the life of the
	 * process from the first gpufile_open: made before counting. */
	gpufile_stats_backing(backing, sizeof(backing));
	d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own descriptor */
}

static int configure(enum path p)
{
	int rc = 0;

	rc |= gpufile_config_set("task_size", "64KiB");
	rc |= gpufile_config_set("nthreads", "4");
	rc |= gpufile_config_set("bounce_buffer_size", "64KiB");
	rc |= gpufile_config_set("bounce_buffers", "2");
	rc |= gpufile_config_set("gds_threshold", "4KiB");
	rc |= gpufile_config_set("cufile_library", FAKE_CUFILE_PATH);
	rc |= gpufile_config_set("compat_mode", p == P_CUFILE ? "off" : "on");
	rc |= gpufile_config_set(
	    "direct_io", p == P_COLD_HOST || p == P_COLD_DEV ? "on" : "off");
	return rc;
}

static int is_device(enum path p)
{
	return p == P_POSIX || p == P_COLD_DEV || p == P_CUFILE;
}

/* The caller's buffer: GUARD canary bytes either side of FSIZE. */
static unsigned char *region(enum path p)
{
	static unsigned char *host;

	if (is_device(p))
		return dev_base;
	if (!host)
		host = aligned_alloc(4096, FSIZE + 2 * GUARD);
	return host;
}

/* Evicts the file from the page cache so that cold paths read storage. */
static void drop_cache(void)
{
	int fd = open(file, O_RDONLY);

	if (fd >= 0) {
		fdatasync(fd);
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
		close(fd);
	}
}

struct fault {
	const char *name;
	int is_write;
	enum kind kind;
	int err; /* injected errno */
	size_t short_by;
	int task;          /* F_RANGE_ERR: the failing task; -1: none */
	int each_call;     /* run once per call of a clean request */
	int cuda;          /* 1: fail cuMemHostAlloc, 2: fail HtoD copy */
	int cufile_status; /* cuFile path: a status instead of errno */
	int want;          /* expected error, 0: success */
};

static const struct fault faults[] = {
    {"EINTR each read call", 0, F_CALL_ERR, EINTR, 0, -1, 1, 0, 0, 0},
    {"EAGAIN each read call", 0, F_CALL_ERR, EAGAIN, 0, -1, 1, 0, 0, 0},
    {"EINTR each write call", 1, F_CALL_ERR, EINTR, 0, -1, 1, 0, 0, 0},
    {"EAGAIN each write call", 1, F_CALL_ERR, EAGAIN, 0, -1, 1, 0, 0, 0},
    {"short read by 1", 0, F_SHORT, 0, 1, -1, 0, 0, 0, 0},
    {"short read by 4095", 0, F_SHORT, 0, 4095, -1, 0, 0, 0, 0},
    {"short read by half task", 0, F_SHORT, 0, TS / 2, -1, 0, 0, 0, 0},
    {"short write by 1", 1, F_SHORT, 0, 1, -1, 0, 0, 0, 0},
    {"short write by 4095", 1, F_SHORT, 0, 4095, -1, 0, 0, 0, 0},
    {"short write by half task", 1, F_SHORT, 0, TS / 2, -1, 0, 0, 0, 0},
    {"EIO read first task", 0, F_RANGE_ERR, EIO, 0, 0, 0, 0, 0, -EIO},
    {"EIO read middle task", 0, F_RANGE_ERR, EIO, 0, NTASKS / 2, 0, 0, 0, -EIO},
    {"EIO read last task", 0, F_RANGE_ERR, EIO, 0, NTASKS - 1, 0, 0, 0, -EIO},
    {"EIO write middle task", 1, F_RANGE_ERR, EIO, 0, NTASKS / 2, 0, 0, 0,
     -EIO},
    {"ENOSPC write", 1, F_RANGE_ERR, ENOSPC, 0, NTASKS / 2, 0, 0, 0, -ENOSPC},
    {"EDQUOT write", 1, F_RANGE_ERR, EDQUOT, 0, NTASKS - 1, 0, 0, 0, -EDQUOT},
    {"pinned alloc fails", 0, F_NONE, 0, 0, -1, 0, 1, 0, GPUFILE_ECUDA},
    {"HtoD copy fails", 0, F_NONE, 0, 0, -1, 0, 2, 0, GPUFILE_ECUDA},
    {"cuFile status mid-request", 0, F_RANGE_ERR, 0, 0, NTASKS / 2, 0, 0,
     5011 /* CU_FILE_IO_ERROR */, GPUFILE_ECUFILE},
};
#define NFAULTS (sizeof(faults) / sizeof(faults[0]))

static int applies(const struct fault *f, enum path p)
{
	if (f->cuda)
		return p == P_POSIX || p == P_COLD_DEV;
	if (f->cufile_status)
		return p == P_CUFILE;
	return 1;
}

/* Prepares the file and buffer for one run. */
static void prepare(enum path p, const struct fault *f, unsigned char *reg)
{
	CHECK_EQ(test_make_file(file, FILE_LEN, SEED_OLD), 0);
	memset(reg, CANARY, FSIZE + 2 * GUARD);
	if (f->is_write)
		test_fill(reg + GUARD, FSIZE, SEED_NEW, 0);
	if (p == P_COLD_DEV || p == P_COLD_HOST)
		drop_cache();
}

/* Whether the file holds the new bytes (a write that reported success). */
static int file_has_new(void)
{
	size_t len;
	unsigned char *b = test_read_file(file, &len);
	int ok =
	    b && len == FILE_LEN &&
	    test_mismatch(b, FSIZE, SEED_NEW, 0) == -1 &&
	    test_mismatch(b + FSIZE, FILE_LEN - FSIZE, SEED_OLD, FSIZE) == -1;

	free(b);
	return ok;
}

/* Runs one request; returns its result and checks the after-return
 * properties. *bad gets a reason on failure. */
static ssize_t one_request(gpufile_t *h, const struct fault *f,
                           unsigned char *reg, const char **bad)
{
	unsigned char *snap = test_malloc(FSIZE + 2 * GUARD);
	ssize_t n;

	atomic_store(&in_request, 1);
	if (f->is_write)
		n = gpufile_pwrite(h, reg + GUARD, FSIZE, 0);
	else
		n = gpufile_pread(h, reg + GUARD, FSIZE, 0);
	atomic_store(&in_request, 0);
	if (atomic_load(&active) != 0)
		*bad = "a call still running after the request returned";
	memcpy(snap, reg, FSIZE + 2 * GUARD);
	test_sleep_ms(20);
	if (memcmp(snap, reg, FSIZE + 2 * GUARD) != 0)
		*bad = "the buffer changed after the request returned";
	if (test_mismatch_byte(reg, GUARD, CANARY) != -1 ||
	    test_mismatch_byte(reg + GUARD + FSIZE, GUARD, CANARY) != -1)
		*bad = "canary overwritten";
	if (atomic_load(&late) != 0)
		*bad = "a call started after the request returned";
	free(snap);
	return n;
}

/* Checks a completed request's outcome against f. */
static void check_outcome(const struct fault *f, ssize_t n,
                          const unsigned char *reg, const char **bad)
{
	if (f->want == 0) {
		if (n != FSIZE) {
			fprintf(stderr, "    got %zd: %s\n", n,
			        gpufile_errmsg());
			*bad = "did not move every byte";
		} else if (!f->is_write && test_mismatch(reg + GUARD, FSIZE,
		                                         SEED_OLD, 0) != -1) {
			*bad = "wrong bytes";
		} else if (f->is_write && !file_has_new()) {
			*bad = "write reported success, file differs";
		}
		return;
	}
	if (n != f->want) {
		fprintf(stderr, "    got %zd (%s), wanted %d\n", n,
		        gpufile_errmsg(), f->want);
		*bad = "wrong result";
		return;
	}
	if (!strstr(gpufile_errmsg(), file))
		*bad = "message does not name the file";
	if (f->task >= 0) {
		char at[64];
		const char *m = gpufile_errmsg();
		const char *hit;

		snprintf(at, sizeof(at), "offset %lld",
		         (long long)f->task * TS);
		hit = strstr(m, at);
		if (!hit || (hit[strlen(at)] >= '0' && hit[strlen(at)] <= '9'))
			*bad = "message does not name the first failing offset";
	}
}

/* Sets the fault for run k (each_call) on path p. */
static void arm(enum path p, const struct fault *f, long k)
{
	int64_t at = f->task >= 0 ? (int64_t)f->task * TS : 0;
	int64_t len = f->task >= 0 ? 1 : 0;

	if (p == P_CUFILE) {
		struct fake_cufile_fault ff = {.is_write = f->is_write,
		                               .call = -1};
		if (f->cufile_status) {
			ff.at = at;
			ff.len = len;
			ff.status = f->cufile_status;
			cufile_inject(&ff);
		} else {
			cufile_set(f->kind, f->is_write, k, f->err, f->short_by,
			           at, len);
		}
		return;
	}
	inject_set(f->kind, f->is_write, k, f->err, f->short_by, at, len);
	pthread_mutex_lock(&fake_lock);
	fail_hostalloc = f->cuda == 1 ? 1000 : 0;
	fail_to_dev = f->cuda == 2 ? 1 : 0; /* alone or pooled */
	pthread_mutex_unlock(&fake_lock);
}

static void disarm(void)
{
	inject_set(F_NONE, 0, -1, 0, 0, 0, 0);
	cufile_set(F_NONE, 0, 0, 0, 0, 0, 0);
	pthread_mutex_lock(&fake_lock);
	fail_hostalloc = fail_to_dev = 0;
	pthread_mutex_unlock(&fake_lock);
}

/* The number of injectable calls a clean request makes on path p. */
static long clean_calls(enum path p, const struct fault *f, gpufile_t *h)
{
	unsigned char *reg = region(p);
	struct fake_cufile_counts c0, c1;
	fake_cufile_counts_fn counts = NULL;
	void *lib = dlopen(FAKE_CUFILE_PATH, RTLD_NOW | RTLD_NOLOAD);
	long n;

	if (lib)
		counts =
		    (fake_cufile_counts_fn)dlsym(lib, "fake_cufile_counts");
	prepare(p, f, reg);
	inject_set(F_CALL_ERR, f->is_write, -1, 0, 0, 0, 0); /* counts only */
	if (counts)
		counts(&c0);
	if (f->is_write)
		CHECK_EQ(gpufile_pwrite(h, reg + GUARD, FSIZE, 0), FSIZE);
	else
		CHECK_EQ(gpufile_pread(h, reg + GUARD, FSIZE, 0), FSIZE);
	n = atomic_load(&ncalls);
	if (p == P_CUFILE && counts) {
		counts(&c1);
		n = (long)(f->is_write ? c1.writes - c0.writes
		                       : c1.reads - c0.reads);
	}
	if (lib)
		dlclose(lib);
	disarm();
	return n;
}

/* Runs fault f on path p; returns 1 when every check passed. */
static int run_cell(enum path p, const struct fault *f, long *runs)
{
	unsigned char *reg = region(p);
	const char *bad = NULL;
	int fds_before, fds_after;
	gpufile_t *h = NULL;
	long nruns = 1;

	if (configure(p)) {
		fprintf(stderr, "    configure: %s\n", gpufile_errmsg());
		return 0;
	}
	fds_before = count_fds();
	if (gpufile_open(&h, file, "r+")) {
		fprintf(stderr, "    open: %s\n", gpufile_errmsg());
		return 0;
	}
	if (f->each_call)
		nruns = clean_calls(p, f, h);
	if (nruns <= 0) {
		bad = "no calls to inject into";
		nruns = 0;
	}
	for (long k = 0; k < nruns && !bad; k++) {
		ssize_t n;
		int hits;

		prepare(p, f, reg);
		atomic_store(&late, 0);
		arm(p, f, k);
		n = one_request(h, f, reg, &bad);
		hits = atomic_load(&injected);
		disarm();
		check_outcome(f, n, reg, &bad);
		if (!bad && p != P_CUFILE && f->kind != F_NONE && hits == 0)
			bad = "the fault was never injected";
		if (f->want != 0 && !bad) {
			/* Retried without the fault: the right bytes. */
			const struct fault clean = {.is_write = f->is_write};
			prepare(p, &clean, reg);
			n = one_request(h, &clean, reg, &bad);
			check_outcome(&clean, n, reg, &bad);
			if (bad)
				fprintf(stderr, "    (on the retry)\n");
		}
		if (bad)
			fprintf(stderr, "    run %ld of %ld: %s\n", k + 1,
			        nruns, bad);
	}
	*runs = nruns;
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_release(); /* frees the pinned buffers: counted below */
	fds_after = count_fds();
	if (!bad && fds_after != fds_before) {
		fprintf(stderr, "    descriptors: %d before, %d after\n",
		        fds_before, fds_after);
		bad = "descriptor leak";
	}
	pthread_mutex_lock(&fake_lock);
	if (!bad && (pinned_count || streams_live || events_live))
		bad = "pinned buffer, stream or event leak";
	if (!bad && bad_copies)
		bad = "a copy touched memory it should not";
	pthread_mutex_unlock(&fake_lock);
	return bad == NULL;
}

int main(void)
{
	void *lib;
	int pass = 0, fail = 0, na = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	file = test_path("matrix.bin");
	if (test_make_file(file, FILE_LEN, SEED_OLD))
		return 1;
	dev_base = aligned_alloc(4096, DEV_SIZE);
	if (!dev_base)
		return 1;
	gpufile__cuda_override(&fake);
	install_sys();
	/* The fake library, loaded here first so that its injection hook
	 * is reachable; gpufile's dlopen of the same path shares it. */
	lib = dlopen(FAKE_CUFILE_PATH, RTLD_NOW | RTLD_LOCAL);
	if (lib)
		cufile_inject =
		    (fake_cufile_inject_fn)dlsym(lib, "fake_cufile_inject");
	CHECK(cufile_inject != NULL);
#ifndef GPUFILE_HAVE_LIBURING
	fprintf(stderr, "built without liburing: cold-odirect-dev reads "
	                "take the synchronous O_DIRECT loop\n");
#endif
	printf("%-18s %-28s %-6s %s\n", "PATH", "FAULT", "RESULT", "RUNS");
	for (int p = 0; p < NPATHS; p++) {
		for (size_t i = 0; i < NFAULTS; i++) {
			const struct fault *f = &faults[i];
			long runs = 0;
			int ok;

			if (!applies(f, (enum path)p)) {
				printf("%-18s %-28s %-6s\n", path_names[p],
				       f->name, "n/a");
				na++;
				continue;
			}
			ok = run_cell((enum path)p, f, &runs);
			printf("%-18s %-28s %-6s %ld\n", path_names[p], f->name,
			       ok ? "PASS" : "FAIL", runs);
			if (ok) {
				pass++;
			} else {
				fail++;
				test_failures++;
			}
		}
	}
	printf("cells: %d pass, %d fail, %d n/a\n", pass, fail, na);
	gpufile__sys_reset();
	gpufile__uring_reset();
	gpufile__cufile_reset();
	gpufile__cuda_override(NULL);
	if (lib)
		dlclose(lib);
	free(dev_base);
	return test_finish("test_fault_matrix");
}
