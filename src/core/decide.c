/*
 * The one place where a request's data path is decided: a pure function
 * from facts to (path, reason), and the cheap platform facts it starts
 * from. file.c (requests and gpufile_path_info, local and remote), mmap.c,
 * remote.c (the path recorded at open), probe.c (gpufile check's
 * prediction) and gpufile_buf_register all call gpufile__decide(); none of
 * them decides on its own.
 *
 * The decision runs in two rounds. The first uses only facts that cost a
 * stat or a small sysfs read. Where they already settle the path it stops;
 * where cuFile could still be chosen it asks for cuFile's own facts
 * (need_cufile), which cost a dlopen, cuFileDriverOpen and
 * cuFileHandleRegister: 0.37-0.42 s on an H200 with cuFile 1.15 (issue
 * 14), against 0.084 s for the whole first 4 GiB read through gpufile's
 * own path. So under compat_mode=auto, on a machine where cuFile cannot
 * accelerate, nothing of cuFile is loaded at all.
 */
#define _GNU_SOURCE
#include "core/decide.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

static int decide_device(const struct gpufile__facts *f,
                         struct gpufile__decision *d)
{
	const struct gpufile__settings *cfg = f->cfg;
	const int off = cfg->compat_mode == GPUFILE_COMPAT_OFF;
	const int cheap_accel = f->nvfs_loaded || f->p2pdma_possible;

	if (cfg->compat_mode == GPUFILE_COMPAT_ON)
		return snprintf(d->reason, sizeof(d->reason),
		                "posix: compat_mode=on, cuFile is not used");
	/* The accelerated-path rule (cufile_accel_only, on by default):
	 * without nvidia-fs and without PCI P2PDMA, cuFile moves data
	 * through its own compatibility path, measured at 1.6 GB/s against
	 * 44 GB/s for gpufile's pipelined posix path on the same file (H200,
	 * cuFile 1.15, bench/cufile_bench.c), so auto prefers posix there.
	 * Decided from the cheap facts, before cuFile is loaded. */
	if (!off && cfg->cufile_accel_only && f->cufile_forced)
		return snprintf(d->reason, sizeof(d->reason),
		                "posix: cuFile cannot accelerate here "
		                "(CUFILE_FORCE_COMPAT_MODE=%s: it would use "
		                "only its compatibility path), so it is not "
		                "loaded (cufile_accel_only=off hands it to "
		                "cuFile anyway)",
		                f->cufile_forced);
	if (!off && cfg->cufile_accel_only && !cheap_accel)
		return snprintf(d->reason, sizeof(d->reason),
		                "posix: cuFile cannot accelerate here (%s; "
		                "%s), so it is not loaded "
		                "(cufile_accel_only=off hands it to cuFile "
		                "anyway)",
		                f->nvfs_why, f->p2pdma_why);
	if (!f->cufile_known) {
		d->need_cufile = 1;
		return snprintf(d->reason, sizeof(d->reason),
		                "undecided: cuFile's own facts are needed");
	}
	if (!f->cufile_registered) {
		if (off) {
			d->path = GPUFILE_PATH_CUFILE;
			d->error =
			    f->cufile_error ? f->cufile_error : GPUFILE_ECUFILE;
			return snprintf(d->reason, sizeof(d->reason),
			                "compat_mode=off requires cuFile: %s",
			                f->cufile_why);
		}
		return snprintf(d->reason, sizeof(d->reason),
		                "posix: cuFile fallback: %s", f->cufile_why);
	}
	d->path = GPUFILE_PATH_CUFILE;
	if (off)
		return snprintf(d->reason, sizeof(d->reason),
		                "cufile: compat_mode=off, file registered");
	if (!f->nvfs_loaded && !f->cufile_p2pdma && cfg->cufile_accel_only) {
		d->path = GPUFILE_PATH_POSIX;
		return snprintf(
		    d->reason, sizeof(d->reason),
		    "posix: cuFile registered the file but would only use its "
		    "slower compatibility path (%s and cuFile reports no PCI "
		    "P2PDMA support; cufile_accel_only=off hands it to cuFile "
		    "anyway)",
		    f->nvfs_why);
	}
	/* Only cufile_accel_only=off brings a forced request this far; it,
	 * not nvidia-fs or P2PDMA (which cuFile will not use), is why. */
	if (f->cufile_forced)
		return snprintf(
		    d->reason, sizeof(d->reason),
		    "cufile: compat_mode=auto, file registered, "
		    "cufile_accel_only=off (CUFILE_FORCE_COMPAT_MODE="
		    "%s: cuFile uses only its compatibility path)",
		    f->cufile_forced);
	return snprintf(d->reason, sizeof(d->reason),
	                "cufile: compat_mode=auto, file registered, %s",
	                f->nvfs_loaded     ? "nvidia-fs is loaded"
	                : f->cufile_p2pdma ? "cuFile reports PCI P2PDMA support"
	                                   : "cufile_accel_only=off");
}

