/*
 * Text made safe to show (see text.h).
 */
#include "text.h"
#include "gpufile.h"

#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

int text_utf8_len(const unsigned char *s)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	int n;

	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4;
	else
		return 0; /* ASCII, continuation byte, C0/C1 lead, F5-FF */
	/* The second byte's range excludes overlong forms (E0, F0),
	 * surrogates (ED) and values above U+10FFFF (F4). */
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (int i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

/* The next character of *p as text_escape() writes it, into piece (at
 * least 5 bytes); advances *p past it and returns the piece's length. */
static size_t text_piece(const unsigned char **p, char *piece)
{
	const unsigned char *c = *p;
	int u = *c >= 0x80 ? text_utf8_len(c) : 0;

	if (u && !(c[0] == 0xc2 && c[1] < 0xa0)) { /* not C1 */
		memcpy(piece, c, (size_t)u);
		*p += u;
		return (size_t)u;
	}
	*p += 1;
	if (*c >= 0x20 && *c < 0x7f && *c != '\\') {
		piece[0] = (char)*c;
		return 1;
	}
	if (*c == '\\') {
		memcpy(piece, "\\\\", 2);
		return 2;
	}
	piece[0] = '\\';
	piece[1] = 'x';
	piece[2] = "0123456789abcdef"[*c >> 4];
	piece[3] = "0123456789abcdef"[*c & 15];
	return 4;
}

const char *text_escape(const char *s, char *buf, size_t len)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	size_t o = 0;

	if (!len)
		return buf;
	while (*p) {
		char piece[8];
		size_t n = text_piece(&p, piece);

		if (o + n >= len)
			break;
		memcpy(buf + o, piece, n);
		o += n;
	}
	buf[o] = '\0';
	return buf;
}

char *text_escape_alloc(const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");
	size_t len = 1;
	char *buf;

	/* Each input byte becomes at most 4 output bytes (\xHH). */
	for (const unsigned char *q = p; *q; q++)
		len += 4;
	buf = malloc(len);
	return buf ? (char *)text_escape((const char *)p, buf, len) : NULL;
}

void text_put(FILE *out, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");

	while (*p) {
		char piece[8];
		size_t n = text_piece(&p, piece);

		fwrite(piece, 1, n, out);
	}
}

char *text_shown_path(const char *path)
{
	ssize_t n = gpufile_redact_url(path, NULL, 0);
	char *shown = n < 0 ? NULL : malloc((size_t)n + 1);

	if (shown && gpufile_redact_url(path, shown, (size_t)n + 1) != n) {
		free(shown);
		shown = NULL;
	}
	return shown;
}
