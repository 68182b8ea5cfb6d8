/*
 * safetensors checkpoints: the header parsed and validated (by hand, see
 * struct st_parser: no JSON tree), the data section read through an
 * ordinary gpufile handle, so that every byte is counted on its path and
 * the handle's path reason applies.
 *
 * The format (huggingface/safetensors, safetensors/src/tensor.rs): an
 * 8-byte little-endian header length N, N bytes of UTF-8 JSON (an object:
 * tensor name -> {"dtype", "shape", "data_offsets": [begin, end]}, and an
 * optional "__metadata__" object of string -> string), then the data
 * section. Offsets are relative to the data section.
 *
 * Validation follows the reference reader, so that a file accepted here is
 * one the reference accepts too: header at most 100,000,000 bytes, strict
 * RFC 8259 JSON as serde_json reads it (cJSON is laxer: check_lexical()
 * below holds what it lets through), each of dtype, shape and
 * data_offsets given once per tensor, __metadata__ at most once, the
 * tensors, sorted by offsets, cover the data section exactly (no overlap,
 * no gap, nothing after the last one), and prod(shape) * dtype bits / 8 ==
 * end - begin, computed without overflow. Where the reference stops at the
 * first problem with a bare code (InvalidOffset, TensorInvalidInfo), this
 * file names the file, the tensor and the field.
 *
 * Two limits are narrower than the reference's, as C and cJSON need: no
 * string may hold \u0000 (names and metadata are C strings), and shape
 * and data_offsets entries stay below 2^53 (cJSON holds numbers as
 * doubles; the reference takes any usize). A __metadata__ key given twice
 * keeps its first place and its last value, as serde's HashMap and a
 * Python dict do.
 *
 * After gpufile_safetensors_open() returns, the object is immutable: any
 * number of threads may read accessors and run loads at once.
 */
#include "formats/formats.h"
#include "sources/remote.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The reference's MAX_HEADER_SIZE: a larger length is taken as a corrupt
 * or hostile file, not a header worth allocating for. */
#define ST_MAX_HEADER 100000000ull
/* cJSON keeps numbers as doubles, exact below 2^53 only: 2^53 + 1 reads
 * as 2^53, so from 2^53 up integers are refused rather than changed. */
#define ST_MAX_EXACT (1ull << 53)

/* Every dtype the format lists, in the reference's enum order (save_file
 * lays tensors out by this order, descending, then by name), with its
 * size in bits (F4 and F6 are packed below a byte). */
static const struct {
	const char *name;
	unsigned bits;
} st_dtypes[] = {
    {"BOOL", 8},    {"F4", 4},          {"F6_E2M3", 6},     {"F6_E3M2", 6},
    {"U8", 8},      {"I8", 8},          {"F8_E5M2", 8},     {"F8_E4M3", 8},
    {"F8_E8M0", 8}, {"F8_E4M3FNUZ", 8}, {"F8_E5M2FNUZ", 8}, {"I16", 16},
    {"U16", 16},    {"F16", 16},        {"BF16", 16},       {"I32", 32},
    {"U32", 32},    {"F32", 32},        {"C64", 64},        {"F64", 64},
    {"I64", 64},    {"U64", 64},
};
#define ST_NDTYPES ((int)(sizeof(st_dtypes) / sizeof(st_dtypes[0])))

struct st_tensor {
	char *name;
	int dtype; /* index into st_dtypes */
	int ndim;
	uint64_t *shape;     /* into dims */
	size_t dim0;         /* shape's index in dims, while parsing */
	uint64_t begin, end; /* in the data section */
};

struct gpufile_safetensors {
	gpufile_t *h;
	char *path;
	uint64_t header_len;
	uint64_t data_offset; /* 8 + header_len */
	uint64_t data_size;
	int ntensors;
	struct st_tensor *t; /* sorted by (begin, end) */
	int *by_name;        /* indices into t, sorted by name */
	int has_meta;        /* "__metadata__" is an object (maybe empty) */
	int nmeta;
	char **meta_key, **meta_value; /* in header order, keys unique */
	char *strings;  /* names, keys and values, decoded, one after another */
	uint64_t *dims; /* every tensor's shape, one after another */
};

static void st_free(gpufile_safetensors_t *st)
{
	if (!st)
		return;
	free(st->strings);
	free(st->dims);
	free(st->t);
	free(st->by_name);
	free(st->meta_key);
	free(st->meta_value);
	free(st->path);
	free(st);
}

int gpufile_safetensors_close(gpufile_safetensors_t *st)
{
	int rc;

	if (!st)
		return 0;
	rc = gpufile_close(st->h);
	st_free(st);
	return rc;
}

/* Index of the first byte that is not part of valid UTF-8 (overlong
 * forms, surrogates and code points above U+10FFFF are invalid, as for
 * Rust's str::from_utf8), or -1 when all of text is valid. */