/* Why host reads are not copied from the map, where host_map_copy is not
 * off and the rule says no: the CPU's stores, or too few CPUs. */
static const char *no_map_copy(const struct gpufile__facts *f, char *out,
                               size_t len)
{
	if (f->stream_copy == GPUFILE__STREAM_NONE)
		return ": this CPU has no streaming stores gpufile uses";
	if (f->stream_copy != GPUFILE__STREAM_AVX512)
		return ": this CPU has AVX2's streaming stores, not AVX-512's, "
		       "which auto requires";
	snprintf(out, len,
	         ": this process may run on %d CPU%s, and auto copies from "
	         "the map only with %d or more, where the copy is bound by "
	         "memory bandwidth and streaming stores save a third of it",
	         f->cpus, f->cpus == 1 ? "" : "s", GPUFILE__MAP_COPY_MIN_CPUS);
	return out;
}

/* How host reads move their bytes: the map copy where host_map_copy, the
 * CPU's streaming stores and its CPU count allow it
 * (gpufile__stream_copy_allowed, the rule map_copy.c applies) and the
 * page cache is visible, else pread. */
static void decide_host_reads(const struct gpufile__facts *f,
                              struct gpufile__decision *d)
{
	static const char *const modes[] = {"off", "on", "auto"};
	const int mode = f->cfg->host_map_copy;
	const int allowed =
	    gpufile__stream_copy_allowed(mode, f->stream_copy, f->cpus);
	const char *stores =
	    f->stream_copy == GPUFILE__STREAM_AVX512 ? "AVX-512" : "AVX2";
	char why[256];

	if (allowed && f->cache_hidden)
		snprintf(
		    d->reason, sizeof(d->reason),
		    "host: host memory is read and written in place; "
		    "reads by pread (host_map_copy=%s): this process "
		    "neither owns the file nor may write it, so the kernel "
		    "does not say which of its pages are cached (mincore), "
		    "and the map copy is made only of cached pages",
		    modes[mode]);
	else if (allowed)
		snprintf(d->reason, sizeof(d->reason),
		         "host: host memory is read and written in place; "
		         "warm reads of 256 KiB or more are copied from a map "
		         "of the file with %s streaming stores "
		         "(host_map_copy=%s)",
		         stores, modes[mode]);
	else
		snprintf(d->reason, sizeof(d->reason),
		         "host: host memory is read and written in place; "
		         "reads by pread (host_map_copy=%s%s)",
		         modes[mode],
		         mode == GPUFILE__MAP_COPY_OFF
		             ? ""
		             : no_map_copy(f, why, sizeof(why)));
}

