/*
 * gpufile_check(): every item has a status and a reason; the platform
 * items are all there; a file on this machine gets its file system,
 * O_DIRECT and a prediction for both layers; CUFILE_* overrides and a
 * malformed cufile.json are reported; `gpufile check --json` works.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"
#include "cufile_json.h"
#include "cufile_shim.h"
#include "decide.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX 256

static gpufile_check_item_t items[MAX];

static const gpufile_check_item_t *find(int n, const char *name)
{
	for (int i = 0; i < n && i < MAX; i++)
		if (strcmp(items[i].name, name) == 0)
			return &items[i];
	return NULL;
}

static void test_platform(void)
{
	static const char *const required[] = {
	    "libcufile",
	    "cufile.driver",
	    "nvidia-fs",
	    "cuda.devices",
	    "gpu.pcie",
	    "iommu",
	    "cufile.json",
	    "execution.max_io_threads",
	    "properties.max_direct_io_size_kb",
	    "gpufile.compat_mode",
	    "gpufile.task_size",
	    "gpufile.features",
	};
	int n = gpufile_check(NULL, items, MAX);

	CHECK(n > 0 && n <= MAX);
	for (int i = 0; i < n; i++) {
		CHECK(items[i].name[0] != '\0');
		CHECK((unsigned)items[i].status <= GPUFILE_CHECK_UNKNOWN);
		CHECK(items[i].why[0] != '\0');
	}
	for (size_t i = 0; i < sizeof(required) / sizeof(required[0]); i++) {
		if (!find(n, required[i])) {
			fprintf(stderr, "no check named %s\n", required[i]);
			test_failures++;
		}
	}
	CHECK(find(n, "file") == NULL);
	CHECK(find(n, "predict.gpufile") == NULL);
	/* Counting is possible without filling anything. */
	CHECK_EQ(gpufile_check(NULL, NULL, 0), n);
}

/* As nobody, root's file read-only: the kernel reports every page cached
 * to us, and check says what that costs (direct_io=auto cannot tell cold
 * ranges; no map copy, also in the host prediction at host_map_copy=on). */
static void test_hidden_cache(void)
{
	const char *d = test_nobody_dir();
	char path[128];
	pid_t pid;
	int st = 0;

	/* nobody must reach the file, wherever the checkout lies. */
	CHECK(d != NULL);
	if (!d)
		return;
	snprintf(path, sizeof(path), "%s/hidden", d);
	CHECK_EQ(test_make_file(path, 65536, 1), 0);
	CHECK_EQ(chmod(path, 0644), 0);
	pid = fork();
	if (pid == 0) {
		const gpufile_check_item_t *it;
		int n;

		if (test_become_nobody())
			_exit(9);
		gpufile_config_set("host_map_copy", "on");
		n = gpufile_check(path, items, MAX);
		it = find(n, "file.page_cache_visible");
		if (!it || it->status != GPUFILE_CHECK_UNKNOWN ||
		    strcmp(it->value, "no") != 0 ||
		    !strstr(it->why, "direct_io=auto reads every range "
		                     "through the page cache"))
			_exit(2);
		it = find(n, "predict.gpufile host");
		if (!it ||
		    !strstr(it->why, "reads by pread (host_map_copy=on): "
		                     "this process neither owns"))
			_exit(3);
		_exit(0);
	}
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	fprintf(stderr, "as nobody: status 0x%x\n", st);
}

