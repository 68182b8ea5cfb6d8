/*
 * Copies out of a shared map of a file with streaming (non-temporal)
 * stores, guarded against SIGBUS: the fast way for warm bytes to reach a
 * host buffer (posix_io.c, gpufile__map_read).
 *
 * Why: on the H200 host (16 cores, 300 MiB L3, bench/README.md "Host
 * reads"), 16 threads pread()ing a warm 4 GiB file into one 4 GiB buffer
 * reached 36-43 GB/s; 16 threads taking 4 MiB chunks of one map of the
 * file, populating each (MADV_POPULATE_READ) and copying it with 64-byte
 * streaming stores, 70-71 GB/s; the same chunks by memcpy, 46. A streaming
 * store writes a whole line without reading it first, and the destination
 * (far larger than the caches) is not pulled through them.
 *
 * Why guarded: a page of a map past the end of its file raises SIGBUS
 * where pread would have returned a short count. A file cut short by
 * another process while gpufile copies from it must cost a short read,
 * not the process. So the first copy installs a SIGBUS handler (once per
 * process); a copy arms it for its thread, and a fault taken by the
 * kernel while armed (si_code > 0) jumps back to the copy, which returns
 * -EFAULT: the caller reads the range again with pread, which gets the
 * file's real end. Any other SIGBUS goes to the program's handlers as it
 * would have without gpufile, or, where there is none, ends the process
 * (the default disposition is restored and the signal taken again). Each
 * copy first checks that the handler is still gpufile's and puts it back
 * where the program installed its own since (Python's faulthandler,
 * which pytest enables, does): turning the copy off there instead had
 * left memory-mapped handles and gathered reads, which copy from their
 * map whatever the setting, to die of the fault under pytest. "Who gets
 * a SIGBUS" below says how the program's handlers are kept.
 * The handler is installed only once a guarded copy is to be made, and
 * never with host_map_copy=off: by a streaming copy (a warm host read, a
 * memory-mapped handle's host read; under auto only on a CPU with
 * AVX-512 and 8 or more usable CPUs), or by a gathered read's copies from its
 * map (gather.c: memcpy of short runs, any CPU).
 *
 * The guard's state is per thread (initial-exec TLS, so the handler never
 * allocates); the process-wide part is set once, under guard_once.
 */
#define _GNU_SOURCE
#include "paths/paths.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* ---- the SIGBUS guard ---- */

struct guard {
	sigjmp_buf env;
	volatile sig_atomic_t armed;
};

static __thread struct guard guard __attribute__((tls_model("initial-exec")));

static atomic_ullong faults;    /* faults the guard turned into -EFAULT */
static atomic_ullong map_bytes; /* bytes copied from maps */

/*
 * Who gets a SIGBUS that is not a guarded copy's.
 *
 * gpufile's handler (ours) goes in once, under guard_once, over original:
 * the default, or the handler the program had then. A SIGBUS that is not
 * a guarded copy's goes to original, ours staying in place, as a handler
 * that chains does.
 *
 * A program may install its own handler after ours: Python's
 * faulthandler.enable() does, and pytest calls it. Each guarded copy
 * first looks (reclaim()) and, where the handler in place is not ours,
 * puts ours back, pushing the one it displaced onto the stack
 * displaced_top. A SIGBUS that is not a guarded copy's goes to the top of
 * that stack, which steps aside for it (step_aside()): the node is popped,
 * its handler put back in place and called as the kernel would have (its
 * flags: SA_SIGINFO, SA_NODEFER, SA_RESETHAND; its mask). So the
 * program's handler meets its signals in the state it left: where it
 * returns with its handler still in place (it dealt with the signal),
 * ours goes back over it; where it put back the handler it had displaced
 * (ours) and raised the signal again, as faulthandler does, that signal
 * reaches ours with the stack one shorter and goes on down it to
 * original: the process ends as it would have without gpufile, each
 * handler having run once. (Calling it without stepping aside looped:
 * faulthandler's raise came back to ours, which called faulthandler
 * again, which printed its report again.)
 *
 * Lock-free, atomics only: the handler runs on any thread at any time and
 * takes no lock, and a fork() in the middle of a reclaim leaves the child
 * a whole stack. A node is never changed once published, nor freed (a
 * handler may be reading it). A handler already on the stack cuts the
 * stack back to its node rather than being pushed again, and a node equal
 * to one made before (the same handler, flags and mask over the same
 * node) is that node again: a program that keeps installing the same few
 * handlers uses a few nodes.
 */
struct displaced {
	struct sigaction act;
	const struct displaced *below;
	const struct displaced *next_made; /* the list of every node made */
};

