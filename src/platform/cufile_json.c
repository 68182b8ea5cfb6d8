/*
 * cufile.json: which file cuFile reads, and the values gpufile models
 * (gpufile explain and gpufile check). Parsed with cJSON when it was found
 * at build time; without it, a present file is reported as not parsed
 * ("cufile.json parsing not compiled in") and the defaults are used.
 */
#define _GNU_SOURCE
#include "platform/platform.h"
#include "platform/cufile_json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef GPUFILE_HAVE_CJSON
#define GPUFILE_HAVE_CJSON 0
#endif
#if GPUFILE_HAVE_CJSON
#include <cJSON.h>
#endif

#define CUFILE_JSON_MAX (4u << 20) /* larger is not a cufile.json */

/* gpufile's model of the defaults of cuFile 1.15 (the values of the
 * cufile.json NVIDIA ships, which cuFile also uses for absent keys). */
static const struct key {
	const char *section, *name, *full;
	int is_bool;
	int64_t def, min, max;
} keys[GPUFILE_CUFILE_NKEYS] = {
    [GPUFILE_CUFILE_PARALLEL_IO] = {"execution", "parallel_io",
                                    "execution.parallel_io", 1, 1, 0, 1},
    [GPUFILE_CUFILE_MAX_IO_THREADS] = {"execution", "max_io_threads",
                                       "execution.max_io_threads", 0, 4, 0,
                                       1024},
    [GPUFILE_CUFILE_MAX_REQUEST_PARALLELISM] =
        {"execution", "max_request_parallelism",
         "execution.max_request_parallelism", 0, 4, 0, 1024},
    [GPUFILE_CUFILE_MIN_IO_THRESHOLD_SIZE_KB] =
        {"execution", "min_io_threshold_size_kb",
         "execution.min_io_threshold_size_kb", 0, 8192, 0, INT64_C(1) << 32},
    [GPUFILE_CUFILE_MAX_IO_QUEUE_DEPTH] = {"execution", "max_io_queue_depth",
                                           "execution.max_io_queue_depth", 0,
                                           128, 1, 1 << 20},
    [GPUFILE_CUFILE_MAX_DIRECT_IO_SIZE_KB] =
        {"properties", "max_direct_io_size_kb",
         "properties.max_direct_io_size_kb", 0, 16384, 4, INT64_C(1) << 32},
    [GPUFILE_CUFILE_MAX_DEVICE_CACHE_SIZE_KB] =
        {"properties", "max_device_cache_size_kb",
         "properties.max_device_cache_size_kb", 0, 131072, 0, INT64_C(1) << 40},
    [GPUFILE_CUFILE_ALLOW_COMPAT_MODE] = {"properties", "allow_compat_mode",
                                          "properties.allow_compat_mode", 1, 1,
                                          0, 1},
    [GPUFILE_CUFILE_USE_POLL_MODE] = {"properties", "use_poll_mode",
                                      "properties.use_poll_mode", 1, 0, 0, 1},
    [GPUFILE_CUFILE_POLL_MODE_MAX_SIZE_KB] =
        {"properties", "poll_mode_max_size_kb",
         "properties.poll_mode_max_size_kb", 0, 4, 0, INT64_C(1) << 32},
};

void gpufile__cufile_defaults(gpufile_cufile_config_t *out)
{
	memset(out, 0, sizeof(*out));
	out->size = sizeof(*out);
	snprintf(out->path_source, sizeof(out->path_source), "none");
	for (int i = 0; i < GPUFILE_CUFILE_NKEYS; i++) {
		out->v[i].key = keys[i].full;
		out->v[i].value = keys[i].def;
		out->v[i].is_bool = keys[i].is_bool;
		out->v[i].from_file = 0;
	}
}

#if GPUFILE_HAVE_CJSON

/* Replaces // and block comments outside strings with spaces, keeping
 * newlines, so that cJSON's error offset still points at the right line
 * (cJSON_Minify would remove them and shift every later position). */
static void blank_comments(char *s, size_t len)
{
	size_t i = 0;

	while (i < len) {
		if (s[i] == '"') {
			for (i++; i < len && s[i] != '"'; i++)
				if (s[i] == '\\' && i + 1 < len)
					i++;
			i++;
		} else if (s[i] == '/' && i + 1 < len && s[i + 1] == '/') {
			for (; i < len && s[i] != '\n'; i++)
				s[i] = ' ';
		} else if (s[i] == '/' && i + 1 < len && s[i + 1] == '*') {
			s[i] = s[i + 1] = ' ';
			for (i += 2; i < len; i++) {
				if (s[i] == '*' && i + 1 < len &&
				    s[i + 1] == '/') {
					s[i] = s[i + 1] = ' ';
					i += 2;
					break;
				}
				if (s[i] != '\n')
					s[i] = ' ';
			}
		} else {
			i++;
		}
	}
}

