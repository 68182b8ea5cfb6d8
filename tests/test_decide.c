/*
 * The decision table (issue 12 item 1, issue 14 item 1): in every case of
 * compat_mode x buffer kind x below/above gds_threshold x cuFile present,
 * absent, refusing its driver or refusing the file x acceleration (none,
 * nvidia-fs, P2PDMA possible by the cheap facts only, P2PDMA reported by
 * cuFile) x cufile_accel_only, the path a real read takes equals what
 * gpufile_check() predicts for that buffer, and gpufile_path_info() says
 * the same for device reads at or above the threshold. Where the cheap
 * facts rule acceleration out under compat_mode=auto, the read does not
 * load cuFile at all. Fake CUDA (tests/fake_cuda.h) and the fake cuFile
 * (tests/fake_cufile) stand in for the GPU; the cheap facts are injected
 * through gpufile__platform.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include "fake_cuda.h"

#include "cufile_shim.h"
#include "decide.h"
#include "fake_cufile.h"
#include "gpufile.h"
#include "internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#ifndef FAKE_CUFILE_PATH
#error "FAKE_CUFILE_PATH must name libfake_cufile.so"
#endif

#define MiB       (1u << 20)
#define MAX_ITEMS 256

static gpufile_check_item_t items[MAX_ITEMS];

enum { MODE_ON, MODE_OFF, MODE_AUTO, NMODES };
enum { KIND_HOST, KIND_DEVICE, KIND_MANAGED, NKINDS };
enum { CU_PRESENT, CU_ABSENT, CU_REFUSE_OPEN, CU_REFUSE_FILE, NCUFILE };
enum { ACC_NONE, ACC_NVFS, ACC_P2P_CHEAP_ONLY, ACC_P2P, NACCEL };

static const char *const mode_names[] = {"on", "off", "auto"};
static const char *const kind_names[] = {"host", "device", "managed"};
static const char *const cufile_names[] = {"present", "absent",
                                           "refuses-driver", "refuses-file"};
static const char *const accel_names[] = {"none", "nvidia-fs",
                                          "p2pdma-cheap-only", "p2pdma"};

static int accel; /* the case's ACC_* */

static int nvfs_fact(char *why, size_t len)
{
	snprintf(why, len,
	         accel == ACC_NVFS ? "nvidia-fs is loaded (test)"
	                           : "nvidia-fs is not loaded (test)");
	return accel == ACC_NVFS;
}

static int p2pdma_fact(dev_t dev, char *why, size_t len)
{
	const int yes = accel == ACC_P2P_CHEAP_ONLY || accel == ACC_P2P;

	(void)dev;
	snprintf(why, len, yes ? "P2PDMA possible (test)" : "no P2PDMA (test)");
	return yes;
}

static int fake_loaded(void)
{
	void *lib = dlopen(FAKE_CUFILE_PATH, RTLD_NOW | RTLD_NOLOAD);

	if (lib)
		dlclose(lib);
	return lib != NULL;
}

static struct fake_cufile_counts cufile_counts(void)
{
	return fake_cufile_read(FAKE_CUFILE_PATH);
}

/* 1: CUFILE_FORCE_COMPAT_MODE=true for the cases (cuFile would use only
 * its compatibility path, whatever the platform). */
static int forced;

