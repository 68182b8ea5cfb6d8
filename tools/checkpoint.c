/*
 * Checkpoint folders and index files for `gpufile load` (see
 * checkpoint.h).
 */
#define _GNU_SOURCE
#include "checkpoint.h"
#include "msg.h"

#if GPUFILE_CLI_HAVE_CJSON
#include <cjson/cJSON.h>
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int ends_with(const char *s, const char *tail)
{
	size_t n = strlen(s), t = strlen(tail);

	return n >= t && strcmp(s + n - t, tail) == 0;
}

static int is_url(const char *s)
{
	return strncmp(s, "http://", 7) == 0 ||
	       strncmp(s, "https://", 8) == 0 || strncmp(s, "s3://", 5) == 0 ||
	       strncmp(s, "webhdfs://", 10) == 0;
}

/* Appends path (taken over; NULL: out of memory). checkpoint_expand()
 * drops the repeats once all are in (drop_repeats). */
static int add(const char *cmd, struct checkpoint_files *f, char *path)
{
	if (!path)
		return msg_error(cmd, "out of memory");
	if (f->count == f->cap) {
		int cap = f->cap ? 2 * f->cap : 8;
		char **p = realloc(f->paths, (size_t)cap * sizeof(*p));

		if (!p) {
			free(path);
			return msg_error(cmd, "out of memory");
		}
		f->paths = p;
		f->cap = cap;
	}
	f->paths[f->count++] = path;
	return 0;
}

/* Orders positions in files->paths by path, then by position. */
static int by_path_then_place(const void *a, const void *b, void *arg)
{
	char *const *paths = arg;
	int i = *(const int *)a, j = *(const int *)b;
	int c = strcmp(paths[i], paths[j]);

	return c ? c : (i > j) - (i < j);
}

/* Keeps the first of each path of f->paths[start..count), in place and
 * order. Sorting positions (not comparing each path with all before it):
 * an index names a shard per tensor, and one of 100000 tensors took
 * minutes pairwise. */
static int drop_repeats(const char *cmd, struct checkpoint_files *f, int start)
{
	const int n = f->count - start;
	char **paths = f->paths + start;
	int *order, kept = 0, first;

	if (n < 2)
		return 0;
	order = malloc((size_t)n * sizeof(*order));
	if (!order)
		return msg_error(cmd, "out of memory");
	for (int i = 0; i < n; i++)
		order[i] = i;
	qsort_r(order, (size_t)n, sizeof(*order), by_path_then_place, paths);
	/* first: the first place of the path at order[i - 1], kept. */
	first = order[0];
	for (int i = 1; i < n; i++)
		if (strcmp(paths[order[i]], paths[first]) == 0) {
			free(paths[order[i]]);
			paths[order[i]] = NULL;
		} else {
			first = order[i];
		}
	free(order);
	for (int i = 0; i < n; i++)
		if (paths[i])
			paths[kept++] = paths[i];
	f->count = start + kept;
	return 0;
}

static char *join(const char *folder, const char *name)
{
	char *out;

	if (asprintf(&out, "%s/%s", folder, name) < 0)
		return NULL;
	return out;
}

#if GPUFILE_CLI_HAVE_CJSON
/* The whole of path, NUL-terminated, or NULL with errno set (EFTYPE's
 * stand-in ENOTSUP: not a regular file). Opened without blocking and
 * refused unless regular: a FIFO named *.json hung load in open(), and
 * /dev/zero was read until memory ran out. */
static char *slurp(const char *path)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	char *buf = NULL;
	size_t len = 0, cap = 0, n;
	struct stat st;
	FILE *f;

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		int e = fstat(fd, &st) < 0 ? errno : ENOTSUP;

		close(fd);
		errno = e;
		return NULL;
	}
	f = fdopen(fd, "rb");
	if (!f) {
		close(fd);
		return NULL;
	}
	do {
		if (cap - len < 4096) {
			char *p = realloc(buf, cap = cap ? 2 * cap : 65536);

			if (!p) {
				free(buf);
				fclose(f);
				errno = ENOMEM;
				return NULL;
			}
			buf = p;
		}
		n = fread(buf + len, 1, cap - len - 1, f);
		len += n;
	} while (n > 0);
	if (ferror(f)) {
		free(buf);
		fclose(f);
		errno = EIO;
		return NULL;
	}
	fclose(f);
	buf[len] = '\0';
	return buf;
}

/* shard without "." components and repeated slashes ("./a//b" is "a/b",
 * as Python's os.path.normpath makes it), so that one file is loaded
 * once; NULL when it is absolute or goes through "..". */
static char *normal_shard(const char *shard)
{
	char *out = malloc(strlen(shard) + 1), *w = out;
	const char *p = shard;

	if (!out || shard[0] == '/' || shard[0] == '\0') {
		free(out);
		return NULL;
	}
	while (*p) {
		size_t n = strcspn(p, "/");

		if (n == 2 && p[0] == '.' && p[1] == '.') {
			free(out);
			return NULL;
		}
		if (n > 0 && !(n == 1 && p[0] == '.')) {
			if (w > out)
				*w++ = '/';
			memcpy(w, p, n);
			w += n;
		}
		p += n;
		while (*p == '/')
			p++;
	}
	*w = '\0';
	if (w == out) {
		free(out);
		return NULL;
	}
	return out;
}

