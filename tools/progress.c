/*
 * The progress display of the gpufile tool (see progress.h).
 */
#define _GNU_SOURCE
#include "progress.h"
#include "measure.h"

#include <stdio.h>
#include <unistd.h>

/* Redraws more often than this flicker and cost write() calls inside
 * the timed region; 4 per second reads as live. */
#define REDRAW_SECONDS 0.25

static void draw(struct progress *p, double now, int final)
{
	char done[32], total[32];
	double elapsed = now - p->start;
	double rate = elapsed > 0 ? (double)p->done / elapsed : 0;

	measure_human_bytes(p->done, done, sizeof(done));
	measure_human_bytes(p->total, total, sizeof(total));
	/* \r and "clear to end of line" redraw in place. */
	fprintf(stderr, "\r%s %s of %s (%3.0f%%)  %.2f GB/s", p->verb, done,
	        total,
	        p->total ? 100.0 * (double)p->done / (double)p->total : 100.0,
	        rate / 1e9);
	if (final)
		fprintf(stderr, "  in %.1f s\033[K\n", elapsed);
	else if (p->note)
		fprintf(stderr, "  %s\033[K", p->note);
	else if (rate > 0 && p->done < p->total)
		fprintf(stderr, "  ETA %.1f s\033[K",
		        (double)(p->total - p->done) / rate);
	else
		fputs("  ETA --\033[K", stderr);
	fflush(stderr);
	p->last_draw = now;
}

void progress_start(struct progress *p, const char *verb, uint64_t total,
                    int wanted)
{
	p->on = wanted && total >= PROGRESS_MIN_BYTES && isatty(STDERR_FILENO);
	p->verb = verb;
	p->note = NULL;
	p->total = total;
	p->done = 0;
	p->start = measure_now();
	p->last_draw = 0;
	if (p->on)
		draw(p, p->start, 0);
}

void progress_update(struct progress *p, uint64_t done)
{
	double now;

	p->done = done;
	if (!p->on)
		return;
	now = measure_now();
	if (now - p->last_draw >= REDRAW_SECONDS)
		draw(p, now, 0);
}

void progress_note(struct progress *p, const char *note)
{
	p->note = note;
	if (p->on)
		draw(p, measure_now(), 0);
}

void progress_end(struct progress *p)
{
	if (p->on)
		draw(p, measure_now(), 1);
	p->on = 0;
}