static void setup(int mode, int cufile, int acc, int accel_only)
{
	if (forced)
		setenv("CUFILE_FORCE_COMPAT_MODE", "true", 1);
	else
		unsetenv("CUFILE_FORCE_COMPAT_MODE");
	gpufile__cufile_reset();
	gpufile_config_reset();
	unsetenv("FAKE_CUFILE_FAIL_OPEN");
	unsetenv("FAKE_CUFILE_FAIL_REGISTER");
	unsetenv("FAKE_CUFILE_P2P");
	accel = acc;
	gpufile__platform.nvfs_loaded = nvfs_fact;
	gpufile__platform.p2pdma_possible = p2pdma_fact;
	CHECK_EQ(gpufile_config_set("cufile_library",
	                            cufile == CU_ABSENT
	                                ? "/nonexistent/libcufile.so.0"
	                                : FAKE_CUFILE_PATH),
	         0);
	CHECK_EQ(gpufile_config_set("compat_mode", mode_names[mode]), 0);
	CHECK_EQ(
	    gpufile_config_set("cufile_accel_only", accel_only ? "on" : "off"),
	    0);
	if (cufile == CU_REFUSE_OPEN)
		setenv("FAKE_CUFILE_FAIL_OPEN", "5001", 1);
	if (cufile == CU_REFUSE_FILE)
		setenv("FAKE_CUFILE_FAIL_REGISTER", "5013", 1);
	if (acc == ACC_P2P)
		setenv("FAKE_CUFILE_P2P", "1", 1);
}

/* The path a read took ("error" when it failed), from the counters. */
static const char *read_path(const char *file, void *buf, size_t size)
{
	gpufile_stats_t before, after;
	gpufile_t *h;
	ssize_t n;
	const char *taken = "none";

	if (gpufile_open(&h, file, "r"))
		return "open failed";
	GPUFILE_INIT(before);
	gpufile_stats_self(&before);
	n = gpufile_pread(h, buf, size, 0);
	GPUFILE_INIT(after);
	gpufile_stats_self(&after);
	gpufile_close(h);
	if (n < 0)
		return "error";
	if (n != (ssize_t)size)
		return "short";
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++)
		if (after.path[p][0].ops != before.path[p][0].ops)
			taken = gpufile_path_name((gpufile_path_t)p);
	return taken;
}

/* gpufile_path_info on a fresh handle after a read at the threshold. */
static const char *info_path(const char *file, void *buf, size_t size)
{
	gpufile_path_t p = GPUFILE_PATH_COUNT;
	gpufile_t *h;
	char reason[512];
	int rc;

	if (gpufile_open(&h, file, "r"))
		return "open failed";
	(void)gpufile_pread(h, buf, size, 0);
	rc = gpufile_path_info(h, &p, reason, sizeof(reason));
	gpufile_close(h);
	return rc < 0 ? "error" : gpufile_path_name(p);
}

static const char *predicted(const char *file, int kind, int below)
{
	const char *name = kind == KIND_HOST      ? "predict.gpufile host"
	                   : below                ? "predict.gpufile small"
	                   : kind == KIND_MANAGED ? "predict.gpufile managed"
	                                          : "predict.gpufile";
	int n = gpufile_check(file, items, MAX_ITEMS);

	for (int i = 0; i < n && i < MAX_ITEMS; i++)
		if (strcmp(items[i].name, name) == 0)
			return items[i].value;
	return "no prediction";
}

/* What the table says, written out independently of decide.c. */
static const char *expected(int mode, int kind, int below, int cufile, int acc,
                            int accel_only)
{
	const int cheap = acc != ACC_NONE && !forced;
	const int accelerated = (acc == ACC_NVFS || acc == ACC_P2P) && !forced;

	if (kind == KIND_HOST)
		return "host";
	if (below)
		return "small";
	if (kind == KIND_MANAGED) /* cuFile refuses it */
		return mode == MODE_OFF ? "error" : "posix";
	if (mode == MODE_ON)
		return "posix";
	if (mode == MODE_AUTO && accel_only && !cheap)
		return "posix";
	if (cufile != CU_PRESENT)
		return mode == MODE_OFF ? "error" : "posix";
	if (mode == MODE_OFF)
		return "cufile";
	return accel_only && !accelerated ? "posix" : "cufile";
}

static int cases, mismatches;

