/*
 * A one-line progress display (bytes, rate, ETA) on stderr for `gpufile
 * read`, `write` and `load` of large files. It is drawn only when stderr
 * is a terminal, --json is not given and the work is at least
 * PROGRESS_MIN_BYTES, so that logs, pipes and JSON consumers never see
 * it.
 *
 * The line moves at least every PROGRESS_STEP bytes or PROGRESS_SECONDS,
 * whichever comes first: the command reports what it finished
 * (progress_update), and while the line is on a thread of its own reads
 * the process's gpufile counters (gpufile_stats_self, credited as each
 * task ends) every PROGRESS_POLL_SECONDS, so that a single large request
 * moves too.
 */
#ifndef GPUFILE_TOOLS_PROGRESS_H
#define GPUFILE_TOOLS_PROGRESS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* Below this a read or write is over before a display would help. */
#define PROGRESS_MIN_BYTES (64ull << 20)
/* The line moves at least this often, in bytes and in seconds. */
#define PROGRESS_STEP         (64ull << 20)
#define PROGRESS_SECONDS      0.2
#define PROGRESS_POLL_SECONDS 0.05

struct progress {
	int on;
	const char *verb; /* "read", "wrote" */
	const char *note; /* shown instead of the ETA, e.g. "syncing" */
	uint64_t total;
	uint64_t done;             /* as the command last reported */
	uint64_t shown;            /* as last drawn: never goes back */
	uint64_t reported_at_draw; /* done when the command last drew */
	uint64_t counted_base;     /* the process's bytes at the start */
	double start, last_draw;
	/* Optional words after the rate (e.g. "file 1/2, tensors 3/40"),
	 * for done bytes; called with lock held. */
	void (*describe)(void *arg, uint64_t done, char *buf, size_t len);
	void *describe_arg;
	/* The thread that follows the counters, while on. */
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t follower;
	int following, stop;
};

/* Sets p up for total bytes; wanted is 0 when the command was asked for
 * machine output (--json) or no display (--no-progress). Draws the first
 * line when the display is on. describe (may be NULL) and its arg are set
 * before the first line. */
void progress_start_with(struct progress *p, const char *verb, uint64_t total,
                         int wanted,
                         void (*describe)(void *arg, uint64_t done, char *buf,
                                          size_t len),
                         void *describe_arg);
void progress_start(struct progress *p, const char *verb, uint64_t total,
                    int wanted);

/* Records that done bytes (of total) are finished; redraws when done moved
 * PROGRESS_STEP since the last time it did, or PROGRESS_SECONDS passed. */
void progress_update(struct progress *p, uint64_t done);

/* Shows note in place of the ETA from now on (a step after the bytes,
 * such as the sync of a write), drawn at once. */
void progress_note(struct progress *p, const char *note);

/* Draws the final line and ends it with a newline. */
void progress_end(struct progress *p);

#endif