void gpufile__decide(const struct gpufile__facts *f,
                     struct gpufile__decision *d)
{
	memset(d, 0, sizeof(*d));
	d->path = GPUFILE_PATH_POSIX;
	if (f->source == GPUFILE__SOURCE_REMOTE) {
		/* Every buffer alike: the ranges arrive in host memory. */
		d->path = GPUFILE_PATH_REMOTE;
		snprintf(
		    d->reason, sizeof(d->reason), "%s",
		    "remote: HTTP range requests through libcurl's multi "
		    "interface, many in flight on reused connections "
		    "(http_max_in_flight; one per bounce buffer for device "
		    "memory, copied to the GPU while the next range "
		    "arrives); cuFile reads local files only");
		return;
	}
	if (f->source == GPUFILE__SOURCE_REMOTE_STREAM) {
		d->path = GPUFILE_PATH_REMOTE;
		snprintf(d->reason, sizeof(d->reason), "%s",
		         "remote, one connection: the server ignores Range "
		         "requests, so a read streams the object's 200 body "
		         "once, in order, into the destination (device memory "
		         "through the bounce buffers), the bytes before its "
		         "offset read and dropped (a batch's host entries "
		         "share one body); cuFile reads local files only");
		return;
	}
	if (f->source == GPUFILE__SOURCE_MMAP) {
		/* The map's pages are the source: host buffers get a copy,
		 * device buffers the pinned bounce buffers; never cuFile
		 * (it reads files, not memory). */
		d->path = GPUFILE_PATH_MMAP;
		snprintf(d->reason, sizeof(d->reason), "%s",
		         "mmap: host targets are copied from the mapping by "
		         "parallel tasks; device targets go through the pinned "
		         "bounce-buffer pipeline, reading the mapped range's "
		         "page-cache pages (a cuMemcpyHtoD from pageable "
		         "memory is staged by the driver and does not overlap "
		         "the next chunk's fetch)");
		return;
	}
	if (f->kind == GPUFILE_MEM_HOST || f->kind == GPUFILE_MEM_PINNED) {
		d->path = GPUFILE_PATH_HOST;
		decide_host_reads(f, d);
		return;
	}
	if (f->size < f->cfg->gds_threshold) {
		d->path = GPUFILE_PATH_SMALL;
		snprintf(d->reason, sizeof(d->reason),
		         "small: %zu bytes is below gds_threshold (%zu): "
		         "pinned bounce buffers",
		         f->size, f->cfg->gds_threshold);
		return;
	}
	if (f->kind == GPUFILE_MEM_MANAGED) {
		/* cuFile refuses it: CU_FILE_CUDA_MEMORY_TYPE_INVALID. Under
		 * compat_mode=off that is an error, as for any request cuFile
		 * cannot take: off promises cuFile or an error, never a
		 * silent fallback. */
		if (f->cfg->compat_mode == GPUFILE_COMPAT_OFF) {
			d->path = GPUFILE_PATH_CUFILE;
			d->error = GPUFILE_ECUFILE;
			snprintf(d->reason, sizeof(d->reason),
			         "compat_mode=off requires cuFile, which "
			         "refuses managed memory "
			         "(CU_FILE_CUDA_MEMORY_TYPE_INVALID): use "
			         "device memory, or compat_mode=auto");
			return;
		}
		snprintf(d->reason, sizeof(d->reason),
		         "posix: managed memory, which cuFile refuses");
		return;
	}
	decide_device(f, d);
}

void gpufile__decide_source(int source, struct gpufile__decision *d)
{
	static const struct gpufile__settings no_settings;
	const struct gpufile__facts f = {.cfg = &no_settings, .source = source};

	assert(source == GPUFILE__SOURCE_MMAP ||
	       source == GPUFILE__SOURCE_REMOTE ||
	       source == GPUFILE__SOURCE_REMOTE_STREAM);
	gpufile__decide(&f, d);
}

/* ---- cheap platform facts ---- */

static int read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = '\0';
	return 0;
}

/* nvidia-fs creates /proc/driver/nvidia-fs/ (version, stats, devices)
 * when loaded; /sys/module/nvidia_fs exists while it is. */
static int real_nvfs_loaded(char *why, size_t len)
{
	if (access("/proc/driver/nvidia-fs", F_OK) == 0 ||
	    access("/sys/module/nvidia_fs", F_OK) == 0) {
		snprintf(why, len, "nvidia-fs is loaded");
		return 1;
	}
	snprintf(why, len,
	         "nvidia-fs is not loaded (/proc/driver/nvidia-fs absent)");
	return 0;
}

/*
 * cuFile's PCI P2PDMA mode (cuFile 1.13+, no nvidia-fs) reaches only a
 * PCIe NVMe namespace, and NVIDIA's P2PDMA guide lists what it needs
 * beyond that: nvme_core loaded with multipath=N (the upstream driver has
 * no P2PDMA with multipathing) and, on x86, the GPU driver's
 * RMForceStaticBar1=1 registry key. Any one missing rules P2PDMA out; all
 * present only makes it possible (cuFile's driver properties say the
 * rest).
 */
