/* Error codes, their descriptions, and the per-thread detailed message. */
#include "common/common.h"

#include <assert.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * This thread's message, as long as its text (a path or URL in it is as
 * long as the caller made it): in short_text when it fits, else in a
 * malloc'd buffer, grown as needed and freed when the thread ends (the
 * key's destructor). Where no memory is left for it, the message is cut
 * to fit short_text: cut, but never lost.
 *
 * short_text stays small because this is thread-local storage of a
 * library that Python dlopen()s, whose TLS (initial-exec: map_copy.c's
 * guard) must fit glibc's static TLS surplus: 2 x 1024 bytes here made
 * the dlopen fail ("cannot allocate memory in static TLS block").
 *
 * Two slots: gpufile__error_save() sets the message aside by making the
 * other slot current, so that code which may fail on its own (reading a
 * setting) cannot overwrite it, and gpufile__error_restore() makes it
 * current again. Per thread, so no lock is involved.
 */
struct message {
	char *text; /* malloc'd, cap bytes, when short_text is too short */
	size_t cap;
	char short_text[448];
};

static _Thread_local struct message slots[2];
static _Thread_local int current;
static _Thread_local int saved; /* a save is in effect */
static pthread_key_t free_key;
static int have_free_key;
static pthread_once_t free_once = PTHREAD_ONCE_INIT;

static void free_slots(void *arg)
{
	(void)arg;
	for (int i = 0; i < 2; i++) {
		free(slots[i].text);
		slots[i].text = NULL;
		slots[i].cap = 0;
	}
}

static void make_free_key(void)
{
	have_free_key = pthread_key_create(&free_key, free_slots) == 0;
}

/* Where the next message of len bytes (with its NUL) goes, *cap bytes:
 * short_text, the buffer the slot has, or a new one. A buffer the slot
 * leaves goes to *old, to be freed once the caller has copied the text,
 * which may come from it. */
static char *room(size_t len, size_t *cap, char **old)
{
	struct message *m = &slots[current];
	char *grown;

	*old = NULL;
	if (len > sizeof(m->short_text)) {
		if (m->text && m->cap >= len) {
			*cap = m->cap;
			return m->text;
		}
		grown = malloc(len);
		if (grown) {
			pthread_once(&free_once, make_free_key);
			if (have_free_key)
				pthread_setspecific(free_key, slots);
			*old = m->text;
			m->text = grown;
			m->cap = len;
			*cap = len;
			return grown;
		}
	}
	*old = m->text; /* fits, or no memory: short_text */
	m->text = NULL;
	m->cap = 0;
	*cap = sizeof(m->short_text);
	return m->short_text;
}

/* Stores text (len bytes, NUL excluded) as the message. text may lie
 * within the current message. */
static void store(const char *text, size_t len)
{
	size_t cap;
	char *old, *dst = room(len + 1, &cap, &old);

	if (len >= cap)
		len = cap - 1;
	memmove(dst, text, len);
	dst[len] = '\0';
	free(old);
}

const char *gpufile_strerror(int err)
{
	switch (err) {
#define GPUFILE_X_CASE(name, value, text)                                      \
	case name:                                                             \
		return text;
		GPUFILE_ERRORS(GPUFILE_X_CASE)
#undef GPUFILE_X_CASE
	case 0:
		return "success";
	default:
		break;
	}
	if (err < 0 && err > -4096)
		return strerror(-err);
	return "unknown error";
}

const char *gpufile_errmsg(void)
{
	const struct message *m = &slots[current];

	return m->text ? m->text : m->short_text;
}

/* Both format apart first: callers wrap the message before theirs
 * ("batch entry 0: %s", gpufile_errmsg()), and formatting straight into
 * the message overwrote it while vsnprintf was still reading it (the path
 * in the inner message came out cut or repeated). */
int gpufile__fail(int err, const char *fmt, ...)
{
	char local[512], *text = local;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(local, sizeof(local), fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(local)) {
		char *big = malloc((size_t)n + 1);

		if (big) {
			va_start(ap, fmt);
			vsnprintf(big, (size_t)n + 1, fmt, ap);
			va_end(ap);
			text = big;
		} else {
			n = (int)sizeof(local) - 1; /* cut, not lost */
		}
	}
	store(text, (size_t)n);
	if (text != local)
		free(text);
	return err;
}

int gpufile__fail_msg(int err, const char *msg)
{
	store(msg ? msg : "", msg ? strlen(msg) : 0);
	return err;
}

void gpufile__clear_error(void)
{
	struct message *m = &slots[current];

	if (m->text)
		m->text[0] = '\0';
	m->short_text[0] = '\0';
}

void gpufile__error_save(void)
{
	assert(!saved);
	saved = 1;
	current ^= 1;
	gpufile__clear_error();
}

void gpufile__error_restore(void)
{
	assert(saved);
	saved = 0;
	current ^= 1;
}
