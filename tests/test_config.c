/*
 * Settings: defaults, GPUFILE_* and KVIKIO_* variables, where each value
 * came from, the spellings sizes and modes accept, bad values (an error
 * naming the variable and the value, never a silent default), setters,
 * and the parsers themselves.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <unistd.h>

static void var_name(char *out, size_t len, const char *prefix,
                     const char *name)
{
	size_t n = (size_t)snprintf(out, len, "%s%s", prefix, name);

	for (size_t i = 0; i < n && i < len; i++)
		out[i] = (char)toupper((unsigned char)out[i]);
}

/* Unsets GPUFILE_<NAME> and KVIKIO_<NAME> of every setting and rereads. */
static void clear_env(void)
{
	for (int i = 0; i < gpufile_config_count(); i++) {
		char var[96];

		var_name(var, sizeof(var), "GPUFILE_", gpufile_config_name(i));
		unsetenv(var);
		var_name(var, sizeof(var), "KVIKIO_", gpufile_config_name(i));
		unsetenv(var);
	}
	gpufile_config_reset();
}

/* The value of setting name as gpufile_config_get() formats it. */
static const char *get(const char *name, gpufile_source_t *source,
                       char *variable, size_t variable_len)
{
	static char value[128];
	int rc;

	value[0] = '\0';
	rc = gpufile_config_get(name, value, sizeof(value), source, variable,
	                        variable_len);
	CHECK_EQ(rc, 0);
	if (rc)
		fprintf(stderr, "  config_get(%s): %s\n", name,
		        gpufile_errmsg());
	return value;
}

static void test_defaults(void)
{
	static const struct {
		const char *name, *value;
	} defaults[] = {
	    {"compat_mode", "auto"},    {"task_size", "4194304"},
	    {"gds_threshold", "16384"}, {"bounce_buffer_size", "4194304"},
	    {"bounce_buffers", "2"},    {"direct_io", "auto"},
	    {"max_inflight", "4096"},
	};
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned nthreads_want = ncpu < 4 ? 4 : ncpu > 16 ? 16 : (unsigned)ncpu;
	gpufile_compat_mode_t mode;
	gpufile_source_t src;
	char variable[64];
	size_t sz;
	unsigned u;
	char want[32];

	clear_env();
	CHECK_EQ(gpufile_config_check(), 0);
	/* The core settings are all listed (others may follow). */
	CHECK(gpufile_config_count() >= 8);
	for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++) {
		int found = 0;
		for (int k = 0; k < gpufile_config_count(); k++)
			found |= strcmp(gpufile_config_name(k),
			                defaults[i].name) == 0;
		if (!found) {
			fprintf(stderr, "setting %s not listed\n",
			        defaults[i].name);
			test_failures++;
		}
	}
	for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++) {
		src = (gpufile_source_t)-1;
		strcpy(variable, "junk");
		const char *v =
		    get(defaults[i].name, &src, variable, sizeof(variable));
		if (strcmp(v, defaults[i].value) != 0) {
			fprintf(stderr, "default of %s: \"%s\", want \"%s\"\n",
			        defaults[i].name, v, defaults[i].value);
			test_failures++;
		}
		CHECK_EQ(src, GPUFILE_SOURCE_DEFAULT);
		CHECK_EQ(variable[0], '\0');
	}
	snprintf(want, sizeof(want), "%u", nthreads_want);
	CHECK(strcmp(get("nthreads", &src, NULL, 0), want) == 0);
	CHECK_EQ(src, GPUFILE_SOURCE_DEFAULT);

	/* Every setting has a name, a help line and a readable value. */
	for (int i = 0; i < gpufile_config_count(); i++) {
		CHECK(gpufile_config_name(i) != NULL);
		CHECK(gpufile_config_help(i) != NULL &&
		      gpufile_config_help(i)[0] != '\0');
		CHECK(get(gpufile_config_name(i), NULL, NULL, 0)[0] != '\0');
	}
	CHECK(gpufile_config_name(-1) == NULL);
	CHECK(gpufile_config_name(gpufile_config_count()) == NULL);
	CHECK(gpufile_config_help(gpufile_config_count()) == NULL);

	/* Typed getters agree. */
	CHECK_EQ(gpufile_get_compat_mode(&mode), 0);
	CHECK_EQ(mode, GPUFILE_COMPAT_AUTO);
	CHECK_EQ(gpufile_get_task_size(&sz), 0);
	CHECK_EQ(sz, 4u << 20);
	CHECK_EQ(gpufile_get_gds_threshold(&sz), 0);
	CHECK_EQ(sz, 16u << 10);
	CHECK_EQ(gpufile_get_nthreads(&u), 0);
	CHECK_EQ(u, nthreads_want);
	CHECK_EQ(gpufile_get_bounce_buffer_size(&sz), 0);
	CHECK_EQ(sz, 4u << 20);
	CHECK_EQ(gpufile_pinned_bytes_max(),
	         3 * (size_t)nthreads_want * 2 * ((4u << 20) + 4096));

	/* Source names are distinct words. */
	CHECK(strcmp(gpufile_source_name(GPUFILE_SOURCE_DEFAULT), "default") ==
	      0);
	CHECK(strcmp(gpufile_source_name(GPUFILE_SOURCE_SETTER), "setter") ==
	      0);
	CHECK(strcmp(gpufile_source_name(GPUFILE_SOURCE_ENV),
	             gpufile_source_name(GPUFILE_SOURCE_KVIKIO_ENV)) != 0);
	CHECK(strcmp(gpufile_source_name(GPUFILE_SOURCE_ENV), "?") != 0);
	CHECK(strcmp(gpufile_source_name(GPUFILE_SOURCE_KVIKIO_ENV), "?") != 0);
}

