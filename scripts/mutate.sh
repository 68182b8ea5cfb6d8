#!/usr/bin/env bash
# The mutation check (issue 39): applies each one-line mutation of a list
# to a scratch copy of the library, rebuilds, runs the tests most likely to
# catch it, and reports the mutations no test caught. Slow (one rebuild and
# one test run per mutation), so not part of .ci/run: run it before calling
# a rule of the man pages tested, and after moving code the list names.
#
#   scripts/mutate.sh [-j N] [-t SECONDS] [-k DIR] [-f LIST] [-a] [-c]
#                     [-o TABLE] [NAME-REGEX...]
#
#   NAME-REGEX  only the mutations whose name matches one of these
#               (Python regular expressions); default: all of them
#   -j N        build jobs and tests run at once (default 2)
#   -t SECONDS  the tests of one mutation may run this long; past it the
#               mutation counts as caught, reported as "hang" (default 300)
#   -k DIR      keep the scratch copy, its build and the logs in DIR (and
#               reuse them on the next run: only what changed is rebuilt);
#               default: a temporary folder, removed at exit
#   -f LIST     the mutation list (default scripts/mutations.txt)
#   -a          run the whole ctest suite for every mutation, not the
#               tests the list names (slower, and the honest measure)
#   -c          only check that every mutation still applies (its text
#               found exactly once); nothing is built
#   -o TABLE    also write the table to TABLE
#
# The list (scripts/mutations.txt) holds blocks separated by blank lines;
# '#' starts a comment line. Each block:
#
#   name:   a short unique name
#   rule:   the rule of the man pages it breaks
#   file:   the source file, from the repository root
#   from:   text of the file, found exactly once as a fixed string (not a
#           regex); \n and \t stand for a newline and a tab, so a fragment
#           can take a neighbouring line to be unique
#   to:     what replaces it
#   tests:  (optional) a ctest -R regex of the tests likely to catch it;
#           default: every ctest test
#   pytest: (optional) python/tests files run as well (space-separated)
#
# A mutation whose text is not found exactly once, or that does not build,
# is an error of the list: it is reported ("no match", "build failed") and
# the script exits non-zero, as it does when any mutation is NOT CAUGHT.
# Before the mutations, the same tests run on the unmutated copy; any that
# fails there stops the check (it would "catch" every mutation).
#
# The checkout itself is never changed: the copy is made from the working
# tree (tracked and untracked, not ignored files), so uncommitted changes
# are checked too.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD

jobs=2 limit=300 keep="" list=scripts/mutations.txt all_tests=0 check_only=0
table_out=""
usage() { sed -n "8,25p" "$0" | sed "s/^# \{0,1\}//" >&2; exit "${1:-2}"; }
while getopts "j:t:k:f:o:ach" opt; do
	case $opt in
	j) jobs=$OPTARG ;;
	t) limit=$OPTARG ;;
	k) keep=$OPTARG ;;
	f) list=$OPTARG ;;
	o) table_out=$OPTARG ;;
	a) all_tests=1 ;;
	c) check_only=1 ;;
	h) usage 0 ;;
	*) usage ;;
	esac
done
shift $((OPTIND - 1))
[ -f "$list" ] || { echo "mutate: no mutation list $list" >&2; exit 2; }
list=$(realpath "$list")
py=${PYTHON:-python3}
if ! "$py" -c 'import pytest' 2>/dev/null && [ -x /usr/bin/python3 ]; then
	py=/usr/bin/python3
fi

