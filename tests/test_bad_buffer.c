/*
 * Caller errors return an error, never crash (issue 10 item 9):
 *   - a read into PROT_READ memory and a write from PROT_NONE memory, with
 *     O_DIRECT and a buffer misaligned against the file offset (so the
 *     bytes pass through the aligned scratch buffer), return -EFAULT; they
 *     used to die of SIGSEGV in the scratch memcpy. Aligned and buffered
 *     requests were already -EFAULT and are checked too.
 *   - the same requests on good misaligned buffers still move every byte.
 *   - NULL out-pointers of gpufile_mem_kind and gpufile_device_alloc give
 *     -EINVAL with a message naming the argument.
 * Each bad request runs in a child process, so a crash is reported as a
 * failure of that case instead of ending the test.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"

#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define FILE_LEN (1u << 20)
#define SEED     31
#define SPAN     (256u << 10)

static const char *path;

/* One request on a fresh handle in a child: exits 0 when it returned
 * want, 1 otherwise; a signal shows as a crash. */
static void bad_case(const char *name, const char *direct_io, int is_write,
                     int prot, size_t mis, int64_t off, int want)
{
	pid_t pid;
	int status = 0;

	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		unsigned char *m =
		    mmap(NULL, SPAN + 8192, PROT_READ | PROT_WRITE,
		         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		gpufile_t *h = NULL;
		ssize_t n;

		if (m == MAP_FAILED || mprotect(m, SPAN + 8192, prot) ||
		    gpufile_config_set("direct_io", direct_io) ||
		    gpufile_open(&h, path, is_write ? "r+" : "r"))
			_exit(2);
		n = is_write ? gpufile_pwrite(h, m + mis, SPAN, off)
		             : gpufile_pread(h, m + mis, SPAN, off);
		if (n != want) {
			fprintf(stderr, "%s: returned %zd (%s), wanted %d\n",
			        name, n, n < 0 ? gpufile_errmsg() : "", want);
			_exit(1);
		}
		gpufile_close(h);
		_exit(0);
	}
	CHECK(pid > 0);
	if (pid <= 0)
		return;
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	if (WIFSIGNALED(status)) {
		fprintf(stderr, "%s: killed by signal %d\n", name,
		        WTERMSIG(status));
		test_failures++;
	} else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "%s: failed (exit %d)\n", name,
		        WEXITSTATUS(status));
		test_failures++;
	}
}

/* Good misaligned buffers through the scratch path: every byte. */
static void good_cases(void)
{
	unsigned char *m = test_malloc(SPAN + 8192);
	gpufile_t *h = NULL;

	CHECK_EQ(gpufile_config_set("direct_io", "on"), 0);
	CHECK_EQ(gpufile_open(&h, path, "r+"), 0);
	if (!h) {
		free(m);
		return;
	}
	for (size_t mis = 1; mis < 4096; mis += 1365) {
		memset(m, 0, SPAN + 8192);
		CHECK_EQ(gpufile_pread(h, m + mis, SPAN, 4096), SPAN);
		CHECK_EQ(test_mismatch(m + mis, SPAN, SEED, 4096), -1);
		CHECK_EQ(gpufile_pwrite(h, m + mis, SPAN, 8192 + 4096), SPAN);
		memset(m, 0, SPAN + 8192);
		CHECK_EQ(gpufile_pread(h, m, SPAN, 8192 + 4096), SPAN);
		CHECK_EQ(test_mismatch(m, SPAN, SEED, 4096), -1);
		/* Put the file back for the next round. */
		test_fill(m, SPAN, SEED, 8192 + 4096);
		CHECK_EQ(gpufile_pwrite(h, m, SPAN, 8192 + 4096), SPAN);
	}
	CHECK_EQ(gpufile_close(h), 0);
	gpufile_config_reset();
	free(m);
}

static void null_out_pointers(void)
{
	int device = 7;
	char x = 0;

	CHECK_EQ(gpufile_mem_kind(&x, NULL, &device), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "gpufile_mem_kind");
	CHECK_CONTAINS(gpufile_errmsg(), "kind");
	CHECK_EQ(device, 7);
	{
		gpufile_mem_t kind = GPUFILE_MEM_DEVICE;
		CHECK_EQ(gpufile_mem_kind(&x, &kind, NULL), 0);
		CHECK_EQ(kind, GPUFILE_MEM_HOST);
	}
	CHECK_EQ(gpufile_device_alloc(0, 4096, NULL), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "gpufile_device_alloc");
	CHECK_CONTAINS(gpufile_errmsg(), "out");
}

int main(void)
{
	path = test_path("bad-buffer.bin");
	if (test_make_file(path, FILE_LEN, SEED))
		return 1;

	/* Reads into read-only memory. */
	bad_case("read, O_DIRECT, misaligned, PROT_READ", "on", 0, PROT_READ, 1,
	         4096, -EFAULT);
	bad_case("read, O_DIRECT, misaligned offset, PROT_READ", "on", 0,
	         PROT_READ, 0, 100, -EFAULT);
	bad_case("read, O_DIRECT, aligned, PROT_READ", "on", 0, PROT_READ, 0,
	         4096, -EFAULT);
	bad_case("read, buffered, misaligned, PROT_READ", "off", 0, PROT_READ,
	         1, 4096, -EFAULT);
	bad_case("read, O_DIRECT, misaligned, PROT_NONE", "on", 0, PROT_NONE, 3,
	         4096, -EFAULT);
	/* Writes from inaccessible memory. */
	bad_case("write, O_DIRECT, misaligned, PROT_NONE", "on", 1, PROT_NONE,
	         1, 4096, -EFAULT);
	bad_case("write, O_DIRECT, aligned, PROT_NONE", "on", 1, PROT_NONE, 0,
	         4096, -EFAULT);
	bad_case("write, buffered, misaligned, PROT_NONE", "off", 1, PROT_NONE,
	         1, 4096, -EFAULT);
	/* Writes from read-only memory are fine. */
	bad_case("write, O_DIRECT, misaligned, PROT_READ", "on", 1, PROT_READ,
	         1, 4096, SPAN);

	/* The last case wrote zeros: the file's pattern again. */
	CHECK_EQ(test_make_file(path, FILE_LEN, SEED), 0);
	good_cases();
	null_out_pointers();
	return test_finish("test_bad_buffer");
}
