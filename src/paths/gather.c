/*
 * Gathered reads (gpufile_pread_gather): nruns runs of run_size bytes, run
 * i at file offset offsets[i], packed one after another into host memory.
 * A block of columns of a row-major matrix is one run per row: this is
 * how safetensors' get_slice takes a tensor-parallel shard of a weight
 * (python/gpufile/safetensors/_slice.py), then copies the packed bytes to
 * the GPU in one copy.
 *
 * Why not a request per run, or a batch: the runs are short (1024 bf16
 * columns are 2 KiB per row, 4096 rows per weight). Measured on the H200,
 * 64 such blocks (262,144 runs of 2 KiB) took 0.17 s through a batch into
 * GPU memory, an io_uring submission per run, and 0.21 s read as the
 * span that holds them (eight times the bytes) where safetensors' own
 * gather from its memory map took 0.074 s. Here one request cuts the
 * packed result into about nthreads tasks, each copying its runs in turn
 * straight into the result, with every byte counted on the host path.
 *
 * How a task copies a run: from a read-only map of the runs' span, made
 * for the call, when the file holds every run at the call (fstat);
 * otherwise with pread, which reports where the file ends as an error
 * naming the run. A pread per 2 KiB run cost 0.9 ms per block of 4096
 * runs on the H200 at 8, 16 or 32 threads alike (3.5 us per call); a
 * copy from the map has no system call per run. A file cut short between
 * the fstat and the copy makes the copy fault (SIGBUS): the copies run
 * under gpufile's SIGBUS guard (map_copy.c, whatever handlers the program
 * installs), and a task whose copies
 * faulted, or that finds the file shorter than the span after them, reads
 * its runs again by pread, which turns the first run the file lost into
 * -EIO naming it. Only with host_map_copy=off (no handler
 * installed) is the fault left to the process, as safetensors' own loader
 * leaves it.
 */
#include "paths/paths.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int gpufile__gather_map = 1;

/* The request and what its tasks read. The pool passes &g->r to the
 * task function, which gets g back (r is the first member). */
struct gather {
	struct gpufile__request r;
	size_t run;
	const int64_t *offsets;
	const char *map; /* file offset map_off, or NULL: pread */
	int64_t map_off;
	int64_t span_end; /* where the last-ending run ends */
};

/* Smallest task: below it a task's hand-off costs more than its reads. */
#define GATHER_TASK_MIN ((size_t)64 << 10)

/* A task's copies from the map: the packed bytes [off + done, off + len),
 * where byte p is byte p % run of run p / run; done grows run by run, so
 * that after a fault it says where the copies stopped. */
struct map_copies {
	const struct gather *g;
	char *buf;
	size_t len, done;
	int64_t off;
};

static void copy_runs(void *arg)
{
	struct map_copies *c = arg;
	const struct gather *g = c->g;

	while (c->done < c->len) {
		uint64_t pos = (uint64_t)c->off + c->done;
		size_t i = (size_t)(pos / g->run);
		size_t within = (size_t)(pos % g->run);
		size_t take = g->run - within;
		int64_t at = g->offsets[i] + (int64_t)within;

		if (take > c->len - c->done)
			take = c->len - c->done;
		memcpy(c->buf + c->done, g->map + (at - g->map_off), take);
		c->done += take;
	}
}

/* One task: the packed bytes [off, off + len) of the result. From the map
 * under the SIGBUS guard (with host_map_copy=off, unguarded); after a
 * fault, or where the file no longer holds the span, or without a map or
 * the guard, by pread, which names the first run the file no longer
 * holds. */
static ssize_t gather_task(struct gpufile__request *r, char *buf, size_t len,
                           int64_t off, char *msg, size_t msg_len)
{
	const struct gather *g = (const struct gather *)r;
	size_t done = 0;

	if (g->map) {
		struct map_copies c = {g, buf, len, 0, off};

		/* host_map_copy=off installs no handler: a bare copy. */
		if (r->cfg.host_map_copy == GPUFILE__MAP_COPY_OFF) {
			copy_runs(&c);
			gpufile__stats_map_copy(len, 0);
			return (ssize_t)len;
		}
		/* Where the guard cannot be put in place (out of memory
		 * for its record of the program's handler), by pread. A
		 * file cut inside a run's last page reads zeros there,
		 * without a fault: only its size tells. Then, as after a
		 * fault (bytes copied before it may be such zeros), the
		 * task starts again by pread. */
		if (gpufile__guard_ready(r->cfg.host_map_copy)) {
			if (gpufile__map_read_hook)
				gpufile__map_read_hook(r->h, off, len);
			if (gpufile__guarded(copy_runs, &c) == 0 &&
			    gpufile__file_holds(r->h, g->span_end)) {
				gpufile__stats_map_copy(len, 0);
				return (ssize_t)len;
			}
		}
	}
	while (done < len) {
		uint64_t pos = (uint64_t)off + done;
		size_t i = (size_t)(pos / g->run);
		size_t within = (size_t)(pos % g->run);
		size_t take = g->run - within;
		int64_t at = g->offsets[i] + (int64_t)within;
		ssize_t n;

		if (take > len - done)
			take = len - done;
		n = gpufile__pread_full(r->h->fd, buf + done, take, at);
		if (n < 0) {
			snprintf(msg, msg_len,
			         "reading %s: run %zu (%zu bytes at offset "
			         "%lld): %s",
			         r->h->path, i, g->run,
			         (long long)g->offsets[i], strerror((int)-n));
			return n;
		}
		if ((size_t)n < take) {
			/* A read of 0 bytes started at or past the end:
			 * only the size says where that is. */
			struct stat st;
			long long eof = at + n;

			if (n == 0 && gpufile__sys.fstat(r->h->fd, &st) == 0)
				eof = (long long)st.st_size;
			snprintf(msg, msg_len,
			         "reading %s: run %zu (%zu bytes at offset "
			         "%lld): the file ends at %lld, %s the run",
			         r->h->path, i, g->run,
			         (long long)g->offsets[i], eof,
			         eof > g->offsets[i] ? "inside" : "before");
			return -EIO;
		}
		done += take;
	}
	return (ssize_t)len;
}

