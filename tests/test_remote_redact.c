/* Secrets of a URL never leave gpufile: every message, statistic, report
 * and every output of every command of the tool (text and --json) shows a
 * URL through the one redaction (gpufile_redact_url), without its user
 * information, query and fragment, even when a password holds a raw '#',
 * '/', '?' or '@'. Also the URL-sized state of remote.c, against
 * tests/remote/fault_server.py: a 3000-byte URL shown whole, a 300-byte
 * ETag that changes between ranges, an empty object behind a refused
 * HEAD, bytes left after a Content-Length on a kept-alive connection, and
 * S3 keys holding '#' and '?'. An s3:// bucket that could name another
 * host is refused before any request carries the credentials there. */
#include "remote/helpers.h"
#include "testlib.h"

#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/mman.h>
#include <gpufile.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#define SIZE   ((size_t)300001) /* 5 ranges of 64 KiB */
#define SECRET "PLANTED"

static int port;

/* ---- the redaction itself ---- */

struct redact_case {
	const char *url, *shown;
};

static void test_redact_table(void)
{
	static const struct redact_case cases[] = {
	    {"http://h:80/a/b.bin", "http://h:80/a/b.bin"},
	    {"HTTPS://u:PLANTED@h/o", "HTTPS://h/o"},
	    {"http://h/o?X-Amz-Signature=PLANTED&b=2",
	     "http://h/o?<query redacted>"},
	    {"http://h/o#PLANTED", "http://h/o"},
	    {"http://u:PLANTED@h/o?t=PLANTED#PLANTED",
	     "http://h/o?<query redacted>"},
	    {"http://[::1]:8080/o", "http://[::1]:8080/o"},
	    {"http://u:PLANTED@[::1]:8080/o", "http://[::1]:8080/o"},
	    /* A raw '@', '/', '#' or '?' in the password. */
	    {"http://u:PLAN@TED@h:1/o", "http://h:1/o"},
	    {"http://u:PLAN/TED@h:1/o?q=PLANTED",
	     "http://<redacted>@h:1/o?<query redacted>"},
	    {"http://u:PLAN#TED@h:1/o", "http://<redacted>"},
	    {"http://u:PLAN?TED@h:1/o", "http://<redacted>"},
	    {"http://u:12/?#@PLANTED@h/o", "http://<redacted>"},
	    {"http://PLANTED:x/y@h/o", "http://<redacted>@h/o"},
	    /* A host libcurl takes (IDN, UTF-8) after such a password. */
	    {"http://u:PLAN/TED@b\xc3\xbc"
	     "cher.de/o",
	     "http://<redacted>@b\xc3\xbc"
	     "cher.de/o"},
	    /* An '@' in a query that also holds a secret. */
	    {"http://h/o?e=a@b&sig=PLANTED", "http://h/o?<query redacted>"},
	    {"http://h/o?sig=PLANTED@b/c&d=PLANTED", "http://<redacted>"},
	    /* s3://: the key is a name, '?' and '#' included. */
	    {"s3://bkt/hash#frag.bin", "s3://bkt/hash#frag.bin"},
	    {"s3://bkt/q?x=1.bin", "s3://bkt/q?x=1.bin"},
	    {"s3://u:PLANTED@bkt/k", "s3://bkt/k"},
	    /* A secret with a '/' (AWS's often have one) ends the bucket
	     * part early; with a '?', only the first '/' ends it. */
	    {"s3://AKID:PLAN/TED/x@bkt/k", "s3://<redacted>"},
	    {"s3://AKID:PLAN?TED@bkt/k", "s3://bkt/k"},
	    {"s3://AKID:PLAN#TED@bkt/k?x", "s3://bkt/k?x"},
	    {"s3://PLANTED:x@bkt@b/k", "s3://b/k"},
	    /* A bucket part that names no bucket shows nothing. */
	    {"s3://127.0.0.1:9?/PLANTED", "s3://<redacted>"},
	    /* A scheme in any case, as http:// and https:// are. */
	    {"S3://u:PLANTED@bkt/k", "S3://bkt/k"},
	    {"/local/file?x#y", "/local/file?x#y"},
	};
	char out[256];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ssize_t n = gpufile_redact_url(cases[i].url, out, sizeof(out));

		CHECK_EQ(n, (ssize_t)strlen(cases[i].shown));
		if (strcmp(out, cases[i].shown) != 0) {
			fprintf(stderr, "  %s -> %s, want %s\n", cases[i].url,
			        out, cases[i].shown);
			CHECK(0);
		}
		CHECK(!strstr(out, SECRET));
	}
	/* snprintf's contract: the length, the text cut to fit. */
	CHECK_EQ(gpufile_redact_url("http://u:p@host/abc", NULL, 0), 15);
	CHECK_EQ(gpufile_redact_url("http://u:p@host/abc", out, 8), 15);
	CHECK(strcmp(out, "http://") == 0);
	CHECK_EQ(gpufile_redact_url(NULL, out, sizeof(out)), -EINVAL);
	CHECK_EQ(gpufile_redact_url("x", NULL, 4), -EINVAL);
}

