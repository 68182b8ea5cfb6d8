/*
 * gpufile load: safetensors checkpoints read into GPU (or host) memory with
 * gpufile_safetensors_load, timed, with the paths that carried the bytes.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "gpufile.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define PAGE 4096u

static const char load_usage[] =
    "Usage: gpufile load FILE... [--host | --device N] [--json]\n"
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
    "  --help         print this help\n"
    "\n"
    "Exit status: 0 ok, 1 I/O, format or runtime error, 2 usage error.\n";

struct load_file {
	const char *path;
	int tensors;
	uint64_t bytes;
	double open_seconds, seconds;
	gpufile_path_t device_path;
	char reason[512];
};

/* Device -1 is host memory. Says in why which was chosen and why. */
static int load_target(const char *cmd, int want_host, int want_device,
                       int *device, char *why, size_t len)
{
	int n;

	*device = -1;
	if (want_host) {
		snprintf(why, len, "--host given");
		return 0;
	}
	n = gpufile_cuda_device_count();
	if (want_device >= 0) {
		if (n < 0)
			return util_error(cmd, "--device %d: no usable GPU: %s",
			                  want_device, gpufile_errmsg());
		if (want_device >= n)
			return util_error(
			    cmd, "--device %d: no such GPU (%d usable)",
			    want_device, n);
		*device = want_device;
		snprintf(why, len, "--device %d given", want_device);
	} else if (n > 0) {
		*device = 0;
		snprintf(why, len,
		         "%d usable GPU%s found; --host uses host memory", n,
		         n == 1 ? "" : "s");
	} else {
		snprintf(why, len, "no usable GPU: %s",
		         gpufile_errmsg()[0] ? gpufile_errmsg()
		                             : gpufile_strerror(n));
	}
	return 0;
}

/* Opens, allocates, loads and frees one file; fills *f. */
static int load_one(const char *cmd, int device, struct load_file *f)
{
	gpufile_safetensors_t *st = NULL;
	size_t len, shift;
	void *buf = NULL;
	double t0 = util_now();
	ssize_t n;
	int rc = EXIT_RUNTIME;

	if (gpufile_safetensors_open(&st, f->path))
		return util_error(cmd, "%s", gpufile_errmsg());
	f->open_seconds = util_now() - t0;
	f->tensors = gpufile_safetensors_count(st);
	len = (size_t)gpufile_safetensors_data_size(st);
	/* The data section is placed at an address congruent to its file
	 * offset modulo 4096, so that page-aligned file ranges (every task)
	 * land page-aligned, as O_DIRECT and cuFile's direct path want;
	 * gpufile read of the same file gets that by starting at offset 0. */
	if (device >= 0) {
		if (gpufile_device_alloc(device, len + PAGE, &buf)) {
			util_error(cmd,
			           "%s: allocating %zu bytes on GPU %d: %s",
			           f->path, len, device, gpufile_errmsg());
			goto out;
		}
	} else {
		buf = malloc(len + PAGE);
		if (!buf) {
			util_error(cmd, "%s: allocating %zu bytes: %s", f->path,
			           len, strerror(ENOMEM));
			goto out;
		}
		memset(buf, 0, len + PAGE); /* fault the pages in now */
	}
	/* buf + shift is congruent to the data offset (unsigned arithmetic
	 * wraps modulo 2^64, a multiple of PAGE). */
	shift = (size_t)((gpufile_safetensors_data_offset(st) -
	                  (uint64_t)(uintptr_t)buf) %
	                 PAGE);
	t0 = util_now();
	n = gpufile_safetensors_load(st, (char *)buf + shift, len);
	f->seconds = util_now() - t0;
	if (n < 0) {
		util_error(cmd, "%s", gpufile_errmsg());
		goto out;
	}
	f->bytes = (uint64_t)n;
	if (gpufile_path_info(gpufile_safetensors_handle(st), &f->device_path,
	                      f->reason, sizeof(f->reason))) {
		util_error(cmd, "%s", gpufile_errmsg());
		goto out;
	}
	rc = EXIT_OK;
out:
	if (buf && device >= 0)
		gpufile_device_free(buf);
	else
		free(buf);
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

	printf("target: %s: %s\n", target, why);
	for (int i = 0; i < nfiles; i++) {
		const struct load_file *f = &files[i];

		printf("%s: %d tensors, %" PRIu64 " bytes (%s), %.6f s, "
		       "%.3f GB/s (header %.6f s)\n",
		       f->path, f->tensors, f->bytes,
		       util_human_bytes(f->bytes, human, sizeof(human)),
		       f->seconds, util_gbps(f->bytes, f->seconds),
		       f->open_seconds);
		printf("  device path: %s: %s\n",
		       gpufile_path_name(f->device_path), f->reason);
		bytes += f->bytes;
		tensors += (uint64_t)f->tensors;
		seconds += f->seconds;
	}
	printf("total: %d file%s, %" PRIu64 " tensors, %" PRIu64
	       " bytes, %.6f s, %.3f GB/s\n",
	       nfiles, nfiles == 1 ? "" : "s", tensors, bytes, seconds,
	       util_gbps(bytes, seconds));
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
		json_key_double(&j, "gbps", util_gbps(f->bytes, f->seconds));
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
	json_key_double(&j, "gbps", util_gbps(bytes, seconds));
	util_json_paths(&j, "paths", before, after, 0);
	json_key_str(&j, "version", gpufile_version());
	json_object_end(&j);
}

int cmd_load(int argc, char **argv)
{
	static const char *const cmd = "load";
	static const struct option longopts[] = {
	    {"host", no_argument, NULL, 'H'},
	    {"device", required_argument, NULL, 'd'},
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {NULL, 0, NULL, 0},
	};
	int want_host = 0, want_device = -1, json = 0, device, nfiles;
	char why[512], target[32];
	struct load_file *files;
	gpufile_stats_t before, after;
	uint64_t v;
	int c, rc = EXIT_OK;

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'H':
			want_host = 1;
			break;
		case 'd':
			rc = util_count_arg(cmd, "--device", optarg, 0, 1023,
			                    &v);
			if (rc)
				return rc;
			want_device = (int)v;
			break;
		case 'j':
			json = 1;
			break;
		case 'h':
			fputs(load_usage, stdout);
			return EXIT_OK;
		default:
			return util_getopt_error(cmd, c, argv);
		}
	}
	if (optind >= argc)
		return util_usage_error(cmd, "no FILE given");
	if (want_host && want_device >= 0)
		return util_usage_error(cmd, "--host and --device exclude "
		                             "each other");
	if (gpufile_config_check())
		return util_error(cmd, "%s", gpufile_errmsg());
	if (load_target(cmd, want_host, want_device, &device, why, sizeof(why)))
		return EXIT_RUNTIME;
	if (device >= 0)
		snprintf(target, sizeof(target), "device:%d", device);
	else
		snprintf(target, sizeof(target), "host");
	if (gpufile_warmup())
		return util_error(cmd, "warmup: %s", gpufile_errmsg());
	nfiles = argc - optind;
	files = calloc((size_t)nfiles, sizeof(*files));
	if (!files)
		return util_error(cmd, "out of memory");
	gpufile_stats_self(&before);
	for (int i = 0; i < nfiles && rc == EXIT_OK; i++) {
		files[i].path = argv[optind + i];
		rc = load_one(cmd, device, &files[i]);
	}
	gpufile_stats_self(&after);
	if (rc == EXIT_OK) {
		if (json)
			report_json(files, nfiles, target, why, &before,
			            &after);
		else
			report_text(files, nfiles, target, why, &before,
			            &after);
	}
	free(files);
	return rc;
}