static long long utf8_invalid_at(const unsigned char *s, size_t len)
{
	size_t i = 0;

	while (i < len) {
		unsigned c = s[i], n, cp, min;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			n = 1, cp = c & 0x1f, min = 0x80;
		else if (c >= 0xe0 && c <= 0xef)
			n = 2, cp = c & 0x0f, min = 0x800;
		else if (c >= 0xf0 && c <= 0xf4)
			n = 3, cp = c & 0x07, min = 0x10000;
		else
			return (long long)i;
		if (len - i <= n)
			return (long long)i;
		for (unsigned k = 1; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return (long long)i;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return (long long)i;
		i += n + 1;
	}
	return -1;
}

#if GPUFILE_HAVE_CJSON

/*
 * The rules of RFC 8259 that cJSON relaxes and the reference (serde_json)
 * keeps, checked on the raw header text before cJSON parses it:
 *  - between tokens only space, tab, LF and CR (cJSON skips every byte up
 *    to 0x20, so 0x01-0x1f would pass as whitespace or padding);
 *  - no UTF-8 byte-order mark before the text (cJSON skips one);
 *  - no raw control character inside a string;
 *  - numbers as -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? (cJSON takes
 *    whatever strtod takes: "04", "1.", "-.5");
 *  - \u followed by 4 hex digits (cJSON reads "\uZZZZ" as U+0000);
 * and two of gpufile's own:
 *  - no \u0000 in any string: cJSON hands out C strings, in which
 *    "a\u0000x" is "a" (two such names would merge, and a key
 *    "__metadata__\u0000x" would be taken as the metadata);
 *  - each number of a tensor's "shape" and "data_offsets" arrays is a
 *    plain integer below 2^53: serde's usize refuses "4.0", "4e0" and
 *    "-0", which cJSON's double would take as 4 and 0, and from 2^53 up
 *    the double is rounded (see ST_MAX_EXACT).
 * Structure, other escapes and surrogates are left to cJSON, which
 * refuses what is wrong with them: the scan need only be right for
 * well-formed JSON.
 */
struct st_lex {
	const gpufile_safetensors_t *st;
	const char *text; /* NUL-terminated, no other NUL (checked before) */
	size_t len, at;   /* at: the next byte to scan */
	long depth;       /* 1 inside the root object, 2 in a tensor entry */
	/* The raw text (between the quotes) of the member key at depth 1 (a
	 * tensor name) and at depth 2 (a field), NULL until it is read. */
	const char *name, *field;
	size_t name_len, field_len;
	int dims; /* depth 3 is the array of a "shape" or "data_offsets" */
	int item; /* index of the next value in that array */
};

/* Room for st_quote(): ST_QUOTE bytes, "..." and a NUL. */
#define ST_QUOTE     48
#define ST_QUOTE_BUF (ST_QUOTE + 4)

/* s (len bytes of header text: UTF-8, no control characters) for a
 * message, cut after ST_QUOTE bytes at a character boundary, with "..."
 * when cut; into buf (ST_QUOTE_BUF bytes). */
static const char *st_quote(const char *s, size_t len, char *buf)
{
	size_t n = len;

	if (n > ST_QUOTE) {
		n = ST_QUOTE;
		while (n > 0 && ((unsigned char)s[n] & 0xc0) == 0x80)
			n--;
	}
	memcpy(buf, s, n);
	strcpy(buf + n, n < len ? "..." : "");
	return buf;
}

/* The value of the 4 hex digits at s, or -1. */
static long hex4(const char *s)
{
	long v = 0;

	for (int i = 0; i < 4; i++) {
		int c = s[i], d = c >= '0' && c <= '9'   ? c - '0'
		                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
		                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
		                                         : -1;
		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

/* Whether the JSON string text s (len bytes between the quotes) decodes
 * to want (ASCII): a key may be spelled "sh\u0061pe". */
static int json_key_is(const char *s, size_t len, const char *want)
{
	static const char esc[] = "bfnrt", ctl[] = "\b\f\n\r\t";
	size_t i = 0;

	while (i < len) {
		long c = (unsigned char)s[i++];

		if (c == '\\' && i < len) {
			const char *e = strchr(esc, s[i]);

			c = (unsigned char)s[i++];
			if (e)
				c = (unsigned char)ctl[e - esc];
			else if (c == 'u' && len - i >= 4) {
				c = hex4(s + i);
				i += 4;
			}
		}
		if (*want == '\0' || c != (unsigned char)*want++)
			return 0;
	}
	return *want == '\0';
}

/* " (tensor \"w\", field \"shape\")", " (__metadata__ key \"k\")" or
 * "" at the top level: where lx is, for a message; into buf. */
static const char *lex_where(const struct st_lex *lx, char *buf, size_t size)
{
	char n[ST_QUOTE_BUF], f[ST_QUOTE_BUF] = "";

	buf[0] = '\0';
	if (lx->depth < 2 || !lx->name)
		return buf;
	st_quote(lx->name, lx->name_len, n);
	if (lx->field)
		st_quote(lx->field, lx->field_len, f);
	if (json_key_is(lx->name, lx->name_len, "__metadata__"))
		snprintf(buf, size, " (__metadata__%s%s%s)",
		         lx->field ? " key \"" : "", f, lx->field ? "\"" : "");
	else
		snprintf(buf, size, " (tensor \"%s\"%s%s%s)", n,
		         lx->field ? ", field \"" : "", f,
		         lx->field ? "\"" : "");
	return buf;
}

/* Index of the first byte of s at or after i that is not a digit. */
static size_t skip_digits(const char *s, size_t i)
{
	while (s[i] >= '0' && s[i] <= '9')
		i++;
	return i;
}

/* The length of the JSON number at s (NUL-terminated), or 0 when none
 * starts there. */
static size_t json_number_len(const char *s)
{
	size_t i = s[0] == '-';

	if (s[i] == '0')
		i++;
	else if (s[i] >= '1' && s[i] <= '9')
		i = skip_digits(s, i);
	else
		return 0;
	if (s[i] == '.') {
		if (s[++i] < '0' || s[i] > '9')
			return 0;
		i = skip_digits(s, i);
	}
	if (s[i] == 'e' || s[i] == 'E') {
		i += s[i + 1] == '+' || s[i + 1] == '-';
		if (s[++i] < '0' || s[i] > '9')
			return 0;
		i = skip_digits(s, i);
	}
	return i;
}

/* Whether s (len bytes of a number token) is 0 or a digit string without
 * a leading zero below 2^53. */
static int plain_integer(const char *s, size_t len)
{
	uint64_t v = 0;

	if (len == 0 || len > 16 || (s[0] == '0' && len > 1))
		return 0;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		v = v * 10 + (uint64_t)(s[i] - '0');
	}
	return v < ST_MAX_EXACT;
}

/* Whether the JSON number s (n bytes, valid) is at least
 * 1.797693134862315e308 in magnitude. The reference's serde_json reads
 * every number of the header (unknown fields too) as an f64 and refuses
 * one that overflows it ("number out of range"); its rounding near
 * DBL_MAX (1.7976931348623157e308) is not exact, so the last sliver
 * below it is refused too, so that nothing the reference refuses is
 * accepted here. Decimal arithmetic on the text, not strtod: no locale,
 * no limit on the length of digits or exponent. */
static int number_overflows(const char *s, size_t n)
{
	static const char lim[] = "1797693134862315";
	size_t i = s[0] == '-', nsig = 0;
	long long mag = 0, exp = 0; /* value = 0.D * 10^(mag + exp) */
	char sig[sizeof(lim) - 1];
	int point = 0, neg;

	for (; i < n && s[i] != 'e' && s[i] != 'E'; i++) {
		if (s[i] == '.') {
			point = 1;
			continue;
		}
		if (nsig == 0 && s[i] == '0') {
			mag -= point; /* a zero after the point, before D */
			continue;
		}
		if (nsig < sizeof(sig))
			sig[nsig] = s[i];
		nsig++;
		mag += !point; /* a digit of D before the point */
	}
	if (nsig == 0)
		return 0; /* zero, whatever its exponent */
	if (i < n) {
		i++;
		neg = s[i] == '-';
		i += s[i] == '-' || s[i] == '+';
		for (; i < n; i++)
			if (exp < 1000000000000LL) /* beyond, |exp| outweighs
			                            * any mag a header holds */
				exp = exp * 10 + (s[i] - '0');
		if (neg)
			exp = -exp;
	}
	if (mag + exp != 309)
		return mag + exp > 309;
	for (size_t k = 0; k < sizeof(sig); k++) {
		char d = k < nsig ? sig[k] : '0';

		if (d != lim[k])
			return d > lim[k];
	}
	return 1;
}

/* The number token at lx->at. */
static int lex_number(struct st_lex *lx)
{
	const char *s = lx->text + lx->at;
	/* cJSON's extent of a number: every byte strtod might want. */
	size_t n = strspn(s, "0123456789+-.eE");
	char q[ST_QUOTE_BUF], f[ST_QUOTE_BUF], where[3 * ST_QUOTE_BUF];

	st_quote(s, n, q);
	if (lx->dims && lx->depth == 3 && !plain_integer(s, n))
		return gpufile__fail(
		    -EBADMSG,
		    "%s: tensor \"%s\": %s[%d] is %s, not an "
		    "integer in [0, 2^53) (header byte %zu)",
		    lx->st->path, st_quote(lx->name, lx->name_len, f),
		    json_key_is(lx->field, lx->field_len, "shape")
		        ? "shape"
		        : "data_offsets",
		    lx->item, q, lx->at);
	if (json_number_len(s) != n)
		return gpufile__fail(
		    -EBADMSG,
		    "%s: header byte %zu%s: %s is not a JSON number (RFC 8259: "
		    "no leading zero, no '+', digits both sides of a '.')",
		    lx->st->path, lx->at, lex_where(lx, where, sizeof(where)),
		    q);
	if (number_overflows(s, n))
		return gpufile__fail(
		    -EBADMSG,
		    "%s: header byte %zu%s: the number %s is too large for a "
		    "double (the reference refuses it: number out of range)",
		    lx->st->path, lx->at, lex_where(lx, where, sizeof(where)),
		    q);
	lx->at += n;
	return 0;
}

/* The string at lx->at (its opening quote): past it on return, its text
 * (between the quotes) in *s and *len. */
static int lex_string(struct st_lex *lx, const char **s, size_t *len)
{
	const char *p = lx->text + lx->at + 1;
	size_t i, n = lx->len - lx->at - 1;
	char q[ST_QUOTE_BUF], where[3 * ST_QUOTE_BUF];

	for (i = 0; i < n && p[i] != '"'; i++) {
		unsigned char c = (unsigned char)p[i];

		if (c < 0x20)
			return gpufile__fail(
			    -EBADMSG,
			    "%s: header byte %zu%s: raw control character "
			    "0x%02x in the string \"%s\" (JSON writes it "
			    "escaped: \\u%04x)",
			    lx->st->path, lx->at + 1 + i,
			    lex_where(lx, where, sizeof(where)), c,
			    st_quote(p, i, q), c);
		if (c != '\\' || i + 1 >= n)
			continue;
		if (p[i + 1] == 'u' && (n - i < 6 || hex4(p + i + 2) < 0))
			return gpufile__fail(
			    -EBADMSG,
			    "%s: header byte %zu%s: the string \"%s\" has "
			    "\\u without 4 hex digits after it",
			    lx->st->path, lx->at + 1 + i,
			    lex_where(lx, where, sizeof(where)),
			    st_quote(p, i + 2, q));
		if (p[i + 1] == 'u' && hex4(p + i + 2) == 0)
			return gpufile__fail(
			    -EBADMSG,
			    "%s: header byte %zu%s: the string \"%s\" holds "
			    "\\u0000, a NUL character, which gpufile cannot "
			    "keep in a name or value (C strings end there)",
			    lx->st->path, lx->at + 1 + i,
			    lex_where(lx, where, sizeof(where)),
			    st_quote(p, i + 6, q));
		i++; /* the escaped byte cannot end the string */
	}
	*s = p;
	*len = i;
	/* Past the closing quote, or at the end when there is none (then
	 * cJSON refuses the text). */
	lx->at = i < n ? lx->at + i + 2 : lx->len;
	return 0;
}

/* Whether the array opening at depth 2 is a tensor's shape or
 * data_offsets. */
static int lex_dims_open(const struct st_lex *lx)
{
	return lx->name && lx->field &&
	       !json_key_is(lx->name, lx->name_len, "__metadata__") &&
	       (json_key_is(lx->field, lx->field_len, "shape") ||
	        json_key_is(lx->field, lx->field_len, "data_offsets"));
}

/* A string just scanned at depth 1 or 2 is a member key when a ':'
 * follows: it names the tensor or the field until the next member. */
static void lex_key(struct st_lex *lx, const char *s, size_t len)
{
	size_t at;

	if (lx->at >= lx->len)
		return;
	at = lx->at + strspn(lx->text + lx->at, " \t\n\r");
	if (at >= lx->len || lx->text[at] != ':')
		return;
	if (lx->depth == 1) {
		lx->name = s;
		lx->name_len = len;
	} else if (lx->depth == 2) {
		lx->field = s;
		lx->field_len = len;
	}
}

static int check_lexical(const gpufile_safetensors_t *st, const char *text,
                         size_t len)
{
	struct st_lex lx = {.st = st, .text = text, .len = len};
	char where[3 * ST_QUOTE_BUF];
	const char *s = NULL;
	size_t slen = 0;
	int rc = 0;

	if (len >= 3 && memcmp(text, "\xef\xbb\xbf", 3) == 0)
		return gpufile__fail(-EBADMSG,
		                     "%s: header byte 0 starts a UTF-8 "
		                     "byte-order mark (EF BB BF), which JSON "
		                     "does not allow",
		                     st->path);
	while (rc == 0 && lx.at < len) {
		unsigned char c = (unsigned char)text[lx.at];

		if (c == '"') {
			rc = lex_string(&lx, &s, &slen);
			if (rc == 0)
				lex_key(&lx, s, slen);
			continue;
		}
		if (c == '-' || (c >= '0' && c <= '9')) {
			rc = lex_number(&lx);
			continue;
		}
		switch (c) {
		case '{':
		case '[':
			if (lx.depth == 0) {
				lx.name = NULL;
			} else if (lx.depth == 1) {
				lx.field = NULL;
			} else if (lx.depth == 2 && c == '[' &&
			           lex_dims_open(&lx)) {
				lx.dims = 1;
				lx.item = 0;
			}
			lx.depth++;
			break;
		case '}':
		case ']':
			if (--lx.depth < 3)
				lx.dims = 0;
			break;
		case ',':
			/* A new member or item: its key is not read yet. */
			if (lx.depth == 1)
				lx.name = NULL;
			else if (lx.depth == 2)
				lx.field = NULL;
			else if (lx.depth == 3)
				lx.item++;
			break;
		case ' ':
		case '\t':
		case '\n':
		case '\r':
			break;
		default:
			if (c < 0x20)
				return gpufile__fail(
				    -EBADMSG,
				    "%s: header byte %zu%s is 0x%02x, a "
				    "control character: between JSON tokens "
				    "only space, tab, LF and CR may stand",
				    st->path, lx.at,
				    lex_where(&lx, where, sizeof(where)), c);
			/* true, false, null and stray bytes: cJSON's. */
		}
		lx.at++;
	}
	return rc;
}

/* t's shape as "[d0,d1,...]" into buf (len bytes, "..." when cut), from
 * the integers parsed: cJSON prints a number near 2^53 rounded to 15
 * digits ("5e+15" for 5000000000000001), which json_text() would pass on
 * into a message that also quotes the exact product. */
static const char *shape_text(const struct st_tensor *t, char *buf, size_t len)
{
	size_t used = 0;

	for (int i = 0; i < t->ndim && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%" PRIu64,
		                         i ? "," : "[", t->shape[i]);
	if (used < len)
		snprintf(buf + used, len - used, "%s", t->ndim ? "]" : "[]");
	if (used + 1 >= len && len > 4)
		memcpy(buf + len - 4, "...", 4);
	return buf;
}

/* Checks that nelem elements of t's dtype are exactly the bytes its
 * data_offsets span. */
static int check_span(gpufile_safetensors_t *st, const struct st_tensor *t,
                      uint64_t nelem)
{
	char text[96];
	uint64_t nbits;

	if (__builtin_mul_overflow(nelem, (uint64_t)st_dtypes[t->dtype].bits,
	                           &nbits))
		return gpufile__fail(
		    -EBADMSG,
		    "%s: tensor \"%s\": shape %s of %s is more bytes than 64 "
		    "bits can count",
		    st->path, t->name, shape_text(t, text, sizeof(text)),
		    st_dtypes[t->dtype].name);
	if (nbits % 8 != 0 || nbits / 8 != t->end - t->begin)
		return gpufile__fail(
		    -EBADMSG,
		    "%s: tensor \"%s\": shape %s of %s is %" PRIu64
		    " bits (%s%" PRIu64 " bytes) but data_offsets [%" PRIu64
		    ", %" PRIu64 "] span %" PRIu64 " bytes",
		    st->path, t->name, shape_text(t, text, sizeof(text)),
		    st_dtypes[t->dtype].name, nbits,
		    nbits % 8 ? "not a whole number of bytes, " : "", nbits / 8,
		    t->begin, t->end, t->end - t->begin);
	return 0;
}

static int cmp_offsets(const void *a, const void *b)
{
	const struct st_tensor *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return 0;
}

struct st_name {
	const char *name;
	int index;
};

static int cmp_names(const void *a, const void *b)
{
	const struct st_name *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* A tensor name given twice keeps its last entry, as the reference's
 * HashMap keeps it (the earlier ones must still be valid entries: each
 * was checked as it was read); the others are dropped before the layout
 * is checked, so their bytes, like the reference's, belong to no
 * tensor. Entries keep their header order. */
static int st_dedup_names(gpufile_safetensors_t *st)
{
	int n = st->ntensors, m = 0;
	struct st_name *names = malloc(((size_t)n + 1) * sizeof(*names));
	char *drop = calloc((size_t)n + 1, 1);

	if (!names || !drop) {
		free(names);
		free(drop);
		return gpufile__fail(-ENOMEM, "%s: out of memory", st->path);
	}
	for (int i = 0; i < n; i++)
		names[i] = (struct st_name){st->t[i].name, i};
	qsort(names, (size_t)n, sizeof(*names), cmp_names);
	for (int i = 0; i + 1 < n; i++)
		if (strcmp(names[i].name, names[i + 1].name) == 0)
			drop[names[i].index] = 1;
	for (int i = 0; i < n; i++)
		if (!drop[i])
			st->t[m++] = st->t[i];
	st->ntensors = m;
	free(names);
	free(drop);
	return 0;
}

/* Drops repeated names, sorts by offsets, checks that the tensors tile
 * the data section, and builds the name index. */
static int check_layout(gpufile_safetensors_t *st)
{
	uint64_t at = 0;
	struct st_name *names;
	int rc = st_dedup_names(st);

	if (rc)
		return rc;
	qsort(st->t, (size_t)st->ntensors, sizeof(st->t[0]), cmp_offsets);
	for (int i = 0; i < st->ntensors; i++) {
		const struct st_tensor *t = &st->t[i];

		if (t->begin < at)
			return gpufile__fail(
			    -EBADMSG,
			    "%s: tensor \"%s\": data_offsets [%" PRIu64
			    ", %" PRIu64 "] overlap tensor \"%s\" [%" PRIu64
			    ", %" PRIu64 "]",
			    st->path, t->name, t->begin, t->end,
			    st->t[i - 1].name, st->t[i - 1].begin,
			    st->t[i - 1].end);
		if (t->begin > at)
			return gpufile__fail(
			    -EBADMSG,
			    "%s: tensor \"%s\": data_offsets [%" PRIu64
			    ", %" PRIu64 "] leave bytes [%" PRIu64 ", %" PRIu64
			    ") of the data section to no tensor",
			    st->path, t->name, t->begin, t->end, at, t->begin);
		at = t->end;
	}
	if (at != st->data_size)
		return gpufile__fail(
		    -EBADMSG,
		    "%s: the data section is %" PRIu64
		    " bytes but its tensors end at %" PRIu64
		    " (bytes after the last one belong to no tensor)",
		    st->path, st->data_size, at);

	st->by_name = malloc(((size_t)st->ntensors + 1) * sizeof(int));
	names = malloc(((size_t)st->ntensors + 1) * sizeof(*names));
	if (!st->by_name || !names) {
		free(names);
		return gpufile__fail(-ENOMEM, "%s: out of memory", st->path);
	}
	for (int i = 0; i < st->ntensors; i++) {
		names[i].name = st->t[i].name;
		names[i].index = i;
	}
	qsort(names, (size_t)st->ntensors, sizeof(*names), cmp_names);
	for (int i = 0; i < st->ntensors; i++)
		st->by_name[i] = names[i].index;
	free(names);
	return 0;
}

/*
 * The header's structure, read straight off the text (check_lexical()
 * has already held its tokens to RFC 8259). No tree is built: cJSON's
 * costs 64 bytes and a malloc per value, 44 times the header's size for
 * a header of small numbers (a 20 MB header took 862 MB; one shape of 50
 * million entries in a 100 MB header, 4.4 GB). Here the header costs its
 * text, its decoded strings (at most as many bytes as their text), 8
 * bytes per shape entry (each at least 2 bytes of text) and a record per
 * tensor and metadata key: at most about 6 times the header's size.
 */
struct st_parser {
	gpufile_safetensors_t *st;
	const char *text;
	size_t len, at;
	char *arena; /* decoded strings, header_len + 1 bytes */
	size_t arena_used;
	uint64_t *dims; /* every tensor's shape, one after another */
	size_t ndims, dims_cap;
	size_t tensors_cap, meta_cap;
};

/* The reference's serde_json refuses JSON nested 128 deep. */
#define ST_MAX_DEPTH 127

static int st_syntax(const struct st_parser *p)
{
	return gpufile__fail(-EBADMSG,
	                     "%s: header is not valid JSON (at header byte %zu "
	                     "of %zu)",
	                     p->st->path, p->at, p->len);
}

static void st_ws(struct st_parser *p)
{
	p->at += strspn(p->text + p->at, " \t\n\r");
}

/* Whether the next token (after white space) starts with c; consumes it
 * when it does. */
static int st_take(struct st_parser *p, char c)
{
	st_ws(p);
	if (p->at < p->len && p->text[p->at] == c) {
		p->at++;
		return 1;
	}
	return 0;
}

/* Grows *arr (elem bytes each, *cap of them) to hold need. */
static int st_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	size_t n = *cap ? *cap : 16;
	void *a;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	a = realloc(*arr, n * elem);
	if (!a)
		return -ENOMEM;
	*arr = a;
	*cap = n;
	return 0;
}

static void st_put_utf8(struct st_parser *p, unsigned long cp)
{
	char *o = p->arena + p->arena_used;

	if (cp < 0x80) {
		o[0] = (char)cp;
		p->arena_used += 1;
	} else if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		p->arena_used += 2;
	} else if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		p->arena_used += 3;
	} else {
		o[0] = (char)(0xf0 | (cp >> 18));
		o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[3] = (char)(0x80 | (cp & 0x3f));
		p->arena_used += 4;
	}
}

