/*
 * cufile.json, as gpufile models it (cufile_json.c). Internal: the public
 * entry point is gpufile_cufile_config_load() in gpufile.h.
 */
#ifndef GPUFILE_CUFILE_JSON_H
#define GPUFILE_CUFILE_JSON_H

#include "gpufile.h"

/* Fills *out with gpufile's model of cuFile 1.15's defaults (what cuFile
 * uses when cufile.json or a key in it is absent). */
void gpufile__cufile_defaults(gpufile_cufile_config_t *out);

/* Parses len bytes of text as cufile.json (NVIDIA's file has // and
 * block comments, which are blanked out first so that error positions
 * keep their line numbers) into *out, which must hold the defaults.
 * name is used in messages. Returns 0, GPUFILE_ECONFIG (message names
 * name:line:column, or the key) or -ENOTSUP when built without cJSON.
 * Never reads outside text[0..len). */
int gpufile__cufile_json_parse(const char *text, size_t len, const char *name,
                               gpufile_cufile_config_t *out);

#endif
