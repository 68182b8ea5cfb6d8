#!/usr/bin/env bash
# What the GPU machine runs, in stages that each fit one device call.
# Results go to $OUT (the device tool brings them back).
#
#   scripts/gpu_run.sh quick   library + a 1 GiB device benchmark
#   scripts/gpu_run.sh test    build all, ctest (GPU tests included), the
#                              Python tests and tutorial, the cuFile scenarios
#   scripts/gpu_run.sh soak    the soak test for minutes, the tutorial read
#                              observed from a second process, cuFile scenarios
#   scripts/gpu_run.sh st      safetensors: its C and Python tests (against
#                              safetensors.torch) and bench/st_bench.py;
#                              on nvidia-h200-x2 also the two-GPU runs
#   scripts/gpu_run.sh slice   safe_open(...).get_slice: the safetensors
#                              Python tests (against safetensors' own
#                              get_slice), bench/st_slice_bench.py and
#                              bench/gather_bench
#   scripts/gpu_run.sh x2      on two GPUs: issue 14 goal 5
#                              (bench/two_gpus.py), issue 16's two shards,
#                              the two-GPU tests
#   scripts/gpu_run.sh bench   the device benchmark (4 GiB, warm, cold, the
#                              settings sweep), fio references, host-read
#                              benchmark, cuFile benchmark, binding overhead
#   scripts/gpu_run.sh issue14 issue 14 goals 1-4: the first read in a
#                              fresh process against compat_mode=on; on
#                              one warm/cold 4 GiB file host reads
#                              against hand-written parallel pread, the
#                              H2D ceiling under page-cache traffic and
#                              the settings sweep, cold reads against fio
#                              (~7 minutes)
#   scripts/gpu_run.sh session5 every test on the GPU after the map copy
#                              of warm host reads and the remote decision;
#                              host reads at defaults and with
#                              host_map_copy=off against pread and the map
#                              references; the warm GPU read's ceilings
#   scripts/gpu_run.sh session6 test_gpu_contexts (several contexts in
#                              one process, one destroyed, the primary
#                              reset) on its own, every test, then what
#                              a context check costs and the warm 4 GiB
#                              read against its ceilings
#   scripts/gpu_run.sh stage   stream-ordered reads and writes of device
#                              memory staged on the stream:
#                              test_gpu_stream and test_stream_stage
#                              first, every test, then read_async against
#                              pread on the warm 4 GiB file, and
#                              write_async against pwrite
#                              (gpu_bench --stream), and small device
#                              preads split or not (--small)
#   scripts/gpu_run.sh pool    pooled copies of the warm staged read:
#                              test_staging_fake and the GPU tests first,
#                              every test, then the warm 4 GiB read pooled
#                              and one copy a call, interleaved, against
#                              the pinned copy ceiling (gpu_bench
#                              --pool-ab), and the copy calls alone
#                              (--batch-copies)
#   scripts/gpu_run.sh firstuse what a fresh process's first device read
#                              pays: bench/first_use (pinned buffers,
#                              streams, events, alone) and first_read
#                              with and without gpufile_warmup() first
#   scripts/gpu_run.sh harden  every test (the GPU ones' lines shown),
#                              then the warm 4 GiB read against the
#                              pinned copy (gpu_bench --reps 5)
#   scripts/gpu_run.sh repeat  N (10) runs of each test in TESTS (the
#                              staged reads' tests, test_map_copy,
#                              test_gpu_contexts), failures counted
#   scripts/gpu_run.sh contexts test_gpu_contexts alone, after printing
#                              what the driver does with ended contexts
#   scripts/gpu_run.sh gpu_bench  bench/gpu_bench on the 4 GiB file with
#                              the options in $ARGS (e.g. --shapes,
#                              --register-chunks, --cells)
#   scripts/gpu_run.sh limits  issue 14 goals 2 and 3, what limits them:
#                              the CPU and its caches, host reads against
#                              pread and copies from a map (memcpy and
#                              streaming stores), the staged path's copy
#                              pattern alone against one cuMemcpy, and
#                              gpufile at larger buffers and tasks
#   scripts/gpu_run.sh write   issue 33 item 2: test_write_pipeline, then
#                              bench/write_bench.sh (4 GiB host -> file,
#                              buffered and O_DIRECT, against the best
#                              fio configuration, and GPU -> file against
#                              host -> file, 5 interleaved rounds) and
#                              bench/st_save_bench.py (save_file of a
#                              4 GiB checkpoint from GPU tensors and from
#                              host tensors against a raw gpufile write
#                              and safetensors.torch.save_file)
#                              (~15 minutes: two device calls, WHAT=files
#                              then WHAT=save)
#
#   scripts/gpu_run.sh owed    the runs owed since the GPU machine was
#                              last lent, in stages of one device call
#                              each: STAGE=tests (every test, the GPU
#                              ones' lines shown; host_map_copy=auto on
#                              this CPU; gpufile bench --device 0
#                              --verify, reads, writes, batches), STAGE=
#                              figures (bench_vs_fio.sh -d 0, 4 GiB from
#                              nginx into GPU and host memory, issue
#                              36's remote_must_show.sh, stats
#                              --watch and the progress line of device
#                              reads, the Zarr benchmark into CuPy when
#                              zarr is there), STAGE=again (the remote
#                              figures after the engine's lanes, the
#                              tests of what changed, bench_vs_fio),
#                              STAGE=final (every test, small device
#                              reads, the remote must-show, writes),
#                              STAGE=zarr (the Zarr GPU test and
#                              benchmark with zarr carried, the Zarr and
#                              cat_ranges figures on 16 CPUs, small
#                              device reads, every test), STAGE=zarr2
#                              (the Zarr GPU benchmark and where its
#                              time goes), STAGE=last (the same, the
#                              host figures, bench/write_source),
#                              STAGE=last2 (the Zarr GPU test and
#                              benchmark, ctest), STAGE=source (what
#                              a buffered write's source costs, the
#                              host read goal), STAGE=next (the most
#                              worth one call: the changed Python
#                              tests on a GPU, remote into GPU, writes
#                              against fio, the write source, the host
#                              read goal), STAGE=first1m (the first
#                              read of 1 MiB in a fresh process: 21
#                              rounds against compat_mode=on, and
#                              strace of each mode), STAGE=prealloc
#                              and STAGE=prealloc_ab (buffered writes
#                              with write_prealloc against fio),
#                              STAGE=source2 (the write sources, the
#                              plain writers' files reserved first),
#                              STAGE=writers (buffered writes by 2 or 4
#                              workers, a mutant, against one writer),
#                              STAGE=recv (a remote read's receive copy:
#                              bench/recv_direct.sh), STAGE=source3 (the
#                              writer readying its own source),
#                              STAGE=first3 (the first-read table, 21
#                              rounds), STAGE=remote5 (issue 36's
#                              must-show, medians of 5)
#
# Needs: cmake, gcc, python3 with CuPy there; liburing and fio are carried
# in .carry/ (the machine has no package registry).
set -uo pipefail
mode=${1:-test}
OUT=${OUT:-/tmp/gpufile-out}
mkdir -p "$OUT"
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# json_get, fio_write, median, ratio
. bench/benchlib.sh
export PATH=$root/.carry/fio:$PATH
# cJSON (cufile.json parsing) has no package there: carried as files.
export PKG_CONFIG_PATH=$root/.carry/cjson/lib/pkgconfig
export LD_LIBRARY_PATH=$root/.carry/cjson/lib
# Zarr (and what it imports) carried as Python files (scripts/make_carry.sh),
# with stand-ins for numcodecs' compiled codecs: for the Zarr GPU test and
# benchmark only (uncompressed arrays), not on every test's path.
zarrpath=$root/python:$root/.carry/python
log() { echo "=== $* ($(date +%T))"; }
data=/root/gpufile-bench
mkdir -p "$data"
B=build-gpu

log machine
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nproc; uname -r; df -h / | tail -1; findmnt -no FSTYPE,SOURCE -T /root

log build
extra=()
[ -d .carry/liburing ] && extra+=(-DGPUFILE_LIBURING_DIR="$root/.carry/liburing")
# Remote sources: libcurl/OpenSSL headers carried, the system's libraries.
[ -d .carry/curl ] && extra+=(-DGPUFILE_CURL_DIR="$root/.carry/curl")
[ -d .carry/openssl ] && extra+=(-DGPUFILE_OPENSSL_DIR="$root/.carry/openssl")
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DGPUFILE_WERROR=ON "${extra[@]}" >"$OUT/cmake.log" 2>&1 ||
	{ cat "$OUT/cmake.log"; exit 1; }