/* The string at p->at (after white space), decoded into the arena
 * (NUL-terminated) at *out. Decoded text is never longer than its JSON
 * text, quotes included, so the arena (header_len + 1 bytes) holds
 * every string of the header. */
static int st_string(struct st_parser *p, const char **out)
{
	static const char esc[] = "\"\\/bfnrt", dec[] = "\"\\/\b\f\n\r\t";

	st_ws(p);
	if (p->at >= p->len || p->text[p->at] != '"')
		return st_syntax(p);
	*out = p->arena + p->arena_used;
	for (p->at++; p->at < p->len && p->text[p->at] != '"';) {
		const char *s = p->text + p->at, *e;
		long cp, lo;

		if (*s != '\\') {
			p->arena[p->arena_used++] = *s;
			p->at++;
			continue;
		}
		if (s[1] != 'u') {
			e = s[1] ? strchr(esc, s[1]) : NULL;
			if (!e)
				return st_syntax(p);
			p->arena[p->arena_used++] = dec[e - esc];
			p->at += 2;
			continue;
		}
		/* check_lexical() saw 4 hex digits, not 0000. */
		cp = hex4(s + 2);
		p->at += 6;
		if (cp >= 0xdc00 && cp <= 0xdfff)
			return st_syntax(p); /* a lone low surrogate */
		if (cp >= 0xd800 && cp <= 0xdbff) {
			if (s[6] != '\\' || s[7] != 'u' ||
			    (lo = hex4(s + 8)) < 0xdc00 || lo > 0xdfff)
				return st_syntax(p);
			cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			p->at += 6;
		}
		st_put_utf8(p, (unsigned long)cp);
	}
	if (p->at >= p->len)
		return st_syntax(p);
	p->at++;
	p->arena[p->arena_used++] = '\0';
	return 0;
}