/* Sets variable=text, rereads, and checks that setting name reads back
 * as want from source. */
static void expect_env(const char *variable, const char *text, const char *name,
                       const char *want, gpufile_source_t want_source)
{
	gpufile_source_t src = (gpufile_source_t)-1;
	char var[64];
	const char *v;

	clear_env();
	setenv(variable, text, 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), 0);
	v = get(name, &src, var, sizeof(var));
	if (strcmp(v, want) != 0) {
		fprintf(stderr, "%s=\"%s\": %s reads \"%s\", want \"%s\"\n",
		        variable, text, name, v, want);
		test_failures++;
	}
	CHECK_EQ(src, want_source);
	if (strcmp(var, variable) != 0) {
		fprintf(stderr, "%s=\"%s\": variable reported as \"%s\"\n",
		        variable, text, var);
		test_failures++;
	}
	unsetenv(variable);
}

static void test_environment(void)
{
	static const struct {
		const char *text, *want;
	} sizes[] = {
	    {"4096", "4096"},
	    {"4k", "4096"},
	    {"4K", "4096"},
	    {"4KiB", "4096"},
	    {"4kb", "4096"},
	    {"4 MiB", "4194304"},
	    {" 4 MiB ", "4194304"},
	    {"4m", "4194304"},
	    {"1g", "1073741824"},
	    {"1GiB", "1073741824"},
	    {"2GB", "2147483648"},
	    {"1t", "1099511627776"},
	    {"7", "7"},
	};
	static const struct {
		const char *text, *want;
	} modes[] = {
	    {"on", "on"},   {"ON", "on"},     {"On", "on"},     {"off", "off"},
	    {"OFF", "off"}, {"auto", "auto"}, {"AUTO", "auto"}, {"true", "on"},
	    {"TRUE", "on"}, {"false", "off"}, {"False", "off"}, {"yes", "on"},
	    {"YES", "on"},  {"no", "off"},    {"No", "off"},    {"1", "on"},
	    {"0", "off"},   {" on ", "on"},
	};
	gpufile_source_t src;
	char var[64];

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		expect_env("GPUFILE_TASK_SIZE", sizes[i].text, "task_size",
		           sizes[i].want, GPUFILE_SOURCE_ENV);
		expect_env("KVIKIO_TASK_SIZE", sizes[i].text, "task_size",
		           sizes[i].want, GPUFILE_SOURCE_KVIKIO_ENV);
	}
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		expect_env("GPUFILE_COMPAT_MODE", modes[i].text, "compat_mode",
		           modes[i].want, GPUFILE_SOURCE_ENV);
		expect_env("GPUFILE_DIRECT_IO", modes[i].text, "direct_io",
		           modes[i].want, GPUFILE_SOURCE_ENV);
		expect_env("KVIKIO_COMPAT_MODE", modes[i].text, "compat_mode",
		           modes[i].want, GPUFILE_SOURCE_KVIKIO_ENV);
	}
	/* Every setting reads its GPUFILE_ and KVIKIO_ variables. */
	expect_env("GPUFILE_GDS_THRESHOLD", "1 MiB", "gds_threshold", "1048576",
	           GPUFILE_SOURCE_ENV);
	expect_env("KVIKIO_GDS_THRESHOLD", "0", "gds_threshold", "0",
	           GPUFILE_SOURCE_KVIKIO_ENV);
	expect_env("GPUFILE_NTHREADS", "3", "nthreads", "3",
	           GPUFILE_SOURCE_ENV);
	expect_env("KVIKIO_NTHREADS", "5", "nthreads", "5",
	           GPUFILE_SOURCE_KVIKIO_ENV);
	expect_env("GPUFILE_BOUNCE_BUFFER_SIZE", "64KiB", "bounce_buffer_size",
	           "65536", GPUFILE_SOURCE_ENV);
	expect_env("KVIKIO_BOUNCE_BUFFER_SIZE", "8m", "bounce_buffer_size",
	           "8388608", GPUFILE_SOURCE_KVIKIO_ENV);
	expect_env("GPUFILE_BOUNCE_BUFFERS", "4", "bounce_buffers", "4",
	           GPUFILE_SOURCE_ENV);
	expect_env("GPUFILE_MAX_INFLIGHT", "12", "max_inflight", "12",
	           GPUFILE_SOURCE_ENV);

	/* Typed getters see the environment too. */
	clear_env();
	setenv("GPUFILE_NTHREADS", "6", 1);
	setenv("GPUFILE_COMPAT_MODE", "on", 1);
	gpufile_config_reset();
	{
		unsigned u = 0;
		gpufile_compat_mode_t m = GPUFILE_COMPAT_AUTO;
		CHECK_EQ(gpufile_get_nthreads(&u), 0);
		CHECK_EQ(u, 6);
		CHECK_EQ(gpufile_get_compat_mode(&m), 0);
		CHECK_EQ(m, GPUFILE_COMPAT_ON);
	}

	/* GPUFILE_ wins over KVIKIO_. */
	clear_env();
	setenv("KVIKIO_TASK_SIZE", "8k", 1);
	setenv("GPUFILE_TASK_SIZE", "16k", 1);
	gpufile_config_reset();
	CHECK(strcmp(get("task_size", &src, var, sizeof(var)), "16384") == 0);
	CHECK_EQ(src, GPUFILE_SOURCE_ENV);
	CHECK(strcmp(var, "GPUFILE_TASK_SIZE") == 0);
	/* ... even when the KVIKIO_ value is bad. */
	setenv("KVIKIO_TASK_SIZE", "banana", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), 0);
	CHECK(strcmp(get("task_size", &src, var, sizeof(var)), "16384") == 0);

	/* A setter wins over both, and config_reset forgets it. */
	setenv("KVIKIO_TASK_SIZE", "8k", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_set("task_size", "32k"), 0);
	CHECK(strcmp(get("task_size", &src, var, sizeof(var)), "32768") == 0);
	CHECK_EQ(src, GPUFILE_SOURCE_SETTER);
	CHECK_EQ(var[0], '\0');
	gpufile_config_reset();
	CHECK(strcmp(get("task_size", &src, var, sizeof(var)), "16384") == 0);
	CHECK_EQ(src, GPUFILE_SOURCE_ENV);
	unsetenv("GPUFILE_TASK_SIZE");
	gpufile_config_reset();
	CHECK(strcmp(get("task_size", &src, var, sizeof(var)), "8192") == 0);
	CHECK_EQ(src, GPUFILE_SOURCE_KVIKIO_ENV);
	CHECK(strcmp(var, "KVIKIO_TASK_SIZE") == 0);
	clear_env();
}