static void one_case(const char *file, int mode, int kind, int below,
                     int cufile, int acc, int accel_only)
{
	char *buf = kind == KIND_HOST      ? malloc(4 * MiB)
	            : kind == KIND_MANAGED ? (char *)dev_base + 8 * MiB
	                                   : (char *)dev_base;
	const size_t size = below ? 4096 : 4 * MiB;
	const char *want = expected(mode, kind, below, cufile, acc, accel_only);
	char got[32], pred[32], info[32] = "-";
	int loaded;

	setup(mode, cufile, acc, accel_only);
	snprintf(got, sizeof(got), "%s", read_path(file, buf, size));
	/* Issue 14: ruled out by cheap facts, cuFile is not even loaded. */
	loaded = fake_loaded() && cufile_counts().driver_open > 0;
	if (kind == KIND_DEVICE && !below) {
		setup(mode, cufile, acc, accel_only);
		snprintf(info, sizeof(info), "%s", info_path(file, buf, size));
	}
	setup(mode, cufile, acc, accel_only);
	snprintf(pred, sizeof(pred), "%s", predicted(file, kind, below));
	cases++;
	if (strcmp(got, want) != 0 || strcmp(pred, got) != 0 ||
	    (info[0] != '-' && strcmp(info, got) != 0) ||
	    (mode == MODE_AUTO && accel_only && (acc == ACC_NONE || forced) &&
	     loaded) ||
	    (mode == MODE_ON && loaded)) {
		mismatches++;
		fprintf(stderr,
		        "%scompat_mode=%s %s %s cufile=%s accel=%s "
		        "accel_only=%d: read %s, check %s, path_info %s, "
		        "table %s, cuFile %s\n",
		        forced ? "CUFILE_FORCE_COMPAT_MODE=true " : "",
		        mode_names[mode], kind_names[kind],
		        below ? "below" : "above", cufile_names[cufile],
		        accel_names[acc], accel_only, got, pred, info, want,
		        loaded ? "loaded" : "not loaded");
	}
	if (kind == KIND_HOST)
		free(buf);
}

/* The pure function alone: pinned memory and memory maps, which the fake
 * driver cannot produce, and the reasons it gives. */
