#!/usr/bin/env bash
# Installs the build into a fresh prefix, as a user would
# (cmake --install BUILD --prefix P), and checks that from there:
#   - a C program builds with the README's pkg-config line (shared, no
#     -Wl,-rpath of its own), with pkg-config --libs gpufile-static, and
#     with find_package(gpufile) (shared and static targets), and each
#     runs WITHOUT LD_LIBRARY_PATH; the static ones load no libgpufile.so;
#   - gpufile.pc needs no other .pc file (a shared consumer needs no -dev
#     package of gpufile's dependencies; nor does find_package(gpufile)
#     without pkg-config), and gpufile-static.pc names every library the
#     archive's undefined symbols come from (nm -u);
#   - the CMake package names no file outside the prefix and has no empty
#     $<LINK_ONLY:>; moved to another folder, the prefix still builds the
#     CMake consumers (shared and static) and pkg-config's;
#   - the installed tool runs (its RPATH finds the installed library, not
#     the build tree's) and reports the same version as gpufile.pc;
#   - the header, gpufile.pc, the CMake package and the man pages are
#     installed, and the private header is not.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR. Exit 0 pass, 1 fail.
set -uo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpufile-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cc=${CC:-cc}
fails=0

fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}
ok() { echo "ok    $*"; }

# No path of the build tree may help the installed files: drop from
# LD_LIBRARY_PATH every folder holding a libgpufile.so, and keep the rest
# (where a dependency such as a carried libcjson.so may live).
unset GPUFILE_LIBRARY
keep=()
IFS=: read -ra dirs <<<"${LD_LIBRARY_PATH:-}"
for d in "${dirs[@]}"; do
	[ -n "$d" ] && ! compgen -G "$d/libgpufile.so*" >/dev/null && keep+=("$d")
done
LD_LIBRARY_PATH=$(IFS=:; echo "${keep[*]}")
export LD_LIBRARY_PATH
# The built programs run without LD_LIBRARY_PATH: their RPATH (from
# gpufile.pc, or CMake's) must find the installed library. Only where the
# caller's path holds a dependency (a carried libcjson.so; no
# libgpufile.so, dropped above) is that kept.
if [ -n "$LD_LIBRARY_PATH" ]; then
	app_env=(env "LD_LIBRARY_PATH=$LD_LIBRARY_PATH")
	echo "note: the programs run with LD_LIBRARY_PATH=$LD_LIBRARY_PATH (dependencies only)"
else
	app_env=(env -u LD_LIBRARY_PATH)
fi
# Dependencies (liburing.pc, libcjson.pc) may sit on a path the caller set.
caller_pc_path=${PKG_CONFIG_PATH:-}

echo "== cmake --install $build --prefix $prefix"
if ! cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1; then
	cat "$work/install.log"
	fail "cmake --install"
	exit 1
fi
libdir=$(sed -n 's/^libdir=\${prefix}\///p' "$build/gpufile.pc")
export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig${caller_pc_path:+:$caller_pc_path}

for f in include/gpufile.h "$libdir/libgpufile.a" "$libdir/libgpufile.so" \
	"$libdir/pkgconfig/gpufile.pc" "$libdir/pkgconfig/gpufile-static.pc" \
	"$libdir/cmake/gpufile/gpufileConfig.cmake" \
	"$libdir/cmake/gpufile/gpufileConfigVersion.cmake" bin/gpufile \
	share/man/man1/gpufile.1 share/man/man3/gpufile_open.3; do
	if [ -e "$prefix/$f" ]; then ok "installed $f"; else fail "not installed: $f"; fi
done
[ -e "$prefix/include/gpufile_private.h" ] &&
	fail "include/gpufile_private.h installed (it is not public)"
missing=0
for p in "$src"/docs/man/man3/*.3; do
	cmp -s "$p" "$prefix/share/man/man3/${p##*/}" || {
		fail "docs/man/man3/${p##*/} not installed as share/man/man3/${p##*/}"
		missing=1
	}
done
[ "$missing" -eq 0 ] && ok "every docs/man/man3 page installed"

version=$(pkg-config --modversion gpufile) || fail "pkg-config --modversion gpufile"
echo "gpufile.pc: version $version"
echo "  cflags: $(pkg-config --cflags gpufile)"
echo "  libs:   $(pkg-config --libs gpufile)"
echo "  static: $(pkg-config --libs gpufile-static)"

# loaded_gpufile BINARY: the real path of the libgpufile.so BINARY loads
# (as it runs here: without LD_LIBRARY_PATH), or "".
loaded_gpufile() {
	local path
	path=$("${app_env[@]}" ldd "$1" 2>/dev/null | sed -n 's/.*libgpufile\.so[^ ]* => \(\/[^ ]*\) .*/\1/p')
	[ -n "$path" ] && readlink -f "$path"
}

