/*
 * The S3 facts of an open (aws_config.h): credentials, region, endpoint
 * and CA settings, found where the AWS CLI and SDKs find them; the
 * shapes of AWS's own S3 host names, of a presigned URL, and the path a
 * signed https:// S3 URL is signed and sent with.
 *
 * Order (botocore's credential chain, less what needs a network call):
 *   1. the handle's options (gpufile_remote_opts_t);
 *   2. AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN);
 *   3. a web-identity token (AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN):
 *      refused with the reason, never skipped (see web_identity());
 *   4. the profile (options, AWS_PROFILE, AWS_DEFAULT_PROFILE, "default")
 *      in AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials ([NAME]),
 *      then in AWS_CONFIG_FILE or ~/.aws/config ([profile NAME]).
 * Instance metadata (IMDS) and container credentials are not asked: they
 * are network calls to a link-local address that would hang an open on
 * any machine that is not an EC2 instance or an ECS task.
 * A secret read from a file is wiped from the line buffer that held it.
 */
#define _GNU_SOURCE
#include "sources/aws_config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static const char *env(const char *name)
{
	const char *v = getenv(name);

	return v && v[0] ? v : NULL;
}

static void wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

void gpufile__aws_free(struct gpufile__aws *a)
{
	if (!a)
		return;
	free(a->access_key);
	wipe_free(a->secret_key);
	wipe_free(a->session_token);
	free(a->region);
	free(a->endpoint_url);
	free(a->endpoint_from);
	free(a->source);
	memset(a, 0, sizeof(*a));
}

/* ---- profile files ---- */

/* The values of one profile that gpufile uses, from one file. */
struct profile {
	char *path; /* the file read (for messages) */
	int found;  /* the profile's section is in it */
	char *key_id, *secret, *token, *region, *endpoint, *s3_endpoint;
	char *unsupported; /* a key naming a source gpufile does not use */
	int unsupported_line;
};

static void profile_free(struct profile *p)
{
	free(p->path);
	free(p->key_id);
	wipe_free(p->secret);
	wipe_free(p->token);
	free(p->region);
	free(p->endpoint);
	free(p->s3_endpoint);
	free(p->unsupported);
	memset(p, 0, sizeof(*p));
}

static char *trim(char *s)
{
	char *end;

	s += strspn(s, " \t");
	end = s + strlen(s);
	while (end > s && strchr(" \t\r\n", end[-1]))
		*--end = '\0';
	return s;
}

/* Whether section (the text between '[' and ']') is profile name's: in
 * the credentials file "[NAME]", in the config file "[profile NAME]"
 * (and "[default]" for the default profile). */
static int is_section(const char *section, const char *name, int config)
{
	if (!config)
		return strcmp(section, name) == 0;
	if (strncmp(section, "profile", 7) == 0 &&
	    (section[7] == ' ' || section[7] == '\t'))
		return strcmp(trim((char *)section + 8), name) == 0;
	return strcmp(name, "default") == 0 && strcmp(section, "default") == 0;
}

/* Keeps value in *slot (the last one of a key wins, as botocore's
 * parser). Returns 0 or -ENOMEM. */
static int keep(char **slot, const char *value, int secret)
{
	char *copy = strdup(value);

	if (!copy)
		return -ENOMEM;
	if (secret)
		wipe_free(*slot);
	else
		free(*slot);
	*slot = copy;
	return 0;
}

/* One "key = value" line of the profile's section; sub: inside a nested
 * "s3 =" block. */
