/*
 * Settings: defaults, the environment (GPUFILE_<NAME>, then KVIKIO_<NAME>),
 * and setters. The environment is read once, on the first call that needs
 * a setting; a bad value is remembered with its message and fails every
 * such call until a setter replaces it.
 *
 * Every value KvikIO 26.10 accepts in a KVIKIO_ variable is accepted here
 * too, in KvikIO's spelling (booleans as std::stoi reads them, a leading
 * '+', an empty HTTP_STATUS_CODES; not text after a number): honoured
 * (COMPAT_MODE, NTHREADS and its alias NUM_THREADS, TASK_SIZE,
 * GDS_THRESHOLD, BOUNCE_BUFFER_SIZE clamped to what staging needs,
 * AUTO_DIRECT_IO_READ/WRITE onto direct_io, HTTP_*), or accepted and
 * reported as unused (verbose remote log, logging). What was clamped, ignored
 * or looks misspelled is kept as a warning: gpufile config shows them, and the
 * first request of the process prints them once to stderr.
 *
 * Variables that name code to load (cufile_library) are read with
 * secure_getenv: a setuid/setgid or capability-raising program ignores
 * them, so a user cannot make it dlopen() a library of theirs.
 */
#define _GNU_SOURCE
#include "core/core.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

enum kind { KIND_MODE, KIND_SIZE, KIND_COUNT, KIND_STRING };

struct setting {
	const char *name;
	enum kind kind;
	uint64_t min, max;
	uint64_t (*default_value)(void);
	const char *help;
	const char *default_text; /* KIND_STRING */
	/* Values in [min, clamp_lo) or above clamp_hi (when non-zero) are
	 * accepted and raised/lowered, with a note saying why. */
	uint64_t clamp_lo, clamp_hi;
	const char *clamp_why;

	/* Guarded by config_lock. */
	uint64_t value;
	gpufile_source_t source;
	char variable[64];
	int bad;
	char bad_message[256];
	char text[512]; /* KIND_STRING: the value */
	char note[256]; /* a clamp of the current value, or "" */
};

static uint64_t default_mode_auto(void)
{
	return GPUFILE_COMPAT_AUTO;
}
static uint64_t default_task_size(void)
{
	return 4u << 20;
}
static uint64_t default_gds_threshold(void)
{
	return 16u << 10;
}
static uint64_t default_bounce_buffer_size(void)
{
	return 4u << 20;
}
static uint64_t default_bounce_buffers(void)
{
	return 2;
}
static uint64_t default_max_inflight(void)
{
	return 4096;
}

/* cuFile 1.15 itself ignores CUFILE_STATS_LEVEL (only cufile.json's
 * profile.cufile_stats counts), but NVIDIA's tutorials set it: honour it
 * as the default, passed on through cuFileSetStatsLevel. A bad value is
 * cuFile's variable, not ours: ignored here, reported by gpufile check. */
static uint64_t default_cufile_stats(void)
{
	const char *text = getenv("CUFILE_STATS_LEVEL");
	uint64_t v;

	if (text && gpufile__parse_count(text, &v) == 0 && v <= 3)
		return v;
	return 3; /* cuFile's per-GPU layer without preparation */
}

/* Page-cache reads scale with cores up to memory bandwidth, and cold reads
 * want several requests in flight even on few cores; bench/README.md has
 * the measurements behind the bounds. */
static uint64_t default_nthreads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	if (n < 4)
		n = 4;
	if (n > 16)
		n = 16;
	return (uint64_t)n;
}

static uint64_t default_http_attempts(void)
{
	return 3;
}
static uint64_t default_http_timeout(void)
{
	return 60;
}
static uint64_t default_off(void)
{
	return 0;
}
static uint64_t default_remote_connections(void)
{
	return 16;
}
/* 8 MiB ranges: on the H200 over loopback from nginx (bench/README.md,
 * "Remote objects") 8 MiB reached 0.96-0.98x of 16 parallel curl range
 * downloads where the local task_size default (4 MiB) reached 0.86-0.93x
 * (more requests, each paying a round trip and a response header), and
 * 16-64 MiB ranges 0.84-1.01x (fewer, longer ranges, so a slow one holds
 * up the end of the request). */
/* Ranges the transfer engine keeps in flight per remote handle. 16: 1 GiB
 * from loopback nginx into a reused buffer on the 2-core VM took 2.2-10.2
 * s with 4 in flight, 2.5-3.3 s with 16 and 3.1-5.2 s with 64 (three
 * rounds each, interleaved, machine shared: bench/README.md, "Remote
 * objects: the transfer engine"); 16 is also remote_connections'
 * default, which bounds it on HTTP/1.1. */
static uint64_t default_http_max_in_flight(void)
{
	return 16;
}
static uint64_t default_remote_task_size(void)
{
	return 8ull << 20;
}

/* 16 MiB parts: S3 takes 5 MiB to 5 GiB (the last part any size) and at
 * most 10,000 parts, so 16 MiB parts reach 156 GiB; each part in flight
 * is held in host memory, one per worker. */
static uint64_t default_upload_part_size(void)
{
	return 16ull << 20;
}

#define KiB (1ull << 10)
#define GiB (1ull << 30)

/* Entries are found by position (the S_* values below). */
#define SETTING(n, k, lo, hi, def, text)                                       \
	{                                                                      \
		.name = n, .kind = k, .min = lo, .max = hi,                    \
		.default_value = def, .help = text                             \
	}

