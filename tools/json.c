/*
 * The JSON writer of the gpufile tool (see json.h).
 */
#include "json.h"
#include "text.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

void json_write_string(FILE *out, const char *s)
{
	if (!s) {
		fputs("null", out);
		return;
	}
	fputc('"', out);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		int u = c >= 0x80 ? text_utf8_len((const unsigned char *)s) : 0;

		if (u) { /* valid UTF-8: as it is */
			fwrite(s, 1, (size_t)u, out);
			s += u - 1;
			continue;
		}

		switch (c) {
		case '"':
			fputs("\\\"", out);
			break;
		case '\\':
			fputs("\\\\", out);
			break;
		case '\n':
			fputs("\\n", out);
			break;
		case '\r':
			fputs("\\r", out);
			break;
		case '\t':
			fputs("\\t", out);
			break;
		default:
			if (c < 0x20 || c >= 0x7f)
				fprintf(out, "\\u%04x", c);
			else
				fputc(c, out);
		}
	}
	fputc('"', out);
}

void json_init(struct json *j, FILE *out)
{
	memset(j, 0, sizeof(*j));
	j->out = out;
}

/* Writes the separator, indentation and key that precede a value. */
static void json_prefix(struct json *j, const char *key)
{
	if (j->depth > 0 && j->one_line) {
		if (j->count[j->depth])
			fputs(", ", j->out);
	} else if (j->depth > 0) {
		fputs(j->count[j->depth] ? ",\n" : "\n", j->out);
		for (int i = 0; i < j->depth; i++)
			fputs("  ", j->out);
	}
	j->count[j->depth]++;
	if (key) {
		json_write_string(j->out, key);
		fputs(": ", j->out);
	}
}

static void json_open(struct json *j, const char *key, char bracket)
{
	json_prefix(j, key);
	fputc(bracket, j->out);
	if (j->depth + 1 < JSON_MAX_DEPTH)
		j->depth++;
	j->count[j->depth] = 0;
}

static void json_close(struct json *j, char bracket)
{
	int had_values = j->count[j->depth] > 0;

	if (j->depth > 0)
		j->depth--;
	if (had_values && !j->one_line) {
		fputc('\n', j->out);
		for (int i = 0; i < j->depth; i++)
			fputs("  ", j->out);
	}
	fputc(bracket, j->out);
	if (j->depth == 0)
		fputc('\n', j->out);
}

void json_object_begin(struct json *j, const char *key)
{
	json_open(j, key, '{');
}

void json_object_end(struct json *j)
{
	json_close(j, '}');
}

void json_array_begin(struct json *j, const char *key)
{
	json_open(j, key, '[');
}

void json_array_end(struct json *j)
{
	json_close(j, ']');
}

void json_key_str(struct json *j, const char *key, const char *value)
{
	json_prefix(j, key);
	json_write_string(j->out, value);
}

void json_key_u64(struct json *j, const char *key, uint64_t value)
{
	json_prefix(j, key);
	fprintf(j->out, "%" PRIu64, value);
}

void json_key_i64(struct json *j, const char *key, int64_t value)
{
	json_prefix(j, key);
	fprintf(j->out, "%" PRId64, value);
}

void json_key_double(struct json *j, const char *key, double value)
{
	json_prefix(j, key);
	if (isfinite(value))
		fprintf(j->out, "%.6g", value);
	else
		fputs("null", j->out);
}

void json_key_bool(struct json *j, const char *key, int value)
{
	json_prefix(j, key);
	fputs(value ? "true" : "false", j->out);
}

void json_key_null(struct json *j, const char *key)
{
	json_prefix(j, key);
	fputs("null", j->out);
}