/* Skips the value at p->at (after white space), checking its
 * structure; depth is the nesting of the container it is in. */
static int st_skip(struct st_parser *p, int depth)
{
	size_t mark = p->arena_used, n;
	const char *s, *key;
	char close;
	int rc;

	st_ws(p);
	s = p->text + p->at;
	if (*s == '"') {
		rc = st_string(p, &key);
		p->arena_used = mark;
		return rc;
	}
	if (*s == '-' || (*s >= '0' && *s <= '9')) {
		n = json_number_len(s);
		p->at += n;
		return n ? 0 : st_syntax(p);
	}
	if (strncmp(s, "true", 4) == 0 || strncmp(s, "null", 4) == 0 ||
	    strncmp(s, "false", 5) == 0) {
		p->at += *s == 'f' ? 5 : 4;
		return 0;
	}
	if (*s != '{' && *s != '[')
		return st_syntax(p);
	if (depth + 1 > ST_MAX_DEPTH)
		return gpufile__fail(-EBADMSG,
		                     "%s: header byte %zu: JSON nested deeper "
		                     "than %d levels (the reference's limit)",
		                     p->st->path, p->at, ST_MAX_DEPTH);
	close = *s == '{' ? '}' : ']';
	p->at++;
	if (st_take(p, close))
		return 0;
	do {
		if (close == '}') {
			rc = st_string(p, &key);
			p->arena_used = mark;
			if (rc == 0 && !st_take(p, ':'))
				rc = st_syntax(p);
			if (rc)
				return rc;
		}
		rc = st_skip(p, depth + 1);
		if (rc)
			return rc;
	} while (st_take(p, ','));
	return st_take(p, close) ? 0 : st_syntax(p);
}

