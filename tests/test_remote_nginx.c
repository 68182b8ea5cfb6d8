/* Remote reads from nginx (Debian's, started by the test on 127.0.0.1 at
 * free ports through tests/remote/nginx_server.py) over HTTP and HTTPS
 * with a self-signed certificate whose CA comes from CURL_CA_BUNDLE: into
 * host memory, and into (fake) device memory through the pinned staging
 * pipeline, every byte and the canaries checked. Without the CA, HTTPS
 * fails naming the certificate problem; the CA is also taken from
 * AWS_CA_BUNDLE, SSL_CERT_FILE, SSL_CERT_DIR and the handle's options.
 * Skips when nginx is absent. */
#include "remote/helpers.h"
#include "testlib.h"

#include "fake_cuda.h"
#include <errno.h>
#include <sys/stat.h>
#include <gpufile.h>

#define SIZE ((size_t)(5u << 20) + 123)

/* The whole object and 3,000,000 bytes at 1,234,567 into host memory. */
static void read_host(const char *url)
{
	CHECK_EQ(read_whole_and_part(url, SIZE, 3000000, 1234567), 0);
}

/* A device destination: each chunk is fetched into a pinned bounce
 * buffer and copied to the (fake) GPU while the next chunk is fetched. */
static void read_device(const char *url)
{
	gpufile_t *h = NULL;
	gpufile_stats_t a, b;
	unsigned char *d = dev_base + CANARY_LEN;
	long htod = htod_calls + batch_copies;
	int rc = gpufile_open(&h, url, "r");

	CHECK_EQ(rc, 0);
	if (rc)
		return;
	memset(dev_base, CANARY, SIZE + 2 * CANARY_LEN);
	GPUFILE_INIT(a);
	gpufile_stats_self(&a);
	CHECK_EQ(gpufile_pread(h, d, SIZE, 0), SIZE);
	GPUFILE_INIT(b);
	gpufile_stats_self(&b);
	CHECK_EQ(dest_bad(d, SIZE, 0, 1), 0);
	CHECK_EQ(bad_copies, 0);
	/* 256 KiB bounce buffers: at least one copy per chunk, alone or
	 * pooled with others. */
	CHECK(htod_calls + batch_copies - htod >= (long)(SIZE / (256u << 10)));
	CHECK_EQ(b.path[GPUFILE_PATH_REMOTE][0].bytes -
	             a.path[GPUFILE_PATH_REMOTE][0].bytes,
	         SIZE);
	CHECK_EQ(b.path[GPUFILE_PATH_POSIX][0].ops,
	         a.path[GPUFILE_PATH_POSIX][0].ops);
	CHECK_EQ(b.path[GPUFILE_PATH_CUFILE][0].ops,
	         a.path[GPUFILE_PATH_CUFILE][0].ops);
	memset(dev_base, CANARY, SIZE + 2 * CANARY_LEN);
	CHECK_EQ(gpufile_pread(h, d, 1000001, 4000000), 1000001);
	CHECK_EQ(dest_bad(d, 1000001, 4000000, 1), 0);
	gpufile_close(h);
}

/* Host reads split into one HTTP range per task: remote_task_size sets
 * the range size, and 0 hands the split back to task_size. */
static uint64_t ranges_of_read(const char *url)
{
	gpufile_t *h = NULL;
	gpufile_remote_stats_t a, b;
	unsigned char *d = dest_new(SIZE);

	GPUFILE_INIT(a);
	GPUFILE_INIT(b);
	CHECK_EQ(gpufile_open(&h, url, "r"), 0);
	CHECK_EQ(gpufile_stats_remote(0, &a), 0);
	if (h)
		CHECK_EQ(gpufile_pread(h, d, SIZE, 0), SIZE);
	CHECK_EQ(gpufile_stats_remote(0, &b), 0);
	CHECK_EQ(dest_bad(d, SIZE, 0, 1), 0);
	gpufile_close(h);
	dest_free(d);
	return b.ranges - a.ranges;
}

static void check_range_size(const char *url)
{
	const uint64_t mib = 1u << 20;

	CHECK_EQ(gpufile_config_set("remote_task_size", "1MiB"), 0);
	CHECK_EQ(ranges_of_read(url), (SIZE + mib - 1) / mib);
	CHECK_EQ(gpufile_config_set("remote_task_size", "0"), 0);
	CHECK_EQ(gpufile_config_set("task_size", "512KiB"), 0);
	CHECK_EQ(ranges_of_read(url), (SIZE + mib / 2 - 1) / (mib / 2));
	CHECK_EQ(gpufile_config_set("remote_task_size", "1MiB"), 0);
}

/* The CA settings besides CURL_CA_BUNDLE: AWS_CA_BUNDLE, SSL_CERT_FILE,
 * SSL_CERT_DIR (a folder of certificates under their hash names) and the
 * handle's ca_file; a bundle that does not exist is named. */