target=all
[ "$mode" = quick ] && target="gpufile_static bench_gpu_bench"
[ "$mode" = st ] && target="gpufile gpufile_cli test_safetensors"
[ "$mode" = slice ] && target="gpufile gpufile_cli bench_gather_bench"
[ "$mode" = x2 ] && target="gpufile gpufile_cli test_gpu_multi"
[ "$mode" = bench ] && target="gpufile gpufile_cli bench_gpu_bench bench_host_read bench_cufile_bench"
[ "$mode" = issue14 ] && target="gpufile gpufile_cli bench_gpu_bench bench_host_ref bench_first_read"
[ "$mode" = firstuse ] && target="gpufile gpufile_static bench_first_read bench_first_use bench_gpu_bench"
[ "$mode" = contexts ] && target="gpufile_static test_gpu_contexts"
[ "$mode" = gpu_bench ] && target="gpufile_static bench_gpu_bench"
[ "$mode" = limits ] && target="gpufile gpufile_cli bench_gpu_bench bench_host_ref"
[ "$mode" = stagefix ] && target="gpufile gpufile_cli test_gpu_stream"
[ "$mode" = write ] && target="gpufile gpufile_cli bench_write_bench test_write_pipeline"
[ "$mode" = levers ] && target="gpufile gpufile_cli"
[ "$mode" = owed ] && [ "${STAGE:-}" = vsfio ] && target="gpufile gpufile_cli"
[ "$mode" = owed ] && [ "${STAGE:-}" = prealloc_ab ] && target="gpufile bench_write_bench"
[ "$mode" = owed ] && [ "${STAGE:-}" = prealloc ] && target="gpufile gpufile_cli bench_write_bench test_write_prealloc"
[ "$mode" = owed ] && [ "${STAGE:-}" = first1m ] && target="gpufile bench_first_read"
[ "$mode" = owed ] && [ "${STAGE:-}" = recv ] && target="gpufile gpufile_cli bench_recv_direct"
[ "$mode" = owed ] && [ "${STAGE:-}" = writers ] && target="gpufile bench_write_bench"
[ "$mode" = owed ] && [ "${STAGE:-}" = source2 ] && target="gpufile bench_write_source"
[ "$mode" = owed ] && [ "${STAGE:-}" = source3 ] && target="gpufile bench_write_source"
[ "$mode" = owed ] && [ "${STAGE:-}" = first3 ] && target="gpufile bench_first_read"
[ "$mode" = owed ] && [ "${STAGE:-}" = remote5 ] && target="gpufile gpufile_cli bench_remote_bench"
[ "$mode" = owed ] && [ "${STAGE:-}" = source ] && target="gpufile gpufile_cli bench_write_source bench_host_ref"
[ "$mode" = repeat ] && target="test_map_copy test_stream_stage test_stream test_gpu_stream test_gpu_contexts"
make -C $B -j16 $target >"$OUT/make.log" 2>&1 || { tail -50 "$OUT/make.log"; exit 1; }
$B/gpufile --version 2>/dev/null

make_file() { # path bytes
	if [ ! -f "$1" ] || [ "$(stat -c %s "$1")" -ne "$2" ]; then
		dd if=/dev/urandom of="$1" bs=64M count=$(($2 >> 26)) oflag=direct status=none
		sync
	fi
}

# mutant TARGETS FILE SED MARK: builds TARGETS (one word, or several
# separated by spaces) in $mut/b from a copy of the tree with SED applied
# to FILE, and prints how many lines hold MARK (0: the SED matched
# nothing, the mutant is the code itself).
mut=/tmp/gpufile-mut
mutant() {
	rm -rf $mut && mkdir -p $mut
	cp -r CMakeLists.txt cmake src include tests tools bench examples $mut/ 2>/dev/null
	sed -i "$3" "$mut/$2"
	grep -cF "$4" "$mut/$2"
	cmake -S $mut -B $mut/b -DCMAKE_BUILD_TYPE=Release "${extra[@]}" >/dev/null 2>&1 &&
		make -C $mut/b -j16 $1 >/dev/null 2>&1
}

# every_test REGEX: ctest (GPU tests included; the lines of the tests
# REGEX names), then pytest with a per-test limit whose thread method
# dumps every stack and exits if a test hangs in C.
every_test() {
	log "ctest"
	(cd $B && GPUFILE_NGINX=$root/.carry/nginx/run ctest --output-on-failure -j8 \
		-E 'fuzz|install' 2>&1) | tee "$OUT/ctest.log" | tail -8
	grep -E "$1" "$OUT/ctest.log"
	export GPUFILE_LIBRARY=$root/$B/libgpufile.so GPUFILE_CLI=$root/$B/gpufile PYTHONPATH=$root/python
	log "python tests"
	GPUFILE_NGINX=$root/.carry/nginx/run python3 -m pytest -q -rs -p no:cacheprovider \
		--timeout=120 --timeout-method=thread python/tests 2>&1 |
		tee "$OUT/pytest.log" | tail -12
}

# small_device_reads: single small device reads of a warm 1 GiB file
# ($data/one.bin) against pread + copy + sync by hand (gpu_bench --latency).
small_device_reads() {
	make_file $data/one.bin $((1 << 30))
	cat $data/one.bin >/dev/null
	log "single small device reads against pread + copy + sync by hand"
	$B/bench/gpu_bench $data/one.bin --size 1073741824 --latency 2>&1 |
		tee "$OUT/latency.log" | tail -14
}

# remote_into_gpu_and_host: issue 36's 4 GiB from nginx into GPU and host
# memory (bench/remote_bench.sh, 2 repeats).
remote_into_gpu_and_host() {
	log "4 GiB from nginx into GPU and host memory"
	BUILD_DIR=$B WORKDIR=$data REPEAT=2 bash bench/remote_bench.sh 4GiB 2>&1 |
		tee "$OUT/remote_bench.log" | head -12
}

# writes_against_fio WHAT: issue 33's buffered and O_DIRECT 4 GiB writes
# against fio (bench/write_bench.sh, WRITE_ROUNDS rounds, default 3); WHAT
# ends the heading.
writes_against_fio() {
	log "buffered and O_DIRECT 4 GiB writes against fio$1"
	mkdir -p $data/write
	BUILD_DIR=$B BENCH_DIR=$data/write BENCH_SIZE=4GiB ROUNDS=${WRITE_ROUNDS:-3} \
		bash bench/write_bench.sh 2>&1 | tee "$OUT/write_bench.log" | tail -17
}

# write_source_figures ROUNDS BLOCK_KiB LOG: what a buffered 4 GiB write's
# source costs (bench/write_source), in BLOCK_KiB pwrites.
write_source_figures() {
	log "a buffered write's source, 4 GiB in $(($2 >> 10)) MiB pwrites"
	mkdir -p $data/write
	$B/bench/write_source $data/write 4096 "$1" "$2" 4096 2>&1 | tee "$OUT/$3"
}

# host_read_goal [ARG...]: issue 33's warm 4 GiB into host memory, the
# defaults against parallel pread (bench/host_ref --rounds 5 ARG...).
host_read_goal() {
	make_file $data/file.bin $((4 << 30))
	log "issue 33: warm 4 GiB into host memory, gpufile against parallel pread"
	cat $data/file.bin >/dev/null
	$B/bench/host_ref $data/file.bin --rounds 5 "$@" --json 2>&1 |
		tee "$OUT/host_ref.log" | grep -v '^{' | tail -14
}

# zarr_tests [FILE...]: test_zarr_gpu.py (and FILEs) with zarr carried.
# The tests of test_zarr.py that need a real Blosc (zarr's default
# compressor; the carried numcodecs has a stand-in): CI runs them.
not_blosc="not blosc and not test_store_getitems_is_one_batch and not test_zarr_through_the_fsspec_protocol"

zarr_tests() {
	PYTHONPATH=$zarrpath python3 -m pytest -q -rs -p no:cacheprovider --timeout=120 \
		--timeout-method=thread python/tests/test_zarr_gpu.py "$@" 2>&1 |
		tee "$OUT/pytest_zarr_gpu.log" | tail -2
}

# zarr_figures LOG [ARG...]: bench/zarr_bench.py on a 2 GiB array with zarr
# carried, its output in $OUT/LOG and on stdout.
zarr_figures() {
	local log_file=$1
	shift
	PYTHONPATH=$zarrpath python3 bench/zarr_bench.py --dir $data/zarr --size 2GiB "$@" 2>&1 |
		tee "$OUT/$log_file"
}

case $mode in
quick)
	make_file $data/file1g.bin $((1 << 30))
	$B/bench/gpu_bench $data/file1g.bin --size $((1 << 30)) --cold 2>&1 | tee "$OUT/bench.log"
	;;