/* Skips the value at p->at and quotes its text into buf (ST_QUOTE_BUF
 * bytes), for a message about it. */
static int st_skip_quote(struct st_parser *p, int depth, char *buf)
{
	size_t start;
	int rc;

	st_ws(p);
	start = p->at;
	rc = st_skip(p, depth);
	if (rc == 0)
		st_quote(p->text + start, p->at - start, buf);
	return rc;
}

/* A plain integer in [0, 2^53) at p->at (consumed), or 1 when
 * something else is there (nothing consumed). check_lexical() holds the
 * numbers of a "shape" or "data_offsets" field to this already, but not
 * those of an entry written as an array, which have no field name. */
static int st_integer(struct st_parser *p, uint64_t *out)
{
	const char *s;
	size_t n;

	st_ws(p);
	s = p->text + p->at;
	n = json_number_len(s);
	if (!plain_integer(s, n))
		return 1;
	for (*out = 0; *s >= '0' && *s <= '9'; s++, p->at++)
		*out = *out * 10 + (uint64_t)(*s - '0');
	return 0;
}

/* A dtype written as serde writes a unit enum variant in a map,
 * {"U8": null}, which the reference reads as "U8": 1 and the name in
 * *name, or 0 when the value at p->at is something else (p->at is then
 * anywhere inside it). */
static int st_dtype_variant(struct st_parser *p, const char **name)
{
	if (!st_take(p, '{'))
		return 0;
	st_ws(p);
	if (p->text[p->at] != '"' || st_string(p, name) != 0 ||
	    !st_take(p, ':'))
		return 0;
	st_ws(p);
	if (strncmp(p->text + p->at, "null", 4) != 0)
		return 0;
	p->at += 4;
	return st_take(p, '}');
}

static int st_dtype(struct st_parser *p, struct st_tensor *t)
{
	char q[ST_QUOTE_BUF];
	const char *name;
	size_t start;
	int rc;

	st_ws(p);
	start = p->at;
	if (p->text[p->at] == '"') {
		rc = st_string(p, &name);
		if (rc)
			return rc;
	} else if (!st_dtype_variant(p, &name)) {
		p->at = start;
		rc = st_skip_quote(p, 2, q);
		return rc ? rc
		          : gpufile__fail(-EBADMSG,
		                          "%s: tensor \"%s\": dtype %s is not "
		                          "a string (or {\"NAME\": null})",
		                          p->st->path, t->name, q);
	}
	t->dtype = -1;
	for (int k = 0; k < ST_NDTYPES; k++)
		if (strcmp(name, st_dtypes[k].name) == 0)
			t->dtype = k;
	if (t->dtype < 0)
		return gpufile__fail(
		    -EBADMSG,
		    "%s: tensor \"%s\": dtype \"%s\" is unknown (known: BOOL, "
		    "U8, I8, I16, U16, I32, U32, I64, U64, F16, BF16, F32, "
		    "F64, C64, F8_E4M3, F8_E5M2, F8_E8M0, F8_E4M3FNUZ, "
		    "F8_E5M2FNUZ, F6_E2M3, F6_E3M2, F4)",
		    p->st->path, t->name, name);
	return 0;
}

/* t->ndim and its dimensions (appended to p->dims from t->dim0). */
static int st_shape(struct st_parser *p, struct st_tensor *t)
{
	char q[ST_QUOTE_BUF];
	uint64_t dim;
	int rc;

	t->dim0 = p->ndims;
	t->ndim = 0;
	st_ws(p);
	if (p->text[p->at] != '[') {
		rc = st_skip_quote(p, 2, q);
		return rc ? rc
		          : gpufile__fail(-EBADMSG,
		                          "%s: tensor \"%s\": shape %s is not "
		                          "an array",
		                          p->st->path, t->name, q);
	}
	p->at++;
	if (st_take(p, ']'))
		return 0;
	do {
		if (st_integer(p, &dim) != 0) {
			rc = st_skip_quote(p, 3, q);
			return rc ? rc
			          : gpufile__fail(
			                -EBADMSG,
			                "%s: tensor \"%s\": shape[%d] "
			                "is %s, not an integer in [0, "
			                "2^53)",
			                p->st->path, t->name, t->ndim, q);
		}
		if (st_grow((void **)&p->dims, &p->dims_cap, p->ndims + 1,
		            sizeof(*p->dims)))
			return gpufile__fail(-ENOMEM, "%s: out of memory",
			                     p->st->path);
		p->dims[p->ndims++] = dim;
		t->ndim++;
	} while (st_take(p, ','));
	return st_take(p, ']') ? 0 : st_syntax(p);
}

static int st_offsets(struct st_parser *p, struct st_tensor *t)
{
	gpufile_safetensors_t *st = p->st;
	char q[ST_QUOTE_BUF];
	size_t start;
	int rc;

	st_ws(p);
	start = p->at;
	if (!st_take(p, '[') || st_integer(p, &t->begin) != 0 ||
	    !st_take(p, ',') || st_integer(p, &t->end) != 0 ||
	    !st_take(p, ']')) {
		p->at = start;
		rc = st_skip_quote(p, 2, q);
		return rc ? rc
		          : gpufile__fail(-EBADMSG,
		                          "%s: tensor \"%s\": data_offsets %s "
		                          "is not [begin, end] of two integers "
		                          "in [0, 2^53)",
		                          st->path, t->name, q);
	}
	return 0;
}

/* t's offsets against each other and the data section: judged once
 * the whole entry is read, after a missing or repeated field, as the
 * reference validates offsets only after it has parsed the header. */
static int st_offsets_fit(gpufile_safetensors_t *st, const struct st_tensor *t)
{
	if (t->end < t->begin)
		return gpufile__fail(-EBADMSG,
		                     "%s: tensor \"%s\": data_offsets [%" PRIu64
		                     ", %" PRIu64 "] end before begin",
		                     st->path, t->name, t->begin, t->end);
	if (t->end > st->data_size)
		return gpufile__fail(-EBADMSG,
		                     "%s: tensor \"%s\": data_offsets [%" PRIu64
		                     ", %" PRIu64
		                     "] reach past the data section (%" PRIu64
		                     " bytes, from file offset %" PRIu64 ")",
		                     st->path, t->name, t->begin, t->end,
		                     st->data_size, st->data_offset);
	return 0;
}

/* The fields of an entry written as an object, as serde reads them:
 * each of dtype, shape and data_offsets once (cJSON would have handed
 * out the first, another reader the last), any other field skipped. */
static int st_entry_object(struct st_parser *p, struct st_tensor *t)
{
	static const char *const fields[] = {"dtype", "shape", "data_offsets"};
	int seen[3] = {0, 0, 0}, rc;

	p->at++;
	if (!st_take(p, '}')) {
		do {
			size_t mark = p->arena_used;
			const char *key;
			int f = 0;

			rc = st_string(p, &key);
			if (rc == 0 && !st_take(p, ':'))
				rc = st_syntax(p);
			if (rc)
				return rc;
			while (f < 3 && strcmp(key, fields[f]) != 0)
				f++;
			p->arena_used = mark;
			if (f < 3 && seen[f]++)
				return gpufile__fail(-EBADMSG,
				                     "%s: tensor \"%s\": field "
				                     "\"%s\" is given twice",
				                     p->st->path, t->name,
				                     fields[f]);
			rc = f == 0   ? st_dtype(p, t)
			     : f == 1 ? st_shape(p, t)
			     : f == 2 ? st_offsets(p, t)
			              : st_skip(p, 2);
			if (rc)
				return rc;
		} while (st_take(p, ','));
		if (!st_take(p, '}'))
			return st_syntax(p);
	}
	for (int f = 0; f < 3; f++)
		if (!seen[f])
			return gpufile__fail(
			    -EBADMSG,
			    f == 0 ? "%s: tensor \"%s\": dtype (missing) is "
			             "not a string"
			    : f == 1
			        ? "%s: tensor \"%s\": shape (missing) is not "
			          "an array"
			        : "%s: tensor \"%s\": data_offsets (missing) "
			          "is "
			          "not [begin, end] of two integers in [0, "
			          "2^53)",
			    p->st->path, t->name);
	return 0;
}

