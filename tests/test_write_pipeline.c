/*
 * Device -> file writes through the bounce buffers (staging.c's
 * staged_write), on the fake driver (fake_cuda.h): its copies from the
 * device run only when the library synchronises with their stream or an
 * event recorded after them, so the system-call table's pwrite, replaced
 * here, sees which copies are still queued while each write runs.
 *
 *   - the bytes written equal the device buffer, for sizes that are not
 *     multiples of the bounce buffer or the task, at unaligned offsets,
 *     with direct_io off and on, over an existing file (bytes outside the
 *     range stay);
 *   - the pipeline: with the default task_size and bounce_buffer_size
 *     (one task is one bounce buffer), the copy of the next piece from the
 *     GPU is queued while a piece is written;
 *   - O_DIRECT writes leave from the pinned bounce buffer, at any file
 *     offset (not through a scratch copy of a misaligned source);
 *   - a copy from the GPU that fails at the call or later (as an
 *     asynchronous copy does), or a pwrite that fails, mid-pipeline: the
 *     write returns the error, and the file holds only bytes of the device
 *     buffer at their place or what it held before: never a stale bounce
 *     buffer's bytes; in one task, the pieces before the failure and
 *     nothing after it.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define DEV_SIZE (40u << 20)
#include "fake_cuda.h"

#define SEED_DEV 7
#define MARK     0xA5 /* what the file held before a write */

/* ---- the pwrite hook ---- */

static pthread_mutex_t hook_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	long calls;         /* pwrites seen */
	long with_ahead;    /* ... while a copy from the GPU waited queued */
	long direct;        /* ... on an O_DIRECT descriptor */
	long direct_pinned; /* ... of those, from pinned memory */
	long fail_at;       /* the call with this number fails (fail_errno) */
	int fail_errno;
} hook;

/* Caller holds fake_lock: copies from the device queued, not yet run. */
static long dtoh_queued(void)
{
	long n = 0;

	for (struct CUstream_st *s = fake_streams; s; s = s->next_live)
		for (size_t i = s->done; i < s->nops; i++)
			if (s->ops[i].kind == OP_COPY &&
			    in_dev(s->ops[i].src, s->ops[i].size))
				n++;
	return n;
}

static ssize_t hooked_pwrite(int fd, const void *buf, size_t len, off_t off)
{
	const int flags = fcntl(fd, F_GETFL);
	long ahead, call;
	int pinned_src;

	pthread_mutex_lock(&fake_lock);
	ahead = dtoh_queued();
	pinned_src = in_pinned(buf, len);
	pthread_mutex_unlock(&fake_lock);
	pthread_mutex_lock(&hook_lock);
	call = ++hook.calls;
	hook.with_ahead += ahead > 0;
	if (flags >= 0 && (flags & O_DIRECT)) {
		hook.direct++;
		hook.direct_pinned += pinned_src;
	}
	pthread_mutex_unlock(&hook_lock);
	if (call == hook.fail_at) {
		errno = hook.fail_errno;
		return -1;
	}
	return pwrite(fd, buf, len, off);
}

static void hook_reset(void)
{
	pthread_mutex_lock(&hook_lock);
	memset(&hook, 0, sizeof(hook));
	pthread_mutex_unlock(&hook_lock);
}

/* ---- helpers ---- */

/* Makes path a file of len bytes of MARK. */
static int make_marked(const char *path, size_t len)
{
	unsigned char *buf = malloc(len ? len : 1);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	int ok = buf && fd >= 0;

	if (ok) {
		memset(buf, MARK, len);
		ok = pwrite(fd, buf, len, 0) == (ssize_t)len;
	}
	if (fd >= 0)
		close(fd);
	free(buf);
	CHECK(ok);
	return ok ? 0 : -1;
}

/* The file at path, of file_len bytes, holds the device pattern in
 * [off, off + good) and MARK everywhere else; with good < 0, every byte
 * of [off, off + size) is the pattern's or MARK (a failure that several
 * tasks met), and MARK outside it. */
