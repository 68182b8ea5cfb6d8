/*
 * The table-driven option parser of the gpufile tool (see options.h).
 */
#define _GNU_SOURCE
#include "options.h"
#include "measure.h"
#include "msg.h"
/* gpufile_parse_size/count: sizes parse as the settings do. */
#include "gpufile_private.h"

#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* GPU numbers above this are typing errors, not devices. */
#define OPT_DEVICE_MAX 1023

/* The forms of a size, for messages: every suffix parse_size() accepts
 * and no other (test_cli_usage checks both ways, and that each help text
 * that mentions sizes says the same). */
#define SIZE_FORMS                                                             \
	"bytes (B) or a number with k, m, g, t, KiB, MiB, GiB, TiB, KB, MB, "  \
	"GB or TB (any case; all binary)"

/* The library's own parsers: the CLI accepts exactly what settings do. */
int opt_parse_count(const char *text, uint64_t *out)
{
	return gpufile_parse_count(text, out);
}

/* Parses a size as settings do: plain bytes, or a number followed
 * (optionally after spaces) by b, k, kb, kib, m, mb, mib, g, gb, gib, t,
 * tb or tib in any case, all binary (1k = 1024). Returns 0, -EINVAL when
 * text is not a size, or -ERANGE when it does not fit in 64 bits. */
static int parse_size(const char *text, uint64_t *out)
{
	return gpufile_parse_size(text, out);
}

static int size_value(const char *cmd, const struct opt *o, const char *text)
{
	uint64_t max = o->max ? o->max : UINT64_MAX, v;
	char lo[32], hi[32];
	int rc = parse_size(text, &v);

	if (rc == -EINVAL)
		return msg_usage_error(cmd, "--%s \"%s\": not a size; use %s",
		                       o->name, text, SIZE_FORMS);
	if (rc == 0 && v >= o->min && v <= max) {
		*(uint64_t *)o->dest = v;
		return 0;
	}
	/* Here rc is -ERANGE (beyond 64 bits) or v is out of range. With no
	 * limit but 64 bits, 2^64 and more is all that can be too large, and
	 * saying so beats quoting a bound the user never wrote. */
	if (rc == 0 && v < o->min && max == UINT64_MAX)
		return msg_usage_error(
		    cmd, "--%s \"%s\": must be at least %s", o->name, text,
		    measure_human_bytes(o->min, lo, sizeof(lo)));
	if (max == UINT64_MAX)
		return msg_usage_error(cmd,
		                       "--%s \"%s\": too large (does not fit "
		                       "in 64 bits)",
		                       o->name, text);
	/* Beyond 64 bits and beyond max get the same message, so that
	 * 2^64-1 and 2^64 read alike. */
	if (o->min == 0)
		return msg_usage_error(cmd,
		                       "--%s \"%s\": too large (at most "
		                       "%" PRIu64 " bytes)",
		                       o->name, text, max);
	return msg_usage_error(cmd, "--%s \"%s\": use %s to %s", o->name, text,
	                       measure_human_bytes(o->min, lo, sizeof(lo)),
	                       measure_human_bytes(max, hi, sizeof(hi)));
}

static int device_value(const char *cmd, const struct opt *o, const char *text)
{
	uint64_t v;

	/* "-1" must not read as "not a whole number": what is wrong is that
	 * it names no GPU. */
	if (opt_parse_count(text, &v) || v > OPT_DEVICE_MAX)
		return msg_usage_error(cmd,
		                       "--%s \"%s\": not a device number (GPUs "
		                       "are numbered 0, 1, ...; at most %d)",
		                       o->name, text, OPT_DEVICE_MAX);
	*(int *)o->dest = (int)v;
	return 0;
}

static int seconds_value(const char *cmd, const struct opt *o, const char *text)
{
	double max = o->max ? (double)o->max : 86400.0, v;
	char *end;

	errno = 0;
	v = strtod(text, &end);
	if (end == text || *end || errno || !(v > 0) || v > max)
		return msg_usage_error(cmd,
		                       "--%s \"%s\": not a number of seconds "
		                       "in (0, %g]",
		                       o->name, text, max);
	*(double *)o->dest = v;
	return 0;
}

static int choice_value(const char *cmd, const struct opt *o, const char *text)
{
	char list[256] = "";
	size_t n = 0, len = 0;

	for (n = 0; o->choices[n]; n++) {
		if (strcasecmp(text, o->choices[n]) == 0) {
			*(int *)o->dest = (int)n;
			return 0;
		}
	}
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(
		    list + len, len < sizeof(list) ? sizeof(list) - len : 0,
		    "%s%s",
		    i == 0       ? ""
		    : i + 1 == n ? " or "
		                 : ", ",
		    o->choices[i]);
	return msg_usage_error(cmd, "--%s \"%s\": use %s", o->name, text, list);
}

/* Parses the whole number given to option opt of subcommand cmd. On
 * failure prints `gpufile CMD: OPT "TEXT": not a whole number` (or "out
 * of range [MIN, MAX]") and returns EXIT_USAGE; else returns 0 with the
 * number, in [min, max], in *out. */
static int count_arg(const char *cmd, const char *opt, const char *text,
                     uint64_t min, uint64_t max, uint64_t *out)
{
	int rc = opt_parse_count(text, out);

	if (rc == 0 && (*out < min || *out > max))
		rc = -ERANGE;
	if (rc == -ERANGE)
		return msg_usage_error(
		    cmd, "%s \"%s\": out of range [%" PRIu64 ", %" PRIu64 "]",
		    opt, text, min, max);
	if (rc)
		return msg_usage_error(cmd, "%s \"%s\": not a whole number",
		                       opt, text);
	return 0;
}