/* variable=text must make every call that needs settings fail with
 * GPUFILE_ECONFIG and a message naming variable and text. */
static void expect_bad(const char *variable, const char *text, const char *name,
                       const char *good)
{
	char value[64];
	gpufile_t *h = NULL;
	const char *path = test_path("config-file");
	size_t sz;
	int rc;

	clear_env();
	setenv(variable, text, 1);
	gpufile_config_reset();

#define EXPECT_MSG(what)                                                       \
	do {                                                                   \
		if (!strstr(gpufile_errmsg(), variable) ||                     \
		    !strstr(gpufile_errmsg(), text)) {                         \
			fprintf(stderr,                                        \
			        "%s=\"%s\": %s message \"%s\" lacks the "      \
			        "variable or the value\n",                     \
			        variable, text, what, gpufile_errmsg());       \
			test_failures++;                                       \
		}                                                              \
	} while (0)

	rc = gpufile_config_check();
	CHECK_EQ(rc, GPUFILE_ECONFIG);
	EXPECT_MSG("config_check");

	rc = gpufile_open(&h, path, "r");
	CHECK_EQ(rc, GPUFILE_ECONFIG);
	CHECK(h == NULL);
	EXPECT_MSG("open");
	gpufile_close(h);

	rc = gpufile_config_get(name, value, sizeof(value), NULL, NULL, 0);
	CHECK_EQ(rc, GPUFILE_ECONFIG);
	EXPECT_MSG("config_get");

	if (strcmp(name, "task_size") == 0) {
		CHECK_EQ(gpufile_get_task_size(&sz), GPUFILE_ECONFIG);
		EXPECT_MSG("get_task_size");
	}
	CHECK_EQ(gpufile_pinned_bytes_max(), 0);

	/* A bad setter value changes nothing: still bad. */
	rc = gpufile_config_set(name, "nonsense");
	CHECK_EQ(rc, GPUFILE_ECONFIG);
	CHECK_EQ(gpufile_config_check(), GPUFILE_ECONFIG);

	/* A good setter value fixes it. */
	rc = gpufile_config_set(name, good);
	CHECK_EQ(rc, 0);
	CHECK_EQ(gpufile_config_check(), 0);
	CHECK(strcmp(get(name, NULL, NULL, 0), good) == 0);
	rc = gpufile_open(&h, path, "r");
	CHECK_EQ(rc, 0);
	gpufile_close(h);

	/* So does the typed setter, after a reset brings the bad value back. */
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), GPUFILE_ECONFIG);
	if (strcmp(name, "task_size") == 0) {
		CHECK_EQ(gpufile_set_task_size(65536), 0);
		CHECK_EQ(gpufile_config_check(), 0);
		CHECK_EQ(gpufile_get_task_size(&sz), 0);
		CHECK_EQ(sz, 65536);
	}
	unsetenv(variable);
	gpufile_config_reset();
#undef EXPECT_MSG
}

