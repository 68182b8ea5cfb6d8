/*
 * safetensors checkpoints (src/formats/safetensors.c): every malformed header
 * is an error naming the file, the tensor and the field; well-formed files
 * (written here, following the format) load byte for byte into host memory and,
 * with the fake CUDA driver, into "device" memory through the posix path;
 * tensors adjacent in file and memory are read as one request.
 */
#include "testlib.h"

#include "gpufile.h"
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define DEV_SIZE (8u << 20)
#include "fake_cuda.h"

#define SEED 77

/* Writes an 8-byte length (hdr_len, or strlen(json) when ~0), the header
 * json, and data_len pattern bytes (SEED, offset within the data). */
static const char *write_st_len(const char *name, uint64_t hdr_len,
                                const char *json, size_t json_len,
                                size_t data_len)
{
	const char *path = test_path(name);
	FILE *f = fopen(path, "wb");
	unsigned char len8[8];
	unsigned char *data = test_malloc(data_len + 1);

	for (int i = 0; i < 8; i++)
		len8[i] = (unsigned char)(hdr_len >> (8 * i));
	test_fill(data, data_len, SEED, 0);
	if (!f || fwrite(len8, 1, 8, f) != 8 ||
	    fwrite(json, 1, json_len, f) != json_len ||
	    fwrite(data, 1, data_len, f) != data_len || fclose(f) != 0) {
		fprintf(stderr, "cannot write %s\n", path);
		exit(1);
	}
	free(data);
	return path;
}

static const char *write_st(const char *name, const char *json, size_t data_len)
{
	return write_st_len(name, strlen(json), json, strlen(json), data_len);
}

/* Opening path fails with err, and the message holds the file's name and
 * each of the given fragments. */
static void expect_bad(const char *path, int err, const char *frag1,
                       const char *frag2, const char *frag3)
{
	gpufile_safetensors_t *st = (gpufile_safetensors_t *)0x1;
	int rc = gpufile_safetensors_open(&st, path);

	CHECK_EQ(rc, err);
	CHECK(st == NULL);
	CHECK_CONTAINS(gpufile_errmsg(), path);
	if (frag1)
		CHECK_CONTAINS(gpufile_errmsg(), frag1);
	if (frag2)
		CHECK_CONTAINS(gpufile_errmsg(), frag2);
	if (frag3)
		CHECK_CONTAINS(gpufile_errmsg(), frag3);
	if (rc == 0)
		gpufile_safetensors_close(st);
}

/* Opens path, which must be accepted; NULL (and a failed check) if not. */
static gpufile_safetensors_t *expect_ok(const char *path)
{
	gpufile_safetensors_t *st = NULL;
	int rc = gpufile_safetensors_open(&st, path);

	if (rc != 0)
		fprintf(stderr, "%s refused: %s\n", path, gpufile_errmsg());
	CHECK_EQ(rc, 0);
	return st;
}