# The list, parsed and checked against a tree, by Python (fixed-string
# matching and the escapes are easier there than in sed).
#   mutlist parse TREE LIST REGEX...  -> one line per selected mutation:
#       NAME FILE TESTS PYTEST RULE STATUS, split by \x1f (a tab would
#       let bash merge empty fields)
#       (STATUS: ok, or why it does not apply)
#   mutlist apply TREE LIST NAME      -> mutates TREE's file in place
mutlist() {
	python3 - "$@" <<'EOF'
import re, sys

def blocks(path):
    out, cur = [], {}
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur:
                out.append(cur)
            cur = {}
            continue
        key, sep, value = line.partition(":")
        if not sep or key.strip() not in (
                "name", "rule", "file", "from", "to", "tests", "pytest"):
            sys.exit(f"{path}:{n}: not 'key: value' with a known key: {line}")
        cur.setdefault("line", n)
        cur[key.strip()] = value.strip()
    if cur:
        out.append(cur)
    return out

def unescape(s):
    return s.replace("\\n", "\n").replace("\\t", "\t")

def status(tree, m):
    for k in ("name", "file", "from", "to"):
        if k not in m:
            return f"the block at line {m['line']} has no {k}:"
    try:
        text = open(f"{tree}/{m['file']}", encoding="utf-8").read()
    except OSError as e:
        return f"no match: {m['file']}: {e.strerror}"
    n = text.count(unescape(m["from"]))
    if n != 1:
        return f"no match: 'from' found {n} times in {m['file']}"
    return "ok"

cmd, tree, path = sys.argv[1:4]
ms = blocks(path)
names = [m.get("name") for m in ms]
dups = {n for n in names if names.count(n) > 1}
if dups:
    sys.exit(f"{path}: names given twice: {' '.join(sorted(dups))}")
if cmd == "parse":
    pats = sys.argv[4:]
    for m in ms:
        if pats and not any(re.search(p, m.get("name", "")) for p in pats):
            continue
        print("\x1f".join([m.get("name", "?"), m.get("file", "?"),
                         m.get("tests", ""), m.get("pytest", ""),
                         m.get("rule", ""), status(tree, m)]))
elif cmd == "apply":
    m = next(m for m in ms if m.get("name") == sys.argv[4])
    st = status(tree, m)
    if st != "ok":
        sys.exit(st)
    f = f"{tree}/{m['file']}"
    text = open(f, encoding="utf-8").read()
    open(f, "w", encoding="utf-8").write(
        text.replace(unescape(m["from"]), unescape(m["to"]), 1))
EOF
}

mapfile -t muts < <(mutlist parse "$root" "$list" "$@") || exit 2
[ "${#muts[@]}" -gt 0 ] || { echo "mutate: no mutation selected" >&2; exit 2; }

bad=0
for m in "${muts[@]}"; do
	IFS=$'\x1f' read -r name _ _ _ _ st <<<"$m"
	if [ "$st" != ok ]; then
		echo "mutate: $name: $st" >&2
		bad=1
	fi
done
if [ "$check_only" = 1 ]; then
	[ "$bad" = 0 ] && echo "mutate: all ${#muts[@]} mutations apply"
	exit "$bad"
fi

# ---- the scratch copy ----
if [ -n "$keep" ]; then
	mkdir -p "$keep" || exit 2
	work=$(realpath "$keep")
else
	work=$(mktemp -d "${TMPDIR:-/tmp}/gpufile-mutate.XXXXXX") || exit 2
	trap 'rm -rf "$work"' EXIT
fi
# Interrupted: the builds and tests under way end too (each long command
# runs in the background and is waited for, so the trap runs at once).
kill_tree() {
	local c
	for c in $(pgrep -P "$1"); do kill_tree "$c"; done
	kill "$1" 2>/dev/null
}
interrupted() {
	trap - INT TERM
	local c
	for c in $(pgrep -P $$); do kill_tree "$c"; done
	echo "mutate: interrupted" >&2
	exit 130
}
trap interrupted INT TERM
waited() { "$@" & wait $!; }
tree=$work/src build=$work/build logs=$work/logs
mkdir -p "$tree" "$logs"

# Copies the working tree's files into the scratch tree, only those that
# differ (so a kept build stays warm, and a copy left mutated by an
# interrupted run is made whole).
sync_tree() {
	python3 - "$root" "$tree" <<'EOF2'
import filecmp, os, shutil, subprocess, sys
root, tree = sys.argv[1:3]
names = subprocess.run(["git", "ls-files", "-z", "-c", "-o", "--exclude-standard"],
                       cwd=root, check=True, capture_output=True).stdout
for name in filter(None, names.decode().split("\0")):
    src, dst = os.path.join(root, name), os.path.join(tree, name)
    if not os.path.isfile(src) or os.path.islink(src):
        continue
    if os.path.isfile(dst) and filecmp.cmp(src, dst, shallow=False):
        continue
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy2(src, dst)
    os.utime(dst)  # newer than any object built from an older copy
EOF2
}
sync_tree