static void test_bad_values(void)
{
	static const char *const bad_sizes[] = {
	    "banana", "0",    "-5",   "99999999999999999999",
	    "",       "4 XB", "4.5k", "0x10",
	    "4 k b",  "k",    "4kk",  "18014398509481984k",
	};

	CHECK_EQ(test_make_file(test_path("config-file"), 10, 1), 0);
	for (size_t i = 0; i < sizeof(bad_sizes) / sizeof(bad_sizes[0]); i++) {
		expect_bad("GPUFILE_TASK_SIZE", bad_sizes[i], "task_size",
		           "4096");
	}
	expect_bad("KVIKIO_TASK_SIZE", "banana", "task_size", "4096");
	expect_bad("GPUFILE_NTHREADS", "many", "nthreads", "2");
	expect_bad("GPUFILE_NTHREADS", "0", "nthreads", "2");
	expect_bad("GPUFILE_NTHREADS", "100000", "nthreads", "2");
	expect_bad("KVIKIO_NTHREADS", "-1", "nthreads", "2");
	expect_bad("GPUFILE_GDS_THRESHOLD", "16 KiBi", "gds_threshold", "4096");
	expect_bad("GPUFILE_BOUNCE_BUFFER_SIZE", "0", "bounce_buffer_size",
	           "65536");
	expect_bad("GPUFILE_BOUNCE_BUFFERS", "1", "bounce_buffers", "3");
	expect_bad("GPUFILE_MAX_INFLIGHT", "0", "max_inflight", "4");

	/* Modes: the good setter value is a mode, not "4096". */
	{
		static const char *const bad_modes[] = {"maybe", "", "2", "onn",
		                                        "disabled"};
		for (size_t i = 0; i < sizeof(bad_modes) / sizeof(bad_modes[0]);
		     i++) {
			clear_env();
			setenv("GPUFILE_DIRECT_IO", bad_modes[i], 1);
			gpufile_config_reset();
			CHECK_EQ(gpufile_config_check(), GPUFILE_ECONFIG);
			CHECK_CONTAINS(gpufile_errmsg(), "GPUFILE_DIRECT_IO");
			CHECK_CONTAINS(gpufile_errmsg(), bad_modes[i]);
			CHECK_EQ(gpufile_config_get("direct_io", NULL, 0, NULL,
			                            NULL, 0),
			         GPUFILE_ECONFIG);
			CHECK_EQ(gpufile_config_set("direct_io", "off"), 0);
			CHECK_EQ(gpufile_config_check(), 0);
			CHECK(strcmp(get("direct_io", NULL, NULL, 0), "off") ==
			      0);
		}
		unsetenv("GPUFILE_DIRECT_IO");
	}
	clear_env();
}

static void test_setters(void)
{
	gpufile_source_t src;
	char var[64];
	size_t sz;
	unsigned u;
	gpufile_compat_mode_t m;

	clear_env();
	/* Unknown names. */
	CHECK_EQ(gpufile_config_set("no_such_setting", "1"), -ENOENT);
	CHECK_CONTAINS(gpufile_errmsg(), "no_such_setting");
	CHECK_EQ(gpufile_config_get("no_such_setting", NULL, 0, NULL, NULL, 0),
	         -ENOENT);
	CHECK_EQ(gpufile_config_get(NULL, NULL, 0, NULL, NULL, 0), -ENOENT);
	CHECK_EQ(gpufile_config_set(NULL, "1"), -ENOENT);
	CHECK_EQ(gpufile_config_set("task_size", NULL), GPUFILE_ECONFIG);

	/* A bad setter value leaves the old value. */
	CHECK_EQ(gpufile_config_set("task_size", "64k"), 0);
	CHECK_EQ(gpufile_config_set("task_size", "banana"), GPUFILE_ECONFIG);
	CHECK_CONTAINS(gpufile_errmsg(), "task_size");
	CHECK_CONTAINS(gpufile_errmsg(), "banana");
	CHECK_EQ(gpufile_config_set("task_size", "0"), GPUFILE_ECONFIG);
	CHECK_EQ(gpufile_config_set("task_size", "99999999999999999999"),
	         GPUFILE_ECONFIG);
	CHECK_EQ(gpufile_config_set("task_size", ""), GPUFILE_ECONFIG);
	CHECK(strcmp(get("task_size", &src, var, sizeof(var)), "65536") == 0);
	CHECK_EQ(src, GPUFILE_SOURCE_SETTER);
	CHECK_EQ(var[0], '\0');
	CHECK_EQ(gpufile_set_task_size(0), GPUFILE_ECONFIG);
	CHECK_EQ(gpufile_get_task_size(&sz), 0);
	CHECK_EQ(sz, 65536);

	CHECK_EQ(gpufile_set_nthreads(0), GPUFILE_ECONFIG);
	CHECK_EQ(gpufile_set_nthreads(3), 0);
	CHECK_EQ(gpufile_get_nthreads(&u), 0);
	CHECK_EQ(u, 3);
	CHECK(strcmp(get("nthreads", &src, NULL, 0), "3") == 0);
	CHECK_EQ(src, GPUFILE_SOURCE_SETTER);

	CHECK_EQ(gpufile_set_compat_mode((gpufile_compat_mode_t)7),
	         GPUFILE_ECONFIG);
	CHECK_EQ(gpufile_set_compat_mode(GPUFILE_COMPAT_OFF), 0);
	CHECK_EQ(gpufile_get_compat_mode(&m), 0);
	CHECK_EQ(m, GPUFILE_COMPAT_OFF);
	CHECK(strcmp(get("compat_mode", NULL, NULL, 0), "off") == 0);
	CHECK_EQ(gpufile_config_set("compat_mode", "Yes"), 0);
	CHECK(strcmp(get("compat_mode", NULL, NULL, 0), "on") == 0);
	CHECK_EQ(gpufile_config_set("compat_mode", "sometimes"),
	         GPUFILE_ECONFIG);
	CHECK(strcmp(get("compat_mode", NULL, NULL, 0), "on") == 0);

	CHECK_EQ(gpufile_set_gds_threshold(0), 0);
	CHECK_EQ(gpufile_get_gds_threshold(&sz), 0);
	CHECK_EQ(sz, 0);

	CHECK_EQ(gpufile_set_bounce_buffer_size(0), GPUFILE_ECONFIG);
	CHECK_EQ(gpufile_set_bounce_buffer_size(1u << 20), 0);
	CHECK_EQ(gpufile_get_bounce_buffer_size(&sz), 0);
	CHECK_EQ(sz, 1u << 20);
	CHECK_EQ(gpufile_config_set("bounce_buffers", "3"), 0);
	CHECK_EQ(gpufile_pinned_bytes_max(), 3 * 3u * 3 * ((1u << 20) + 4096));

	/* Setting names are matched without regard to case. */
	CHECK_EQ(gpufile_config_set("TASK_SIZE", "8k"), 0);
	CHECK(strcmp(get("task_size", NULL, NULL, 0), "8192") == 0);

	/* A short value buffer is NUL-terminated. */
	{
		char small[4];
		memset(small, 'x', sizeof(small));
		CHECK_EQ(gpufile_config_get("task_size", small, sizeof(small),
		                            NULL, NULL, 0),
		         0);
		CHECK(memchr(small, '\0', sizeof(small)) != NULL);
	}

	/* reset forgets every setter. */
	gpufile_config_reset();
	CHECK(strcmp(get("task_size", &src, NULL, 0), "4194304") == 0);
	CHECK_EQ(src, GPUFILE_SOURCE_DEFAULT);
	CHECK(strcmp(get("compat_mode", &src, NULL, 0), "auto") == 0);
}

