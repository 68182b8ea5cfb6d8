/*
 * gpufile read: a --size beyond the end of the file is reported as a
 * short read (requested and read, text and JSON, exit 0); a read larger
 * than --window goes through the window one piece at a time, reads every
 * byte, and holds no more memory than the window, so files larger than
 * host or GPU memory can be read.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static char out[1 << 16];

static void test_short(const char *file, size_t size)
{
	char want[128];

	/* JSON: requested and read, and the flag. */
	CHECK_EQ(test_cli_run(out, sizeof(out),
	                      "read %s --host --size 4m "
	                      "--json 2>/dev/null",
	                      file),
	         0);
	CHECK_CONTAINS(out, "\"requested\": 4194304");
	snprintf(want, sizeof(want), "\"bytes\": %zu", size);
	CHECK_CONTAINS(out, want);
	CHECK_CONTAINS(out, "\"short\": true");

	/* Text: one line that says so, with both numbers. */
	CHECK_EQ(
	    test_cli_run(out, sizeof(out), "read %s --host --size 4m", file),
	    0);
	snprintf(want, sizeof(want),
	         "short:    4194304 bytes requested, %zu read", size);
	CHECK_CONTAINS(out, want);

	/* From an offset, to exactly the end: not short. */
	CHECK_EQ(test_cli_run(out, sizeof(out),
	                      "read %s --host --offset 4096 --size %zu --json",
	                      file, size - 4096),
	         0);
	CHECK_CONTAINS(out, "\"short\": false");
	CHECK(!strstr(out, "short:"));

	/* The largest --size from an offset: offset + size is past any file
	 * offset, but the read stops at the end: a short read, not the
	 * runtime error it used to be. */
	CHECK_EQ(test_cli_run(out, sizeof(out),
	                      "read %s --host --offset 4096 --size "
	                      "9223372036854775807 --json",
	                      file),
	         0);
	CHECK_CONTAINS(out, "\"requested\": 9223372036854775807");
	snprintf(want, sizeof(want), "\"bytes\": %zu", size - 4096);
	CHECK_CONTAINS(out, want);
	CHECK_CONTAINS(out, "\"short\": true");

	/* At the very end nothing is left: short, 0 bytes. */
	CHECK_EQ(test_cli_run(out, sizeof(out),
	                      "read %s --host --offset %zu --size 1 --json",
	                      file, size),
	         0);
	CHECK_CONTAINS(out, "\"bytes\": 0");
	CHECK_CONTAINS(out, "\"short\": true");
}

static void test_window(const char *file, size_t size)
{
	char want[128];

	/* 64 KiB windows over size bytes: every byte read, by
	 * ceil(size / 64 KiB) requests per repeat, in both repeats. */
	CHECK_EQ(test_cli_run(out, sizeof(out),
	                      "read %s --host --window 64k --repeat 2 --json",
	                      file),
	         0);
	CHECK_CONTAINS(out, "\"window\": 65536");
	snprintf(want, sizeof(want), "\"windows\": %zu",
	         (size + 65535) / 65536);
	CHECK_CONTAINS(out, want);
	snprintf(want, sizeof(want), "\"bytes\": %zu", size);
	CHECK_CONTAINS(out, want);
	CHECK_CONTAINS(out, "\"short\": false");
	/* The host path's counter has both repeats' bytes. */
	snprintf(want, sizeof(want), "\"host\": {\n      \"ops\": %zu,",
	         2 * ((size + 65535) / 65536));
	CHECK_CONTAINS(out, want);
	snprintf(want, sizeof(want), "\"bytes\": %zu,", 2 * size);
	CHECK_CONTAINS(out, want);

	/* Text says how the read was cut. */
	CHECK_EQ(
	    test_cli_run(out, sizeof(out), "read %s --host --window 64k", file),
	    0);
	CHECK_CONTAINS(out, "window:   65536 bytes (64 KiB)");
	CHECK_CONTAINS(out, "(--window given)");

	/* A window never exceeds what there is to read. */
	CHECK_EQ(test_cli_run(out, sizeof(out), "read %s --host --json", file),
	         0);
	snprintf(want, sizeof(want), "\"window\": %zu", size);
	CHECK_CONTAINS(out, want);
	CHECK_CONTAINS(out, "\"windows\": 1");
}

