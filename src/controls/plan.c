/*
 * The plan of one read, before it runs (gpufile explain): gpufile's split
 * into tasks, then cuFile's schedule of each request it receives.
 *
 * cuFile's rules, as gpufile models them (NVIDIA's GDS documentation of
 * the cufile.json execution section, and the worked numbers of NVIDIA's
 * KvikIO/GDS tutorial: 1 GiB -> 4 parts of 256 MiB; 16 MiB with an 8 MiB
 * threshold -> 2 parts of 8 MiB):
 *   - unregistered buffer, parallel_io true and the request larger than
 *     min_io_threshold_size_kb: parts = min(max_io_threads,
 *     max_request_parallelism), but no part smaller than the threshold,
 *     so parts = min(that, max(1, size / threshold));
 *     the parts split the request evenly (sizes differ by a byte at
 *     most: none below the threshold), part_size = ceil(size / parts);
 *   - otherwise one part;
 *   - the nvidia-fs path moves each part in transfers of at most
 *     properties.max_direct_io_size_kb.
 * For registered buffers NVIDIA documents no different rule; gpufile's
 * model applies the same one, and says so (model_note).
 */
#include "controls/controls.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint64_t div_up(uint64_t a, uint64_t b)
{
	return a / b + (a % b != 0);
}

static void plan_request(const gpufile_cufile_config_t *c, uint64_t size,
                         gpufile_plan_entry_t *e)
{
	const int64_t *v[GPUFILE_CUFILE_NKEYS];
	uint64_t threads, parallelism, width, threshold, slab;

	for (int i = 0; i < GPUFILE_CUFILE_NKEYS; i++)
		v[i] = &c->v[i].value;
	threads = (uint64_t)*v[GPUFILE_CUFILE_MAX_IO_THREADS];
	parallelism = (uint64_t)*v[GPUFILE_CUFILE_MAX_REQUEST_PARALLELISM];
	threshold = (uint64_t)*v[GPUFILE_CUFILE_MIN_IO_THRESHOLD_SIZE_KB] << 10;
	slab = (uint64_t)*v[GPUFILE_CUFILE_MAX_DIRECT_IO_SIZE_KB] << 10;
	width = min_u64(threads, parallelism);

	e->request_size = size;
	if (!*v[GPUFILE_CUFILE_PARALLEL_IO]) {
		e->parts = 1;
		snprintf(e->why, sizeof(e->why),
		         "execution.parallel_io is false: one part");
	} else if (width <= 1) {
		e->parts = 1;
		snprintf(e->why, sizeof(e->why),
		         "min(max_io_threads %llu, max_request_parallelism "
		         "%llu) = %llu: one part",
		         (unsigned long long)threads,
		         (unsigned long long)parallelism,
		         (unsigned long long)width);
	} else if (size <= threshold) {
		e->parts = 1;
		snprintf(e->why, sizeof(e->why),
		         "%llu bytes <= min_io_threshold_size_kb (%llu KiB): "
		         "one part",
		         (unsigned long long)size,
		         (unsigned long long)(threshold >> 10));
	} else {
		uint64_t by_size = threshold ? size / threshold : width;

		if (by_size < 1)
			by_size = 1;
		e->parts = min_u64(width, by_size);
		snprintf(
		    e->why, sizeof(e->why),
		    "min(max_io_threads %llu, max_request_parallelism "
		    "%llu) = %llu; parts of at least "
		    "min_io_threshold_size_kb (%llu KiB) allow %llu; "
		    "parts = min(%llu, %llu) = %llu",
		    (unsigned long long)threads,
		    (unsigned long long)parallelism, (unsigned long long)width,
		    (unsigned long long)(threshold >> 10),
		    (unsigned long long)by_size, (unsigned long long)width,
		    (unsigned long long)by_size, (unsigned long long)e->parts);
	}
	e->part_size = size ? div_up(size, e->parts) : 0;
	e->max_transfer = slab ? min_u64(e->part_size, slab) : e->part_size;
	e->transfers_per_part =
	    e->max_transfer ? div_up(e->part_size, e->max_transfer) : 0;
}

/* Appends a task of len bytes to the run-length list of task sizes. */
static void add_task_size(gpufile_plan_t *p, uint64_t len, uint64_t count)
{
	int n = p->ntask_sizes;

	if (n && p->task_sizes[n - 1] == len) {
		p->task_counts[n - 1] += count;
		return;
	}
	assert(n < 3);
	p->task_sizes[n] = len;
	p->task_counts[n] = count;
	p->ntask_sizes++;
}

/* The settings and cuFile configuration a plan is made with, into out
 * (task_size 0: the setting). Returns 0 or an error. */