static void test_parsers(void)
{
	static const struct {
		const char *text;
		int rc;
		uint64_t value;
	} sizes[] = {
	    {"0", 0, 0},
	    {"4096", 0, 4096},
	    {"4k", 0, 4096},
	    {"4KiB", 0, 4096},
	    {"4 MiB", 0, 4u << 20},
	    {"1g", 0, 1u << 30},
	    {"2GB", 0, 2ull << 30},
	    {"3b", 0, 3},
	    {"1TiB", 0, 1ull << 40},
	    {"  12  ", 0, 12},
	    {"18446744073709551615", 0, UINT64_MAX},
	    {"18446744073709551616", -ERANGE, 0},
	    {"99999999999999999999", -ERANGE, 0},
	    {"17179869183g", 0, 17179869183ull << 30},
	    {"17179869184g", -ERANGE, 0},
	    {"16777216t", -ERANGE, 0},
	    {"", -EINVAL, 0},
	    {"   ", -EINVAL, 0},
	    {"banana", -EINVAL, 0},
	    {"-5", -EINVAL, 0},
	    {"+5", -EINVAL, 0},
	    {"4 XB", -EINVAL, 0},
	    {"4.5k", -EINVAL, 0},
	    {"4 k b", -EINVAL, 0},
	    {"4kibibytes", -EINVAL, 0},
	};
	static const struct {
		const char *text;
		int rc, mode;
	} modes[] = {
	    {"auto", 0, 0},
	    {"AuTo", 0, 0},
	    {"on", 0, 1},
	    {"true", 0, 1},
	    {"yes", 0, 1},
	    {"1", 0, 1},
	    {"off", 0, 2},
	    {"FALSE", 0, 2},
	    {"no", 0, 2},
	    {"0", 0, 2},
	    {" no\t", 0, 2},
	    {"", -EINVAL, 0},
	    {"2", -EINVAL, 0},
	    {"o n", -EINVAL, 0},
	    {"enabled", -EINVAL, 0},
	    {"a-very-long-word", -EINVAL, 0},
	};
	static const struct {
		const char *text;
		int rc;
		uint64_t value;
	} counts[] = {
	    {"0", 0, 0},
	    {"8", 0, 8},
	    {" 16 ", 0, 16},
	    {"18446744073709551615", 0, UINT64_MAX},
	    {"18446744073709551616", -ERANGE, 0},
	    {"99999999999999999999999", -ERANGE, 0},
	    {"", -EINVAL, 0},
	    {"-1", -EINVAL, 0},
	    {"4k", -EINVAL, 0},
	    {"1.0", -EINVAL, 0},
	    {"eight", -EINVAL, 0},
	};

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint64_t v = 12345;
		int rc = gpufile__parse_size(sizes[i].text, &v);
		if (rc != sizes[i].rc || (rc == 0 && v != sizes[i].value)) {
			fprintf(
			    stderr,
			    "parse_size(\"%s\") = %d, %llu; want %d, %llu\n",
			    sizes[i].text, rc, (unsigned long long)v,
			    sizes[i].rc, (unsigned long long)sizes[i].value);
			test_failures++;
		}
		if (rc != 0 && v != 12345) {
			fprintf(stderr, "parse_size(\"%s\") wrote on failure\n",
			        sizes[i].text);
			test_failures++;
		}
	}
	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		int m = -7;
		int rc = gpufile__parse_mode(modes[i].text, &m);
		if (rc != modes[i].rc || (rc == 0 && m != modes[i].mode)) {
			fprintf(stderr,
			        "parse_mode(\"%s\") = %d, %d; want %d, %d\n",
			        modes[i].text, rc, m, modes[i].rc,
			        modes[i].mode);
			test_failures++;
		}
	}
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		uint64_t v = 12345;
		int rc = gpufile__parse_count(counts[i].text, &v);
		if (rc != counts[i].rc || (rc == 0 && v != counts[i].value)) {
			fprintf(
			    stderr,
			    "parse_count(\"%s\") = %d, %llu; want %d, %llu\n",
			    counts[i].text, rc, (unsigned long long)v,
			    counts[i].rc, (unsigned long long)counts[i].value);
			test_failures++;
		}
	}
}

/* Index of the first configuration warning containing needle, or -1. */
static int find_warning(const char *needle)
{
	char w[512];

	for (int i = 0; gpufile_config_warning(i, w, sizeof(w)) == 0; i++)
		if (strstr(w, needle))
			return i;
	return -1;
}

