/*
 * The size rule of the structs that grow (include/gpufile.h, "Structs
 * that grow"), for every public function that fills one: the caller's
 * size 0 or too small is -EINVAL naming struct.size, with nothing written;
 * the exact size is filled, and not a byte past it; a larger size (a
 * caller built against a newer header) gets the library's part and zeros
 * beyond it; on return size is the bytes the library filled.
 *
 * Each call gets a buffer of the struct plus two 64-byte tails, all 0xAA,
 * so that a write past the declared size shows as a changed canary.
 */
#include "testlib.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CANARY 0xAA
#define TAIL   64

static char json_path[4096];
static gpufile_cufile_config_t good_cfg; /* explain's cfg input */

/* One function that fills a struct that grows. */
struct sized_case {
	const char *fn;   /* for messages */
	const char *type; /* the struct's name, as the message names it */
	size_t size;      /* sizeof the struct */
	size_t first;     /* its first version's size (0: size) */
	int (*call)(void *out);
	/* Checks a field that the call fills (the buffer started as 0xAA),
	 * so that "filled" is seen, not assumed. */
	void (*check_filled)(const void *out);
};

static int call_stats_self(void *out)
{
	return gpufile_stats_self(out);
}

static int call_stats_read(void *out)
{
	return gpufile_stats_read(getpid(), out);
}

static void filled_stats(const void *out)
{
	const gpufile_stats_t *s = out;

	CHECK_EQ(s->pid, getpid());
	CHECK(s->command[0] != (char)CANARY);
}

static int call_stats_remote(void *out)
{
	return gpufile_stats_remote(0, out);
}

static void filled_remote(const void *out)
{
	const gpufile_remote_stats_t *r = out;

	/* No remote request in this process. */
	CHECK_EQ(r->requests, 0);
	CHECK_EQ(r->status[GPUFILE_REMOTE_STATUS_CLASSES - 1], 0);
}

static int call_cufile_info(void *out)
{
	return gpufile_cufile_info(out);
}

static void filled_cufile_info(const void *out)
{
	const gpufile_cufile_info_t *i = out;

	/* gpufile_cufile_info never loads cuFile, and nothing here did. */
	CHECK_EQ(i->loaded, 0);
	CHECK_EQ(i->ngpus, 0);
}

static int call_config_load(void *out)
{
	int rc = gpufile_cufile_config_load(json_path, out);

	/* A build without cJSON reads the file but cannot parse it. */
	return rc == -ENOTSUP ? 0 : rc;
}

static void filled_config(const void *out)
{
	const gpufile_cufile_config_t *c = out;

	CHECK_EQ(strcmp(c->path_source, "argument"), 0);
	CHECK_EQ(strcmp(c->path, json_path), 0);
}

static int call_explain(void *out)
{
	return gpufile_explain(1 << 20, 0, 0, 0, &good_cfg, out);
}

static void filled_plan(const void *out)
{
	const gpufile_plan_t *p = out;

	CHECK_EQ(p->read_size, 1 << 20);
	/* The embedded configuration is filled by the rule too. */
	CHECK_EQ(p->cufile.size, sizeof(gpufile_cufile_config_t));
	CHECK_EQ(strcmp(p->cufile.path, json_path), 0);
}

static const struct sized_case cases[] = {
    /* gpufile_stats_t grew map_copy_bytes and map_copy_faults. */
    {"gpufile_stats_self", "gpufile_stats_t", sizeof(gpufile_stats_t),
     offsetof(gpufile_stats_t, map_copy_bytes), call_stats_self, filled_stats},
    {"gpufile_stats_read", "gpufile_stats_t", sizeof(gpufile_stats_t),
     offsetof(gpufile_stats_t, map_copy_bytes), call_stats_read, filled_stats},
    {"gpufile_stats_remote", "gpufile_remote_stats_t",
     sizeof(gpufile_remote_stats_t), 0, call_stats_remote, filled_remote},
    {"gpufile_cufile_info", "gpufile_cufile_info_t",
     sizeof(gpufile_cufile_info_t), 0, call_cufile_info, filled_cufile_info},
    {"gpufile_cufile_config_load", "gpufile_cufile_config_t",
     sizeof(gpufile_cufile_config_t), 0, call_config_load, filled_config},
    {"gpufile_explain", "gpufile_plan_t", sizeof(gpufile_plan_t), 0,
     call_explain, filled_plan},
};

/* Counts bytes of buf[from, to) that differ from value. */
static size_t count_not(const unsigned char *buf, size_t from, size_t to,
                        unsigned char value)
{
	size_t n = 0;

	for (size_t i = from; i < to; i++)
		n += buf[i] != value;
	return n;
}

/* A fresh buffer of the struct and two tails, 0xAA, with size declared. */
static unsigned char *canary_buf(const struct sized_case *c, uint32_t declared)
{
	unsigned char *buf = test_malloc(c->size + 2 * TAIL);

	memset(buf, CANARY, c->size + 2 * TAIL);
	memcpy(buf, &declared, sizeof(declared));
	return buf;
}