/* ---- URL-sized state, against the fault server ---- */

/* A URL of about 3000 bytes (the redacted name was cut at 1024): shown
 * whole by gpufile_filename() and gpufile_remote_info(). */
static void test_long_url(void)
{
	size_t plen = 3000;
	char *url = malloc(plen + 200), *want = malloc(plen + 200);
	char *report = malloc(plen + 1024);
	gpufile_t *h = NULL;
	int n;

	if (!url || !want || !report)
		goto out;
	n = snprintf(want, plen + 200, "http://127.0.0.1:%d/ok/", port);
	memset(want + n, 'p', plen);
	want[n + (int)plen] = '\0';
	snprintf(url, plen + 200, "http://u:" SECRET "@%s?t=" SECRET, want + 7);
	strcat(want, "?<query redacted>");
	CHECK_EQ(gpufile_open(&h, url, "r"), 0);
	if (h) {
		CHECK(strcmp(gpufile_filename(h), want) == 0);
		CHECK_EQ(strlen(gpufile_filename(h)), strlen(want));
		gpufile_close(h);
	}
	CHECK_EQ(gpufile_remote_info(url, report, plen + 1024), 0);
	CHECK_CONTAINS(report, want);
	CHECK(!strstr(report, SECRET));
out:
	free(url);
	free(want);
	free(report);
}

/* A URL longer than INT_MAX: its parts' lengths no longer fit the "%.*s"
 * precision, and a negative one would print it whole, secrets included.
 * Shown as a mark alone. */
