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
du -sh .carry
