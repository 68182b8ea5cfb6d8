#!/usr/bin/env bash
# The first read in a fresh process (issue 14, goal 1): for a warm 4 GiB,
# 64 MiB and 1 MiB file, one new process per measurement reads the whole
# file into GPU memory at the defaults (compat_mode=auto) and with
# GPUFILE_COMPAT_MODE=on, in interleaved rounds; prints the medians and
# their ratio (goal: auto <= 1.15x on, where cuFile cannot accelerate).
#
#   bench/first_read.sh [BUILD_DIR] [DATA_DIR] [ROUNDS]
#
# BUILD_DIR holds bench/first_read (default build-gpu), DATA_DIR the files
# (default /root/gpufile-bench), ROUNDS defaults to 7. FILES picks the
# files (default "4g 64m 1m").
set -euo pipefail
build=${1:-build-gpu}
data=${2:-/root/gpufile-bench}
rounds=${3:-7}
read -ra files <<<"${FILES:-4g 64m 1m}"
prog=$build/bench/first_read
[ -x "$prog" ] || { echo "first_read: build $prog first" >&2; exit 1; }
mkdir -p "$data"
if [ ${#files[@]} = 0 ]; then
	echo "first_read: FILES names no file (4g, 64m, 1m)" >&2
	exit 2
fi
declare -A seen
for f in "${files[@]}"; do
	case $f in 4g | 64m | 1m) ;; *)
		echo "first_read: FILES: no file \"$f\" (4g, 64m, 1m)" >&2
		exit 2
		;;
	esac
	[ -z "${seen[$f]:-}" ] || {
		echo "first_read: FILES names \"$f\" twice" >&2
		exit 2
	}
	seen[$f]=1
done

declare -A size=([4g]=4096 [64m]=64 [1m]=1)
for f in "${files[@]}"; do
	file=$data/first_read_$f.bin
	want=$(( ${size[$f]} * 1048576 ))
	if [ ! -f "$file" ] || [ "$(stat -c %s "$file")" != "$want" ]; then
		head -c "$want" /dev/urandom >"$file"
	fi
	cat "$file" >/dev/null # warm: the page cache holds it
done

run() { # FILE MODE -> "seconds path"
	if [ "$2" = on ]; then
		GPUFILE_COMPAT_MODE=on "$prog" "$1"
	else
		env -u GPUFILE_COMPAT_MODE -u KVIKIO_COMPAT_MODE "$prog" "$1"
	fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$prog" "$data/first_read_${files[-1]}.bin" >/dev/null # load the driver once
for r in $(seq "$rounds"); do
	for f in "${files[@]}"; do
		for mode in auto on; do
			# Alternate the order, so neither mode always goes first.
			[ $((r % 2)) = 0 ] && mode=$([ $mode = auto ] && echo on || echo auto)
			run "$data/first_read_$f.bin" $mode >>"$tmp/$f.$mode"
		done
	done
done

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
printf '%-6s %-14s %-14s %-8s %-8s %s\n' file "auto s (path)" "on s (path)" ratio "auto GB/s" "on GB/s"
for f in "${files[@]}"; do
	a=$(cut -d' ' -f1 "$tmp/$f.auto" | median)
	o=$(cut -d' ' -f1 "$tmp/$f.on" | median)
	pa=$(cut -d' ' -f2 "$tmp/$f.auto" | sort | uniq -c | awk '{printf "%s%s", sep, $2; sep="/"}')
	po=$(cut -d' ' -f2 "$tmp/$f.on" | sort | uniq -c | awk '{printf "%s%s", sep, $2; sep="/"}')
	b=$(( ${size[$f]} * 1048576 ))
	awk -v f=$f -v a="$a" -v o="$o" -v pa="$pa" -v po="$po" -v b=$b 'BEGIN {
		printf "%-6s %-14s %-14s %-8.3f %-8.2f %.2f\n", f,
		    sprintf("%.4f (%s)", a, pa), sprintf("%.4f (%s)", o, po),
		    a / o, b / a / 1e9, b / o / 1e9 }'
done
echo "($rounds interleaved rounds, medians; ratio = auto / on; goal <= 1.15 where cuFile cannot accelerate)"
