/*
 * What AWS tools would use for an S3 request (aws_config.c): the
 * credentials, region and endpoint, from the handle's options, the
 * environment and the profile files, in the order the AWS CLI and SDKs
 * read them; and which https:// URLs are AWS's own S3 URLs. remote.c asks
 * once per open and signs with the answer; nothing here does I/O beyond
 * reading the two profile files.
 */
#ifndef GPUFILE_AWS_CONFIG_H
#define GPUFILE_AWS_CONFIG_H

#include "paths/paths.h"

/* What an open resolved. Every string is allocated (the caller frees it
 * with gpufile__aws_free()); NULL where nothing was found. */
struct gpufile__aws {
	char *access_key, *secret_key, *session_token;
	char *region;
	char *endpoint_url;  /* s3:// URLs only: path-style endpoint */
	char *endpoint_from; /* the option, variable or file that gave it */
	/* Where the credentials came from, in words, never their values:
	 * "explicit options", "environment (AWS_ACCESS_KEY_ID, ...)",
	 * "profile NAME (FILE)"; or why there are none. */
	char *source;
};

/* Resolves the S3 facts of an open of shown (the redacted URL, for
 * messages) with opts (NULL: none). need_endpoint: an s3:// URL, which
 * needs the endpoint. Credentials: opts, else AWS_ACCESS_KEY_ID and
 * AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN), else the profile's. Region:
 * opts, AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else NULL
 * (the caller picks). Endpoint: opts, AWS_ENDPOINT_URL_S3,
 * AWS_ENDPOINT_URL, the profile's s3 endpoint_url, endpoint_url (the
 * last four not under AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true).
 * Returns 0, or an error with the thread's message naming the option,
 * variable or file and line: -EINVAL (half-given credentials, a profile
 * named but found in neither file, a profile that needs what gpufile does
 * not do: role_arn, credential_process, SSO, a web-identity token),
 * -ENOMEM; *out is then freed. */
int gpufile__aws_resolve(const gpufile_remote_opts_t *opts, const char *shown,
                         int need_endpoint, struct gpufile__aws *out);
void gpufile__aws_free(struct gpufile__aws *a);

/* An http(s):// URL of AWS's own S3: its host is BUCKET.s3[.-]REGION
 * .amazonaws.com[.cn], BUCKET.s3.amazonaws.com (virtual-hosted),
 * s3[.-]REGION.amazonaws.com or s3.amazonaws.com (path style), also with
 * "dualstack.". Returns 1 with *region set to the host's region
 * (allocated) or NULL when the host names none, 0 when url is not such a
 * URL, -ENOMEM. */
int gpufile__aws_s3_host(const char *url, char **region);

/* 1 when url is a presigned S3 URL: X-Amz-Signature among its query's
 * parameters (its query is its credential: never signed again). */
int gpufile__aws_presigned(const char *url);

/* The path of an https:// S3 URL (path, n bytes) as SigV4 signs it and as
 * it is then sent, so that the two agree: escapes kept (hex in upper
 * case), every other character outside A-Z a-z 0-9 - . _ ~ / encoded.
 * Sized from the path (the caller frees it); NULL when out of memory. */
char *gpufile__s3_http_path(const char *path, size_t n);

/* The CA bundle and folder HTTPS peers are checked against: opts, else
 * AWS_CA_BUNDLE, CURL_CA_BUNDLE, SSL_CERT_FILE; and opts, else
 * SSL_CERT_DIR. *file and *dir are allocated (NULL: libcurl's default).
 * Returns 0, or -ENOENT/-EACCES naming the option or variable and the
 * path when it cannot be read, or -ENOMEM. */
int gpufile__ca_settings(const gpufile_remote_opts_t *opts, const char *shown,
                         char **file, char **dir);

#endif
