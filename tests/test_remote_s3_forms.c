/* Every form of S3 URL and every source of credentials, region and
 * endpoint, against tests/remote/s3_server.py (botocore checks each
 * signature; an unsigned request is 403, a signed presigned one 400):
 *   - AWS's own https-style URLs, virtual-hosted with and without a
 *     region and path style, sent to the test server through http_proxy
 *     (the server takes absolute-form requests), signed for the host's
 *     region; a presigned one left unsigned;
 *   - gpufile_open_remote()'s options: credentials, region, endpoint,
 *     known size (no request at open), GPUFILE_REMOTE_S3, bad options;
 *   - profile files in a temporary HOME: ~/.aws/credentials and
 *     ~/.aws/config (region, endpoint_url, the nested "s3 =" block),
 *     AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE; a profile
 *     that is missing or needs role_arn; a web-identity token;
 *   - AWS_ENDPOINT_URL_S3 over AWS_ENDPOINT_URL;
 *   - a query whose parameter names are prefixes of one another, signed
 *     in botocore's order (by name, then value);
 *   - which hosts are AWS's S3 and the region each names, a bucket with
 *     ".s3-" or ".s3." in it too (without the server).
 * Skips when python3-botocore is absent (fails under CI). */
#include "aws_config.h"
#include "remote/helpers.h"
#include "testlib.h"

#include <errno.h>
#include <gpufile.h>
#include <sys/stat.h>

#define SIZE   ((size_t)(256u << 10) + 99)
#define AK     "AKIDFORMSTEST"
#define SK     "fOrMs/Secret+Key0123456789abcdefghijklmn"
#define REGION "eu-test-1"

static int port;
static char endpoint[64];

static void clear_aws_env(void)
{
	static const char *const vars[] = {
	    "AWS_ACCESS_KEY_ID",
	    "AWS_SECRET_ACCESS_KEY",
	    "AWS_SESSION_TOKEN",
	    "AWS_REGION",
	    "AWS_DEFAULT_REGION",
	    "AWS_ENDPOINT_URL",
	    "AWS_ENDPOINT_URL_S3",
	    "AWS_PROFILE",
	    "AWS_DEFAULT_PROFILE",
	    "AWS_SHARED_CREDENTIALS_FILE",
	    "AWS_CONFIG_FILE",
	    "AWS_WEB_IDENTITY_TOKEN_FILE",
	    "AWS_ROLE_ARN",
	    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
	    "http_proxy",
	    "no_proxy",
	    "NO_PROXY",
	    "ALL_PROXY"};

	for (size_t i = 0; i < sizeof(vars) / sizeof(*vars); i++)
		unsetenv(vars[i]);
}

static void env_credentials(void)
{
	setenv("AWS_ACCESS_KEY_ID", AK, 1);
	setenv("AWS_SECRET_ACCESS_KEY", SK, 1);
}

static void read_ok(const char *url)
{
	int failed = read_whole_and_part(url, SIZE, 5000, 77777);

	if (failed)
		fprintf(stderr, "  (last message: %s)\n", gpufile_errmsg());
	CHECK_EQ(failed, 0);
}