static void test_malformed(void)
{
	const char *p;

	/* The file and the header length. */
	p = test_path("short");
	CHECK_EQ(test_make_file(p, 3, SEED), 0);
	expect_bad(p, -EBADMSG, "too short", NULL, NULL);
	p = write_st_len("hdr-huge", 100000001ull, "{}", 2, 0);
	expect_bad(p, -EBADMSG, "header length 100000001", "limit", NULL);
	p = write_st_len("hdr-u64", UINT64_MAX, "{}", 2, 0);
	expect_bad(p, -EBADMSG, "header length 18446744073709551615", "limit",
	           NULL);
	p = write_st_len("hdr-eof", 100, "{}", 2, 10);
	expect_bad(p, -EBADMSG, "header length 100", "past the end", NULL);

	/* The header text. */
	p = write_st_len("utf8", 6, "{\"\xff\":1}", 6, 0);
	expect_bad(p, -EBADMSG, "not valid UTF-8", "byte 2", NULL);
	p = write_st_len("utf8-surrogate", 8, "{\"\xed\xa0\x80\":1}", 8, 0);
	expect_bad(p, -EBADMSG, "not valid UTF-8", NULL, NULL);
	p = write_st_len("nul", 4, "{}\0 ", 4, 0);
	expect_bad(p, -EBADMSG, "NUL byte", NULL, NULL);
	p = write_st("badjson", "{\"a\": {\"dtype\": ", 0);
	expect_bad(p, -EBADMSG, "not valid JSON", NULL, NULL);
	/* A header that is not JSON is called so, as the reference parses
	 * the whole text before it judges a field: not a missing field, a
	 * second __metadata__ or an offset past the data that comes before
	 * the fault. */
	/* The reference checks offsets against the data section only after
	 * it has read every entry: a missing or repeated field is named
	 * first, even when the offsets before it reach past the data. */
	p = write_st("past-then-missing",
	             "{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,4]}}", 0);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "shape (missing)", NULL);
	p = write_st("past-then-twice",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],"
	             "\"data_offsets\":[0,4],\"data_offsets\":[0,4]}}",
	             0);
	expect_bad(p, -EBADMSG, "tensor \"w\"",
	           "field \"data_offsets\" is given twice", NULL);
	p = write_st("badjson-cut",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],"
	             "\"data_offsets\":[0,4]},\"v\":",
	             0);
	expect_bad(p, -EBADMSG, "not valid JSON", NULL, NULL);
	p = write_st("badjson-missing", "{\"w\":{\"dtype\":\"U8\"}, 1}", 0);
	expect_bad(p, -EBADMSG, "not valid JSON", NULL, NULL);
	p = write_st("badjson-meta",
	             "{\"__metadata__\":{},\"__metadata__\":{},}", 0);
	expect_bad(p, -EBADMSG, "not valid JSON", NULL, NULL);
	p = write_st("array", "[1, 2]", 0);
	expect_bad(p, -EBADMSG, "not an object", NULL, NULL);
	p = write_st("entry", "{\"w\": 5}", 0);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "not an object", NULL);

	/* dtype. */
	p = write_st("nodtype",
	             "{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "dtype", "(missing)");
	p = write_st(
	    "dtype-num",
	    "{\"w\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "dtype 4", "not a string");
	p = write_st("dtype-unknown",
	             "{\"w\":{\"dtype\":\"Q7\",\"shape\":[1],"
	             "\"data_offsets\":[0,1]}}",
	             1);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "dtype \"Q7\"", "unknown");
	p = write_st("dtype-case",
	             "{\"w\":{\"dtype\":\"bf16\",\"shape\":[1],"
	             "\"data_offsets\":[0,2]}}",
	             2);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "dtype \"bf16\"", "unknown");

	/* shape. */
	p = write_st("shape-obj",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":{},"
	             "\"data_offsets\":[0,1]}}",
	             1);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "shape", "not an array");
	p = write_st("shape-neg",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[2,-3],"
	             "\"data_offsets\":[0,6]}}",
	             6);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "shape[1] is -3", NULL);
	p = write_st("shape-frac",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[1.5],"
	             "\"data_offsets\":[0,1]}}",
	             1);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "shape[0] is 1.5", NULL);
	p = write_st("shape-str",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[\"2\"],"
	             "\"data_offsets\":[0,2]}}",
	             2);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "shape[0] is \"2\"", NULL);
	p = write_st("shape-size",
	             "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],"
	             "\"data_offsets\":[0,20]}}",
	             20);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "shape [2,3] of F32",
	           "span 20 bytes");
	/* 2^32 * 2^32 elements: the count itself overflows. */
	p = write_st(
	    "overflow-elems",
	    "{\"w\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],"
	    "\"data_offsets\":[0,0]}}",
	    0);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "shape", "64 bits");
	/* 2^60 elements fit, their 2^64 bits do not. */
	p = write_st("overflow-bits",
	             "{\"w\":{\"dtype\":\"BF16\",\"shape\":[1099511627776,"
	             "1048576],\"data_offsets\":[0,0]}}",
	             0);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "of BF16", "64 bits");
	/* Dimensions just below 2^53 are quoted exactly, as the product
	 * beside them is ("shape [5e+15] of U8 is ... (5000000000000001
	 * bytes)" was cJSON's 15-digit print). */
	p = write_st("shape-exact",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[5000000000000001],"
	             "\"data_offsets\":[0,0]}}",
	             0);
	expect_bad(p, -EBADMSG, "shape [5000000000000001] of U8",
	           "(5000000000000001 bytes)", NULL);
	p = write_st("overflow-exact",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[9007199254740991,"
	             "9007199254740991],\"data_offsets\":[0,0]}}",
	             0);
	expect_bad(p, -EBADMSG,
	           "shape [9007199254740991,9007199254740991] has more "
	           "elements",
	           NULL, NULL);
	/* Above 2^53 a double cannot hold the integer exactly. */
	p = write_st("shape-2p53",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[18014398509481984],"
	             "\"data_offsets\":[0,0]}}",
	             0);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "shape[0]", "2^53");
	/* 3 F4 elements are 12 bits: not a whole number of bytes. */
	p = write_st("f4-odd",
	             "{\"w\":{\"dtype\":\"F4\",\"shape\":[3],"
	             "\"data_offsets\":[0,1]}}",
	             1);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "12 bits", "whole number");

	/* data_offsets. */
	p = write_st("offs-missing", "{\"w\":{\"dtype\":\"U8\",\"shape\":[1]}}",
	             1);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "data_offsets", "(missing)");
	p = write_st("offs-three",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
	             "\"data_offsets\":[0,1,2]}}",
	             1);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "data_offsets [0,1,2]", NULL);
	p = write_st("offs-reversed",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],"
	             "\"data_offsets\":[4,2]}}",
	             4);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "end before begin", NULL);
	p = write_st("offs-reversed-1",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[0],"
	             "\"data_offsets\":[4,3]}}",
	             4);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "[4, 3] end before begin",
	           NULL);
	/* data_offsets spanning more bytes than the shape holds. */
	p = write_st("span-long",
	             "{\"w\":{\"dtype\":\"U16\",\"shape\":[2],"
	             "\"data_offsets\":[0,6]}}",
	             6);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "(4 bytes)", "span 6 bytes");
	p = write_st("offs-outside",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[8],"
	             "\"data_offsets\":[0,8]}}",
	             4);
	expect_bad(p, -EBADMSG, "tensor \"w\"", "data_offsets [0, 8]",
	           "past the data section (4 bytes");
	p = write_st(
	    "overlap",
	    "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,"
	    "4]},\"b\":{\"dtype\":\"U8\",\"shape\":[4],"
	    "\"data_offsets\":[2,6]}}",
	    6);
	expect_bad(p, -EBADMSG, "tensor \"b\"", "overlap tensor \"a\"",
	           "[2, 6]");
	/* One byte shared is an overlap too. */
	p = write_st(
	    "overlap-1",
	    "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,"
	    "4]},\"b\":{\"dtype\":\"U8\",\"shape\":[4],"
	    "\"data_offsets\":[3,7]}}",
	    7);
	expect_bad(p, -EBADMSG, "tensor \"b\"", "overlap tensor \"a\"",
	           "[3, 7]");
	p = write_st(
	    "gap",
	    "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,"
	    "4]},\"b\":{\"dtype\":\"U8\",\"shape\":[2],"
	    "\"data_offsets\":[6,8]}}",
	    8);
	expect_bad(p, -EBADMSG, "tensor \"b\"", "bytes [4, 6)", "no tensor");
	/* One byte either way is as wrong as two. */
	p = write_st(
	    "gap1",
	    "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,"
	    "4]},\"b\":{\"dtype\":\"U8\",\"shape\":[2],"
	    "\"data_offsets\":[5,7]}}",
	    7);
	expect_bad(p, -EBADMSG, "tensor \"b\"", "bytes [4, 5)", "no tensor");
	p = write_st(
	    "overlap1",
	    "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,"
	    "4]},\"b\":{\"dtype\":\"U8\",\"shape\":[2],"
	    "\"data_offsets\":[3,5]}}",
	    5);
	expect_bad(p, -EBADMSG, "tensor \"b\"", "overlap tensor \"a\"",
	           "[3, 5]");
	p = write_st("gap1-first",
	             "{\"a\":{\"dtype\":\"U8\",\"shape\":[3],"
	             "\"data_offsets\":[1,4]}}",
	             4);
	expect_bad(p, -EBADMSG, "tensor \"a\"", "bytes [0, 1)", "no tensor");
	p = write_st("trailing1",
	             "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],"
	             "\"data_offsets\":[0,4]}}",
	             5);
	expect_bad(p, -EBADMSG, "data section is 5 bytes", "end at 4", NULL);
	p = write_st("trailing",
	             "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],"
	             "\"data_offsets\":[0,4]}}",
	             9);
	expect_bad(p, -EBADMSG, "data section is 9 bytes", "end at 4", NULL);
	/* A name given twice keeps its last entry (test_reference_forms):
	 * the first one's bytes then belong to no tensor. */
	p = write_st(
	    "twice",
	    "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,"
	    "4]},\"a\":{\"dtype\":\"U8\",\"shape\":[4],"
	    "\"data_offsets\":[4,8]}}",
	    8);
	expect_bad(p, -EBADMSG, "tensor \"a\"", "bytes [0, 4)", "no tensor");

	/* __metadata__. */
	p = write_st("meta-num",
	             "{\"__metadata__\":{\"format\":\"pt\",\"n\":3}}", 0);
	expect_bad(p, -EBADMSG, "__metadata__ key \"n\"", "value 3",
	           "not a string");
	p = write_st("meta-list", "{\"__metadata__\":[\"pt\"]}", 0);
	expect_bad(p, -EBADMSG, "__metadata__", "not an object", NULL);

	/* A field or __metadata__ given twice: serde's "duplicate field"
	 * (cJSON alone took the first). An unknown field twice is ignored
	 * twice, as serde ignores it. */
	p = write_st("dup-dtype",
	             "{\"w\":{\"dtype\":\"F32\",\"dtype\":\"U8\",\"shape\":[4],"
	             "\"data_offsets\":[0,16]}}",
	             16);
	expect_bad(p, -EBADMSG, "tensor \"w\": field \"dtype\"", "given twice",
	           NULL);
	p = write_st("dup-shape",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":"
	             "[0,4],\"shape\":[2]}}",
	             4);
	expect_bad(p, -EBADMSG, "tensor \"w\": field \"shape\"", "given twice",
	           NULL);
	p = write_st("dup-offsets",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":"
	             "[0,4],\"data_offsets\":[0,8]}}",
	             4);
	expect_bad(p, -EBADMSG, "tensor \"w\": field \"data_offsets\"",
	           "given twice", NULL);
	p = write_st("dup-meta-null",
	             "{\"__metadata__\":null,\"__metadata__\":{\"a\":\"b\"}}",
	             0);
	expect_bad(p, -EBADMSG, "__metadata__ appears twice", NULL, NULL);
	p = write_st("dup-meta",
	             "{\"__metadata__\":{\"a\":\"b\"},\"__metadata__\":null}",
	             0);
	expect_bad(p, -EBADMSG, "__metadata__ appears twice", NULL, NULL);
	{
		gpufile_safetensors_t *st;

		p = write_st("dup-unknown",
		             "{\"__metadata__\":null,\"w\":{\"x\":1,\"dtype\":"
		             "\"U8\",\"x\":2,\"shape\":[1],\"data_offsets\":"
		             "[0,1]}}",
		             1);
		st = expect_ok(p);
		if (st) {
			CHECK_EQ(gpufile_safetensors_count(st), 1);
			CHECK_EQ(gpufile_safetensors_metadata_count(st), 0);
			gpufile_safetensors_close(st);
		}
	}

	/* A missing file: the error of opening it, naming it. */
	expect_bad(test_path("no-such-file"), -ENOENT, "no-such-file", NULL,
	           NULL);
}