static struct setting settings[] = {
    SETTING("compat_mode", KIND_MODE, 0, 2, default_mode_auto,
            "auto: try cuFile, fall back with a reason; on: never cuFile; off: "
            "cuFile or error"),
    SETTING(
        "task_size", KIND_SIZE, 1, 1ull << 40, default_task_size,
        "bytes per task; requests are split at multiples of it in the file"),
    SETTING("gds_threshold", KIND_SIZE, 0, 1ull << 40, default_gds_threshold,
            "device requests smaller than this take the POSIX path"),
    SETTING("nthreads", KIND_COUNT, 1, 1024, default_nthreads,
            "worker threads"),
    {.name = "bounce_buffer_size",
     .kind = KIND_SIZE,
     .min = 1,
     .max = UINT64_MAX,
     .default_value = default_bounce_buffer_size,
     .help = "bytes per pinned bounce buffer (any positive size, as "
             "KvikIO; at most 1 GiB)",
     .clamp_hi = GiB,
     /* KvikIO accepts any positive size, and a KvikIO user's setting
      * must not make every open fail: a value above is moved to 1 GiB,
      * with a note. A size below 64 KiB (or not a multiple of 4 KiB) is
      * used as given: staging.c reads chunks of that many bytes into
      * page-aligned buffers with room for the O_DIRECT window
      * (GPUFILE__BOUNCE_STRIDE), as KvikIO honours it. */
     .clamp_why = "the staging path works with at most 1 GiB per buffer"},
    SETTING("bounce_buffers", KIND_COUNT, 2, 64, default_bounce_buffers,
            "pinned bounce buffers per worker (pipeline depth)"),
    SETTING("direct_io", KIND_MODE, 0, 2, default_mode_auto,
            "O_DIRECT reads: auto (ranges of 256 KiB or more not in the page "
            "cache), on, off"),
    SETTING("max_inflight", KIND_COUNT, 1, 1u << 20, default_max_inflight,
            "requests in flight before submitting blocks"),
    {.name = "cufile_library",
     .kind = KIND_STRING,
     .default_text = "libcufile.so.0",
     .help = "the cuFile library dlopen()ed on first need (a name or a path)"},
    SETTING("cufile_stats", KIND_COUNT, 0, 3, default_cufile_stats,
            "cuFile stats level set through cuFileSetStatsLevel before the "
            "driver opens (default: CUFILE_STATS_LEVEL, else a nonzero "
            "cufile.json profile.cufile_stats, else 3: per-GPU nvfs/posix/p2p "
            "counts); 0 turns cuFile's counting off"),
    SETTING("cufile_accel_only", KIND_MODE, 0, 2, default_mode_auto,
            "compat_mode=auto hands files to cuFile only where it can take an "
            "accelerated path (nvidia-fs or P2PDMA); off: also to cuFile's "
            "compat path"),
    /* Remote sources (remote.c); KvikIO's names and defaults. */
    SETTING("http_max_attempts", KIND_COUNT, 1, 100, default_http_attempts,
            "attempts per HTTP range before it fails (remote objects)"),
    SETTING("http_timeout", KIND_COUNT, 1, 86400, default_http_timeout,
            "seconds an HTTP range may take (or stall) before it is retried"),
    SETTING("http_retry_after_max", KIND_COUNT, 0, 86400, default_http_timeout,
            "seconds a Retry-After (429, 503) may make a retry wait, at most"),
    {.name = "http_status_codes",
     .kind = KIND_STRING,
     .default_text = "429,500,502,503,504",
     .help = "HTTP statuses that are retried (comma-separated)"},
    SETTING("remote_connections", KIND_COUNT, 1, 1024,
            default_remote_connections,
            "HTTP connections a remote handle has open at most (in use "
            "and idle), reused between ranges"),
    SETTING("remote_task_size", KIND_SIZE, 0, 1ull << 40,
            default_remote_task_size,
            "bytes per task (one HTTP range) of a remote request; 0: "
            "task_size"),
    SETTING("http_verbose", KIND_COUNT, 0, 1, default_off,
            "1: log each HTTP request (method, redacted URL, range), its "
            "status and every retry's wait to stderr"),
    SETTING("host_map_copy", KIND_MODE, 0, 2, default_mode_auto,
            "host reads of 256 KiB or more that the page cache holds are "
            "copied from a map of the file with streaming stores (SIGBUS "
            "from a file cut short is caught and the range read again): "
            "auto where the CPU has AVX-512 and the process may run on 8 or "
            "more CPUs, on also with AVX2 or fewer CPUs, off: pread"),
    SETTING("upload_part_size", KIND_SIZE, 5ull << 20, 5ull << 30,
            default_upload_part_size,
            "bytes per part of an S3 multipart upload (sources/upload.c), "
            "5 MiB (S3's least) to 5 GiB; smaller objects go up in one PUT"),
    SETTING("http_max_in_flight", KIND_COUNT, 1, 4096,
            default_http_max_in_flight,
            "HTTP range transfers a remote handle keeps in flight at once "
            "(libcurl multi interface), at most remote_connections: on "
            "HTTP/1.1 each holds a connection, kept open for the next (the "
            "handle's open connections are at most this many)"),
    SETTING("write_prealloc", KIND_MODE, 0, 2, default_mode_auto,
            "a buffered gpufile_pwrite reaching 4 MiB or more past a local "
            "file's end reserves that part's blocks first (fallocate, the "
            "size kept; kept past the end if the write fails): auto on "
            "ext4, on on any file system not in memory, off never"),
};
#define NSETTINGS (int)(sizeof(settings) / sizeof(settings[0]))
enum {
	S_COMPAT,
	S_TASK,
	S_THRESH,
	S_NTHREADS,
	S_BOUNCE,
	S_NBOUNCE,
	S_DIRECT,
	S_INFLIGHT,
	S_CUFILE_LIBRARY,
	S_CUFILE_STATS,
	S_CUFILE_ACCEL,
	S_HTTP_ATTEMPTS,
	S_HTTP_TIMEOUT,
	S_HTTP_RETRY_AFTER_MAX,
	S_HTTP_CODES,
	S_REMOTE_CONNECTIONS,
	S_REMOTE_TASK,
	S_HTTP_VERBOSE,
	S_HOST_MAP_COPY,
	S_UPLOAD_PART,
	S_HTTP_MAX_IN_FLIGHT,
	S_WRITE_PREALLOC
};
_Static_assert(S_WRITE_PREALLOC + 1 == NSETTINGS,
               "the S_* positions name every entry of settings[]");

