/*
 * Text the gpufile tool shows that came from elsewhere -- a file (tensor
 * names, metadata keys), another process (its command name, its paths),
 * the command line or the library's messages that quote them -- made safe
 * to show: bytes that could act on a terminal escaped, and URLs without
 * their secrets. --json output is escaped by json_write_string() (json.h).
 */
#ifndef GPUFILE_TOOLS_TEXT_H
#define GPUFILE_TOOLS_TEXT_H

#include <stddef.h>
#include <stdio.h>

/* The length (2-4) of the valid UTF-8 sequence of a non-ASCII character
 * at s, or 0 when the byte at s does not start one (overlong forms,
 * surrogates and values above U+10FFFF are not valid). */
int text_utf8_len(const unsigned char *s);

/* Copies s into buf (len bytes, truncated to fit) for a terminal: bytes
 * that could act on it are escaped as \xHH (control characters, DEL, C1
 * controls U+0080-U+009F, bytes that are not valid UTF-8), and a backslash
 * is doubled; printable ASCII and other valid UTF-8 pass. Returns buf.
 * Text from another process (its command name, its file paths) goes
 * through this before it is printed. */
const char *text_escape(const char *s, char *buf, size_t len);

/* s escaped as text_escape() escapes it, whole, in a buffer sized from
 * it that the caller frees. NULL when out of memory. */
char *text_escape_alloc(const char *s);

/* Writes s to out escaped as text_escape() escapes it, whole (no buffer
 * to cut it). Every text output of a name that a file, another process or
 * the command line chose (tensor names, metadata keys, paths, messages
 * that quote them) goes through this or msg_error() (msg.h). */
void text_put(FILE *out, const char *s);

/* path as the library shows it (gpufile_redact_url: a URL without its
 * password, query and fragment), allocated and sized from it: the
 * caller frees it. NULL when out of memory. */
char *text_shown_path(const char *path);

#endif