static void check_file(const char *path, size_t file_len, int64_t off,
                       size_t size, long long good, uint64_t seed)
{
	size_t len = 0;
	unsigned char *data = test_read_file(path, &len);
	unsigned char *want = malloc(size ? size : 1);

	CHECK(data != NULL && want != NULL);
	if (!data || !want)
		goto out;
	CHECK_EQ(len, file_len);
	if (len != file_len)
		goto out;
	test_fill(want, size, seed, (uint64_t)off);
	CHECK_EQ(test_mismatch_byte(data, (size_t)off, MARK), -1);
	CHECK_EQ(test_mismatch_byte(data + off + size, len - (size_t)off - size,
	                            MARK),
	         -1);
	if (good >= 0) {
		CHECK_EQ(memcmp(data + off, want, (size_t)good), 0);
		CHECK_EQ(test_mismatch_byte(data + off + good,
		                            size - (size_t)good, MARK),
		         -1);
	} else {
		size_t bad = 0;
		for (size_t i = 0; i < size; i++)
			bad +=
			    data[off + i] != want[i] && data[off + i] != MARK;
		CHECK_EQ(bad, 0);
	}
out:
	free(data);
	free(want);
}

/* Writes size bytes of the device pattern (seed) at off over a marked
 * file of off + size + 4099 bytes; returns gpufile_pwrite's result. */
static ssize_t write_seed(const char *path, int64_t off, size_t size,
                          size_t mis, uint64_t seed)
{
	gpufile_t *h = NULL;
	ssize_t n;

	if (make_marked(path, (size_t)off + size + 4099))
		return -1;
	test_fill(dev_base + mis, size, seed, (uint64_t)off);
	CHECK_EQ(gpufile_open(&h, path, "r+"), 0);
	if (!h)
		return -1;
	n = gpufile_pwrite(h, dev_base + mis, size, off);
	CHECK_EQ(gpufile_close(h), 0);
	return n;
}

static ssize_t write_marked(const char *path, int64_t off, size_t size,
                            size_t mis)
{
	return write_seed(path, off, size, mis, SEED_DEV);
}

/* ---- tests ---- */

static void test_bytes(const char *path)
{
	static const char *const modes[] = {"off", "on"};
	const size_t sizes[] = {1,
	                        4095,
	                        4096,
	                        (64u << 10) + 1,
	                        (1u << 20) + 1,
	                        (3u << 20) + 4097,
	                        (4u << 20),
	                        (9u << 20) + 3};
	const int64_t offsets[] = {0, 1, 4097, (4 << 20) - 5};

	/* Small buffers and tasks: many pieces and tasks in flight. */
	CHECK_EQ(gpufile_set_gds_threshold(0), 0); /* every size staged */
	CHECK_EQ(gpufile_config_set("bounce_buffers", "3"), 0);
	CHECK_EQ(gpufile_set_bounce_buffer_size((1u << 20) + 4097), 0);
	CHECK_EQ(gpufile_set_task_size(2u << 20), 0);
	CHECK_EQ(gpufile_set_nthreads(3), 0);
	for (size_t m = 0; m < 2; m++) {
		CHECK_EQ(gpufile_config_set("direct_io", modes[m]), 0);
		for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
			for (size_t o = 0;
			     o < sizeof(offsets) / sizeof(offsets[0]); o++) {
				const size_t size = sizes[s];
				const int64_t off = offsets[o];
				ssize_t n =
				    write_marked(path, off, size, (s + o) % 3);
				CHECK_EQ(n, (ssize_t)size);
				if (n != (ssize_t)size)
					fprintf(stderr,
					        "  direct_io=%s size=%zu "
					        "off=%lld: %s\n",
					        modes[m], size, (long long)off,
					        gpufile_errmsg());
				check_file(path, (size_t)off + size + 4099, off,
				           size, (long long)size, SEED_DEV);
			}
	}
	gpufile_config_reset();
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
}