/* One U8 tensor "w" with the given shape and data_offsets JSON text. */
#define ENTRY(shape, offs)                                                     \
	"{\"w\":{\"dtype\":\"U8\",\"shape\":" shape ",\"data_offsets\":" offs  \
	"}}"

/* JSON as RFC 8259 and the reference (serde_json) read it, where cJSON
 * alone is laxer; and no \u0000, which C strings cannot hold. */
static void test_strict_json(void)
{
	gpufile_safetensors_t *st;
	gpufile_safetensors_tensor_t t;
	const char *p;

	/* Between tokens: space, tab, LF, CR only. */
	p = write_st("ctl-ws", "{\x01\"w\":" ENTRY("[1]", "[0,1]") "}", 1);
	expect_bad(p, -EBADMSG, "header byte 1 is 0x01", "control character",
	           NULL);
	p = write_st("ctl-pad", ENTRY("[1]", "[0,1]") "\x0b\x0c", 1);
	expect_bad(p, -EBADMSG, "is 0x0b", "control character", NULL);
	p = write_st("ctl-in-entry",
	             "{\"w\":{\"dtype\":\"U8\",\x1f\"shape\":[1],"
	             "\"data_offsets\":[0,1]}}",
	             1);
	expect_bad(p, -EBADMSG, "header byte 19 (tensor \"w\") is 0x1f", NULL,
	           NULL);
	/* Inside strings: no raw control character. */
	p = write_st("ctl-in-name",
	             "{\"ab\ncd\":{\"dtype\":\"U8\",\"shape\":[1],"
	             "\"data_offsets\":[0,1]}}",
	             1);
	expect_bad(p, -EBADMSG, "header byte 4", "raw control character 0x0a",
	           "string \"ab\"");
	p = write_st("bom", "\xef\xbb\xbf{}", 0);
	expect_bad(p, -EBADMSG, "header byte 0", "byte-order mark", NULL);

	/* Numbers as RFC 8259 writes them, wherever they are. */
	p = write_st("num-lead0",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
	             "\"data_offsets\":[0,1],\"extra\":04}}",
	             1);
	expect_bad(p, -EBADMSG, "04 is not a JSON number",
	           "(tensor \"w\", field \"extra\")", NULL);
	p = write_st("num-dot",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
	             "\"data_offsets\":[0,1],\"extra\":[1.]}}",
	             1);
	expect_bad(p, -EBADMSG, "1. is not a JSON number", NULL, NULL);
	p = write_st("num-neg-dot",
	             "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
	             "\"data_offsets\":[0,1],\"extra\":-.5}}",
	             1);
	expect_bad(p, -EBADMSG, "-.5 is not a JSON number", NULL, NULL);

	/* shape and data_offsets: plain integers (serde's usize), below
	 * 2^53 (cJSON's double). */
	p = write_st("dims-float", ENTRY("[4.0]", "[0,4]"), 4);
	expect_bad(p, -EBADMSG, "tensor \"w\": shape[0] is 4.0",
	           "not an integer in [0, 2^53)", "header byte 28");
	p = write_st("dims-lead0", ENTRY("[1,04]", "[0,4]"), 4);
	expect_bad(p, -EBADMSG, "tensor \"w\": shape[1] is 04", NULL, NULL);
	p = write_st("dims-exp", ENTRY("[4]", "[0,4e0]"), 4);
	expect_bad(p, -EBADMSG, "tensor \"w\": data_offsets[1] is 4e0", NULL,
	           NULL);
	p = write_st("dims-negzero", ENTRY("[4]", "[-0,4]"), 4);
	expect_bad(p, -EBADMSG, "tensor \"w\": data_offsets[0] is -0", NULL,
	           NULL);
	/* Once printed as "[0,null]": the text itself is named now. */
	p = write_st("dims-inf", ENTRY("[4]", "[0,1e400]"), 4);
	expect_bad(p, -EBADMSG, "tensor \"w\": data_offsets[1] is 1e400", NULL,
	           NULL);
	/* A key spelled with an escape is still the field. */
	p = write_st("dims-escaped-key",
	             "{\"w\":{\"dtype\":\"U8\",\"sh\\u0061pe\":[1.0],"
	             "\"data_offsets\":[0,1]}}",
	             1);
	expect_bad(p, -EBADMSG, "tensor \"w\": shape[0] is 1.0", NULL, NULL);
	/* 2^53 + 1 would read as 2^53; neither is taken, 2^53 - 1 is. */
	p = write_st("dims-2p53", ENTRY("[0,9007199254740992]", "[0,0]"), 0);
	expect_bad(p, -EBADMSG, "shape[1] is 9007199254740992", "2^53", NULL);
	p = write_st("dims-2p53+1", ENTRY("[0,9007199254740993]", "[0,0]"), 0);
	expect_bad(p, -EBADMSG, "shape[1] is 9007199254740993", "2^53", NULL);
	p = write_st("dims-2p53-1", ENTRY("[0,9007199254740991]", "[0,0]"), 0);
	st = expect_ok(p);
	if (st) {
		CHECK_EQ(gpufile_safetensors_tensor(st, 0, &t), 0);
		CHECK_EQ(t.shape[1], 9007199254740991ull);
		gpufile_safetensors_close(st);
	}

	/* \u0000: "a\u0000x" and "a\u0000y" were both "a"; a key
	 * "__metadata__\u0000x" was the metadata. */
	p = write_st("nul-names",
	             "{\"a\\u0000x\":{\"dtype\":\"U8\",\"shape\":[1],"
	             "\"data_offsets\":[0,1]},\"a\\u0000y\":{\"dtype\":\"U8\","
	             "\"shape\":[1],\"data_offsets\":[1,2]}}",
	             2);
	expect_bad(p, -EBADMSG, "header byte 3", "string \"a\\u0000\"", "NUL");
	/* cJSON read a \u without 4 hex digits as U+0000 too: "a\uZZZZx"
	 * was the name "a". */
	p = write_st("bad-u-escape",
	             "{\"a\\uZZZZx\":{\"dtype\":\"U8\",\"shape\":[1],"
	             "\"data_offsets\":[0,1]}}",
	             1);
	expect_bad(p, -EBADMSG, "header byte 3", "string \"a\\u\"",
	           "4 hex digits");
	p = write_st("short-u-escape", "{\"__metadata__\":{\"k\":\"v\\u12\"}}",
	             0);
	expect_bad(p, -EBADMSG, "(__metadata__ key \"k\")", "4 hex digits",
	           NULL);
	p = write_st("nul-meta-name",
	             "{\"__metadata__\\u0000x\":{\"a\":\"b\"}}", 0);
	expect_bad(p, -EBADMSG, "string \"__metadata__\\u0000\"", "NUL", NULL);
	p = write_st("nul-meta-key", "{\"__metadata__\":{\"k\\u0000\":\"v\"}}",
	             0);
	expect_bad(p, -EBADMSG, "(__metadata__)", "string \"k\\u0000\"", NULL);
	p = write_st("nul-meta-value",
	             "{\"__metadata__\":{\"k\":\"v\\u0000\"}}", 0);
	expect_bad(p, -EBADMSG, "(__metadata__ key \"k\")",
	           "string \"v\\u0000\"", NULL);

	/* What JSON allows stays allowed: tab, CR and LF between tokens, an
	 * escaped backslash before "u0000", escaped control characters, and
	 * any valid number outside shape and data_offsets. */
	p = write_st("strict-ok",
	             "\t{\r\n\"w\\\\u0000\" : {\"dtype\":\"U8\",\"shape\":[1],"
	             "\"data_offsets\":[0,1],\"extra\":[-0,1.5e-3,0,-1E+2],"
	             "\"note\":\"\\u0001\\n\"}}\n\r\t ",
	             1);
	st = expect_ok(p);
	if (st) {
		CHECK(gpufile_safetensors_find(st, "w\\u0000") == 0);
		gpufile_safetensors_close(st);
	}
}

