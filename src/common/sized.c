/* The size rule of the structs that grow (include/gpufile.h, "Structs
 * that grow"), written once: every function that fills one validates the
 * caller's size with gpufile__sized_check() before it does any work, fills
 * a struct of its own, and hands it out with gpufile__sized_put(). */
#include "common/common.h"

#include <errno.h>
#include <string.h>

/* The caller's size field: the struct's first member, by the header's
 * contract; read through memcpy because p's type is not known here. */
static uint32_t declared_size(const void *p)
{
	uint32_t size;

	memcpy(&size, p, sizeof(size));
	return size;
}

int gpufile__sized_check(const void *p, size_t first_size, const char *type)
{
	uint32_t size = declared_size(p);

	if (size == 0)
		return gpufile__fail(
		    -EINVAL, "%s.size is 0: set it to sizeof(%s)", type, type);
	if (size < first_size)
		return gpufile__fail(-EINVAL,
		                     "%s.size is %u, smaller than the struct's "
		                     "first version (%zu bytes): set it to "
		                     "sizeof(%s)",
		                     type, (unsigned)size, first_size, type);
	return 0;
}

void gpufile__sized_put(void *p, void *local, size_t lib_size)
{
	uint32_t size = declared_size(p);
	uint32_t filled = size < lib_size ? size : (uint32_t)lib_size;

	/* The library's own size field says what it filled. */
	memcpy(local, &filled, sizeof(filled));
	memcpy(p, local, filled);
	if (size > lib_size)
		memset((char *)p + lib_size, 0, size - lib_size);
}