static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;
static int loaded;
/* Moves (under config_lock) whenever the values or their sources may
 * have changed: a load of the environment, a set. */
static atomic_uint generation;

unsigned gpufile__config_generation(void)
{
	return atomic_load_explicit(&generation, memory_order_acquire);
}

static const char *skip_space(const char *s)
{
	while (*s && isspace((unsigned char)*s))
		s++;
	return s;
}

/* The decimal number at *s (one digit at least) into *v, *s moved past
 * it. Returns 0, -EINVAL (no digit) or -ERANGE (above UINT64_MAX). */
static int parse_digits(const char **s, uint64_t *v)
{
	const char *p = *s;

	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	for (*v = 0; isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (*v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		*v = *v * 10 + d;
	}
	*s = p;
	return 0;
}

int gpufile__parse_count(const char *text, uint64_t *out)
{
	const char *s = skip_space(text);
	uint64_t v;
	int rc = parse_digits(&s, &v);

	if (rc)
		return rc;
	if (*skip_space(s) != '\0')
		return -EINVAL;
	*out = v;
	return 0;
}

/* The suffixes below are listed, all and only these, by parse_value's
 * message and the tool's (tools/options.c SIZE_FORMS); test_cli_usage
 * checks both against this parser. */
int gpufile__parse_size(const char *text, uint64_t *out)
{
	static const struct {
		const char *suffix;
		unsigned shift;
	} units[] = {
	    {"", 0},     {"b", 0},   {"k", 10},   {"kb", 10},  {"kib", 10},
	    {"m", 20},   {"mb", 20}, {"mib", 20}, {"g", 30},   {"gb", 30},
	    {"gib", 30}, {"t", 40},  {"tb", 40},  {"tib", 40},
	};
	const char *s = skip_space(text);
	char unit[8];
	size_t n = 0;
	uint64_t v;
	int rc = parse_digits(&s, &v);

	if (rc)
		return rc;
	s = skip_space(s);
	while (*s && !isspace((unsigned char)*s)) {
		if (n + 1 >= sizeof(unit))
			return -EINVAL;
		unit[n++] = (char)tolower((unsigned char)*s++);
	}
	unit[n] = '\0';
	if (*skip_space(s) != '\0')
		return -EINVAL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(unit, units[i].suffix) == 0) {
			if (units[i].shift &&
			    v > (UINT64_MAX >> units[i].shift))
				return -ERANGE;
			*out = v << units[i].shift;
			return 0;
		}
	}
	return -EINVAL;
}

int gpufile__parse_mode(const char *text, int *out)
{
	static const struct {
		const char *word;
		int mode;
	} words[] = {
	    {"auto", 0}, {"on", 1},    {"true", 1}, {"yes", 1}, {"1", 1},
	    {"off", 2},  {"false", 2}, {"no", 2},   {"0", 2},
	};
	const char *s = skip_space(text);
	char word[8];
	size_t n = 0;

	while (*s && !isspace((unsigned char)*s)) {
		if (n + 1 >= sizeof(word))
			return -EINVAL;
		word[n++] = *s++;
	}
	word[n] = '\0';
	if (*skip_space(s) != '\0')
		return -EINVAL;
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
		if (strcasecmp(word, words[i].word) == 0) {
			*out = words[i].mode;
			return 0;
		}
	}
	return -EINVAL;
}

int gpufile__parse_status_codes(const char *text, int *codes, int max)
{
	int n = 0;

	for (const char *s = text;; s++) {
		size_t len = strcspn(s, ",");
		char item[16];
		uint64_t code;

		/* An empty item ("," or "429,,500") is no code: it used to
		 * be skipped, so "," silently meant "retry nothing". */
		if (len >= sizeof(item) || n == max)
			return -EINVAL;
		memcpy(item, s, len);
		item[len] = '\0';
		if (gpufile__parse_count(item, &code) || code < 100 ||
		    code > 599)
			return -EINVAL;
		codes[n++] = (int)code;
		s += len;
		if (!*s)
			return n;
	}
}

/* KvikIO reads whole numbers with a stringstream, which takes a leading
 * '+' ("+8" is 8): in a KVIKIO_ variable the sign is skipped. GPUFILE_
 * variables keep gpufile's spelling. Text after the number, which the
 * stream ignores ("8abc" is 8 to KvikIO), stays an error: gpufile reads
 * "8m" as 8 MiB, so that text is more likely a typo than a value. */
static const char *kvikio_number(const char *text)
{
	const char *s = skip_space(text);

	return *s == '+' && isdigit((unsigned char)s[1]) ? s + 1 : text;
}

/* KvikIO reads a boolean with std::stoi first, so any whole number in an
 * int is one: 0 is false, any other ("2", "-1") true; then the words.
 * Returns 0 with *mode (1 on, 2 off; gpufile's words also give 0 auto),
 * or -EINVAL. As with numbers, text after the number is an error. */
static int parse_kvikio_bool(const char *text, int *mode)
{
	const char *s = skip_space(text);
	const char *digits = *s == '+' || *s == '-' ? s + 1 : s;
	char *end;
	long v;

	if (!isdigit((unsigned char)*digits))
		return gpufile__parse_mode(text, mode);
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || v < INT_MIN || v > INT_MAX || *skip_space(end))
		return -EINVAL;
	*mode = v ? 1 : 2;
	return 0;
}

