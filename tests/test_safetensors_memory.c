/*
 * The memory a safetensors header costs to open: a small multiple of the
 * header's size, whatever it holds. cJSON's tree cost 44 times the
 * header for one long shape (a 100 MB header, the format's limit, took
 * 4.4 GB), as much for a long array in an unknown field, and about 20
 * times for many metadata keys or tensors.
 *
 * Each header is opened by a fresh process (this program, run again with
 * --open FILE), which reports how far the open raised its peak resident
 * size (getrusage's ru_maxrss); a tiny header's rise is the baseline
 * (thread pool, first I/O) taken off the others.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include "gpufile.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The bound checked: peak bytes per header byte. The parser keeps the
 * text (1), decoded strings (at most 1), 8 bytes per shape entry of at
 * least 2 bytes of text (4), and a record per tensor or key. */
#define BOUND 8

static long maxrss_kib(void)
{
	struct rusage ru;

	return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

/* The child: opens path and prints the rise of its peak RSS in KiB. */
static int open_one(const char *path)
{
	gpufile_safetensors_t *st = NULL;
	long before = maxrss_kib(), after;

	if (gpufile_safetensors_open(&st, path) != 0) {
		printf("refused: %s\n", gpufile_errmsg());
		return 1;
	}
	after = maxrss_kib();
	printf("%ld\n", after - before);
	gpufile_safetensors_close(st);
	return 0;
}

/* A growing text buffer. */
struct text {
	char *s;
	size_t len, cap;
};

static void add(struct text *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
		va_end(ap);
		if (n >= 0 && (size_t)n < t->cap - t->len)
			break;
		t->cap = t->cap * 2 + 4096;
		t->s = realloc(t->s, t->cap);
		if (!t->s)
			exit(1);
	}
	t->len += (size_t)n;
}

/* Writes the header t and data_len zero bytes to a file named name. */
static const char *write_st(const char *name, struct text *t, size_t data_len)
{
	const char *path = test_path(name);
	FILE *f = fopen(path, "wb");
	unsigned char len[8];
	int ok = f != NULL;

	for (int i = 0; i < 8; i++)
		len[i] = (unsigned char)((uint64_t)t->len >> (8 * i));
	ok = ok && fwrite(len, 1, 8, f) == 8 &&
	     fwrite(t->s, 1, t->len, f) == t->len;
	for (size_t i = 0; ok && i < data_len; i++)
		ok = fputc(0, f) != EOF;
	if (!f || fclose(f) != 0 || !ok) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
	free(t->s);
	*t = (struct text){0};
	return path;
}

/* Runs this program with --open path; returns the rise it reports, in
 * KiB, or -1. */
static long rise_kib(const char *self, const char *path)
{
	char cmd[4096], line[4096] = "";
	long kib = -1;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "'%s' --open '%s'", self, path);
	p = popen(cmd, "r");
	if (!p)
		return -1;
	if (fgets(line, sizeof(line), p) && sscanf(line, "%ld", &kib) != 1)
		fprintf(stderr, "%s: %s", path, line);
	pclose(p);
	return kib;
}

static void expect_bounded(const char *self, const char *what, const char *path,
                           size_t header, long base)
{
	long kib = rise_kib(self, path);
	long limit = (long)(BOUND * header / 1024);

	fprintf(stderr, "%s: header %zu KiB, peak rise %ld KiB (bound %ld)\n",
	        what, header / 1024, kib - base, limit);
	CHECK(kib >= 0);
	CHECK(kib - base <= limit);
}

int main(int argc, char **argv)
{
	/* 2 million of each: 4-6 MB headers, ~0.2 s each to open. */
	enum { N = 2000000, TENSORS = 60000, KEYS = 300000 };
	struct text t = {0};
	const char *self = "/proc/self/exe", *p;
	char exe[4096];
	ssize_t n;
	size_t len;
	long base;

	if (argc == 3 && strcmp(argv[1], "--open") == 0)
		return open_one(argv[2]);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
	/* A sanitizer's allocator (redzones, quarantine, shadow memory)
	 * sets the peak, not the parser; its 4-6 MB headers also took over
	 * 600 s under ASan on a loaded 2-core machine. The plain build
	 * measures; fuzz_safetensors and test_safetensors run the parser
	 * under the sanitizers. */
	fprintf(stderr, "test_safetensors_memory: skipped: a sanitizer build "
	                "measures its allocator, not the parser\n");
	return TEST_SKIP;
#endif
	n = readlink(self, exe, sizeof(exe) - 1);
	if (n <= 0)
		return TEST_SKIP;
	exe[n] = '\0';

	add(&t, "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
	        "\"data_offsets\":[0,1]}}");
	base = rise_kib(exe, write_st("tiny", &t, 1));
	CHECK(base >= 0);

	/* One shape of N entries. */
	add(&t, "{\"w\":{\"dtype\":\"U8\",\"shape\":[1");
	for (int i = 1; i < N; i++)
		add(&t, ",1");
	add(&t, "],\"data_offsets\":[0,1]}}");
	len = t.len;
	p = write_st("long-shape", &t, 1);
	expect_bounded(exe, "long shape", p, len, base);

	/* An unknown field holding an array of N numbers. */
	add(&t, "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
	        "\"data_offsets\":[0,1],\"x\":[0");
	for (int i = 1; i < N; i++)
		add(&t, ",0");
	add(&t, "]}}");
	len = t.len;
	p = write_st("long-unknown", &t, 1);
	expect_bounded(exe, "long unknown field", p, len, base);

	/* Many small tensors. */
	add(&t, "{");
	for (int i = 0; i < TENSORS; i++)
		add(&t,
		    "%s\"%d\":{\"dtype\":\"U8\",\"shape\":[1],"
		    "\"data_offsets\":[%d,%d]}",
		    i ? "," : "", i, i, i + 1);
	add(&t, "}");
	len = t.len;
	p = write_st("many-tensors", &t, TENSORS);
	expect_bounded(exe, "many tensors", p, len, base);

	/* Many metadata keys. */
	add(&t, "{\"__metadata__\":{");
	for (int i = 0; i < KEYS; i++)
		add(&t, "%s\"%d\":\"\"", i ? "," : "", i);
	add(&t, "}}");
	len = t.len;
	p = write_st("many-keys", &t, 0);
	expect_bounded(exe, "many metadata keys", p, len, base);

	test_cleanup();
	return test_finish("test_safetensors_memory");
}
