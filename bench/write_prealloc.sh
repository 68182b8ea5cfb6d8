#!/usr/bin/env bash
# Does fio's buffered-write lead come from preallocation? fio lays a new
# file out with fallocate (fallocate=native by default) before writing it;
# gpufile and a plain pwrite loop do not. 4 GiB buffered writes into a new
# file, ROUNDS interleaved rounds: fio psync 1M with fallocate=none, native
# and keep, and a Python pwrite loop of 1 MiB blocks from a 4 GiB NumPy
# buffer without preallocation, after posix_fallocate, and after
# fallocate(FALLOC_FL_KEEP_SIZE).
#   bash bench/write_prealloc.sh DIR [ROUNDS]
set -uo pipefail
dir=${1:?folder} rounds=${2:-3}
mkdir -p "$dir"
f=$dir/prealloc.bin
size=$((4 << 30))
fio_run() {
	rm -f "$f"; sync
	fio --name=w --filename="$f" --rw=write --ioengine=psync --bs=1M --size=$size \
		--direct=0 --fallocate="$1" --output-format=json |
		python3 -c 'import json, sys
print("%.3f" % (json.load(sys.stdin)["jobs"][0]["write"]["bw_bytes"] / 1e9), end="")'
}
py_run() {
	rm -f "$f"; sync
	python3 - "$f" "$1" "$size" <<'PY'
import ctypes, os, sys, time
import numpy as np
path, mode, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
buf = np.empty(size, np.uint8)
buf[:] = 7
mv = memoryview(buf)
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
t0 = time.perf_counter()
if mode == "posix":
    os.posix_fallocate(fd, 0, size)
elif mode == "keep":
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.fallocate(fd, 1, ctypes.c_long(0), ctypes.c_long(size)) != 0:
        sys.exit("fallocate KEEP_SIZE: errno %d" % ctypes.get_errno())
step = 1 << 20
for off in range(0, size, step):
    os.pwrite(fd, mv[off:off + step], off)
t = time.perf_counter() - t0
os.close(fd)
print("%.3f" % (size / t / 1e9), end="")
PY
}
names="fio:none fio:native fio:keep py:none py:posix py:keep"
declare -A all
for r in $(seq "$rounds"); do
	line="round $r:"
	for n in $names; do
		case $n in fio:*) v=$(fio_run "${n#fio:}") ;; py:*) v=$(py_run "${n#py:}") ;; esac
		all[$n]="${all[$n]:-} $v"
		line="$line $n $v"
	done
	echo "$line"
done
for n in $names; do
	echo "$n median $(echo ${all[$n]} | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') GB/s"
done
rm -f "$f"