test)
	log ctest
	(cd $B && ctest --output-on-failure -j4 2>&1) | tee "$OUT/ctest.log" | tail -40
	log "gpufile check"
	make_file $data/file1g.bin $((1 << 30))
	$B/gpufile check $data/file1g.bin 2>&1 | tee "$OUT/check.log"
	log "python tests"
	export GPUFILE_LIBRARY=$root/$B/libgpufile.so GPUFILE_CLI=$root/$B/gpufile
	python3 -m pytest -q python/tests 2>&1 | tail -15
	log "tutorial"
	python3 examples/tutorial_cupy.py --file $data/tutorial.bin 2>&1 | tee "$OUT/tutorial.log"
	log "cuFile stats layout probe"
	CUFILE_EXPERIMENTAL_FS=1 $B/bench/cufile_stats_probe $data/file1g.bin 2>&1 | tee "$OUT/probe.log" | head -60
	CUFILE_EXPERIMENTAL_FS=1 $B/bench/cufile_stats_probe $data/file1g.bin --early 2>&1 | tee "$OUT/probe_early.log" | head -60
	log "cuFile scenarios"
	bash scripts/gpu_cufile_check.sh --no-tests --no-bench --build $B --data $data 2>&1 |
		tee "$OUT/cufile_check.log" | tail -60
	;;
soak)
	log ctest
	(cd $B && ctest --output-on-failure -j4 2>&1) | tee "$OUT/ctest.log" | tail -25
	make_file $data/file1g.bin $((1 << 30))
	log "soak"
	GPUFILE_SOAK_SECONDS=${SOAK_SECONDS:-90} $B/tests/test_stress_soak 2>&1 | tee "$OUT/soak.log" | tail -15
	log "tutorial read observed by gpufile stats from another process"
	export GPUFILE_LIBRARY=$root/$B/libgpufile.so GPUFILE_CLI=$root/$B/gpufile
	rm -f $data/fifo; mkfifo $data/fifo
	GPUFILE_COMPAT_MODE=off CUFILE_EXPERIMENTAL_FS=1 CUFILE_STATS_LEVEL=3 \
		python3 examples/tutorial_cupy.py --file $data/file1g.bin --mode off --wait \
		<$data/fifo >"$OUT/tutorial_wait.log" 2>&1 &
	pid=$!
	exec 3>$data/fifo
	for _ in $(seq 90); do grep -q "^pid" "$OUT/tutorial_wait.log" && break; sleep 1; done
	$B/gpufile stats
	$B/gpufile stats $pid
	$B/gpufile stats $pid --json | tee "$OUT/stats_pid.json"
	# The reader may have died: writing to the fifo would then kill us.
	trap '' PIPE
	kill -0 $pid 2>/dev/null && echo >&3
	exec 3>&-
	trap - PIPE
	wait $pid
	cat "$OUT/tutorial_wait.log"
	log "binding overhead (warm)"
	make_file $data/file1g.bin $((1 << 30))
	cat $data/file1g.bin >/dev/null
	python3 examples/bench_binding.py --file $data/file1g.bin 2>&1 | tee "$OUT/binding.log" | tail -4
	log "cuFile scenarios and benchmark"
	bash scripts/gpu_cufile_check.sh --no-tests --build $B --data $data 2>&1 |
		tee "$OUT/cufile_check.log" | grep -E "PASS|FAIL|layer|^--|gbps_best" |
		sed -e 's/"reason":"[^"]*",//' | cut -c1-400
	;;
bench)
	make_file $data/file.bin $((4 << 30))
	log "device benchmark"
	$B/bench/gpu_bench $data/file.bin --size $((4 << 30)) --cold --register --sweep 2>&1 |
		tee "$OUT/bench.log" | grep -v '^sweep'
	grep '^sweep' "$OUT/bench.log" | sort -k6 -nr | head -8
	log "fio: cold O_DIRECT io_uring on the same file"
	for bs in 1M 4M; do
		for qd in 8 32 128; do
			printf 'fio io_uring direct bs=%s iodepth=%s ' $bs $qd
			fio --name=cold --filename=$data/file.bin --ioengine=io_uring --direct=1 \
				--rw=read --bs=$bs --iodepth=$qd --size=4G --output-format=json 2>/dev/null |
				python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.2f GB/s" % (j["jobs"][0]["read"]["bw_bytes"]/1e9))'
		done
	done 2>&1 | tee "$OUT/fio_cold.log"
	log "host-read benchmark"
	BUILD_DIR=$B BENCH_FILE=$data/file1g.bin ROUNDS=3 bash bench/run_host_bench.sh 2>&1 |
		tee "$OUT/host_bench.log" | tail -12
	log "binding overhead"
	export GPUFILE_LIBRARY=$root/$B/libgpufile.so GPUFILE_CLI=$root/$B/gpufile
	cat $data/file1g.bin >/dev/null # the host benchmark ended cold
	python3 examples/bench_binding.py --file $data/file1g.bin 2>&1 | tee "$OUT/binding.log" | tail -8
	log "cuFile benchmark"
	bash scripts/gpu_cufile_check.sh --no-tests --build $B --data $data 2>&1 |
		tee "$OUT/cufile_bench.log" | grep -v '^PASS' | tail -30
	;;
issue14)
	# Goals 1-4 of issue 14, each against its reference in the same run;
	# bench/README.md has the method of each.
	log "goal 1: the first read in a fresh process, defaults against compat_mode=on"
	bash bench/first_read.sh $B $data 5 2>&1 | tee "$OUT/first_read.log"
	make_file $data/file.bin $((4 << 30))
	log "goal 3: warm 4 GiB into host memory, gpufile against parallel pread"
	cat $data/file.bin >/dev/null
	$B/bench/host_ref $data/file.bin --rounds 5 --repeat 3 --json 2>&1 |
		tee "$OUT/host_ref.log" | grep -v '^{'
	log "goal 2: warm 4 GiB into GPU memory, the H2D ceiling under page-cache traffic, the sweep"
	$B/bench/gpu_bench $data/file.bin --size $((4 << 30)) --contention --sweep 2>&1 |
		tee "$OUT/gpu_bench.log" | grep -v '^sweep '
	grep '^sweep ' "$OUT/gpu_bench.log" | sort -k6 -nr | head -8
	log "goal 4: cold 4 GiB, gpufile against fio io_uring O_DIRECT, 5 rounds"
	BUILD_DIR=$B ROUNDS=5 OUT_LOG="$OUT/cold_raw.txt" bash bench/cold_bench.sh $data/file.bin 2>&1 |
		tee "$OUT/cold.log" | sed -n '/medians over/,$p'
	log "issue 14 summary"
	grep -E '^(file|4g|64m|1m) ' "$OUT/first_read.log"
	grep -E '^host_ref: (gpufile at defaults|best gpufile)' "$OUT/host_ref.log"
	grep -E '^(ceiling|gpufile warm read|contention: pinned)' "$OUT/gpu_bench.log" | cut -c1-160
	grep -E '^warm read / (pinned|H2D)' "$OUT/gpu_bench.log"
	echo "sweep, best 3 (nthreads bounce_buffer_size bounce_buffers task_size GB/s):"
	grep '^sweep ' "$OUT/gpu_bench.log" | sort -k6 -nr | head -3
	grep -E '^cold_bench: (best fio|gpufile|skipped)' "$OUT/cold.log"
	;;
session5)
	make_file $data/file.bin $((4 << 30))
	cat $data/file.bin >/dev/null
	for m in auto off auto off; do
		log "host reads, host_map_copy=$m"
		GPUFILE_HOST_MAP_COPY=$m $B/bench/host_ref $data/file.bin --rounds 3 --repeat 3 2>&1 |
			tee "$OUT/host_ref_$m.log" | grep -E 'gpufile nthreads|pread 16x|pread 32x16|chunks 16x4MiB stream |^host_ref: (gpufile at|best|fastest)'
	done
	log "warm 4 GiB into GPU memory: ceilings, the copy pattern's shapes"
	$B/bench/gpu_bench $data/file.bin --size $((4 << 30)) --contention --chunked \
		--shapes 16:4,8:8,4:16,2:32,16:16,4:32 2>&1 |
		tee "$OUT/gpu_bench.log" | grep -E '^(ceiling|gpufile warm|contention|chunked|shape|warm read)'
	every_test "test_map_copy|test_gpu_stream|test_remote"
	;;