static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static int guard_installed;       /* set once, under guard_once */
static struct sigaction ours;     /* guard_once, before it is installed */
static struct sigaction original; /* the same */
static _Atomic(const struct displaced *) displaced_top;
static _Atomic(const struct displaced *) made;

/* glibc fills only the kernel's part of sa_mask: the rest stays zero. */
static int query(struct sigaction *cur)
{
	memset(cur, 0, sizeof(*cur));
	return sigaction(SIGBUS, NULL, cur);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc);

static int is_ours(const struct sigaction *a)
{
	return (a->sa_flags & SA_SIGINFO) && a->sa_sigaction == on_sigbus;
}

static int is_default_or_ignored(const struct sigaction *a)
{
	return a->sa_handler == SIG_DFL || a->sa_handler == SIG_IGN;
}

static int same_handler(const struct sigaction *a, const struct sigaction *b)
{
	return a->sa_handler == b->sa_handler &&
	       !((a->sa_flags ^ b->sa_flags) & SA_SIGINFO);
}

static int same_act(const struct sigaction *a, const struct sigaction *b)
{
	if (!same_handler(a, b) || a->sa_flags != b->sa_flags)
		return 0;
	for (int sig = 1; sig < NSIG; sig++)
		if (sigismember(&a->sa_mask, sig) !=
		    sigismember(&b->sa_mask, sig))
			return 0;
	return 1;
}

/* The node for act over below: one made before, or a new one. NULL when
 * out of memory. */
static const struct displaced *node_for(const struct sigaction *act,
                                        const struct displaced *below)
{
	const struct displaced *n, *head;
	struct displaced *fresh;

	head = atomic_load_explicit(&made, memory_order_acquire);
	for (n = head; n; n = n->next_made)
		if (n->below == below && same_act(&n->act, act))
			return n;
	fresh = malloc(sizeof(*fresh));
	if (!fresh)
		return NULL;
	fresh->act = *act;
	fresh->below = below;
	do
		fresh->next_made = head;
	while (!atomic_compare_exchange_weak_explicit(
	    &made, &head, fresh, memory_order_release, memory_order_acquire));
	return fresh;
}

/* Puts act on top of the stack, or cuts the stack back to it where it is
 * there already. Returns 0, or -ENOMEM. */
static int push(const struct sigaction *act)
{
	const struct displaced *top, *n;

	top = atomic_load_explicit(&displaced_top, memory_order_acquire);
	do {
		for (n = top; n && !same_act(&n->act, act); n = n->below)
			;
		if (!n)
			n = node_for(act, top);
		if (!n)
			return -ENOMEM;
	} while (!atomic_compare_exchange_weak_explicit(&displaced_top, &top, n,
	                                                memory_order_acq_rel,
	                                                memory_order_acquire));
	return 0;
}

/* Ours in place: 1 when it is (again), 0 when it cannot be put back. */
static int reclaim(void)
{
	struct sigaction cur, old;

	if (query(&cur))
		return 0;
	if (is_ours(&cur))
		return 1;
	/* Pushed first: a SIGBUS before ours goes back in reaches cur, in
	 * place, and one after reaches ours, which finds cur on top. */
	if (push(&cur))
		return 0;
	memset(&old, 0, sizeof(old));
	if (sigaction(SIGBUS, &ours, &old))
		return 0;
	/* The program replaced cur meanwhile: old was displaced too. Where
	 * it cannot be recorded it goes back, and the copy is not made. */
	if (!is_ours(&old) && !same_act(&old, &cur) && push(&old)) {
		sigaction(SIGBUS, &old, NULL);
		return 0;
	}
	return 1;
}

/* Calls the handler a for a signal that ours took, with the mask and
 * flags the kernel would have given it. */
