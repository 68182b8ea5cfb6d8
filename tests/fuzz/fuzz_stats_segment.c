/*
 * libFuzzer target: the reader of statistics segments (what gpufile stats
 * maps from another process's memfd). The input becomes a memfd, padded
 * or cut to the layout's size; when the first byte is odd the header
 * (magic, version, size, uid) is stamped valid so that the counters, file
 * records, cuFile and settings sections behind it are read from hostile
 * bytes; bit 2 leaves it unsealed, which must be refused.
 * Properties: no crash or sanitizer report; a refusal leaves a message;
 * every string returned is terminated and every path index in range.
 */
#define _GNU_SOURCE
#include "gpufile.h"
#include "internal.h"
#include "stats_segment.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static gpufile_stats_t st;
	static gpufile_file_stat_t files[GPUFILE_MAX_FILE_STATS];
	struct stats_seg *seg = calloc(1, sizeof(*seg));
	size_t len = sizeof(*seg);
	int fd, rc;

	if (!seg)
		return 0;
	memcpy(seg, data, size < len ? size : len);
	if (size && (data[0] & 1)) {
		seg->magic = STATS_SEG_MAGIC;
		seg->version = STATS_SEG_VERSION;
		seg->size = sizeof(*seg);
		seg->uid = (uint32_t)getuid();
	}
	if (size && (data[0] & 2))
		len = size; /* a wrong size, most of the time */
	fd = memfd_create("gpufile-stats", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || fchmod(fd, 0600) < 0 ||
	    write(fd, seg, len < sizeof(*seg) ? len : sizeof(*seg)) < 0 ||
	    (len > sizeof(*seg) && ftruncate(fd, (off_t)len) < 0))
		abort();
	free(seg);
	if (!(size && (data[0] & 4)) &&
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
		abort();
	rc = gpufile__stats_read_fd(fd, (unsigned)getuid(), &st, files,
	                            GPUFILE_MAX_FILE_STATS);
	close(fd);
	if (size && (data[0] & 4) && rc >= 0)
		abort(); /* an unsealed segment was mapped */
	if (rc < 0) {
		if (!gpufile_errmsg()[0])
			abort();
		return 0;
	}
	if (rc > GPUFILE_MAX_FILE_STATS)
		abort();
	for (int i = 0; i < rc; i++)
		if (strlen(files[i].path) >= sizeof(files[i].path) ||
		    strlen(files[i].reason) >= sizeof(files[i].reason) ||
		    files[i].chosen > GPUFILE_PATH_COUNT)
			abort();
	if (strlen(st.command) >= sizeof(st.command) ||
	    st.cufile_ngpus > GPUFILE_MAX_GPUS ||
	    st.nsettings > GPUFILE_MAX_SETTINGS)
		abort();
	for (int i = 0; i < st.nsettings; i++)
		if (strlen(st.settings[i].name) >= sizeof(st.settings[i].name))
			abort();
	return 0;
}
