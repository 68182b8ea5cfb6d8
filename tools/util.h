/*
 * Helpers shared by the gpufile tool's subcommands: parsing sizes and
 * counts given on the command line, reporting usage and runtime errors
 * with the tool's exit codes, timing, and writing JSON by hand (the tool
 * links only libgpufile, so no JSON library is assumed).
 */
#ifndef GPUFILE_TOOLS_UTIL_H
#define GPUFILE_TOOLS_UTIL_H

#include <stdint.h>
#include <stdio.h>

/* Exit codes of every subcommand. */
enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* Parses a size as settings do: plain bytes, or a number followed
 * (optionally after spaces) by b, k, kb, kib, m, mb, mib, g, gb, gib, t,
 * tb or tib in any case, all binary (1k = 1024). Returns 0, -EINVAL when
 * text is not a size, or -ERANGE when it does not fit in 64 bits. */
int util_parse_size(const char *text, uint64_t *out);

/* Those forms, for messages: every suffix util_parse_size accepts and no
 * other (test_cli_usage checks both ways, and that each help text that
 * mentions sizes says the same). */
#define UTIL_SIZE_FORMS                                                        \
	"bytes (B) or a number with k, m, g, t, KiB, MiB, GiB, TiB, KB, MB, "  \
	"GB or TB (any case; all binary)"

/* Parses a non-negative decimal integer. Returns 0, -EINVAL or -ERANGE. */
int util_parse_count(const char *text, uint64_t *out);

/* Parses the whole number given to option opt of subcommand cmd. On
 * failure prints `gpufile CMD: OPT "TEXT": not a whole number` (or "out
 * of range [MIN, MAX]") and returns EXIT_USAGE; else returns 0 with the
 * number, in [min, max], in *out. */
int util_count_arg(const char *cmd, const char *opt, const char *text,
                   uint64_t min, uint64_t max, uint64_t *out);

/* Prints "gpufile CMD: MESSAGE" and a hint to run --help on stderr.
 * Returns EXIT_USAGE. */
int util_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints "gpufile CMD: MESSAGE" on stderr. Returns EXIT_RUNTIME. The
 * message (of this and util_usage_error()) is escaped as util_text()
 * escapes: a newline in it prints as \x0a. */
int util_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prints "gpufile CMD: MESSAGE" on stderr, as util_error() does, for a
 * warning that does not end the command. */
void util_warn(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Reports the getopt_long() failure that returned c ('?' or ':', with
 * optstring starting with ':' and opterr = 0) as a usage error. */
int util_getopt_error(const char *cmd, int c, char **argv);

/* Formats bytes as a short human string ("1.5 GiB", "512 B") in buf. */
const char *util_human_bytes(uint64_t bytes, char *buf, size_t len);

/* The length (2-4) of the valid UTF-8 sequence of a non-ASCII character
 * at s, or 0 when the byte at s does not start one (overlong forms,
 * surrogates and values above U+10FFFF are not valid). */
int util_utf8_len(const unsigned char *s);

/* Copies s into buf (len bytes, truncated to fit) for a terminal: bytes
 * that could act on it are escaped as \xHH (control characters, DEL, C1
 * controls U+0080-U+009F, bytes that are not valid UTF-8), and a backslash
 * is doubled; printable ASCII and other valid UTF-8 pass. Returns buf.
 * Text from another process (its command name, its file paths) goes
 * through this before it is printed. */
const char *util_text(const char *s, char *buf, size_t len);

/* Writes s to out escaped as util_text() escapes it, whole (no buffer to
 * cut it). Every text output of a name that a file, another process or
 * the command line chose (tensor names, metadata keys, paths, messages
 * that quote them) goes through this or util_error(); --json output is
 * escaped by json_write_string(). */
void util_put_text(FILE *out, const char *s);

/* Seconds on CLOCK_MONOTONIC. */
double util_now(void);

/* Bytes per nanosecond, i.e. GB/s with 1 GB = 1e9 bytes; 0 when seconds
 * is not positive. */
double util_gbps(uint64_t bytes, double seconds);

/*
 * A minimal JSON writer. It tracks nesting so that callers never place
 * commas by hand:
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
#define JSON_MAX_DEPTH 32
struct json {
	FILE *out;
	int depth;
	int count[JSON_MAX_DEPTH]; /* values written at each depth */
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

/* ---- gpufile-specific JSON pieces, on the public API ---- */

struct gpufile_stats;

/* Writes key: {NAME: {"value", "source", "variable"}, ...} for every
 * setting; a setting the environment gave a bad value is written as
 * {"error": MESSAGE}. Returns 0, or GPUFILE_ECONFIG when any was bad. */
int util_json_settings(struct json *j, const char *key);

/* Writes key: {PATH: {"ops", "tasks", "bytes", "errors"}, ...} for all
 * paths, the counters being after - before in direction dir (0 read,
 * 1 write); for reads then "map_copy_bytes", the host bytes copied from
 * the file's map. */
void util_json_paths(struct json *j, const char *key,
                     const struct gpufile_stats *before,
                     const struct gpufile_stats *after, int dir);

/* ---- gpufile-specific text pieces, on the public API ---- */

/* Prints one line per path that served requests in direction dir (0
 * read, 1 write) between before and after, or "(no requests)"; under the
 * host path's reads, how many bytes were copied from the file's map. */
void util_print_paths(const struct gpufile_stats *before,
                      const struct gpufile_stats *after, int dir);

/* Prints the settings that shape a request's split, in one line. */
void util_print_settings_line(void);

/* path as the library shows it (gpufile_redact_url: a URL without its
 * password, query and fragment), allocated and sized from it: the
 * caller frees it. NULL when out of memory. */
char *util_shown_path(const char *path);

#endif