static void call_handler(const struct sigaction *a, int sig, siginfo_t *si,
                         void *uc)
{
	sigset_t old, self;

	pthread_sigmask(SIG_BLOCK, &a->sa_mask, &old);
	if (a->sa_flags & SA_NODEFER) {
		sigemptyset(&self);
		sigaddset(&self, sig);
		pthread_sigmask(SIG_UNBLOCK, &self, NULL);
	}
	if (a->sa_flags & SA_SIGINFO)
		a->sa_sigaction(sig, si, uc);
	else
		a->sa_handler(sig);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* A SIGBUS that is not a guarded copy's, for disposition a: what would
 * have happened had a been in place. */
static void deliver(const struct sigaction *a, int sig, siginfo_t *si, void *uc)
{
	struct sigaction dfl;

	if (!is_default_or_ignored(a)) {
		call_handler(a, sig, si, uc);
		return;
	}
	/* Ignored, and sent by kill() or sigqueue(): ignore it. */
	if (a->sa_handler == SIG_IGN && si->si_code <= 0)
		return;
	/* The default (or an ignored fault, which the kernel does not let
	 * a process ignore): restore it and take the signal again, blocked
	 * while this handler runs, so it is delivered when it returns; a
	 * fault is also raised again by the instruction it returns to. */
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	if (si->si_code <= 0)
		raise(sig);
}

/* The program's handler n, which ours displaced, gets a signal that is
 * not a guarded copy's: off the stack and back in place first. */
static void step_aside(const struct displaced *n, int sig, siginfo_t *si,
                       void *uc)
{
	const struct displaced *expect = n;
	struct sigaction put = n->act, cur;

	/* Fails only where another thread changed the stack meanwhile. */
	atomic_compare_exchange_strong_explicit(&displaced_top, &expect,
	                                        n->below, memory_order_acq_rel,
	                                        memory_order_acquire);
	if (put.sa_flags & SA_RESETHAND) {
		memset(&put, 0, sizeof(put));
		put.sa_handler = SIG_DFL;
	}
	sigaction(sig, &put, NULL);
	deliver(&n->act, sig, si, uc);
	if (is_default_or_ignored(&put))
		return;
	/* It returned with its handler still in place: ours goes back over
	 * it, unless a reclaim on another thread did it meanwhile. */
	expect = n->below;
	if (query(&cur) == 0 && same_handler(&cur, &put) &&
	    atomic_compare_exchange_strong_explicit(&displaced_top, &expect, n,
	                                            memory_order_acq_rel,
	                                            memory_order_acquire))
		sigaction(sig, &ours, NULL);
}

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	const struct displaced *top;
	int saved_errno = errno;

	/* si_code > 0: raised by the kernel for this thread's own access,
	 * which while armed is the guarded copy's. */
	if (guard.armed && si->si_code > 0) {
		guard.armed = 0;
		siglongjmp(guard.env, 1);
	}
	top = atomic_load_explicit(&displaced_top, memory_order_acquire);
	if (top)
		step_aside(top, sig, si, uc);
	else
		deliver(&original, sig, si, uc);
	errno = saved_errno;
}

static void install(void)
{
	memset(&ours, 0, sizeof(ours));
	ours.sa_sigaction = on_sigbus;
	/* SA_ONSTACK: runtimes that run threads on small stacks (Go)
	 * require it of every handler. */
	ours.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
	sigemptyset(&ours.sa_mask);
	/* original is read before ours can run. */
	guard_installed =
	    query(&original) == 0 && sigaction(SIGBUS, &ours, NULL) == 0;
}

int gpufile__guard_ready(int mode)
{
	if (mode == GPUFILE__MAP_COPY_OFF)
		return 0;
	pthread_once(&guard_once, install);
	return guard_installed && reclaim();
}

int gpufile__stream_copy_ready(int mode)
{
	if (!gpufile__stream_copy_allowed(mode, gpufile__stream_copy_kind(),
	                                  gpufile__usable_cpus()))
		return 0; /* and the handler is not installed */
	return gpufile__guard_ready(mode);
}

int gpufile__guarded(void (*fn)(void *arg), void *arg)
{
	/* Nothing of this frame is changed between sigsetjmp and the jump
	 * (what fn changes lives behind arg). The mask is saved (1): the
	 * jump leaves the handler, where SIGBUS was blocked. */
	if (sigsetjmp(guard.env, 1)) {
		atomic_fetch_add_explicit(&faults, 1, memory_order_relaxed);
		gpufile__stats_map_copy(0, 1);
		return -EFAULT;
	}
	guard.armed = 1;
	fn(arg);
	guard.armed = 0;
	return 0;
}

struct stream_job {
	gpufile__copy_fn copy;
	char *dst;
	const char *src;
	size_t n;
};

static void stream_job(void *arg)
{
	struct stream_job *j = arg;

	j->copy(j->dst, j->src, j->n);
}

int gpufile__stream_copy(char *dst, const char *src, size_t n)
{
	struct stream_job j = {gpufile__stream_copy_fn(), dst, src, n};
	int rc = gpufile__guarded(stream_job, &j);

	if (rc == 0)
		atomic_fetch_add_explicit(&map_bytes, n, memory_order_relaxed);
	return rc;
}

void gpufile__stream_copy_counts(uint64_t *bytes, uint64_t *caught)
{
	if (bytes)
		*bytes = atomic_load(&map_bytes);
	if (caught)
		*caught = atomic_load(&faults);
}