# run NAME BINARY LINKAGE: runs the program without LD_LIBRARY_PATH;
# LINKAGE shared: it must load the installed libgpufile.so ($installed_so);
# static: no libgpufile.so at all.
run() {
	local name=$1 bin=$2 linkage=$3 out libs
	out=$("${app_env[@]}" "$bin" "$work/data.txt" 2>&1) || {
		fail "$name: run (no LD_LIBRARY_PATH): $out"
		return
	}
	libs=$(loaded_gpufile "$bin")
	if [ "$linkage" = shared ] && [ "$libs" != "$installed_so" ]; then
		fail "$name: does not load the installed library: ${libs:-none}"
	elif [ "$linkage" = static ] && [ -n "$libs" ]; then
		fail "$name: linked with the static library, yet loads $libs"
	elif ! grep -q "consumer ok $version" <<<"$out"; then
		fail "$name: printed '$out', wanted 'consumer ok $version'"
	else
		ok "$name: $out"
	fi
}

# pc_build NAME LINKAGE PKG-CONFIG-ARGS...: builds the consumer as the
# README says (cc app.c $(pkg-config ...), nothing else) and runs it.
pc_build() {
	local name=$1 linkage=$2 flags
	shift 2
	if ! flags=$(pkg-config "$@"); then
		fail "$name: pkg-config $*"
		return
	fi
	# shellcheck disable=SC2086
	if $cc -o "$work/$name" "$src/tests/pkg/consumer/main.c" $flags; then
		run "$name (cc main.c \$(pkg-config $*))" "$work/$name" "$linkage"
	else
		fail "$name: build with $flags"
	fi
}

# cmake_build NAME TARGET [CMAKE-ARGS...]: configures, builds and runs the
# find_package(gpufile) consumer.
cmake_build() {
	local name=$1 target=$2 b=$work/$1 linkage=shared
	shift 2
	[ "$target" = gpufile::gpufile_static ] && linkage=static
	rm -rf "$b"
	if cmake -S "$src/tests/pkg/consumer" -B "$b" -DCMAKE_PREFIX_PATH="$prefix" \
		-DGPUFILE_TARGET="$target" -DCMAKE_C_COMPILER="$cc" "$@" \
		>"$b.log" 2>&1 && cmake --build "$b" >>"$b.log" 2>&1; then
		run "$name: find_package, $target" "$b/consumer" "$linkage"
	else
		tail -30 "$b.log"
		fail "$name: find_package, $target: configure or build"
	fi
}

