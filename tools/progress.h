/*
 * A one-line progress display (bytes, rate, ETA) on stderr for `gpufile
 * read` and `gpufile write` of large files. It is drawn only when stderr
 * is a terminal, --json is not given and the work is at least
 * PROGRESS_MIN_BYTES, so that logs, pipes and JSON consumers never see
 * it.
 */
#ifndef GPUFILE_TOOLS_PROGRESS_H
#define GPUFILE_TOOLS_PROGRESS_H

#include <stdint.h>

/* Below this a read or write is over before a display would help. */
#define PROGRESS_MIN_BYTES (64ull << 20)

struct progress {
	int on;
	const char *verb; /* "read", "wrote" */
	const char *note; /* shown instead of the ETA, e.g. "syncing" */
	uint64_t total, done;
	double start, last_draw;
};

/* Sets p up for total bytes; wanted is 0 when the command was asked for
 * machine output (--json) or no display (--no-progress). Draws the first
 * line when the display is on. */
void progress_start(struct progress *p, const char *verb, uint64_t total,
                    int wanted);

/* Records that done bytes (of total) are finished; redraws at most every
 * quarter second. */
void progress_update(struct progress *p, uint64_t done);

/* Shows note in place of the ETA from now on (a step after the bytes,
 * such as the sync of a write), drawn at once. */
void progress_note(struct progress *p, const char *note);

/* Draws the final line and ends it with a newline. */
void progress_end(struct progress *p);

#endif
