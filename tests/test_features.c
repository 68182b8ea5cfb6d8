/*
 * gpufile_version() and gpufile_features(): the version is the header's,
 * and every feature word says what is true at run time, checked against
 * the thing itself (an io_uring this process sets up, a cufile.json the
 * library parses, a CUDA driver or cuFile library that loads).
 */
#include "testlib.h"
#include "internal.h"
#include "cuda_shim.h"
#include "fake_cuda.h"

#include <dlfcn.h>
#include <errno.h>
#include <unistd.h>

#ifdef GPUFILE_HAVE_LIBURING
#include <liburing.h>
#endif

static int has_word(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = list; (p = strstr(p, word)); p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n]))
			return 1;
	return 0;
}

static void test_version(void)
{
	char want[32];

	snprintf(want, sizeof(want), "%d.%d.%d", GPUFILE_VERSION_MAJOR,
	         GPUFILE_VERSION_MINOR, GPUFILE_VERSION_PATCH);
	CHECK(strcmp(gpufile_version(), want) == 0);
	CHECK(strcmp(GPUFILE_VERSION_STRING, want) == 0);
	CHECK_EQ(GPUFILE_VERSION_NUMBER, GPUFILE_VERSION_MAJOR * 10000 +
	                                     GPUFILE_VERSION_MINOR * 100 +
	                                     GPUFILE_VERSION_PATCH);
}

/* Only known words, each once, in the documented order. */
static void test_words_known(const char *f)
{
	static const char *const order[] = {
	    "liburing", "cjson", "stats", "cuda", "cufile", "remote", "sigv4"};
	const char *p = f;
	size_t next = 0;

	while (*p) {
		size_t len = strcspn(p, " "), i;

		for (i = next; i < 7; i++)
			if (strlen(order[i]) == len &&
			    !strncmp(p, order[i], len))
				break;
		if (i == 7) {
			fprintf(stderr,
			        "unknown, repeated or misplaced word in "
			        "\"%s\" at \"%s\"\n",
			        f, p);
			test_failures++;
			return;
		}
		next = i + 1;
		p += len;
		p += *p == ' ';
	}
}

/* "cjson" exactly when the library parses cufile.json. */
static void test_cjson(void)
{
	char path[] = "/tmp/gpufile_features_XXXXXX";
	gpufile_cufile_config_t cfg;
	int fd = mkstemp(path), rc;

	CHECK(fd >= 0);
	CHECK_EQ(write(fd, "{}\n", 3), 3);
	close(fd);
	GPUFILE_INIT(cfg);
	rc = gpufile_cufile_config_load(path, &cfg);
	unlink(path);
	CHECK(rc == 0 || rc == -ENOTSUP);
	CHECK_EQ(has_word(gpufile_features(), "cjson"), rc == 0);
}

/* "liburing" exactly when this process can set up an io_uring. */
static void test_liburing(void)
{
	int usable = 0;
#ifdef GPUFILE_HAVE_LIBURING
	struct io_uring ring;

	if (io_uring_queue_init(2, &ring, 0) == 0) {
		io_uring_queue_exit(&ring);
		usable = 1;
	}
#endif
	CHECK_EQ(has_word(gpufile_features(), "liburing"), usable);
}

/* "cuda": the driver loads. A driver table in place (the fake) counts as
 * loaded; without it, the answer is dlopen's. */
static void test_cuda(void)
{
	void *lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);

	CHECK_EQ(has_word(gpufile_features(), "cuda"), lib != NULL);
	dev_base = calloc(1, DEV_SIZE);
	gpufile__cuda_override(&fake);
	CHECK(has_word(gpufile_features(), "cuda"));
	gpufile__cuda_override(NULL);
	free(dev_base);
}

/* "cufile" follows the cufile_library setting: present for a library that
 * loads, absent for one that does not. */
static void test_cufile(void)
{
#ifdef FAKE_CUFILE_PATH
	CHECK_EQ(gpufile_config_set("cufile_library", FAKE_CUFILE_PATH), 0);
	CHECK(has_word(gpufile_features(), "cufile"));
#endif
	CHECK_EQ(
	    gpufile_config_set("cufile_library", "/nonexistent/libcufile.so.0"),
	    0);
	CHECK(!has_word(gpufile_features(), "cufile"));
	gpufile_config_reset();
}

int main(void)
{
	const char *f;

	test_version();
	f = gpufile_features();
	printf("features: %s\n", f);
	CHECK(f != NULL);
	test_words_known(f);
	CHECK(has_word(f, "stats"));
	test_cjson();
	test_liburing();
	test_cuda();
	test_cufile();
	return test_failures ? 1 : 0;
}