static void test_file(void)
{
	const char *path = test_path("f");
	const gpufile_check_item_t *it;
	int n;

	CHECK_EQ(test_make_file(path, 65536, 1), 0);
	n = gpufile_check(path, items, MAX);
	CHECK((it = find(n, "file")) && it->status == GPUFILE_CHECK_PASS);
	CHECK(find(n, "file.fs") != NULL);
	CHECK(find(n, "file.block_device") != NULL);
	CHECK(find(n, "file.o_direct") != NULL);
	/* Our own file: the kernel shows us its page cache. */
	it = find(n, "file.page_cache_visible");
	CHECK(it && it->status == GPUFILE_CHECK_PASS &&
	      strcmp(it->value, "yes") == 0);
	if (geteuid() == 0)
		test_hidden_cache();
	it = find(n, "predict.gpufile");
	CHECK(it && (strcmp(it->value, "cufile") == 0 ||
	             strcmp(it->value, "posix") == 0));
	if (it)
		fprintf(stderr, "predict.gpufile: %s: %s\n", it->value,
		        it->why);
	it = find(n, "predict.cufile");
	CHECK(it != NULL);

	/* Without libcufile (this machine), gpufile predicts posix, and
	 * with compat_mode=on it always does, saying so. */
	gpufile_config_set("compat_mode", "on");
	n = gpufile_check(path, items, MAX);
	it = find(n, "predict.gpufile");
	CHECK(it && strcmp(it->value, "posix") == 0 &&
	      strstr(it->why, "compat_mode=on"));
	it = find(n, "predict.cufile");
	CHECK(it && it->status == GPUFILE_CHECK_UNKNOWN);
	gpufile_config_reset();

	/* A missing file fails, with the reason. */
	n = gpufile_check(test_path("missing"), items, MAX);
	it = find(n, "file");
	CHECK(it && it->status == GPUFILE_CHECK_FAIL &&
	      strstr(it->why, "No such file"));

	/* tmpfs (/dev/shm) refuses O_DIRECT and is not a GDS file system. */
	if (access("/dev/shm", W_OK) == 0) {
		char shm[64];
		snprintf(shm, sizeof(shm), "/dev/shm/gpufile-check-%d",
		         (int)getpid());
		CHECK_EQ(test_make_file(shm, 8192, 2), 0);
		n = gpufile_check(shm, items, MAX);
		it = find(n, "file.fs");
		CHECK(it && strstr(it->value, "tmpfs") &&
		      it->status == GPUFILE_CHECK_FAIL);
		it = find(n, "predict.gpufile");
		CHECK(it && strcmp(it->value, "posix") == 0);
		unlink(shm);
	}
}

static void test_overrides(void)
{
	const char *bad = test_path("bad.json");
	const gpufile_check_item_t *it;
	FILE *f;
	int n;

	setenv("CUFILE_FORCE_COMPAT_MODE", "true", 1);
	setenv("CUFILE_EXPERIMENTAL_FS", "1", 1);
	n = gpufile_check(NULL, items, MAX);
	it = find(n, "env CUFILE_FORCE_COMPAT_MODE");
	CHECK(it && it->status == GPUFILE_CHECK_FAIL &&
	      strstr(it->why, "posix"));
	it = find(n, "env CUFILE_EXPERIMENTAL_FS");
	CHECK(it && it->status == GPUFILE_CHECK_UNKNOWN);
	unsetenv("CUFILE_FORCE_COMPAT_MODE");
	unsetenv("CUFILE_EXPERIMENTAL_FS");
	{
		gpufile_cufile_config_t c;
		gpufile__cufile_defaults(&c);
		if (gpufile__cufile_json_parse("{}", 2, "probe", &c)) {
			fprintf(stderr, "built without cJSON: cufile.json "
			                "checks skipped\n");
			return;
		}
	}

	f = fopen(bad, "w");
	fputs("{\n \"execution\": {\n  \"max_io_threads\": ,\n }\n}\n", f);
	fclose(f);
	setenv("CUFILE_ENV_PATH_JSON", bad, 1);
	n = gpufile_check(NULL, items, MAX);
	it = find(n, "cufile.json");
	CHECK(it && it->status == GPUFILE_CHECK_FAIL &&
	      strstr(it->why, "bad.json:3:"));
	if (it)
		fprintf(stderr, "cufile.json: %s\n", it->why);
	it = find(n, "env CUFILE_ENV_PATH_JSON");
	CHECK(it && strcmp(it->value, bad) == 0);

	f = fopen(bad, "w");
	fputs("{\"execution\": {\"max_io_threads\": 2}} // a comment\n", f);
	fclose(f);
	n = gpufile_check(NULL, items, MAX);
	it = find(n, "cufile.json");
	CHECK(it && it->status == GPUFILE_CHECK_PASS);
	it = find(n, "execution.max_io_threads");
	CHECK(it && strcmp(it->value, "2") == 0 &&
	      strstr(it->why, "from the file"));
	unsetenv("CUFILE_ENV_PATH_JSON");
}

static void test_cli(void)
{
	const char *cli = getenv("GPUFILE_CLI");
	char cmd[1024], out[1 << 16];
	FILE *p;
	size_t n;
	int status;

	if (!cli || access(cli, X_OK) != 0) {
		fprintf(stderr, "no CLI (GPUFILE_CLI): CLI part skipped\n");
		return;
	}
	snprintf(cmd, sizeof(cmd), "%s check %s --json", cli, test_path("f"));
	p = popen(cmd, "r");
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	status = pclose(p);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK(strstr(out, "\"checks\"") != NULL);
	CHECK(strstr(out, "\"predict.gpufile\"") != NULL);
	CHECK(strstr(out, "\"summary\"") != NULL);
	snprintf(cmd, sizeof(cmd), "%s check %s >/dev/null 2>&1", cli,
	         test_path("missing"));
	CHECK_EQ(WEXITSTATUS(system(cmd)), 1);
	snprintf(cmd, sizeof(cmd), "%s check a b >/dev/null 2>&1", cli);
	CHECK_EQ(WEXITSTATUS(system(cmd)), 2);
}

