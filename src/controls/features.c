/*
 * The library's version and what it can use at run time (gpufile_features):
 * what was compiled in is not enough to answer, since a kernel or container
 * may refuse io_uring and a machine may lack the CUDA driver or cuFile.
 */
#include "controls/controls.h"
#include "sources/remote.h"
#include "platform/cuda_shim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#ifdef GPUFILE_HAVE_LIBURING
#include <liburing.h>
#endif
#ifndef GPUFILE_HAVE_CJSON
#define GPUFILE_HAVE_CJSON 0
#endif

const char *gpufile_version(void)
{
	return GPUFILE_VERSION_STRING;
}

/* Whether this process may set up an io_uring now: seccomp filters,
 * kernel.io_uring_disabled and old kernels refuse io_uring_setup(2) (EPERM,
 * ENOSYS), and then the cold device reads of staging.c use pread. */
static int uring_usable(void)
{
#ifdef GPUFILE_HAVE_LIBURING
	struct io_uring ring;

	if (io_uring_queue_init(2, &ring, 0) != 0)
		return 0;
	io_uring_queue_exit(&ring);
	return 1;
#else
	return 0;
#endif
}

/*
 * What loadable() learnt of each library name, under dl_lock (platform/dl.c).
 * A library found stays loaded (it is never closed), so found is final. A
 * miss is final for the search of the library path: a library installed
 * there later is seen by a later process, as the shims, which also try
 * once, see it. What can still change is that the program loads the
 * library itself (by a full path, say): so after a miss, the library is
 * asked for again without a search (RTLD_NOLOAD) whenever the loader's
 * count of loaded objects has moved. Before, every gpufile_features()
 * call searched again, and a fork() in the middle of that dlopen crashed
 * the child (fork.c).
 */
#define MAX_KNOWN 4
static struct known_library {
	char name[256];
	int found;
	unsigned long long adds; /* gpufile__dl_adds() when last asked */
} known[MAX_KNOWN];
static int nknown;

/* Whether library name can be loaded. A library this process already holds
 * counts without a search. One loaded here stays loaded, as the shims keep
 * theirs: neither libcuda nor libcufile supports being unloaded safely. No
 * initializing call (cuInit, cuFileDriverOpen) is made. */
static int loadable(const char *name)
{
	struct known_library *k = NULL;
	unsigned long long adds;
	void *lib = NULL;
	int found;

	gpufile__dl_lock();
	adds = gpufile__dl_adds();
	for (int i = 0; i < nknown && !k; i++)
		if (strcmp(known[i].name, name) == 0)
			k = &known[i];
	if (k && (k->found || k->adds == adds)) {
		found = k->found;
		goto out;
	}
	lib = dlopen(name, RTLD_LAZY | RTLD_LOCAL | RTLD_NOLOAD);
	if (!lib && !k)
		lib = dlopen(name, RTLD_LAZY | RTLD_LOCAL);
	found = lib != NULL;
	if (!k && nknown < MAX_KNOWN && strlen(name) < sizeof(k->name)) {
		k = &known[nknown++];
		snprintf(k->name, sizeof(k->name), "%s", name);
	}
	if (k) {
		k->found = found;
		k->adds = gpufile__dl_adds();
	}
out:
	gpufile__dl_unlock();
	return found;
}

static int cufile_usable(void)
{
	gpufile_cufile_info_t info;
	char library[256];

	GPUFILE_INIT(info);
	if (gpufile_cufile_info(&info) == 0 && info.loaded)
		return 1;
	/* A bad cufile_library setting is reported where it is used; here it
	 * only means that cuFile cannot be loaded. */
	if (gpufile__config_string("cufile_library", library, sizeof(library)))
		return 0;
	return loadable(library);
}

static void add(char *buf, size_t len, const char *word)
{
	size_t used = strlen(buf);

	snprintf(buf + used, len - used, "%s%s", used ? " " : "", word);
}

const char *gpufile_features(void)
{
	static _Thread_local char words[128];

	words[0] = '\0';
	if (uring_usable())
		add(words, sizeof(words), "liburing");
	if (GPUFILE_HAVE_CJSON)
		add(words, sizeof(words), "cjson");
#ifndef GPUFILE_NO_STATS
	add(words, sizeof(words), "stats");
#endif
	if (gpufile__cuda_if_loaded() || loadable("libcuda.so.1"))
		add(words, sizeof(words), "cuda");
	if (cufile_usable())
		add(words, sizeof(words), "cufile");
	if (GPUFILE__REMOTE_FEATURES[0]) /* " remote sigv4" */
		add(words, sizeof(words), &GPUFILE__REMOTE_FEATURES[1]);
	gpufile__clear_error();
	return words;
}
