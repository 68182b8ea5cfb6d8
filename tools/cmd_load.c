/*
 * gpufile load: safetensors checkpoints read into GPU (or host) memory with
 * gpufile_safetensors_load, timed, with the paths that carried the bytes.
 */
#define _GNU_SOURCE
#include "checkpoint.h"
#include "commands.h"
#include "gpufile.h"
#include "json.h"
#include "measure.h"
#include "msg.h"
#include "options.h"
#include "progress.h"
#include "run_settings.h"
#include "summary.h"
#include "target.h"
#include "text.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define PAGE 4096u

static const char load_usage[] =
    "Usage: gpufile load FILE|DIR|INDEX.json|URL... [--host | --device N]\n"
    "                    [--json] [--no-progress] " RUN_SETTINGS_USAGE "\n"
    "\n"
    "Loads safetensors files, given as files, as a checkpoint folder (its\n"
    "*.safetensors.index.json, else every *.safetensors in it), as an\n"
    "index (model.safetensors.index.json: the shards its weight_map names,\n"
    "each once) or as http://, https:// or s3://BUCKET/KEY URLs (see\n"
    "gpufile(1), REMOTE OBJECTS).\n"
    "\n"
    "Opens each safetensors FILE (its header parsed and validated: an error\n"
    "names the file, the tensor and the field at fault), reads its whole\n"
    "data section into one fresh buffer with gpufile_safetensors_load, and\n"
    "reports per file and in total: tensors, bytes, seconds, GB/s (1 GB =\n"
    "1e9 bytes) and which data path carried the bytes, and why.\n"
    "\n"
    "The buffer is device memory of GPU 0 when a GPU is usable, else host\n"
    "memory (touched before timing). Seconds cover the read of the data\n"
    "section; parsing the header is reported apart (open_seconds). The\n"
    "worker pool and bounce buffers are started before timing.\n"
    "\n"
    "  --host         load into host memory even when a GPU is usable\n"
    "  --device N     load into device memory of GPU N (error if unusable)\n"
    "  --json         print one JSON object instead of text\n"
    "  --no-progress  no progress line (shown on stderr only when stderr\n"
    "                 is a terminal and a file's data is >= 64 MiB: the\n"
    "                 file's bytes, rate, ETA, files and tensors "
    "done)\n" RUN_SETTINGS_HELP "  --help         print this help\n"
    "\n"
    "Exit status: 0 ok, 1 I/O, format or runtime error, 2 usage error.\n";

struct load_file {
	char *path; /* as the library shows it: a URL redacted */
	int tensors;
	uint64_t bytes;
	double open_seconds, seconds;
	gpufile_path_t device_path;
	char reason[512];
};

/* What the progress line says of files and tensors: files before this
 * one, and of this one's tensors (in offset order) those whose bytes lie
 * below the bytes done. Tasks are taken in file order, so that is the
 * count finished give or take the tasks running. */
struct load_progress {
	int file, nfiles;
	uint64_t tensors_before;
	const uint64_t *ends; /* each tensor's end, ascending */
	int ntensors;
};

static void describe_load(void *arg, uint64_t done, char *buf, size_t len)
{
	const struct load_progress *lp = arg;
	int lo = 0, hi = lp->ntensors;

	while (lo < hi) { /* tensors whose end <= done */
		int mid = lo + (hi - lo) / 2;
		if (lp->ends[mid] <= done)
			lo = mid + 1;
		else
			hi = mid;
	}
	snprintf(buf, len, "  file %d/%d, tensors %" PRIu64 " done",
	         lp->file + 1, lp->nfiles, lp->tensors_before + (uint64_t)lo);
}

/* The end of each tensor of st, ascending (NULL when none or no memory:
 * the line then counts tensors per file). */
static uint64_t *tensor_ends(const gpufile_safetensors_t *st, int n)
{
	uint64_t *ends = n > 0 ? calloc((size_t)n, sizeof(*ends)) : NULL;
	gpufile_safetensors_tensor_t t;

	for (int i = 0; ends && i < n; i++) {
		if (gpufile_safetensors_tensor(st, i, &t)) {
			free(ends);
			return NULL;
		}
		ends[i] = t.end;
		if (i && ends[i] < ends[i - 1])
			ends[i] = ends[i - 1];
	}
	return ends;
}

/* Opens path, allocates, loads and frees; fills *f. lp says which file of
 * how many this is; progress is wanted unless --json or --no-progress. */
static int load_one(const char *cmd, int device, const char *path,
                    struct load_file *f, struct load_progress *lp, int progress)
{
	struct progress p;
	uint64_t *ends = NULL;
	struct target mem = {.device = device};
	char *what = NULL;
	gpufile_safetensors_t *st = NULL;
	size_t len, shift;
	double t0 = measure_now();
	ssize_t n;
	int rc = EXIT_RUNTIME;

