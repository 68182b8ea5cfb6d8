/*
 * Settings: defaults, the environment (GPUFILE_<NAME>, then KVIKIO_<NAME>),
 * and setters. The environment is read once, on the first call that needs
 * a setting; a bad value is remembered with its message and fails every
 * such call until a setter replaces it.
 */
#include "internal.h"

#include <ctype.h>
#include <errno.h>
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

	/* Guarded by config_lock. */
	uint64_t value;
	gpufile_source_t source;
	char variable[64];
	int bad;
	char bad_message[256];
	char text[512]; /* KIND_STRING: the value */
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
	return 0;
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
static uint64_t default_remote_connections(void)
{
	return 16;
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
    SETTING("bounce_buffer_size", KIND_SIZE, 64 * KiB, GiB,
            default_bounce_buffer_size,
            "bytes per pinned bounce buffer (rounded down to 4 KiB)"),
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
    SETTING(
        "cufile_stats", KIND_COUNT, 0, 3, default_cufile_stats,
        "cuFile stats level set through cuFileSetStatsLevel (default: "
        "CUFILE_STATS_LEVEL, else 0); 3 adds per-GPU nvfs/posix/p2p counts"),
    SETTING("cufile_accel_only", KIND_MODE, 0, 2, default_mode_auto,
            "compat_mode=auto hands files to cuFile only where it can take an "
            "accelerated path (nvidia-fs or P2PDMA); off: also to cuFile's "
            "compat path"),
    /* Remote sources (remote.c); KvikIO's names and defaults. */
    SETTING("http_max_attempts", KIND_COUNT, 1, 100, default_http_attempts,
            "attempts per HTTP range before it fails (remote objects)"),
    SETTING("http_timeout", KIND_COUNT, 1, 86400, default_http_timeout,
            "seconds an HTTP range may take (or stall) before it is retried"),
    {.name = "http_status_codes",
     .kind = KIND_STRING,
     .default_text = "429,500,502,503,504",
     .help = "HTTP statuses that are retried (comma-separated)"},
    SETTING("remote_connections", KIND_COUNT, 1, 1024,
            default_remote_connections,
            "HTTP connections per remote handle, reused between ranges"),
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
	S_CUFILE_ACCEL
};

static pthread_mutex_t config_lock = PTHREAD_MUTEX_INITIALIZER;
static int loaded;

static const char *skip_space(const char *s)
{
	while (*s && isspace((unsigned char)*s))
		s++;
	return s;
}

int gpufile__parse_count(const char *text, uint64_t *out)
{
	const char *s = skip_space(text);
	uint64_t v = 0;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	for (; isdigit((unsigned char)*s); s++) {
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	if (*skip_space(s) != '\0')
		return -EINVAL;
	*out = v;
	return 0;
}

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
	uint64_t v = 0;

	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	for (; isdigit((unsigned char)*s); s++) {
		unsigned d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
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

/* Parses text for setting st; on failure writes a message naming origin
 * (a variable or the setting) and the value into msg. */
static int parse_value(const struct setting *st, const char *text,
                       const char *origin, uint64_t *out, char *msg,
                       size_t msg_len)
{
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
		rc = gpufile__parse_size(text, out);
		if (rc == -ERANGE)
			snprintf(msg, msg_len, "%s=\"%s\": too large", origin,
			         text);
		else if (rc)
			snprintf(msg, msg_len,
			         "%s=\"%s\": not a size; use bytes or a number "
			         "with KiB, MiB or GiB",
			         origin, text);
		break;
	default:
		rc = gpufile__parse_count(text, out);
		if (rc == -ERANGE)
			snprintf(msg, msg_len, "%s=\"%s\": too large", origin,
			         text);
		else if (rc)
			snprintf(msg, msg_len, "%s=\"%s\": not a whole number",
			         origin, text);
		break;
	}
	if (rc == 0 && (*out < st->min || *out > st->max)) {
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
	for (int i = 0; i < 2; i++) {
		char var[64];
		const char *text;
		uint64_t v;

		upper(var, prefixes[i], st->name, sizeof(var));
		text = getenv(var);
		if (!text)
			continue;
		snprintf(st->variable, sizeof(st->variable), "%s", var);
		st->source = sources[i];
		if (parse_value(st, text, var, &v, st->bad_message,
		                sizeof(st->bad_message)))
			st->bad = 1;
		else if (st->kind == KIND_STRING)
			snprintf(st->text, sizeof(st->text), "%s", text);
		else
			st->value = v;
		return;
	}
}

static void ensure_loaded(void)
{
	if (loaded)
		return;
	for (int i = 0; i < NSETTINGS; i++)
		load_one(&settings[i]);
	loaded = 1;
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
		s->bounce_buffer_size = (size_t)settings[S_BOUNCE].value &
		                        ~(size_t)(GPUFILE_ALIGN - 1);
		s->bounce_buffers = (unsigned)settings[S_NBOUNCE].value;
		/* Setting values are stored as 0 auto, 1 on, 2 off. */
		s->direct_io =
		    settings[S_DIRECT].value == 0   ? GPUFILE__DIRECT_AUTO
		    : settings[S_DIRECT].value == 1 ? GPUFILE__DIRECT_ON
		                                    : GPUFILE__DIRECT_OFF;
		s->max_inflight = (unsigned)settings[S_INFLIGHT].value;
		s->cufile_stats = (unsigned)settings[S_CUFILE_STATS].value;
		s->cufile_accel_only = settings[S_CUFILE_ACCEL].value != 2;
	}
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
	st->value = v;
	st->source = GPUFILE_SOURCE_SETTER;
	st->variable[0] = '\0';
	st->bad = 0;
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
	if (parse_value(st, value, st->name, &v, msg, sizeof(msg)))
		return gpufile__fail_msg(GPUFILE_ECONFIG, msg);
	if (st->kind == KIND_STRING) {
		pthread_mutex_lock(&config_lock);
		ensure_loaded();
		snprintf(st->text, sizeof(st->text), "%s", value);
		st->source = GPUFILE_SOURCE_SETTER;
		st->variable[0] = '\0';
		st->bad = 0;
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