firstuse)
	log "first_use: the pieces alone"
	$B/bench/first_use --rounds 7 2>&1 | tee "$OUT/first_use.log"
	# The same tree with pinned.c's registration off (cuMemHostAlloc, as
	# before): first reads and the warm read of both, interleaved.
	log "mutant: registration off"
	mutant "bench_first_read bench_gpu_bench" src/platform/pinned.c \
		's/if (t->cuMemHostRegister \&\& t->cuMemHostUnregister \&\&/if (0 \&\&/' 'if (0 &&'
	for f in 64m:64 4g:4096; do
		make_file $data/first_read_${f%:*}.bin $((${f#*:} << 20))
		cat $data/first_read_${f%:*}.bin >/dev/null
	done
	log "first_read: fresh processes, registered (new) and cuMemHostAlloc (old), plain and after a warmup"
	$B/bench/first_read $data/first_read_64m.bin >/dev/null
	for r in 1 2 3 4 5; do
		for f in 64m 4g; do
			for b in $B $mut/b; do
				v=$([ $b = $B ] && echo new || echo old)
				echo "$r $f $v plain $($b/bench/first_read $data/first_read_$f.bin)"
				echo "$r $f $v warmup $($b/bench/first_read --warmup $data/first_read_$f.bin)"
			done
		done
	done 2>&1 | tee "$OUT/first_read.log"
	for f in 64m 4g; do
		for v in new old; do
			for k in plain warmup; do
				grep " $f $v $k " "$OUT/first_read.log" | awk '{print $5}' | sort -g |
					awk -v t="$f $v $k" '{a[NR]=$1} END {printf "%-18s median %.4f s\n", t, a[int((NR+1)/2)]}'
			done
		done
	done
	log "warm 4 GiB read against the pinned copy: new, old"
	make_file $data/file.bin $((4 << 30))
	cat $data/file.bin >/dev/null
	for b in $B $mut/b; do
		echo "--- $b"
		$b/bench/gpu_bench $data/file.bin --size $((4 << 30)) --reps 5 2>&1 |
			grep -E '^(ceiling|gpufile warm|verify|warm read / pinned)'
	done | tee "$OUT/gpu_bench.log"
	;;
contexts)
	TEST_GPU_CONTEXTS_PROBE=1 GPUFILE_TEST_DIR=$data $B/tests/test_gpu_contexts 2>&1 | tee "$OUT/probe.log"
	GPUFILE_TEST_DIR=$data $B/tests/test_gpu_contexts 2>&1 | tee "$OUT/contexts.log"
	;;
session6)
	log "several contexts in one process"
	GPUFILE_TEST_DIR=$data $B/tests/test_gpu_contexts 2>&1 | tee "$OUT/contexts.log"
	every_test "test_gpu_contexts|test_gpu_stream|test_fork"
	log "the context checks' cost; the warm 4 GiB read against its ceilings"
	make_file $data/file.bin $((4 << 30))
	cat $data/file.bin >/dev/null
	$B/bench/gpu_bench $data/file.bin --size $((4 << 30)) --ctx-id-cost --contention 2>&1 |
		tee "$OUT/gpu_bench.log" | grep -E '^(ctx-id|ceiling|gpufile warm|contention|warm read / (pinned|H2D))'
	;;
repeat)
	# N runs of each test in $TESTS (default: the staged stream reads'
	# tests and test_map_copy), failures counted.
	for t in ${TESTS:-test_map_copy test_stream_stage test_stream test_gpu_stream test_gpu_contexts}; do
		f=0
		for i in $(seq 1 "${N:-10}"); do
			GPUFILE_TEST_DIR=$data timeout 120 $B/tests/$t >"$OUT/$t.$i.log" 2>&1 || f=$((f + 1))
		done
		echo "$t: $f of ${N:-10} runs failed"
	done
	;;
stage)
	log "stream-ordered reads staged on the stream"
	for t in test_gpu_stream test_stream_stage test_stream; do
		GPUFILE_TEST_DIR=$data timeout 120 $B/tests/$t 2>&1 | tee "$OUT/$t.log" | tail -6
	done
	every_test "test_gpu_stream|test_stream|test_fork"
	log "read_async against pread, write_async against pwrite, warm 4 GiB"
	make_file $data/file.bin $((4 << 30))
	cat $data/file.bin >/dev/null
	$B/bench/gpu_bench $data/file.bin --size $((4 << 30)) --stream --small --reps 7 --contention 2>&1 |
		tee "$OUT/gpu_bench.log" | grep -E '^(stream|small|ceiling|gpufile warm|verify|warm read / pinned)'
	;;
pool)
	log "pooled copies"
	for t in test_staging_fake test_gpu test_gpu_contexts test_parity_gpu; do
		GPUFILE_TEST_DIR=$data timeout 300 $B/tests/$t 2>&1 | tee "$OUT/$t.log" | tail -4
	done
	every_test "test_gpu|test_staging|test_parity|test_batch"
	log "warm 4 GiB read, copies pooled and one a call"
	make_file $data/file.bin $((4 << 30))
	cat $data/file.bin >/dev/null
	$B/bench/gpu_bench $data/file.bin --size $((4 << 30)) --reps 9 --pool-ab --contention \
		--batch-copies 4:1,4:8,16:1 2>&1 | tee "$OUT/gpu_bench.log" |
		grep -E '^(pool|batch|ceiling|gpufile warm|verify|warm read / pinned|DATA)'
	;;
harden)
	every_test "test_gpu|test_stream|test_batch|test_mmap|test_block|test_safetensors|test_remote|test_direct"
	log "one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1): stream tests"
	$B/tests/test_gpu_stream_queue 2>&1 | tail -4
	CUDA_DEVICE_MAX_CONNECTIONS=1 $B/tests/test_gpu_stream 2>&1 | tail -2
	CUDA_DEVICE_MAX_CONNECTIONS=1 python3 -m pytest -q -p no:cacheprovider \
		--timeout=120 --timeout-method=thread python/tests/test_stream.py 2>&1 | tail -2
	if [ "${MUTANT:-1}" = 1 ]; then
		# The same test with the fix of e015d96 undone (only local-file
		# host requests run their own tasks): expected to hang on the
		# remote object where the queue is shared (alarm: rc 142).
		log "test_gpu_stream_queue without the fix (expected: hang)"
		mutant test_gpu_stream_queue src/core/pool.c \
			's/!r->cuda_ctx \&\& !is_worker/r->path == GPUFILE_PATH_HOST \&\& !is_worker/' \
			'r->path == GPUFILE_PATH_HOST && !is_worker'
		timeout 60 $mut/b/tests/test_gpu_stream_queue 2>&1 | tail -4
		echo "mutant rc=${PIPESTATUS[0]}"
	fi
	log "warm 4 GiB read against the pinned copy, after the hardening"
	make_file $data/file.bin $((4 << 30))
	cat $data/file.bin >/dev/null
	$B/bench/gpu_bench $data/file.bin --size $((4 << 30)) --reps 5 2>&1 |
		tee "$OUT/gpu_bench.log" |
		grep -E '^(ceiling|gpufile warm|verify|warm read / pinned|DATA)'
	;;
stagefix)
	# A module load while a staged read is in flight (release_read):
	# test_gpu_stream, the CuPy test that hung alone, and test_gpu_stream
	# built with release_read disabled (expected: hang, rc 124).
	$B/tests/test_gpu_stream 2>&1 | tail -3
	export GPUFILE_LIBRARY=$root/$B/libgpufile.so GPUFILE_CLI=$root/$B/gpufile PYTHONPATH=$root/python
	for i in 1 2 3; do
		for t in test_read_async_cupy_orders_both_ways test_write_async_writes_what_the_stream_produced; do
			timeout 60 python3 -m pytest -q -p no:cacheprovider python/tests/test_stream.py \
				-k $t 2>&1 | tail -1
		done
	done
	# MUT=release: release_read off; MUT=events: events destroyed, not kept
	if [ "${MUT:-release}" = release ]; then
		mutant test_gpu_stream src/api/stream_stage.c \
			's/if (st->is_write || st->released || !st->queue_done/if (1 || st->is_write || st->released || !st->queue_done/' \
			'if (1 || st->is_write'
	else
		mutant test_gpu_stream src/api/stream.c \
			's/^\tfor (size_t i = 0; i < events.n \&\& !kept; i++)/\tfor (size_t i = 0; 0 \&\& i < events.n \&\& !kept; i++)/' \
			'0 && i < events.n'
	fi
	timeout 60 $mut/b/tests/test_gpu_stream 2>&1 | tail -3
	echo "mutant rc=${PIPESTATUS[0]}"
	;;
gpu_bench)
	make_file $data/file.bin $((4 << 30))
	cat $data/file.bin >/dev/null
	# shellcheck disable=SC2086 # ARGS: several options
	$B/bench/gpu_bench $data/file.bin --size $((4 << 30)) ${ARGS:-} 2>&1 |
		tee "$OUT/gpu_bench.log"
	;;
limits)
	log "CPU, caches, memory, transparent huge pages"
	lscpu | grep -E 'Model name|Socket|Core|Thread|NUMA node|L[123]' | tr -s ' '
	grep -E 'MemTotal|Hugepagesize' /proc/meminfo
	cat /sys/kernel/mm/transparent_hugepage/enabled
	make_file $data/file.bin $((4 << 30))
	cat $data/file.bin >/dev/null
	log "goal 3: host reads, gpufile against pread and copies from a map"
	$B/bench/host_ref $data/file.bin --rounds ${ROUNDS:-3} --repeat 2 2>&1 |
		tee "$OUT/host_ref.log"
	[ "${HOST_ONLY:-0}" = 1 ] && { log done; exit 0; }
	log "goal 2: the chunked copy pattern, larger buffers and tasks"
	$B/bench/gpu_bench $data/file.bin --size $((4 << 30)) --chunked \
		--cells "${CELLS:-16:4MiB:2:4MiB,16:8MiB:2:8MiB,16:16MiB:2:16MiB,16:8MiB:2:16MiB,16:4MiB:3:4MiB,12:4MiB:2:4MiB,20:4MiB:2:4MiB,16:4MiB:2:4MiB}" 2>&1 |
		tee "$OUT/gpu_bench.log"
	;;