static uint32_t size_of(const unsigned char *buf)
{
	uint32_t size;

	memcpy(&size, buf, sizeof(size));
	return size;
}

/* A refused size: -EINVAL naming type.size, and not a byte written. */
static void refused(const struct sized_case *c, uint32_t declared)
{
	unsigned char *buf = canary_buf(c, declared);
	char want[128];

	CHECK_EQ(c->call(buf), -EINVAL);
	snprintf(want, sizeof(want), "%s.size is %u", c->type,
	         (unsigned)declared);
	CHECK_CONTAINS(gpufile_errmsg(), want);
	CHECK_CONTAINS(gpufile_errmsg(), c->type);
	CHECK_EQ(size_of(buf), declared);
	CHECK_EQ(count_not(buf, sizeof(uint32_t), c->size + 2 * TAIL, CANARY),
	         0);
	free(buf);
}

static void test_case(const struct sized_case *c)
{
	const size_t first = c->first ? c->first : c->size;
	unsigned char *buf;

	fprintf(stderr, "%s (%s, %zu bytes, first version %zu)\n", c->fn,
	        c->type, c->size, first);
	refused(c, 0);
	CHECK_CONTAINS(gpufile_errmsg(), "set it to sizeof");
	refused(c, 4);
	refused(c, (uint32_t)first - 1);

	/* An older caller's first version: filled to its end, no further. */
	if (first < c->size) {
		buf = canary_buf(c, (uint32_t)first);
		CHECK_EQ(c->call(buf), 0);
		CHECK_EQ(size_of(buf), first);
		c->check_filled(buf);
		CHECK_EQ(count_not(buf, first, c->size + 2 * TAIL, CANARY), 0);
		free(buf);
	}

	/* Exactly the library's size: filled, nothing past it. */
	buf = canary_buf(c, (uint32_t)c->size);
	CHECK_EQ(c->call(buf), 0);
	CHECK_EQ(size_of(buf), c->size);
	c->check_filled(buf);
	CHECK_EQ(count_not(buf, c->size, c->size + 2 * TAIL, CANARY), 0);
	free(buf);

	/* A newer caller's larger struct: the bytes the library does not
	 * know read 0, size says what was filled, and nothing is written
	 * past the declared size. */
	buf = canary_buf(c, (uint32_t)(c->size + TAIL));
	CHECK_EQ(c->call(buf), 0);
	CHECK_EQ(size_of(buf), c->size);
	c->check_filled(buf);
	CHECK_EQ(count_not(buf, c->size, c->size + TAIL, 0), 0);
	CHECK_EQ(count_not(buf, c->size + TAIL, c->size + 2 * TAIL, CANARY), 0);
	free(buf);
}

/* gpufile_explain's cfg input is held to the same rule. */
static void test_explain_cfg(void)
{
	gpufile_cufile_config_t cfg = good_cfg;
	gpufile_plan_t plan;

	GPUFILE_INIT(plan);
	cfg.size = 0;
	CHECK_EQ(gpufile_explain(1 << 20, 0, 0, 0, &cfg, &plan), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "gpufile_cufile_config_t.size is 0");
	cfg.size = 8;
	CHECK_EQ(gpufile_explain(1 << 20, 0, 0, 0, &cfg, &plan), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "gpufile_cufile_config_t.size is 8");
	/* A newer caller's larger cfg is read for the library's part. */
	cfg.size = sizeof(cfg) + TAIL;
	CHECK_EQ(gpufile_explain(1 << 20, 0, 0, 0, &cfg, &plan), 0);
	CHECK_EQ(plan.cufile.size, sizeof(cfg));
	CHECK_EQ(plan.read_size, 1 << 20);
}

/* NULL out stays an error of its own, naming the function. */
static void test_null(void)
{
	CHECK_EQ(gpufile_cufile_info(NULL), -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "gpufile_cufile_info: out is NULL");
	CHECK_EQ(gpufile_stats_remote(0, NULL), -EINVAL);
	CHECK_EQ(gpufile_explain(1, 0, 0, 0, NULL, NULL), -EINVAL);
}

int main(void)
{
	FILE *f;
	int rc;

	snprintf(json_path, sizeof(json_path), "%s",
	         test_path("struct_size.json"));
	f = fopen(json_path, "w");
	CHECK(f != NULL);
	if (!f)
		return test_finish("test_struct_size");
	fputs("{}\n", f);
	fclose(f);
	GPUFILE_INIT(good_cfg);
	rc = gpufile_cufile_config_load(json_path, &good_cfg);
	CHECK(rc == 0 || rc == -ENOTSUP);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		test_case(&cases[i]);
	test_explain_cfg();
	test_null();
	return test_finish("test_struct_size");
}