/* Parses text for setting st; on failure writes a message naming origin
 * (a variable or the setting) and the value into msg. kvikio: the text
 * is a KVIKIO_ variable's, read with KvikIO's number spelling. */
static int parse_value(const struct setting *st, const char *text,
                       const char *origin, int kvikio, uint64_t *out, char *msg,
                       size_t msg_len)
{
	const char *num = kvikio ? kvikio_number(text) : text;
	int codes[GPUFILE__MAX_RETRY_CODES];
	int rc;
	int mode;

	switch (st->kind) {
	case KIND_STRING:
		*out = 0;
		rc = 0;
		if (!*skip_space(text)) {
			snprintf(msg, msg_len, "%s=\"%s\": empty", origin,
			         text);
			rc = -EINVAL;
		} else if (strlen(text) >= sizeof(st->text)) {
			snprintf(msg, msg_len, "%s: value too long", origin);
			rc = -ERANGE;
		} else if (st == &settings[S_HTTP_CODES] &&
		           gpufile__parse_status_codes(
		               text, codes, GPUFILE__MAX_RETRY_CODES) < 0) {
			/* Checked with the other settings, not first at a
			 * remote open: gpufile config shows it. */
			snprintf(
			    msg, msg_len,
			    "%s=\"%s\": not a list of up to %d HTTP status "
			    "codes (100-599) separated by commas, e.g. "
			    "429,500,502,503,504",
			    origin, text, GPUFILE__MAX_RETRY_CODES);
			rc = -EINVAL;
		}
		return rc;
	case KIND_MODE:
		rc = gpufile__parse_mode(text, &mode);
		if (rc == 0)
			*out = (uint64_t)mode;
		else
			snprintf(msg, msg_len,
			         "%s=\"%s\": not a mode; use auto, on or off "
			         "(or true/false, yes/no, 1/0)",
			         origin, text);
		break;
	case KIND_SIZE:
		rc = gpufile__parse_size(num, out);
		if (rc == -ERANGE)
			snprintf(msg, msg_len, "%s=\"%s\": too large", origin,
			         text);
		else if (rc)
			snprintf(
			    msg, msg_len,
			    "%s=\"%s\": not a size; use bytes (B) or a "
			    "number with k, m, g, t, KiB, MiB, GiB, TiB, KB, "
			    "MB, GB or TB (any case; all binary)",
			    origin, text);
		break;
	default:
		rc = gpufile__parse_count(num, out);
		if (rc == -ERANGE)
			snprintf(msg, msg_len, "%s=\"%s\": too large", origin,
			         text);
		else if (rc)
			snprintf(msg, msg_len, "%s=\"%s\": not a whole number",
			         origin, text);
		break;
	}
	if (rc == 0 && st->kind != KIND_STRING && st->kind != KIND_MODE &&
	    (*out < st->min || *out > st->max)) {
		snprintf(msg, msg_len, "%s=\"%s\": out of range [%llu, %llu]",
		         origin, text, (unsigned long long)st->min,
		         (unsigned long long)st->max);
		rc = -ERANGE;
	}
	return rc;
}

static void upper(char *dst, const char *prefix, const char *name, size_t len)
{
	size_t n = (size_t)snprintf(dst, len, "%s%s", prefix, name);

	for (size_t i = strlen(prefix); i < n && i < len; i++)
		dst[i] = (char)toupper((unsigned char)dst[i]);
}

/* Environment warnings (unknown variables, KvikIO settings accepted but
 * unused, variables ignored in secure execution). Guarded by config_lock;
 * rebuilt with the settings. */
#define MAX_WARNINGS 32
static char warnings[MAX_WARNINGS][320];
static int nwarnings;
static int warnings_printed; /* once per process */

static void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warn(const char *fmt, ...)
{
	va_list ap;

	if (nwarnings == MAX_WARNINGS)
		return;
	va_start(ap, fmt);
	vsnprintf(warnings[nwarnings++], sizeof(warnings[0]), fmt, ap);
	va_end(ap);
}

/* Applies st's clamp to *v, noting why in st->note. */
static void clamp(struct setting *st, const char *origin, uint64_t *v)
{
	uint64_t to = *v;

	st->note[0] = '\0';
	if (st->clamp_lo && to < st->clamp_lo)
		to = st->clamp_lo;
	else if (st->clamp_hi && to > st->clamp_hi)
		to = st->clamp_hi;
	if (to == *v)
		return;
	snprintf(st->note, sizeof(st->note), "%s=%llu: using %llu (%s)", origin,
	         (unsigned long long)*v, (unsigned long long)to, st->clamp_why);
	*v = to;
}

/* A variable naming code to load or a file to read: ignored in secure
 * execution (setuid, setgid, file capabilities), with a warning. */
static const char *path_getenv(const char *var)
{
	const char *text = secure_getenv(var);

	if (!text && getenv(var))
		warn("%s is ignored: this program runs with raised privileges "
		     "(setuid, setgid or capabilities), where variables that "
		     "name code or files to load are not trusted",
		     var);
	return text;
}

/* Variables that name a file gpufile reads but are no setting of its own:
 * read through gpufile__path_getenv, and warned about with the settings
 * when ignored. */
static const char *const path_variables[] = {"CUFILE_ENV_PATH_JSON"};

int gpufile__path_ignored(const char *var)
{
	return getenv(var) && !gpufile__path_getenv(var);
}

