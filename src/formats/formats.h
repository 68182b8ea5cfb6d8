/*
 * The formats wing (src/formats/): files of a known layout read through
 * the public handle API (api/): safetensors (safetensors.c). A new format
 * is one new file here.
 *
 * May include: every wing but controls/.
 */
#ifndef GPUFILE_FORMATS_H
#define GPUFILE_FORMATS_H

#include "api/api.h"

#endif