static void test_pure(void)
{
	struct gpufile__settings cfg;
	struct gpufile__facts f;
	struct gpufile__decision d;

	gpufile_config_reset();
	CHECK_EQ(gpufile__settings(&cfg), 0);
	memset(&f, 0, sizeof(f));
	f.cfg = &cfg;
	f.kind = GPUFILE_MEM_PINNED;
	f.size = 64 * MiB;
	gpufile__decide(&f, &d);
	CHECK_EQ(d.path, GPUFILE_PATH_HOST);
	/* How host reads move bytes: auto takes AVX-512's streaming stores
	 * only, and only with 8 or more usable CPUs (on a 2-core VM the map
	 * copy ran at half pread's speed); on takes AVX2's too and any CPU
	 * count, off never; the reason says which and why. */
	{
		/* hidden: the kernel does not show this process the file's
		 * page cache, which only matters where the copy could be
		 * made. */
		static const struct {
			int mode, stores, cpus, hidden;
			const char *says;
		} host[] = {
		    {GPUFILE__MAP_COPY_AUTO, GPUFILE__STREAM_AVX512, 16, 0,
		     "with AVX-512 streaming stores (host_map_copy=auto)"},
		    {GPUFILE__MAP_COPY_AUTO, GPUFILE__STREAM_AVX512, 8, 0,
		     "with AVX-512 streaming stores (host_map_copy=auto)"},
		    /* The 2-core AVX-512 VM: pread, and the reason says so. */
		    {GPUFILE__MAP_COPY_AUTO, GPUFILE__STREAM_AVX512, 2, 0,
		     "pread (host_map_copy=auto: this process may run on 2 "
		     "CPUs, and auto copies from the map only with 8 or "
		     "more"},
		    {GPUFILE__MAP_COPY_AUTO, GPUFILE__STREAM_AVX512, 7, 0,
		     "pread (host_map_copy=auto: this process may run on 7 "
		     "CPUs"},
		    {GPUFILE__MAP_COPY_AUTO, GPUFILE__STREAM_AVX512, 1, 0,
		     "may run on 1 CPU, and"},
		    {GPUFILE__MAP_COPY_ON, GPUFILE__STREAM_AVX512, 2, 0,
		     "with AVX-512 streaming stores (host_map_copy=on)"},
		    {GPUFILE__MAP_COPY_AUTO, GPUFILE__STREAM_AVX2, 16, 0,
		     "pread (host_map_copy=auto: this CPU has AVX2's"},
		    {GPUFILE__MAP_COPY_AUTO, GPUFILE__STREAM_NONE, 16, 0,
		     "pread (host_map_copy=auto: this CPU has no streaming"},
		    {GPUFILE__MAP_COPY_ON, GPUFILE__STREAM_AVX2, 2, 0,
		     "with AVX2 streaming stores (host_map_copy=on)"},
		    {GPUFILE__MAP_COPY_ON, GPUFILE__STREAM_NONE, 16, 0,
		     "pread (host_map_copy=on: this CPU has no"},
		    {GPUFILE__MAP_COPY_OFF, GPUFILE__STREAM_AVX512, 16, 0,
		     "pread (host_map_copy=off)"},
		    {GPUFILE__MAP_COPY_AUTO, GPUFILE__STREAM_AVX512, 16, 1,
		     "pread (host_map_copy=auto): this process neither owns "
		     "the file nor may write it"},
		    {GPUFILE__MAP_COPY_ON, GPUFILE__STREAM_AVX2, 2, 1,
		     "pread (host_map_copy=on): this process neither owns"},
		    {GPUFILE__MAP_COPY_AUTO, GPUFILE__STREAM_AVX2, 16, 1,
		     "pread (host_map_copy=auto: this CPU has AVX2's"},
		    {GPUFILE__MAP_COPY_AUTO, GPUFILE__STREAM_AVX512, 2, 1,
		     "pread (host_map_copy=auto: this process may run on 2"},
		    {GPUFILE__MAP_COPY_OFF, GPUFILE__STREAM_AVX512, 16, 1,
		     "pread (host_map_copy=off)"},
		};
		struct gpufile__settings c = cfg;

		f.cfg = &c;
		for (size_t i = 0; i < sizeof(host) / sizeof(host[0]); i++) {
			c.host_map_copy = host[i].mode;
			f.stream_copy = host[i].stores;
			f.cpus = host[i].cpus;
			f.cache_hidden = host[i].hidden;
			gpufile__decide(&f, &d);
			CHECK_EQ(d.path, GPUFILE_PATH_HOST);
			CHECK_CONTAINS(d.reason, host[i].says);
			/* The rule the copy applies is the one worded. */
			CHECK_EQ(gpufile__stream_copy_allowed(host[i].mode,
			                                      host[i].stores,
			                                      host[i].cpus),
			         strstr(host[i].says, "streaming stores (") !=
			                 NULL ||
			             (host[i].hidden &&
			              strstr(host[i].says, "): this process")));
		}
		f.cfg = &cfg;
		f.stream_copy = 0;
		f.cpus = 0;
		f.cache_hidden = 0;
	}
	f.source = GPUFILE__SOURCE_MMAP;
	f.kind = GPUFILE_MEM_DEVICE;
	gpufile__decide(&f, &d);
	CHECK_EQ(d.path, GPUFILE_PATH_MMAP);
	CHECK(!d.need_cufile);
	/* A remote object: the remote path for every buffer and setting,
	 * cuFile never asked (it reads local files only). */
	f.source = GPUFILE__SOURCE_REMOTE;
	for (int k = GPUFILE_MEM_HOST; k <= GPUFILE_MEM_MANAGED; k++)
		for (int m = GPUFILE_COMPAT_AUTO; m <= GPUFILE_COMPAT_OFF;
		     m++) {
			struct gpufile__settings c = cfg;

			c.compat_mode = m;
			f.cfg = &c;
			f.kind = (gpufile_mem_t)k;
			gpufile__decide(&f, &d);
			CHECK_EQ(d.path, GPUFILE_PATH_REMOTE);
			CHECK(!d.need_cufile && !d.error);
			CHECK_CONTAINS(d.reason, "cuFile reads local files");
		}
	f.cfg = &cfg;
	f.kind = GPUFILE_MEM_DEVICE;
	/* auto at defaults on a machine without nvidia-fs or P2PDMA: posix,
	 * decided without asking for cuFile's facts. */
	f.source = GPUFILE__SOURCE_FILE;
	snprintf(f.nvfs_why, sizeof(f.nvfs_why), "nvidia-fs is not loaded");
	snprintf(f.p2pdma_why, sizeof(f.p2pdma_why), "no NVMe");
	gpufile__decide(&f, &d);
	CHECK_EQ(d.path, GPUFILE_PATH_POSIX);
	CHECK(!d.need_cufile);
	CHECK_CONTAINS(d.reason, "cannot accelerate");
	CHECK_CONTAINS(d.reason, "nvidia-fs is not loaded");
	/* nvidia-fs loaded: cuFile's facts are needed. */
	f.nvfs_loaded = 1;
	gpufile__decide(&f, &d);
	CHECK(d.need_cufile);
	f.cufile_known = f.cufile_registered = 1;
	gpufile__decide(&f, &d);
	CHECK_EQ(d.path, GPUFILE_PATH_CUFILE);
	CHECK_CONTAINS(d.reason, "nvidia-fs is loaded");
	/* CUFILE_FORCE_COMPAT_MODE true: cuFile is chosen only because
	 * cufile_accel_only=off, and will not use nvidia-fs: the reason says
	 * so, not "nvidia-fs is loaded". */
	{
		struct gpufile__settings c = cfg;

		c.cufile_accel_only = 0;
		f.cfg = &c;
		f.cufile_forced = "true";
		gpufile__decide(&f, &d);
		CHECK_EQ(d.path, GPUFILE_PATH_CUFILE);
		CHECK_CONTAINS(d.reason, "cufile_accel_only=off");
		CHECK_CONTAINS(d.reason, "CUFILE_FORCE_COMPAT_MODE=true");
		CHECK(strstr(d.reason, "nvidia-fs is loaded") == NULL);
		f.cfg = &cfg;
		f.cufile_forced = NULL;
	}
	/* cuFile could not register the file: posix, and the reason gives
	 * cuFile's own words. */
	f.cufile_registered = 0;
	f.cufile_why = "cuFileHandleRegister failed (5030)";
	gpufile__decide(&f, &d);
	CHECK_EQ(d.path, GPUFILE_PATH_POSIX);
	CHECK_CONTAINS(d.reason, "cuFile fallback: cuFileHandleRegister");
	f.cufile_registered = 1;
	f.cufile_why = NULL;
	/* gds_threshold: a device read of fewer bytes takes the small path,
	 * one of exactly that many does not. */
	CHECK(cfg.gds_threshold > 0);
	f.size = cfg.gds_threshold;
	gpufile__decide(&f, &d);
	CHECK_EQ(d.path, GPUFILE_PATH_CUFILE);
	f.size = cfg.gds_threshold - 1;
	gpufile__decide(&f, &d);
	CHECK_EQ(d.path, GPUFILE_PATH_SMALL);
	CHECK_CONTAINS(d.reason, "below gds_threshold");
}

