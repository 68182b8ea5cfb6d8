/*
 * The JSON writer of the gpufile tool's --json output, by hand (the tool
 * links only libgpufile, so no JSON library is assumed). It tracks
 * nesting so that callers never place commas by hand:
 *
 *	struct json j;
 *	json_init(&j, stdout);
 *	json_object_begin(&j, NULL);
 *	json_key_u64(&j, "bytes", n);
 *	json_object_begin(&j, "paths");
 *	...
 *	json_object_end(&j);
 *	json_object_end(&j);	// prints a final newline at depth 0
 *
 * A NULL key means "no key": use it for the outermost value and for
 * elements of arrays.
 */
#ifndef GPUFILE_TOOLS_JSON_H
#define GPUFILE_TOOLS_JSON_H

#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 32
struct json {
	FILE *out;
	int depth;
	int count[JSON_MAX_DEPTH]; /* values written at each depth */
	/* 1: the whole value on one line (JSON Lines, for streams such as
	 * gpufile stats --watch --json); 0 (json_init's): indented. */
	int one_line;
};

void json_init(struct json *j, FILE *out);
void json_object_begin(struct json *j, const char *key);
void json_object_end(struct json *j);
void json_array_begin(struct json *j, const char *key);
void json_array_end(struct json *j);
void json_key_str(struct json *j, const char *key, const char *value);
void json_key_u64(struct json *j, const char *key, uint64_t value);
void json_key_i64(struct json *j, const char *key, int64_t value);
/* Doubles are printed with 6 significant digits; NaN and infinities as
 * null. */
void json_key_double(struct json *j, const char *key, double value);
void json_key_bool(struct json *j, const char *key, int value);
void json_key_null(struct json *j, const char *key);

/* Writes s as a quoted JSON string; NULL is written as null. Quotes,
 * backslashes and control characters (< 0x20, 0x7f) are escaped; valid
 * UTF-8 passes through; a byte that is not part of valid UTF-8 (file
 * names are bytes) is written as \u00XX, XX its value, i.e. read as
 * Latin-1, so that the output is valid UTF-8 JSON whatever s holds. */
void json_write_string(FILE *out, const char *s);

#endif