/* Takes text from variable var as st's value. Caller holds config_lock. */
static void take(struct setting *st, const char *var, const char *text,
                 gpufile_source_t source)
{
	int kvikio = source == GPUFILE_SOURCE_KVIKIO_ENV;
	const char *num = kvikio ? kvikio_number(text) : text;
	uint64_t v;

	snprintf(st->variable, sizeof(st->variable), "%s", var);
	st->source = source;
	if (kvikio && (st->kind == KIND_SIZE || st->kind == KIND_COUNT) &&
	    (st->kind == KIND_SIZE ? gpufile__parse_size(num, &v)
	                           : gpufile__parse_count(num, &v)) == 0 &&
	    v > 0 && (v < st->min || v > st->max)) {
		/* KvikIO takes any positive number here (KVIKIO_NTHREADS=2000,
		 * KVIKIO_TASK_SIZE of 2 TiB): a KvikIO user's value must not
		 * make gpufile fail, so it moves into gpufile's range, with a
		 * note. GPUFILE_ variables keep their strict range. */
		uint64_t to = v < st->min ? st->min : st->max;
		snprintf(st->note, sizeof(st->note),
		         "%s=%llu: using %llu (gpufile's range for %s is "
		         "[%llu, %llu])",
		         var, (unsigned long long)v, (unsigned long long)to,
		         st->name, (unsigned long long)st->min,
		         (unsigned long long)st->max);
		st->value = to;
		return;
	}
	if (parse_value(st, text, var, kvikio, &v, st->bad_message,
	                sizeof(st->bad_message))) {
		st->bad = 1;
	} else if (st->kind == KIND_STRING) {
		snprintf(st->text, sizeof(st->text), "%s", text);
	} else {
		clamp(st, var, &v);
		st->value = v;
	}
}

/* KvikIO reads its thread count from KVIKIO_NTHREADS or KVIKIO_NUM_THREADS
 * (the property is num_threads): either is honoured, two different values
 * are an error naming both. Caller holds config_lock. */
static int load_kvikio_nthreads(struct setting *st)
{
	const char *a = getenv("KVIKIO_NTHREADS");
	const char *b = getenv("KVIKIO_NUM_THREADS");
	uint64_t va, vb;

	if (!a && !b)
		return 0;
	/* Compared as numbers (" 8" and "8" agree); a value that is no
	 * number is reported by take() below. */
	if (a && b && gpufile__parse_count(kvikio_number(a), &va) == 0 &&
	    gpufile__parse_count(kvikio_number(b), &vb) == 0 && va != vb) {
		snprintf(st->variable, sizeof(st->variable), "KVIKIO_NTHREADS");
		st->source = GPUFILE_SOURCE_KVIKIO_ENV;
		snprintf(st->bad_message, sizeof(st->bad_message),
		         "KVIKIO_NTHREADS=\"%s\" and KVIKIO_NUM_THREADS=\"%s\" "
		         "disagree: both set the thread count; set one",
		         a, b);
		st->bad = 1;
		return 1;
	}
	if (a)
		take(st, "KVIKIO_NTHREADS", a, GPUFILE_SOURCE_KVIKIO_ENV);
	else
		take(st, "KVIKIO_NUM_THREADS", b, GPUFILE_SOURCE_KVIKIO_ENV);
	return 1;
}

/* Reads KvikIO boolean var=text into *mode (parse_kvikio_bool). A bad
 * value is recorded in st, naming var; returns -1 then, else 0. Caller
 * holds config_lock. */
static int take_kvikio_bool(struct setting *st, const char *var,
                            const char *text, int *mode)
{
	if (parse_kvikio_bool(text, mode) == 0)
		return 0;
	snprintf(st->variable, sizeof(st->variable), "%s", var);
	st->source = GPUFILE_SOURCE_KVIKIO_ENV;
	snprintf(st->bad_message, sizeof(st->bad_message),
	         "%s=\"%s\": not a boolean; use true/false, on/off, yes/no "
	         "or a whole number (0: false, others: true)",
	         var, text);
	st->bad = 1;
	return -1;
}

/* KvikIO's opportunistic O_DIRECT switches. gpufile has one direct_io
 * setting: reads use O_DIRECT with on (auto: for large ranges not in the
 * page cache), writes only with on. So AUTO_DIRECT_IO_READ sets direct_io
 * (true: on, false: off); AUTO_DIRECT_IO_WRITE is honoured when it agrees
 * (false is what gpufile does unless direct_io=on), else reported. Caller
 * holds config_lock. */
static int load_kvikio_direct(struct setting *st)
{
	const char *rd = getenv("KVIKIO_AUTO_DIRECT_IO_READ");
	const char *wr = getenv("KVIKIO_AUTO_DIRECT_IO_WRITE");
	int mr = -1, mw = -1;

	if (wr && take_kvikio_bool(st, "KVIKIO_AUTO_DIRECT_IO_WRITE", wr, &mw))
		return 1;
	if (rd) {
		if (take_kvikio_bool(st, "KVIKIO_AUTO_DIRECT_IO_READ", rd, &mr))
			return 1;
		snprintf(st->variable, sizeof(st->variable),
		         "KVIKIO_AUTO_DIRECT_IO_READ");
		st->source = GPUFILE_SOURCE_KVIKIO_ENV;
		st->value = (uint64_t)mr;
	}
	/* Modes are stored as 0 auto, 1 on, 2 off. */
	if (mw == 1 && mr != 1)
		warn(
		    "KVIKIO_AUTO_DIRECT_IO_WRITE=\"%s\" is not applied: "
		    "gpufile "
		    "writes through O_DIRECT only with direct_io=on, which "
		    "also makes reads use it; set KVIKIO_AUTO_DIRECT_IO_READ=1 "
		    "as well, or GPUFILE_DIRECT_IO=on",
		    wr);
	else if (mw == 2 && mr == 1)
		warn("KVIKIO_AUTO_DIRECT_IO_WRITE=\"%s\" is not applied: "
		     "KVIKIO_AUTO_DIRECT_IO_READ=\"%s\" sets direct_io=on, "
		     "which gpufile uses for writes too",
		     wr, rd);
	return rd != NULL;
}