	if (gpufile_safetensors_open(&st, path))
		return msg_error(cmd, "%s", gpufile_errmsg());
	f->open_seconds = measure_now() - t0;
	f->tensors = gpufile_safetensors_count(st);
	len = (size_t)gpufile_safetensors_data_size(st);
	/* The data section is placed at an address congruent to its file
	 * offset modulo 4096, so that page-aligned file ranges (every task)
	 * land page-aligned, as O_DIRECT and cuFile's direct path want;
	 * gpufile read of the same file gets that by starting at offset 0. */
	if (asprintf(&what, "the data section of %s", f->path) < 0) {
		what = NULL;
		msg_error(cmd, "out of memory");
		goto out;
	}
	if (target_alloc(cmd, &mem, len + PAGE, what))
		goto out;
	/* buf + shift is congruent to the data offset (unsigned arithmetic
	 * wraps modulo 2^64, a multiple of PAGE). */
	shift = (size_t)((gpufile_safetensors_data_offset(st) -
	                  (uint64_t)(uintptr_t)mem.buf) %
	                 PAGE);
	ends = progress && len >= PROGRESS_MIN_BYTES
	           ? tensor_ends(st, f->tensors)
	           : NULL;
	lp->ends = ends;
	lp->ntensors = ends ? f->tensors : 0;
	progress_start_with(&p, "load", len, progress, describe_load, lp);
	t0 = measure_now();
	n = gpufile_safetensors_load(st, (char *)mem.buf + shift, len);
	f->seconds = measure_now() - t0;
	progress_update(&p, n > 0 ? (uint64_t)n : 0);
	progress_end(&p); /* its thread is gone: lp is this thread's again */
	lp->ends = NULL;
	lp->ntensors = 0;
	lp->tensors_before += n >= 0 ? (uint64_t)f->tensors : 0;
	free(ends);
	if (n < 0) {
		msg_error(cmd, "%s", gpufile_errmsg());
		goto out;
	}
	f->bytes = (uint64_t)n;
	if (target_path_info(cmd, &mem, gpufile_safetensors_handle(st),
	                     &f->device_path, f->reason, sizeof(f->reason)))
		goto out;
	rc = EXIT_OK;
out:
	free(what);
	target_free(&mem);
	gpufile_safetensors_close(st);
	return rc;
}

static void report_text(const struct load_file *files, int nfiles,
                        const char *target, const char *why,
                        const gpufile_stats_t *before,
                        const gpufile_stats_t *after)
{
	uint64_t bytes = 0, tensors = 0;
	double seconds = 0;
	char human[32];

	printf("target: %s: ", target);
	text_put(stdout, why);
	putchar('\n');
	for (int i = 0; i < nfiles; i++) {
		const struct load_file *f = &files[i];

		text_put(stdout, f->path);
		printf(": %d tensors, %" PRIu64 " bytes (%s), %.6f s, "
		       "%.3f GB/s (header %.6f s)\n",
		       f->tensors, f->bytes,
		       measure_human_bytes(f->bytes, human, sizeof(human)),
		       f->seconds, measure_gbps(f->bytes, f->seconds),
		       f->open_seconds);
		/* The reason starts with the path's name ("posix: ..."), as
		 * in gpufile read's "device buffers:" line. */
		printf("  device path: ");
		text_put(stdout, f->reason);
		putchar('\n');
		bytes += f->bytes;
		tensors += (uint64_t)f->tensors;
		seconds += f->seconds;
	}
	printf("total: %d file%s, %" PRIu64 " tensors, %" PRIu64
	       " bytes, %.6f s, %.3f GB/s\n",
	       nfiles, nfiles == 1 ? "" : "s", tensors, bytes, seconds,
	       measure_gbps(bytes, seconds));
	printf("paths (this command's reads):\n");
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		const gpufile_counter_t *a = &after->path[p][0];
		const gpufile_counter_t *b = &before->path[p][0];

		if (a->ops == b->ops)
			continue;
		printf("  %-8s %" PRIu64 " ops, %" PRIu64 " tasks, %" PRIu64
		       " bytes, %" PRIu64 " errors\n",
		       gpufile_path_name((gpufile_path_t)p), a->ops - b->ops,
		       a->tasks - b->tasks, a->bytes - b->bytes,
		       a->errors - b->errors);
	}
}