validate)
	# Issues 10, 11, 13, 16 on a real GPU (two where there are two): every
	# ctest test (GPU ones included), the Python tests, the cuFile layer
	# and the SIGKILL cleanup seen from another process, the cost of
	# cuFile's stats level 3.
	log "ctest"
	(cd $B && ctest --output-on-failure -j8 -E 'fuzz|install' 2>&1) | tee "$OUT/ctest.log" | tail -30
	log "GPU test programs"
	for t in test_gpu_cold_eof test_fork_gpu test_parity_gpu; do
		echo "--- $t"; $B/tests/$t 2>&1 | tail -8
	done
	echo "--- test_safetensors"; GPUFILE_CLI=$root/$B/gpufile $B/tests/test_safetensors 2>&1 | tail -4
	log "python tests"
	export GPUFILE_LIBRARY=$root/$B/libgpufile.so GPUFILE_CLI=$root/$B/gpufile PYTHONPATH=$root/python
	python3 -m pytest -q -rs python/tests 2>&1 | tee "$OUT/pytest.log" | tail -25
	make_file $data/file1g.bin $((1 << 30))
	log "cuFile layer seen from another process (no stats variable set)"
	env -u CUFILE_STATS_LEVEL -u GPUFILE_CUFILE_STATS CUFILE_EXPERIMENTAL_FS=1 \
		GPUFILE_COMPAT_MODE=off $B/gpufile read $data/file1g.bin --repeat 100000 \
		--no-progress >/dev/null 2>&1 &
	pid=$!
	sleep 6
	$B/gpufile stats $pid 2>&1 | tee "$OUT/stats_live.txt" | head -40
	log "SIGKILL during the read: what is left"
	kill -9 $pid; wait $pid 2>/dev/null
	echo "/dev/shm entries for $pid: $(ls /dev/shm | grep -c -- "-$pid\$")"
	$B/gpufile stats $pid; echo "gpufile stats exit=$?"
	log "cost of cuFile stats level 3"
	bash scripts/cufile_stats_cost.sh $B $data/file1g.bin 6 3 2>&1 | tail -8
	;;
final-tests)
	# Every test on real GPUs (two where there are two), remote ones
	# against the carried nginx, and KvikIO's 32 KiB bounce buffer value.
	log "machine: NUMA nodes"
	ls -d /sys/devices/system/node/node* 2>/dev/null | wc -l
	log "ctest"
	(cd $B && GPUFILE_NGINX=$root/.carry/nginx/run ctest --output-on-failure -j8 \
		-E 'fuzz|install' 2>&1) | tee "$OUT/ctest.log" | tail -25
	for t in test_gpu_stream test_gpu_multi test_gpu_cold_eof; do
		[ -x $B/tests/$t ] && { echo "--- $t"; $B/tests/$t 2>&1 | tail -12; }
	done
	log "python tests"
	export GPUFILE_LIBRARY=$root/$B/libgpufile.so GPUFILE_CLI=$root/$B/gpufile PYTHONPATH=$root/python
	GPUFILE_NGINX=$root/.carry/nginx/run python3 -m pytest -q -rs python/tests 2>&1 |
		tee "$OUT/pytest.log" | tail -15
	log "KVIKIO_BOUNCE_BUFFER_SIZE=32768"
	make_file $data/file1g.bin $((1 << 30))
	KVIKIO_BOUNCE_BUFFER_SIZE=32768 $B/gpufile read $data/file1g.bin --no-progress 2>&1 | head -12
	KVIKIO_BOUNCE_BUFFER_SIZE=32768 $B/gpufile config 2>&1 | tail -4
	;;
final-bench)
	# One run of every benchmark the open issues ask for.
	export GPUFILE_LIBRARY=$root/$B/libgpufile.so GPUFILE_CLI=$root/$B/gpufile PYTHONPATH=$root/python
	make_file $data/file.bin $((4 << 30))
	cat $data/file.bin >/dev/null
	log "warm 4 GiB into GPU memory against the pinned copy ceiling"
	$B/bench/gpu_bench $data/file.bin --size $((4 << 30)) 2>&1 | tee "$OUT/gpu_bench.log" | tail -14
	log "first read in a fresh process"
	[ -f bench/first_read.sh ] && bash bench/first_read.sh $B $data 5 2>&1 | tee "$OUT/first_read.log" | tail -12
	log "batches of small reads"
	bash bench/batch_bench.sh $root/$B $data 2>&1 | tee "$OUT/batch.log" | tail -16
	log "safetensors"
	python3 bench/st_bench.py --dir $data --rounds 3 --no-cold 2>&1 | tee "$OUT/st_bench.log" | tail -12
	[ "$(nvidia-smi -L | wc -l)" -ge 2 ] &&
		python3 bench/st_bench.py --dir $data --two-gpus --rounds 3 --no-cold 2>&1 | tail -6
	log "remote"
	BUILD_DIR=$B REPEAT=3 bash bench/remote_bench.sh 4GiB 2>&1 | tee "$OUT/remote.log" | tail -40
	;;
remote-sweep)
	# Remote reads at other range sizes and connection counts.
	for ts in 16MiB 64MiB; do
		for rc in 16 32; do
			echo "--- task_size=$ts remote_connections=$rc nthreads=$rc"
			GPUFILE_TASK_SIZE=$ts GPUFILE_REMOTE_CONNECTIONS=$rc GPUFILE_NTHREADS=$rc \
				BUILD_DIR=$B REPEAT=3 bash bench/remote_bench.sh 4GiB 2>&1 | grep -E 'curl|gpufile read|stats|reads' | head -12
		done
	done
	;;
session3)
	# After the size-field ABI, the function splits and the remote range
	# size: every test on the GPU, the warm benchmark, remote at defaults.
	log "ctest"
	(cd $B && GPUFILE_NGINX=$root/.carry/nginx/run ctest --output-on-failure -j8 \
		-E 'fuzz|install' 2>&1) | tee "$OUT/ctest.log" | tail -12
	grep -E "test_(gpu|batch_gpu|parity_gpu|fork_gpu|struct_size|remote)" "$OUT/ctest.log" | head -20
	log "python tests"
	export GPUFILE_LIBRARY=$root/$B/libgpufile.so GPUFILE_CLI=$root/$B/gpufile PYTHONPATH=$root/python
	GPUFILE_NGINX=$root/.carry/nginx/run python3 -m pytest -q -rs python/tests 2>&1 |
		tee "$OUT/pytest.log" | tail -16
	log "warm 4 GiB into GPU memory against the pinned copy ceiling"
	make_file $data/file.bin $((4 << 30))
	cat $data/file.bin >/dev/null
	$B/bench/gpu_bench $data/file.bin --size $((4 << 30)) 2>&1 | tee "$OUT/gpu_bench.log" |
		grep -E 'ceiling|warm read|verify'
	log "remote at defaults"
	BUILD_DIR=$B REPEAT=3 bash bench/remote_bench.sh 4GiB 2>&1 | tee "$OUT/remote.log" | tail -45
	;;
remote-tune)
	# Remote reads over range sizes and connection counts, whole-object
	# reads (--window = object size) and the tool's 1 GiB windows.
	for ts in 4MiB 8MiB 16MiB 32MiB 64MiB; do
		for rc in 16 32; do
			echo "--- task_size=$ts remote_connections=$rc nthreads=$rc"
			GPUFILE_TASK_SIZE=$ts GPUFILE_REMOTE_CONNECTIONS=$rc GPUFILE_NTHREADS=$rc \
				STATS_DURING=0 BUILD_DIR=$B REPEAT=3 bash bench/remote_bench.sh 4GiB 2>&1 |
				grep -E 'curl|gpufile read|windows'
		done
	done 2>&1 | tee "$OUT/remote_tune.log"
	;;
