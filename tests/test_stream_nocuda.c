/*
 * Stream-ordered requests where the CUDA driver cannot be loaded (issue 32
 * item 19): gpufile_read_async and gpufile_write_async fail with
 * GPUFILE_ENOCUDA, their message saying what the call needs (it said only
 * "cannot load libcuda.so.1"), and gpufile_stream_info answers "none: ..."
 * instead of failing with the loader's message, which named no call. Skips
 * (77) where a driver (a real one, or the fake on the library path) loads.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <dlfcn.h>
#include <errno.h>

int main(void)
{
	const char *path = test_path("nocuda.bin");
	void *cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
	unsigned char buf[4096];
	char reason[1024];
	ssize_t n = -1;
	gpufile_t *h = NULL;

	if (cuda) {
		dlclose(cuda);
		fprintf(stderr, "test_stream_nocuda: libcuda.so.1 loads; "
		                "skipped\n");
		return TEST_SKIP;
	}
	CHECK_EQ(test_make_file(path, sizeof(buf), 1), 0);
	CHECK_EQ(gpufile_open(&h, path, "r+"), 0);

	for (int is_write = 0; is_write < 2; is_write++) {
		memset(reason, 0, sizeof(reason));
		CHECK_EQ(gpufile_stream_info(h, buf, sizeof(buf), is_write,
		                             reason, sizeof(reason)),
		         0);
		CHECK(strncmp(reason, "none: ", 6) == 0);
		CHECK_CONTAINS(reason, "libcuda.so.1");
		CHECK_CONTAINS(reason, "GPUFILE_ENOCUDA");
	}
	/* Bad arguments are still refused as gpufile_read_async would. */
	CHECK_EQ(gpufile_stream_info(h, NULL, sizeof(buf), 0, reason,
	                             sizeof(reason)),
	         -EFAULT);

	CHECK_EQ(gpufile_read_async(h, buf, sizeof(buf), 0, NULL, &n),
	         GPUFILE_ENOCUDA);
	CHECK_CONTAINS(gpufile_errmsg(), "gpufile_read_async");
	CHECK_CONTAINS(gpufile_errmsg(), "nocuda.bin");
	CHECK_CONTAINS(gpufile_errmsg(),
	               "needs the CUDA driver for its stream");
	CHECK_CONTAINS(gpufile_errmsg(), "libcuda.so.1");
	CHECK_EQ(n, -1);
	CHECK_EQ(gpufile_write_async(h, buf, sizeof(buf), 0, NULL, &n),
	         GPUFILE_ENOCUDA);
	CHECK_CONTAINS(gpufile_errmsg(), "gpufile_write_async");
	CHECK_CONTAINS(gpufile_errmsg(),
	               "needs the CUDA driver for its stream");

	CHECK_EQ(gpufile_close(h), 0);
	test_cleanup();
	return test_finish("test_stream_nocuda");
}