/* Sizes in words: 999.5 to 1023.x of a unit in plain digits, as any
 * other ("1000 KiB", not the "1e+03 KiB" of %.3g). */
static void test_human_size(const char *file)
{
	CHECK_EQ(
	    test_cli_run(out, sizeof(out), "read %s --host --size 1000k", file),
	    0);
	CHECK_CONTAINS(out, "read:     1024000 bytes (1000 KiB)");
	CHECK_EQ(test_cli_run(out, sizeof(out), "read %s --host --size 1047552",
	                      file),
	         0);
	CHECK_CONTAINS(out, "read:     1047552 bytes (1023 KiB)");
	CHECK(!strstr(out, "e+0"));
}

/* With compat_mode=off and a CUDA driver but no cuFile, a device request
 * fails; host memory never takes that path, so gpufile read --host (and
 * write --host) report the refusal as the device buffers' reason and
 * exit 0. They read or wrote everything, then exited 1 with no report.
 * The driver is the fake one built beside the tool
 * (tests/fake_libcuda). */
static void test_compat_off_host(const char *file)
{
	const char *want = "compat_mode=off requires cuFile";
	char written[4200], *saved;

	if (test_cli_fake_driver_begin("compat_mode=off", &saved))
		return;
	setenv("GPUFILE_COMPAT_MODE", "off", 1);
	setenv("GPUFILE_CUFILE_LIBRARY", "/nonexistent/libcufile.so.0", 1);

	CHECK_EQ(test_cli_run(out, sizeof(out), "read %s --host", file), 0);
	CHECK_CONTAINS(out, "read:     ");
	CHECK_CONTAINS(out, "device buffers: ");
	CHECK_CONTAINS(out, want);
	CHECK_EQ(test_cli_run(out, sizeof(out), "read %s --host --json", file),
	         0);
	CHECK_CONTAINS(out, "\"device_path\": \"cufile\"");
	CHECK_CONTAINS(out, want);
	CHECK_EQ(test_cli_run(out, sizeof(out), "write %s.w --host --size 64k",
	                      file),
	         0);
	CHECK_CONTAINS(out, "wrote:    65536 bytes");
	CHECK_CONTAINS(out, want);
	/* Into the (fake) GPU the read itself fails, exit 1. */
	CHECK_EQ(test_cli_run(out, sizeof(out), "read %s --device 0", file), 1);
	CHECK_CONTAINS(out, want);

	test_cli_fake_driver_end(saved);
	unsetenv("GPUFILE_COMPAT_MODE");
	unsetenv("GPUFILE_CUFILE_LIBRARY");
	snprintf(written, sizeof(written), "%s.w", file);
	unlink(written);
}

/* A 1 GiB file (sparse: no disk) read through a 16 MiB window: the tool
 * reads it all while its peak resident memory stays far below the file
 * (a whole-file buffer is touched before timing, so it would be >= 1 GiB
 * resident). Runs in a child so that RUSAGE_CHILDREN sees this read
 * only. */
static void test_bounded_memory(void)
{
	const char *big = test_path("big");
	int fd = open(big, O_CREAT | O_TRUNC | O_WRONLY, 0600), status;
	pid_t pid;

	CHECK(fd >= 0 && ftruncate(fd, 1ll << 30) == 0);
	if (fd >= 0)
		close(fd);
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		struct rusage ru;
		int rc =
		    test_cli_run(out, sizeof(out),
		                 "read %s --host --window 16m --json", big);

		if (rc != 0 || !strstr(out, "\"bytes\": 1073741824") ||
		    !strstr(out, "\"windows\": 64")) {
			fprintf(stderr, "bounded: exit %d:\n%s\n", rc, out);
			_exit(1);
		}
		getrusage(RUSAGE_CHILDREN, &ru);
		fprintf(stderr, "bounded: peak RSS %ld KiB reading 1 GiB\n",
		        ru.ru_maxrss);
		_exit(ru.ru_maxrss < 512 * 1024 ? 0 : 2);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	unlink(big);
}