/* Tensor t of st has dtype, ndim and shape[0] (when ndim > 0) and
 * [begin, end). */
static void expect_tensor(gpufile_safetensors_t *st, const char *name,
                          const char *dtype, int ndim, uint64_t dim0,
                          uint64_t begin, uint64_t end)
{
	gpufile_safetensors_tensor_t t;
	int i = gpufile_safetensors_find(st, name);

	CHECK(i >= 0);
	if (i < 0)
		return;
	CHECK_EQ(gpufile_safetensors_tensor(st, i, &t), 0);
	CHECK(strcmp(t.dtype, dtype) == 0);
	CHECK_EQ(t.ndim, ndim);
	if (ndim > 0)
		CHECK_EQ(t.shape[0], dim0);
	CHECK_EQ(t.begin, begin);
	CHECK_EQ(t.end, end);
}

/* JSON nested depth levels deep (the root object counts one), in an
 * unknown field of tensor "w"; the caller frees it. */
static char *nested_json(int depth)
{
	static const char head[] = "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
	                           "\"data_offsets\":[0,1],\"x\":";
	size_t inner = (size_t)depth - 2, at = sizeof(head) - 1;
	char *j = test_malloc(at + 2 * inner + 3);

	memcpy(j, head, at);
	memset(j + at, '[', inner);
	memset(j + at + inner, ']', inner);
	strcpy(j + at + 2 * inner, "}}");
	return j;
}

/* What the reference (safetensors 0.8: serde_json reading the header
 * through a flattened map, so every value is read) refuses, gpufile
 * refuses too; the three odd forms it accepts are accepted (issue 34,
 * the decisions in gpufile_safetensors_open(3)). */