static void line_col(const char *s, size_t pos, unsigned *line, unsigned *col)
{
	*line = 1;
	*col = 1;
	for (size_t i = 0; i < pos; i++) {
		if (s[i] == '\n') {
			(*line)++;
			*col = 1;
		} else {
			(*col)++;
		}
	}
}

static const char *type_name(const cJSON *v)
{
	if (cJSON_IsBool(v))
		return "a boolean";
	if (cJSON_IsNumber(v))
		return "a number";
	if (cJSON_IsString(v))
		return "a string";
	if (cJSON_IsArray(v))
		return "an array";
	if (cJSON_IsObject(v))
		return "an object";
	if (cJSON_IsNull(v))
		return "null";
	return "something else";
}

static int get_value(const cJSON *v, const struct key *k, const char *name,
                     int64_t *out)
{
	if (k->is_bool) {
		if (!cJSON_IsBool(v))
			return gpufile__fail(GPUFILE_ECONFIG,
			                     "%s: %s: expected true or false, "
			                     "got %s",
			                     name, k->full, type_name(v));
		*out = cJSON_IsTrue(v) ? 1 : 0;
		return 0;
	}
	if (!cJSON_IsNumber(v))
		return gpufile__fail(GPUFILE_ECONFIG,
		                     "%s: %s: expected a whole number, got %s",
		                     name, k->full, type_name(v));
	/* Compare as doubles first: the cast of an out-of-range or NaN
	 * double to an integer is undefined. */
	if (!(v->valuedouble >= (double)k->min &&
	      v->valuedouble <= (double)k->max) ||
	    v->valuedouble != (double)(int64_t)v->valuedouble)
		return gpufile__fail(GPUFILE_ECONFIG,
		                     "%s: %s: %g is not a whole number in "
		                     "[%lld, %lld]",
		                     name, k->full, v->valuedouble,
		                     (long long)k->min, (long long)k->max);
	*out = (int64_t)v->valuedouble;
	return 0;
}

static int read_denylist(const cJSON *root, const char *name,
                         gpufile_cufile_config_t *out)
{
	const cJSON *deny = cJSON_GetObjectItemCaseSensitive(root, "denylist");
	const cJSON *fs, *e;
	size_t used = 0;

	if (!deny)
		return 0;
	if (!cJSON_IsObject(deny))
		return gpufile__fail(GPUFILE_ECONFIG,
		                     "%s: denylist: expected an object, got %s",
		                     name, type_name(deny));
	fs = cJSON_GetObjectItemCaseSensitive(deny, "filesystems");
	if (!fs)
		return 0;
	if (!cJSON_IsArray(fs))
		return gpufile__fail(GPUFILE_ECONFIG,
		                     "%s: denylist.filesystems: expected an "
		                     "array, got %s",
		                     name, type_name(fs));
	cJSON_ArrayForEach(e, fs)
	{
		int n;

		if (!cJSON_IsString(e) || !e->valuestring)
			return gpufile__fail(
			    GPUFILE_ECONFIG,
			    "%s: denylist.filesystems: expected "
			    "strings, got %s",
			    name, type_name(e));
		n = snprintf(out->denied_filesystems + used,
		             sizeof(out->denied_filesystems) - used, "%s%s",
		             used ? " " : "", e->valuestring);
		if (n < 0 ||
		    (size_t)n >= sizeof(out->denied_filesystems) - used)
			break;
		used += (size_t)n;
	}
	return 0;
}

static int cmp_member_names(const void *a, const void *b)
{
	return strcmp((*(const cJSON *const *)a)->string,
	              (*(const cJSON *const *)b)->string);
}

/* A member of an object in tree (depth first) whose name another member
 * of the same object has, and that object's name into *where ("" for the
 * top); NULL when there is none, or out of memory (-ENOMEM in *err).
 * Sorted, not compared pairwise: a 4 MiB file may hold 10^5 keys. */