static void ca_settings(const char *url, const char *ca)
{
	gpufile_remote_opts_t o = {0};
	char dir[4200], cmd[20000];
	gpufile_t *h = NULL;

	setenv("AWS_CA_BUNDLE", ca, 1);
	read_host(url);
	unsetenv("AWS_CA_BUNDLE");
	setenv("SSL_CERT_FILE", ca, 1);
	read_host(url);
	unsetenv("SSL_CERT_FILE");

	snprintf(dir, sizeof(dir), "%s", test_path("certs"));
	snprintf(cmd, sizeof(cmd),
	         "mkdir -p '%s' && ln -sf '%s' \"%s/$(openssl x509 -hash "
	         "-noout -in '%s').0\"",
	         dir, ca, dir, ca);
	CHECK_EQ(system(cmd), 0);
	setenv("SSL_CERT_DIR", dir, 1);
	read_host(url);
	unsetenv("SSL_CERT_DIR");

	GPUFILE_INIT(o);
	o.ca_file = ca;
	CHECK_EQ(gpufile_open_remote(&h, url, "r", &o), 0);
	gpufile_close(h);

	setenv("AWS_CA_BUNDLE", "/nonexistent/ca.pem", 1);
	CHECK_EQ(gpufile_open(&h, url, "r"), -ENOENT);
	CHECK_CONTAINS(gpufile_errmsg(),
	               "AWS_CA_BUNDLE=\"/nonexistent/ca.pem\": the CA bundle "
	               "cannot be read");
	unsetenv("AWS_CA_BUNDLE");
}

int main(void)
{
	char dir[4096], server[4200], line[4096], url[256], ca[4096];
	int http_port, https_port;
	unsigned char *data;
	void *mem;
	FILE *f;
	pid_t pid;
	int rc;

	if (!strstr(gpufile_features(), "remote")) {
		return test_missing("test_remote_nginx",
		                    "libcurl (built without it)");
	}
	/* GPUFILE_NGINX: a carried nginx (.carry/nginx/run on the GPU
	 * machine), when set the only one, as tests/remote/nginx_server.py
	 * takes it. */
	if (system("if [ -n \"$GPUFILE_NGINX\" ]; then test -x "
	           "\"$GPUFILE_NGINX\"; else command -v nginx >/dev/null "
	           "|| test -x /usr/sbin/nginx; fi") != 0)
		return test_missing(
		    "test_remote_nginx",
		    getenv("GPUFILE_NGINX") && *getenv("GPUFILE_NGINX")
		        ? "nginx (GPUFILE_NGINX is not a program)"
		        : "nginx (nginx-light; not on PATH nor "
		          "/usr/sbin/nginx)");
	snprintf(dir, sizeof(dir), "%s", test_dir());
	data = malloc(SIZE);
	for (size_t i = 0; i < SIZE; i++)
		data[i] = object_byte(i);
	f = fopen(test_path("object.bin"), "wb");
	CHECK(f && fwrite(data, 1, SIZE, f) == SIZE);
	if (f)
		fclose(f);
	free(data);
	if (chmod(dir, 0755) != 0) /* nginx's workers read it */
		perror("chmod");

	snprintf(server, sizeof(server), "%s/nginx_server.py", remote_dir());
	{
		char *argv[] = {"python3", server, dir, NULL};
		pid = server_start_line(argv, line, sizeof(line));
	}
	if (pid < 0 || sscanf(line, "PORT %d %d %4095s", &http_port,
	                      &https_port, ca) != 3) {
		fprintf(stderr, "nginx did not start: FAILED\n");
		test_cleanup();
		return 1;
	}
	CHECK_EQ(gpufile_config_set("remote_task_size", "1MiB"), 0);
	CHECK_EQ(gpufile_config_set("bounce_buffer_size", "256KiB"), 0);

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/object.bin", http_port);
	read_host(url);
	check_range_size(url);
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/object.bin",
	         https_port);
	{
		gpufile_t *h = NULL;
		unsetenv("CURL_CA_BUNDLE");
		unsetenv("SSL_CERT_FILE");
		unsetenv("SSL_CERT_DIR");
		unsetenv("AWS_CA_BUNDLE");
		rc = gpufile_open(&h, url, "r");
		CHECK_EQ(rc, -EIO);
		CHECK_CONTAINS(gpufile_errmsg(), "certificate");
		CHECK_CONTAINS(gpufile_errmsg(), url);
	}
	ca_settings(url, ca);
	setenv("CURL_CA_BUNDLE", ca, 1);
	read_host(url);

	if (posix_memalign(&mem, 4096, DEV_SIZE) == 0) {
		dev_base = mem;
		gpufile__cuda_override(&fake);
		snprintf(url, sizeof(url), "http://127.0.0.1:%d/object.bin",
		         http_port);
		read_device(url);
		snprintf(url, sizeof(url), "https://127.0.0.1:%d/object.bin",
		         https_port);
		read_device(url);
		gpufile_release();
		gpufile__cuda_override(NULL);
		free(mem);
	}
	server_stop(pid);
	test_cleanup();
	return test_finish("test_remote_nginx");
}
