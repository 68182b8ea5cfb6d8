/*
 * The memory a read goes to or a write comes from (see target.h).
 */
#define _GNU_SOURCE
#include "target.h"
#include "gpufile.h"
#include "msg.h"
#include "measure.h"
#include "run_settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGNMENT 4096

int target_check_options(const char *cmd, int want_host, int want_device,
                         const struct run_settings *s)
{
	if (want_host && want_device >= 0)
		return msg_usage_error(cmd, "--host and --device exclude "
		                            "each other");
	return run_settings_check(cmd, s);
}

int target_choose(const char *cmd, int want_host, int want_device,
                  struct target *t)
{
	int n;

	t->device = -1;
	if (want_host) {
		snprintf(t->reason, sizeof(t->reason), "--host given");
		return 0;
	}
	n = gpufile_cuda_device_count();
	if (want_device >= 0) {
		if (n < 0)
			return msg_error(cmd, "--device %d: no usable GPU: %s",
			                 want_device, gpufile_errmsg());
		if (want_device >= n)
			return msg_error(cmd,
			                 "--device %d: no such GPU (%d usable)",
			                 want_device, n);
		t->device = want_device;
		snprintf(t->reason, sizeof(t->reason), "--device %d given",
		         want_device);
		return 0;
	}
	if (n > 0) {
		t->device = 0;
		snprintf(t->reason, sizeof(t->reason),
		         "%d usable GPU%s found; --host uses host memory", n,
		         n == 1 ? "" : "s");
		return 0;
	}
	snprintf(t->reason, sizeof(t->reason), "no usable GPU: %s",
	         gpufile_errmsg()[0] ? gpufile_errmsg() : gpufile_strerror(n));
	return 0;
}

int target_alloc(const char *cmd, struct target *t, size_t size,
                 const char *what)
{
	size_t len = size ? size : 1;
	char human[32];
	int rc;

	measure_human_bytes(len, human, sizeof(human));
	if (t->device >= 0) {
		rc = gpufile_device_alloc(t->device, len, &t->buf);
		if (rc) {
			t->buf = NULL;
			return msg_error(cmd,
			                 "allocating %s (%zu bytes) on GPU %d "
			                 "for %s: %s",
			                 human, len, t->device, what,
			                 gpufile_errmsg());
		}
		return 0;
	}
	rc = posix_memalign(&t->buf, ALIGNMENT, len);
	if (rc) {
		t->buf = NULL;
		return msg_error(cmd,
		                 "allocating %s (%zu bytes) of host memory "
		                 "for %s: %s",
		                 human, len, what, strerror(rc));
	}
	/* Fault the pages in now, so that the first repeat does not time
	 * the kernel zeroing them. */
	memset(t->buf, 0, len);
	return 0;
}

int target_path_info(const char *cmd, const struct target *t, gpufile_t *h,
                     gpufile_path_t *path, char *reason, size_t len)
{
	if (gpufile_path_info(h, path, reason, len) == 0)
		return 0;
	/* The error a device request would meet is the answer for host
	 * memory, which never takes that path: a host read or write that
	 * worked must not fail for it (it exited 1 with no report). */
	if (t->device < 0) {
		snprintf(reason, len, "%s", gpufile_errmsg());
		return 0;
	}
	return msg_error(cmd, "%s", gpufile_errmsg());
}

void target_free(struct target *t)
{
	if (!t->buf)
		return;
	if (t->device >= 0)
		gpufile_device_free(t->buf);
	else
		free(t->buf);
	t->buf = NULL;
}

const char *target_name(const struct target *t, int for_json, char *buf,
                        size_t len)
{
	if (t->device < 0)
		snprintf(buf, len, "%s", for_json ? "host" : "host memory");
	else if (for_json)
		snprintf(buf, len, "device:%d", t->device);
	else
		snprintf(buf, len, "GPU %d memory", t->device);
	return buf;
}
