/*
 * FIFOs, sockets, character devices and directories (issue 10 item 3):
 * gpufile_open, `gpufile read`, and a cufile.json given by path (argument,
 * CUFILE_ENV_PATH_JSON, `gpufile explain --cufile-json`) fail at once with
 * an error naming the path and its kind. Before, a FIFO blocked forever in
 * open(2) or read(2); a watchdog (alarm) turns such a hang into a failure.
 */
#define _GNU_SOURCE
#include "testlib.h"
#include "gpufile.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define WATCHDOG_S 60

static const char *current = "setup";

static void on_alarm(int sig)
{
	static const char msg[] = "test_special_files: hang (watchdog) in ";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0 ||
	    write(2, current, strlen(current)) < 0 || write(2, "\n", 1) < 0)
		_exit(1);
	_exit(1);
}

static void open_refused(const char *path, const char *flags, int err,
                         const char *kind)
{
	gpufile_t *h = (gpufile_t *)&h; /* must be reset to NULL */

	current = path;
	alarm(WATCHDOG_S);
	CHECK_EQ(gpufile_open(&h, path, flags), err);
	alarm(0);
	CHECK(h == NULL);
	CHECK_CONTAINS(gpufile_errmsg(), path);
	CHECK_CONTAINS(gpufile_errmsg(), kind);
	if (h && h != (gpufile_t *)&h)
		gpufile_close(h);
}

static void json_refused(const char *path, const char *kind)
{
	gpufile_cufile_config_t cfg;

	current = path;
	alarm(WATCHDOG_S);
	GPUFILE_INIT(cfg);
	CHECK_EQ(gpufile_cufile_config_load(path, &cfg), -EINVAL);
	alarm(0);
	CHECK_CONTAINS(gpufile_errmsg(), path);
	CHECK_CONTAINS(gpufile_errmsg(), kind);
	CHECK_CONTAINS(gpufile_errmsg(), "argument");

	/* The same file named by cuFile's variable. */
	setenv("CUFILE_ENV_PATH_JSON", path, 1);
	alarm(WATCHDOG_S);
	CHECK_EQ(gpufile_cufile_config_load(NULL, &cfg), -EINVAL);
	alarm(0);
	unsetenv("CUFILE_ENV_PATH_JSON");
	CHECK_CONTAINS(gpufile_errmsg(), path);
	CHECK_CONTAINS(gpufile_errmsg(), kind);
	CHECK_CONTAINS(gpufile_errmsg(), "CUFILE_ENV_PATH_JSON");
}

/* Runs the command line cmd; checks its exit status and that its output
 * contains want. */
static void cli_refused(const char *cmd, int status, const char *want)
{
	char out[4096];
	size_t n = 0;
	FILE *p;
	int rc;

	current = cmd;
	alarm(WATCHDOG_S);
	p = popen(cmd, "r");
	CHECK(p != NULL);
	if (!p)
		return;
	while (n < sizeof(out) - 1 && fgets(out + n, (int)(sizeof(out) - n), p))
		n += strlen(out + n);
	out[n] = '\0';
	rc = pclose(p);
	alarm(0);
	CHECK(WIFEXITED(rc));
	CHECK_EQ(WEXITSTATUS(rc), status);
	CHECK_CONTAINS(out, want);
}

int main(void)
{
	const char *fifo = test_path("fifo");
	const char *sock = test_path("socket");
	const char *dir = test_dir();
	const char *cli = getenv("GPUFILE_CLI");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int sfd;

	signal(SIGALRM, on_alarm);
	CHECK_EQ(mkfifo(fifo, 0600), 0);

	/* A FIFO with no writer (read) and no reader (write). */
	open_refused(fifo, "r", -ESPIPE, "FIFO");
	open_refused(fifo, "r+", -ESPIPE, "FIFO");
	open_refused(fifo, "w", -ESPIPE, "FIFO");
	open_refused(fifo, "a", -ESPIPE, "FIFO");
	/* A socket. */
	sfd = socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK(sfd >= 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	if (sfd >= 0 && strlen(sock) < sizeof(sa.sun_path) &&
	    bind(sfd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		open_refused(sock, "r", -ESPIPE, "socket");
		open_refused(sock, "w", -ESPIPE, "socket");
	}
	/* Character devices and a directory. */
	open_refused("/dev/null", "r", -ENODEV, "character device");
	open_refused("/dev/zero", "r+", -ENODEV, "character device");
	open_refused(dir, "r", -EISDIR, "directory");

	/* cufile.json. */
	json_refused(fifo, "FIFO");
	json_refused("/dev/null", "character device");
	{
		gpufile_cufile_config_t cfg;
		GPUFILE_INIT(cfg);
		CHECK_EQ(gpufile_cufile_config_load(dir, &cfg), -EISDIR);
		CHECK_CONTAINS(gpufile_errmsg(), "directory");
	}

	/* The tool, as a user runs it. */
	if (cli) {
		char cmd[4096];

		snprintf(cmd, sizeof(cmd), "'%s' read '%s' 2>&1", cli, fifo);
		cli_refused(cmd, 1, "FIFO");
		snprintf(cmd, sizeof(cmd),
		         "'%s' explain --cufile-json '%s' --size 1m 2>&1", cli,
		         fifo);
		cli_refused(cmd, 1, "FIFO");
		snprintf(
		    cmd, sizeof(cmd),
		    "CUFILE_ENV_PATH_JSON='%s' '%s' explain --size 1m 2>&1",
		    fifo, cli);
		cli_refused(cmd, 1, "FIFO");
	}
	if (sfd >= 0)
		close(sfd);
	return test_finish("test_special_files");
}
