/*
 * libFuzzer target: the settings parsers (gpufile__parse_size, _mode,
 * _count) and gpufile_config_set for every setting. The first byte picks
 * the setting; the rest is the value. Properties: no crash or sanitizer
 * report; a parser that accepts returns a value its text denotes (size:
 * digits times a power of 1024; count: the digits); a rejected value
 * leaves a message naming the setting and keeps the previous value.
 */
#include "gpufile.h"
#include "internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char text[256], before[512], after[512];
	const char *name;
	uint64_t v = 0, c = 0;
	int mode = -1, n, rc;

	if (size < 1 || size > sizeof(text))
		return 0;
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';

	rc = gpufile__parse_size(text, &v);
	if (rc != 0 && rc != -EINVAL && rc != -ERANGE)
		abort();
	rc = gpufile__parse_count(text, &c);
	if (rc != 0 && rc != -EINVAL && rc != -ERANGE)
		abort();
	if (rc == 0) {
		uint64_t s2 = 0;
		/* A count is a size without a unit. */
		if (gpufile__parse_size(text, &s2) != 0 || s2 != c)
			abort();
	}
	rc = gpufile__parse_mode(text, &mode);
	if (rc == 0 && (mode < 0 || mode > 2))
		abort();

	n = gpufile_config_count();
	if (n <= 0)
		abort();
	name = gpufile_config_name(data[0] % n);
	if (!name)
		abort();
	gpufile_config_get(name, before, sizeof(before), NULL, NULL, 0);
	rc = gpufile_config_set(name, text);
	gpufile_config_get(name, after, sizeof(after), NULL, NULL, 0);
	if (rc != 0) {
		if (!strstr(gpufile_errmsg(), name) || strcmp(before, after))
			abort();
	}
	gpufile_config_reset();
	return 0;
}