static int profile_line(struct profile *p, const char *key, const char *value,
                        int sub, int lineno)
{
	static const char *const unsupported[] = {
	    "role_arn",    "credential_process",      "sso_start_url",
	    "sso_session", "web_identity_token_file", "credential_source"};

	if (sub)
		return strcasecmp(key, "endpoint_url") == 0
		           ? keep(&p->s3_endpoint, value, 0)
		           : 0;
	if (strcasecmp(key, "aws_access_key_id") == 0)
		return keep(&p->key_id, value, 0);
	if (strcasecmp(key, "aws_secret_access_key") == 0)
		return keep(&p->secret, value, 1);
	if (strcasecmp(key, "aws_session_token") == 0)
		return keep(&p->token, value, 1);
	if (strcasecmp(key, "region") == 0)
		return keep(&p->region, value, 0);
	if (strcasecmp(key, "endpoint_url") == 0)
		return keep(&p->endpoint, value, 0);
	for (size_t i = 0; i < sizeof(unsupported) / sizeof(*unsupported); i++)
		if (!p->unsupported && strcasecmp(key, unsupported[i]) == 0) {
			p->unsupported_line = lineno;
			return keep(&p->unsupported, key, 0);
		}
	return 0;
}

/* Reads profile name from path (config: the config file's section
 * names) into *p. A missing file is no profile; one that cannot be read
 * is an error naming it. Lines are sized from the file. */
static int profile_read(struct profile *p, const char *path, const char *name,
                        int config, const char *shown)
{
	FILE *f;
	char *line = NULL;
	size_t cap = 0;
	int in = 0, sub = 0, lineno = 0, rc = 0;
	/* The indentation of the section's last key, -1 before its first: a
	 * line indented deeper continues that key's value (botocore's
	 * configparser), any other "key = value" is a key, indented or not. */
	long key_indent = -1;

	p->path = strdup(path);
	if (!p->path)
		return -ENOMEM;
	f = fopen(path, "re");
	if (!f) {
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		rc = -errno;
		return gpufile__fail(rc, "opening %s: AWS %s file %s: %s",
		                     shown, config ? "config" : "credentials",
		                     path, strerror(-rc));
	}
	while (rc == 0 && getline(&line, &cap, f) >= 0) {
		const long indent = (long)strspn(line, " \t");
		char *text = trim(line), *eq;
		int continues;

		lineno++;
		if (!text[0] || text[0] == '#' || text[0] == ';')
			continue;
		continues = key_indent >= 0 && indent > key_indent;
		if (text[0] == '[' && !continues) {
			char *close = strchr(text, ']');

			if (close)
				*close = '\0';
			in = close && is_section(trim(text + 1), name, config);
			p->found |= in;
			sub = 0;
			key_indent = -1;
			continue;
		}
		/* "key = value" or "key: value", the first of the two
		 * ending the key, as configparser reads them. */
		eq = text[strcspn(text, "=:")] ? text + strcspn(text, "=:")
		                               : NULL;
		if (!continues && eq)
			key_indent = indent;
		if (!in || !eq)
			continue;
		*eq = '\0';
		if (continues) {
			/* The value of the key above: read only as the
			 * nested "s3 =" block. */
			if (sub)
				rc = profile_line(p, trim(text), trim(eq + 1),
				                  1, lineno);
			continue;
		}
		sub = strcasecmp(trim(text), "s3") == 0 && !*trim(eq + 1);
		if (!sub)
			rc = profile_line(p, trim(text), trim(eq + 1), 0,
			                  lineno);
	}
	if (line) {
		explicit_bzero(line, cap);
		free(line);
	}
	if (rc == 0 && ferror(f))
		rc = gpufile__fail(-EIO, "opening %s: reading AWS file %s",
		                   shown, path);
	fclose(f);
	return rc;
}

/* The path of a profile file: var, else ~/.aws/base (NULL without HOME:
 * no file). Returns 0 or -ENOMEM. */
static int profile_path(const char *var, const char *base, char **out)
{
	const char *home = env("HOME");

	*out = NULL;
	if (env(var))
		*out = strdup(env(var));
	else if (home && asprintf(out, "%s/.aws/%s", home, base) < 0)
		*out = NULL;
	return (env(var) || home) && !*out ? -ENOMEM : 0;
}

/* ---- the chain ---- */

static int oom(const char *shown)
{
	return gpufile__fail(-ENOMEM, "opening %s: out of memory", shown);
}

