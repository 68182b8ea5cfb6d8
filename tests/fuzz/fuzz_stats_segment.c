/*
 * libFuzzer target: the reader of statistics segments (what gpufile stats
 * maps from /dev/shm). The input becomes a segment file, padded or cut to
 * the layout's size; when the first byte is odd the header (magic,
 * version, size, uid) is stamped valid so that the counters, file records,
 * cuFile and settings sections behind it are read from hostile bytes.
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
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[64];
	static gpufile_stats_t st;
	static gpufile_file_stat_t files[GPUFILE_MAX_FILE_STATS];
	struct stats_seg *seg = calloc(1, sizeof(*seg));
	size_t len = sizeof(*seg);
	int fd, rc;

	if (!seg)
		return 0;
	if (!path[0])
		snprintf(path, sizeof(path), "/tmp/gpufile-fuzz-seg-%d",
		         (int)getpid());
	memcpy(seg, data, size < len ? size : len);
	if (size && (data[0] & 1)) {
		seg->magic = STATS_SEG_MAGIC;
		seg->version = STATS_SEG_VERSION;
		seg->size = sizeof(*seg);
		seg->uid = (uint32_t)getuid();
	}
	if (size && (data[0] & 2))
		len = size; /* a wrong size, most of the time */
	unlink(path);
	fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd < 0 ||
	    write(fd, seg, len < sizeof(*seg) ? len : sizeof(*seg)) < 0 ||
	    (len > sizeof(*seg) && ftruncate(fd, (off_t)len) < 0))
		abort();
	close(fd);
	free(seg);
	rc = gpufile__stats_read_file(path, (unsigned)getuid(), &st, files,
	                              GPUFILE_MAX_FILE_STATS);
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