static int real_p2pdma_possible(dev_t dev, char *why, size_t len)
{
	char link[64], rp[PATH_MAX], text[4096];

	if (major(dev) == 0) {
		snprintf(why, len,
		         "no PCI P2PDMA: no block device under the "
		         "file");
		return 0;
	}
	snprintf(link, sizeof(link), "/sys/dev/block/%u:%u", major(dev),
	         minor(dev));
	if (!realpath(link, rp) || strncmp(rp, "/sys/devices/pci", 16) != 0 ||
	    !strstr(rp, "/nvme/")) {
		snprintf(
		    why, len,
		    "no PCI P2PDMA: the file is not on a PCIe NVMe device");
		return 0;
	}
	if (read_small("/sys/module/nvme_core/parameters/multipath", text,
	               sizeof(text)) == 0 &&
	    text[0] == 'Y') {
		snprintf(why, len,
		         "no PCI P2PDMA: nvme_core runs with multipath=Y");
		return 0;
	}
#if defined(__x86_64__)
	if (read_small("/proc/driver/nvidia/params", text, sizeof(text)) != 0 ||
	    !strstr(text, "RMForceStaticBar1=1")) {
		snprintf(why, len,
		         "no PCI P2PDMA: the NVIDIA driver lacks "
		         "RMForceStaticBar1=1");
		return 0;
	}
#endif
	snprintf(why, len, "PCI P2PDMA possible (NVMe, multipath off)");
	return 1;
}

/*
 * The facts above are read from /proc and /sys: two access() calls, and a
 * realpath() of the device's link under /sys/dev/block, a system call per
 * component (222 us a handle on the 2-core VM under load). A handle reads
 * them at its first device request, so a batch of 2,048 chunk files into
 * GPU memory spent 49 ms of its submit on them, one handle after the
 * other (bench/README.md, "On the GPU machine, zarr carried"). Each
 * answer is kept for the process (the nvidia-fs one, and the P2PDMA one
 * per device) for gpufile__facts_ttl_ns: a module loaded or a parameter
 * changed meanwhile is seen that much later. Readers a test puts in
 * gpufile__platform are asked every time.
 */
_Atomic uint64_t gpufile__facts_ttl_ns = 1000000000u;
atomic_ulong gpufile__facts_read;

#define FACT_SLOTS 8

struct fact {
	int used;
	dev_t dev;
	uint64_t at; /* CLOCK_MONOTONIC, ns */
	int value;
	char why[128];
};

/* facts_lock guards the slots; it is held across no call but
 * clock_gettime and snprintf. */
static pthread_mutex_t facts_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fact nvfs_slot[1], p2pdma_slots[FACT_SLOTS];
static unsigned p2pdma_next; /* the slot a new device takes */

static uint64_t monotonic_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* read's answer for dev, from a fresh slot of slots or read anew (outside
 * the lock) and kept in the slot of dev, else a free one, else *next's. */
static int kept(struct fact *slots, unsigned nslots, unsigned *next, dev_t dev,
                int (*read)(dev_t dev, char *why, size_t len), char *why,
                size_t len)
{
	struct fact got = {1, dev, 0, 0, ""};
	const uint64_t ttl =
	    atomic_load_explicit(&gpufile__facts_ttl_ns, memory_order_relaxed);
	struct fact *to = NULL;
	uint64_t now;

	pthread_mutex_lock(&facts_lock);
	/* Read under the lock: a slot stored since is never newer than
	 * now (now - at would wrap, and the fresh answer be read again). */
	now = monotonic_ns();
	for (unsigned i = 0; i < nslots; i++) {
		const struct fact *s = &slots[i];

		if (s->used && s->dev == dev && now - s->at < ttl) {
			const int value = s->value;

			snprintf(why, len, "%s", s->why);
			pthread_mutex_unlock(&facts_lock);
			return value;
		}
	}
	pthread_mutex_unlock(&facts_lock);
	got.value = read(dev, got.why, sizeof(got.why));
	got.at = monotonic_ns();
	atomic_fetch_add_explicit(&gpufile__facts_read, 1,
	                          memory_order_relaxed);
	pthread_mutex_lock(&facts_lock);
	for (unsigned i = 0; i < nslots && !to; i++)
		if (slots[i].used && slots[i].dev == dev)
			to = &slots[i];
	for (unsigned i = 0; i < nslots && !to; i++)
		if (!slots[i].used)
			to = &slots[i];
	if (!to) {
		to = &slots[*next % nslots];
		*next = (*next + 1) % nslots;
	}
	*to = got;
	pthread_mutex_unlock(&facts_lock);
	snprintf(why, len, "%s", got.why);
	return got.value;
}

static int read_nvfs(dev_t dev, char *why, size_t len)
{
	(void)dev;
	return real_nvfs_loaded(why, len);
}

