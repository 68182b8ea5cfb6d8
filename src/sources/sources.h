/*
 * The sources wing (src/sources/): where bytes come from when they are not
 * a local file: HTTP(S) and S3 objects (remote.c, remote.h), the
 * transfer engine that moves their ranges (http_multi.c, http_multi.h),
 * the back-off, CA and logging rules of every request (http_policy.c,
 * http_policy.h),
 * S3's request signatures (sigv4.c, sigv4.h), credentials, regions and
 * endpoints as AWS tools find them (aws_config.c, aws_config.h), WebHDFS
 * files (webhdfs.c) and uploads (upload.c), the last two over one HTTP
 * request helper (http.c, http.h) whose requests run on the handle's
 * transfer engine, as reads do. A source opens a handle (struct
 * gpufile, core/core.h) whose remote_read the paths call, and moves device
 * reads through the paths' staging pipeline; a source other than remote.c
 * also sets the handle's source_ops (its close, size and request ops).
 *
 * May include: common/, platform/, core/, paths/.
 */
#ifndef GPUFILE_SOURCES_H
#define GPUFILE_SOURCES_H

#include "sources/aws_config.h"
#include "sources/http_multi.h"
#include "sources/http_policy.h"
#include "sources/remote.h"
#include "sources/sigv4.h"

#endif
