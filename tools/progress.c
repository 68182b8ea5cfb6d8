/*
 * The progress display of the gpufile tool (see progress.h).
 *
 * Lock order: p->lock only; gpufile_stats_self() is called without it.
 */
#define _GNU_SOURCE
#include "progress.h"
#include "gpufile.h"
#include "measure.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Bytes the process has moved on every path, both directions (the tool
 * does one command's I/O, so the growth is this command's). */
static uint64_t counted_bytes(void)
{
	gpufile_stats_t s;
	uint64_t n = 0;

	GPUFILE_INIT(s);
	if (gpufile_stats_self(&s))
		return 0;
	for (int p = 0; p < GPUFILE_PATH_COUNT; p++)
		n += s.path[p][0].bytes + s.path[p][1].bytes;
	return n;
}

/* Caller holds p->lock. Draws value (never below what was drawn). */
static void draw(struct progress *p, uint64_t value, double now, int final)
{
	char done[32], total[32], extra[128] = "";
	double elapsed = now - p->start;
	double rate;

	if (value < p->shown)
		value = p->shown;
	if (value > p->total && p->total)
		value = p->total;
	p->shown = value;
	rate = elapsed > 0 ? (double)value / elapsed : 0;
	measure_human_bytes(value, done, sizeof(done));
	measure_human_bytes(p->total, total, sizeof(total));
	if (p->describe)
		p->describe(p->describe_arg, value, extra, sizeof(extra));
	/* \r and "clear to end of line" redraw in place. */
	fprintf(stderr, "\r%s %s of %s (%3.0f%%)  %.2f GB/s%s", p->verb, done,
	        total,
	        p->total ? 100.0 * (double)value / (double)p->total : 100.0,
	        rate / 1e9, extra);
	if (final)
		fprintf(stderr, "  in %.1f s\033[K\n", elapsed);
	else if (p->note)
		fprintf(stderr, "  %s\033[K", p->note);
	else if (rate > 0 && value < p->total)
		fprintf(stderr, "  ETA %.1f s\033[K",
		        (double)(p->total - value) / rate);
	else
		fputs("  ETA --\033[K", stderr);
	fflush(stderr);
	p->last_draw = now;
}

/* Follows the counters: a request of the command moves the line while
 * it runs, task by task, though the command hears of it only at its end. */
static void *follow(void *arg)
{
	struct progress *p = arg;
	struct timespec until;

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		uint64_t counted;
		double now;

		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += (long)(PROGRESS_POLL_SECONDS * 1e9);
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		while (!p->stop && pthread_cond_timedwait(&p->wake, &p->lock,
		                                          &until) != ETIMEDOUT)
			;
		if (p->stop)
			break;
		pthread_mutex_unlock(&p->lock);
		counted = counted_bytes();
		now = measure_now();
		pthread_mutex_lock(&p->lock);
		if (p->stop)
			break;
		counted =
		    counted > p->counted_base ? counted - p->counted_base : 0;
		if (counted < p->done)
			counted = p->done;
		if (counted >= p->shown + PROGRESS_STEP ||
		    now - p->last_draw >= PROGRESS_SECONDS)
			draw(p, counted, now, 0);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

void progress_start_with(struct progress *p, const char *verb, uint64_t total,
                         int wanted,
                         void (*describe)(void *arg, uint64_t done, char *buf,
                                          size_t len),
                         void *describe_arg)
{
	memset(p, 0, sizeof(*p));
	p->on = wanted && total >= PROGRESS_MIN_BYTES && isatty(STDERR_FILENO);
	p->verb = verb;
	p->total = total;
	p->describe = describe;
	p->describe_arg = describe_arg;
	p->start = measure_now();
	if (!p->on)
		return;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->wake, NULL);
	p->counted_base = counted_bytes();
	pthread_mutex_lock(&p->lock);
	draw(p, 0, p->start, 0);
	pthread_mutex_unlock(&p->lock);
	/* Without the thread the line still moves at each update. */
	p->following = pthread_create(&p->follower, NULL, follow, p) == 0;
}

void progress_start(struct progress *p, const char *verb, uint64_t total,
                    int wanted)
{
	progress_start_with(p, verb, total, wanted, NULL, NULL);
}

void progress_update(struct progress *p, uint64_t done)
{
	double now;

	if (!p->on) {
		p->done = done;
		return;
	}
	now = measure_now();
	pthread_mutex_lock(&p->lock);
	p->done = done;
	if (done >= p->reported_at_draw + PROGRESS_STEP ||
	    now - p->last_draw >= PROGRESS_SECONDS) {
		p->reported_at_draw = done;
		draw(p, done, now, 0);
	}
	pthread_mutex_unlock(&p->lock);
}

void progress_note(struct progress *p, const char *note)
{
	if (!p->on) {
		p->note = note;
		return;
	}
	pthread_mutex_lock(&p->lock);
	p->note = note;
	draw(p, p->done, measure_now(), 0);
	pthread_mutex_unlock(&p->lock);
}

void progress_end(struct progress *p)
{
	if (!p->on)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&p->lock);
	if (p->following)
		pthread_join(p->follower, NULL);
	p->following = 0;
	/* The final line shows what the command finished, not more. */
	p->shown = 0;
	draw(p, p->done, measure_now(), 1);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->wake);
	p->on = 0;
}