static void test_reference_forms(void)
{
	static const char *const too_big[] = {
	    "1e400",
	    "-1e400",
	    "1.8e308",
	    "1.797693134862315e308",
	    "0.001e312",
	    "1e99999999999999999999",
	    "1000000000000000000000000000000000000000000000000000000000000000"
	    "0000000000000000000000000000000000000000000000000000000000000000"
	    "0000000000000000000000000000000000000000000000000000000000000000"
	    "0000000000000000000000000000000000000000000000000000000000000000"
	    "0000000000000000000000000000000000000000000000000000000000000000"
	    "0000000000"};
	static const char *const fine[] = {"1e308",
	                                   "1.79769313486231e308",
	                                   "0.001e311",
	                                   "1e-400",
	                                   "0e400",
	                                   "-0.0e99999999999999999999",
	                                   "18446744073709551616",
	                                   "1e-99999999999999999999"};
	gpufile_safetensors_t *st;
	char json[1024];
	const char *p;
	char *deep;

	/* A number too large for a double, in an unknown field or at the
	 * top level: serde_json's "number out of range". */
	for (size_t i = 0; i < sizeof(too_big) / sizeof(too_big[0]); i++) {
		snprintf(json, sizeof(json),
		         "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
		         "\"data_offsets\":[0,1],\"x\":[%s]}}",
		         too_big[i]);
		p = write_st("num-too-big", json, 1);
		expect_bad(p, -EBADMSG, "(tensor \"w\", field \"x\")",
		           "too large for a double", NULL);
	}
	p = write_st("num-too-big-top", "{\"__metadata__\":null,\"x\":1e400}",
	             0);
	expect_bad(p, -EBADMSG, "1e400 is too large for a double", NULL, NULL);
	for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
		snprintf(json, sizeof(json),
		         "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],"
		         "\"data_offsets\":[0,1],\"x\":%s}}",
		         fine[i]);
		p = write_st("num-fine", json, 1);
		st = expect_ok(p);
		gpufile_safetensors_close(st);
	}

	/* Nesting: 127 levels (the root object included) in an unknown
	 * field pass, 128 do not (serde_json's recursion limit). */
	deep = nested_json(127);
	p = write_st("nest-127", deep, 1);
	free(deep);
	st = expect_ok(p);
	gpufile_safetensors_close(st);
	deep = nested_json(128);
	p = write_st("nest-128", deep, 1);
	free(deep);
	expect_bad(p, -EBADMSG, "nested deeper than 127 levels", NULL, NULL);

	/* A name given twice: the last entry wins, as in the reference's
	 * HashMap; three times too; and one whose earlier entry is not a
	 * valid entry is refused (stricter than the reference). */
	p = write_st("dup-last",
	             "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],"
	             "\"data_offsets\":[0,2]},\"b\":{\"dtype\":\"U8\","
	             "\"shape\":[1],\"data_offsets\":[2,3]},\"a\":{\"dtype\":"
	             "\"I8\",\"shape\":[2],\"data_offsets\":[0,2]},\"a\":{"
	             "\"dtype\":\"I16\",\"shape\":[1],\"data_offsets\":[0,2]}}",
	             3);
	st = expect_ok(p);
	if (st) {
		CHECK_EQ(gpufile_safetensors_count(st), 2);
		expect_tensor(st, "a", "I16", 1, 1, 0, 2);
		expect_tensor(st, "b", "U8", 1, 1, 2, 3);
		gpufile_safetensors_close(st);
	}
	p = write_st("dup-bad-first",
	             "{\"a\":{\"dtype\":\"Q9\",\"shape\":[1],"
	             "\"data_offsets\":[0,1]},\"a\":{\"dtype\":\"U8\","
	             "\"shape\":[1],\"data_offsets\":[0,1]}}",
	             1);
	expect_bad(p, -EBADMSG, "dtype \"Q9\" is unknown", NULL, NULL);

	/* An entry as an array: [dtype, shape, data_offsets], exactly. */
	p = write_st("entry-array",
	             "{\"a\":[\"F32\",[2],[0,8]],\"b\":{\"dtype\":\"U8\","
	             "\"shape\":[],\"data_offsets\":[8,9]}}",
	             9);
	st = expect_ok(p);
	if (st) {
		expect_tensor(st, "a", "F32", 1, 2, 0, 8);
		expect_tensor(st, "b", "U8", 0, 0, 8, 9);
		gpufile_safetensors_close(st);
	}
	p = write_st("entry-array-2", "{\"a\":[\"U8\",[1]]}", 1);
	expect_bad(p, -EBADMSG, "tensor \"a\": entry [\"U8\",[1]] is an array",
	           "not [dtype, shape, data_offsets]", NULL);
	p = write_st("entry-array-4", "{\"a\":[\"U8\",[1],[0,1],[]]}", 1);
	expect_bad(p, -EBADMSG, "is an array", "not [dtype, shape", NULL);
	p = write_st("entry-array-order", "{\"a\":[[1],\"U8\",[0,1]]}", 1);
	expect_bad(p, -EBADMSG, "tensor \"a\": dtype [1] is not a string", NULL,
	           NULL);
	/* Its numbers have no field name for the lexical check: still plain
	 * integers below 2^53 (18446744073709551617 once wrapped to 1). */
	p = write_st("entry-array-wrap",
	             "{\"a\":[\"U8\",[18446744073709551617],[0,1]]}", 1);
	expect_bad(p, -EBADMSG, "shape[0] is 18446744073709551617",
	           "not an integer in [0, 2^53)", NULL);
	p = write_st("entry-array-float", "{\"a\":[\"U8\",[1],[0,1.0]]}", 1);
	expect_bad(p, -EBADMSG, "data_offsets [0,1.0] is not", NULL, NULL);

	/* A dtype as serde's map form of a unit variant: {"U8": null}
	 * only. */
	p = write_st(
	    "dtype-map",
	    "{\"a\":{\"dtype\": { \"U\\u0038\" : null } ,\"shape\":[1],"
	    "\"data_offsets\":[0,1]},\"b\":[{\"I8\":null},[1],[1,2]]}",
	    2);
	st = expect_ok(p);
	if (st) {
		expect_tensor(st, "a", "U8", 1, 1, 0, 1);
		expect_tensor(st, "b", "I8", 1, 1, 1, 2);
		gpufile_safetensors_close(st);
	}
	p = write_st("dtype-map-1",
	             "{\"a\":{\"dtype\":{\"U8\":1},\"shape\":[1],"
	             "\"data_offsets\":[0,1]}}",
	             1);
	expect_bad(p, -EBADMSG, "dtype {\"U8\":1} is not a string", NULL, NULL);
	p = write_st(
	    "dtype-map-2",
	    "{\"a\":{\"dtype\":{\"U8\":null,\"I8\":null},\"shape\":[1],"
	    "\"data_offsets\":[0,1]}}",
	    1);
	expect_bad(p, -EBADMSG, "is not a string (or {\"NAME\": null})", NULL,
	           NULL);
	p = write_st("dtype-map-unknown",
	             "{\"a\":{\"dtype\":{\"Q9\":null},\"shape\":[1],"
	             "\"data_offsets\":[0,1]}}",
	             1);
	expect_bad(p, -EBADMSG, "dtype \"Q9\" is unknown", NULL, NULL);
}

/* The header of the well-formed file below: a scalar, an empty tensor,
 * tensors of several dtypes, in no particular key order; data 0..63. */
static const char good_json[] =
    "{\"__metadata__\":{\"format\":\"pt\",\"note\":\"h\\u00e9\"},"
    "\"w.f32\":{\"dtype\":\"F32\",\"shape\":[2,4],\"data_offsets\":[0,32]},"
    "\"b.bf16\":{\"dtype\":\"BF16\",\"shape\":[3,2],\"data_offsets\":[32,44]},"
    "\"empty\":{\"dtype\":\"F16\",\"shape\":[0,5],\"data_offsets\":[44,44]},"
    "\"s.i64\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[44,52]},"
    "\"m.bool\":{\"dtype\":\"BOOL\",\"shape\":[3],\"data_offsets\":[52,55]},"
    "\"e.f8\":{\"dtype\":\"F8_E4M3\",\"shape\":[1,1],"
    "\"data_offsets\":[55,56]},"
    "\"q.f4\":{\"dtype\":\"F4\",\"shape\":[4,4],\"data_offsets\":[56,64]}}"
    "      ";
