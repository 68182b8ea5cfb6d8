/*
 * Every wing's private declarations at once, for tests, fuzzers and
 * benchmarks only. The library's own files include their wing's header
 * instead (src/WING/WING.h), which includes the wings below it and
 * nothing above (docs/ARCHITECTURE.md; tests/pkg/check_layers.py keeps
 * it so, and refuses this header in src/).
 */
#ifndef GPUFILE_INTERNAL_H
#define GPUFILE_INTERNAL_H

#include "controls/controls.h"
#include "formats/formats.h"

#endif