/* An entry written as an array, [dtype, shape, data_offsets]: serde
 * reads a struct from a sequence of exactly its fields in order, and
 * the reference accepts it. */
static int st_entry_array(struct st_parser *p, struct st_tensor *t)
{
	char q[ST_QUOTE_BUF];
	size_t start = p->at;
	int rc;

	p->at++;
	rc = st_dtype(p, t);
	if (rc == 0)
		rc = st_take(p, ',') ? st_shape(p, t) : 1;
	if (rc == 0)
		rc = st_take(p, ',') ? st_offsets(p, t) : 1;
	if (rc == 0 && !st_take(p, ']'))
		rc = 1;
	if (rc <= 0)
		return rc;
	p->at = start;
	rc = st_skip_quote(p, 1, q);
	return rc ? rc
	          : gpufile__fail(-EBADMSG,
	                          "%s: tensor \"%s\": entry %s is an array "
	                          "but not [dtype, shape, data_offsets]",
	                          p->st->path, t->name, q);
}

/* Fills t from its header entry at p->at (t->name already set): an
 * object of fields, or an array of them, then its shape against its
 * data_offsets. */
static int st_entry(struct st_parser *p, struct st_tensor *t)
{
	char q[ST_QUOTE_BUF];
	uint64_t nelem = 1;
	int rc;

	st_ws(p);
	if (p->text[p->at] == '{') {
		rc = st_entry_object(p, t);
	} else if (p->text[p->at] == '[') {
		rc = st_entry_array(p, t);
	} else {
		rc = st_skip_quote(p, 1, q);
		return rc ? rc
		          : gpufile__fail(
		                -EBADMSG,
		                "%s: tensor \"%s\": entry %s is not an "
		                "object with dtype, shape and "
		                "data_offsets",
		                p->st->path, t->name, q);
	}
	if (rc)
		return rc;
	/* Every dimension first, as the reference parses the whole entry
	 * before it multiplies (try_fold of checked_mul: in order). */
	t->shape = p->dims + t->dim0;
	for (int i = 0; i < t->ndim; i++)
		if (__builtin_mul_overflow(nelem, t->shape[i], &nelem))
			return gpufile__fail(
			    -EBADMSG,
			    "%s: tensor \"%s\": shape %s has more elements "
			    "than 64 bits can count",
			    p->st->path, t->name, shape_text(t, q, sizeof(q)));
	rc = st_offsets_fit(p->st, t);
	return rc ? rc : check_span(p->st, t, nelem);
}

struct st_meta_ref {
	const char *key;
	int pos; /* in header order */
};