static int plan_inputs(uint64_t task_size, int registered,
                       const gpufile_cufile_config_t *cfg, gpufile_plan_t *out)
{
	size_t ts_setting, threshold;
	unsigned nthreads;
	int rc;

	rc = gpufile_get_task_size(&ts_setting);
	if (rc == 0)
		rc = gpufile_get_gds_threshold(&threshold);
	if (rc == 0)
		rc = gpufile_get_nthreads(&nthreads);
	if (rc)
		return rc;
	/* The embedded configuration is filled by the rule too: its size
	 * says the bytes of it this library knows. */
	out->cufile.size = sizeof(out->cufile);
	if (cfg) {
		/* Only this library's part of a (maybe newer) caller's. */
		memcpy(&out->cufile, cfg, sizeof(out->cufile));
		out->cufile.size = sizeof(out->cufile);
	} else {
		rc = gpufile_cufile_config_load(NULL, &out->cufile);
		if (rc)
			return rc;
	}
	out->task_size = task_size ? task_size : ts_setting;
	out->gds_threshold = threshold;
	out->registered = registered ? 1 : 0;
	out->nthreads = nthreads;
	return 0;
}

/* gpufile's tasks, exactly as pool.c splits a request: at multiples of
 * task_size in the file. */
static void plan_tasks(gpufile_plan_t *out)
{
	const uint64_t size = out->read_size, offset = out->offset,
	               task_size = out->task_size;
	const uint64_t base = offset - offset % task_size, end = offset + size;

	out->tasks = size ? div_up(end - base, task_size) : 0;
	if (out->tasks == 1) {
		add_task_size(out, size, 1);
	} else if (out->tasks > 1) {
		uint64_t last_start = base + (out->tasks - 1) * task_size;

		add_task_size(out, base + task_size - offset, 1);
		if (out->tasks > 2)
			add_task_size(out, task_size, out->tasks - 2);
		add_task_size(out, end - last_start, 1);
	}
	out->whole_task_size = offset ? offset + size : size;
}

/* cuFile's schedule of each distinct task size. The threshold applies to
 * the request as a whole (file.c): a request at or above it sends every
 * task to cuFile, even a short tail task. */
static void plan_cufile(gpufile_plan_t *out)
{
	uint64_t max_parts = 0;

	out->below_threshold = out->read_size < out->gds_threshold;
	out->cufile_requests = out->below_threshold ? 0 : out->tasks;
	if (!out->below_threshold) {
		for (int i = 0; i < out->ntask_sizes; i++) {
			gpufile_plan_entry_t *e =
			    &out->entries[out->nentries++];
			plan_request(&out->cufile, out->task_sizes[i], e);
			e->count = out->task_counts[i];
			if (e->parts > max_parts)
				max_parts = e->parts;
		}
	}
	out->parts_in_flight =
	    min_u64(out->nthreads, out->cufile_requests) * max_parts;
	snprintf(out->model_note, sizeof(out->model_note), "%s",
	         out->registered
	             ? "registered buffer: NVIDIA documents the split for "
	               "unregistered buffers only; gpufile's model applies "
	               "the same rule (an assumption, not a measurement)"
	             : "unregistered buffer: the rule NVIDIA documents "
	               "(cufile.json execution section)");
}

/* gpufile_explain() into the library's own struct out, zeroed. */
static int plan(uint64_t size, uint64_t offset, uint64_t task_size,
                int registered, const gpufile_cufile_config_t *cfg,
                gpufile_plan_t *out)
{
	int rc;

	if (size > (uint64_t)INT64_MAX || offset > (uint64_t)INT64_MAX - size)
		return gpufile__fail(
		    -EINVAL,
		    "explain: offset %llu with size %llu is out "
		    "of range",
		    (unsigned long long)offset, (unsigned long long)size);
	rc = plan_inputs(task_size, registered, cfg, out);
	if (rc)
		return rc;
	out->read_size = size;
	out->offset = offset;
	plan_tasks(out);
	plan_cufile(out);
	return 0;
}

int gpufile_explain(uint64_t size, uint64_t offset, uint64_t task_size,
                    int registered, const gpufile_cufile_config_t *cfg,
                    gpufile_plan_t *out)
{
	gpufile_plan_t local;
	int rc;

	if (!out)
		return gpufile__fail(-EINVAL, "gpufile_explain: out is NULL");
	rc = GPUFILE__SIZED_CHECK(out, gpufile_plan_t);
	if (rc == 0 && cfg)
		rc = GPUFILE__SIZED_CHECK(cfg, gpufile_cufile_config_t);
	if (rc)
		return rc;
	memset(&local, 0, sizeof(local));
	local.size = sizeof(local);
	rc = plan(size, offset, task_size, registered, cfg, &local);
	gpufile__sized_put(out, &local, sizeof(local));
	return rc;
}