static void test_huge_url(void)
{
	size_t len = (size_t)INT_MAX + 16;
	char *url = mmap(NULL, len + 1, PROT_READ | PROT_WRITE,
	                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	char shown[64];
	ssize_t n;

	if (url == MAP_FAILED) {
		fprintf(stderr,
		        "no 2 GiB for the huge URL: its check skipped\n");
		return;
	}
	memset(url, 'a', len);
	memcpy(url, "http://u:" SECRET "@h/", 12 + strlen(SECRET));
	memcpy(url + len - 16, "?X-Amz-Signature", 16);
	url[len] = '\0';
	n = gpufile_redact_url(url, shown, sizeof(shown));
	CHECK(n > 0 && (size_t)n < sizeof(shown));
	CHECK(!strstr(shown, SECRET));
	CHECK(strcmp(shown, "<a URL too long to show>") == 0);
	munmap(url, len + 1);
}

static const char *mode_url(const char *mode, const char *tail)
{
	static char u[512];

	snprintf(u, sizeof(u), "http://127.0.0.1:%d/%s/%s", port, mode, tail);
	return u;
}

/* ETags of 300 bytes that change between ranges (one of 128 or more was
 * dropped, which turned the check off): the read fails, -ESTALE, naming
 * both whole, and writes no byte. */
static void test_long_etag(void)
{
	unsigned char *d = dest_new(SIZE);
	gpufile_t *h = NULL;
	char want[320];

	CHECK_EQ(gpufile_open(&h, mode_url("longetag", "o.bin"), "r"), 0);
	if (!h || !d) {
		dest_free(d);
		return;
	}
	CHECK_EQ(gpufile_pread(h, d, SIZE, 0), -ESTALE);
	CHECK_EQ(dest_bad(d, SIZE, 0, 0), 0);
	for (size_t i = 0; i < SIZE; i++)
		if (d[i] != CANARY) {
			CHECK(0); /* no byte of the other version */
			break;
		}
	/* The old tag whole in the message (it was cut at 48 bytes). */
	want[0] = '"';
	memset(want + 1, 'e', 296);
	snprintf(want + 297, sizeof(want) - 297, "v1\" then");
	CHECK_CONTAINS(gpufile_errmsg(), want);
	gpufile_close(h);
	dest_free(d);
}

/* An empty object whose HEAD is refused, its GET of bytes 0-0 answered
 * 200 with no body: size 0, reads 0 bytes (it failed after 3 attempts,
 * "body ended after 0 of 1 bytes"). Also as a presigned URL (GET only). */
static void test_empty_by_get(void)
{
	const char *tails[] = {"e.bin", "e.bin?X-Amz-Signature=" SECRET};
	unsigned char *d = dest_new(100);

	for (int i = 0; i < 2; i++) {
		gpufile_t *h = NULL;

		CHECK_EQ(gpufile_open(&h, mode_url("emptyget", tails[i]), "r"),
		         0);
		if (!h) {
			fprintf(stderr, "  emptyget: %s\n", gpufile_errmsg());
			continue;
		}
		CHECK_EQ(gpufile_size(h), 0);
		CHECK_EQ(gpufile_pread(h, d, 100, 0), 0);
		CHECK_EQ(dest_bad(d, 100, 0, 0), 0);
		gpufile_close(h);
	}
	dest_free(d);
}

/* Bytes left after a Content-Length on a kept-alive connection: the next
 * range read on it fails ("Received HTTP/0.9"), and is tried again once
 * on a new connection, where it succeeds. */
static void test_leftover_bytes(void)
{
	unsigned char *d = dest_new(SIZE);
	gpufile_remote_stats_t a, b;
	gpufile_t *h = NULL;

	GPUFILE_INIT(a);
	GPUFILE_INIT(b);
	CHECK_EQ(gpufile_config_set("remote_connections", "1"), 0);
	CHECK_EQ(gpufile_open(&h, mode_url("extrabytes", "o.bin"), "r"), 0);
	if (h && d) {
		gpufile_stats_remote(0, &a);
		CHECK_EQ(gpufile_pread(h, d, SIZE, 0), (ssize_t)SIZE);
		gpufile_stats_remote(0, &b);
		CHECK_EQ(dest_bad(d, SIZE, 0, 1), 0);
		if (b.retries == a.retries)
			fprintf(stderr, "  extrabytes: %s\n", gpufile_errmsg());
		/* The first range reuses the connection of the HEAD, which
		 * left nothing; each later one finds leftovers once. */
		CHECK(b.retries - a.retries >= 1);
		CHECK_EQ(b.ranges - a.ranges, 5);
	}
	gpufile_close(h);
	CHECK_EQ(gpufile_config_set("remote_connections", "4"), 0);
	dest_free(d);
}

/* A raw '/' in the user information: libcurl reads the text before it
 * as the host (and port), and its own detail of the failure ("Could not
 * resolve host: X", "Failed to connect to X port N") quoted that piece
 * of the secret: in reads, and (found later) in uploads and WebHDFS. */
static void no_leak(const char *msg)
{
	if (strstr(msg, SECRET) || strstr(msg, "localhost port 1 ")) {
		fprintf(stderr, "  LEAK: %s\n", msg);
		CHECK(0);
	}
}

static void test_curl_detail(void)
{
	const char *forms[] = {"http://" SECRET "/x@127.0.0.1:%d/ok/o.bin",
	                       "http://localhost:1/" SECRET "@127.0.0.1:%d/ok/"
	                       "o.bin"};
	const char *webhdfs_forms[] = {
	    "http://" SECRET "/x@127.0.0.1:%d/webhdfs/v1/f.bin",
	    "http://localhost:1/" SECRET "@127.0.0.1:%d/webhdfs/v1/f.bin"};
	char url[256];

	static const char data[64];

	CHECK_EQ(gpufile_config_set("http_max_attempts", "1"), 0);
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		gpufile_t *h = NULL;

		snprintf(url, sizeof(url), forms[i], port);
		CHECK(gpufile_open(&(gpufile_t *){NULL}, url, "r") < 0);
		no_leak(gpufile_errmsg());
		/* The requests of an upload and of WebHDFS (http.c) too: the
		 * upload's PUT goes at close. */
		CHECK_EQ(gpufile_open(&h, url, "w"), 0);
		if (h) {
			CHECK_EQ(gpufile_pwrite(h, data, sizeof(data), 0),
			         (ssize_t)sizeof(data));
			CHECK(gpufile_close(h) < 0);
			no_leak(gpufile_errmsg());
		}
		snprintf(url, sizeof(url), webhdfs_forms[i], port);
		CHECK(gpufile_open(&(gpufile_t *){NULL}, url, "r") < 0);
		no_leak(gpufile_errmsg());
	}
	CHECK_EQ(gpufile_config_set("http_max_attempts", "3"), 0);
}

