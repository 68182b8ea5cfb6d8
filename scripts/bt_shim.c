/* LD_PRELOAD'd by scripts/queue_debug.sh: on SIGUSR2 the receiving thread
 * writes its C backtrace to the file named by BT_SHIM_OUT (appended), so
 * that a hung process's threads can be shown without gdb. */
#define _GNU_SOURCE
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static int out_fd = -1;

static void on_usr2(int sig)
{
	void *frames[48];
	char head[64];
	int n = backtrace(frames, 48);
	int len = snprintf(head, sizeof(head), "--- thread %ld\n",
	                   (long)syscall(SYS_gettid));

	(void)sig;
	if (out_fd < 0)
		return;
	if (write(out_fd, head, (size_t)len) < 0)
		return;
	backtrace_symbols_fd(frames, n, out_fd);
}

__attribute__((constructor)) static void init(void)
{
	const char *path = getenv("BT_SHIM_OUT");
	void *f[2];
	struct sigaction sa;

	if (!path)
		return;
	out_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	backtrace(f, 2); /* loads libgcc now, not in the handler */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_usr2;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR2, &sa, NULL);
}
