#!/usr/bin/env bash
# Installs s3rver (an S3 server in Node.js, from npm; not packaged by
# Debian) into .deps/s3rver for the remote tests, once:
#   scripts/s3rver.sh          prints the s3rver program's path
# npm comes from Debian (apt-get install npm) when the machine has none.
# s3rver checks SigV4 signatures itself (credentials S3RVER/S3RVER), so a
# read through it is a check of gpufile's signing by a program that is
# not gpufile. Exits non-zero, saying why, when it cannot be installed.
set -euo pipefail
cd "$(dirname "$0")/.."
version=3.7.1
dir=$PWD/.deps/s3rver
bin=$dir/node_modules/.bin/s3rver
if [ -x "$bin" ] && [ "$(cat "$dir/.version" 2>/dev/null)" = "$version" ]; then
	echo "$bin"
	exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "s3rver.sh: npm is missing; run as root to install it (apt-get install npm)" >&2
		exit 1
	fi
	echo "s3rver.sh: installing npm from Debian" >&2
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 \
		install -y --no-install-recommends npm >&2
fi
mkdir -p "$dir"
echo "s3rver.sh: npm install s3rver@$version into $dir" >&2
if ! npm install --prefix "$dir" --no-audit --no-fund --loglevel=error \
	"s3rver@$version" >&2; then
	echo "s3rver.sh: npm install s3rver@$version failed (is the npm registry reachable?)" >&2
	exit 1
fi
echo "$version" >"$dir/.version"
echo "$bin"