/* S3 keys holding '#' and '?' keep them in the handle's name, the
 * statistics and the messages (s3://bkt/hash#frag.bin showed as
 * s3://bkt/hash). */
static void test_s3_key_names(void)
{
	const char *keys[] = {"s3://ok/hash#frag.bin", "s3://ok/q?x=1.bin"};
	gpufile_file_stat_t files[GPUFILE_MAX_FILE_STATS];
	char endpoint[64];
	int nfiles, found;

	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", port);
	setenv("AWS_ENDPOINT_URL", endpoint, 1);
	for (int i = 0; i < 2; i++) {
		gpufile_t *h = NULL;

		CHECK_EQ(gpufile_open(&h, keys[i], "r"), 0);
		if (h) {
			CHECK(strcmp(gpufile_filename(h), keys[i]) == 0);
			gpufile_close(h);
		}
		nfiles = gpufile_stats_files(0, files, GPUFILE_MAX_FILE_STATS);
		found = 0;
		for (int f = 0; f < nfiles; f++)
			found |= strcmp(files[f].path, keys[i]) == 0;
		CHECK(found);
	}
	CHECK_EQ(
	    gpufile_open(&(gpufile_t *){NULL}, "s3://e404/hash#frag.bin", "r"),
	    -ENOENT);
	CHECK_CONTAINS(gpufile_errmsg(), "s3://e404/hash#frag.bin:");
	unsetenv("AWS_ENDPOINT_URL");
}

/* The bucket of an s3:// URL became the start of AWS's host name as it
 * was: s3://127.0.0.1:PORT?/KEY sent the signed HEAD, access key and
 * session token included, to 127.0.0.1:PORT ('#' and '@' alike). Each
 * such bucket is refused (-EINVAL) before anything connects, and the
 * message shows no part of it. A listening socket on loopback stands for
 * the other host: nothing may reach its backlog. */
static void test_s3_bucket_names_no_host(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	const char *forms[] = {"s3://127.0.0.1:%d?/" SECRET "/model.bin",
	                       "s3://127.0.0.1:%d#/" SECRET "/model.bin",
	                       "s3://x@127.0.0.1:%d/" SECRET "/model.bin",
	                       "s3://127.0.0.1:%d%%2f/" SECRET "/model.bin"};
	int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
	char url[128];

	CHECK(s >= 0);
	if (s < 0)
		return;
	CHECK_EQ(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	CHECK_EQ(listen(s, 16), 0);
	CHECK_EQ(getsockname(s, (struct sockaddr *)&a, &alen), 0);
	setenv("AWS_ACCESS_KEY_ID", "AKIDVICTIM", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "victim/secret", 1);
	setenv("AWS_SESSION_TOKEN", "VICTIM-SESSION-TOKEN", 1);
	unsetenv("AWS_ENDPOINT_URL");
	unsetenv("AWS_ENDPOINT_URL_S3");
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		snprintf(url, sizeof(url), forms[i], ntohs(a.sin_port));
		CHECK_EQ(gpufile_open(&(gpufile_t *){NULL}, url, "r"), -EINVAL);
		CHECK_CONTAINS(gpufile_errmsg(), "S3 bucket");
		CHECK(!strstr(gpufile_errmsg(), "127.0.0.1"));
		CHECK(!strstr(gpufile_errmsg(), SECRET));
		CHECK_EQ(gpufile_open(&(gpufile_t *){NULL}, url, "w"), -EINVAL);
	}
	/* Nothing connected: the backlog is empty. */
	CHECK_EQ(accept(s, NULL, NULL), -1);
	CHECK_EQ(errno, EAGAIN);
	close(s);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_SESSION_TOKEN");
}

/* ---- every output of every command ---- */

/* Runs the tool with args and returns its output (stdout and stderr),
 * malloc'd, or NULL when it cannot run. */
static char *cli_output(const char *args)
{
	const char *g = getenv("GPUFILE_CLI");
	char *cmd = NULL, *out = NULL;
	size_t cap = 0, n = 0, got;
	FILE *p;

	if (asprintf(&cmd, "'%s' %s 2>&1", g, args) < 0)
		return NULL;
	p = popen(cmd, "r");
	free(cmd);
	if (!p)
		return NULL;
	do {
		if (n + 4096 + 1 > cap) {
			char *more = realloc(out, cap = 2 * cap + 8192);
			if (!more)
				break;
			out = more;
		}
		got = fread(out + n, 1, 4096, p);
		n += got;
	} while (got > 0);
	pclose(p);
	if (out)
		out[n] = '\0';
	return out;
}

