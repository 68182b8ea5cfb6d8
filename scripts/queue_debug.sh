#!/usr/bin/env bash
# On the GPU machine: which stream-ordered Python tests hang with
# CUDA_DEVICE_MAX_CONNECTIONS=1, and where (C stacks by gdb where it is
# installed, else the kernel's view of each thread). Output under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/gpufile-out}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
B=build-gpu
export PKG_CONFIG_PATH=$root/.carry/cjson/lib/pkgconfig LD_LIBRARY_PATH=$root/.carry/cjson/lib
extra=()
[ -d .carry/liburing ] && extra+=(-DGPUFILE_LIBURING_DIR="$root/.carry/liburing")
[ -d .carry/curl ] && extra+=(-DGPUFILE_CURL_DIR="$root/.carry/curl")
[ -d .carry/openssl ] && extra+=(-DGPUFILE_OPENSSL_DIR="$root/.carry/openssl")
cmake -S . -B $B -DCMAKE_BUILD_TYPE=RelWithDebInfo "${extra[@]}" >"$OUT/cmake.log" 2>&1 &&
	make -C $B -j16 gpufile gpufile_cli >"$OUT/make.log" 2>&1 || { tail -30 "$OUT/make.log"; exit 1; }
export GPUFILE_LIBRARY=$root/$B/libgpufile.so GPUFILE_CLI=$root/$B/gpufile PYTHONPATH=$root/python
command -v gdb || echo "no gdb"
gcc -shared -fPIC -O1 -o $OUT/bt_shim.so scripts/bt_shim.c || exit 1
cp $B/libgpufile.so $OUT/libgpufile.so
for t in ${TESTS:-test_read_async_cupy_orders_both_ways test_read_async_past_eof_and_error test_write_async_writes_what_the_stream_produced test_read_async_torch_stream}; do
	for conn in ${CONNS:-1 8}; do
		echo "=== $t CUDA_DEVICE_MAX_CONNECTIONS=$conn"
		BT_SHIM_OUT=$OUT/$t.$conn.bt LD_PRELOAD=$OUT/bt_shim.so \
		CUDA_DEVICE_MAX_CONNECTIONS=$conn CUDA_MODULE_LOADING=${LOADING:-LAZY} python3 -m pytest -q -x -p no:cacheprovider \
			python/tests/test_stream.py -k "$t" >"$OUT/$t.$conn.log" 2>&1 &
		pid=$!
		for i in $(seq 1 40); do
			sleep 0.5
			kill -0 $pid 2>/dev/null || break
		done
		if kill -0 $pid 2>/dev/null; then
			echo "HUNG after 20 s"
			for task in /proc/$pid/task/*; do
				python3 -c "import ctypes,sys; ctypes.CDLL(None).syscall(234, int(sys.argv[1]), int(sys.argv[2]), 12)" $pid ${task##*/}
				sleep 0.05
			done
			sleep 1
			grep -c "^--- thread" $OUT/$t.$conn.bt
			kill -9 $pid 2>/dev/null
			wait $pid 2>/dev/null
		else
			wait $pid; echo "rc=$?"; tail -1 "$OUT/$t.$conn.log"
		fi
	done
done