/* Caller holds config_lock. */
static void load_one(struct setting *st)
{
	static const char *const prefixes[] = {"GPUFILE_", "KVIKIO_"};
	static const gpufile_source_t sources[] = {GPUFILE_SOURCE_ENV,
	                                           GPUFILE_SOURCE_KVIKIO_ENV};

	st->value = st->default_value ? st->default_value() : 0;
	if (st->kind == KIND_STRING)
		snprintf(st->text, sizeof(st->text), "%s", st->default_text);
	st->source = GPUFILE_SOURCE_DEFAULT;
	st->variable[0] = '\0';
	st->bad = 0;
	st->bad_message[0] = '\0';
	st->note[0] = '\0';
	for (int i = 0; i < 2; i++) {
		char var[64];
		const char *text;

		if (i == 1 && st == &settings[S_NTHREADS]) {
			load_kvikio_nthreads(st);
			return;
		}
		upper(var, prefixes[i], st->name, sizeof(var));
		text = st->kind == KIND_STRING ? path_getenv(var) : getenv(var);
		/* KvikIO: an empty KVIKIO_HTTP_STATUS_CODES is its default. */
		if (text && i == 1 && st == &settings[S_HTTP_CODES] && !*text)
			return;
		if (text) {
			take(st, var, text, sources[i]);
			return;
		}
		if (i == 1 && st == &settings[S_DIRECT])
			load_kvikio_direct(st);
	}
}

/* KvikIO 26.10 variables gpufile accepts but does not use (it has no
 * verbose remote log and no log; KVIKIO_HTTP_* are settings, remote.c),
 * and other GPUFILE_ variables of the project (the Python binding, the
 * tests and benchmarks). */
static const char *const kvikio_unused[] = {
    "KVIKIO_REMOTE_VERBOSE",
    "KVIKIO_LOG_LEVEL",
    "KVIKIO_LOG_FILE",
    "KVIKIO_AUTO_DIRECT_IO_READ_OVERREAD",
};
static const char *const gpufile_other[] = {
    "GPUFILE_LIBRARY",       "GPUFILE_CLI",        "GPUFILE_TEST_DIR",
    "GPUFILE_SOAK_SECONDS",  "GPUFILE_SOAK_FLOOD", "GPUFILE_SOAK_MAX_IO",
    "GPUFILE_FUZZ_SECONDS",  "GPUFILE_FUZZ_SHORT", "GPUFILE_TEST_INSTALLED",
    "GPUFILE_TUTORIAL_FILE", "GPUFILE_NGINX",
};
static const char *const kvikio_used[] = {
    "KVIKIO_NUM_THREADS",
    "KVIKIO_AUTO_DIRECT_IO_READ",
    "KVIKIO_AUTO_DIRECT_IO_WRITE",
};
#define COUNT(a) (int)(sizeof(a) / sizeof(a[0]))

/* Edit distance (insert, delete, substitute) between a and b, capped at
 * 63 characters each. */