static int set_credentials(struct gpufile__aws *a, const char *id,
                           const char *secret, const char *token)
{
	a->access_key = strdup(id);
	a->secret_key = strdup(secret);
	a->session_token = token ? strdup(token) : NULL;
	return a->access_key && a->secret_key && (!token || a->session_token)
	           ? 0
	           : -ENOMEM;
}

static int from_env(struct gpufile__aws *a, const char *shown, int *done)
{
	const char *id = env("AWS_ACCESS_KEY_ID");
	const char *secret = env("AWS_SECRET_ACCESS_KEY");

	*done = 0;
	if (!id && !secret)
		return 0;
	if (!id || !secret)
		return gpufile__fail(
		    -EINVAL,
		    "opening %s: %s is set but %s is not; set both (or "
		    "neither, for a public bucket)",
		    shown, id ? "AWS_ACCESS_KEY_ID" : "AWS_SECRET_ACCESS_KEY",
		    id ? "AWS_SECRET_ACCESS_KEY" : "AWS_ACCESS_KEY_ID");
	*done = 1;
	if (set_credentials(a, id, secret, env("AWS_SESSION_TOKEN")) ||
	    !(a->source = strdup(env("AWS_SESSION_TOKEN")
	                             ? "environment: AWS_ACCESS_KEY_ID, "
	                               "AWS_SECRET_ACCESS_KEY and "
	                               "AWS_SESSION_TOKEN set"
	                             : "environment: AWS_ACCESS_KEY_ID and "
	                               "AWS_SECRET_ACCESS_KEY set")))
		return oom(shown);
	return 0;
}

/* AssumeRoleWithWebIdentity is one unsigned STS call, but its answer is
 * XML to parse, its credentials expire (an hour by default) and would
 * have to be renewed in the middle of a long read of every handle: an STS
 * client of its own for gpufile. Refused with what to do instead, never
 * passed over silently (a pod with this set means these credentials). */
static int web_identity(const char *shown)
{
	return gpufile__fail(
	    -EINVAL,
	    "opening %s: AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN are set, "
	    "but gpufile does not exchange a web-identity token for "
	    "credentials (an STS AssumeRoleWithWebIdentity call); export the "
	    "role's credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
	    "AWS_SESSION_TOKEN, e.g. from `aws configure export-credentials`) "
	    "or pass them in the handle's options",
	    shown);
}

/* The credentials of profile p (the credentials file's win over the
 * config file's, key by key as a pair). */
static int from_profile(struct gpufile__aws *a, const struct profile *cred,
                        const struct profile *conf, const char *name,
                        const char *shown)
{
	const struct profile *p = cred->key_id || cred->secret   ? cred
	                          : conf->key_id || conf->secret ? conf
	                                                         : NULL;

	if (!p) {
		const struct profile *u = cred->unsupported   ? cred
		                          : conf->unsupported ? conf
		                                              : NULL;
		if (u)
			return gpufile__fail(
			    -EINVAL,
			    "opening %s: profile \"%s\" in %s (line %d) gets "
			    "its credentials through %s, which gpufile does "
			    "not do (it reads static keys only); export the "
			    "credentials (e.g. `aws configure "
			    "export-credentials --profile %s`) or pass them "
			    "in the handle's options",
			    shown, name, u->path, u->unsupported_line,
			    u->unsupported, name);
		return 0;
	}
	if (!p->key_id || !p->secret)
		return gpufile__fail(
		    -EINVAL,
		    "opening %s: profile \"%s\" in %s has %s "
		    "but no %s",
		    shown, name, p->path,
		    p->key_id ? "aws_access_key_id" : "aws_secret_access_key",
		    p->key_id ? "aws_secret_access_key" : "aws_access_key_id");
	if (set_credentials(a, p->key_id, p->secret, p->token) ||
	    asprintf(&a->source, "profile \"%s\" (%s)", name, p->path) < 0) {
		a->source = NULL;
		return oom(shown);
	}
	return 0;
}