/* Whether libgpufile was built with cJSON (cufile.json is parsed). */
static int have_cjson(void)
{
	gpufile_cufile_config_t c;

	gpufile__cufile_defaults(&c);
	return gpufile__cufile_json_parse("{}", 2, "probe", &c) == 0;
}

/* Runs `$GPUFILE_CLI ARGS` with output discarded; returns its exit status,
 * or -1 when there is no CLI to run. */
static int cli_status(const char *args)
{
	const char *cli = getenv("GPUFILE_CLI");
	char cmd[1024];
	int status;

	if (!cli || access(cli, X_OK) != 0)
		return -1;
	snprintf(cmd, sizeof(cmd), "%s %s >/dev/null 2>&1", cli, args);
	status = system(cmd);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/*
 * A file this user cannot read fails the "file" check (which says why and
 * names the uid) and `gpufile check FILE` exits 1, as `gpufile read` would
 * fail with EACCES. Root reads anything, so as root the checks run in a
 * child that has become nobody (as `setpriv --reuid=nobody` would).
 */
static void test_unreadable(void)
{
	const int root = geteuid() == 0;
	/* As nobody, the file and the tool must be reachable wherever the
	 * checkout lies, to be refused by the file itself. */
	const char *d = root ? test_nobody_dir() : test_dir();
	const char *cli = root ? test_nobody_cli() : test_cli_path();
	char path[600], args[700];
	int status;
	pid_t pid;

	CHECK(d != NULL);
	if (!d)
		return;
	snprintf(path, sizeof(path), "%s/unreadable", d);
	CHECK_EQ(test_make_file(path, 8192, 3), 0);
	CHECK_EQ(chmod(path, 0), 0);
	snprintf(args, sizeof(args), "check %s", path);
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		const gpufile_check_item_t *it;
		int n, rc;

		if (root && test_become_nobody())
			_exit(77);
		if (cli)
			setenv("GPUFILE_CLI", cli, 1);
		else
			unsetenv("GPUFILE_CLI");
		n = gpufile_check(path, items, MAX);
		it = find(n, "file");
		if (!it || it->status != GPUFILE_CHECK_FAIL ||
		    !strstr(it->why, "Permission denied") ||
		    !strstr(it->why, "cannot be read by this user")) {
			fprintf(stderr, "unreadable: file: %s: %s\n",
			        it ? gpufile_check_status_name(it->status)
			           : "(none)",
			        it ? it->why : "");
			_exit(1);
		}
		/* No prediction for a file that cannot be read. */
		if (find(n, "predict.gpufile"))
			_exit(1);
		rc = cli_status(args);
		if (rc != -1 && rc != 1) {
			fprintf(stderr, "unreadable: gpufile %s exits %d\n",
			        args, rc);
			_exit(1);
		}
		_exit(0);
	}
	CHECK(pid > 0);
	CHECK(waitpid(pid, &status, 0) == pid);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
		fprintf(stderr, "cannot become nobody: unreadable part "
		                "skipped\n");
	else
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	chmod(path, 0600);
}

/* `gpufile check` exits 1 when the cufile.json in effect is malformed,
 * and 0 when it parses. */