static const cJSON *repeated_key(const cJSON *tree, const char **where,
                                 int *err)
{
	const cJSON *a, *found = NULL;
	const cJSON **names;
	size_t n = 0, i = 0;

	cJSON_ArrayForEach(a, tree)
	{
		n++;
		if ((cJSON_IsObject(a) || cJSON_IsArray(a)) &&
		    (found = repeated_key(a, where, err)))
			return found;
		if (*err)
			return NULL;
	}
	if (!cJSON_IsObject(tree) || n < 2)
		return NULL;
	names = malloc(n * sizeof(*names));
	if (!names) {
		*err = -ENOMEM;
		return NULL;
	}
	cJSON_ArrayForEach(a, tree) names[i++] = a;
	qsort(names, n, sizeof(*names), cmp_member_names);
	for (i = 1; i < n && !found; i++)
		if (strcmp(names[i]->string, names[i - 1]->string) == 0)
			found = names[i];
	free(names);
	if (found)
		*where = tree->string ? tree->string : "";
	return found;
}

static int parse_tree(const cJSON *root, const char *name,
                      gpufile_cufile_config_t *out)
{
	int64_t values[GPUFILE_CUFILE_NKEYS];
	int from_file[GPUFILE_CUFILE_NKEYS] = {0};
	int rc;

	if (!cJSON_IsObject(root))
		return gpufile__fail(
		    GPUFILE_ECONFIG,
		    "%s: expected an object at the top, got %s", name,
		    type_name(root));
	{
		/* Which of the two cuFile takes is not documented: the plan
		 * would be a guess. */
		const char *where = "";
		int err = 0;
		const cJSON *dup = repeated_key(root, &where, &err);

		if (err)
			return gpufile__fail(err, "%s: out of memory", name);
		if (dup)
			return gpufile__fail(
			    GPUFILE_ECONFIG,
			    "%s: \"%s\" is given twice in %s%s%s; which one "
			    "cuFile takes is not known: keep one",
			    name, dup->string, where[0] ? "\"" : "the top",
			    where, where[0] ? "\"" : "");
	}
	for (int i = 0; i < GPUFILE_CUFILE_NKEYS; i++) {
		const struct key *k = &keys[i];
		const cJSON *sec =
		    cJSON_GetObjectItemCaseSensitive(root, k->section);
		const cJSON *v;

		values[i] = out->v[i].value;
		if (!sec)
			continue;
		if (!cJSON_IsObject(sec))
			return gpufile__fail(
			    GPUFILE_ECONFIG,
			    "%s: %s: expected an object, got %s", name,
			    k->section, type_name(sec));
		v = cJSON_GetObjectItemCaseSensitive(sec, k->name);
		if (!v)
			continue;
		rc = get_value(v, k, name, &values[i]);
		if (rc)
			return rc;
		from_file[i] = 1;
	}
	rc = read_denylist(root, name, out);
	if (rc)
		return rc;
	for (int i = 0; i < GPUFILE_CUFILE_NKEYS; i++) {
		out->v[i].value = values[i];
		out->v[i].from_file = from_file[i];
	}
	return 0;
}

int gpufile__cufile_json_parse(const char *text, size_t len, const char *name,
                               gpufile_cufile_config_t *out)
{
	const char *nul = memchr(text, '\0', len);
	const char *end = NULL;
	char *copy;
	cJSON *root;
	int rc;

	if (nul) {
		unsigned line, col;
		line_col(text, (size_t)(nul - text), &line, &col);
		return gpufile__fail(GPUFILE_ECONFIG,
		                     "%s:%u:%u: a NUL byte: not a JSON text",
		                     name, line, col);
	}
	copy = malloc(len + 1);
	if (!copy)
		return gpufile__fail(-ENOMEM, "%s: out of memory", name);
	memcpy(copy, text, len);
	copy[len] = '\0';
	blank_comments(copy, len);
	root = cJSON_ParseWithOpts(copy, &end, 1);
	if (!root) {
		unsigned line, col;
		size_t pos = end && end >= copy && end <= copy + len
		                 ? (size_t)(end - copy)
		                 : len;
		line_col(copy, pos, &line, &col);
		rc = gpufile__fail(
		    GPUFILE_ECONFIG, "%s:%u:%u: malformed JSON%s", name, line,
		    col, pos >= len ? " (unexpected end of file)" : "");
	} else {
		rc = parse_tree(root, name, out);
		cJSON_Delete(root);
	}
	free(copy);
	if (rc == 0)
		out->parsed = 1;
	return rc;
}

#else /* !GPUFILE_HAVE_CJSON */

