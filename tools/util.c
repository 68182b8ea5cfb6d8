/*
 * Helpers shared by the gpufile tool's subcommands (see util.h).
 */
#define _GNU_SOURCE
#include "util.h"
#include "gpufile.h"
/* gpufile_parse_size/count: sizes parse as the settings do. */
#include "gpufile_private.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The library's own parsers: the CLI accepts exactly what settings do. */
int util_parse_count(const char *text, uint64_t *out)
{
	return gpufile_parse_count(text, out);
}

int util_parse_size(const char *text, uint64_t *out)
{
	return gpufile_parse_size(text, out);
}

/* The message goes through util_put_text() whole: its arguments are
 * often the library's messages, which quote tensor names, metadata keys
 * and paths as the file or the command line gave them. */
static void vreport(const char *cmd, const char *fmt, va_list ap)
{
	char *msg = NULL;

	fprintf(stderr, "gpufile%s%s: ", cmd ? " " : "", cmd ? cmd : "");
	if (vasprintf(&msg, fmt, ap) < 0)
		msg = NULL;
	util_put_text(stderr, msg ? msg : "out of memory for a message");
	free(msg);
	fputc('\n', stderr);
}

void util_warn(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(cmd, fmt, ap);
	va_end(ap);
}

int util_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(cmd, fmt, ap);
	va_end(ap);
	fprintf(stderr, "Try 'gpufile%s%s --help'.\n", cmd ? " " : "",
	        cmd ? cmd : "");
	return EXIT_USAGE;
}

int util_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vreport(cmd, fmt, ap);
	va_end(ap);
	return EXIT_RUNTIME;
}

int util_count_arg(const char *cmd, const char *opt, const char *text,
                   uint64_t min, uint64_t max, uint64_t *out)
{
	int rc = util_parse_count(text, out);

	if (rc == 0 && (*out < min || *out > max))
		rc = -ERANGE;
	if (rc == -ERANGE)
		return util_usage_error(
		    cmd, "%s \"%s\": out of range [%" PRIu64 ", %" PRIu64 "]",
		    opt, text, min, max);
	if (rc)
		return util_usage_error(cmd, "%s \"%s\": not a whole number",
		                        opt, text);
	return 0;
}

int util_getopt_error(const char *cmd, int c, char **argv)
{
	/* optind has moved past the offending word; for a short option
	 * grouped with others ("-xq") optopt names the letter. */
	const char *word = optind > 0 ? argv[optind - 1] : "?";

	if (c == ':') {
		if (optopt && strncmp(word, "--", 2) != 0)
			return util_usage_error(cmd, "option -%c needs a value",
			                        optopt);
		return util_usage_error(cmd, "option %s needs a value", word);
	}
	if (optopt && strncmp(word, "--", 2) != 0)
		return util_usage_error(cmd, "unknown option -%c", optopt);
	return util_usage_error(cmd, "unknown option %s", word);
}

const char *util_human_bytes(uint64_t bytes, char *buf, size_t len)
{
	static const char *const units[] = {"B",   "KiB", "MiB",
	                                    "GiB", "TiB", "PiB"};
	double v = (double)bytes;
	unsigned u = 0;

	while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		u++;
	}
	/* %.3g writes 999.5 and more of a unit (up to 1023.x, and more of
	 * the top unit) in exponent form: 1000 MiB was "1e+03 MiB". */
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " B", bytes);
	else if (v >= 999.5)
		snprintf(buf, len, "%.0f %s", v, units[u]);
	else
		snprintf(buf, len, "%.3g %s", v, units[u]);
	return buf;
}

double util_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double util_gbps(uint64_t bytes, double seconds)
{
	return seconds > 0 ? (double)bytes / seconds / 1e9 : 0.0;
}

int util_utf8_len(const unsigned char *s)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	int n;

	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0; /* ASCII, continuation byte, C0/C1 lead, F5-FF */
	/* The second byte's range excludes overlong forms (E0, F0),
	 * surrogates (ED) and values above U+10FFFF (F4). */
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (int i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

/* The next character of *p as util_text() writes it, into piece (at
 * least 5 bytes); advances *p past it and returns the piece's length. */
static size_t text_piece(const unsigned char **p, char *piece)
{
	const unsigned char *c = *p;
	int u = *c >= 0x80 ? util_utf8_len(c) : 0;

	if (u && !(c[0] == 0xc2 && c[1] < 0xa0)) { /* not C1 */
		memcpy(piece, c, (size_t)u);
		*p += u;
		return (size_t)u;
	}
	*p += 1;
	if (*c >= 0x20 && *c < 0x7f && *c != '\\') {
		piece[0] = (char)*c;
		return 1;
	}
	if (*c == '\\') {
		memcpy(piece, "\\\\", 2);
		return 2;
	}
	piece[0] = '\\';
	piece[1] = 'x';
	piece[2] = "0123456789abcdef"[*c >> 4];
	piece[3] = "0123456789abcdef"[*c & 15];
	return 4;
}

const char *util_text(const char *s, char *buf, size_t len)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	size_t o = 0;

	if (!len)
		return buf;
	while (*p) {
		char piece[8];
		size_t n = text_piece(&p, piece);

		if (o + n >= len)
			break;
		memcpy(buf + o, piece, n);
		o += n;
	}
	buf[o] = '\0';
	return buf;
}