#define GOOD_DATA 64

static void test_accessors(const char *p)
{
	gpufile_safetensors_t *st = NULL;
	gpufile_safetensors_tensor_t t;
	const char *k, *v;
	int i;

	CHECK_EQ(gpufile_safetensors_open(&st, p), 0);
	if (!st)
		return;
	CHECK_EQ(gpufile_safetensors_count(st), 7);
	CHECK_EQ(gpufile_safetensors_data_offset(st), 8 + strlen(good_json));
	CHECK_EQ(gpufile_safetensors_data_size(st), GOOD_DATA);
	CHECK(gpufile_safetensors_handle(st) != NULL);

	/* Indexed in offset order: w.f32 first, q.f4 last. */
	CHECK_EQ(gpufile_safetensors_tensor(st, 0, &t), 0);
	CHECK(strcmp(t.name, "w.f32") == 0);
	CHECK_EQ(gpufile_safetensors_tensor(st, 6, &t), 0);
	CHECK(strcmp(t.name, "q.f4") == 0);
	CHECK_EQ(t.dtype_bits, 4);

	i = gpufile_safetensors_find(st, "b.bf16");
	CHECK(i >= 0);
	CHECK_EQ(gpufile_safetensors_tensor(st, i, &t), 0);
	CHECK(strcmp(t.dtype, "BF16") == 0);
	CHECK_EQ(t.ndim, 2);
	CHECK_EQ(t.shape[0], 3);
	CHECK_EQ(t.shape[1], 2);
	CHECK_EQ(t.begin, 32);
	CHECK_EQ(t.end, 44);
	CHECK_EQ(t.file_offset, 8 + strlen(good_json) + 32);
	CHECK(strcmp(gpufile_safetensors_dtype_name(t.dtype_order), "BF16") ==
	      0);

	i = gpufile_safetensors_find(st, "s.i64");
	CHECK_EQ(gpufile_safetensors_tensor(st, i, &t), 0);
	CHECK_EQ(t.ndim, 0);
	CHECK_EQ(t.end - t.begin, 8);

	CHECK_EQ(gpufile_safetensors_find(st, "nope"), -ENOENT);
	CHECK_CONTAINS(gpufile_errmsg(), "\"nope\"");
	CHECK_CONTAINS(gpufile_errmsg(), p);
	CHECK_EQ(gpufile_safetensors_tensor(st, 7, &t), -EINVAL);
	CHECK_EQ(gpufile_safetensors_tensor(st, -1, &t), -EINVAL);

	/* The whole table in one call equals the per-index accessor, stops
	 * at the last tensor, and refuses a start past the end. */
	{
		gpufile_safetensors_tensor_t all[9], one;

		memset(all, 0, sizeof(all));
		CHECK_EQ(gpufile_safetensors_tensors(st, 0, 9, all), 7);
		for (int j = 0; j < 7; j++) {
			CHECK_EQ(gpufile_safetensors_tensor(st, j, &one), 0);
			CHECK(strcmp(all[j].name, one.name) == 0);
			CHECK(all[j].shape == one.shape);
			CHECK_EQ(all[j].ndim, one.ndim);
			CHECK_EQ(all[j].begin, one.begin);
			CHECK_EQ(all[j].end, one.end);
			CHECK_EQ(all[j].dtype_order, one.dtype_order);
			CHECK_EQ(all[j].file_offset, one.file_offset);
		}
		CHECK(all[7].name == NULL);
		CHECK_EQ(gpufile_safetensors_tensors(st, 5, 9, all), 2);
		CHECK(strcmp(all[1].name, "q.f4") == 0);
		CHECK_EQ(gpufile_safetensors_tensors(st, 6, 1, all), 1);
		CHECK(strcmp(all[0].name, "q.f4") == 0);
		CHECK_EQ(gpufile_safetensors_tensors(st, 7, 3, all), 0);
		CHECK_EQ(gpufile_safetensors_tensors(st, 8, 1, all), -EINVAL);
		CHECK_CONTAINS(gpufile_errmsg(), p);
		CHECK_EQ(gpufile_safetensors_tensors(st, -1, 1, all), -EINVAL);
		CHECK_EQ(gpufile_safetensors_tensors(st, 0, -1, all), -EINVAL);
		CHECK_EQ(gpufile_safetensors_tensors(st, 0, 1, NULL), -EINVAL);
		CHECK_EQ(gpufile_safetensors_tensors(NULL, 0, 1, all), -EINVAL);
	}

	CHECK_EQ(gpufile_safetensors_has_metadata(st), 1);
	CHECK_EQ(gpufile_safetensors_metadata_count(st), 2);
	CHECK_EQ(gpufile_safetensors_metadata(st, 1, &k, &v), 0);
	CHECK(strcmp(k, "note") == 0 && strcmp(v, "h\xc3\xa9") == 0);
	CHECK(strcmp(gpufile_safetensors_metadata_get(st, "format"), "pt") ==
	      0);
	CHECK(gpufile_safetensors_metadata_get(st, "absent") == NULL);
	CHECK_EQ(gpufile_safetensors_metadata(st, 2, &k, &v), -EINVAL);

	CHECK_EQ(gpufile_safetensors_dtype_bits("F8_E5M2"), 8);
	CHECK_EQ(gpufile_safetensors_dtype_bits("C64"), 64);
	CHECK_EQ(gpufile_safetensors_dtype_bits("F8_E4M3FNUZ"), 8);
	CHECK_EQ(gpufile_safetensors_dtype_bits("F6_E3M2"), 6);
	CHECK_EQ(gpufile_safetensors_dtype_bits("X"), -ENOENT);
	CHECK(gpufile_safetensors_dtype_name(0) &&
	      strcmp(gpufile_safetensors_dtype_name(0), "BOOL") == 0);
	CHECK(gpufile_safetensors_dtype_name(100) == NULL);
	CHECK_EQ(gpufile_safetensors_close(st), 0);
	CHECK_EQ(gpufile_safetensors_close(NULL), 0);
}

static uint64_t host_ops(void)
{
	gpufile_stats_t s;

	GPUFILE_INIT(s);
	gpufile_stats_self(&s);
	return s.path[GPUFILE_PATH_HOST][0].ops;
}

