#!/usr/bin/env bash
# Runs the test command, or only its ASan stage, again and again in a clone
# of this repository at a given commit, stopping at the first failure:
# the check that a test is not flaky (issues 10 and 11 ask for 20 whole
# runs and 50 ASan-stage runs in a row).
#
#   scripts/repeat.sh full DIR COMMIT N   N runs of `bash scripts/test.sh`
#   scripts/repeat.sh asan DIR COMMIT N   build-asan as test.sh makes it,
#                                         then N runs of its ctest with
#                                         test.sh's environment
#
# DIR is removed and made again (a fresh clone). One line per run goes to
# DIR.runs ("run I TIME rc=RC SECONDS summary"); the log of a failed run
# is kept as DIR.runI.log.
set -uo pipefail
mode=${1:?full or asan} dir=${2:?folder} commit=${3:?commit} n=${4:?runs}
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$dir"
git clone -q "$src" "$dir" && cd "$dir" && git checkout -q "$commit" || exit 1
log=$dir.runs
: >"$log"
if [ "$mode" = asan ]; then
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug \
		"-DCMAKE_C_FLAGS_DEBUG=-g -O1" -DGPUFILE_BENCH=OFF \
		-DGPUFILE_SANITIZE=address,undefined >"$dir.build.log" 2>&1 &&
		cmake --build build-asan -j "$(nproc)" >>"$dir.build.log" 2>&1 ||
		{ echo "build failed: $dir.build.log" >>"$log"; exit 1; }
	export ASAN_OPTIONS=abort_on_error=0:detect_leaks=1
	export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
	export CTEST_PARALLEL_LEVEL=${CTEST_PARALLEL_LEVEL:-$(($(nproc) * 2))}
fi
for i in $(seq "$n"); do
	t0=$(date +%s)
	if [ "$mode" = asan ]; then
		(cd build-asan && ctest --output-on-failure) >"$dir.run$i.log" 2>&1
	else
		bash scripts/test.sh >"$dir.run$i.log" 2>&1
	fi
	rc=$?
	summary=$(grep -E 'tests passed|tests failed|^[0-9]+ passed, [0-9]+ failed' "$dir.run$i.log" | tail -1)
	echo "run $i $(date -u +%T) rc=$rc $(($(date +%s) - t0))s $summary" >>"$log"
	[ "$rc" -ne 0 ] && exit 1
	rm -f "$dir.run$i.log"
done
echo "all $n runs passed" >>"$log"
