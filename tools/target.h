/*
 * Where `gpufile read` and `gpufile load` put bytes and `gpufile write`
 * takes them from: device memory of a GPU when one is usable (or asked
 * for), else host memory, with the reason in words for the report.
 */
#ifndef GPUFILE_TOOLS_TARGET_H
#define GPUFILE_TOOLS_TARGET_H

#include "gpufile.h"

#include <stddef.h>

struct target {
	int device; /* -1: host memory */
	char reason[512];
	void *buf;
};

struct run_settings;

/* Checks the options of a command that moves bytes before anything is
 * opened: --host (want_host) and --device (want_device >= 0) exclude each
 * other, and the run settings s must agree (run_settings_check). Returns
 * 0, or EXIT_USAGE after the message. */
int target_check_options(const char *cmd, int want_host, int want_device,
                         const struct run_settings *s);

/* Picks the memory as --host (want_host) and --device (want_device >= 0)
 * ask, and says why in t->reason. Returns 0, or EXIT_RUNTIME after a
 * message when the GPU asked for is not usable. */
int target_choose(const char *cmd, int want_host, int want_device,
                  struct target *t);

/* Allocates size bytes (at least 1) of t's memory in t->buf; host memory
 * is 4096-byte aligned and touched. what names the buffer in the error
 * message ("the read window"). Returns 0 or EXIT_RUNTIME. */
int target_alloc(const char *cmd, struct target *t, size_t size,
                 const char *what);

/* gpufile_path_info(h, path, reason, len) for the report of a request
 * that moved t's memory. For host memory the device path is only told,
 * so where the library refuses to tell it (compat_mode=off without
 * cuFile) its message is the reason. Returns 0, or EXIT_RUNTIME after a
 * message when t is device memory and the library refused. */
int target_path_info(const char *cmd, const struct target *t, gpufile_t *h,
                     gpufile_path_t *path, char *reason, size_t len);

/* Frees t->buf; a target without a buffer is left alone. */
void target_free(struct target *t);

/* "GPU 0 memory" / "host memory" (text) or "device:0" / "host" (JSON). */
const char *target_name(const struct target *t, int for_json, char *buf,
                        size_t len);

#endif