echo "mutate: scratch copy in $work (build $build, logs $logs)"
if ! cmake -S "$tree" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DGPUFILE_BENCH=OFF >"$logs/configure.log" 2>&1; then
	tail -30 "$logs/configure.log"
	echo "mutate: configure failed ($logs/configure.log)" >&2
	exit 2
fi

# The build targets of a set of ctest tests: each test's program (a test
# name less its _one_queue/_register suffix), plus the CLI that tests run;
# "all" when a test is not a program of its own (fuzz, abi, man pages).
mapfile -t known_targets < <(cmake --build "$build" --target help 2>/dev/null |
	sed -n 's/^\.\.\. \([^ ]*\).*/\1/p')
targets_for() { # CTEST-REGEX PYTEST
	local t names out=(gpufile_cli)
	mapfile -t names < <(cd "$build" && ctest -N ${1:+-R "$1"} |
		sed -n 's/^ *Test *#[0-9]*: //p')
	[ -n "$2" ] && out+=(gpufile)
	for t in "${names[@]}"; do
		t=${t%_one_queue}
		t=${t%_register}
		if printf '%s\n' "${known_targets[@]}" | grep -x -- "$t" >/dev/null; then
			out+=("$t")
		else
			echo all
			return
		fi
	done
	printf '%s\n' "${out[@]}" | sort -u
}

# run_tests CTEST-REGEX PYTEST LOG [LIMIT]: runs them under the time limit
# (default -t's). Prints the failed tests' names (one a line), "hang" on a
# time-out.
run_tests() {
	local regex=$1 pyfiles=$2 log=$3 limit=${4:-$limit} rc
	: >"$log"
	waited timeout -k 10 "$limit" bash -c '
		cd "$1" && ctest --output-on-failure -j "$2" ${3:+-R "$3"}' \
		_ "$build" "$jobs" "$regex" >>"$log" 2>&1
	rc=$?
	if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		echo hang
		return
	fi
	grep -q 'No tests were found' "$log" && echo "no-tests"
	sed -nE '/The following tests FAILED:/,$ s/^[[:space:]]*[0-9]+ - ([^ ]+) \(.*/\1/p' "$log"
	if [ "$rc" != 0 ] && ! grep -q 'tests FAILED' "$log"; then
		echo "ctest(rc=$rc)"
	fi
	[ -n "$pyfiles" ] || return
	(cd "$tree" && GPUFILE_LIBRARY="$build/libgpufile.so" \
		LD_LIBRARY_PATH="$build${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		PYTHONPATH="$tree/python${PYTHONPATH:+:$PYTHONPATH}" \
		waited timeout -k 10 "$limit" "$py" -m pytest -q -p no:cacheprovider \
		$pyfiles) >>"$log" 2>&1
	rc=$?
	if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		echo hang
		return
	fi
	sed -nE 's/^FAILED ([^ ]+).*/\1/p; s/^ERROR ([^ ]+).*/\1/p' "$log"
	if [ "$rc" != 0 ] && ! grep -qE '^(FAILED|ERROR) ' "$log"; then
		echo "pytest(rc=$rc)"
	fi
}

# build_for TARGETS...: builds them (all: everything).
build_for() {
	if [ "$1" = all ]; then
		waited cmake --build "$build" -j "$jobs"
	else
		waited cmake --build "$build" -j "$jobs" --target "$@"
	fi
}

# Everything once, unmutated, then the union of the tests the selected
# mutations run: none may fail there.
union="" union_py="" whole=0 sets=()
for m in "${muts[@]}"; do
	IFS=$'\x1f' read -r name file tests pyt rule st <<<"$m"
	[ "$st" = ok ] || continue
	if [ "$all_tests" = 1 ] || [ -z "$tests" ]; then
		whole=1
	else
		sets+=("$tests")
	fi
	for f in $pyt; do
		case " $union_py " in *" $f "*) ;; *) union_py="$union_py $f" ;; esac
	done