final-last)
	# After the last merges: the decision, pool, multi-device and
	# safetensors changes on the real GPU, and the first-read benchmark.
	log "ctest"
	(cd $B && GPUFILE_NGINX=$root/.carry/nginx/run ctest --output-on-failure -j8 \
		-E 'fuzz|install' 2>&1) | tee "$OUT/ctest.log" | tail -8
	export GPUFILE_LIBRARY=$root/$B/libgpufile.so GPUFILE_CLI=$root/$B/gpufile PYTHONPATH=$root/python
	log "python tests"
	python3 -m pytest -q -rs python/tests 2>&1 | tee "$OUT/pytest.log" | tail -4
	log "gpufile check: the prediction"
	make_file $data/file.bin $((4 << 30))
	$B/gpufile check $data/file.bin 2>&1 | grep -i predict
	log "first read in a fresh process"
	bash bench/first_read.sh $B $data 5 2>&1 | tee "$OUT/first_read.log" | tail -12
	log "warm 4 GiB into GPU memory against the pinned copy ceiling"
	cat $data/file.bin >/dev/null
	$B/bench/gpu_bench $data/file.bin --size $((4 << 30)) 2>&1 | grep -E 'ceiling|warm read|verify'
	log "safetensors"
	python3 bench/st_bench.py --dir $data --rounds 3 2>&1 | tee "$OUT/st_bench.log" | grep -E 'x faster|of raw|per tensor|median'
	;;
session4)
	# The stream-ordered change (device memory on the posix path now
	# blocks): every test on the GPU; pytest with a per-test limit whose
	# thread method dumps every stack and exits if a test hangs in C;
	# the stream tests again and again.
	every_test "test_gpu_stream"
	log "stream tests, 10 times"
	for i in $(seq 10); do
		python3 -m pytest -q -p no:cacheprovider --timeout=60 --timeout-method=thread \
			python/tests/test_stream.py 2>&1 | tail -1
		$B/tests/test_gpu_stream >"$OUT/gpu_stream_$i.log" 2>&1; echo "test_gpu_stream rc=$?"
	done | tee "$OUT/stream_repeat.log"
	;;