/* The handle's record in the statistics (gpufile_stats_files) is the path
 * of its device requests: a managed buffer read first, which takes posix
 * whatever the file, must not stand as it when the device requests go to
 * cuFile. */
static void test_managed_record(const char *file)
{
	gpufile_file_stat_t files[GPUFILE_MAX_FILE_STATS];
	gpufile_t *h;
	int n;

	setup(MODE_AUTO, CU_PRESENT, ACC_NVFS, 1);
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread(h, (char *)dev_base + 8 * MiB, 4 * MiB, 0),
	         (ssize_t)(4 * MiB));
	CHECK_EQ(gpufile_pread(h, dev_base, 4 * MiB, 0), (ssize_t)(4 * MiB));
	n = gpufile_stats_files(0, files, GPUFILE_MAX_FILE_STATS);
	CHECK(n > 0);
	if (n > 0) {
		/* The newest record is this handle's. */
		CHECK_EQ(strcmp(files[n - 1].path, file), 0);
		CHECK_EQ(files[n - 1].chosen, GPUFILE_PATH_CUFILE);
		CHECK_CONTAINS(files[n - 1].reason, "nvidia-fs is loaded");
	}
	gpufile_close(h);
}

/* The record follows the handle's device path when a setting changes it:
 * compat_mode=on, then auto with nvidia-fs and cuFile present. It kept
 * "posix: compat_mode=on" while the requests went to cuFile. Still one
 * record for the handle. */