static void grep_cli(const char *args)
{
	char *out = cli_output(args);

	CHECK(out != NULL);
	if (out && strstr(out, SECRET)) {
		fprintf(stderr, "  LEAK: gpufile %s:\n%s\n", args, out);
		CHECK(0);
	}
	free(out);
}

static void test_cli(void)
{
	/* Planted in the user information (with each raw character that
	 * confuses a URL parser) and in the query. */
	const char *auths[] = {"u:" SECRET "@", "u:" SECRET "#x@",
	                       "u:" SECRET "/x@", "u:" SECRET "?x@",
	                       "u:" SECRET "@x@"};
	const char *modes[] = {"ok", "e404", "presigned"};
	const char *commands[] = {
	    "read '%s' --host",
	    "read '%s' --host --json",
	    "read '%s' --host --offset 99999999",
	    "load '%s' --host",
	    "load '%s' --host --json",
	    "check '%s'",
	    "check '%s' --json",
	    "cache '%s'",
	    "cache '%s' --json",
	    "write '%s' --size 4096",
	    "write '%s' --size 4096 --json",
	    "explain --size 1MiB --cufile-json '%s'",
	    "explain --size 1MiB --cufile-json '%s' --json",
	    "read '%s' extra-argument",
	};
	gpufile_t *held = NULL;
	char url[512], *args, *out;

	if (!getenv("GPUFILE_CLI") || access(getenv("GPUFILE_CLI"), X_OK)) {
		fprintf(stderr, "  the tool was not built: CLI part skipped\n");
		return;
	}
	for (size_t a = 0; a < sizeof(auths) / sizeof(auths[0]); a++)
		for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
			snprintf(url, sizeof(url),
			         "http://%s127.0.0.1:%d/%s/o.safetensors"
			         "?X-Amz-Signature=" SECRET "#" SECRET,
			         auths[a], port, modes[m]);
			for (size_t c = 0;
			     c < sizeof(commands) / sizeof(commands[0]); c++) {
				if (asprintf(&args, commands[c], url) < 0)
					continue;
				grep_cli(args);
				free(args);
			}
		}
	/* This process, with a URL handle open, seen by gpufile stats. */
	snprintf(url, sizeof(url),
	         "http://u:" SECRET "@127.0.0.1:%d/ok/held.bin?t=" SECRET,
	         port);
	CHECK_EQ(gpufile_open(&held, url, "r"), 0);
	if (asprintf(&args, "stats %d", (int)getpid()) >= 0) {
		grep_cli(args);
		free(args);
	}
	if (asprintf(&args, "stats %d --json", (int)getpid()) >= 0) {
		grep_cli(args);
		free(args);
	}
	grep_cli("stats");
	grep_cli("stats --json");
	grep_cli("stats --openmetrics");
	/* The held URL is there, redacted, as the file label. */
	out = cli_output("stats --openmetrics");
	CHECK(out && strstr(out, "file=\"http://127.0.0.1:") &&
	      strstr(out, "/ok/held.bin?<query redacted>\""));
	free(out);
	grep_cli("config");
	grep_cli("config --json");
	gpufile_close(held);
}

int main(void)
{
	pid_t pid;

	test_redact_table();
	test_huge_url();
	if (!strstr(gpufile_features(), "remote")) {
		int rc = test_finish("test_remote_redact");

		return rc ? rc
		          : test_missing("test_remote_redact",
		                         "libcurl (built without it)");
	}
	pid = fault_server_start(SIZE, 3, &port);
	if (pid < 0)
		return 1;
	CHECK_EQ(gpufile_config_set("remote_task_size", "64KiB"), 0);
	CHECK_EQ(gpufile_config_set("http_timeout", "5"), 0);
	CHECK_EQ(gpufile_config_set("remote_connections", "4"), 0);
	test_long_url();
	test_long_etag();
	test_empty_by_get();
	test_leftover_bytes();
	test_s3_key_names();
	test_s3_bucket_names_no_host();
	test_curl_detail();
	test_cli();
	server_stop(pid);
	return test_finish("test_remote_redact");
}