/* Stores the value of option o given as text. Returns 0 or EXIT_USAGE
 * (after the message). */
static int store(const char *cmd, const struct opt *o, const char *text)
{
	char name[64];
	uint64_t v;
	int rc = 0;

	snprintf(name, sizeof(name), "--%s", o->name);
	switch (o->kind) {
	case OPT_FLAG:
		*(int *)o->dest = 1;
		break;
	case OPT_SIZE:
		rc = size_value(cmd, o, text);
		break;
	case OPT_COUNT:
		rc = count_arg(cmd, name, text, o->min,
		               o->max ? o->max : UINT64_MAX, &v);
		if (rc == 0)
			*(uint64_t *)o->dest = v;
		break;
	case OPT_DEVICE:
		rc = device_value(cmd, o, text);
		break;
	case OPT_SECONDS:
		rc = seconds_value(cmd, o, text);
		break;
	case OPT_STRING:
		*(const char **)o->dest = text;
		break;
	case OPT_CHOICE:
		rc = choice_value(cmd, o, text);
		break;
	}
	if (rc == 0 && o->given)
		*o->given = 1;
	return rc;
}

/* Checks the number of positional arguments argv[first..argc). */
static int check_args(const struct opt_spec *spec, int first, int argc,
                      char **argv)
{
	int n = argc - first;

	if (n < spec->min_args)
		return msg_usage_error(spec->cmd, "no %s given",
		                       spec->arg_name ? spec->arg_name
		                                      : "argument");
	if (n <= spec->max_args)
		return 0;
	if (spec->max_args == 1 && spec->min_args == 1)
		return msg_usage_error(spec->cmd,
		                       "one %s only (got \"%s\" too)",
		                       spec->arg_name, argv[first + 1]);
	return msg_usage_error(spec->cmd, "unexpected argument \"%s\"",
	                       argv[first + spec->max_args]);
}

/* Reports the getopt_long() failure that returned c ('?' or ':', with
 * optstring starting with ':' and opterr = 0) as a usage error. */
static int getopt_error(const char *cmd, int c, char **argv)
{
	/* optind has moved past the offending word; for a short option
	 * grouped with others ("-xq") optopt names the letter. */
	const char *word = optind > 0 ? argv[optind - 1] : "?";

	if (c == ':') {
		if (optopt && strncmp(word, "--", 2) != 0)
			return msg_usage_error(cmd, "option -%c needs a value",
			                       optopt);
		return msg_usage_error(cmd, "option %s needs a value", word);
	}
	if (optopt && strncmp(word, "--", 2) != 0)
		return msg_usage_error(cmd, "unknown option -%c", optopt);
	return msg_usage_error(cmd, "unknown option %s", word);
}

/*
 * getopt_long() returns '?' for three faults of a long option, which
 * getopt_error() alone calls "unknown option" all three: a name of
 * no option, a value given to an option that takes none ("--json=x";
 * optopt is then the option's val) and a prefix of two or more options
 * ("--d" of --device and --direct; optopt is 0, as for an unknown name).
 * Reports the last two and returns EXIT_USAGE, or returns 0 to leave the
 * fault to getopt_error().
 */
static int long_option_error(const struct opt_spec *spec,
                             const struct option *longopts, char **argv)
{
	const char *word = optind > 0 ? argv[optind - 1] : "";
	char names[512] = "";
	size_t len, used = 0;
	int matches = 0;

	if (strncmp(word, "--", 2) != 0)
		return 0;
	word += 2;
	len = strcspn(word, "=");
	if (len == 0)
		return 0; /* "--=x" names nothing */
	for (int i = 0; longopts[i].name; i++) {
		if (optopt && longopts[i].val == optopt && word[len] == '=')
			return msg_usage_error(spec->cmd,
			                       "option --%s takes no value "
			                       "(got \"%s\")",
			                       longopts[i].name,
			                       word + len + 1);
		if (!optopt && strncmp(longopts[i].name, word, len) == 0 &&
		    used < sizeof(names)) {
			used += (size_t)snprintf(
			    names + used, sizeof(names) - used, "%s--%s",
			    matches ? ", " : "", longopts[i].name);
			matches++;
		}
	}
	if (matches < 2)
		return 0;
	return msg_usage_error(spec->cmd, "option --%.*s is ambiguous (%s)",
	                       (int)len, word, names);
}

int opt_parse(const struct opt_spec *spec, int argc, char **argv,
              int *exit_code)
{
	struct option longopts[OPT_MAX + 2];
	int n = spec->nopts, c, rc;

	assert(n >= 0 && n <= OPT_MAX);

	for (int i = 0; i < n; i++) {
		longopts[i].name = spec->opts[i].name;
		longopts[i].has_arg = spec->opts[i].kind == OPT_FLAG
		                          ? no_argument
		                          : required_argument;
		longopts[i].flag = NULL;
		longopts[i].val = 256 + i;
	}
	longopts[n] = (struct option){"help", no_argument, NULL, 'h'};
	longopts[n + 1] = (struct option){NULL, 0, NULL, 0};

	optind = 0;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (c == 'h') {
			fputs(spec->usage, stdout);
			*exit_code = EXIT_OK;
			return -1;
		}
		if (c < 256 || c >= 256 + n) {
			rc = c == '?' ? long_option_error(spec, longopts, argv)
			              : 0;
			*exit_code = rc ? rc : getopt_error(spec->cmd, c, argv);
			return -1;
		}
		rc = store(spec->cmd, &spec->opts[c - 256], optarg);
		if (rc) {
			*exit_code = rc;
			return -1;
		}
	}
	rc = check_args(spec, optind, argc, argv);
	if (rc) {
		*exit_code = rc;
		return -1;
	}
	return optind;
}