static int from_opts(struct gpufile__aws *a, const gpufile_remote_opts_t *o,
                     const char *shown, int *done)
{
	*done = 0;
	if (!o || (!o->aws_access_key_id && !o->aws_secret_access_key))
		return 0;
	if (!o->aws_access_key_id || !o->aws_secret_access_key ||
	    !o->aws_access_key_id[0] || !o->aws_secret_access_key[0])
		return gpufile__fail(
		    -EINVAL,
		    "opening %s: the options give %s but no "
		    "%s; give both (or neither)",
		    shown,
		    o->aws_access_key_id ? "aws_access_key_id"
		                         : "aws_secret_access_key",
		    o->aws_access_key_id ? "aws_secret_access_key"
		                         : "aws_access_key_id");
	*done = 1;
	if (set_credentials(a, o->aws_access_key_id, o->aws_secret_access_key,
	                    o->aws_session_token && o->aws_session_token[0]
	                        ? o->aws_session_token
	                        : NULL) ||
	    !(a->source = strdup("explicit options")))
		return oom(shown);
	return 0;
}

static int truthy(const char *v)
{
	return v && (!strcasecmp(v, "true") || !strcmp(v, "1"));
}

/* Region and endpoint: options, environment, profile. */
static int place(struct gpufile__aws *a, const gpufile_remote_opts_t *o,
                 const struct profile *conf, int need_endpoint,
                 const char *shown)
{
	const char *region = o && o->aws_region && o->aws_region[0]
	                         ? o->aws_region
	                         : env("AWS_REGION");
	const char *ep = NULL, *from = NULL;
	int in_profile = 0;

	if (!region)
		region = env("AWS_DEFAULT_REGION");
	if (!region)
		region = conf->region;
	if (region && !(a->region = strdup(region)))
		return oom(shown);
	if (!need_endpoint)
		return 0;
	if (o && o->aws_endpoint_url && o->aws_endpoint_url[0]) {
		ep = o->aws_endpoint_url;
		from = "aws_endpoint_url (options)";
	} else if (!truthy(env("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"))) {
		if ((ep = env("AWS_ENDPOINT_URL_S3")))
			from = "AWS_ENDPOINT_URL_S3";
		else if ((ep = env("AWS_ENDPOINT_URL")))
			from = "AWS_ENDPOINT_URL";
		else if ((ep = conf->s3_endpoint))
			from = "s3.endpoint_url";
		else if ((ep = conf->endpoint))
			from = "endpoint_url";
		in_profile =
		    ep && (ep == conf->s3_endpoint || ep == conf->endpoint);
	}
	if (!ep)
		return 0;
	a->endpoint_url = strdup(ep);
	if (!a->endpoint_url)
		return oom(shown);
	if (!in_profile)
		a->endpoint_from = strdup(from);
	else if (asprintf(&a->endpoint_from, "%s in %s", from, conf->path) < 0)
		a->endpoint_from = NULL;
	return a->endpoint_from ? 0 : oom(shown);
}

static const char *profile_name(const gpufile_remote_opts_t *o, int *named)
{
	const char *name = o && o->aws_profile && o->aws_profile[0]
	                       ? o->aws_profile
	                       : env("AWS_PROFILE");

	if (!name)
		name = env("AWS_DEFAULT_PROFILE");
	*named = name != NULL;
	return name ? name : "default";
}