static void test_cli_bad_json(void)
{
	const char *bad = test_path("bad-cli.json");
	FILE *f;

	if (!have_cjson() || cli_status("--version") != 0) {
		fprintf(stderr, "no cJSON or no CLI: bad cufile.json CLI part "
		                "skipped\n");
		return;
	}
	f = fopen(bad, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs("{\"execution\": {\"max_io_threads\": }}\n", f);
	fclose(f);
	setenv("CUFILE_ENV_PATH_JSON", bad, 1);
	CHECK_EQ(cli_status("check"), 1);
	CHECK_EQ(cli_status("check --json"), 1);
	f = fopen(bad, "w");
	fputs("{\"execution\": {\"max_io_threads\": 2}}\n", f);
	fclose(f);
	CHECK_EQ(cli_status("check"), 0);
	unsetenv("CUFILE_ENV_PATH_JSON");
}

/* The status of check name in `gpufile check --json` output json, in
 * status (pass, fail, unknown; "" when absent); why gets its reason. */
static void json_item(const char *json, const char *name, char *status,
                      char *why, size_t len)
{
	char key[128];
	const char *p, *s, *w;

	status[0] = why[0] = '\0';
	snprintf(key, sizeof(key), "\"name\": \"%s\"", name);
	p = strstr(json, key);
	s = p ? strstr(p, "\"status\": \"") : NULL;
	w = p ? strstr(p, "\"why\": \"") : NULL;
	if (s)
		sscanf(s + 11, "%15[a-z]", status);
	if (w)
		snprintf(why, len, "%.*s", (int)strcspn(w + 8, "\n"), w + 8);
}

/*
 * A bad setting that has nothing to do with cuFile (GPUFILE_TASK_SIZE)
 * used to make check say "libcufile not found ... install the GDS
 * package": the driver-open error of the bad setting stood in for the
 * library. The library (the fake one) passes; the driver is not tried,
 * saying why; the setting fails on its own line, naming the variable.
 */
static void test_cli_bad_setting(void)
{
	const char *cli = getenv("GPUFILE_CLI");
	char cmd[1024], out[1 << 16], status[16], why[512];
	FILE *p;
	size_t n;

	if (!cli || access(cli, X_OK) != 0)
		return;
	snprintf(cmd, sizeof(cmd),
	         "GPUFILE_CUFILE_LIBRARY=%s GPUFILE_TASK_SIZE=bogus %s check "
	         "--json",
	         FAKE_CUFILE_PATH, cli);
	p = popen(cmd, "r");
	n = p ? fread(out, 1, sizeof(out) - 1, p) : 0;
	out[n] = '\0';
	if (p)
		pclose(p);
	json_item(out, "libcufile", status, why, sizeof(why));
	CHECK(strcmp(status, "pass") == 0);
	CHECK_CONTAINS(why, "loaded");
	json_item(out, "cufile.driver", status, why, sizeof(why));
	CHECK(strcmp(status, "unknown") == 0);
	CHECK_CONTAINS(why, "GPUFILE_TASK_SIZE=\\\"bogus\\\"");
	json_item(out, "gpufile.task_size", status, why, sizeof(why));
	CHECK(strcmp(status, "fail") == 0);
	CHECK_CONTAINS(why, "GPUFILE_TASK_SIZE=\\\"bogus\\\": not a size");
}

/* The path swapped for a FIFO while gpufile_check runs. The checks used
 * to reopen the path by name (for O_DIRECT, for cuFile's registration),
 * with a blocking open() that waited forever for a writer once a FIFO
 * was there; they now all use the descriptor of the first open. The swap
 * is made from the platform hook (nvidia-fs "loaded", so that cuFile's
 * registration is asked), which runs after the file's first checks and
 * before cuFile's registration. The FIFO is held open for writing, so
 * that an open by name returns instead of hanging the test (with
 * O_DIRECT it then fails, EINVAL, and cuFile was not asked); inotify
 * counts the opens of the FIFO: none may happen. */
static const char *swap_fifo, *swap_path;
static int swaps;

static int swapping_nvfs_loaded(char *why, size_t len)
{
	if (swaps++ == 0)
		CHECK_EQ(rename(swap_fifo, swap_path), 0);
	snprintf(why, len, "nvidia-fs is loaded (test)");
	return 1;
}

static void test_fifo_swap(void)
{
	const char *path = test_path("swapped");
	const char *fifo = test_path("fifo");
	const gpufile_check_item_t *it;
	char events[4096];
	int writer, watch, n;

	CHECK_EQ(test_make_file(path, 65536, 4), 0);
	CHECK_EQ(mkfifo(fifo, 0600), 0);
	/* A FIFO given as the path is refused, without waiting. */
	n = gpufile_check(fifo, items, MAX);
	it = find(n, "file");
	CHECK(it && it->status == GPUFILE_CHECK_FAIL &&
	      strstr(it->why, "not a regular file or block device"));

	writer = open(fifo, O_RDWR | O_CLOEXEC); /* does not wait */
	watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	CHECK(writer >= 0 && watch >= 0);
	CHECK(inotify_add_watch(watch, fifo, IN_OPEN) >= 0);
	gpufile__cufile_reset();
	CHECK_EQ(gpufile_config_set("cufile_library", FAKE_CUFILE_PATH), 0);
	swap_fifo = fifo;
	swap_path = path;
	swaps = 0;
	gpufile__platform.nvfs_loaded = swapping_nvfs_loaded;
	n = gpufile_check(path, items, MAX);
	gpufile__platform_reset();
	CHECK_EQ(swaps, 1);
	CHECK(read(watch, events, sizeof(events)) < 0 && errno == EAGAIN);
	/* cuFile registered the file that was opened, not the FIFO. */
	it = find(n, "predict.gpufile");
	CHECK(it && strcmp(it->value, "cufile") == 0);
	if (it)
		fprintf(stderr, "swapped for a FIFO: %s: %s\n", it->value,
		        it->why);
	close(watch);
	close(writer);
	unlink(path);
	gpufile__cufile_reset();
	gpufile_config_reset();
}

/* An O_DIRECT pread that fails with EIO. */
static ssize_t direct_pread_eio(int fd, void *buf, size_t len, off_t off)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0 && (fl & O_DIRECT)) {
		errno = EIO;
		return -1;
	}
	return pread(fd, buf, len, off);
}

