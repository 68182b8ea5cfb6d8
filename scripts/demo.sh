#!/usr/bin/env bash
# The main job, end to end on a fresh Debian 12 machine: install what is
# missing, build gpufile (Release) into build/, write a sample file with
# `gpufile write` and read it back with `gpufile read`, printing the report
# as text and then as JSON. On a machine with a GPU the read lands in GPU 0;
# without one, in host memory, and the report says why.
#
# Environment:
#   SAMPLE_SIZE  size of the sample file (default 1GiB; any size gpufile
#                accepts: 256MiB, 4g, ...)
#   SAMPLE_FILE  where to write it (default build/sample.bin)
#   BUILD_DIR    build directory (default build)
#   REPEAT       reads to time (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${BUILD_DIR:-build}
SAMPLE_SIZE=${SAMPLE_SIZE:-1GiB}
SAMPLE_FILE=${SAMPLE_FILE:-$BUILD_DIR/sample.bin}
REPEAT=${REPEAT:-3}
jobs=$(nproc 2>/dev/null || echo 2)

step() { printf '\n==> %s\n' "$*"; }

step "dependencies"
bash scripts/deps.sh

step "build (Release) in $BUILD_DIR/"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" -j "$jobs" >/dev/null
gpufile="$BUILD_DIR/gpufile"
"$gpufile" --version

step "settings"
"$gpufile" config

step "write a $SAMPLE_SIZE sample file: $SAMPLE_FILE"
"$gpufile" write "$SAMPLE_FILE" --size "$SAMPLE_SIZE" --pattern random

step "read it back ($REPEAT times)"
"$gpufile" read "$SAMPLE_FILE" --repeat "$REPEAT"

step "the same read, as JSON"
"$gpufile" read "$SAMPLE_FILE" --repeat "$REPEAT" --json

step "which path would a device read of it take, and why (gpufile check)"
"$gpufile" check "$SAMPLE_FILE" || true

printf '\ndemo: done (sample file left at %s)\n' "$SAMPLE_FILE"