static void report_json(const struct load_file *files, int nfiles,
                        const char *target, const char *why,
                        const gpufile_stats_t *before,
                        const gpufile_stats_t *after)
{
	uint64_t bytes = 0, tensors = 0;
	double seconds = 0;
	struct json j;

	json_init(&j, stdout);
	json_object_begin(&j, NULL);
	json_key_str(&j, "target", target);
	json_key_str(&j, "target_reason", why);
	json_array_begin(&j, "files");
	for (int i = 0; i < nfiles; i++) {
		const struct load_file *f = &files[i];

		json_object_begin(&j, NULL);
		json_key_str(&j, "file", f->path);
		json_key_i64(&j, "tensors", f->tensors);
		json_key_u64(&j, "bytes", f->bytes);
		json_key_double(&j, "seconds", f->seconds);
		json_key_double(&j, "gbps", measure_gbps(f->bytes, f->seconds));
		json_key_double(&j, "open_seconds", f->open_seconds);
		json_key_str(&j, "device_path",
		             gpufile_path_name(f->device_path));
		json_key_str(&j, "reason", f->reason);
		json_object_end(&j);
		bytes += f->bytes;
		tensors += (uint64_t)f->tensors;
		seconds += f->seconds;
	}
	json_array_end(&j);
	json_key_u64(&j, "tensors", tensors);
	json_key_u64(&j, "bytes", bytes);
	json_key_double(&j, "seconds", seconds);
	json_key_double(&j, "gbps", measure_gbps(bytes, seconds));
	summary_json_paths(&j, "paths", before, after, 0);
	summary_json_settings(&j, "settings");
	json_key_str(&j, "version", gpufile_version());
	json_object_end(&j);
}

/* Loads the files of args, and reports. */
static int cmd_load_files(const char *cmd, int want_host, int want_device,
                          int json, int progress,
                          const struct checkpoint_files *args)
{
	struct load_progress lp = {0, 0, 0, NULL, 0};
	struct target t = {.device = -1};
	char target[32];
	struct load_file *files;
	gpufile_stats_t before, after;
	int rc = EXIT_OK, nfiles;

	if (gpufile_config_check())
		return msg_error(cmd, "%s", gpufile_errmsg());
	if (target_choose(cmd, want_host, want_device, &t))
		return EXIT_RUNTIME;
	/* "device:0" / "host" in the text report too. */
	target_name(&t, 1, target, sizeof(target));
	if (gpufile_warmup())
		return msg_error(cmd, "warmup: %s", gpufile_errmsg());
	nfiles = args->count;
	files = calloc((size_t)nfiles, sizeof(*files));
	if (!files)
		return msg_error(cmd, "out of memory");
	GPUFILE_INIT(before);
	gpufile_stats_self(&before);
	lp.nfiles = nfiles;
	for (int i = 0; i < nfiles && rc == EXIT_OK; i++) {
		files[i].path = text_shown_path(args->paths[i]);
		lp.file = i;
		rc = files[i].path ? load_one(cmd, t.device, args->paths[i],
		                              &files[i], &lp, progress)
		                   : msg_error(cmd, "out of memory");
	}
	GPUFILE_INIT(after);
	gpufile_stats_self(&after);
	if (rc == EXIT_OK) {
		if (json)
			report_json(files, nfiles, target, t.reason, &before,
			            &after);
		else
			report_text(files, nfiles, target, t.reason, &before,
			            &after);
	}
	for (int i = 0; i < nfiles; i++)
		free(files[i].path);
	free(files);
	return rc;
}

int cmd_load(int argc, char **argv)
{
	static const char *const cmd = "load";
	int want_host = 0, want_device = -1, json = 0, quiet = 0, first;
	struct run_settings settings = {0};
	struct checkpoint_files args = {0};
	int rc = EXIT_OK;
	const struct opt opts[] = {
	    {.name = "host", .kind = OPT_FLAG, .dest = &want_host},
	    {.name = "device", .kind = OPT_DEVICE, .dest = &want_device},
	    {.name = "json", .kind = OPT_FLAG, .dest = &json},
	    {.name = "no-progress", .kind = OPT_FLAG, .dest = &quiet},
	    RUN_SETTINGS_OPTS(&settings),
	};
	const struct opt_spec spec = {
	    cmd,    load_usage, opts,   sizeof(opts) / sizeof(opts[0]),
	    "FILE", 1,          INT_MAX};

	first = opt_parse(&spec, argc, argv, &rc);
	if (first < 0)
		return rc;
	rc = target_check_options(cmd, want_host, want_device, &settings);
	if (rc == 0)
		rc = run_settings_apply(cmd, &settings);
	if (rc)
		return rc;
	for (int i = first; i < argc && rc == EXIT_OK; i++)
		rc = checkpoint_expand(cmd, argv[i], &args);
	if (rc) {
		checkpoint_files_free(&args);
		return rc;
	}
	rc = cmd_load_files(cmd, want_host, want_device, json, !json && !quiet,
	                    &args);
	checkpoint_files_free(&args);
	return rc;
}