int gpufile__aws_resolve(const gpufile_remote_opts_t *opts, const char *shown,
                         int need_endpoint, struct gpufile__aws *out)
{
	struct profile cred = {0}, conf = {0};
	char *cred_path = NULL, *conf_path = NULL;
	int named, done = 0, rc;
	const char *name = profile_name(opts, &named);
	const int unsigned_ = opts && (opts->flags & GPUFILE_REMOTE_UNSIGNED);

	memset(out, 0, sizeof(*out));
	rc = profile_path("AWS_SHARED_CREDENTIALS_FILE", "credentials",
	                  &cred_path);
	if (rc == 0)
		rc = profile_path("AWS_CONFIG_FILE", "config", &conf_path);
	if (rc) {
		rc = oom(shown);
		goto out;
	}
	if (conf_path)
		rc = profile_read(&conf, conf_path, name, 1, shown);
	if (rc == 0 && cred_path && !unsigned_)
		rc = profile_read(&cred, cred_path, name, 0, shown);
	if (rc)
		goto out;
	if (named && !cred.found && !conf.found) {
		rc = gpufile__fail(
		    -EINVAL,
		    "opening %s: AWS profile \"%s\" (%s) is in neither %s nor "
		    "%s",
		    shown, name,
		    opts && opts->aws_profile && opts->aws_profile[0]
		        ? "options"
		    : env("AWS_PROFILE") ? "AWS_PROFILE"
		                         : "AWS_DEFAULT_PROFILE",
		    cred_path ? cred_path : "~/.aws/credentials (no HOME)",
		    conf_path ? conf_path : "~/.aws/config (no HOME)");
		goto out;
	}
	rc = place(out, opts, &conf, need_endpoint, shown);
	if (rc || unsigned_) {
		if (rc == 0 &&
		    !(out->source = strdup("none: unsigned requests "
		                           "(asked by the options)")))
			rc = oom(shown);
		goto out;
	}
	rc = from_opts(out, opts, shown, &done);
	if (rc == 0 && !done)
		rc = from_env(out, shown, &done);
	if (rc == 0 && !done && env("AWS_WEB_IDENTITY_TOKEN_FILE") &&
	    env("AWS_ROLE_ARN"))
		rc = web_identity(shown);
	if (rc == 0 && !done)
		rc = from_profile(out, &cred, &conf, name, shown);
	if (rc == 0 && !out->source &&
	    asprintf(&out->source,
	             "none found (options, environment, profile \"%s\" in "
	             "%s and %s): unsigned requests",
	             name, cred_path ? cred_path : "(no HOME)",
	             conf_path ? conf_path : "(no HOME)") < 0) {
		out->source = NULL;
		rc = oom(shown);
	}
out:
	profile_free(&cred);
	profile_free(&conf);
	free(cred_path);
	free(conf_path);
	if (rc)
		gpufile__aws_free(out);
	return rc;
}

/* ---- AWS's S3 host names ---- */

/* The region in what follows "s3." or "s3-" in an AWS host (rest, n
 * bytes): "REGION", "dualstack.REGION"; none for "accelerate" forms. */
static int host_region(const char *rest, size_t n, char **region)
{
	*region = NULL;
	if (n > 10 && strncasecmp(rest, "dualstack.", 10) == 0) {
		rest += 10;
		n -= 10;
	}
	if (!n || memchr(rest, '.', n) ||
	    (n >= 10 && strncasecmp(rest, "accelerate", 10) == 0) ||
	    strncasecmp(rest, "external-", 9) == 0)
		return 1;
	*region = strndup(rest, n);
	return *region ? 1 : -ENOMEM;
}

int gpufile__aws_s3_host(const char *url, char **region)
{
	static const char *const suffixes[] = {".amazonaws.com.cn",
	                                       ".amazonaws.com"};
	const char *a = strstr(url, "://"), *at, *host;
	size_t n, len = 0;

	*region = NULL;
	if (!a || !(strncasecmp(url, "http://", 7) == 0 ||
	            strncasecmp(url, "https://", 8) == 0))
		return 0;
	a += 3;
	n = strcspn(a, "/?#");
	at = memrchr(a, '@', n);
	host = at ? at + 1 : a;
	n -= (size_t)(host - a);
	n = strcspn(host, ":/?#") < n ? strcspn(host, ":/?#") : n;
	for (size_t i = 0; i < 2 && !len; i++) {
		size_t sl = strlen(suffixes[i]);
		if (n > sl && strncasecmp(host + n - sl, suffixes[i], sl) == 0)
			len = n - sl;
	}
	if (!len)
		return 0;
	/* Path style: the host starts with the S3 label. */
	if (len == 2 && strncasecmp(host, "s3", 2) == 0)
		return 1;
	if (len > 3 && strncasecmp(host, "s3", 2) == 0 &&
	    (host[2] == '.' || host[2] == '-'))
		return host_region(host + 3, len - 3, region);
	/* Virtual-hosted: BUCKET.s3..., the bucket may hold dots, and
	 * ".s3." or ".s3-" too (logs.s3-archive.s3.REGION...): the S3 label
	 * is the last one, as no region holds it. */
	for (size_t i = len > 3 ? len - 3 : 0; i > 0; i--) {
		if (host[i] != '.' || strncasecmp(host + i + 1, "s3", 2) != 0)
			continue;
		if (i + 3 == len)
			return 1;
		if (host[i + 3] == '.' || host[i + 3] == '-')
			return host_region(host + i + 4, len - i - 4, region);
	}
	return 0;
}

