/*
 * Batch entries whose file is on the cuFile path go through cuFile's
 * batch API (cuFileBatchIOSetUp / Submit / GetStatus), with the fake
 * libcufile (tests/fake_cufile) and the fake CUDA driver: bytes, short
 * counts at end-of-file, one failed entry among good ones, the
 * statistics, and a failing cuFileBatchIOGetStatus.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"
#include "cufile_shim.h"
#include "fake_cufile.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#ifndef FAKE_CUFILE_PATH
#error "FAKE_CUFILE_PATH must name libfake_cufile.so"
#endif

#define DEV_SIZE (40u << 20)
#include "fake_cuda.h"

#define SEED      91
#define FILE_SIZE ((8u << 20) + 100)
#define CANARY    0x5A

static struct fake_cufile_counts fake_counts(void)
{
	return fake_cufile_read(FAKE_CUFILE_PATH);
}

static void inject(const struct fake_cufile_fault *f)
{
	void *lib = dlopen(FAKE_CUFILE_PATH, RTLD_NOW | RTLD_NOLOAD);
	fake_cufile_inject_fn fn =
	    lib ? (fake_cufile_inject_fn)dlsym(lib, "fake_cufile_inject")
	        : NULL;

	if (fn)
		fn(f);
	if (lib)
		dlclose(lib);
}

int main(void)
{
	const char *path = test_path("batch-cufile");
	const unsigned n = 300, victim = 201;
	gpufile_batch_entry_t e[300];
	struct fake_cufile_counts c0, c1;
	gpufile_stats_t s0, s1;
	gpufile_batch_t *b = NULL;
	gpufile_t *h = NULL;
	void *mem = NULL;
	unsigned bad = 0, lost = 0;
	int fd;

	if (test_make_file(path, FILE_SIZE, SEED))
		return 1;
	fd = open(path, O_RDONLY | O_DIRECT);
	if (fd < 0) {
		fprintf(stderr,
		        "test_batch_cufile: %s refuses O_DIRECT "
		        "(cuFile needs it): skipped\n",
		        test_dir());
		test_cleanup();
		return TEST_SKIP;
	}
	close(fd);
	if (posix_memalign(&mem, 4096, DEV_SIZE))
		return 1;
	dev_base = mem;
	memset(dev_base, CANARY, DEV_SIZE);
	gpufile__cuda_override(&fake);
	CHECK_EQ(gpufile_config_set("cufile_library", FAKE_CUFILE_PATH), 0);
	/* off: cuFile must take every entry at or above gds_threshold. */
	CHECK_EQ(gpufile_config_set("compat_mode", "off"), 0);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);

	/* 20,000-byte entries (over gds_threshold), scattered destinations, the
	 * last ones running past the end of the file. */
	for (unsigned i = 0; i < n; i++)
		e[i] = (gpufile_batch_entry_t){
		    h, dev_base + (size_t)i * (72u << 10), 20000,
		    i >= n - 3 ? (int64_t)FILE_SIZE - 1000 * (int64_t)(n - i)
		               : (int64_t)i * 27000 + 3};
	CHECK_EQ(gpufile_batch_create(&b, n), 0);
	/* Warm up: loads cuFile, registers the file. */
	CHECK_EQ(gpufile_batch_submit(b, e, 1), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), 1);
	CHECK_EQ(gpufile_batch_result(b, 0), 20000);

	c0 = fake_counts();
	GPUFILE_INIT(s0);
	gpufile_stats_self(&s0);
	inject(&(struct fake_cufile_fault){0, -1, e[victim].offset, 1, EIO, 0,
	                                   0, 0});
	CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
	inject(NULL);
	c1 = fake_counts();
	GPUFILE_INIT(s1);
	gpufile_stats_self(&s1);

	for (unsigned i = 0; i < n; i++) {
		size_t want = e[i].offset + e[i].size > FILE_SIZE
		                  ? FILE_SIZE - (size_t)e[i].offset
		                  : e[i].size;
		ssize_t got = gpufile_batch_result(b, i);

		if (i == victim)
			continue;
		if (got != (ssize_t)want ||
		    test_mismatch(e[i].buf, want, SEED,
		                  (uint64_t)e[i].offset) != -1 ||
		    test_mismatch_byte((char *)e[i].buf + want,
		                       e[i].size - want, CANARY) != -1) {
			fprintf(stderr, "entry %u: %zd of %zu (%s)\n", i, got,
			        want,
			        gpufile_batch_errmsg(b, i)
			            ? gpufile_batch_errmsg(b, i)
			            : "bytes differ");
			bad++;
		}
	}
	CHECK_EQ(bad, 0);
	CHECK_EQ(gpufile_batch_result(b, victim), -EIO);
	CHECK_CONTAINS(gpufile_batch_errmsg(b, victim), "batch entry 201");
	CHECK_CONTAINS(gpufile_batch_errmsg(b, victim), path);
	/* Every entry went through cuFile's batch API, in batches of at
	 * most 128. */
	CHECK_EQ(c1.batch_ios - c0.batch_ios, n);
	CHECK(c1.batch_submits - c0.batch_submits >= (n + 127) / 128);
	/* One request on the cufile path, its tasks the entries. */
	CHECK_EQ(s1.path[GPUFILE_PATH_CUFILE][0].ops -
	             s0.path[GPUFILE_PATH_CUFILE][0].ops,
	         1);
	CHECK_EQ(s1.path[GPUFILE_PATH_CUFILE][0].tasks -
	             s0.path[GPUFILE_PATH_CUFILE][0].tasks,
	         n);

	/* An entry whose event comes back short, and whose finishing
	 * cuFileRead fails with errno ENODATA: its result is -ENODATA, as
	 * gpufile_pread's would be (every -1 was taken as -EIO). A batch of
	 * its own: its worker has a cuFile batch. */
	{
		gpufile_batch_t *one = NULL;

		CHECK_EQ(gpufile_batch_create(&one, 1), 0);
		c0 = fake_counts();
		inject(&(struct fake_cufile_fault){0, 1, 0, 0, ENODATA, 0, 8192,
		                                   0});
		CHECK_EQ(gpufile_batch_submit(one, e, 1), 0);
		CHECK_EQ(gpufile_batch_wait(one, -1), 1);
		inject(NULL);
		c1 = fake_counts();
		CHECK_EQ(c1.batch_ios - c0.batch_ios, 1);
		CHECK_EQ(gpufile_batch_result(one, 0), -ENODATA);
		CHECK_CONTAINS(gpufile_batch_errmsg(one, 0), path);
		CHECK_CONTAINS(gpufile_batch_errmsg(one, 0), strerror(ENODATA));
		gpufile_batch_free(one);
	}

	/* cuFileBatchIOGetStatus fails: the I/Os it did not report are
	 * cancelled before their entries fail (a real cuFile could still be
	 * writing into buffers the caller takes as free), the cuFile batch
	 * is destroyed, and each entry's message names the file, the offset
	 * and the status. A worker whose cuFile batch was lost reads its
	 * later entries singly: they, and the next submit, are right. */
	c0 = fake_counts();
	setenv("FAKE_CUFILE_FAIL_GETSTATUS", "5030", 1);
	CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
	unsetenv("FAKE_CUFILE_FAIL_GETSTATUS");
	c1 = fake_counts();
	bad = 0;
	for (unsigned i = 0; i < n; i++) {
		size_t want = e[i].offset + e[i].size > FILE_SIZE
		                  ? FILE_SIZE - (size_t)e[i].offset
		                  : e[i].size;
		ssize_t got = gpufile_batch_result(b, i);
		char needle[512];

		snprintf(needle, sizeof(needle),
		         "batch entry %u: reading %s at offset %lld (%zu "
		         "bytes): cuFileBatchIOGetStatus failed: "
		         "CU_FILE_INTERNAL_ERROR (5030)",
		         i, path, (long long)e[i].offset, e[i].size);
		if (got == GPUFILE_ECUFILE && gpufile_batch_errmsg(b, i) &&
		    strstr(gpufile_batch_errmsg(b, i), needle)) {
			lost++;
		} else if (got != (ssize_t)want ||
		           test_mismatch(e[i].buf, want, SEED,
		                         (uint64_t)e[i].offset) != -1) {
			fprintf(stderr, "entry %u: %zd (%s)\n", i, got,
			        gpufile_batch_errmsg(b, i)
			            ? gpufile_batch_errmsg(b, i)
			            : "bytes differ");
			bad++;
		}
	}
	CHECK_EQ(bad, 0);
	CHECK(lost >= 1);
	fprintf(stderr, "  GetStatus failing: %u entries failed, %u read\n",
	        lost, n - lost);
	CHECK(c1.batch_cancels - c0.batch_cancels >= 1);
	CHECK_EQ(c1.batch_destroys - c0.batch_destroys,
	         c1.batch_cancels - c0.batch_cancels);
	memset(dev_base, CANARY, DEV_SIZE);
	CHECK_EQ(gpufile_batch_submit(b, e, n), 0);
	CHECK_EQ(gpufile_batch_wait(b, -1), (int)n);
	bad = 0;
	for (unsigned i = 0; i < n; i++) {
		size_t want = e[i].offset + e[i].size > FILE_SIZE
		                  ? FILE_SIZE - (size_t)e[i].offset
		                  : e[i].size;

		if (gpufile_batch_result(b, i) != (ssize_t)want ||
		    test_mismatch(e[i].buf, want, SEED,
		                  (uint64_t)e[i].offset) != -1)
			bad++;
	}
	CHECK_EQ(bad, 0);

	/* Entries a worker reads singly (its cuFile batch lost) are counted
	 * once, as gpufile_pread's requests: one worker, whose batch is lost
	 * at the first submit, then reads all of the second singly. (The
	 * batch's own request counted them a second time.) */
	{
		struct gpufile__settings cfg;
		gpufile_batch_t *one = NULL;
		uint64_t tasks = 0, bytes = 0;

		CHECK_EQ(gpufile_config_set("nthreads", "1"), 0);
		CHECK_EQ(gpufile__settings(&cfg), 0);
		CHECK_EQ(gpufile_batch_create(&one, n), 0);
		setenv("FAKE_CUFILE_FAIL_GETSTATUS", "5030", 1);
		CHECK_EQ(gpufile_batch_submit(one, e, n), 0);
		CHECK_EQ(gpufile_batch_wait(one, -1), (int)n);
		unsetenv("FAKE_CUFILE_FAIL_GETSTATUS");
		c0 = fake_counts();
		GPUFILE_INIT(s0);
		gpufile_stats_self(&s0);
		CHECK_EQ(gpufile_batch_submit(one, e, n), 0);
		CHECK_EQ(gpufile_batch_wait(one, -1), (int)n);
		GPUFILE_INIT(s1);
		gpufile_stats_self(&s1);
		c1 = fake_counts();
		for (unsigned i = 0; i < n; i++) {
			const uint64_t ts = cfg.task_size;
			const uint64_t off = (uint64_t)e[i].offset;
			size_t want = off + e[i].size > FILE_SIZE
			                  ? FILE_SIZE - (size_t)off
			                  : e[i].size;

			CHECK_EQ(gpufile_batch_result(one, i), want);
			bytes += want;
			tasks += (off + e[i].size - 1) / ts - off / ts + 1;
		}
		CHECK_EQ(c1.batch_ios - c0.batch_ios, 0); /* all singly */
		CHECK_EQ(s1.path[GPUFILE_PATH_CUFILE][0].ops -
		             s0.path[GPUFILE_PATH_CUFILE][0].ops,
		         n);
		CHECK_EQ(s1.path[GPUFILE_PATH_CUFILE][0].tasks -
		             s0.path[GPUFILE_PATH_CUFILE][0].tasks,
		         tasks);
		CHECK_EQ(s1.path[GPUFILE_PATH_CUFILE][0].bytes -
		             s0.path[GPUFILE_PATH_CUFILE][0].bytes,
		         bytes);
		gpufile_batch_free(one);
	}

	gpufile_batch_free(b);
	/* Every cuFile batch set up was destroyed. */
	c1 = fake_counts();
	CHECK(c1.batch_setups > 0);
	CHECK_EQ(c1.batch_destroys, c1.batch_setups);
	CHECK_EQ(gpufile_close(h), 0);
	gpufile__cufile_reset();
	gpufile_release();
	gpufile__cuda_override(NULL);
	gpufile_config_reset();
	free(dev_base);
	return test_finish("test_batch_cufile");
}