static int distance(const char *a, const char *b)
{
	int la = (int)strnlen(a, 63), lb = (int)strnlen(b, 63);
	int row[64];

	for (int j = 0; j <= lb; j++)
		row[j] = j;
	for (int i = 1; i <= la; i++) {
		int diag = row[0];
		row[0] = i;
		for (int j = 1; j <= lb; j++) {
			int up = row[j];
			int best = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

/* Is var (NAME=value cut at '=') one gpufile knows? Else, the closest
 * known variable of the same prefix goes into closest. */
static int known(const char *var, const char *prefix, char *closest, size_t len)
{
	int best = 1 << 30;
	char name[64];

	closest[0] = '\0';
	for (int i = 0; i < NSETTINGS; i++) {
		int d;
		upper(name, prefix, settings[i].name, sizeof(name));
		d = distance(var, name);
		if (d == 0)
			return 1;
		if (d < best) {
			best = d;
			snprintf(closest, len, "%s", name);
		}
	}
	if (prefix[0] == 'K') {
		for (int i = 0; i < COUNT(kvikio_used); i++)
			if (strcmp(var, kvikio_used[i]) == 0)
				return 1;
		for (int i = 0; i < COUNT(kvikio_unused); i++)
			if (strcmp(var, kvikio_unused[i]) == 0) {
				warn("%s is a KvikIO setting gpufile accepts "
				     "but does not use (gpufile has no verbose "
				     "remote log and no log)",
				     var);
				return 1;
			}
	} else {
		for (int i = 0; i < COUNT(gpufile_other); i++)
			if (strcmp(var, gpufile_other[i]) == 0)
				return 1;
	}
	return 0;
}

/* Warns about GPUFILE_ and KVIKIO_ variables that are no setting, naming
 * the closest one (GPUFILE_TASKSIZE=8m: GPUFILE_TASK_SIZE). Caller holds
 * config_lock. */
static void check_names(void)
{
	extern char **environ;
	static const char *const prefixes[] = {"GPUFILE_", "KVIKIO_"};

	for (char **e = environ; e && *e; e++) {
		for (int p = 0; p < 2; p++) {
			size_t n = strlen(prefixes[p]);
			char closest[64], *var;
			const char *eq = strchr(*e, '=');

			if (strncmp(*e, prefixes[p], n) != 0 || !eq)
				continue;
			/* Sized from the name: a long one is named too. */
			var = strndup(*e, (size_t)(eq - *e));
			if (!var)
				continue; /* no memory: no warning, nothing else
				           */
			if (!known(var, prefixes[p], closest, sizeof(closest)))
				warn("%s is not a setting%s; did you mean %s? "
				     "(ignored)",
				     var, p ? " gpufile knows from KvikIO" : "",
				     closest);
			free(var);
		}
	}
}

static void ensure_loaded(void)
{
	if (loaded)
		return;
	nwarnings = 0;
	for (int i = 0; i < NSETTINGS; i++)
		load_one(&settings[i]);
	for (int i = 0; i < COUNT(path_variables); i++)
		(void)path_getenv(path_variables[i]); /* for its warning */
	check_names();
	loaded = 1;
	atomic_fetch_add_explicit(&generation, 1, memory_order_release);
}

static struct setting *find(const char *name)
{
	for (int i = 0; i < NSETTINGS; i++)
		if (name && strcasecmp(settings[i].name, name) == 0)
			return &settings[i];
	return NULL;
}

/* Caller holds config_lock. Returns the first bad setting's error. */
static int first_bad(void)
{
	for (int i = 0; i < NSETTINGS; i++)
		if (settings[i].bad)
			return gpufile__fail_msg(GPUFILE_ECONFIG,
			                         settings[i].bad_message);
	return 0;
}

int gpufile__settings(struct gpufile__settings *s)
{
	int rc;

	pthread_mutex_lock(&config_lock);
	ensure_loaded();
	rc = first_bad();
	if (rc == 0) {
		s->compat_mode =
		    (gpufile_compat_mode_t)settings[S_COMPAT].value;
		s->task_size = (size_t)settings[S_TASK].value;
		s->gds_threshold = (size_t)settings[S_THRESH].value;
		s->nthreads = (unsigned)settings[S_NTHREADS].value;
		s->bounce_buffer_size = (size_t)settings[S_BOUNCE].value;
		s->bounce_buffers = (unsigned)settings[S_NBOUNCE].value;
		/* Setting values are stored as 0 auto, 1 on, 2 off. */
		s->direct_io =
		    settings[S_DIRECT].value == 0   ? GPUFILE__DIRECT_AUTO
		    : settings[S_DIRECT].value == 1 ? GPUFILE__DIRECT_ON
		                                    : GPUFILE__DIRECT_OFF;
		s->max_inflight = (unsigned)settings[S_INFLIGHT].value;
		s->cufile_stats = (unsigned)settings[S_CUFILE_STATS].value;
		s->cufile_accel_only = settings[S_CUFILE_ACCEL].value != 2;
		s->remote_task_size = (size_t)settings[S_REMOTE_TASK].value;
		s->host_map_copy = settings[S_HOST_MAP_COPY].value == 0
		                       ? GPUFILE__MAP_COPY_AUTO
		                   : settings[S_HOST_MAP_COPY].value == 1
		                       ? GPUFILE__MAP_COPY_ON
		                       : GPUFILE__MAP_COPY_OFF;
		s->write_prealloc = settings[S_WRITE_PREALLOC].value == 0
		                        ? GPUFILE__PREALLOC_AUTO
		                    : settings[S_WRITE_PREALLOC].value == 1
		                        ? GPUFILE__PREALLOC_ON
		                        : GPUFILE__PREALLOC_OFF;
	}
	/* First use by I/O: say once what the environment got wrong, where
	 * a user running a program (not gpufile config) will see it. */
	if (!warnings_printed) {
		warnings_printed = 1;
		for (int i = 0; i < NSETTINGS; i++)
			if (settings[i].note[0])
				fprintf(stderr, "gpufile: note: %s\n",
				        settings[i].note);
		for (int i = 0; i < nwarnings; i++)
			fprintf(stderr, "gpufile: warning: %s\n", warnings[i]);
	}
	pthread_mutex_unlock(&config_lock);
	return rc;
}

/* Notes on clamped values first, then the environment's warnings. */
static const char *warning_at(int index)
{
	for (int i = 0; i < NSETTINGS; i++)
		if (settings[i].note[0] && index-- == 0)
			return settings[i].note;
	return index >= 0 && index < nwarnings ? warnings[index] : NULL;
}

int gpufile_config_warning_count(void)
{
	int n = 0;

	pthread_mutex_lock(&config_lock);
	ensure_loaded();
	while (warning_at(n))
		n++;
	pthread_mutex_unlock(&config_lock);
	return n;
}

int gpufile_config_warning(int index, char *out, size_t len)
{
	const char *w;
	int rc = 0;

	if (!out || !len)
		return gpufile__fail(-EINVAL,
		                     "gpufile_config_warning: out is NULL or "
		                     "len is 0");
	pthread_mutex_lock(&config_lock);
	ensure_loaded();
	w = index >= 0 ? warning_at(index) : NULL;
	if (w)
		snprintf(out, len, "%s", w);
	else
		rc = gpufile__fail(-ENOENT, "no configuration warning %d",
		                   index);
	pthread_mutex_unlock(&config_lock);
	return rc;
}

int gpufile_config_count(void)
{
	return NSETTINGS;
}

const char *gpufile_config_name(int index)
{
	return index >= 0 && index < NSETTINGS ? settings[index].name : NULL;
}

const char *gpufile_config_help(int index)
{
	return index >= 0 && index < NSETTINGS ? settings[index].help : NULL;
}

const char *gpufile_source_name(gpufile_source_t source)
{
	switch (source) {
	case GPUFILE_SOURCE_DEFAULT:
		return "default";
	case GPUFILE_SOURCE_ENV:
		return "environment";
	case GPUFILE_SOURCE_KVIKIO_ENV:
		return "kvikio-environment";
	case GPUFILE_SOURCE_SETTER:
		return "setter";
	}
	return "?";
}

int gpufile_config_check(void)
{
	int rc;

	pthread_mutex_lock(&config_lock);
	ensure_loaded();
	rc = first_bad();
	pthread_mutex_unlock(&config_lock);
	return rc;
}

static void format_value(const struct setting *st, char *out, size_t len)
{
	static const char *const modes[] = {"auto", "on", "off"};

	if (st->kind == KIND_STRING)
		snprintf(out, len, "%s", st->text);
	else if (st->kind == KIND_MODE)
		snprintf(out, len, "%s", modes[st->value]);
	else
		snprintf(out, len, "%llu", (unsigned long long)st->value);
}

int gpufile_config_get(const char *name, char *value, size_t len,
                       gpufile_source_t *source, char *variable,
                       size_t variable_len)
{
	struct setting *st = find(name);
	int rc = 0;

	if (!st)
		return gpufile__fail(-ENOENT, "unknown setting \"%s\"",
		                     name ? name : "(null)");
	pthread_mutex_lock(&config_lock);
	ensure_loaded();
	if (st->bad) {
		rc = gpufile__fail_msg(GPUFILE_ECONFIG, st->bad_message);
	} else {
		if (value && len)
			format_value(st, value, len);
		if (source)
			*source = st->source;
		if (variable && variable_len)
			snprintf(variable, variable_len, "%s", st->variable);
	}
	pthread_mutex_unlock(&config_lock);
	return rc;
}

static int set_number(struct setting *st, uint64_t v)
{
	int rc = 0;

	if (v < st->min || v > st->max)
		return gpufile__fail(
		    GPUFILE_ECONFIG, "%s=%llu: out of range [%llu, %llu]",
		    st->name, (unsigned long long)v,
		    (unsigned long long)st->min, (unsigned long long)st->max);
	pthread_mutex_lock(&config_lock);
	ensure_loaded();
	clamp(st, st->name, &v);
	st->value = v;
	st->source = GPUFILE_SOURCE_SETTER;
	st->variable[0] = '\0';
	st->bad = 0;
	atomic_fetch_add_explicit(&generation, 1, memory_order_release);
	pthread_mutex_unlock(&config_lock);
	return rc;
}

int gpufile_config_set(const char *name, const char *value)
{
	struct setting *st = find(name);
	char msg[256];
	uint64_t v;

	if (!st)
		return gpufile__fail(-ENOENT, "unknown setting \"%s\"",
		                     name ? name : "(null)");
	if (!value)
		return gpufile__fail(GPUFILE_ECONFIG, "%s: no value given",
		                     st->name);
	if (parse_value(st, value, st->name, 0, &v, msg, sizeof(msg)))
		return gpufile__fail_msg(GPUFILE_ECONFIG, msg);
	if (st->kind == KIND_STRING) {
		pthread_mutex_lock(&config_lock);
		ensure_loaded();
		snprintf(st->text, sizeof(st->text), "%s", value);
		st->source = GPUFILE_SOURCE_SETTER;
		st->variable[0] = '\0';
		st->bad = 0;
		atomic_fetch_add_explicit(&generation, 1, memory_order_release);
		pthread_mutex_unlock(&config_lock);
		return 0;
	}
	return set_number(st, v);
}

void gpufile_config_reset(void)
{
	pthread_mutex_lock(&config_lock);
	loaded = 0;
	ensure_loaded();
	pthread_mutex_unlock(&config_lock);
}

static int get_number(int index, uint64_t *out)
{
	int rc;

	pthread_mutex_lock(&config_lock);
	ensure_loaded();
	if (settings[index].bad) {
		rc = gpufile__fail_msg(GPUFILE_ECONFIG,
		                       settings[index].bad_message);
	} else {
		*out = settings[index].value;
		rc = 0;
	}
	pthread_mutex_unlock(&config_lock);
	return rc;
}

int gpufile_set_compat_mode(gpufile_compat_mode_t mode)
{
	return set_number(&settings[S_COMPAT], (uint64_t)mode);
}

int gpufile_get_compat_mode(gpufile_compat_mode_t *mode)
{
	uint64_t v = 0;
	int rc = get_number(S_COMPAT, &v);

	if (rc == 0)
		*mode = (gpufile_compat_mode_t)v;
	return rc;
}

#define SIZE_ACCESSORS(fn, index, type)                                        \
	int gpufile_set_##fn(type v)                                           \
	{                                                                      \
		return set_number(&settings[index], v);                        \
	}                                                                      \
	int gpufile_get_##fn(type *out)                                        \
	{                                                                      \
		uint64_t v = 0;                                                \
		int rc = get_number(index, &v);                                \
		if (rc == 0)                                                   \
			*out = (type)v;                                        \
		return rc;                                                     \
	}

SIZE_ACCESSORS(task_size, S_TASK, size_t)
SIZE_ACCESSORS(gds_threshold, S_THRESH, size_t)
SIZE_ACCESSORS(nthreads, S_NTHREADS, unsigned)
SIZE_ACCESSORS(bounce_buffer_size, S_BOUNCE, size_t)

int gpufile__config_string(const char *name, char *out, size_t len)
{
	struct setting *st = find(name);
	int rc = 0;

	if (!st || st->kind != KIND_STRING)
		return gpufile__fail(-ENOENT, "no string setting \"%s\"",
		                     name ? name : "(null)");
	pthread_mutex_lock(&config_lock);
	ensure_loaded();
	if (st->bad)
		rc = gpufile__fail_msg(GPUFILE_ECONFIG, st->bad_message);
	else
		snprintf(out, len, "%s", st->text);
	pthread_mutex_unlock(&config_lock);
	return rc;
}

int gpufile_parse_size(const char *text, uint64_t *out)
{
	return text && out ? gpufile__parse_size(text, out) : -EINVAL;
}

int gpufile_parse_count(const char *text, uint64_t *out)
{
	return text && out ? gpufile__parse_count(text, out) : -EINVAL;
}

/* fork() (see fork.c): the settings are plain memory; only the lock
 * needs care. */
void gpufile__config_atfork_prepare(void)
{
	pthread_mutex_lock(&config_lock);
}

void gpufile__config_atfork_parent(void)
{
	pthread_mutex_unlock(&config_lock);
}

void gpufile__config_atfork_child(void)
{
	pthread_mutex_unlock(&config_lock);
}