/* ---- S3 https:// URLs ---- */

int gpufile__aws_presigned(const char *url)
{
	const char *auth = strstr(url, "://");
	const char *q;

	auth = auth ? auth + 3 : url;
	q = auth + strcspn(auth, "?#");
	if (*q != '?')
		return 0;
	for (q++; *q && *q != '#'; q += strcspn(q, "&#"), q += *q == '&')
		if (strncasecmp(q, "X-Amz-Signature=", 16) == 0)
			return 1;
	return 0;
}

/* 1 for a character a path keeps as it is when signed and sent. */
static int path_char(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
	       c == '~' || c == '/';
}

static int hex_digit(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
	       (c >= 'A' && c <= 'F');
}

char *gpufile__s3_http_path(const char *path, size_t n)
{
	char *out = malloc(3 * n + 2), *o = out;

	if (!out)
		return NULL;
	if (n == 0 || path[0] != '/')
		*o++ = '/';
	for (size_t i = 0; i < n; i++) {
		const unsigned char c = (unsigned char)path[i];

		if (c == '%' && i + 2 < n && hex_digit(path[i + 1]) &&
		    hex_digit(path[i + 2])) {
			o += sprintf(o, "%%%c%c",
			             (char)toupper((unsigned char)path[i + 1]),
			             (char)toupper((unsigned char)path[i + 2]));
			i += 2;
		} else if (path_char(c)) {
			*o++ = (char)c;
		} else {
			o += sprintf(o, "%%%02X", c);
		}
	}
	*o = '\0';
	return out;
}

/* ---- CA ---- */

static int ca_pick(const char *opt, const char *opt_name,
                   const char *const *vars, int nvars, int dir,
                   const char *shown, char **out)
{
	const char *value = opt && opt[0] ? opt : NULL, *from = opt_name;

	*out = NULL;
	for (int i = 0; !value && i < nvars; i++)
		if ((value = env(vars[i])))
			from = vars[i];
	if (!value)
		return 0;
	/* OpenSSL takes a folder list "A:B": left to it. */
	if (!(dir && strchr(value, ':')) &&
	    access(value, dir ? (R_OK | X_OK) : R_OK) != 0) {
		int rc = -errno;
		return gpufile__fail(rc, "opening %s: %s=\"%s\": %s %s", shown,
		                     from, value,
		                     dir ? "the CA folder cannot be searched:"
		                         : "the CA bundle cannot be read:",
		                     strerror(-rc));
	}
	*out = strdup(value);
	return *out ? 0 : oom(shown);
}

int gpufile__ca_settings(const gpufile_remote_opts_t *opts, const char *shown,
                         char **file, char **dir)
{
	static const char *const files[] = {"AWS_CA_BUNDLE", "CURL_CA_BUNDLE",
	                                    "SSL_CERT_FILE"};
	static const char *const dirs[] = {"SSL_CERT_DIR"};
	int rc = ca_pick(opts ? opts->ca_file : NULL, "ca_file (options)",
	                 files, 3, 0, shown, file);

	if (rc == 0)
		rc = ca_pick(opts ? opts->ca_path : NULL, "ca_path (options)",
		             dirs, 1, 1, shown, dir);
	if (rc) {
		free(*file);
		*file = NULL;
	}
	return rc;
}