static void test_record_follows(const char *file)
{
	gpufile_file_stat_t files[GPUFILE_MAX_FILE_STATS];
	gpufile_stats_t st;
	uint64_t opened;
	gpufile_t *h;
	int n;

	setup(MODE_ON, CU_PRESENT, ACC_NVFS, 1);
	GPUFILE_INIT(st);
	CHECK_EQ(gpufile_stats_self(&st), 0);
	opened = st.files_opened;
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread(h, dev_base, 4 * MiB, 0), (ssize_t)(4 * MiB));
	n = gpufile_stats_files(0, files, GPUFILE_MAX_FILE_STATS);
	CHECK(n > 0);
	if (n > 0)
		CHECK_CONTAINS(files[n - 1].reason, "compat_mode=on");
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_AUTO), 0);
	CHECK_EQ(gpufile_pread(h, dev_base, 4 * MiB, 0), (ssize_t)(4 * MiB));
	CHECK_EQ(gpufile_stats_self(&st), 0);
	CHECK_EQ(st.files_opened, opened + 1);
	n = gpufile_stats_files(0, files, GPUFILE_MAX_FILE_STATS);
	CHECK(n > 0);
	if (n > 0) {
		CHECK_EQ(strcmp(files[n - 1].path, file), 0);
		CHECK_EQ(files[n - 1].chosen, GPUFILE_PATH_CUFILE);
		CHECK_CONTAINS(files[n - 1].reason, "nvidia-fs is loaded");
	}
	gpufile_close(h);
}

/* The real platform readers (nvidia-fs, P2PDMA per device) are asked once
 * per gpufile__facts_ttl_ns, however many handles make their first device
 * request meanwhile (a batch over thousands of chunk files paid them per
 * handle), and once per device. */
static unsigned long facts_read(void)
{
	return atomic_load(&gpufile__facts_read);
}

static void device_reads(const char *file, int handles)
{
	for (int i = 0; i < handles; i++) {
		gpufile_t *h;

		CHECK_EQ(gpufile_open(&h, file, "r"), 0);
		CHECK_EQ(gpufile_pread(h, dev_base, 4 * MiB, 0),
		         (ssize_t)(4 * MiB));
		gpufile_close(h);
	}
}