/* Opens url with opts, expecting rc; returns the handle when 0. */
static gpufile_t *open_with(const char *url, const gpufile_remote_opts_t *o,
                            int want)
{
	gpufile_t *h = NULL;
	int rc = gpufile_open_remote(&h, url, "r", o);

	if (rc != want)
		fprintf(stderr, "  %s: %d, wanted %d: %s\n", url, rc, want,
		        gpufile_errmsg());
	CHECK_EQ(rc, want);
	return h;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

/* AWS's own URLs, through the test server as a proxy. */
static void aws_urls(void)
{
	char proxy[64];
	gpufile_t *h;

	snprintf(proxy, sizeof(proxy), "http://127.0.0.1:%d", port);
	setenv("http_proxy", proxy, 1);
	env_credentials();
	/* The host's region is signed, not the configured one. */
	setenv("AWS_DEFAULT_REGION", "wrong-region-9", 1);
	read_ok("http://bucket.s3." REGION ".amazonaws.com/plain.bin");
	read_ok("http://bucket.s3-" REGION ".amazonaws.com/dir/a+b c.bin");
	read_ok("http://s3." REGION ".amazonaws.com/bucket/plain.bin");
	read_ok("http://s3.dualstack." REGION ".amazonaws.com/bucket/x.bin");
	/* No region in the host: the configured one. */
	setenv("AWS_DEFAULT_REGION", REGION, 1);
	read_ok("http://bucket.s3.amazonaws.com/global.bin");
	/* Parameters by name, then value: "x" before "x2" and "a" before
	 * "a.b", though '=' sorts after '2' and '.' as a byte (the whole
	 * "name=value" was compared: 403). */
	read_ok("http://bucket.s3." REGION ".amazonaws.com/q.bin?x=1&x2=2");
	read_ok("http://bucket.s3." REGION ".amazonaws.com/q.bin?x2=2&x=1");
	read_ok("http://bucket.s3." REGION ".amazonaws.com/q.bin?a.b=1&a=2");
	read_ok("http://bucket.s3." REGION ".amazonaws.com/q.bin?a-b&a=2&a=1");
	read_ok("http://s3.amazonaws.com/bucket/global.bin");
	/* AWS_REGION wins over AWS_DEFAULT_REGION, as in the AWS CLI. */
	setenv("AWS_REGION", REGION, 1);
	setenv("AWS_DEFAULT_REGION", "wrong-region-9", 1);
	read_ok("http://s3.amazonaws.com/bucket/region.bin");
	unsetenv("AWS_REGION");
	setenv("AWS_DEFAULT_REGION", REGION, 1);

	/* A presigned URL is sent as it is: signed again, S3 answers 400. */
	h = open_with("http://bucket.s3." REGION ".amazonaws.com/p.bin?"
	              "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature=0abc",
	              NULL, 0);
	if (h) {
		gpufile_remote_file_info_t info;
		GPUFILE_INIT(info);
		CHECK_EQ(gpufile_remote_file_info(h, &info), 0);
		CHECK_EQ(info.signed_requests, 0);
		CHECK(strcmp(info.kind, "presigned URL") == 0);
		CHECK_EQ(info.object_size, (int64_t)SIZE);
		gpufile_close(h);
	}
	/* Without credentials: unsigned, which this server refuses. */
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	open_with("http://bucket.s3." REGION ".amazonaws.com/plain.bin", NULL,
	          -EACCES);
	unsetenv("http_proxy");
}

/* Which https:// hosts are AWS's S3, and the region each names: the S3
 * label is the last ".s3." or ".s3-" one, a bucket may hold either (the
 * first one was taken: logs.s3-archive.s3.REGION named no region, and
 * the request was signed for the configured one, 403). */
static void host_regions(void)
{
	static const struct {
		const char *url;
		int is_s3;
		const char *region;
	} cases[] = {
	    {"https://b.s3.eu-west-3.amazonaws.com/k", 1, "eu-west-3"},
	    {"https://b.s3-eu-west-3.amazonaws.com/k", 1, "eu-west-3"},
	    {"https://b.s3.dualstack.eu-west-3.amazonaws.com/k", 1,
	     "eu-west-3"},
	    {"https://b.s3.amazonaws.com/k", 1, NULL},
	    {"https://s3.eu-west-3.amazonaws.com/b/k", 1, "eu-west-3"},
	    {"https://s3.amazonaws.com/b/k", 1, NULL},
	    {"https://b.s3.cn-north-1.amazonaws.com.cn/k", 1, "cn-north-1"},
	    {"https://logs.s3-archive.s3.eu-test-1.amazonaws.com/k", 1,
	     "eu-test-1"},
	    {"https://logs.s3.archive.s3-eu-test-1.amazonaws.com/k", 1,
	     "eu-test-1"},
	    {"https://my.s3.b.s3.amazonaws.com/k", 1, NULL},
	    {"https://b.s3-accelerate.amazonaws.com/k", 1, NULL},
	    {"https://u:p@b.s3.eu-west-3.amazonaws.com:443/k", 1, "eu-west-3"},
	    {"https://a.amazonaws.com/k", 0, NULL},
	    {"https://ec2.amazonaws.com/k", 0, NULL},
	    {"https://b.s3.example.com/k", 0, NULL},
	    {"s3://b/k", 0, NULL},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		char *region = (char *)"unset";
		const int rc = gpufile__aws_s3_host(cases[i].url, &region);
		const int same =
		    rc == cases[i].is_s3 &&
		    (cases[i].region
		         ? region && strcmp(region, cases[i].region) == 0
		         : !region);

		if (!same)
			fprintf(stderr, "  %s: %d, region %s; wanted %d, %s\n",
			        cases[i].url, rc, region ? region : "(none)",
			        cases[i].is_s3,
			        cases[i].region ? cases[i].region : "(none)");
		CHECK(same);
		free(region);
	}
}

/* gpufile_open_remote()'s options. */
static void options(void)
{
	gpufile_remote_opts_t o = {0};
	gpufile_remote_file_info_t info;
	char url[128];
	gpufile_t *h;

	GPUFILE_INIT(o);
	o.aws_access_key_id = AK;
	o.aws_secret_access_key = SK;
	o.aws_region = REGION;
	o.aws_endpoint_url = endpoint;
	h = open_with("s3://bucket/opts.bin", &o, 0);
	if (h) {
		unsigned char *d = dest_new(SIZE);
		CHECK_EQ(gpufile_pread(h, d, SIZE, 0), SIZE);
		CHECK_EQ(dest_bad(d, SIZE, 0, 1), 0);
		dest_free(d);
		GPUFILE_INIT(info);
		CHECK_EQ(gpufile_remote_file_info(h, &info), 0);
		CHECK_EQ(info.signed_requests, 1);
		CHECK(strcmp(info.credentials, "explicit options") == 0);
		CHECK(strcmp(info.region, REGION) == 0);
		CHECK(strcmp(info.kind, "s3") == 0);
		CHECK_EQ(info.bytes, SIZE);
		CHECK(info.requests >= 2); /* HEAD and at least a range */
		gpufile_close(h);
	}
	/* A known size: the open sends nothing. */
	o.flags = GPUFILE_REMOTE_KNOWN_SIZE;
	o.known_size = SIZE;
	h = open_with("s3://bucket/known.bin", &o, 0);
	if (h) {
		GPUFILE_INIT(info);
		CHECK_EQ(gpufile_remote_file_info(h, &info), 0);
		CHECK_EQ(info.requests, 0);
		CHECK_EQ(gpufile_size(h), SIZE);
		gpufile_close(h);
	}
	/* Path style on an endpoint of its own: GPUFILE_REMOTE_S3. */
	o.flags = GPUFILE_REMOTE_S3;
	snprintf(url, sizeof(url), "%s/bucket/own.bin", endpoint);
	h = open_with(url, &o, 0);
	gpufile_close(h);
	o.flags = 0;
	h = open_with(url, &o, -EACCES); /* a plain URL: unsigned */
	/* Bad options: named. */
	o.aws_secret_access_key = NULL;
	open_with("s3://bucket/half.bin", &o, -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "aws_access_key_id but no "
	                                 "aws_secret_access_key");
	o.aws_secret_access_key = SK;
	o.flags = 1u << 20;
	open_with("s3://bucket/flags.bin", &o, -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "unknown flags");
	o.flags = 0;
	o.max_in_flight = 5000;
	open_with("s3://bucket/many.bin", &o, -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "max_in_flight 5000 is out of range");
	o.max_in_flight = 0;
	o.size = 0;
	open_with("s3://bucket/size.bin", &o, -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "gpufile_remote_opts_t.size is 0");
	CHECK_EQ(gpufile_open_remote(&h, "/not/a/url", "r", NULL), -EINVAL);
}

/* Profile files in a temporary HOME. */
static void profiles(void)
{
	char home[4096], aws[4200], path[4300], text[1024];
	gpufile_remote_opts_t o = {0};
	gpufile_t *h;

	snprintf(home, sizeof(home), "%s/home", test_dir());
	snprintf(aws, sizeof(aws), "%s/.aws", home);
	mkdir(home, 0700);
	mkdir(aws, 0700);
	setenv("HOME", home, 1);

	/* [default] in both files: keys, region and endpoint. */
	snprintf(path, sizeof(path), "%s/credentials", aws);
	write_file(path, "# test\n[default]\naws_access_key_id = " AK
	                 "\naws_secret_access_key=" SK "\n\n[other]\n"
	                 "aws_access_key_id = WRONG\n");
	snprintf(path, sizeof(path), "%s/config", aws);
	snprintf(text, sizeof(text),
	         "[default]\nregion = " REGION "\nendpoint_url = %s\n"
	         "[profile nested]\nregion = " REGION
	         "\naws_access_key_id = " AK "\naws_secret_access_key = " SK
	         "\ns3 =\n  endpoint_url = %s\n  addressing_style = path\n"
	         "[profile role]\nrole_arn = arn:aws:iam::1:role/r\n"
	         "source_profile = default\n",
	         endpoint, endpoint);
	write_file(path, text);
	read_ok("s3://bucket/profile-default.bin");
	h = open_with("s3://bucket/profile-default.bin", NULL, 0);
	if (h) {
		gpufile_remote_file_info_t info;
		GPUFILE_INIT(info);
		CHECK_EQ(gpufile_remote_file_info(h, &info), 0);
		CHECK_CONTAINS(info.credentials, "profile \"default\"");
		CHECK(!strstr(info.credentials, SK));
		gpufile_close(h);
	}
	/* AWS_PROFILE: the config file's "[profile NAME]", its nested s3
	 * endpoint. */
	setenv("AWS_PROFILE", "nested", 1);
	read_ok("s3://bucket/profile-nested.bin");
	/* The options name a profile too. */
	unsetenv("AWS_PROFILE");
	GPUFILE_INIT(o);
	o.aws_profile = "nested";
	h = open_with("s3://bucket/opts-profile.bin", &o, 0);
	gpufile_close(h);
	/* A profile that is in neither file, one that needs STS. */
	setenv("AWS_PROFILE", "absent", 1);
	open_with("s3://bucket/x.bin", NULL, -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "AWS profile \"absent\" (AWS_PROFILE) "
	                                 "is in neither");
	setenv("AWS_PROFILE", "role", 1);
	open_with("s3://bucket/x.bin", NULL, -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "role_arn");
	unsetenv("AWS_PROFILE");

	/* Keys indented alike are keys, as botocore reads them (they were
	 * passed over: unsigned, 403); a line indented deeper than the key
	 * above is that key's value, not a key; "key: value" is a key too
	 * (the region: the configured one would be signed, 403). */
	snprintf(path, sizeof(path), "%s/credentials", aws);
	write_file(path,
	           "[indented]\n  aws_access_key_id = " AK
	           "\n  aws_secret_access_key = " SK "\n  note = a value\n"
	           "      aws_access_key_id = WRONG\n");
	snprintf(path, sizeof(path), "%s/config", aws);
	snprintf(text, sizeof(text),
	         "[profile indented]\n\tregion: " REGION
	         "\n\tendpoint_url = %s\n",
	         endpoint);
	write_file(path, text);
	setenv("AWS_PROFILE", "indented", 1);
	read_ok("s3://bucket/profile-indented.bin");
	unsetenv("AWS_PROFILE");

	/* Files named by AWS_SHARED_CREDENTIALS_FILE and AWS_CONFIG_FILE:
	 * the ones in HOME are not read. */
	snprintf(path, sizeof(path), "%s/creds-elsewhere", home);
	write_file(path, "[default]\naws_access_key_id=" AK
	                 "\naws_secret_access_key=" SK "\n");
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	snprintf(path, sizeof(path), "%s/credentials", aws);
	write_file(path, "[default]\naws_access_key_id=WRONG\n"
	                 "aws_secret_access_key=WRONG\n");
	snprintf(path, sizeof(path), "%s/config-elsewhere", home);
	snprintf(text, sizeof(text),
	         "[default]\nregion = " REGION "\nendpoint_url = %s\n",
	         endpoint);
	write_file(path, text);
	setenv("AWS_CONFIG_FILE", path, 1);
	snprintf(path, sizeof(path), "%s/config", aws);
	write_file(path, "[default]\nregion = wrong-region-9\n");
	read_ok("s3://bucket/profile-files.bin");

	/* The environment's keys win over the profile's. */
	setenv("AWS_ACCESS_KEY_ID", "WRONG", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "WRONG", 1);
	open_with("s3://bucket/env-first.bin", NULL, -EACCES);
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");

	/* A web-identity token: refused with the reason, not skipped. */
	setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token", 1);
	setenv("AWS_ROLE_ARN", "arn:aws:iam::1:role/r", 1);
	open_with("s3://bucket/x.bin", NULL, -EINVAL);
	CHECK_CONTAINS(gpufile_errmsg(), "AssumeRoleWithWebIdentity");
	unsetenv("AWS_WEB_IDENTITY_TOKEN_FILE");
	unsetenv("AWS_ROLE_ARN");
	unsetenv("AWS_SHARED_CREDENTIALS_FILE");
	unsetenv("AWS_CONFIG_FILE");
	snprintf(path, sizeof(path), "%s/credentials", aws);
	unlink(path);
	snprintf(path, sizeof(path), "%s/config", aws);
	unlink(path);
}

/* AWS_ENDPOINT_URL_S3 wins over AWS_ENDPOINT_URL. */
static void endpoints(void)
{
	env_credentials();
	setenv("AWS_DEFAULT_REGION", REGION, 1);
	setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1", 1); /* nobody */
	setenv("AWS_ENDPOINT_URL_S3", endpoint, 1);
	read_ok("s3://bucket/endpoint-s3.bin");
	unsetenv("AWS_ENDPOINT_URL_S3");
	setenv("AWS_ENDPOINT_URL", endpoint, 1);
	read_ok("s3://bucket/endpoint.bin");
	unsetenv("AWS_ENDPOINT_URL");
}

int main(void)
{
	char server[4200], size[32];
	pid_t pid;

	host_regions();
	/* A skip below must not hide a failure above. */
	if (!strstr(gpufile_features(), "sigv4") ||
	    system("python3 -c 'import botocore' 2>/dev/null") != 0) {
		const int rc = test_finish("test_remote_s3_forms");

		return rc ? rc
		          : test_missing("test_remote_s3_forms",
		                         !strstr(gpufile_features(), "sigv4")
		                             ? "libcurl and libcrypto (built "
		                               "without them)"
		                             : "python3-botocore (import "
		                               "botocore failed)");
	}
	clear_aws_env();
	CHECK_EQ(gpufile_config_set("remote_task_size", "64KiB"), 0);
	CHECK_EQ(gpufile_config_set("http_max_attempts", "1"), 0);
	snprintf(server, sizeof(server), "%s/s3_server.py", remote_dir());
	snprintf(size, sizeof(size), "%zu", SIZE);
	{
		char *argv[] = {"python3", server, size,   "bucket",
		                AK,        SK,     REGION, NULL};
		pid = server_start(argv, &port);
	}
	if (pid < 0) {
		fprintf(stderr, "cannot start s3_server.py: FAILED\n");
		return 1;
	}
	snprintf(endpoint, sizeof(endpoint), "http://127.0.0.1:%d", port);
	aws_urls();
	clear_aws_env();
	options();
	clear_aws_env();
	profiles();
	clear_aws_env();
	endpoints();
	server_stop(pid);
	test_cleanup();
	return test_finish("test_remote_s3_forms");
}