owed)
	export GPUFILE_LIBRARY=$root/$B/libgpufile.so GPUFILE_CLI=$root/$B/gpufile PYTHONPATH=$root/python
	case ${STAGE:-tests} in
	tests)
		every_test "test_gpu|test_stream|test_batch|test_direct|test_cli_bench|test_write_pipeline|test_stats|Failed|failed"
		grep -E "test_(zarr_gpu|kvikio_gpu|gpu|upload|webhdfs|safetensors_gpu|distributed_gpu).*(PASS|FAIL|SKIP)|passed|failed" \
			"$OUT/pytest.log" | tail -5
		log "host_map_copy=auto on this CPU ($(nproc) CPUs): a warm 1 GiB host read"
		make_file $data/one.bin $((1 << 30))
		cat $data/one.bin >/dev/null
		grep -o 'avx512[a-z]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
		$B/gpufile read $data/one.bin --host --no-progress 2>&1 | grep -E 'host|map'
		log "gpufile bench into GPU 0, checked (--verify)"
		for w in "--rw read --bs 1m --jobs 4" "--rw randread --bs 4k --jobs 4 --time 3" \
			"--rw randread --bs 4k --batch 32 --time 3" "--rw write --bs 1m --jobs 4" \
			"--rw randwrite --bs 64k --jobs 2 --time 3"; do
			echo "\$ gpufile bench FILE --device 0 --verify $w"
			# shellcheck disable=SC2086 # w: several options
			$B/gpufile bench $data/bench.bin --file-size 1g --device 0 --verify $w 2>&1 |
				tee -a "$OUT/bench_device.log" | grep -E 'IOPS|GB/s|p99|device|cufile|verif|rror'
		done
		;;
	figures)
		log "bench_vs_fio.sh -d 0"
		OUT=$OUT/vs_fio bash bench/bench_vs_fio.sh -g $B/gpufile -f $data/vsfio.bin -s 1g -t 2 -d 0 2>&1 |
			tee "$OUT/bench_vs_fio.log" | tail -30
		log "4 GiB from nginx into GPU and host memory"
		BUILD_DIR=$B WORKDIR=$data REPEAT=3 bash bench/remote_bench.sh 4GiB 2>&1 |
			tee "$OUT/remote_bench.log" | head -30
		log "issue 36's must-show figures on 16 CPUs (nginx, loopback)"
		BUILD_DIR=$B WORKDIR=$data ROUNDS=5 bash bench/remote_must_show.sh 1GiB 4GiB 2>&1 |
			tee "$OUT/remote_must_show.log" | tail -25
		log "stats --watch and the progress line of device reads"
		python3 bench/stats_watch_capture.py --dir $data --out "$OUT/captures" --device 0 2>&1 | tail -40
		if python3 -c 'import zarr, numcodecs' 2>/dev/null; then
			log "Zarr into CuPy"
			python3 bench/zarr_bench.py --dir $data/zarr --size 2GiB --gpu 2>&1 | tee "$OUT/zarr_gpu.log" | tail -15
		else
			log "no zarr/numcodecs on this machine: the Zarr GPU benchmark not run"
		fi
		;;
	vsfio)
		# Issue 35's last table alone: gpufile bench into GPU 0 beside
		# fio on the same file (1 s a run).
		OUT=$OUT/vs_fio bash bench/bench_vs_fio.sh -g $B/gpufile -f $data/vsfio.bin -s 1g -t 1 -d 0 2>&1 |
			tee "$OUT/bench_vs_fio.log" | tail -30
		;;
	lanes)
		# The least that shows the lanes: one 4 GiB read of each kind.
		BUILD_DIR=$B WORKDIR=$data REPEAT=1 bash bench/remote_bench.sh 4GiB 2>&1 |
			tee "$OUT/remote_bench.log" | head -12
		;;
	again)
		# After the engine's lanes, most wanted first: 4 GiB into GPU
		# and host memory, bench_vs_fio, the must-show figures, the
		# tests of what changed, a buffered write sweep.
		remote_into_gpu_and_host
		log "bench_vs_fio.sh -d 0"
		OUT=$OUT/vs_fio bash bench/bench_vs_fio.sh -g $B/gpufile -f $data/vsfio.bin -s 1g -t 2 -d 0 2>&1 |
			tee "$OUT/bench_vs_fio.log" | tail -30
		log "issue 36's must-show figures, 4 GiB"
		BUILD_DIR=$B WORKDIR=$data ROUNDS=3 COUNT=3000 bash bench/remote_must_show.sh 4GiB 2>&1 |
			tee "$OUT/remote_must_show.log" | tail -16
		log "tests of what changed"
		python3 -m pytest -q -rs -p no:cacheprovider --timeout=120 --timeout-method=thread \
			python/tests/test_upload.py python/tests/test_webhdfs.py python/tests/test_kvikio_gpu.py \
			python/tests/test_remote_rangeless.py python/tests/test_remote.py 2>&1 |
			tee "$OUT/pytest.log" | tail -6
		log "buffered 4 GiB host writes by threads and task size (GB/s, median of 3), fio psync 1M"
		for t in 1 2 4 16; do
			for ts in 4m 64m; do
				echo "nthreads=$t task_size=$ts $(GPUFILE_NTHREADS=$t GPUFILE_TASK_SIZE=$ts \
					$B/bench/write_bench $data/w.bin 4g 3 --json |
					python3 -c 'import json,sys; print(json.load(sys.stdin)["gbps_median"])')"
			done
		done 2>&1 | tee "$OUT/write_sweep.log"
		rm -f $data/w.bin
		fio --name=w --filename=$data/wf.bin --rw=write --bs=1m --size=4g --ioengine=psync \
			--direct=0 --output-format=terse 2>&1 | awk -F';' '{print "fio psync 1M 1 job: " $48*1024/1e9 " GB/s"}'
		rm -f $data/wf.bin
		;;
	zarr)
		# Session 37: issue 38's Zarr figures on this machine (zarr carried:
		# scripts/make_carry.sh): its GPU test, the array into CuPy
		# against DirectoryStore + cupy.asarray, the CPU figures on 16
		# idle CPUs; then single small device reads at HEAD, then every
		# test (the staging give-back of d5f5aea not yet run on a GPU).
		log "Zarr on the GPU (carried zarr: $(PYTHONPATH=$zarrpath python3 -c 'import zarr; print(zarr.__version__)' 2>&1))"
		zarr_tests
		log "Zarr into CuPy: gpufile.zarr against DirectoryStore + cupy.asarray"
		zarr_figures zarr_gpu.log --gpu | tail -6
		log "Zarr and cat_ranges on the host (16 CPUs)"
		zarr_figures zarr_cpu.log | grep -E 'x \(goal|= ' | tail -6
		small_device_reads
		every_test "test_gpu|test_small_device|test_stream|test_batch|Failed|failed"
		grep -E "test_(kvikio_gpu|upload|webhdfs|remote_rangeless|gpu|stream|zarr).*(FAIL|ERROR)|passed|failed" \
			"$OUT/pytest.log" | tail -5
		;;
	zarr2)
		# The Zarr read into CuPy after its parts are found once per
		# selection (25ce218): the benchmark, then where its time goes.
		zarr_tests
		log "Zarr into CuPy: gpufile.zarr against DirectoryStore + cupy.asarray"
		zarr_figures zarr_gpu.log --gpu --gpu-parts --rounds 5 | tail -45
		;;
	last)
		# Session 37's last commit: the Zarr GPU test and benchmark on
		# the merged store, then what a buffered write's source costs
		# (bench/write_source: from one 1 MiB buffer as fio writes, from
		# a 4 GiB one, the same with a reader ahead, gpufile_pwrite).
		zarr_tests
		log "Zarr into CuPy: gpufile.zarr against DirectoryStore + cupy.asarray"
		zarr_figures zarr_gpu.log --gpu --rounds 5 | tail -4
		log "Zarr and cat_ranges on the host (16 CPUs)"
		zarr_figures zarr_cpu.log | grep -E 'x \(goal|= ' | tail -6
		write_source_figures 5 1024 write_source.log
		;;
	last2)
		# After the platform facts are kept per device (3c561ad) and the
		# Zarr store's changes merged: the Zarr GPU test, its benchmark
		# with where the time goes, then ctest (the GPU tests included).
		zarr_tests python/tests/test_batch.py python/tests/test_zarr.py -k "$not_blosc"
		log "Zarr into CuPy: gpufile.zarr against DirectoryStore + cupy.asarray"
		zarr_figures zarr_gpu.log --gpu --gpu-parts --rounds 5 | tail -28
		log "ctest"
		(cd $B && GPUFILE_NGINX=$root/.carry/nginx/run ctest --output-on-failure -j8 \
			-E 'fuzz|install' 2>&1) | tee "$OUT/ctest.log" | tail -8
		;;
	source)
		# Session 39: what a buffered write's source costs, with two more
		# sources (a huge-page buffer, a ring refilled by a second
		# thread), at 1 MiB and 4 MiB pwrites; then issue 33's host read
		# goal on this machine (warm 4 GiB, defaults against parallel
		# pread).
		log "kernel $(uname -r), THP $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
		write_source_figures 5 1024 write_source.log
		write_source_figures 3 4096 write_source_4m.log
		host_read_goal --repeat 3
		;;
	source2)
		# Session 42: with write_prealloc, gpufile's buffered 4 GiB
		# write is 0.90-0.92x fio's: is the rest the source? The
		# sources of bench/write_source with each plain writer's file
		# reserved first as fio's is (5 rounds), then without (3).
		log "kernel $(uname -r), THP $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
		mkdir -p $data/write
		WRITE_SOURCE_PREALLOC=1 $B/bench/write_source $data/write 4096 5 1024 4096 2>&1 |
			tee "$OUT/write_source_reserved.log"
		$B/bench/write_source $data/write 4096 3 1024 4096 2>&1 | tee "$OUT/write_source.log"
		;;
	remote5)
		# Session 43: issue 36's must-show on this machine as the issue
		# asks it (medians of 5, 10,000 ranged reads), at the session's
		# library, then 4 GiB from nginx into GPU against host memory.
		BUILD_DIR=$B WORKDIR=$data ROUNDS=5 COUNT=10000 bash bench/remote_must_show.sh 1GiB 4GiB 2>&1 |
			tee "$OUT/remote_must_show.log" | tail -30
		remote_into_gpu_and_host
		;;
	first3)
		# Session 43: issue 14's first-read table at 21 interleaved
		# rounds for all three files (the issue14 mode's 5 rounds gave
		# 4 GiB 1.115x and 1 MiB 1.179x here, 1.033x and 1.027x before).
		bash bench/first_read.sh $B $data 21 2>&1 | tee "$OUT/first_read_21.log"
		;;
	source3)
		# Session 43: the writer readying its own source (software
		# prefetch of the next block, or reading this one) against
		# fio's cache-resident buffer, at 1 MiB and 256 KiB pwrites,
		# files reserved first as fio's are.
		log "kernel $(uname -r), THP $(cat /sys/kernel/mm/transparent_hugepage/enabled)"
		lscpu | grep -E 'Model name|Thread|Core|Socket|NUMA node|L1d|L2|L3' | tee "$OUT/lscpu.txt"
		mkdir -p $data/write
		WRITE_SOURCE_PREALLOC=1 $B/bench/write_source $data/write 4096 5 1024 4096 2>&1 |
			tee "$OUT/write_source_1m.log"
		WRITE_SOURCE_PREALLOC=1 $B/bench/write_source $data/write 4096 3 256 4096 2>&1 |
			tee "$OUT/write_source_256k.log"
		;;
	recv)
		# Session 42: what the receive copy of a remote read costs
		# (issue 36): libcurl's write callback copying into the
		# destination against curl_easy_recv straight into it and into
		# a scratch buffer (curl -o /dev/null's work), 16 threads.
		BUILD_DIR=$B WORKDIR=$data bash bench/recv_direct.sh 1GiB 16 8 5 2>&1 | tee "$OUT/recv_direct_1g.log"
		BUILD_DIR=$B WORKDIR=$data bash bench/recv_direct.sh 4GiB 16 8 3 2>&1 | tee "$OUT/recv_direct_4g.log"
		;;
	writers)
		# Session 42: one writer (one_writer: the caller runs every
		# task of a buffered write from host memory) was chosen against
		# 16 writers; fio's best here was 4 jobs. Would 2 or 4 beat
		# one? A mutant whose one_writer() says no, at nthreads 2 and
		# 4, against the tree and fio psync 1M with 1 and 4 jobs, 4
		# GiB into a new file, 5 interleaved rounds.
		mutant "gpufile bench_write_bench" src/api/file.c \
			's|^\treturn r->is_write \&\& r->path == GPUFILE_PATH_HOST \&\& !r->h->remote \&\&$|\treturn 0 \&\& /*MANYMARK*/ r->is_write \&\& r->path == GPUFILE_PATH_HOST \&\& !r->h->remote \&\&|' MANYMARK
		mkdir -p $data/write
		f=$data/write/writers.bin
		wb() { "$@" $f 4g 1 --json | json_get gbps_median; }
		fio_w() { fio_write $f $((4 << 30)) "psync 1M $1 1" 0; }
		for r in 1 2 3 4 5; do
			echo "round $r: one $(wb $B/bench/write_bench)" \
				"two $(GPUFILE_NTHREADS=2 wb $mut/b/bench/write_bench)" \
				"four $(GPUFILE_NTHREADS=4 wb $mut/b/bench/write_bench)" \
				"fio1 $(fio_w 1) fio4 $(fio_w 4)" | tee -a "$OUT/writers.log"
		done
		;;
	next)
		# Session 40: device time is scarce (no machine in sessions 39
		# and 40), so the owed runs most worth one call, each bounded,
		# in the order of their worth: the Python tests of what changed
		# since the last GPU run (the kept batches, interrupts, Zarr) on
		# a GPU, issue 36's 4 GiB from nginx into GPU against host
		# memory, issue 33's buffered write against fio and what its
		# source costs, then its host read goal on this machine's CPUs.
		zarr_tests python/tests/test_batch.py python/tests/test_threads_owners.py \
			python/tests/test_zarr.py -k "$not_blosc"
		remote_into_gpu_and_host
		writes_against_fio ""
		write_source_figures 3 1024 write_source.log
		host_read_goal
		;;
	prealloc)
		# Session 41: write_prealloc (file.c, preallocate), its test on
		# this machine's file system, then issue 33's buffered and
		# O_DIRECT 4 GiB writes against fio with it.
		(cd $B && GPUFILE_TEST_DIR=$data/t ./tests/test_write_prealloc 2>&1 | tail -3)
		writes_against_fio " (write_prealloc=auto)"
		;;
	prealloc_ab)
		# Session 41: the same 4 GiB buffered write (bench/write_bench,
		# median of 3 each) with write_prealloc=auto and off, and fio
		# psync 1M and io_uring 1M iodepth 4, one job, 5 rounds
		# interleaved on one machine.
		log "4 GiB buffered writes: write_prealloc auto and off against fio"
		mkdir -p $data/write
		f=$data/write/ab.bin
		for r in 1 2 3 4 5; do
			line="round $r:"
			for m in auto off; do
				v=$(GPUFILE_WRITE_PREALLOC=$m $B/bench/write_bench $f 4g 3 --json | json_get gbps_median)
				line="$line gpufile:$m $v"
			done
			line="$line fio:psync $(fio_write $f $((4 << 30)) "psync 1M 1 1" 0)"
			line="$line fio:io_uring $(fio_write $f $((4 << 30)) "io_uring 1M 1 4" 0)"
			echo "$line" | tee -a "$OUT/prealloc_ab.log"
		done
		;;
	first1m)
		# Session 42: issue 33's first read of a warm 1 MiB file in a
		# fresh process (1.26x compat_mode=on over 5 rounds in session
		# 41): 21 interleaved rounds, then where one read's time goes
		# in each mode: strace -f -tt -T of three processes each,
		# the timed call between first_read's marks.
		FILES=1m bash bench/first_read.sh $B $data 21 2>&1 | tee "$OUT/first_read_1m.log"
		st=$root/.carry/strace
		for i in 1 2 3; do
			for m in auto on; do
				# strace's libraries for strace alone (-E: the
				# program gets the path it runs with untraced).
				GPUFILE_COMPAT_MODE=$m LD_LIBRARY_PATH=$st/lib:$LD_LIBRARY_PATH \
					$st/strace -E LD_LIBRARY_PATH="$LD_LIBRARY_PATH" -f -tt -T \
					-o "$OUT/strace_${m}_$i.txt" $B/bench/first_read --mark $data/first_read_1m.bin
			done
		done
		for m in auto on; do
			for i in 1 2 3; do
				t=$OUT/strace_${m}_$i.txt
				grep -q 'timed read ends' "$t" || { echo "$m $i: no end mark in $t"; continue; }
				# System calls between the marks: not the marks,
				# not a call's "resumed" half, not signals or exits.
				sed -n '/timed read begins/,/timed read ends/p' "$t" |
					grep -v -e 'resumed>' -e 'timed read' -e '^[0-9]* *[+-]\{3\}' |
					awk -v m=$m -v i=$i 'END {print m, i, NR, "system calls in the timed read"}'
			done
		done
		;;
	final)
		# Session 36's final commit: every test first, then the figures
		# its changes owe: single small device reads (run on the calling
		# thread now), the remote must-show after the host split, the
		# buffered write with one writer, host reads unchanged.
		every_test "test_gpu|test_small_device|test_stream|test_batch|Failed|failed"
		grep -E "test_(kvikio_gpu|upload|webhdfs|remote_rangeless|gpu|stream).*(FAIL|ERROR)|passed|failed" \
			"$OUT/pytest.log" | tail -5
		small_device_reads
		log "gpufile bench --device 0, 4 KiB random, one at a time"
		$B/gpufile bench $data/one.bin --device 0 --rw randread --bs 4k --time 3 2>&1 |
			tee "$OUT/bench_4k_gpu0.log" | grep -E 'IOPS|p50|p99'
		log "issue 36's must-show figures, 4 GiB"
		BUILD_DIR=$B WORKDIR=$data ROUNDS=3 COUNT=3000 bash bench/remote_must_show.sh 4GiB 2>&1 |
			tee "$OUT/remote_must_show.log" | tail -16
		remote_into_gpu_and_host
		writes_against_fio " (one writer for buffered)"
		;;
	esac
	;;
