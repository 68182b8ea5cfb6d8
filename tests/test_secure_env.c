/*
 * Variables that name code to load or files to read are ignored in a
 * privileged process (issue 10 item 13): a setuid-root copy of this
 * program, run by the unprivileged user nobody, must not take
 * GPUFILE_CUFILE_LIBRARY, KVIKIO_CUFILE_LIBRARY or CUFILE_ENV_PATH_JSON
 * from the environment (glibc's secure_getenv returns NULL where AT_SECURE
 * is set), and must say so in the configuration warnings, one for each
 * (CUFILE_ENV_PATH_JSON was ignored without one), and gpufile_check must
 * say that CUFILE_ENV_PATH_JSON is set but ignored (it said "unset" and
 * "the cufile.json cuFile reads"). The same copy without the setuid bit
 * must take them: that shows the check can fail.
 *
 * Needs root (to make a setuid-root file and to run it as nobody through
 * setpriv) and a file system that honours setuid; skips (77) otherwise.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define EVIL "/nonexistent/evil.so"
#define JSON "/nonexistent/evil.json"

/* How gpufile_check describes CUFILE_ENV_PATH_JSON: 'i' where its item
 * says it is ignored, 'u' where any item says it is unset, '-' neither. */
static char check_says(void)
{
	static gpufile_check_item_t items[256];
	int n = gpufile_check(NULL, items, 256);
	char says = '-';

	for (int i = 0; i < n && i < 256; i++) {
		if (strcmp(items[i].name, "env CUFILE_ENV_PATH_JSON") == 0 &&
		    strstr(items[i].why, "set but ignored (raised privileges"))
			says = 'i';
		if (strstr(items[i].why, "CUFILE_ENV_PATH_JSON is unset"))
			return 'u';
	}
	return says;
}

/* Run as the helper: prints what the library took. */
static int show(void)
{
	gpufile_cufile_config_t cfg;
	char lib[512] = "", w[512];
	int ignored = 0, json = 0;

	gpufile__config_string("cufile_library", lib, sizeof(lib));
	GPUFILE_INIT(cfg);
	gpufile_cufile_config_load(NULL, &cfg);
	for (int i = 0; gpufile_config_warning(i, w, sizeof(w)) == 0; i++)
		if (strstr(w, "is ignored: this program runs with raised")) {
			ignored++;
			json += strstr(w, "CUFILE_ENV_PATH_JSON") != NULL;
		}
	printf("library=%s json=%s ignored=%d json_warned=%d check=%c "
	       "secure=%d\n",
	       lib, cfg.path_source, ignored, json, check_says(),
	       secure_getenv("HOME") == NULL);
	return 0;
}

/* Copies the running program to path with mode. */
static int copy_self(const char *path, mode_t mode)
{
	size_t len = 0;
	char *data = test_read_file("/proc/self/exe", &len);
	int fd, ok;

	if (!data)
		return -1;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0700);
	ok = fd >= 0 && write(fd, data, len) == (ssize_t)len;
	if (fd >= 0)
		close(fd);
	free(data);
	if (!ok || chown(path, 0, 0) || chmod(path, mode))
		return -1;
	return 0;
}

/* Runs helper as nobody with the variables set; its line into out. */
static int run_as_nobody(const char *helper, const char *var, char *out,
                         size_t len)
{
	int fds[2];
	pid_t pid;
	ssize_t n;
	int status = 0;

	if (pipe(fds))
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		setenv(var, EVIL, 1);
		setenv("CUFILE_ENV_PATH_JSON", JSON, 1);
		execlp("setpriv", "setpriv", "--reuid=65534", "--regid=65534",
		       "--clear-groups", helper, "show", (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	n = read(fds[0], out, len - 1);
	out[n > 0 ? n : 0] = '\0';
	close(fds[0]);
	waitpid(pid, &status, 0);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

int main(int argc, char **argv)
{
	static const char *const vars[] = {"GPUFILE_CUFILE_LIBRARY",
	                                   "KVIKIO_CUFILE_LIBRARY"};
	char dir[] = "/tmp/gpufile-secure-XXXXXX";
	char helper[64], out[512];

	if (argc > 1 && strcmp(argv[1], "show") == 0)
		return show();
	if (geteuid() != 0) {
		fprintf(stderr, "test_secure_env: needs root; skipped\n");
		return TEST_SKIP;
	}
	if (!mkdtemp(dir) || chmod(dir, 0755))
		return TEST_SKIP;
	snprintf(helper, sizeof(helper), "%s/helper", dir);

	/* The control: no setuid bit, so the variables count. */
	CHECK_EQ(copy_self(helper, 0755), 0);
	if (run_as_nobody(helper, vars[0], out, sizeof(out)) != 0) {
		fprintf(stderr, "test_secure_env: cannot run a helper as "
		                "nobody (setpriv); skipped\n");
		unlink(helper);
		rmdir(dir);
		return TEST_SKIP;
	}
	CHECK_CONTAINS(out, "library=" EVIL " json=CUFILE_ENV_PATH_JSON "
	                    "ignored=0 json_warned=0 check=- secure=0");

	CHECK_EQ(copy_self(helper, 04755), 0);
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		CHECK_EQ(run_as_nobody(helper, vars[i], out, sizeof(out)), 0);
		if (strstr(out, "secure=0")) {
			fprintf(stderr, "test_secure_env: setuid not honoured "
			                "here (nosuid?); skipped\n");
			unlink(helper);
			rmdir(dir);
			return TEST_SKIP;
		}
		/* json= names cuFile's default file where one exists (the
		 * GPU machine has /etc/cufile.json), never the variable. */
		CHECK_CONTAINS(out, "library=libcufile.so.0 json=");
		CHECK(strstr(out, "json=CUFILE_ENV_PATH_JSON") == NULL);
		CHECK_CONTAINS(out, " ignored=2 json_warned=1 check=i "
		                    "secure=1");
	}
	unlink(helper);
	rmdir(dir);
	return test_finish("test_secure_env");
}
