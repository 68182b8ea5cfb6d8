#!/usr/bin/env bash
# Installs the Debian 12 packages gpufile needs to build and test, only
# those that are missing. Runs as root, or through sudo when it exists.
set -euo pipefail

packages=(
	cmake gcc make pkg-config      # build
	liburing-dev libcjson-dev      # io_uring backend, JSON
	fio                            # bench/run_host_bench.sh
	clang libclang-rt-14-dev       # sanitizer runtimes for clang builds
	clang-format                   # the format check of scripts/test.sh
	python3 python3-pytest python3-numpy  # python/ binding tests
	libcurl4-openssl-dev libssl-dev  # remote sources: HTTP(S) and S3 SigV4
	nginx-light python3-botocore curl  # remote tests: nginx, S3 signature check
)

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
		grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "deps: all ${#packages[@]} packages present"
	exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
	as_root=()
elif command -v sudo >/dev/null 2>&1; then
	as_root=(sudo)
else
	echo "deps: missing ${missing[*]}; run as root or install sudo" >&2
	exit 1
fi

echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update
"${as_root[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