static const char *const kvikio_extra[] = {
    "KVIKIO_NUM_THREADS",
    "KVIKIO_AUTO_DIRECT_IO_READ",
    "KVIKIO_AUTO_DIRECT_IO_WRITE",
    "KVIKIO_HTTP_STATUS_CODES",
    "KVIKIO_HTTP_MAX_ATTEMPTS",
    "KVIKIO_HTTP_TIMEOUT",
    "KVIKIO_REMOTE_VERBOSE",
    "KVIKIO_LOG_LEVEL",
    "KVIKIO_LOG_FILE",
    "KVIKIO_AUTO_DIRECT_IO_READ_OVERREAD",
    "GPUFILE_TASKSIZE",
    "KVIKIO_NTHREAD",
};

static void clear_kvikio_extra(void)
{
	for (size_t i = 0; i < sizeof(kvikio_extra) / sizeof(kvikio_extra[0]);
	     i++)
		unsetenv(kvikio_extra[i]);
	clear_env();
}

/* Issue 13 item 6: every value KvikIO 26.10 accepts in a KVIKIO_ variable
 * is accepted: honoured, clamped with a note, or reported as unused. */
static void test_kvikio_values(void)
{
	const char *path = test_path("kvikio-file");
	gpufile_t *h = NULL;
	size_t sz = 0;
	unsigned n = 0;
	char buf[100];

	CHECK_EQ(test_make_file(path, 100, 3), 0);

	/* A bounce buffer below 64 KiB: every open used to fail, then it
	 * ran with 64 KiB; KvikIO honours any positive size, and so does
	 * gpufile now (issue 34): the value given is the value used. */
	clear_kvikio_extra();
	setenv("KVIKIO_BOUNCE_BUFFER_SIZE", "32768", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), 0);
	CHECK_EQ(gpufile_get_bounce_buffer_size(&sz), 0);
	CHECK_EQ(sz, 32768);
	CHECK_EQ(find_warning("KVIKIO_BOUNCE_BUFFER_SIZE"), -1);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	CHECK_EQ(gpufile_pread(h, buf, sizeof(buf), 0), 100);
	CHECK_EQ(gpufile_close(h), 0);
	h = NULL;
	{
		static const struct {
			const char *text;
			size_t want;
		} values[] = {{"1", 1},         {"3", 3},
		              {"4095", 4095},   {"64k", 65536},
		              {"2g", 1u << 30}, {"1t", 1u << 30}};
		for (size_t i = 0; i < sizeof(values) / sizeof(values[0]);
		     i++) {
			setenv("KVIKIO_BOUNCE_BUFFER_SIZE", values[i].text, 1);
			gpufile_config_reset();
			CHECK_EQ(gpufile_config_check(), 0);
			CHECK_EQ(gpufile_get_bounce_buffer_size(&sz), 0);
			CHECK_EQ(sz, values[i].want);
		}
	}
	CHECK(find_warning("using 1073741824") >= 0);
	/* A setter takes a small size as given, and clamps a large one. */
	CHECK_EQ(gpufile_set_bounce_buffer_size(1000), 0);
	CHECK_EQ(gpufile_get_bounce_buffer_size(&sz), 0);
	CHECK_EQ(sz, 1000);
	CHECK_EQ(find_warning("bounce_buffer_size"), -1);
	CHECK_EQ(gpufile_set_bounce_buffer_size(0), GPUFILE_ECONFIG);
	CHECK_EQ(gpufile_set_bounce_buffer_size(1u << 20), 0);
	CHECK_EQ(find_warning("bounce_buffer_size"), -1);
	unsetenv("KVIKIO_BOUNCE_BUFFER_SIZE");

	/* KVIKIO_NUM_THREADS is KVIKIO_NTHREADS; two different values are
	 * an error naming both. */
	clear_kvikio_extra();
	setenv("KVIKIO_NUM_THREADS", "7", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_get_nthreads(&n), 0);
	CHECK_EQ(n, 7);
	setenv("KVIKIO_NTHREADS", "7", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), 0);
	setenv("KVIKIO_NTHREADS", "3", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), GPUFILE_ECONFIG);
	CHECK_CONTAINS(gpufile_errmsg(), "KVIKIO_NTHREADS=\"3\"");
	CHECK_CONTAINS(gpufile_errmsg(), "KVIKIO_NUM_THREADS=\"7\"");
	CHECK_EQ(gpufile_open(&h, path, "r"), GPUFILE_ECONFIG);
	/* GPUFILE_NTHREADS decides over both. */
	setenv("GPUFILE_NTHREADS", "5", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_get_nthreads(&n), 0);
	CHECK_EQ(n, 5);

	/* Any positive count or size KvikIO takes is moved into range,
	 * with a note; GPUFILE_ variables stay strict. */
	clear_kvikio_extra();
	setenv("KVIKIO_NTHREADS", "5000", 1);
	setenv("KVIKIO_TASK_SIZE", "2t", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), 0);
	CHECK_EQ(gpufile_get_nthreads(&n), 0);
	CHECK_EQ(n, 1024);
	CHECK(find_warning("KVIKIO_NTHREADS=5000: using 1024") >= 0);
	CHECK(find_warning("KVIKIO_TASK_SIZE=2199023255552: using "
	                   "1099511627776") >= 0);
	setenv("KVIKIO_NUM_THREADS", "5000", 1); /* agrees */
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), 0);
	unsetenv("KVIKIO_NUM_THREADS");
	setenv("KVIKIO_NTHREADS", "0", 1); /* KvikIO refuses 0 too */
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), GPUFILE_ECONFIG);
	CHECK_CONTAINS(gpufile_errmsg(), "KVIKIO_NTHREADS=\"0\"");
	unsetenv("KVIKIO_TASK_SIZE");
	setenv("GPUFILE_NTHREADS", "5000", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), GPUFILE_ECONFIG);
	unsetenv("GPUFILE_NTHREADS");

	/* KVIKIO_AUTO_DIRECT_IO_READ/WRITE onto direct_io. */
	clear_kvikio_extra();
	setenv("KVIKIO_AUTO_DIRECT_IO_READ", "1", 1);
	gpufile_config_reset();
	CHECK(strcmp(get("direct_io", NULL, NULL, 0), "on") == 0);
	setenv("KVIKIO_AUTO_DIRECT_IO_READ", "false", 1);
	gpufile_config_reset();
	CHECK(strcmp(get("direct_io", NULL, NULL, 0), "off") == 0);
	setenv("KVIKIO_AUTO_DIRECT_IO_WRITE", "0", 1);
	gpufile_config_reset();
	CHECK_EQ(find_warning("KVIKIO_AUTO_DIRECT_IO_WRITE"), -1);
	unsetenv("KVIKIO_AUTO_DIRECT_IO_READ");
	setenv("KVIKIO_AUTO_DIRECT_IO_WRITE", "1", 1); /* KvikIO's default */
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), 0);
	CHECK(strcmp(get("direct_io", NULL, NULL, 0), "auto") == 0);
	CHECK(find_warning("KVIKIO_AUTO_DIRECT_IO_WRITE=\"1\" is not "
	                   "applied") >= 0);
	setenv("KVIKIO_AUTO_DIRECT_IO_WRITE", "sometimes", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), GPUFILE_ECONFIG);
	CHECK_CONTAINS(gpufile_errmsg(), "KVIKIO_AUTO_DIRECT_IO_WRITE");
	setenv("KVIKIO_AUTO_DIRECT_IO_WRITE", "1", 1);
	setenv("GPUFILE_DIRECT_IO", "off", 1);
	gpufile_config_reset();
	CHECK(strcmp(get("direct_io", NULL, NULL, 0), "off") == 0);

	/* KvikIO reads booleans with std::stoi: any whole number is one,
	 * 0 false and others true. Text after it stays an error. */
	clear_kvikio_extra();
	unsetenv("GPUFILE_DIRECT_IO");
	for (const char *const *t =
	         (const char *const[]){"2", "-1", " +7 ", NULL};
	     *t; t++) {
		setenv("KVIKIO_AUTO_DIRECT_IO_READ", *t, 1);
		gpufile_config_reset();
		CHECK_EQ(gpufile_config_check(), 0);
		CHECK(strcmp(get("direct_io", NULL, NULL, 0), "on") == 0);
	}
	setenv("KVIKIO_AUTO_DIRECT_IO_READ", "+0", 1);
	gpufile_config_reset();
	CHECK(strcmp(get("direct_io", NULL, NULL, 0), "off") == 0);
	setenv("KVIKIO_AUTO_DIRECT_IO_READ", "2x", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), GPUFILE_ECONFIG);
	CHECK_CONTAINS(gpufile_errmsg(),
	               "KVIKIO_AUTO_DIRECT_IO_READ=\"2x\": not a boolean");
	unsetenv("KVIKIO_AUTO_DIRECT_IO_READ");
	setenv("KVIKIO_AUTO_DIRECT_IO_WRITE", "2", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), 0);
	CHECK(find_warning("KVIKIO_AUTO_DIRECT_IO_WRITE=\"2\" is not "
	                   "applied") >= 0);
	unsetenv("KVIKIO_AUTO_DIRECT_IO_WRITE");

	/* KvikIO reads whole numbers with a stringstream: "+8" is 8. A
	 * GPUFILE_ variable keeps gpufile's spelling. */
	clear_kvikio_extra();
	setenv("KVIKIO_NTHREADS", "+8", 1);
	setenv("KVIKIO_TASK_SIZE", " +8k", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), 0);
	CHECK_EQ(gpufile_get_nthreads(&n), 0);
	CHECK_EQ(n, 8);
	CHECK_EQ(gpufile_get_task_size(&sz), 0);
	CHECK_EQ(sz, 8192);
	setenv("KVIKIO_NUM_THREADS", "8", 1); /* agrees with "+8" */
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), 0);
	setenv("KVIKIO_NUM_THREADS", "9", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), GPUFILE_ECONFIG);
	CHECK_CONTAINS(gpufile_errmsg(), "KVIKIO_NTHREADS=\"+8\"");
	unsetenv("KVIKIO_NUM_THREADS");
	unsetenv("KVIKIO_NTHREADS");
	unsetenv("KVIKIO_TASK_SIZE");
	setenv("GPUFILE_NTHREADS", "+8", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), GPUFILE_ECONFIG);
	CHECK_CONTAINS(gpufile_errmsg(), "GPUFILE_NTHREADS=\"+8\"");
	unsetenv("GPUFILE_NTHREADS");

	/* An empty KVIKIO_HTTP_STATUS_CODES is KvikIO's default list; an
	 * empty GPUFILE_ one stays an error. */
	clear_kvikio_extra();
	setenv("KVIKIO_HTTP_STATUS_CODES", "", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), 0);
	CHECK(strcmp(get("http_status_codes", NULL, NULL, 0),
	             "429,500,502,503,504") == 0);
	setenv("GPUFILE_HTTP_STATUS_CODES", "", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), GPUFILE_ECONFIG);
	CHECK_CONTAINS(gpufile_errmsg(), "GPUFILE_HTTP_STATUS_CODES");
	unsetenv("GPUFILE_HTTP_STATUS_CODES");

	/* The list is checked with the other settings (it used to pass
	 * gpufile config and fail first at a remote open), and "," is no
	 * list (it used to mean "retry nothing"). */
	for (const char *const *t =
	         (const char *const[]){"abc", ",", "429,", "429,,500", "99",
	                               "600", NULL};
	     *t; t++) {
		char want[64];

		setenv("GPUFILE_HTTP_STATUS_CODES", *t, 1);
		gpufile_config_reset();
		CHECK_EQ(gpufile_config_check(), GPUFILE_ECONFIG);
		snprintf(want, sizeof(want),
		         "GPUFILE_HTTP_STATUS_CODES=\"%s\": not a list", *t);
		CHECK_CONTAINS(gpufile_errmsg(), want);
		CHECK_EQ(gpufile_config_set("http_status_codes", *t),
		         GPUFILE_ECONFIG);
		CHECK_CONTAINS(gpufile_errmsg(), "http_status_codes=");
	}
	setenv("GPUFILE_HTTP_STATUS_CODES", "429, 503", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), 0);
	unsetenv("GPUFILE_HTTP_STATUS_CODES");
	setenv("KVIKIO_HTTP_STATUS_CODES", "abc", 1); /* KvikIO refuses it */
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), GPUFILE_ECONFIG);
	CHECK_CONTAINS(gpufile_errmsg(), "KVIKIO_HTTP_STATUS_CODES=\"abc\"");
	unsetenv("KVIKIO_HTTP_STATUS_CODES");

	/* Verbose remote log and logging: accepted, reported as unused. */
	clear_kvikio_extra();
	setenv("KVIKIO_HTTP_STATUS_CODES", "429,500,502,503,504", 1);
	setenv("KVIKIO_HTTP_MAX_ATTEMPTS", "3", 1);
	setenv("KVIKIO_HTTP_TIMEOUT", "60", 1);
	setenv("KVIKIO_REMOTE_VERBOSE", "true", 1);
	setenv("KVIKIO_LOG_LEVEL", "DEBUG", 1);
	setenv("KVIKIO_LOG_FILE", "/tmp/kvikio.log", 1);
	setenv("KVIKIO_AUTO_DIRECT_IO_READ_OVERREAD", "1", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), 0);
	CHECK(find_warning("KVIKIO_REMOTE_VERBOSE is a KvikIO setting gpufile "
	                   "accepts but does not use") >= 0);
	/* KVIKIO_HTTP_* are remote.c's settings: used, no warning. */
	CHECK_EQ(find_warning("KVIKIO_HTTP_TIMEOUT"), -1);
	CHECK(strcmp(get("http_timeout", NULL, NULL, 0), "60") == 0);
	CHECK(find_warning("KVIKIO_LOG_FILE is a KvikIO setting") >= 0);
	CHECK_EQ(find_warning("did you mean"), -1);
	CHECK_EQ(gpufile_open(&h, path, "r"), 0);
	CHECK_EQ(gpufile_close(h), 0);
	clear_kvikio_extra();
}