static void test_facts_kept(const char *file)
{
	const uint64_t ttl = gpufile__facts_ttl_ns;
	char why[128], again[128], nvfs_why[96], nvfs_again[96];
	unsigned long n0;
	struct stat st;
	int p2p, nvfs;

	unsetenv("CUFILE_FORCE_COMPAT_MODE");
	gpufile__cufile_reset();
	gpufile__platform_reset();
	gpufile_config_reset();
	CHECK_EQ(stat(file, &st), 0);
	/* Kept for no time: every call reads. */
	gpufile__facts_ttl_ns = 0;
	n0 = facts_read();
	p2p = gpufile__platform.p2pdma_possible(st.st_dev, why, sizeof(why));
	nvfs = gpufile__platform.nvfs_loaded(nvfs_why, sizeof(nvfs_why));
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(gpufile__platform.p2pdma_possible(st.st_dev, again,
		                                           sizeof(again)),
		         p2p);
		CHECK_EQ(gpufile__platform.nvfs_loaded(nvfs_again,
		                                       sizeof(nvfs_again)),
		         nvfs);
	}
	CHECK_EQ(facts_read() - n0, 8);
	device_reads(file, 3); /* both facts for each new handle */
	CHECK_EQ(facts_read() - n0, 14);
	/* Kept for ever: the answers just read, why included. */
	gpufile__facts_ttl_ns = UINT64_MAX;
	n0 = facts_read();
	for (int i = 0; i < 10; i++) {
		CHECK_EQ(gpufile__platform.p2pdma_possible(st.st_dev, again,
		                                           sizeof(again)),
		         p2p);
		CHECK_EQ(strcmp(again, why), 0);
		CHECK_EQ(gpufile__platform.nvfs_loaded(nvfs_again,
		                                       sizeof(nvfs_again)),
		         nvfs);
		CHECK_EQ(strcmp(nvfs_again, nvfs_why), 0);
	}
	device_reads(file, 5);
	CHECK_EQ(facts_read() - n0, 0);
	/* Another device is another answer, read once. */
	(void)gpufile__platform.p2pdma_possible(makedev(7, 4321), again,
	                                        sizeof(again));
	(void)gpufile__platform.p2pdma_possible(makedev(7, 4321), again,
	                                        sizeof(again));
	CHECK_EQ(facts_read() - n0, 1);
	CHECK_EQ(
	    gpufile__platform.p2pdma_possible(st.st_dev, again, sizeof(again)),
	    p2p);
	CHECK_EQ(facts_read() - n0, 1);
	gpufile__facts_ttl_ns = ttl;
}

int main(void)
{
	const char *file = test_path("decide.bin");
	int fd;

	if (test_make_file(file, 8 * MiB, 3))
		return 1;
	fd = open(file, O_RDONLY | O_DIRECT);
	if (fd < 0) {
		fprintf(stderr, "test_decide: %s refuses O_DIRECT: skipped\n",
		        file);
		test_cleanup();
		return TEST_SKIP;
	}
	close(fd);
	dev_base = aligned_alloc(4096, DEV_SIZE);
	if (!dev_base)
		return 1;
	fake_managed_from = 8 * MiB;
	gpufile__cuda_override(&fake);

	test_pure();
	for (int mode = 0; mode < NMODES; mode++)
		for (int kind = 0; kind < NKINDS; kind++)
			for (int below = 0; below < 2; below++)
				for (int cu = 0; cu < NCUFILE; cu++)
					for (int acc = 0; acc < NACCEL; acc++)
						for (int only = 0; only < 2;
						     only++)
							one_case(file, mode,
							         kind, below,
							         cu, acc, only);
	/* CUFILE_FORCE_COMPAT_MODE=true: with nvidia-fs or P2PDMA, auto
	 * under cufile_accel_only still keeps to posix and never loads
	 * cuFile (it would only copy through its compatibility path). */
	forced = 1;
	for (int mode = 0; mode < NMODES; mode++)
		for (int cu = 0; cu < NCUFILE; cu++)
			for (int acc = 0; acc < NACCEL; acc++)
				for (int only = 0; only < 2; only++)
					one_case(file, mode, KIND_DEVICE, 0, cu,
					         acc, only);
	forced = 0;
	unsetenv("CUFILE_FORCE_COMPAT_MODE");
	test_managed_record(file);
	test_record_follows(file);
	test_facts_kept(file);
	fprintf(stderr, "test_decide: %d cases, %d mismatches\n", cases,
	        mismatches);
	CHECK_EQ(mismatches, 0);
	CHECK_EQ(cases, NMODES * NKINDS * 2 * NCUFILE * NACCEL * 2 +
	                    NMODES * NCUFILE * NACCEL * 2);

	gpufile__cufile_reset();
	gpufile__platform_reset();
	gpufile_config_reset();
	gpufile_release();
	gpufile__cuda_override(NULL);
	free(dev_base);
	test_cleanup();
	return test_finish("test_decide");
}