/* At the defaults, one 4 MiB task is one bounce buffer: before pieces,
 * its copy from the GPU ended before its only write began. */
static void test_overlap(const char *path)
{
	const size_t size = 4u << 20;
	long calls, ahead;

	CHECK_EQ(gpufile_set_nthreads(1), 0);
	hook_reset();
	CHECK_EQ(write_marked(path, 0, size, 0), (ssize_t)size);
	pthread_mutex_lock(&hook_lock);
	calls = hook.calls;
	ahead = hook.with_ahead;
	pthread_mutex_unlock(&hook_lock);
	check_file(path, size + 4099, 0, size, (long long)size, SEED_DEV);
	/* 4 pieces; every write but the last has the next copy queued. */
	CHECK(calls >= 4);
	CHECK(ahead >= 3);
	if (ahead < 3)
		fprintf(stderr,
		        "  %ld of %ld writes ran while a copy from the GPU "
		        "waited queued\n",
		        ahead, calls);

	/* Many tasks, one worker: the same in each task. */
	hook_reset();
	CHECK_EQ(write_marked(path, 3, 4 * size, 1), (ssize_t)(4 * size));
	pthread_mutex_lock(&hook_lock);
	calls = hook.calls;
	ahead = hook.with_ahead;
	pthread_mutex_unlock(&hook_lock);
	check_file(path, 4 * size + 3 + 4099, 3, 4 * size,
	           (long long)(4 * size), SEED_DEV);
	CHECK(ahead * 2 >= calls);
	gpufile_config_reset();
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
}

/* direct_io=on, at an offset that is not a multiple of 4 KiB: the
 * O_DIRECT writes leave from the bounce buffers themselves. */
static void test_direct_from_bounce(const char *path)
{
	const size_t size = (6u << 20) + 5;
	long direct, pinned;

	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	hook_reset();
	CHECK_EQ(write_marked(path, 4097, size, 2), (ssize_t)size);
	check_file(path, 4097 + size + 4099, 4097, size, (long long)size,
	           SEED_DEV);
	pthread_mutex_lock(&hook_lock);
	direct = hook.direct;
	pinned = hook.direct_pinned;
	pthread_mutex_unlock(&hook_lock);
	if (direct == 0) {
		printf("  (no O_DIRECT write here: %s refuses O_DIRECT; "
		       "bounce-buffer check not run)\n",
		       test_dir());
	} else {
		CHECK_EQ(pinned, direct);
	}
	gpufile_config_reset();
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
}

/* Arms *knob to dtoh_calls + k (the k-th copy from the GPU from now). */
static void arm_dtoh(long *knob, long k)
{
	pthread_mutex_lock(&fake_lock);
	*knob = dtoh_calls + k;
	pthread_mutex_unlock(&fake_lock);
}

static void disarm(void)
{
	pthread_mutex_lock(&fake_lock);
	dtoh_fail_at = dtoh_async_fail_at = 0;
	pthread_mutex_unlock(&fake_lock);
	hook_reset();
}

