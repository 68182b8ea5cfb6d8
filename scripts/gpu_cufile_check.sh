#!/usr/bin/env bash
# The cuFile backend on a GPU machine with the real libcufile (1.15):
# builds gpufile, runs the unit tests (test_cufile among them), then the
# four scenarios of the cuFile issue and the benchmark, printing one JSON
# line per run and PASS/FAIL per check. Data are verified byte for byte.
#
#   scripts/gpu_cufile_check.sh [--no-bench] [--no-tests] [--build DIR] [--data DIR]
#
# --no-tests: DIR is already built (by scripts/gpu_run.sh); skip the build
# and the unit tests.
#
# DIR for data must be on a disk file system that takes O_DIRECT (not
# tmpfs); it needs 5 GiB. Exit status: 0 when every check passed.
set -u
cd "$(dirname "$0")/.." || exit 1
BUILD=build-gpu-cufile
DATA=
BENCH=1
TESTS=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-bench) BENCH=0 ;;
    --no-tests) TESTS=0 ;;
    --build) BUILD=$2; shift ;;
    --data) DATA=$2; shift ;;
    *) echo "usage: $0 [--no-bench] [--no-tests] [--build DIR] [--data DIR]" >&2; exit 2 ;;
  esac
  shift
done
DATA=${DATA:-$PWD/$BUILD/cufile-data}
FAILED=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; FAILED=1; }

echo "== platform"
uname -r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -2
ls -l /proc/driver/nvidia-fs 2>/dev/null || echo "nvidia-fs: not loaded (/proc/driver/nvidia-fs absent)"
for d in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu /usr/local/cuda/targets/x86_64-linux/lib; do
  ls "$d"/libcufile.so* 2>/dev/null
done
echo "cufile.json: ${CUFILE_ENV_PATH_JSON:-/etc/cufile.json}"

if [ $TESTS = 1 ]; then
echo "== build"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGPUFILE_WERROR=ON >/dev/null || exit 1
make -C "$BUILD" -j"$(nproc)" >/dev/null || { make -C "$BUILD" 2>&1 | tail -30; exit 1; }
fi
# bench/CMakeLists.txt may not list cufile_bench yet: build it directly.
B=$BUILD/cufile_bench
cc -O2 -std=gnu11 -Wall -Wextra -Iinclude bench/cufile_bench.c \
  -L"$BUILD" -lgpufile -Wl,-rpath,"$PWD/$BUILD" -o "$B" || exit 1

if [ $TESTS = 1 ]; then
echo "== unit tests"
(cd "$BUILD" && ctest --output-on-failure -j4) || fail "ctest"
fi

mkdir -p "$DATA"
echo "data directory: $DATA ($(stat -f -c %T "$DATA"))"
F1=$DATA/cufile-1g.bin
F4=$DATA/cufile-4g.bin
make_file() { # path GiB
  if [ ! -f "$1" ] || [ "$(stat -c %s "$1")" -ne $(($2 << 30)) ]; then
    dd if=/dev/urandom of="$1" bs=64M count=$(($2 * 16)) oflag=direct status=none && sync
  fi
}
make_file "$F1" 1
export GPUFILE_CUFILE_STATS=3 CUFILE_STATS_LEVEL=3

# run NAME ENV... -- ARGS: runs the bench under env, keeps stdout+stderr.
run() {
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  echo "-- $name: ${envs[*]} $*"
  OUT=$(env "${envs[@]}" "$B" "$@" 2>/tmp/cufile_bench.err); RC=$?
  ERR=$(cat /tmp/cufile_bench.err)
  [ -n "$OUT" ] && echo "$OUT"
  [ -n "$ERR" ] && echo "stderr: $ERR"
}
jget() { # key path in $OUT, e.g. gpufile.cufile.tasks
  python3 -c 'import json,sys
d=json.loads(sys.argv[1])
for k in sys.argv[2].split("."):
    d=d[int(k)] if isinstance(d,list) else d[k]
print(d)' "$OUT" "$1" 2>/dev/null
}
one="$F1 --iters 1 --no-warmup --verify"

echo "== (a) libcufile as installed"
run a-auto GPUFILE_COMPAT_MODE=auto -- $one
[ "$RC" = 0 ] && [ "$(jget verified)" = True ] && pass "(a) auto: data verified" || fail "(a) auto read"
case "$(jget reason)" in
  *5027*) pass "(a) auto fell back naming 5027: $(jget reason)" ;;
  *) fail "(a) auto reason does not name 5027: $(jget reason)" ;;
esac
[ "$(jget path)" = posix ] && [ "$(jget gpufile.posix.tasks)" = 256 ] && pass "(a) auto: 256 posix tasks" || fail "(a) auto path/tasks"
run a-off GPUFILE_COMPAT_MODE=off -- $one
[ "$RC" != 0 ] && echo "$ERR" | grep -q "CU_FILE_HANDLE_NOT_REGISTERED (5027)" \
  && pass "(a) off fails with 5027" || fail "(a) off did not fail with 5027"

echo "== (b) compat_mode=off, CUFILE_EXPERIMENTAL_FS=1"
run b GPUFILE_COMPAT_MODE=off CUFILE_EXPERIMENTAL_FS=1 -- $one
[ "$RC" = 0 ] && [ "$(jget verified)" = True ] && pass "(b) data verified" || fail "(b) read"
[ "$(jget path)" = cufile ] && [ "$(jget gpufile.cufile.tasks)" = 256 ] \
  && pass "(b) 256 cuFile reads (gpufile layer)" || fail "(b) gpufile layer: path $(jget path), tasks $(jget gpufile.cufile.tasks)"
