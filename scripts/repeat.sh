#!/usr/bin/env bash
# Runs the test command, or some of its stages, again and again in a clone
# of this repository at a given commit, stopping at the first failure:
# the check that a test is not flaky (issue 32 asks for the whole command
# 10 times and the ASan/TSan stages 20 times in a row beside a CPU hog).
#
#   scripts/repeat.sh full DIR COMMIT N     N runs of `bash scripts/test.sh`
#   scripts/repeat.sh STAGES DIR COMMIT N   N runs of it with TEST_STAGES=STAGES
#                                           (e.g. asan,tsan; see scripts/test.sh)
#
# HOG=K (default 0) keeps K busy processes running beside the runs (the
# "CPU hog" of issue 32: K=2 on the 2-core machine); they are stopped when
# this script ends, however it ends.
#
# The runs are CI's: CI=true (a test whose tool is missing fails, not
# skips) and .deps (s3rver, installed once) copied into the clone, as
# .ci/run does.
#
# DIR is removed and made again (a fresh clone). One line per run goes to
# DIR.runs ("run I TIME rc=RC SECONDS summary"); the log of a failed run
# is kept as DIR.runI.log. The first run builds; later runs rebuild nothing.
set -uo pipefail
mode=${1:?full or a list of stages} dir=${2:?folder} commit=${3:?commit} n=${4:?runs}
hog=${HOG:-0}
case $hog in '' | *[!0-9]*)
	echo "repeat: HOG=\"$hog\": not a count of busy processes" >&2
	exit 2
	;;
esac
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$dir"
git clone -q "$src" "$dir" && cd "$dir" && git checkout -q "$commit" || exit 1
[ -d "$src/.deps" ] && cp -a "$src/.deps" "$dir/"
export CI=true
log=$dir.runs
: >"$log"

hogs=()
stop_hogs() { [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null; }
trap stop_hogs EXIT
for _ in $(seq "$hog"); do
	(while :; do :; done) &
	hogs+=($!)
done
echo "commit $(git rev-parse --short HEAD), stages $mode, $hog busy processes beside, $(nproc) CPUs" >>"$log"

stages=
[ "$mode" != full ] && stages=$mode
for i in $(seq "$n"); do
	t0=$(date +%s)
	if [ -n "$stages" ]; then
		TEST_STAGES=$stages bash scripts/test.sh >"$dir.run$i.log" 2>&1
	else
		bash scripts/test.sh >"$dir.run$i.log" 2>&1
	fi
	rc=$?
	summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$dir.run$i.log" | tail -1)
	echo "run $i $(date -u +%T) rc=$rc $(($(date +%s) - t0))s $summary" >>"$log"
	[ "$rc" -ne 0 ] && exit 1
	rm -f "$dir.run$i.log"
done
echo "all $n runs passed" >>"$log"