static int expand_index(const char *cmd, const char *index,
                        struct checkpoint_files *f)
{
	char *text = slurp(index), *folder, *slash;
	const cJSON *map, *entry;
	cJSON *root;
	int rc = 0;

	if (!text && errno == ENOTSUP)
		return msg_error(cmd,
		                 "%s: not a regular file (an index is a JSON "
		                 "file)",
		                 index);
	if (!text)
		return msg_error(cmd, "%s: %s", index, strerror(errno));
	root = cJSON_Parse(text);
	free(text);
	if (!root)
		return msg_error(cmd, "%s: not a valid JSON index", index);
	map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
	if (!cJSON_IsObject(map) || !map->child) {
		cJSON_Delete(root);
		return msg_error(cmd,
		                 "%s: no \"weight_map\" object of tensor name "
		                 "-> shard file",
		                 index);
	}
	folder = strdup(index);
	slash = folder ? strrchr(folder, '/') : NULL;
	if (slash)
		*slash = '\0';
	cJSON_ArrayForEach(entry, map)
	{
		char *shard;

		if (!folder) {
			rc = msg_error(cmd, "out of memory");
			break;
		}
		if (!cJSON_IsString(entry)) {
			rc = msg_error(cmd,
			               "%s: weight_map entry \"%s\" is not a "
			               "file name",
			               index, entry->string);
			break;
		}
		shard = normal_shard(entry->valuestring);
		if (!shard) {
			rc = msg_error(cmd,
			               "%s: weight_map names shard \"%s\" "
			               "outside the folder",
			               index, entry->valuestring);
			break;
		}
		rc = add(cmd, f, slash ? join(folder, shard) : strdup(shard));
		free(shard);
		if (rc)
			break;
	}
	free(folder);
	cJSON_Delete(root);
	return rc;
}
#else
static int expand_index(const char *cmd, const char *index,
                        struct checkpoint_files *f)
{
	(void)f;
	return msg_error(cmd,
	                 "%s: reading an index needs cJSON, and this gpufile "
	                 "was built without it",
	                 index);
}
#endif

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Appends the names in folder that end with tail to names, sorted. */
static int list(const char *cmd, const char *folder, const char *tail,
                struct checkpoint_files *names)
{
	DIR *d = opendir(folder);
	struct dirent *e;
	int rc = 0;

	if (!d)
		return msg_error(cmd, "%s: %s", folder, strerror(errno));
	while (rc == 0 && (e = readdir(d)) != NULL)
		if (ends_with(e->d_name, tail))
			rc = add(cmd, names, strdup(e->d_name));
	closedir(d);
	if (rc == 0 && names->count > 1)
		qsort(names->paths, (size_t)names->count, sizeof(char *),
		      by_name);
	return rc;
}

static int expand_folder(const char *cmd, const char *folder,
                         struct checkpoint_files *f)
{
	struct checkpoint_files names = {0};
	int rc = list(cmd, folder, ".safetensors.index.json", &names);

	if (rc == 0 && names.count > 1)
		rc = msg_error(cmd,
		               "%s: several index files (%s, %s%s); name the "
		               "one to load",
		               folder, names.paths[0], names.paths[1],
		               names.count > 2 ? ", ..." : "");
	if (rc == 0 && names.count == 1) {
		char *index = join(folder, names.paths[0]);

		rc = index ? expand_index(cmd, index, f)
		           : msg_error(cmd, "out of memory");
		free(index);
	} else if (rc == 0) {
		rc = list(cmd, folder, ".safetensors", &names);
		if (rc == 0 && names.count == 0)
			rc = msg_error(cmd,
			               "%s: no *.safetensors.index.json and no "
			               "*.safetensors file in the folder",
			               folder);
		for (int i = 0; rc == 0 && i < names.count; i++)
			rc = add(cmd, f, join(folder, names.paths[i]));
	}
	checkpoint_files_free(&names);
	return rc;
}

int checkpoint_expand(const char *cmd, const char *arg,
                      struct checkpoint_files *files)
{
	const int start = files->count;
	struct stat st;
	int rc;

	if (is_url(arg))
		return add(cmd, files, strdup(arg));
	if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode))
		rc = expand_folder(cmd, arg, files);
	else if (ends_with(arg, ".json"))
		rc = expand_index(cmd, arg, files);
	else
		return add(cmd, files, strdup(arg));
	/* An index's shards once each; files named twice by the caller are
	 * loaded twice, as asked. */
	return rc ? rc : drop_repeats(cmd, files, start);
}

void checkpoint_files_free(struct checkpoint_files *files)
{
	for (int i = 0; i < files->count; i++)
		free(files->paths[i]);
	free(files->paths);
	*files = (struct checkpoint_files){0};
}