static int kept_nvfs_loaded(char *why, size_t len)
{
	unsigned one = 0;

	return kept(nvfs_slot, 1, &one, 0, read_nvfs, why, len);
}

static int kept_p2pdma_possible(dev_t dev, char *why, size_t len)
{
	return kept(p2pdma_slots, FACT_SLOTS, &p2pdma_next, dev,
	            real_p2pdma_possible, why, len);
}

void gpufile__facts_atfork_prepare(void)
{
	pthread_mutex_lock(&facts_lock);
}

void gpufile__facts_atfork_parent(void)
{
	pthread_mutex_unlock(&facts_lock);
}

void gpufile__facts_atfork_child(void)
{
	pthread_mutex_unlock(&facts_lock);
}

struct gpufile__platform_ops gpufile__platform = {
    .nvfs_loaded = kept_nvfs_loaded,
    .p2pdma_possible = kept_p2pdma_possible,
};

void gpufile__platform_reset(void)
{
	gpufile__platform.nvfs_loaded = kept_nvfs_loaded;
	gpufile__platform.p2pdma_possible = kept_p2pdma_possible;
}

int gpufile__env_true(const char *v)
{
	return v && (strcasecmp(v, "true") == 0 || strcmp(v, "1") == 0 ||
	             strcasecmp(v, "yes") == 0 || strcasecmp(v, "on") == 0);
}

const char *gpufile__cufile_forced_compat(void)
{
	const char *v = getenv("CUFILE_FORCE_COMPAT_MODE");

	return gpufile__env_true(v) ? v : NULL;
}

void gpufile__platform_facts(struct gpufile__facts *f, const struct stat *st)
{
	f->stream_copy = gpufile__stream_copy_kind();
	f->cpus = gpufile__usable_cpus();
	f->cufile_forced = gpufile__cufile_forced_compat();
	f->nvfs_loaded =
	    gpufile__platform.nvfs_loaded(f->nvfs_why, sizeof(f->nvfs_why));
	if (st)
		f->p2pdma_possible = gpufile__platform.p2pdma_possible(
		    S_ISBLK(st->st_mode) ? st->st_rdev : st->st_dev,
		    f->p2pdma_why, sizeof(f->p2pdma_why));
	else {
		/* No file (a buffer registration): cuFile's answer decides. */
		f->p2pdma_possible = 1;
		snprintf(f->p2pdma_why, sizeof(f->p2pdma_why),
		         "no file to place");
	}
}

/* auto takes AVX-512's 64-byte stores only: on the H200 host, 16 threads
 * copying a 4 GiB file's map with AVX2's 32-byte streaming stores reached
 * 54.8 GB/s against 67-70 with AVX-512's, and on a 2-core AMD VM with
 * AVX2 alone the copy did not beat pread (12.8 against 14.2 GB/s).
 *
 * And auto takes it only with GPUFILE__MAP_COPY_MIN_CPUS or more CPUs.
 * The map copy wins where the copy is bound by memory bandwidth: the
 * streaming stores skip the destination's read-for-ownership, a third of
 * the traffic of pread's copy. On the H200 host, 16 threads, that is the
 * limit (pread 36-43 GB/s, the map copy 70-71). With few cores each
 * core's copy is the limit, and the map costs page-table work that
 * pread does not do. On the 2-core AMD EPYC VM with AVX-512
 * (bench/README.md, "Host reads on 2 cores"): the streaming copy out of
 * an already populated map ran at the kernel's pace (1 thread 5.9 GB/s,
 * pread 5.8); each 4 MiB task then adds MADV_POPULATE_READ of the map,
 * MADV_POPULATE_WRITE of the destination (the writability check,
 * 0.6-1.0 s of CPU per 2 GiB under a CPU hog: it walks every 4 KiB page)
 * and MADV_DONTNEED with its TLB flush, so gpufile's map copy ran at
 * 0.2-0.5x pread quiet and 0.2-0.7x under a 2-process CPU hog. Any threshold
 * between 3 and 16 fits both machines; 8 leaves the map copy to hosts
 * with server-class memory parallelism. */
int gpufile__stream_copy_allowed(int mode, int kind, int cpus)
{
	if (mode == GPUFILE__MAP_COPY_AUTO)
		return kind == GPUFILE__STREAM_AVX512 &&
		       cpus >= GPUFILE__MAP_COPY_MIN_CPUS;
	return mode == GPUFILE__MAP_COPY_ON && kind != GPUFILE__STREAM_NONE;
}
