/*
 * gpufile bench: bad options exit 2 naming the option and the value; a
 * missing file is laid out with the documented pattern (checked here
 * from the file's bytes); a random read with --verify checks the data (a
 * byte changed in the file, or another --seed, fails naming the offset);
 * --json parses and has every field, its path bytes adding up to the
 * bytes moved; a write with --verify writes the pattern and reads it
 * back; --batch > 1 goes through the batch API (one request per submit,
 * one task per entry); GPU memory with the fake libcuda
 * (tests/fake_libcuda) where it was built.
 */
#define _GNU_SOURCE
#include "testlib.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char out[1 << 16];

/* Runs gpufile ARGS (fmt with file); checks exit status want and that
 * the output holds needle. */
static void expect(int want, const char *needle, const char *fmt,
                   const char *file)
{
	test_cli_expect(out, sizeof(out), want, needle, fmt, file);
}

static void test_options(const char *file)
{
	expect(2, "--rw \"sideways\": use read, write, randread or randwrite",
	       "bench %s --rw sideways", file);
	expect(2, "--bs \"0\": use 1 B to 1 GiB", "bench %s --bs 0", file);
	expect(2, "--bs \"2g\": use 1 B to 1 GiB", "bench %s --bs 2g", file);
	expect(2, "--jobs \"0\": out of range [1, 1024]", "bench %s --jobs 0",
	       file);
	expect(2, "--batch \"65537\": out of range [1, 65536]",
	       "bench %s --batch 65537", file);
	expect(2, "--batch 4 with --rw randwrite: gpufile's batch API reads",
	       "bench %s --rw randwrite --batch 4", file);
	expect(2, "--time \"0\": not a number of seconds", "bench %s --time 0",
	       file);
	expect(2, "--size \"x\": not a size", "bench %s --size x", file);
	expect(2, "--seed \"-1\": not a whole number", "bench %s --seed -1",
	       file);
	expect(2, "--threads \"0\": out of range [1, 1024]",
	       "bench %s --threads 0", file);
	expect(2, "--compat \"maybe\": use auto, on or off",
	       "bench %s --compat maybe", file);
	expect(2, "--host and --device exclude each other",
	       "bench %s --host --device 0", file);
	expect(2, "no FILE given", "bench --host%s", "");
	expect(1, "does not exist: give --file-size B to lay it out",
	       "bench %s.missing --host", file);
	expect(1, "--bs 1048576 is larger than the region",
	       "bench %s --host --bs 1m", file);
}

static uint64_t splitmix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* The file holds the pattern gpufile(1) documents for seed: the 8-byte
 * word at offset 8i is splitmix64(seed ^ splitmix64(i)), little-endian. */
static void check_pattern(const char *file, uint64_t seed, size_t len)
{
	size_t got = 0;
	unsigned char *buf = test_read_file(file, &got);

	CHECK_EQ(got, len);
	for (size_t i = 0; buf && i + 8 <= got; i += 8) {
		uint64_t w = splitmix64(seed ^ splitmix64(i / 8)), v = 0;

		for (int k = 7; k >= 0; k--)
			v = v << 8 | buf[i + (size_t)k];
		if (v != w) {
			fprintf(stderr, "pattern: word at %zu differs\n", i);
			test_failures++;
			break;
		}
	}
	free(buf);
}

static void test_random_verify(const char *file)
{
	int fd;

	unlink(file);
	expect(0, "1048576 laid out with the pattern of seed 1",
	       "bench %s --host --rw randread --bs 4k --size 256k "
	       "--file-size 1m --verify",
	       file);
	CHECK_CONTAINS(out, "verify:   64 blocks checked against the pattern "
	                    "of seed 1: ok");
	CHECK_CONTAINS(out, "done:     64 I/Os, 262144 bytes");
	CHECK_CONTAINS(out, "p50 ");
	CHECK_CONTAINS(out, "p99.9 ");
	CHECK_CONTAINS(out, "  host     64 ops, 64 tasks, 262144 bytes");
	check_pattern(file, 1, 1 << 20);
	/* Another seed's pattern is not in the file. */
	expect(1, "the pattern of seed 2 has",
	       "bench %s --host --rw randread --bs 4k --size 64k --verify "
	       "--seed 2",
	       file);
	/* One byte changed: a read of every block finds it, by offset. */
	fd = open(file, O_WRONLY);
	CHECK(fd >= 0 && pwrite(fd, "\x5a", 1, 700001) == 1);
	if (fd >= 0)
		close(fd);
	expect(1, "gpufile bench: verify: ", "bench %s --host --bs 4k --verify",
	       file);
	CHECK_CONTAINS(out, "the byte at offset 700001 (block at 696320) is "
	                    "0x5a");
}

/* --json is one JSON object (python3 parses it) with every field, and
 * what the paths carried adds up to the bytes moved. */