static void test_failures_one_task(const char *path, const char *mode)
{
	const size_t size = 4u << 20, piece = 1u << 20;
	ssize_t n;

	CHECK_EQ(gpufile_set_nthreads(1), 0);
	CHECK_EQ(gpufile_config_set("direct_io", mode), 0);
	/* Before each failure a whole write of other bytes: the bounce
	 * buffers hold them, which a failed copy would leave there. */
	CHECK_EQ(write_seed(path, 0, size, 0, SEED_DEV + 1), (ssize_t)size);

	/* The third copy fails at the call: only piece 0 was written. */
	arm_dtoh(&dtoh_fail_at, 3);
	n = write_marked(path, 0, size, 0);
	CHECK_EQ(n, GPUFILE_ECUDA);
	CHECK_CONTAINS(gpufile_errmsg(), "CUDA_ERROR_FAKE_COPY");
	CHECK_CONTAINS(gpufile_errmsg(), path);
	check_file(path, size + 4099, 0, size, (long long)piece, SEED_DEV);
	disarm();

	/* The second copy fails as it runs: its buffer keeps the bytes of
	 * the write before; piece 0 only is written. */
	CHECK_EQ(write_seed(path, 0, size, 0, SEED_DEV + 1), (ssize_t)size);
	arm_dtoh(&dtoh_async_fail_at, 2);
	n = write_marked(path, 0, size, 0);
	CHECK_EQ(n, GPUFILE_ECUDA);
	CHECK_CONTAINS(gpufile_errmsg(), "CUDA_ERROR_FAKE_COPY");
	check_file(path, size + 4099, 0, size, (long long)piece, SEED_DEV);
	disarm();

	/* The second and the fourth write fail: EIO, ENOSPC. */
	for (int e = 0; e < 2; e++) {
		pthread_mutex_lock(&hook_lock);
		hook.fail_errno = e ? ENOSPC : EIO;
		pthread_mutex_unlock(&hook_lock);
		CHECK_EQ(write_seed(path, 0, size, 0, SEED_DEV + 1),
		         (ssize_t)size);
		pthread_mutex_lock(&hook_lock);
		hook.fail_at = hook.calls + (e ? 4 : 2);
		pthread_mutex_unlock(&hook_lock);
		n = write_marked(path, 0, size, 0);
		CHECK_EQ(n, e ? -ENOSPC : -EIO);
		check_file(path, size + 4099, 0, size,
		           (long long)((e ? 3 : 1) * piece), SEED_DEV);
		disarm();
	}

	/* And the next write is whole. */
	CHECK_EQ(write_marked(path, 0, size, 0), (ssize_t)size);
	check_file(path, size + 4099, 0, size, (long long)size, SEED_DEV);
	gpufile_config_reset();
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
}

/* Several tasks on several workers, unaligned: whichever task meets the
 * failure, the write fails and the file holds no byte out of place. */
static void test_failures_many_tasks(const char *path)
{
	const size_t size = (13u << 20) + 7;
	const int64_t off = 4095;

	CHECK_EQ(gpufile_set_nthreads(3), 0);
	for (int k = 0; k < 3; k++) {
		ssize_t n;

		CHECK_EQ(write_seed(path, off, size, 1, SEED_DEV + 1),
		         (ssize_t)size);
		hook_reset();
		if (k == 0)
			arm_dtoh(&dtoh_fail_at, 5);
		else if (k == 1)
			arm_dtoh(&dtoh_async_fail_at, 6);
		else {
			pthread_mutex_lock(&hook_lock);
			hook.fail_at = 5;
			hook.fail_errno = EIO;
			pthread_mutex_unlock(&hook_lock);
		}
		n = write_marked(path, off, size, 1);
		CHECK_EQ(n, k == 2 ? -EIO : GPUFILE_ECUDA);
		check_file(path, (size_t)off + size + 4099, off, size, -1,
		           SEED_DEV);
		disarm();
	}
	gpufile_config_reset();
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_ON), 0);
}

int main(void)
{
	const char *path = test_path("write-pipeline");

	if (fake_install())
		return 1;
	gpufile__sys.pwrite = hooked_pwrite;

	test_bytes(path);
	test_overlap(path);
	test_direct_from_bounce(path);
	test_failures_one_task(path, "off");
	test_failures_one_task(path, "on");
	test_failures_many_tasks(path);

	gpufile_release();
	CHECK_EQ(bad_copies, 0);
	gpufile__sys_reset();
	gpufile__cuda_override(NULL);
	gpufile_config_reset();
	unlink(path);
	free(dev_base);
	return test_finish("test_write_pipeline");
}