/* file.o_direct says that an aligned 4 KiB read succeeds: the read is
 * made for a file of any size (it was skipped below 4 KiB, and the item
 * passed whatever the read would have given). */
static void test_o_direct_small(void)
{
	const char *path = test_path("small");
	const gpufile_check_item_t *it;
	int n;

	CHECK_EQ(test_make_file(path, 1000, 5), 0);
	n = gpufile_check(path, items, MAX);
	it = find(n, "file.o_direct");
	CHECK(it != NULL);
	if (it && it->status != GPUFILE_CHECK_PASS) {
		fprintf(stderr,
		        "O_DIRECT refused here (%s): small-file "
		        "part skipped\n",
		        it->value);
		return;
	}
	CHECK_CONTAINS(it->why, "aligned 4 KiB read at offset 0 succeed");
	gpufile__sys.pread = direct_pread_eio;
	n = gpufile_check(path, items, MAX);
	gpufile__sys_reset();
	it = find(n, "file.o_direct");
	CHECK(it && it->status == GPUFILE_CHECK_FAIL);
	if (it)
		CHECK_CONTAINS(it->value, "read: Input/output error");
}

/* mountinfo writes a space in a mount point as \040: decoded before the
 * comparison with the file's path. */
static void test_mountinfo_unescape(void)
{
	char a[] = "/mnt/with\\040space\\011tab\\012nl\\134bs";
	char b[] = "/plain/path", c[] = "trailing\\04", d[] = "\\400\\x";

	gpufile__mountinfo_unescape(a);
	CHECK(strcmp(a, "/mnt/with space\ttab\nnl\\bs") == 0);
	gpufile__mountinfo_unescape(b);
	CHECK(strcmp(b, "/plain/path") == 0);
	gpufile__mountinfo_unescape(c); /* not an escape: kept */
	CHECK(strcmp(c, "trailing\\04") == 0);
	gpufile__mountinfo_unescape(d);
	CHECK(strcmp(d, "\\400\\x") == 0);
}

/* A file under a mount point whose name has a space (a tmpfs mounted in a
 * mount namespace of a child's own): file.fs finds the mount. Needs
 * unshare(CLONE_NEWNS) (root); skipped without it. */
static void test_mount_with_space(void)
{
	char point[600], file[700];
	int status = 0;
	pid_t pid;

	snprintf(point, sizeof(point), "%s/mount point", test_dir());
	snprintf(file, sizeof(file), "%s/f", point);
	CHECK_EQ(mkdir(point, 0700), 0);
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		const gpufile_check_item_t *it;
		char want[700];
		int n;

		if (unshare(CLONE_NEWNS) ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
		    mount("gpufile test", point, "tmpfs", 0, "size=1m"))
			_exit(77);
		if (test_make_file(file, 4096, 6))
			_exit(2);
		n = gpufile_check(file, items, MAX);
		it = find(n, "file.fs");
		snprintf(want, sizeof(want),
		         "tmpfs on gpufile test (mounted at %s)", point);
		if (!it || strcmp(it->value, want) != 0) {
			fprintf(stderr, "file.fs: %s: %s\n",
			        it ? it->value : "(none)", it ? it->why : "");
			_exit(1);
		}
		_exit(0);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
		fprintf(stderr, "no mount namespace (unshare): mount point "
		                "with a space skipped\n");
	else
		CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	rmdir(point);
}

int main(void)
{
	unsetenv("CUFILE_ENV_PATH_JSON");
	test_platform();
	test_file();
	test_overrides();
	test_cli();
	test_unreadable();
	test_cli_bad_json();
	test_cli_bad_setting();
	test_fifo_swap();
	test_o_direct_small();
	test_mountinfo_unescape();
	test_mount_with_space();
	test_cleanup();
	return test_finish("test_check");
}
