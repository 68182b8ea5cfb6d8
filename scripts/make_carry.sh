#!/usr/bin/env bash
# Prepares .carry/ (ignored by git) for the GPU machine, which has no package
# registry: liburing's header and static library, cJSON (header, shared
# library, pkg-config file), and a fio built from Debian's source package with
# only what it needs (libc, libm, libz; io_uring and psync engines). The
# device tool sends it with `carry: [".carry"]`; scripts/gpu_run.sh uses it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
lib=/usr/lib/x86_64-linux-gnu

mkdir -p .carry/liburing/include .carry/liburing/lib
cp -r /usr/include/liburing.h /usr/include/liburing .carry/liburing/include/
cp $lib/liburing.a .carry/liburing/lib/

mkdir -p .carry/cjson/include/cjson .carry/cjson/lib/pkgconfig
cp /usr/include/cjson/cJSON.h .carry/cjson/include/cjson/
so=$(readlink -f $lib/libcjson.so)
cp "$so" .carry/cjson/lib/libcjson.so
cp "$so" .carry/cjson/lib/libcjson.so.1
cat >.carry/cjson/lib/pkgconfig/libcjson.pc <<'PC'
prefix=${pcfiledir}/../..
libdir=${prefix}/lib
includedir=${prefix}/include

Name: libcjson
Version: 1.7.15
Description: Ultralightweight JSON parser in ANSI C
Libs: -L${libdir} -lcjson
Cflags: -I${includedir} -I${includedir}/cjson
PC

if [ ! -x .carry/fio/fio ]; then
	work=$(mktemp -d)
	mkdir -p "$work/lists/partial"
	echo "deb-src http://deb.debian.org/debian bookworm main" >"$work/src.list"
	apt_src=(-o Dir::Etc::SourceList="$work/src.list" -o Dir::Etc::SourceParts=/dev/null
		-o Dir::State::Lists="$work/lists")
	apt-get "${apt_src[@]}" update -qq
	(cd "$work" && apt-get "${apt_src[@]}" source --download-only fio >/dev/null)
	tar -C "$work" -xzf "$work"/fio_*.orig.tar.gz
	(cd "$work"/fio-*/ &&
		./configure --disable-native --disable-rdma --disable-rados --disable-rbd \
			--disable-http --disable-gfapi --disable-pmem --disable-numa \
			--disable-libnfs --disable-tcmalloc --disable-libzbc --disable-xnvme \
			--disable-dfs >/dev/null &&
		make -j"$(nproc)" fio >/dev/null)
	mkdir -p .carry/fio
	cp "$work"/fio-*/fio .carry/fio/fio
	strip .carry/fio/fio
	rm -rf "$work"
fi
# Remote sources (src/sources/remote.c) and bench/remote_bench.sh: libcurl's and
# OpenSSL's headers (the GPU machine has the runtime libraries, not the
# headers; CMake's GPUFILE_CURL_DIR/GPUFILE_OPENSSL_DIR), and Debian's nginx
# with the libraries it links beyond libc, run with LD_LIBRARY_PATH (checked
# below by starting the carried copy on loopback).
rm -rf .carry/curl .carry/openssl .carry/nginx
mkdir -p .carry/curl/include .carry/openssl/include .carry/nginx/lib
cp -r /usr/include/x86_64-linux-gnu/curl .carry/curl/include/
cp -r /usr/include/openssl .carry/openssl/include/
cp /usr/include/x86_64-linux-gnu/openssl/*.h .carry/openssl/include/openssl/
cp /usr/sbin/nginx .carry/nginx/nginx
for l in $(ldd /usr/sbin/nginx | awk '/=> \// {print $3}'); do
	case $(basename "$l") in
	libc.so.* | libm.so.* | ld-linux*) ;;
	*) cp -L "$l" .carry/nginx/lib/ ;;
	esac
done
if [ -d /usr/lib/nginx/modules ]; then
	cp -r /usr/lib/nginx/modules .carry/nginx/modules
fi
cat >.carry/nginx/run <<'RUN'
#!/bin/sh
# The carried nginx with its own libraries.
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec "$here/nginx" "$@"
RUN
chmod +x .carry/nginx/run
carry_check=$(mktemp -d)
echo carried >"$carry_check/probe.txt"
chmod 755 "$carry_check"
coproc NGX { exec env GPUFILE_NGINX="$PWD/.carry/nginx/run" python3 tests/remote/nginx_server.py "$carry_check"; }
read -r _ ngx_port _ _ <&"${NGX[0]}"
if [ "$(curl -s "http://127.0.0.1:$ngx_port/probe.txt")" = carried ]; then
	echo "make_carry: carried nginx serves on 127.0.0.1:$ngx_port"
else
	echo "make_carry: the carried nginx does not serve" >&2
	kill "$NGX_PID"
	exit 1
fi
kill "$NGX_PID"
wait "$NGX_PID" 2>/dev/null || true
rm -rf "$carry_check"
# strace with the libraries it links beyond libc (libunwind), for timing a
# process's system calls there (gpu_run.sh owed STAGE=first1m).
# Left out where strace is not installed here (deps.sh does not ask for it).
rm -rf .carry/strace
if command -v strace >/dev/null; then
	mkdir -p .carry/strace/lib
	cp "$(command -v strace)" .carry/strace/strace
	for l in $(ldd "$(command -v strace)" | awk '/=> \// {print $3}'); do
		case $(basename "$l") in
		# glibc's own libraries are the GPU machine's.
		libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | ld-linux*) ;;
		*) cp -L "$l" .carry/strace/lib/ ;;
		esac
	done
fi

# Zarr on the GPU machine (issue 38's GPU benchmark and test_zarr_gpu): its
# Python has no zarr. Debian's zarr 2.13 and what it imports (asciitree,
# fasteners, numcodecs) are pure Python but for numcodecs' codecs, built for
# Debian's Python: those are left out and the two modules zarr imports in any
# case are replaced by stand-ins that raise when used
# (scripts/carry/numcodecs_stubs; uncompressed arrays only). gpu_run.sh puts
# .carry/python on PYTHONPATH; checked below with only it and NumPy on the path.
# Debian's Python (/usr/bin/python3) is the one these packages belong to.
rm -rf .carry/python
mkdir -p .carry/python
for m in zarr numcodecs asciitree fasteners; do
	d=$(/usr/bin/python3 -c "import os, $m; print(os.path.dirname($m.__file__))")
	cp -r "$d" .carry/python/
done
find .carry/python -name '*.so' -delete
find .carry/python -name __pycache__ -prune -exec rm -rf {} +
rm -rf .carry/python/zarr/tests .carry/python/numcodecs/tests
cp scripts/carry/numcodecs_stubs/*.py .carry/python/numcodecs/
np_only=$(mktemp -d)
ln -s "$(/usr/bin/python3 -c 'import os, numpy; print(os.path.dirname(numpy.__file__))')" "$np_only/numpy"
if ! PYTHONPATH=$PWD/.carry/python:$np_only /usr/bin/python3 -S -c 'import zarr' >/dev/null; then
	echo "make_carry: the carried zarr does not import with only NumPy beside it" >&2
	rm -rf "$np_only"
	exit 1
fi
rm -rf "$np_only"
du -sh .carry
