/*
 * cuFile driver controls against the fake libcufile: explicit open and
 * close (refused while files are registered), every property readable by
 * name, the five tunables set through cuFile's setters and read back, and
 * the errors: unknown and read-only names, a value cuFile refuses (named
 * with the cuFile status), a missing library.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"
#include "cufile_shim.h"
#include "fake_cufile.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#ifndef FAKE_CUFILE_PATH
#error "FAKE_CUFILE_PATH must name libfake_cufile.so"
#endif

static struct fake_cufile_counts counts(void)
{
	return fake_cufile_read(FAKE_CUFILE_PATH);
}

static uint64_t get(const char *name)
{
	uint64_t v = 12345678;
	int rc = gpufile_cufile_driver_get(name, &v);

	if (rc)
		fprintf(stderr, "get %s: %s\n", name, gpufile_errmsg());
	CHECK_EQ(rc, 0);
	return v;
}

static void test_props(void)
{
	int n = 0, writable = 0, w;
	const char *name;

	CHECK_EQ(gpufile_cufile_driver_open(), 0);
	CHECK_EQ(counts().driver_open, 1);
	CHECK_EQ(gpufile_cufile_driver_open(), 0); /* already open */
	CHECK_EQ(counts().driver_open, 1);

	while ((name = gpufile_cufile_driver_prop_name(n, &w))) {
		uint64_t v;
		CHECK_EQ(gpufile_cufile_driver_get(name, &v), 0);
		writable += w;
		n++;
	}
	CHECK_EQ(n, 15);
	CHECK_EQ(writable, 5);
	CHECK(gpufile_cufile_driver_prop_name(-1, NULL) == NULL);

	CHECK_EQ(get("poll_mode"), 0);
	CHECK_EQ(get("allow_compat_mode"), 1);
	CHECK_EQ(get("is_gds_available"), 0);
	CHECK_EQ(get("p2pdma"), 0);
	setenv("FAKE_CUFILE_NVFS", "2.26", 1);
	setenv("FAKE_CUFILE_P2P", "1", 1);
	CHECK_EQ(get("major_version"), 2);
	CHECK_EQ(get("minor_version"), 26);
	CHECK_EQ(get("is_gds_available"), 1);
	CHECK_EQ(get("p2pdma"), 1);
	unsetenv("FAKE_CUFILE_NVFS");
	unsetenv("FAKE_CUFILE_P2P");

	/* Each tunable through its setter; poll mode and threshold share one
	 * setter and must not undo each other. */
	CHECK_EQ(gpufile_cufile_driver_set("poll_mode", 1), 0);
	CHECK_EQ(get("poll_mode"), 1);
	CHECK_EQ(get("poll_thresh_size"), 4);
	CHECK_EQ(gpufile_cufile_driver_set("poll_thresh_size", 64), 0);
	CHECK_EQ(get("poll_thresh_size"), 64);
	CHECK_EQ(get("poll_mode"), 1);
	CHECK_EQ(gpufile_cufile_driver_set("max_direct_io_size", 8192), 0);
	CHECK_EQ(get("max_direct_io_size"), 8192);
	CHECK_EQ(gpufile_cufile_driver_set("max_device_cache_size", 4096), 0);
	CHECK_EQ(get("max_device_cache_size"), 4096);
	CHECK_EQ(gpufile_cufile_driver_set("max_pinned_memory_size", 65536), 0);
	CHECK_EQ(get("max_pinned_memory_size"), 65536);
	CHECK_EQ(gpufile_cufile_driver_set("poll_mode", 0), 0);
	CHECK_EQ(get("poll_mode"), 0);
	CHECK_EQ(get("poll_thresh_size"), 64);

	/* Errors. */
	CHECK_EQ(gpufile_cufile_driver_set("major_version", 3), -EPERM);
	CHECK_CONTAINS(gpufile_errmsg(), "major_version is read-only");
	CHECK_EQ(gpufile_cufile_driver_set("nope", 3), -ENOENT);
	CHECK_CONTAINS(gpufile_errmsg(), "\"nope\"");
	CHECK_EQ(gpufile_cufile_driver_get(NULL, NULL), -ENOENT);
	CHECK_EQ(gpufile_cufile_driver_get("poll_mode", NULL), -EINVAL);
	CHECK_EQ(gpufile_cufile_driver_set("poll_mode", 2), -EINVAL);
	setenv("FAKE_CUFILE_REFUSE", "cuFileDriverSetMaxPinnedMemSize", 1);
	CHECK_EQ(gpufile_cufile_driver_set("max_pinned_memory_size", 1),
	         GPUFILE_ECUFILE);
	CHECK_CONTAINS(gpufile_errmsg(), "max_pinned_memory_size=1");
	CHECK_CONTAINS(gpufile_errmsg(), "CU_FILE_DRIVER_UNSUPPORTED_LIMIT");
	CHECK_EQ(get("max_pinned_memory_size"), 65536);
	unsetenv("FAKE_CUFILE_REFUSE");
}

static void test_close(void)
{
	const char *path = test_path("reg.bin");
	CUfileHandle_t fh = NULL;
	int fd, status;

	/* A registered file keeps the driver open. */
	CHECK_EQ(test_make_file(path, 4096, 1), 0);
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	CHECK_EQ(gpufile__cufile_handle_register(NULL, fd, &fh, &status), 0);
	CHECK_EQ(gpufile_cufile_driver_close(), -EBUSY);
	CHECK_CONTAINS(gpufile_errmsg(), "1 file handle");
	CHECK_EQ(counts().driver_close, 0);
	gpufile__cufile_handle_deregister(fh);
	close(fd);

	CHECK_EQ(gpufile_cufile_driver_close(), 0);
	CHECK_EQ(counts().driver_close, 1);
	CHECK_EQ(gpufile_cufile_driver_close(), 0); /* not open: nothing */
	CHECK_EQ(counts().driver_close, 1);
	/* Reading a property opens it again. */
	CHECK_EQ(get("poll_mode"), 0);
	CHECK_EQ(counts().driver_open, 2);
}

static void test_no_library(void)
{
	uint64_t v;

	gpufile__cufile_reset();
	CHECK_EQ(
	    gpufile_config_set("cufile_library", "/nonexistent/libcufile.so.0"),
	    0);
	CHECK_EQ(gpufile_cufile_driver_open(), GPUFILE_ENOCUFILE);
	CHECK_CONTAINS(gpufile_errmsg(), "/nonexistent/libcufile.so.0");
	CHECK_EQ(gpufile_cufile_driver_get("poll_mode", &v), GPUFILE_ENOCUFILE);
	CHECK_EQ(gpufile_cufile_driver_set("poll_mode", 1), GPUFILE_ENOCUFILE);
	CHECK_EQ(gpufile_cufile_driver_close(), 0);
}

int main(void)
{
	gpufile__cufile_reset();
	CHECK_EQ(gpufile_config_set("cufile_library", FAKE_CUFILE_PATH), 0);
	test_props();
	test_close();
	test_no_library();
	gpufile__cufile_reset();
	gpufile_config_reset();
	test_cleanup();
	return test_finish("test_cufile_driver");
}