static int cmp_meta(const void *a, const void *b)
{
	const struct st_meta_ref *x = a, *y = b;
	int c = strcmp(x->key, y->key);

	return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

/* A key given twice keeps its first place and its last value, as
 * serde's HashMap and a Python dict keep it, so that
 * gpufile_safetensors_metadata_get() and the binding's dict agree.
 * Sorted, not searched: a header may hold millions of keys. */
static int st_meta_dedup(gpufile_safetensors_t *st)
{
	int n = st->nmeta, i, j, m = 0;
	struct st_meta_ref *r = malloc(((size_t)n + 1) * sizeof(*r));
	char *keep = calloc((size_t)n + 1, 1);

	if (!r || !keep) {
		free(r);
		free(keep);
		return gpufile__fail(-ENOMEM, "%s: out of memory", st->path);
	}
	for (i = 0; i < n; i++)
		r[i] = (struct st_meta_ref){st->meta_key[i], i};
	qsort(r, (size_t)n, sizeof(*r), cmp_meta);
	for (i = 0; i < n; i = j) {
		for (j = i + 1; j < n; j++)
			if (strcmp(r[j].key, r[i].key) != 0)
				break;
		keep[r[i].pos] = 1;
		st->meta_value[r[i].pos] = st->meta_value[r[j - 1].pos];
	}
	for (i = 0; i < n; i++)
		if (keep[i]) {
			st->meta_key[m] = st->meta_key[i];
			st->meta_value[m++] = st->meta_value[i];
		}
	st->nmeta = m;
	free(r);
	free(keep);
	return 0;
}

/* The value of "__metadata__": null, or an object of strings. */
static int st_metadata(struct st_parser *p)
{
	gpufile_safetensors_t *st = p->st;
	char q[ST_QUOTE_BUF];
	int rc;

	st_ws(p);
	if (strncmp(p->text + p->at, "null", 4) == 0) {
		p->at += 4;
		return 0;
	}
	if (p->text[p->at] != '{') {
		rc = st_skip_quote(p, 1, q);
		return rc ? rc
		          : gpufile__fail(-EBADMSG,
		                          "%s: __metadata__ is %s, not an "
		                          "object of strings",
		                          st->path, q);
	}
	p->at++;
	st->has_meta = 1;
	if (st_take(p, '}'))
		return 0;
	do {
		const char *key, *value;
		size_t had;

		rc = st_string(p, &key);
		if (rc == 0 && !st_take(p, ':'))
			rc = st_syntax(p);
		if (rc)
			return rc;
		st_ws(p);
		if (p->text[p->at] != '"') {
			rc = st_skip_quote(p, 2, q);
			return rc ? rc
			          : gpufile__fail(
			                -EBADMSG,
			                "%s: __metadata__ key \"%s\": "
			                "value %s is not a string",
			                st->path, key, q);
		}
		rc = st_string(p, &value);
		if (rc)
			return rc;
		had = p->meta_cap;
		if (st_grow((void **)&st->meta_key, &p->meta_cap,
		            (size_t)st->nmeta + 1, sizeof(char *)))
			return gpufile__fail(-ENOMEM, "%s: out of memory",
			                     st->path);
		/* meta_value follows meta_key's capacity, grown with it (a
		 * realloc per key copied the array each time under ASan:
		 * 40,000 keys took 51 s). */
		if (p->meta_cap != had) {
			char **v = realloc(st->meta_value,
			                   p->meta_cap * sizeof(char *));
			if (!v)
				return gpufile__fail(
				    -ENOMEM, "%s: out of memory", st->path);
			st->meta_value = v;
		}
		st->meta_key[st->nmeta] = (char *)key;
		st->meta_value[st->nmeta++] = (char *)value;
	} while (st_take(p, ','));
	if (!st_take(p, '}'))
		return st_syntax(p);
	return st_meta_dedup(st);
}

/* The root object: tensor name -> entry, and "__metadata__". */
static int st_root(struct st_parser *p)
{
	gpufile_safetensors_t *st = p->st;
	int have_meta = 0, rc;

	st_ws(p);
	if (p->text[p->at] != '{') {
		rc = st_skip(p, 0);
		st_ws(p);
		if (rc == 0 && p->at < p->len)
			rc = st_syntax(p);
		return rc ? rc
		          : gpufile__fail(-EBADMSG,
		                          "%s: header is JSON but not an "
		                          "object of tensors",
		                          st->path);
	}
	p->at++;
	if (!st_take(p, '}')) {
		do {
			const char *key;
			struct st_tensor *t;

			rc = st_string(p, &key);
			if (rc == 0 && !st_take(p, ':'))
				rc = st_syntax(p);
			if (rc)
				return rc;
			if (strcmp(key, "__metadata__") == 0) {
				if (have_meta++)
					return gpufile__fail(
					    -EBADMSG,
					    "%s: __metadata__ appears twice",
					    st->path);
				rc = st_metadata(p);
				if (rc)
					return rc;
				continue;
			}
			if (st_grow((void **)&st->t, &p->tensors_cap,
			            (size_t)st->ntensors + 1, sizeof(*st->t)))
				return gpufile__fail(
				    -ENOMEM, "%s: out of memory", st->path);
			t = &st->t[st->ntensors++];
			memset(t, 0, sizeof(*t));
			t->name = (char *)key;
			rc = st_entry(p, t);
			if (rc)
				return rc;
		} while (st_take(p, ','));
		if (!st_take(p, '}'))
			return st_syntax(p);
	}
	st_ws(p);
	return p->at < p->len ? st_syntax(p) : 0;
}

/* Parses the NUL-terminated header text (len bytes) into st. */
static int parse_header(gpufile_safetensors_t *st, char *text, size_t len)
{
	const char *nul = memchr(text, '\0', len);
	long long bad = utf8_invalid_at((const unsigned char *)text, len);
	struct st_parser p = {.st = st, .text = text, .len = len};
	int rc;

	if (bad >= 0)
		return gpufile__fail(-EBADMSG,
		                     "%s: header is not valid UTF-8 (byte %lld "
		                     "of the header, file offset %lld)",
		                     st->path, bad, bad + 8);
	if (nul)
		return gpufile__fail(
		    -EBADMSG,
		    "%s: header holds a NUL byte at header byte "
		    "%td: not a JSON text",
		    st->path, nul - text);
	rc = check_lexical(st, text, len);
	if (rc != 0)
		return rc;
	st->strings = p.arena = malloc(len + 1);
	/* Never NULL, even when empty: qsort and a shape of no dimensions
	 * get a valid pointer. */
	if (!p.arena ||
	    st_grow((void **)&p.dims, &p.dims_cap, 1, sizeof(*p.dims)) != 0 ||
	    st_grow((void **)&st->t, &p.tensors_cap, 1, sizeof(*st->t)) != 0) {
		free(p.dims);
		return gpufile__fail(-ENOMEM, "%s: out of memory", st->path);
	}
	/* The whole text's syntax first, as the reference parses it all
	 * before it judges a field: a header cut short is not valid JSON,
	 * not a tensor with a missing field or an offset past the data. */
	rc = st_skip(&p, 0);
	st_ws(&p);
	if (rc == 0 && p.at < p.len)
		rc = st_syntax(&p);
	p.at = 0;
	if (rc == 0)
		rc = st_root(&p);
	st->dims = p.dims;
	if (rc)
		return rc;
	for (int i = 0; i < st->ntensors; i++)
		st->t[i].shape = p.dims + st->t[i].dim0;
	return check_layout(st);
}

/* Reads the 8-byte header length of a file of size bytes and places the
 * header and the data section (st->header_len, data_offset, data_size). */
static int read_header_len(gpufile_safetensors_t *st, int64_t size)
{
	unsigned char len8[8];
	ssize_t n;

	if (size < 8)
		return gpufile__fail(
		    -EBADMSG,
		    "%s: %" PRId64 " bytes, too short for a "
		    "safetensors file (it starts with an 8-byte "
		    "header length)",
		    st->path, size);
	n = gpufile_pread(st->h, len8, 8, 0);
	if (n != 8)
		return n < 0
		           ? (int)n
		           : gpufile__fail(-EIO, "%s: header length unreadable",
		                           st->path);
	for (int i = 7; i >= 0; i--)
		st->header_len = (st->header_len << 8) | len8[i];
	if (st->header_len > ST_MAX_HEADER)
		return gpufile__fail(-EBADMSG,
		                     "%s: header length %" PRIu64
		                     " is above the limit of %llu bytes "
		                     "(the safetensors reference's bound)",
		                     st->path, st->header_len, ST_MAX_HEADER);
	if (st->header_len > (uint64_t)size - 8)
		return gpufile__fail(-EBADMSG,
		                     "%s: header length %" PRIu64
		                     " runs past the end of the file (%" PRId64
		                     " bytes)",
		                     st->path, st->header_len, size);
	st->data_offset = 8 + st->header_len;
	st->data_size = (uint64_t)size - st->data_offset;
	return 0;
}

/* Reads the header text that read_header_len placed and parses it. */
static int read_header(gpufile_safetensors_t *st)
{
	char *text = malloc(st->header_len + 1);
	ssize_t n;
	int rc;

	if (!text)
		return gpufile__fail(-ENOMEM, "%s: out of memory", st->path);
	n = gpufile_pread(st->h, text, st->header_len, 8);
	if (n != (ssize_t)st->header_len) {
		rc = n < 0 ? (int)n
		           : gpufile__fail(-EIO,
		                           "%s: file ended inside the header",
		                           st->path);
		free(text);
		return rc;
	}
	text[st->header_len] = '\0';
	rc = parse_header(st, text, st->header_len);
	free(text);
	return rc;
}

int gpufile_safetensors_open(gpufile_safetensors_t **out, const char *path)
{
	gpufile_safetensors_t *st;
	gpufile_t *h = NULL;
	int64_t size;
	int rc;

	if (!out || !path)
		return gpufile__fail(-EINVAL,
		                     "gpufile_safetensors_open: %s is "
		                     "NULL",
		                     out ? "path" : "out");
	*out = NULL;
	rc = gpufile_open(&h, path, "r");
	if (rc != 0)
		return rc; /* the message names the file (a URL redacted) */
	st = calloc(1, sizeof(*st));
	/* Every message names the file as the handle does: a URL without
	 * its password and query. */
	if (!st || !(st->path = strdup(gpufile_filename(h)))) {
		free(st);
		rc = gpufile__fail(-ENOMEM, "%s: out of memory",
		                   gpufile_filename(h));
		gpufile_close(h);
		return rc;
	}
	st->h = h;
	size = gpufile_size(st->h);
	rc = size < 0 ? (int)size : read_header_len(st, size);
	if (rc == 0)
		rc = read_header(st);
	if (rc != 0) {
		gpufile_close(st->h);
		st_free(st);
		return rc;
	}
	gpufile__clear_error();
	*out = st;
	return 0;
}

#else /* !GPUFILE_HAVE_CJSON */

int gpufile_safetensors_open(gpufile_safetensors_t **out, const char *path)
{
	char *shown =
	    path && gpufile__is_url(path) ? gpufile__remote_redact(path) : NULL;
	int rc = gpufile__fail(
	    -ENOTSUP,
	    "%s: safetensors header parsing not compiled in (gpufile was "
	    "built without cJSON: install libcjson-dev and rebuild)",
	    shown                   ? shown
	    : gpufile__is_url(path) ? GPUFILE__URL_NOT_SHOWN
	    : path                  ? path
	                            : "(null)");

	if (out)
		*out = NULL;
	(void)utf8_invalid_at;
	free(shown);
	return rc;
}

#endif

int gpufile_safetensors_count(const gpufile_safetensors_t *st)
{
	return st ? st->ntensors : -EINVAL;
}

int gpufile_safetensors_tensor(const gpufile_safetensors_t *st, int index,
                               gpufile_safetensors_tensor_t *out)
{
	const struct st_tensor *t;

	if (!st || !out)
		return gpufile__fail(-EINVAL, "gpufile_safetensors_tensor: "
		                              "NULL argument");
	if (index < 0 || index >= st->ntensors)
		return gpufile__fail(-EINVAL,
		                     "%s: tensor index %d out of range (%d "
		                     "tensors)",
		                     st->path, index, st->ntensors);
	t = &st->t[index];
	out->name = t->name;
	out->dtype = st_dtypes[t->dtype].name;
	out->dtype_bits = st_dtypes[t->dtype].bits;
	out->dtype_order = t->dtype;
	out->ndim = t->ndim;
	out->shape = t->shape;
	out->begin = t->begin;
	out->end = t->end;
	out->file_offset = st->data_offset + t->begin;
	return 0;
}

int gpufile_safetensors_tensors(const gpufile_safetensors_t *st, int first,
                                int n, gpufile_safetensors_tensor_t *out)
{
	int k;

	if (!st || (n > 0 && !out))
		return gpufile__fail(-EINVAL, "gpufile_safetensors_tensors: "
		                              "NULL argument");
	if (first < 0 || n < 0 || first > st->ntensors)
		return gpufile__fail(-EINVAL,
		                     "%s: tensors %d..%d+%d out of range (%d "
		                     "tensors)",
		                     st->path, first, first, n, st->ntensors);
	/* One call for the whole table: a binding pays its per-call cost
	 * once, not once per tensor (2,000 calls cost ~2 ms in ctypes). */
	for (k = 0; k < n && first + k < st->ntensors; k++)
		gpufile_safetensors_tensor(st, first + k, &out[k]);
	return k;
}

int gpufile_safetensors_find(const gpufile_safetensors_t *st, const char *name)
{
	int lo = 0, hi;

	if (!st || !name)
		return gpufile__fail(-EINVAL, "gpufile_safetensors_find: "
		                              "NULL argument");
	hi = st->ntensors - 1;
	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		int c = strcmp(name, st->t[st->by_name[mid]].name);

		if (c == 0)
			return st->by_name[mid];
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return gpufile__fail(-ENOENT, "%s: no tensor named \"%s\"", st->path,
	                     name);
}

int gpufile_safetensors_metadata_count(const gpufile_safetensors_t *st)
{
	return st ? st->nmeta : -EINVAL;
}

int gpufile_safetensors_has_metadata(const gpufile_safetensors_t *st)
{
	return st ? st->has_meta : -EINVAL;
}

int gpufile_safetensors_metadata(const gpufile_safetensors_t *st, int index,
                                 const char **key, const char **value)
{
	if (!st || index < 0 || index >= st->nmeta)
		return gpufile__fail(-EINVAL,
		                     "%s: metadata index %d out of range",
		                     st ? st->path : "(null)", index);
	if (key)
		*key = st->meta_key[index];
	if (value)
		*value = st->meta_value[index];
	return 0;
}

const char *gpufile_safetensors_metadata_get(const gpufile_safetensors_t *st,
                                             const char *key)
{
	for (int i = 0; st && key && i < st->nmeta; i++)
		if (strcmp(st->meta_key[i], key) == 0)
			return st->meta_value[i];
	return NULL;
}

uint64_t gpufile_safetensors_data_offset(const gpufile_safetensors_t *st)
{
	return st ? st->data_offset : 0;
}

uint64_t gpufile_safetensors_data_size(const gpufile_safetensors_t *st)
{
	return st ? st->data_size : 0;
}

gpufile_t *gpufile_safetensors_handle(const gpufile_safetensors_t *st)
{
	return st ? st->h : NULL;
}

const char *gpufile_safetensors_dtype_name(int order)
{
	return order >= 0 && order < ST_NDTYPES ? st_dtypes[order].name : NULL;
}

int gpufile_safetensors_dtype_bits(const char *dtype)
{
	for (int k = 0; dtype && k < ST_NDTYPES; k++)
		if (strcmp(dtype, st_dtypes[k].name) == 0)
			return (int)st_dtypes[k].bits;
	return -ENOENT;
}

/* One read of the data section: [begin, end) into dst. */
struct st_range {
	uint64_t begin, end;
	char *dst;
};

static int cmp_ranges(const void *a, const void *b)
{
	const struct st_range *x = a, *y = b;

	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	return x->dst < y->dst ? -1 : x->dst > y->dst;
}

/* Reads every range (in the data section) at once, as asynchronous
 * requests, and waits for all of them; the error returned is the one of
 * the lowest-offset range that failed. Returns the bytes read. */
static ssize_t read_ranges(const gpufile_safetensors_t *st,
                           const struct st_range *r, int n)
{
	gpufile_future_t **f = calloc((size_t)n + 1, sizeof(*f));
	char first_msg[512] = "";
	ssize_t total = 0, rc = 0;

	if (!f)
		return gpufile__fail(-ENOMEM, "%s: out of memory", st->path);
	for (int i = 0; i < n; i++) {
		int s = gpufile_pread_async(
		    st->h, r[i].dst, r[i].end - r[i].begin,
		    (int64_t)(st->data_offset + r[i].begin), &f[i]);
		if (s != 0) {
			rc = s;
			snprintf(first_msg, sizeof(first_msg), "%s",
			         gpufile_errmsg());
			break; /* later ranges are not submitted */
		}
	}
	/* Every submitted request ends before this returns: none may write
	 * into the caller's memory afterwards. */
	for (int i = 0; i < n && f[i]; i++) {
		ssize_t got = gpufile_future_wait(f[i]);
		uint64_t want = r[i].end - r[i].begin;

		if (rc == 0 && got < 0) {
			rc = got;
			snprintf(first_msg, sizeof(first_msg), "%s",
			         gpufile_errmsg());
		} else if (rc == 0 && (uint64_t)got != want) {
			rc = -EIO;
			snprintf(
			    first_msg, sizeof(first_msg),
			    "%s: file ended %zd bytes into a read of %" PRIu64
			    " at file offset %" PRIu64
			    " (truncated since it was opened?)",
			    st->path, got, want, st->data_offset + r[i].begin);
		}
		if (got > 0)
			total += got;
		gpufile_future_free(f[i]);
	}
	free(f);
	if (rc != 0)
		return gpufile__fail_msg((int)rc, first_msg);
	gpufile__clear_error();
	return total;
}

ssize_t gpufile_safetensors_load(const gpufile_safetensors_t *st, void *buf,
                                 size_t size)
{
	struct st_range r;

	if (!st || (!buf && st->data_size))
		return gpufile__fail(-EINVAL, "gpufile_safetensors_load: NULL "
		                              "argument");
	if (size < st->data_size)
		return gpufile__fail(
		    -EINVAL,
		    "%s: buffer of %zu bytes is smaller than the "
		    "data section (%" PRIu64 " bytes)",
		    st->path, size, st->data_size);
	if (st->data_size == 0)
		return 0;
	/* One request: gpufile_pread splits it into task_size tasks run by
	 * the whole pool, which is as parallel as the library gets. */
	r.begin = 0;
	r.end = st->data_size;
	r.dst = buf;
	return read_ranges(st, &r, 1);
}

ssize_t gpufile_safetensors_load_tensors(const gpufile_safetensors_t *st, int n,
                                         const int *indices, void *const *dsts)
{
	struct st_range *r;
	int nr = 0, m = 0;
	ssize_t rc;

	if (!st || n < 0 || (n > 0 && (!indices || !dsts)))
		return gpufile__fail(-EINVAL,
		                     "gpufile_safetensors_load_tensors: "
		                     "NULL argument or negative count");
	r = calloc((size_t)n + 1, sizeof(*r));
	if (!r)
		return gpufile__fail(-ENOMEM, "%s: out of memory", st->path);
	for (int i = 0; i < n; i++) {
		const struct st_tensor *t;

		if (indices[i] < 0 || indices[i] >= st->ntensors) {
			free(r);
			return gpufile__fail(
			    -EINVAL,
			    "%s: tensor index %d (entry %d) out "
			    "of range (%d tensors)",
			    st->path, indices[i], i, st->ntensors);
		}
		t = &st->t[indices[i]];
		if (t->end == t->begin)
			continue;
		if (!dsts[i]) {
			free(r);
			return gpufile__fail(
			    -EINVAL,
			    "%s: tensor \"%s\": destination is "
			    "NULL",
			    st->path, t->name);
		}
		r[nr].begin = t->begin;
		r[nr].end = t->end;
		r[nr].dst = dsts[i];
		nr++;
	}
	/* Tensors next to each other in the file and in memory become one
	 * read: 2,000 tensors of 1 MiB in one allocation are one request,
	 * not 2,000. */
	qsort(r, (size_t)nr, sizeof(*r), cmp_ranges);
	for (int i = 0; i < nr; i++) {
		if (m > 0 && r[m - 1].end == r[i].begin &&
		    r[m - 1].dst + (r[m - 1].end - r[m - 1].begin) ==
		        r[i].dst) {
			r[m - 1].end = r[i].end;
			continue;
		}
		r[m++] = r[i];
	}
	rc = m ? read_ranges(st, r, m) : 0;
	free(r);
	return rc;
}