static void test_host_loads(const char *p)
{
	gpufile_safetensors_t *st = NULL;
	unsigned char buf[GOOD_DATA + 16];
	unsigned char *sep[7];
	void *dsts[7];
	int idx[7];
	uint64_t ops;

	CHECK_EQ(gpufile_safetensors_open(&st, p), 0);
	if (!st)
		return;
	/* The whole data section, byte for byte, in one request. */
	memset(buf, 0xee, sizeof(buf));
	ops = host_ops();
	CHECK_EQ(gpufile_safetensors_load(st, buf, sizeof(buf)), GOOD_DATA);
	CHECK_EQ(host_ops() - ops, 1);
	CHECK_EQ(test_mismatch(buf, GOOD_DATA, SEED, 0), -1);
	CHECK_EQ(test_mismatch_byte(buf + GOOD_DATA, 16, 0xee), -1);
	CHECK_EQ(gpufile_safetensors_load(st, buf, GOOD_DATA - 1), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "smaller than the data section");

	/* Each tensor into its own buffer: one read per non-empty tensor,
	 * whatever the order of the request. */
	for (int i = 0; i < 7; i++) {
		gpufile_safetensors_tensor_t t;

		idx[i] = 6 - i;
		gpufile_safetensors_tensor(st, idx[i], &t);
		sep[i] = test_malloc(t.end - t.begin + 1);
		dsts[i] = t.end > t.begin ? sep[i] : NULL;
	}
	ops = host_ops();
	CHECK_EQ(gpufile_safetensors_load_tensors(st, 7, idx, dsts), GOOD_DATA);
	CHECK_EQ(host_ops() - ops, 6);
	for (int i = 0; i < 7; i++) {
		gpufile_safetensors_tensor_t t;

		gpufile_safetensors_tensor(st, idx[i], &t);
		CHECK_EQ(test_mismatch(sep[i], t.end - t.begin, SEED, t.begin),
		         -1);
	}

	/* Destinations laid out as in the file: coalesced into one read. */
	memset(buf, 0, sizeof(buf));
	for (int i = 0; i < 7; i++) {
		gpufile_safetensors_tensor_t t;

		gpufile_safetensors_tensor(st, i, &t);
		idx[i] = i;
		dsts[i] = buf + t.begin;
	}
	ops = host_ops();
	CHECK_EQ(gpufile_safetensors_load_tensors(st, 7, idx, dsts), GOOD_DATA);
	CHECK_EQ(host_ops() - ops, 1);
	CHECK_EQ(test_mismatch(buf, GOOD_DATA, SEED, 0), -1);

	/* Bad requests name what is wrong. */
	idx[0] = 7;
	CHECK_EQ(gpufile_safetensors_load_tensors(st, 1, idx, dsts), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "tensor index 7");
	idx[0] = 0;
	dsts[0] = NULL;
	CHECK_EQ(gpufile_safetensors_load_tensors(st, 1, idx, dsts), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "tensor \"w.f32\"");
	CHECK_EQ(gpufile_safetensors_load_tensors(st, 0, idx, dsts), 0);
	for (int i = 0; i < 7; i++)
		free(sep[i]);
	CHECK_EQ(gpufile_safetensors_close(st), 0);
}

/* A file cut short after it was opened: an error, not garbage. */
static void test_truncated_after_open(void)
{
	const char *p = write_st("cut", good_json, GOOD_DATA);
	gpufile_safetensors_t *st = NULL;
	unsigned char buf[GOOD_DATA];
	ssize_t n;

	CHECK_EQ(gpufile_safetensors_open(&st, p), 0);
	if (!st)
		return;
	CHECK_EQ(truncate(p, (off_t)(8 + strlen(good_json) + 10)), 0);
	n = gpufile_safetensors_load(st, buf, sizeof(buf));
	CHECK_EQ(n, -EIO);
	CHECK_CONTAINS(gpufile_errmsg(), p);
	CHECK_CONTAINS(gpufile_errmsg(), "truncated");
	gpufile_safetensors_close(st);
}

/* An empty header ("{}") is a valid file with no tensors. */
static void test_empty_file(void)
{
	const char *p = write_st("empty", "{}      ", 0);
	gpufile_safetensors_t *st = NULL;

	CHECK_EQ(gpufile_safetensors_open(&st, p), 0);
	CHECK_EQ(gpufile_safetensors_count(st), 0);
	CHECK_EQ(gpufile_safetensors_metadata_count(st), 0);
	CHECK_EQ(gpufile_safetensors_load(st, NULL, 0), 0);
	gpufile_safetensors_close(st);
}

/* __metadata__: {} is there (and empty), null and absent are not; a key
 * given twice is one entry, in its first place, with its last value (as
 * serde's HashMap and a Python dict have it). */
static void test_metadata(void)
{
	static const struct {
		const char *name, *json;
		int has, count;
	} cases[] = {
	    {"meta-empty", "{\"__metadata__\":{}}", 1, 0},
	    {"meta-null", "{\"__metadata__\":null}", 0, 0},
	    {"meta-absent", "{}", 0, 0},
	    {"meta-dup",
	     "{\"__metadata__\":{\"k\":\"first\",\"j\":\"x\",\"k\":"
	     "\"mid\",\"i\":\"y\",\"k\":\"last\"}}",
	     1, 3},
	};
	const char *k, *v;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		gpufile_safetensors_t *st =
		    expect_ok(write_st(cases[i].name, cases[i].json, 0));

		if (!st)
			continue;
		CHECK_EQ(gpufile_safetensors_has_metadata(st), cases[i].has);
		CHECK_EQ(gpufile_safetensors_metadata_count(st),
		         cases[i].count);
		gpufile_safetensors_close(st);
	}
	{
		gpufile_safetensors_t *st = expect_ok(test_path("meta-dup"));

		if (!st)
			return;
		CHECK_EQ(gpufile_safetensors_metadata(st, 0, &k, &v), 0);
		CHECK(strcmp(k, "k") == 0 && strcmp(v, "last") == 0);
		CHECK_EQ(gpufile_safetensors_metadata(st, 1, &k, &v), 0);
		CHECK(strcmp(k, "j") == 0 && strcmp(v, "x") == 0);
		CHECK_EQ(gpufile_safetensors_metadata(st, 2, &k, &v), 0);
		CHECK(strcmp(k, "i") == 0 && strcmp(v, "y") == 0);
		CHECK(strcmp(gpufile_safetensors_metadata_get(st, "k"),
		             "last") == 0);
		gpufile_safetensors_close(st);
	}
	CHECK_EQ(gpufile_safetensors_has_metadata(NULL), -EINVAL);
}