int gpufile__cufile_json_parse(const char *text, size_t len, const char *name,
                               gpufile_cufile_config_t *out)
{
	(void)text;
	(void)len;
	(void)out;
	return gpufile__fail(-ENOTSUP,
	                     "%s: cufile.json parsing not compiled in (gpufile "
	                     "was built without cJSON); using defaults",
	                     name);
}

#endif

/* Reads path (at most CUFILE_JSON_MAX bytes) into a new buffer. */
static int slurp(const char *path, char **text, size_t *len, const char **kind)
{
	/* O_NONBLOCK: a FIFO must not make the open wait for a writer. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	size_t cap = 65536, n = 0;
	struct stat st;
	char *buf;

	if (fd < 0)
		return -errno;
	/* Only a regular file: cuFile reads the file again itself at
	 * cuFileDriverOpen, and would find a FIFO's bytes gone (or wait on
	 * it); a device or directory is no configuration. */
	if (fstat(fd, &st) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		*kind = gpufile__special_kind(st.st_mode);
		if (!*kind)
			*kind = "a block device";
		return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	}
	buf = malloc(cap);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	for (;;) {
		ssize_t r;

		if (n == cap) {
			char *nb;
			if (cap >= CUFILE_JSON_MAX) {
				free(buf);
				close(fd);
				return -EFBIG;
			}
			nb = realloc(buf, cap * 2);
			if (!nb) {
				free(buf);
				close(fd);
				return -ENOMEM;
			}
			buf = nb;
			cap *= 2;
		}
		r = read(fd, buf + n, cap - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			int e = -errno;
			free(buf);
			close(fd);
			return e;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	*text = buf;
	*len = n;
	return 0;
}

/* gpufile_cufile_config_load() into the library's own struct out. */
static int config_load(const char *path, gpufile_cufile_config_t *out)
{
	/* A path to read: ignored by a privileged (setuid) process. */
	const char *env = gpufile__path_getenv("CUFILE_ENV_PATH_JSON");
	const char *source, *kind = NULL, *name;
	char *text = NULL, *shown;
	size_t len = 0;
	int rc;

	gpufile__cufile_defaults(out);
	if (path) {
		source = "argument";
	} else if (env && *env) {
		path = env;
		source = "CUFILE_ENV_PATH_JSON";
	} else {
		path = "/etc/cufile.json";
		source = "/etc/cufile.json";
	}
	rc = slurp(path, &text, &len, &kind);
	if (rc == -ENOENT && strcmp(source, "/etc/cufile.json") == 0)
		return 0; /* no file: cuFile's defaults */
	/* A path written like a URL is named as every URL is (remote.c):
	 * without what could be a password or a signature. */
	shown = gpufile__is_url(path) ? gpufile__remote_redact(path) : NULL;
	name = shown                   ? shown
	       : gpufile__is_url(path) ? GPUFILE__URL_NOT_SHOWN
	                               : path;
	snprintf(out->path, sizeof(out->path), "%s", name);
	snprintf(out->path_source, sizeof(out->path_source), "%s", source);
	if (rc && kind)
		rc = gpufile__fail(rc,
		                   "reading %s (%s): it is %s, not a regular "
		                   "file; cufile.json must be a regular file "
		                   "(cuFile reads it again itself)",
		                   name, source, kind);
	else if (rc)
		rc = gpufile__fail(rc, "reading %s (%s): %s", name, source,
		                   rc == -EFBIG ? "larger than 4 MiB, "
		                                  "not a cufile.json"
		                                : strerror(-rc));
	else
		rc = gpufile__cufile_json_parse(text, len, name, out);
	free(text);
	free(shown);
	if (rc) {
		/* Keep the file's name, but none of its values. */
		gpufile_cufile_config_t keep = *out;
		gpufile__cufile_defaults(out);
		memcpy(out->path, keep.path, sizeof(out->path));
		memcpy(out->path_source, keep.path_source,
		       sizeof(out->path_source));
	}
	return rc;
}

int gpufile_cufile_config_load(const char *path, gpufile_cufile_config_t *out)
{
	gpufile_cufile_config_t local;
	int rc;

	if (!out)
		return gpufile__fail(-EINVAL, "gpufile_cufile_config_load: out "
		                              "is NULL");
	rc = GPUFILE__SIZED_CHECK(out, gpufile_cufile_config_t);
	if (rc)
		return rc;
	rc = config_load(path, &local);
	gpufile__sized_put(out, &local, sizeof(local));
	return rc;
}
