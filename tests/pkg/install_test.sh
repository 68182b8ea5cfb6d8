#!/usr/bin/env bash
# Installs the build into a fresh prefix, as a user would
# (cmake --install BUILD --prefix P), and checks that from there:
#   - a C program builds and runs with pkg-config (shared, and static with
#     pkg-config --static), and with find_package(gpufile) (shared and
#     static targets);
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
# Dependencies (liburing.pc, libcjson.pc) may sit on a path the caller set.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}

echo "== cmake --install $build --prefix $prefix"
if ! cmake --install "$build" --prefix "$prefix" >"$work/install.log" 2>&1; then
	cat "$work/install.log"
	fail "cmake --install"
	exit 1
fi
libdir=$(sed -n 's/^libdir=\${prefix}\///p' "$build/gpufile.pc")
[ "$libdir" = lib ] || export PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig:$PKG_CONFIG_PATH

for f in include/gpufile.h "$libdir/libgpufile.a" "$libdir/libgpufile.so" \
	"$libdir/pkgconfig/gpufile.pc" "$libdir/cmake/gpufile/gpufileConfig.cmake" \
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
echo "  static: $(pkg-config --static --libs gpufile)"

# loaded_gpufile BINARY: the real path of the libgpufile.so BINARY loads,
# or "".
loaded_gpufile() {
	local path
	path=$(ldd "$1" 2>/dev/null | sed -n 's/.*libgpufile\.so[^ ]* => \(\/[^ ]*\) .*/\1/p')
	[ -n "$path" ] && readlink -f "$path"
}
installed_so=$(readlink -f "$prefix/$libdir/libgpufile.so")

# run NAME BINARY LINKAGE: runs the program; LINKAGE shared: it must load
# the installed libgpufile.so; static: no libgpufile.so at all.
run() {
	local name=$1 bin=$2 linkage=$3 out libs
	out=$("$bin" "$work/data.txt" 2>&1) || {
		fail "$name: run: $out"
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

echo "== pkg-config"
# shellcheck disable=SC2046
if $cc -o "$work/pc_shared" "$src/tests/pkg/consumer/main.c" \
	$(pkg-config --cflags --libs gpufile) -Wl,-rpath,"$prefix/$libdir"; then
	run "pkg-config, shared" "$work/pc_shared" shared
else
	fail "pkg-config, shared: build"
fi
# The static library by name (-l:libgpufile.a), with every flag
# pkg-config --static gives for what it needs (Libs.private, Requires.private).
static_libs=$(pkg-config --static --libs gpufile | sed 's/-lgpufile\b/-l:libgpufile.a/')
# shellcheck disable=SC2086
if $cc -o "$work/pc_static" "$src/tests/pkg/consumer/main.c" \
	$(pkg-config --cflags gpufile) $static_libs; then
	run "pkg-config --static" "$work/pc_static" static
else
	fail "pkg-config --static: build"
fi

echo "== find_package(gpufile)"
for target in gpufile::gpufile gpufile::gpufile_static; do
	b=$work/cmake_${target##*::}
	if cmake -S "$src/tests/pkg/consumer" -B "$b" -DCMAKE_PREFIX_PATH="$prefix" \
		-DGPUFILE_TARGET="$target" -DCMAKE_C_COMPILER="$cc" \
		>"$b.log" 2>&1 && cmake --build "$b" >>"$b.log" 2>&1; then
		linkage=shared
		[ "$target" = gpufile::gpufile_static ] && linkage=static
		run "find_package, $target" "$b/consumer" "$linkage"
	else
		tail -30 "$b.log"
		fail "find_package, $target: configure or build"
	fi
done

echo "== the installed tool"
out=$(cd / && "$prefix/bin/gpufile" --version 2>&1)
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
