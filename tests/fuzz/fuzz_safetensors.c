/*
 * libFuzzer target: the safetensors header parser (src/formats/safetensors.c).
 * The first input byte picks the framing: odd, the rest is taken as the
 * JSON header and an 8-byte length is put in front of it that leaves the
 * last (byte0 >> 1) bytes as the data section, so that the fuzzer spends
 * its time inside the JSON; even, the rest is the file as it is.
 * Properties: no crash or sanitizer report; a refusal leaves a message
 * and no object; an accepted file's tensors tile its data section in
 * offset order, each is found by its name, each metadata key is found
 * with its own entry's value, and the data section loads.
 */
#define _GNU_SOURCE
#include "gpufile.h"

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void write_file(const char *path, const uint8_t *data, size_t size)
{
	uint8_t len8[8];
	int fd;

	unlink(path);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	if (fd < 0)
		abort();
	if (size && (data[0] & 1)) {
		size_t tail = data[0] >> 1, hdr = size - 1;
		uint64_t n = hdr > tail ? hdr - tail : 0;

		for (int i = 0; i < 8; i++)
			len8[i] = (uint8_t)(n >> (8 * i));
		if (write(fd, len8, 8) != 8)
			abort();
	}
	if (size > 1 && write(fd, data + 1, size - 1) != (ssize_t)(size - 1))
		abort();
	close(fd);
}

static void check_accepted(gpufile_safetensors_t *st)
{
	uint64_t at = 0, size = gpufile_safetensors_data_size(st);
	int n = gpufile_safetensors_count(st);
	unsigned char *buf;

	for (int i = 0; i < n; i++) {
		gpufile_safetensors_tensor_t t;

		if (gpufile_safetensors_tensor(st, i, &t) != 0 ||
		    t.begin != at || t.end < t.begin || t.ndim < 0 ||
		    gpufile_safetensors_find(st, t.name) != i ||
		    gpufile_safetensors_dtype_bits(t.dtype) !=
		        (int)t.dtype_bits)
			abort();
		at = t.end;
	}
	if (at != size)
		abort();
	/* The whole table at once: as many entries as the count, the last
	 * one as the per-index accessor describes it. */
	if (n > 0) {
		gpufile_safetensors_tensor_t *all =
		    calloc((size_t)n, sizeof(*all));
		gpufile_safetensors_tensor_t last;

		if (!all ||
		    gpufile_safetensors_tensors(st, 0, n + 1, all) != n ||
		    gpufile_safetensors_tensor(st, n - 1, &last) != 0 ||
		    all[n - 1].name != last.name ||
		    all[n - 1].begin != last.begin ||
		    all[n - 1].end != last.end)
			abort();
		free(all);
	}
	/* One entry per key: looking a key up finds its own entry's value;
	 * entries imply an __metadata__ object. */
	if (gpufile_safetensors_metadata_count(st) > 0 &&
	    gpufile_safetensors_has_metadata(st) != 1)
		abort();
	for (int i = 0; i < gpufile_safetensors_metadata_count(st); i++) {
		const char *k, *v;

		if (gpufile_safetensors_metadata(st, i, &k, &v) != 0 ||
		    gpufile_safetensors_metadata_get(st, k) != v)
			abort();
	}
	buf = malloc(size + 1);
	if (!buf || gpufile_safetensors_load(st, buf, size) != (ssize_t)size)
		abort();
	free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static char path[64];
	gpufile_safetensors_t *st = NULL;
	int rc;

	if (!path[0])
		snprintf(path, sizeof(path), "/tmp/gpufile-fuzz-st-%d",
		         (int)getpid());
	write_file(path, data, size);
	rc = gpufile_safetensors_open(&st, path);
	if (rc < 0) {
		if (st != NULL || !gpufile_errmsg()[0])
			abort();
		return 0;
	}
	check_accepted(st);
	gpufile_safetensors_close(st);
	return 0;
}