/* The same window into device memory of GPU 0, where there is one (the
 * GPU machine): every byte read, the window on the GPU. */
static void test_device_window(const char *file, size_t size)
{
	char want[128];

	if (gpufile_cuda_device_count() <= 0) {
		fprintf(stderr, "no usable GPU: device window part skipped\n");
		return;
	}
	CHECK_EQ(test_cli_run(out, sizeof(out),
	                      "read %s --device 0 --window 64k --size 4m "
	                      "--json 2>/dev/null",
	                      file),
	         0);
	CHECK_CONTAINS(out, "\"target\": \"device:0\"");
	CHECK_CONTAINS(out, "\"window\": 65536");
	snprintf(want, sizeof(want), "\"windows\": %zu",
	         (size + 65535) / 65536 + (size % 65536 == 0));
	CHECK_CONTAINS(out, want);
	snprintf(want, sizeof(want), "\"bytes\": %zu", size);
	CHECK_CONTAINS(out, want);
	CHECK_CONTAINS(out, "\"short\": true");
	fprintf(stderr, "device window:\n%s\n", out);
}

/* The read's host bytes copied from the file's map: as many as the same
 * read in this process copies at the same setting (which depends on the
 * CPU), in JSON and in the text, and none with host_map_copy=off. */
static void test_map_copy_bytes(const char *file, size_t size)
{
	char *buf = test_malloc(size);
	gpufile_stats_t s0, s1;
	gpufile_t *h = NULL;
	char want[160];
	uint64_t mapped;

	CHECK_EQ(gpufile_config_set("host_map_copy", "on"), 0);
	GPUFILE_INIT(s0);
	GPUFILE_INIT(s1);
	CHECK_EQ(gpufile_stats_self(&s0), 0);
	CHECK_EQ(gpufile_open(&h, file, "r"), 0);
	CHECK_EQ(gpufile_pread(h, buf, size, 0), (long long)size);
	gpufile_close(h);
	CHECK_EQ(gpufile_stats_self(&s1), 0);
	mapped = s1.map_copy_bytes - s0.map_copy_bytes;
	gpufile_config_reset();
	free(buf);
	fprintf(stderr, "host_map_copy=on here: %llu of %zu bytes mapped\n",
	        (unsigned long long)mapped, size);

	setenv("GPUFILE_HOST_MAP_COPY", "on", 1);
	CHECK_EQ(test_cli_run(out, sizeof(out), "read %s --host --json", file),
	         0);
	snprintf(want, sizeof(want), "\"map_copy_bytes\": %llu",
	         (unsigned long long)mapped);
	CHECK_CONTAINS(out, want);
	CHECK_EQ(test_cli_run(out, sizeof(out), "read %s --host", file), 0);
	if (mapped) {
		snprintf(want, sizeof(want),
		         "of those, %llu copied from the file's map "
		         "(host_map_copy), %llu read by the kernel",
		         (unsigned long long)mapped,
		         (unsigned long long)(size - mapped));
		CHECK_CONTAINS(out, want);
	} else {
		CHECK(!strstr(out, "copied from the file's map"));
	}
	setenv("GPUFILE_HOST_MAP_COPY", "off", 1);
	CHECK_EQ(test_cli_run(out, sizeof(out), "read %s --host --json", file),
	         0);
	CHECK_CONTAINS(out, "\"map_copy_bytes\": 0");
	unsetenv("GPUFILE_HOST_MAP_COPY");
}

int main(void)
{
	const char *file = test_path("f");
	size_t size = (1u << 20) + 100;

	if (!test_cli_path()) {
		fprintf(stderr, "no CLI (GPUFILE_CLI): skipped\n");
		return TEST_SKIP;
	}
	CHECK_EQ(test_make_file(file, size, 7), 0);
	test_short(file, size);
	test_window(file, size);
	test_human_size(file);
	test_compat_off_host(file);
	test_map_copy_bytes(file, size);
	test_device_window(file, size);
	test_bounded_memory();
	test_cleanup();
	return test_finish("test_cli_read");
}