/* Into fake device memory: through the bounce buffers, counted there. */
static void test_device_load(void)
{
	/* One 6 MiB tensor (several tasks) and a small one. */
	char json[256];
	const char *p;
	gpufile_safetensors_t *st = NULL;
	gpufile_stats_t before, after;
	size_t big = 6u << 20;

	snprintf(json, sizeof(json),
	         "{\"big\":{\"dtype\":\"U16\",\"shape\":[%zu],"
	         "\"data_offsets\":[0,%zu]},\"tail\":{\"dtype\":\"U8\","
	         "\"shape\":[5],\"data_offsets\":[%zu,%zu]}}",
	         big / 2, big, big, big + 5);
	p = write_st("device", json, big + 5);
	CHECK_EQ(gpufile_safetensors_open(&st, p), 0);
	if (!st)
		return;
	memset(dev_base, 0, DEV_SIZE);
	GPUFILE_INIT(before);
	gpufile_stats_self(&before);
	CHECK_EQ(gpufile_safetensors_load(st, dev_base, DEV_SIZE), big + 5);
	GPUFILE_INIT(after);
	gpufile_stats_self(&after);
	CHECK_EQ(test_mismatch(dev_base, big + 5, SEED, 0), -1);
	CHECK_EQ(after.path[GPUFILE_PATH_POSIX][0].bytes -
	             before.path[GPUFILE_PATH_POSIX][0].bytes,
	         big + 5);
	CHECK_EQ(bad_copies, 0);
	gpufile_safetensors_close(st);
}

/* On a machine with GPUs: the data section into device memory of every
 * GPU, all GPUs at once (one thread each, so several contexts are in use
 * in one process), compared byte for byte after copying back. */
struct gpu_job {
	const gpufile_safetensors_t *st;
	int device;
	ssize_t got;
	long long mismatch;
	char msg[256];
};

static void *gpu_job_run(void *arg)
{
	struct gpu_job *j = arg;
	size_t len = (size_t)gpufile_safetensors_data_size(j->st);
	unsigned char *host = test_malloc(len);
	void *dev = NULL;

	j->mismatch = -2;
	if (gpufile_device_alloc(j->device, len, &dev) != 0) {
		snprintf(j->msg, sizeof(j->msg), "%s", gpufile_errmsg());
		j->got = -1;
		free(host);
		return NULL;
	}
	j->got = gpufile_safetensors_load(j->st, dev, len);
	if (j->got < 0)
		snprintf(j->msg, sizeof(j->msg), "%s", gpufile_errmsg());
	else if (gpufile_memcpy(host, dev, len) == 0)
		j->mismatch = test_mismatch(host, len, SEED, 0);
	gpufile_device_free(dev);
	free(host);
	return NULL;
}

static int test_real_gpus(void)
{
	size_t big = 24u << 20;
	char json[256];
	gpufile_safetensors_t *st = NULL;
	int n = gpufile_cuda_device_count();
	struct gpu_job jobs[GPUFILE_MAX_GPUS];
	pthread_t th[GPUFILE_MAX_GPUS];
	const char *p;

	if (n <= 0)
		return 0;
	if (n > GPUFILE_MAX_GPUS)
		n = GPUFILE_MAX_GPUS;
	snprintf(json, sizeof(json),
	         "{\"w\":{\"dtype\":\"BF16\",\"shape\":[%zu],"
	         "\"data_offsets\":[0,%zu]}}",
	         big / 2, big);
	p = write_st("gpu", json, big);
	CHECK_EQ(gpufile_safetensors_open(&st, p), 0);
	if (!st)
		return n;
	for (int i = 0; i < n; i++) {
		jobs[i] = (struct gpu_job){.st = st, .device = i};
		CHECK_EQ(pthread_create(&th[i], NULL, gpu_job_run, &jobs[i]),
		         0);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		if (jobs[i].got != (ssize_t)big)
			fprintf(stderr, "GPU %d: %s\n", i, jobs[i].msg);
		CHECK_EQ(jobs[i].got, big);
		CHECK_EQ(jobs[i].mismatch, -1);
	}
	fprintf(stderr, "real GPUs: loaded on %d GPU(s) at once\n", n);
	gpufile_safetensors_close(st);
	return n;
}

/* Runs the CLI's load subcommand (GPUFILE_CLI) with args; returns its
 * exit status and its stdout and stderr, spaces removed, in out. */
static int cli_load(const char *args, char *out, size_t len)
{
	const char *cli = getenv("GPUFILE_CLI");
	char cmd[2048];
	size_t n = 0;
	int c, status;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "%s load %s 2>&1", cli, args);
	f = popen(cmd, "r");
	if (!f)
		return -1;
	while ((c = fgetc(f)) != EOF)
		if (c != ' ' && c != '\n' && n + 1 < len)
			out[n++] = (char)c;
	out[n] = '\0';
	status = pclose(f);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_cli(const char *good)
{
	const char *cli = getenv("GPUFILE_CLI");
	char args[1024], out[16384];

	if (!cli || access(cli, X_OK) != 0) {
		fprintf(stderr, "no CLI (GPUFILE_CLI): CLI part skipped\n");
		return;
	}
	snprintf(args, sizeof(args), "'%s' '%s' --host --json", good, good);
	CHECK_EQ(cli_load(args, out, sizeof(out)), 0);
	CHECK_CONTAINS(out, "\"target\":\"host\"");
	CHECK_CONTAINS(out, "\"tensors\":14,\"bytes\":128,");
	CHECK_CONTAINS(out, "\"tensors\":7,\"bytes\":64,");
	snprintf(args, sizeof(args), "'%s' --host", good);
	CHECK_EQ(cli_load(args, out, sizeof(out)), 0);
	CHECK_CONTAINS(out, "7tensors,64bytes");
	CHECK_CONTAINS(out, "GB/s");
	/* A malformed file: exit 1 and the library's message. */
	snprintf(args, sizeof(args), "'%s' --host", test_path("overlap"));
	CHECK_EQ(cli_load(args, out, sizeof(out)), 1);
	CHECK_CONTAINS(out, "tensor\"b\":data_offsets[2,6]overlap");
	CHECK_EQ(cli_load("", out, sizeof(out)), 2);
	CHECK_CONTAINS(out, "noFILEgiven");
	CHECK_EQ(cli_load("x --host --device 0", out, sizeof(out)), 2);
}

int main(void)
{
	const char *good;

	test_malformed();
	test_strict_json();
	test_reference_forms();
	good = write_st("good", good_json, GOOD_DATA);
	test_accessors(good);
	test_host_loads(good);
	test_truncated_after_open();
	test_empty_file();
	test_metadata();
	test_cli(good);
	/* Real GPUs (the GPU machine) or the fake driver, not both in one
	 * process: the fake would meet the real driver's contexts. */
	if (test_real_gpus() == 0) {
		if (fake_install())
			return 1;
		test_device_load();
		gpufile_release();
		gpufile__cuda_override(NULL);
		gpufile_config_reset();
		free(dev_base);
	}
	test_cleanup();
	return test_finish("test_safetensors");
}
