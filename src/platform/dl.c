/*
 * The dynamic loader's lock (dl_lock) and its count of loaded objects.
 */
#define _GNU_SOURCE
#include "platform/platform.h"

#include <link.h>
#include <pthread.h>

/*
 * glibc's dynamic loader is not safe to fork in the middle of: a child
 * forked while another thread was inside dlopen() crashed in the loader
 * (SIGSEGV in _dl_load_cache_lookup, 34 of 300 children forked while a
 * thread looped on gpufile_features(); a bare dlopen() loop does the
 * same). So every dlopen, dlclose and dl_iterate_phdr of the library
 * (features.c, cuda_shim.c's gpufile__cuda_if_loaded, probe.c) holds
 * dl_lock, which api/fork.c's prepare takes last. The shims' loaders dlopen
 * under cufile_lock and cuda_lock, which prepare holds already. dl_lock is the
 * last lock of the order: its holders take no other.
 */
static pthread_mutex_t dl_lock = PTHREAD_MUTEX_INITIALIZER;

void gpufile__dl_lock(void)
{
	pthread_mutex_lock(&dl_lock);
}

void gpufile__dl_unlock(void)
{
	pthread_mutex_unlock(&dl_lock);
}

static int count_adds(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	*(unsigned long long *)data = info->dlpi_adds;
	return 1; /* the first object carries the process-wide count */
}

unsigned long long gpufile__dl_adds(void)
{
	unsigned long long adds = 0;

	dl_iterate_phdr(count_adds, &adds);
	return adds;
}