# The checks of the installed package files themselves.
check_package_files() {
	local pc=$prefix/$libdir/pkgconfig cm=$prefix/$libdir/cmake/gpufile
	local static_libs undef dep sym flag bad

	# A shared consumer's pkg-config must not need liburing.pc or
	# libcjson.pc (Requires.private is resolved even for --libs): with
	# only the prefix's .pc files visible, the README's line works.
	if grep -q '^Requires' "$pc/gpufile.pc"; then
		fail "gpufile.pc: $(grep '^Requires' "$pc/gpufile.pc") (a shared consumer would need those -dev packages)"
	elif PKG_CONFIG_LIBDIR=$pc pkg-config --cflags --libs gpufile >/dev/null; then
		ok "gpufile.pc: no Requires; pkg-config --libs gpufile works with no other .pc file"
	else
		fail "PKG_CONFIG_LIBDIR=$pc pkg-config --libs gpufile"
	fi
	if pkg-config --libs gpufile | grep -q -- "-Wl,-rpath,$prefix/"; then
		ok "gpufile.pc: -Wl,-rpath for a prefix outside the linker's own folders"
	else
		fail "gpufile.pc: no -Wl,-rpath for $prefix/$libdir: $(pkg-config --libs gpufile)"
	fi
	# Every library the archive's undefined symbols come from is named.
	static_libs=" $(pkg-config --static --libs gpufile-static) "
	undef=$(nm -u "$prefix/$libdir/libgpufile.a" 2>/dev/null | awk '{print $NF}' | sort -u)
	grep -q -- ' -l:libgpufile.a ' <<<"$static_libs" ||
		fail "gpufile-static.pc: no -l:libgpufile.a in '$static_libs'"
	bad=0
	for dep in 'io_uring_:uring' 'cJSON_:cjson' 'curl_:curl' 'EVP_:crypto' \
		'HMAC:crypto' 'pthread_create:pthread' 'dlopen:dl' 'log:m'; do
		sym=${dep%%:*} flag=${dep#*:}
		if grep -q "^$sym" <<<"$undef" &&
			! grep -Eq -- " -l($flag|:lib$flag\\.so[.0-9]*) " <<<"$static_libs"; then
			fail "libgpufile.a uses $(grep -m1 "^$sym" <<<"$undef") but gpufile-static.pc has no -l$flag"
			bad=1
		fi
	done
	for flag in m pthread dl; do
		grep -q -- " -l$flag " <<<"$static_libs" ||
			{ fail "gpufile-static.pc: no -l$flag" && bad=1; }
	done
	[ "$bad" -eq 0 ] && ok "gpufile-static.pc names what libgpufile.a needs:$static_libs"
	# The CMake package: no file outside the prefix (a link item that is
	# an absolute path, a folder of this machine's), no empty LINK_ONLY.
	if grep -n -E 'INTERFACE_LINK_LIBRARIES.*["; ]/|\$<LINK_ONLY:>' "$cm"/*.cmake ||
		grep -n -F -e "$build" -e "$src" -e /usr/lib -e /usr/include -e /lib/x86_64 "$cm"/*.cmake; then
		fail "$cm: an absolute path or an empty \$<LINK_ONLY:> (above)"
	else
		ok "the CMake package names no absolute path and no empty \$<LINK_ONLY:>"
	fi
}

installed_so=$(readlink -f "$prefix/$libdir/libgpufile.so")
check_package_files

echo "== pkg-config"
pc_build pc_shared shared --cflags --libs gpufile
pc_build pc_static static --cflags --libs gpufile-static
pc_build pc_static2 static --static --cflags --libs gpufile-static

echo "== find_package(gpufile)"
cmake_build cmake_shared gpufile::gpufile
cmake_build cmake_static gpufile::gpufile_static
cmake_build cmake_static_required gpufile::gpufile_static -DGPUFILE_COMPONENTS=static
# Required, and not to be found: find_package fails, naming what.
b=$work/cmake_static_nodeps
if cmake -S "$src/tests/pkg/consumer" -B "$b" -DCMAKE_PREFIX_PATH="$prefix" \
	-DGPUFILE_TARGET=gpufile::gpufile_static -DGPUFILE_COMPONENTS=static \
	-DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON -DCMAKE_C_COMPILER="$cc" >"$b.log" 2>&1; then
	fail "find_package(gpufile COMPONENTS static) without pkg-config: configured"
elif grep -q 'PkgConfig' "$b.log"; then
	ok "find_package(gpufile COMPONENTS static) without pkg-config: fails naming PkgConfig"
else
	tail -20 "$b.log"
	fail "find_package(gpufile COMPONENTS static) without pkg-config: no word of PkgConfig"
fi
# A shared consumer where no dependency can be looked up (as on a
# machine without liburing-dev, libcjson-dev, ...): still found, builds.
cmake_build cmake_shared_nodeps gpufile::gpufile -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON

echo "== the prefix moved to another folder"
moved=$work/moved/elsewhere
mkdir -p "${moved%/*}"
if mv "$prefix" "$moved"; then
	prefix=$moved
	installed_so=$(readlink -f "$prefix/$libdir/libgpufile.so")
	export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig${caller_pc_path:+:$caller_pc_path}
	cmake_build moved_cmake_shared gpufile::gpufile
	cmake_build moved_cmake_static gpufile::gpufile_static
	pc_build moved_pc_shared shared --cflags --libs gpufile
	pc_build moved_pc_static static --cflags --libs gpufile-static
else
	fail "mv $prefix $moved"
fi

echo "== the installed tool"
out=$(cd / && "${app_env[@]}" "$prefix/bin/gpufile" --version 2>&1)
if grep -q "^gpufile $version " <<<"$out"; then
	ok "bin/gpufile --version: $out"
else
	fail "bin/gpufile --version printed '$out', wanted 'gpufile $version ...'"
fi
libs=$(loaded_gpufile "$prefix/bin/gpufile")
[ "$libs" = "$installed_so" ] &&
	ok "bin/gpufile loads $prefix/$libdir/libgpufile.so (RPATH)" ||
	fail "bin/gpufile loads '${libs:-nothing}', not the installed library"
if command -v man >/dev/null; then
	# gpufile_close has no page of its own: its stub sources gpufile_open.3.
	for name in gpufile_open gpufile_close; do
		page=$(MANPATH=$prefix/share/man man -w "$name" 2>/dev/null)
		text=$(MANPATH=$prefix/share/man MANWIDTH=80 man "$name" 2>/dev/null)
		if [ -n "$page" ] && grep -q "gpufile_close, gpufile_size" <<<"$text"; then
			ok "man $name shows the gpufile_open(3) page ($page)"
		else
			fail "MANPATH=$prefix/share/man man $name: no page, or not gpufile_open(3)"
		fi
	done
fi

echo "install test: $fails failure(s)"
[ "$fails" -eq 0 ]