static void test_json(const char *file)
{
	char args[4096];
	int rc;

	snprintf(args, sizeof(args),
	         "bench %s --host --rw randread --bs 4k --size 128k --json | "
	         "python3 -c 'import json,sys; d=json.load(sys.stdin);"
	         "want=[\"file\",\"region\",\"laid_out\",\"rw\",\"bs\","
	         "\"jobs\",\"batch\",\"target\",\"target_reason\",\"ops\","
	         "\"bytes\",\"seconds\",\"iops\",\"gbps\",\"mib_per_s\","
	         "\"latency_us\",\"verify\",\"paths\",\"cufile\","
	         "\"path_info\",\"settings\",\"version\"];"
	         "miss=[k for k in want if k not in d];"
	         "lat=[k for k in [\"per\",\"count\",\"min\",\"mean\",\"max\","
	         "\"p50\",\"p90\",\"p99\",\"p99.9\"] if k not in "
	         "d[\"latency_us\"]];"
	         "l=d[\"latency_us\"];"
	         "ok=not miss and not lat and d[\"ops\"]==32 and "
	         "d[\"bytes\"]==131072 and d[\"rw\"]==\"randread\" and "
	         "sum(p[\"bytes\"] for p in d[\"paths\"].values())==131072 and "
	         "l[\"count\"]==32 and l[\"min\"]<=l[\"p50\"]<=l[\"p90\"]<="
	         "l[\"p99\"]<=l[\"p99.9\"]<=l[\"max\"] and "
	         "\"reason\" in d[\"path_info\"] and "
	         "\"gpus\" in d[\"cufile\"];"
	         "print(\"json ok\" if ok else (\"json bad\",miss,lat,d))'",
	         file);
	rc = test_cli_run(out, sizeof(out), "%s", args);
	CHECK_EQ(rc, 0);
	CHECK_CONTAINS(out, "json ok");
}

static void test_write_verify(const char *file)
{
	/* Over the seed-1 file: seed 3 written and read back. */
	expect(0, "verify:   16 blocks checked against the pattern of seed 3",
	       "bench %s --host --rw write --bs 64k --seed 3 --verify --jobs 2",
	       file);
	CHECK_CONTAINS(out, "  host     16 ops, 16 tasks, 1048576 bytes");
	check_pattern(file, 3, 1 << 20);
	expect(0, "blocks checked against the pattern of seed 3: ok",
	       "bench %s --host --rw randread --bs 4k --size 64k --seed 3 "
	       "--verify",
	       file);
}

/* Reads in batches of 8: 64 entries in 8 submits, counted by the batch
 * API as one request per submit, one task per entry. */
static void test_batch(const char *file)
{
	expect(0, "latency:  per batch",
	       "bench %s --host --rw randread --bs 4k --size 256k --batch 8 "
	       "--seed 3 --jobs 2 --verify",
	       file);
	CHECK_CONTAINS(out, "verify:   64 blocks checked");
	CHECK_CONTAINS(out, "  host     8 ops, 64 tasks, 262144 bytes");
	CHECK_CONTAINS(out, "batch 8");
	/* Random writes (over seed 3's file), read back. */
	expect(0, "blocks checked against the pattern of seed 4: ok",
	       "bench %s --host --rw randwrite --bs 4k --size 64k --seed 4 "
	       "--verify",
	       file);
}

/* Device memory of the fake GPU: reads (batched too) and writes, with
 * the data checked through copies back to the host. */
static void test_device(const char *file)
{
	char *saved;

	if (test_cli_fake_driver_begin("device", &saved))
		return;
	expect(0, "GPU 0 memory (--device 0 given)",
	       "bench %s --device 0 --rw write --bs 64k --seed 5 --verify",
	       file);
	CHECK_CONTAINS(out, "verify:   16 blocks checked");
	expect(0, "\"blocks_checked\": 64",
	       "bench %s --device 0 --rw randread --bs 4k --size 256k "
	       "--batch 4 --seed 5 --verify --json",
	       file);
	CHECK_CONTAINS(out, "\"target\": \"device:0\"");
	expect(1, "the pattern of seed 6 has",
	       "bench %s --device 0 --rw read --bs 4k --size 64k --seed 6 "
	       "--verify",
	       file);
	test_cli_fake_driver_end(saved);
}

int main(void)
{
	const char *file = test_path("bench");

	if (!test_cli_path()) {
		fprintf(stderr, "no CLI (GPUFILE_CLI): skipped\n");
		return TEST_SKIP;
	}
	if (system("python3 -c 1 2>/dev/null") != 0)
		return test_missing("test_cli_bench", "python3");
	CHECK_EQ(test_make_file(file, 65536, 1), 0);
	test_options(file);
	test_random_verify(file);
	test_json(file);
	test_write_verify(file);
	test_batch(file);
	test_device(file);
	test_cleanup();
	return test_finish("test_cli_bench");
}
