/*
 * The gpufile tool never passes a control character from a file to the
 * terminal: tensor names and __metadata__ keys (in the library's messages
 * that quote them), and file names, in text and --json output alike. A
 * tensor named "\u001b]0;pwned\u0007" once retitled the terminal in
 * `gpufile load`'s error, and a file name with ESC did the same in
 * `gpufile cache`. Text output writes such a byte as \xHH, --json as
 * \u00HH.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"

#include <stdio.h>
#include <string.h>

static char out[1 << 16];

/* The ESC ] 0 ; ... BEL sequence that sets a terminal's title. */
#define TITLE_JSON "\\u001b]0;pwned\\u0007"
#define TITLE_RAW  "\x1b]0;pwned\x07"

/* Writes a safetensors file: header json, data_len zero bytes. */
static int write_st(const char *path, const char *json, size_t data_len)
{
	size_t n = strlen(json);
	unsigned char len[8];
	FILE *f = fopen(path, "wb");
	int ok = f != NULL;

	for (int i = 0; i < 8; i++)
		len[i] = (unsigned char)((uint64_t)n >> (8 * i));
	ok = ok && fwrite(len, 1, 8, f) == 8 && fwrite(json, 1, n, f) == n;
	for (size_t i = 0; ok && i < data_len; i++)
		ok = fputc(0, f) != EOF;
	return f && fclose(f) == 0 && ok ? 0 : -1;
}

/* Runs gpufile ARGS and checks that what it wrote (stdout and stderr)
 * holds no control byte but newline and tab, and holds want (the escaped
 * name, so that it was printed at all). */
static void expect_clean(const char *args, int status, const char *want)
{
	int rc = test_cli_run(out, sizeof(out), "%s", args);

	CHECK_EQ(rc, status);
	for (size_t i = 0; out[i]; i++) {
		unsigned char c = (unsigned char)out[i];

		if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
			fprintf(stderr,
			        "gpufile %s: raw byte 0x%02x at %zu of:\n%s\n",
			        args, c, i, out);
			test_failures++;
			break;
		}
	}
	if (want)
		CHECK_CONTAINS(out, want);
}

int main(void)
{
	/* The file name itself carries ESC and BEL. */
	const char *dir = test_path("");
	char named[1024], bad_name[1024], bad_meta[1024], args[4096];

	if (!test_cli_path()) {
		fprintf(stderr, "no CLI (GPUFILE_CLI): skipped\n");
		return TEST_SKIP;
	}
	snprintf(named, sizeof(named), "%s/" TITLE_RAW ".st", dir);
	snprintf(bad_name, sizeof(bad_name), "%s/bad-name.st", dir);
	snprintf(bad_meta, sizeof(bad_meta), "%s/bad-meta.st", dir);
	CHECK_EQ(write_st(named,
	                  "{\"__metadata__\":{\"" TITLE_JSON "\":\"" TITLE_JSON
	                  "\"},\"" TITLE_JSON "\":{\"dtype\":\"U8\","
	                  "\"shape\":[4],\"data_offsets\":[0,4]}}",
	                  4),
	         0);
	/* The library's messages quote the decoded name and key. */
	CHECK_EQ(write_st(bad_name,
	                  "{\"" TITLE_JSON "\":{\"dtype\":\"Q7\",\"shape\":[4],"
	                  "\"data_offsets\":[0,4]}}",
	                  4),
	         0);
	CHECK_EQ(
	    write_st(bad_meta, "{\"__metadata__\":{\"" TITLE_JSON "\":3}}", 0),
	    0);

	for (int json = 0; json < 2; json++) {
		const char *j = json ? " --json" : "";
		const char *esc =
		    json ? "\\u001b]0;pwned\\u0007" : "\\x1b]0;pwned\\x07";

		snprintf(args, sizeof(args), "load '%s' --host%s", bad_name, j);
		expect_clean(args, 1, "\\x1b]0;pwned\\x07");
		snprintf(args, sizeof(args), "load '%s' --host%s", bad_meta, j);
		expect_clean(args, 1, "\\x1b]0;pwned\\x07");
		snprintf(args, sizeof(args), "load '%s' --host%s", named, j);
		expect_clean(args, 0, esc);
		snprintf(args, sizeof(args), "cache '%s'%s", named, j);
		expect_clean(args, 0, esc);
		snprintf(args, sizeof(args), "cache '%s' --drop%s", named, j);
		expect_clean(args, 0, esc);
		snprintf(args, sizeof(args), "read '%s' --host%s", named, j);
		expect_clean(args, 0, esc);
		/* A file that is not there: the error names it. */
		snprintf(args, sizeof(args), "load '%s.no' --host%s", named, j);
		expect_clean(args, 1, "\\x1b]0;pwned\\x07");
		snprintf(args, sizeof(args), "cache '%s.no'%s", named, j);
		expect_clean(args, 1, "\\x1b]0;pwned\\x07");
		snprintf(args, sizeof(args), "read '%s.no' --host%s", named, j);
		expect_clean(args, 1, "\\x1b]0;pwned\\x07");
	}
	test_cleanup();
	return test_finish("test_cli_escape");
}