levers)
	# Session 41, two levers measured before either is built: (1) does
	# fio's buffered-write lead come from the file it preallocates
	# (bench/write_prealloc.sh), (2) does a remote read into host memory
	# gain from streaming stores for the received bytes (a mutant of
	# sources/remote.c against the tree, 4 GiB from nginx, interleaved).
	log "buffered 4 GiB writes: fio and a pwrite loop, preallocated or not"
	[ "${ROUNDS:-5}" = 0 ] || bash bench/write_prealloc.sh $data/write ${ROUNDS:-5} 2>&1 | tee "$OUT/write_prealloc.log"
	log "mutant: streaming stores for a remote body's bytes"
	mutant "gpufile gpufile_cli" src/sources/remote.c \
		's|^#include "sources/sources.h"|&\n#include "platform/platform.h"|
s|^\tmemcpy(s->dst + s->got, data, len);|\t{ gpufile__copy_fn nt = len >= 4096 ? gpufile__stream_copy_fn() : NULL; if (nt) nt(s->dst + s->got, data, len); else memcpy(s->dst + s->got, data, len); } /*NTMARK*/|' NTMARK
	ls $mut/b/gpufile >/dev/null || exit 1
	ln -sfn $mut/b build-mut # remote_bench.sh takes BUILD_DIR under the tree
	for r in 1 2 3; do
		for b in $B build-mut; do
			echo "round $r, build $b"
			BUILD_DIR=$b WORKDIR=$data REPEAT=1 bash bench/remote_bench.sh 4GiB 2>&1 |
				tee -a "$OUT/remote_nt.log" | grep -E 'curl|gpufile read'
		done
	done
	;;
x2)
	# On nvidia-h200-x2: issue 14 goal 5 (reads into GPU 1, both GPUs at
	# once from one and from two processes, against the pinned copy) and
	# issue 16's two shards at once, with the two-GPU tests. DEVICES=0,0
	# tries the benchmark on one GPU.
	export GPUFILE_LIBRARY=$root/$B/libgpufile.so GPUFILE_CLI=$root/$B/gpufile PYTHONPATH=$root/python
	log "two-GPU tests"
	$B/tests/test_gpu_multi 2>&1 | tail -6; echo "test_gpu_multi rc=$?"
	python3 -m pytest -q -rs -p no:cacheprovider --timeout=120 --timeout-method=thread \
		python/tests/test_safetensors_gpu.py python/tests/test_cuda_context.py 2>&1 | tail -6
	log "issue 14 goal 5: two GPUs at once"
	python3 bench/two_gpus.py --dir $data --rounds ${ROUNDS:-5} --devices ${DEVICES:-0,1} 2>&1 |
		tee "$OUT/two_gpus.log" | tail -22
	if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
		log "issue 16: two shards at once"
		python3 bench/st_bench.py --dir $data --two-gpus --rounds 3 2>&1 |
			tee "$OUT/st_bench_2gpu.log" | tail -10
	fi
	;;
slice)
	export GPUFILE_LIBRARY=$root/$B/libgpufile.so GPUFILE_CLI=$root/$B/gpufile PYTHONPATH=$root/python
	log "safetensors: Python tests, get_slice against safetensors' own"
	python3 -m pytest -q -rs -p no:cacheprovider --timeout=120 --timeout-method=thread \
		python/tests/test_safetensors_slice.py python/tests/test_safetensors.py \
		python/tests/test_safetensors_gpu.py 2>&1 | tee "$OUT/pytest.log" | tail -8
	log "tensor-parallel slices against safetensors"
	python3 bench/st_slice_bench.py --dir $data --rounds ${ROUNDS:-5} 2>&1 |
		tee "$OUT/st_slice_bench.log"
	log "gathered runs: from a map, by pread, hand-written pread threads"
	cat $data/big.safetensors >/dev/null
	$B/bench/gather_bench $data/big.safetensors --rounds ${ROUNDS:-5} 2>&1 |
		tee "$OUT/gather_bench.log"
	;;
write)
	if [ "${WHAT:-files}" = files ]; then
		log "write pipeline test (fake driver)"
		$B/tests/test_write_pipeline 2>&1 | tail -3
		log "writes: host and GPU -> file against fio, 4 GiB"
		BUILD_DIR=$B BENCH_DIR=$data/write BENCH_SIZE=4GiB bash bench/write_bench.sh 2>&1 |
			tee "$OUT/write_bench.log"
	fi
	if [ "${WHAT:-files}" = save ]; then
		export GPUFILE_LIBRARY=$root/$B/libgpufile.so PYTHONPATH=$root/python
		log "save_file from GPU tensors against a raw gpufile write, 4 GiB"
		python3 bench/st_save_bench.py --dir $data/write --size 4g --rounds 5 \
			--device cuda 2>&1 | tee "$OUT/st_save_gpu.log"
		if [ "${SAVE_HOST:-1}" = 1 ]; then
			log "save_file from host tensors, 4 GiB"
			python3 bench/st_save_bench.py --dir $data/write --size 4g --rounds 5 \
				2>&1 | tee "$OUT/st_save_host.log"
		fi
	fi
	;;
st)
	log "safetensors: C test"
	GPUFILE_CLI=$root/$B/gpufile $B/tests/test_safetensors 2>&1 | tail -5
	export GPUFILE_LIBRARY=$root/$B/libgpufile.so GPUFILE_CLI=$root/$B/gpufile
	export PYTHONPATH=$root/python
	log "safetensors: Python tests (GPU ones against safetensors.torch)"
	python3 -m pytest -q -rs python/tests/test_safetensors.py \
		python/tests/test_safetensors_gpu.py 2>&1 | tail -15
	log "safetensors: gpufile load"
	python3 bench/st_bench.py --dir $data --rounds 1 --no-cold --only big 2>&1 | tail -3
	$B/gpufile load $data/big.safetensors
	log "safetensors: benchmark (warm and cold)"
	python3 bench/st_bench.py --dir $data --rounds ${ST_ROUNDS:-3} 2>&1 | tee "$OUT/st_bench.log"
	if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
		log "safetensors: two GPUs"
		python3 bench/st_bench.py --dir $data --two-gpus --rounds ${ST_ROUNDS:-3} 2>&1 |
			tee "$OUT/st_bench_2gpu.log"
	fi
	;;
esac
log done