P=$(jget cufile.gpus.0.posix_reads); N=$(jget cufile.gpus.0.nvfs_reads)
echo "(b) cuFile layer: posix_reads=$P nvfs_reads=$N p2p_reads=$(jget cufile.gpus.0.p2p_reads) version=$(jget cufile.version) layout_verified=$(jget cufile.layout_verified)"
[ "$P" = 256 ] && [ "$N" = 0 ] && pass "(b) cuFile counts 256 posix, 0 nvfs" || fail "(b) cuFile per-GPU counts"

echo "== (c) CUFILE_FORCE_COMPAT_MODE=true"
run c GPUFILE_COMPAT_MODE=off CUFILE_EXPERIMENTAL_FS=1 CUFILE_FORCE_COMPAT_MODE=true -- $one
[ "$RC" = 0 ] && [ "$(jget verified)" = True ] && pass "(c) data verified" || fail "(c) read"
[ "$(jget gpufile.cufile.tasks)" = 256 ] && [ "$(jget cufile.gpus.0.posix_reads)" = 256 ] \
  && [ "$(jget cufile.gpus.0.nvfs_reads)" = 0 ] && pass "(c) 256 cuFile reads, all posix" || fail "(c) counts"

echo "== (d) compat_mode=on"
run d GPUFILE_COMPAT_MODE=on CUFILE_EXPERIMENTAL_FS=1 -- $one
[ "$RC" = 0 ] && [ "$(jget verified)" = True ] && pass "(d) data verified" || fail "(d) read"
[ "$(jget cufile.loaded)" = 0 ] && [ "$(jget gpufile.posix.tasks)" = 256 ] \
  && pass "(d) cuFile never loaded; 256 posix tasks" || fail "(d) cuFile was used"

echo "== (e) auto where cuFile registers the file but has no nvidia-fs"
run e GPUFILE_COMPAT_MODE=auto CUFILE_EXPERIMENTAL_FS=1 -- $one
echo "(e) path=$(jget path) reason: $(jget reason)"
if [ -e /proc/driver/nvidia-fs ]; then
  [ "$(jget path)" = cufile ] && pass "(e) nvidia-fs loaded: cufile" || fail "(e)"
else
  [ "$(jget path)" = posix ] && pass "(e) auto prefers posix without nvidia-fs" || fail "(e)"
fi

echo "== 1 GiB request in one task (GPUFILE_TASK_SIZE=1GiB)"
run one-task GPUFILE_COMPAT_MODE=off CUFILE_EXPERIMENTAL_FS=1 GPUFILE_TASK_SIZE=1GiB -- $one
[ "$(jget gpufile.cufile.tasks)" = 1 ] && pass "1 GiB task: 1 cuFile read" || fail "1 GiB task"

echo "== registered buffer"
run registered GPUFILE_COMPAT_MODE=off CUFILE_EXPERIMENTAL_FS=1 -- $one --register
[ "$RC" = 0 ] && [ "$(jget verified)" = True ] && pass "registered buffer: data verified" || fail "registered buffer"

if [ "$BENCH" = 1 ]; then
  echo "== benchmark: 4 GiB into GPU memory"
  make_file "$F4" 4
  SRC=${CUFILE_ENV_PATH_JSON:-/etc/cufile.json}
  [ -f "$SRC" ] || SRC=/usr/local/cuda/gds/cufile.json
  TUNED=$DATA/cufile-tuned.json
  if [ -f "$SRC" ]; then
    # More cuFile I/O threads and parallelism (cuFile 1.15 accepts at
    # most 8 for max_request_parallelism), smaller minimum split.
    sed -e 's/"max_io_threads"[[:space:]]*:[[:space:]]*[0-9]*/"max_io_threads" : 16/' \
        -e 's/"max_request_parallelism"[[:space:]]*:[[:space:]]*[0-9]*/"max_request_parallelism" : 8/' \
        -e 's/"min_io_threshold_size_kb"[[:space:]]*:[[:space:]]*[0-9]*/"min_io_threshold_size_kb" : 1024/' \
        -e 's/"parallel_io"[[:space:]]*:[[:space:]]*false/"parallel_io" : true/' \
        -e 's/"max_io_queue_depth"[[:space:]]*:[[:space:]]*[0-9]*/"max_io_queue_depth" : 256/' \
        "$SRC" > "$TUNED"
    grep -E '"(max_io_threads|max_request_parallelism|min_io_threshold_size_kb|parallel_io|max_io_queue_depth)"' "$TUNED"
  else
    echo "no cufile.json found: tuned runs use the defaults"; TUNED=
  fi
  for cache in warm cold; do
    flag=; [ $cache = cold ] && flag=--cold
    # gpufile reads cold ranges with O_DIRECT, which leaves the page cache
    # as it was: warm the file explicitly.
    [ $cache = warm ] && cat "$F4" >/dev/null
    run "posix-$cache" GPUFILE_COMPAT_MODE=on -- "$F4" --iters 3 $flag
    run "cufile-default-$cache" GPUFILE_COMPAT_MODE=off CUFILE_EXPERIMENTAL_FS=1 -- "$F4" --iters 3 $flag
    if [ -n "$TUNED" ]; then
      run "cufile-tuned-$cache" GPUFILE_COMPAT_MODE=off CUFILE_EXPERIMENTAL_FS=1 \
        CUFILE_ENV_PATH_JSON="$TUNED" -- "$F4" --iters 3 $flag
      run "cufile-tuned-16MiB-tasks-$cache" GPUFILE_COMPAT_MODE=off CUFILE_EXPERIMENTAL_FS=1 \
        CUFILE_ENV_PATH_JSON="$TUNED" GPUFILE_TASK_SIZE=16MiB -- "$F4" --iters 3 $flag
    fi
  done
fi

echo "== done: $([ $FAILED = 0 ] && echo 'all checks passed' || echo 'SOME CHECKS FAILED')"
exit $FAILED