done
# The names of those tests, as one regex (ctest's regex engine takes few
# parentheses: the mutations' own regexes joined would overflow it).
if [ "$whole" = 0 ]; then
	union=$(for r in "${sets[@]}"; do
		(cd "$build" && ctest -N -R "$r") | sed -n 's/^ *Test *#[0-9]*: //p'
	done | sort -u | paste -sd'|')
	union="^($union)\$"
fi
# The first build: the programs of the tests to run, and the fake drivers
# they load (the fuzzers, which compile the whole library again with
# clang, only when every test runs).
mapfile -t first < <({
	targets_for "$union" "$union_py"
	printf '%s\n' "${known_targets[@]}" | grep -E '^fake_'
} | sort -u)
if [ "$whole" = 1 ] || printf '%s\n' "${first[@]}" | grep -x all >/dev/null; then
	first=(all)
fi
echo "mutate: building the unmutated copy"
if ! build_for "${first[@]}" >"$logs/build.log" 2>&1; then
	tail -30 "$logs/build.log"
	echo "mutate: the unmutated copy does not build ($logs/build.log)" >&2
	exit 2
fi
echo "mutate: the tests on the unmutated copy (${union:-all ctest tests}${union_py:+;$union_py})"
failed=$(run_tests "$union" "$union_py" "$logs/baseline.log" $((limit * 4)))
if [ -n "$failed" ]; then
	echo "mutate: these fail without any mutation; fix them first" \
		"($logs/baseline.log):" $failed >&2
	exit 2
fi

# ---- the mutations ----
rows=() not_caught=0 errors=0
row() { rows+=("$(printf '%-28s %-12s %s' "$1" "$2" "$3")"); echo "${rows[-1]}"; }
echo
printf '%-28s %-12s %s\n' MUTATION RESULT "CAUGHT BY / WHY"
for m in "${muts[@]}"; do
	IFS=$'\x1f' read -r name file tests pyt rule st <<<"$m"
	if [ "$st" != ok ]; then
		row "$name" ERROR "$st"
		errors=$((errors + 1))
		continue
	fi
	[ "$all_tests" = 1 ] && tests=
	log=$logs/$name.log
	cp "$root/$file" "$tree/$file"
	if ! mutlist apply "$tree" "$list" "$name" 2>"$log"; then
		row "$name" ERROR "$(tail -1 "$log")"
		errors=$((errors + 1))
		continue
	fi
	if [ -n "$tests" ] && [ "$(cd "$build" && ctest -N -R "$tests" |
		grep -c '^ *Test *#')" = 0 ]; then
		row "$name" ERROR "tests: $tests matches no ctest test"
		errors=$((errors + 1))
		cp "$root/$file" "$tree/$file"
		continue
	fi
	mapfile -t targets < <(targets_for "$tests" "$pyt")
	if ! build_for "${targets[@]}" >"$log" 2>&1; then
		row "$name" ERROR "build failed ($log)"
		errors=$((errors + 1))
	else
		start=$SECONDS
		caught=$(run_tests "$tests" "$pyt" "$log.tests" | sort -u |
			tr '\n' ' ')
		caught=${caught% }
		took="$((SECONDS - start))s"
		if [[ " $caught " == *" hang "* ]]; then
			row "$name" "hang" "tests ran past ${limit}s (counted as caught)"
		elif [ -n "$caught" ]; then
			row "$name" caught "$caught ($took)"
		else
			row "$name" "NOT CAUGHT" "${rule} [${tests:-all}${pyt:+; $pyt}] ($took)"
			not_caught=$((not_caught + 1))
		fi
	fi
	# Restored now; rebuilt by the next mutation's build.
	cp "$root/$file" "$tree/$file"
	touch "$tree/$file"
done

echo
summary="mutate: ${#muts[@]} mutations: $((${#muts[@]} - not_caught - errors)) caught, $not_caught not caught, $errors errors"
echo "$summary"
if [ -n "$table_out" ]; then
	{
		printf '%-28s %-12s %s\n' MUTATION RESULT "CAUGHT BY / WHY"
		printf '%s\n' "${rows[@]}"
		echo "$summary"
	} >"$table_out"
fi
[ "$not_caught" = 0 ] && [ "$errors" = 0 ]