/* Issue 11 item 8: a misspelled variable is named with the closest
 * setting's variable. */
static void test_misspelled(void)
{
	char w[512];

	clear_kvikio_extra();
	CHECK_EQ(gpufile_config_warning_count(), 0);
	CHECK_EQ(gpufile_config_warning(0, w, sizeof(w)), -ENOENT);
	CHECK_EQ(gpufile_config_warning(0, NULL, 0), -EINVAL);
	setenv("GPUFILE_TASKSIZE", "8m", 1);
	setenv("KVIKIO_NTHREAD", "4", 1);
	gpufile_config_reset();
	CHECK_EQ(gpufile_config_check(), 0); /* a warning, not an error */
	CHECK(find_warning("GPUFILE_TASKSIZE is not a setting; did you mean "
	                   "GPUFILE_TASK_SIZE?") >= 0);
	CHECK(find_warning("KVIKIO_NTHREAD is not a setting gpufile knows "
	                   "from KvikIO; did you mean KVIKIO_NTHREADS?") >= 0);
	CHECK_EQ(gpufile_config_warning_count(), 2);
	/* A name of any length is named (one of 64+ bytes was passed over). */
	{
		char var[101];
		memset(var, 'X', sizeof(var) - 1);
		memcpy(var, "GPUFILE_TASK_SIZE_", 18);
		var[sizeof(var) - 1] = '\0';
		setenv(var, "1", 1);
		gpufile_config_reset();
		strcat(strcpy(w, var), " is not a setting");
		CHECK(find_warning(w) >= 0);
		CHECK_EQ(gpufile_config_warning_count(), 3);
		unsetenv(var);
	}
	/* The project's own other variables are no misspellings. */
	setenv("GPUFILE_LIBRARY", "/x/libgpufile.so", 1);
	gpufile_config_reset();
	CHECK_EQ(find_warning("GPUFILE_LIBRARY"), -1);
	unsetenv("GPUFILE_LIBRARY");
	clear_kvikio_extra();
}

int main(void)
{
	test_defaults();
	test_environment();
	test_bad_values();
	test_setters();
	test_parsers();
	test_kvikio_values();
	test_misspelled();
	clear_env();
	return test_finish("test_config");
}
