/*
 * gpufile_memcpy's arguments: a NULL pointer with bytes to copy is -EINVAL
 * naming it (it was a SIGSEGV), and 0 bytes is a no-op returning 0 whatever
 * the pointers (memmove of 0 bytes from NULL is undefined behaviour, which
 * the UBSan build reports). Without a CUDA driver (plain memmove) and with
 * the fake one (fake_cuda.h: the pointers are classified first).
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"

#include <errno.h>
#include <string.h>

#define DEV_SIZE (1u << 20)
#include "fake_cuda.h"

static void check_args(const char *driver, char *dev)
{
	char a[16], b[16];

	fprintf(stderr, "  %s\n", driver);
	test_fill(a, sizeof(a), 3, 0);
	memset(b, 0, sizeof(b));
	CHECK_EQ(gpufile_memcpy(NULL, a, 8), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "gpufile_memcpy: dst is NULL");
	CHECK_EQ(gpufile_memcpy(b, NULL, 8), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "gpufile_memcpy: src is NULL");
	CHECK_EQ(gpufile_memcpy(NULL, NULL, 8), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "dst and src are NULL");
	/* Nothing was written. */
	CHECK_EQ(test_mismatch_byte(b, sizeof(b), 0), -1);
	/* 0 bytes: nothing to do, whatever the pointers. */
	CHECK_EQ(gpufile_memcpy(NULL, NULL, 0), 0);
	CHECK_EQ(gpufile_memcpy(NULL, a, 0), 0);
	CHECK_EQ(gpufile_memcpy(b, NULL, 0), 0);
	CHECK_EQ(gpufile_memcpy(b, a, 0), 0);
	CHECK_EQ(test_mismatch_byte(b, sizeof(b), 0), -1);
	/* And a copy still copies. */
	CHECK_EQ(gpufile_memcpy(b, a, sizeof(a)), 0);
	CHECK_EQ(test_mismatch(b, sizeof(b), 3, 0), -1);
	if (dev) {
		memset(b, 0, sizeof(b));
		CHECK_EQ(gpufile_memcpy(dev, a, sizeof(a)), 0);
		CHECK_EQ(gpufile_memcpy(b, dev, sizeof(b)), 0);
		CHECK_EQ(test_mismatch(b, sizeof(b), 3, 0), -1);
		CHECK_EQ(gpufile_memcpy(dev, NULL, 8), -EINVAL);
		CHECK_CONTAINS(gpufile_errmsg(), "src is NULL");
		CHECK_EQ(gpufile_memcpy(NULL, dev, 8), -EINVAL);
		CHECK_CONTAINS(gpufile_errmsg(), "dst is NULL");
		CHECK_EQ(gpufile_memcpy(dev, NULL, 0), 0);
	}
}

int main(void)
{
	/* No driver is loaded by this program (a machine with a GPU may
	 * still have one: its table is what gpufile_memcpy uses then). */
	check_args("without the fake driver", NULL);
	if (fake_install())
		return 1;
	check_args("with the fake driver", (char *)dev_base);
	fake_uninstall();
	return test_finish("test_memcpy");
}