void util_put_text(FILE *out, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");

	while (*p) {
		char piece[8];
		size_t n = text_piece(&p, piece);

		fwrite(piece, 1, n, out);
	}
}

/* ---- JSON ---- */

void json_write_string(FILE *out, const char *s)
{
	if (!s) {
		fputs("null", out);
		return;
	}
	fputc('"', out);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		int u = c >= 0x80 ? util_utf8_len((const unsigned char *)s) : 0;

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
	if (j->depth > 0) {
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
	if (had_values) {
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

/* ---- gpufile-specific JSON pieces ---- */

int util_json_settings(struct json *j, const char *key)
{
	int bad = 0;

	json_object_begin(j, key);
	for (int i = 0; i < gpufile_config_count(); i++) {
		const char *name = gpufile_config_name(i);
		char value[512], variable[128];
		gpufile_source_t source = GPUFILE_SOURCE_DEFAULT;
		int rc = gpufile_config_get(name, value, sizeof(value), &source,
		                            variable, sizeof(variable));

		json_object_begin(j, name);
		if (rc) {
			json_key_str(j, "error", gpufile_errmsg());
			bad = rc;
		} else {
			json_key_str(j, "value", value);
			json_key_str(j, "source", gpufile_source_name(source));
			if (variable[0])
				json_key_str(j, "variable", variable);
			else
				json_key_null(j, "variable");
		}
		json_object_end(j);
	}
	json_object_end(j);
	return bad;
}

void util_json_paths(struct json *j, const char *key,
                     const struct gpufile_stats *before,
                     const struct gpufile_stats *after, int dir)
{
	json_object_begin(j, key);
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		const gpufile_counter_t *a = &after->path[p][dir];
		const gpufile_counter_t *b = &before->path[p][dir];

		json_object_begin(j, gpufile_path_name((gpufile_path_t)p));
		json_key_u64(j, "ops", a->ops - b->ops);
		json_key_u64(j, "tasks", a->tasks - b->tasks);
		json_key_u64(j, "bytes", a->bytes - b->bytes);
		json_key_u64(j, "errors", a->errors - b->errors);
		json_object_end(j);
	}
	json_object_end(j);
	/* Reads: of the host path's bytes, those copied from the file's
	 * map (host_map_copy, gathered reads) rather than by pread. */
	if (dir == 0)
		json_key_u64(j, "map_copy_bytes",
		             after->map_copy_bytes - before->map_copy_bytes);
}

/* ---- gpufile-specific text pieces ---- */

void util_print_paths(const struct gpufile_stats *before,
                      const struct gpufile_stats *after, int dir)
{
	int shown = 0;

	for (int p = 0; p < GPUFILE_PATH_COUNT; p++) {
		const gpufile_counter_t *a = &after->path[p][dir];
		const gpufile_counter_t *b = &before->path[p][dir];

		if (a->ops == b->ops)
			continue;
		printf("  %-8s %" PRIu64 " ops, %" PRIu64 " tasks, %" PRIu64
		       " bytes, %" PRIu64 " errors\n",
		       gpufile_path_name((gpufile_path_t)p), a->ops - b->ops,
		       a->tasks - b->tasks, a->bytes - b->bytes,
		       a->errors - b->errors);
		if (dir == 0 && p == GPUFILE_PATH_HOST &&
		    after->map_copy_bytes != before->map_copy_bytes) {
			uint64_t m =
			    after->map_copy_bytes - before->map_copy_bytes;

			printf("           of those, %" PRIu64
			       " copied from the file's map "
			       "(host_map_copy), "
			       "%" PRIu64 " read by the kernel (pread, "
			       "O_DIRECT)\n",
			       m, a->bytes - b->bytes - m);
		}
		shown = 1;
	}
	if (!shown)
		printf("  (no requests)\n");
}

void util_print_settings_line(void)
{
	static const char *const names[] = {"nthreads", "task_size",
	                                    "direct_io", "compat_mode"};

	printf("settings:");
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char value[64];

		if (gpufile_config_get(names[i], value, sizeof(value), NULL,
		                       NULL, 0) == 0)
			printf(" %s=%s", names[i], value);
	}
	printf("  (all: gpufile config)\n");
}

char *util_shown_path(const char *path)
{
	ssize_t n = gpufile_redact_url(path, NULL, 0);
	char *shown = n < 0 ? NULL : malloc((size_t)n + 1);

	if (shown && gpufile_redact_url(path, shown, (size_t)n + 1) != n) {
		free(shown);
		shown = NULL;
	}
	return shown;
}