static const struct gpufile__task_ops gather_ops = {.run = gather_task};

/* Checks the arguments; *total gets the packed size. */
static int check(gpufile_t *h, void *buf, size_t run_size, size_t nruns,
                 const int64_t *offsets, size_t *total)
{
	gpufile_mem_t kind;
	int device, rc;
	void *ctx;

	if (!h)
		return gpufile__fail(-EINVAL, "gpufile_pread_gather: handle is "
		                              "NULL");
	if (h->remote)
		return gpufile__remote_no_fd(h->path, "gpufile_pread_gather");
	if (!h->readable)
		return gpufile__fail(-EBADF,
		                     "reading %s: the file was not opened for "
		                     "reading",
		                     h->path);
	if (run_size && nruns > (size_t)INT64_MAX / run_size)
		return gpufile__fail(
		    -EINVAL,
		    "reading %s: %zu runs of %zu bytes are out "
		    "of range",
		    h->path, nruns, run_size);
	*total = run_size * nruns;
	if (!*total)
		return 0;
	if (!buf)
		return gpufile__fail(-EFAULT, "reading %s: buffer is NULL",
		                     h->path);
	if (!offsets)
		return gpufile__fail(-EINVAL, "reading %s: offsets is NULL",
		                     h->path);
	for (size_t i = 0; i < nruns; i++)
		if (offsets[i] < 0 ||
		    (int64_t)run_size > INT64_MAX - offsets[i])
			return gpufile__fail(
			    -EINVAL,
			    "reading %s: run %zu: offset %lld with %zu bytes "
			    "is out of range",
			    h->path, i, (long long)offsets[i], run_size);
	rc = gpufile__classify(buf, &kind, &device, &ctx);
	if (rc)
		return rc;
	if (kind != GPUFILE_MEM_HOST && kind != GPUFILE_MEM_PINNED)
		return gpufile__fail(-EINVAL,
		                     "reading %s: a gathered read fills host "
		                     "memory, and the buffer is %s memory "
		                     "(gather into pinned memory, then copy it "
		                     "to the GPU in one copy)",
		                     h->path, gpufile_mem_name(kind));
	return 0;
}

/* Maps the span of g's runs when the file holds all of them: g->map set,
 * *len the length to unmap. Leaves g->map NULL (the tasks pread) where
 * it does not, or where the map cannot be made. */
static void map_span(struct gather *g, int fd, size_t nruns, size_t *len)
{
	int64_t lo = INT64_MAX, hi = 0, page = sysconf(_SC_PAGESIZE);
	struct stat st;
	void *p;

	*len = 0;
	if (!gpufile__gather_map)
		return;
	for (size_t i = 0; i < nruns; i++) {
		if (g->offsets[i] < lo)
			lo = g->offsets[i];
		if (g->offsets[i] + (int64_t)g->run > hi)
			hi = g->offsets[i] + (int64_t)g->run;
	}
	if (gpufile__sys.fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    hi > st.st_size)
		return;
	lo -= lo % page;
	if ((uint64_t)(hi - lo) > SIZE_MAX)
		return;
	p = mmap(NULL, (size_t)(hi - lo), PROT_READ, MAP_SHARED, fd, (off_t)lo);
	if (p == MAP_FAILED)
		return;
	g->map = p;
	g->map_off = lo;
	g->span_end = hi;
	*len = (size_t)(hi - lo);
}

ssize_t gpufile_pread_gather(gpufile_t *h, void *buf, size_t run_size,
                             size_t nruns, const int64_t *offsets)
{
	struct gather g;
	size_t total = 0, task, map_len;
	ssize_t result;
	int rc = check(h, buf, run_size, nruns, offsets, &total);

	if (rc || !total)
		return rc;
	memset(&g, 0, sizeof(g));
	rc = gpufile__settings(&g.r.cfg);
	if (rc)
		return rc;
	/* About one task per thread, so that even a few MiB of short runs
	 * is read by every thread; never more than task_size each. */
	task = (total + g.r.cfg.nthreads - 1) / g.r.cfg.nthreads;
	if (task < GATHER_TASK_MIN)
		task = GATHER_TASK_MIN;
	if (task > g.r.cfg.task_size)
		task = g.r.cfg.task_size;
	g.r.cfg.task_size = task;
	g.r.h = h;
	g.r.ops = &gather_ops;
	g.r.buf = buf;
	g.r.size = total;
	g.r.offset = 0; /* tasks see positions in the packed result */
	g.r.device = -1;
	g.r.path = GPUFILE_PATH_HOST;
	g.run = run_size;
	g.offsets = offsets;
	map_span(&g, h->fd, nruns, &map_len);
	gpufile__request_init(&g.r);
	if (g.r.ntasks <= 1) {
		gpufile__request_run_inline(&g.r);
	} else {
		rc = gpufile__request_submit(&g.r);
		if (rc) {
			gpufile__request_destroy(&g.r);
			result = rc;
			goto out;
		}
	}
	result = gpufile__request_wait(&g.r, -1);
	gpufile__request_destroy(&g.r);
out:
	if (g.map)
		munmap((void *)g.map, map_len);
	return result;
}
