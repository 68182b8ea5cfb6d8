#!/usr/bin/env bash
# Installs the Debian 12 packages gpufile needs to build and test, only
# those that are missing. Runs as root, or through sudo when it exists.
#
# When another apt or dpkg holds the dpkg lock or the package lists'
# lock (unattended-upgrades, a second build on the same machine), this
# waits for it up to DEPS_LOCK_TIMEOUT seconds (default 600, longer than a
# routine install takes) with a message, instead of failing at once; when
# the time is up it fails naming the holder. DEPS_LOCK_POLL: seconds
# between tries of apt-get update (default 5).
set -euo pipefail

lock_timeout=${DEPS_LOCK_TIMEOUT:-600}
lock_poll=${DEPS_LOCK_POLL:-5}
for v in "DEPS_LOCK_TIMEOUT=$lock_timeout" "DEPS_LOCK_POLL=$lock_poll"; do
	case ${v#*=} in
	'' | *[!0-9]*)
		echo "deps: ${v%%=*}=\"${v#*=}\": not a whole number of seconds" >&2
		exit 2
		;;
	esac
done

packages=(
	cmake gcc make pkg-config      # build
	liburing-dev libcjson-dev      # io_uring backend, JSON
	fio                            # bench/run_host_bench.sh
	clang libclang-rt-14-dev       # sanitizer runtimes for clang builds
	clang-format                   # the format check of scripts/test.sh
	python3 python3-pytest python3-numpy  # python/ binding tests
	groff-base man-db              # man page checks (tests/pkg/check_man.py)
	python3-venv python3-setuptools python3-wheel  # python/README.md install route
	libcurl4-openssl-dev libssl-dev  # remote sources: HTTP(S) and S3 SigV4
	nginx-light python3-botocore curl  # remote tests: nginx, S3 signature check
	python3-torch                  # drop-ins and distributed loading: torch on CPU, gloo
	python3-fsspec python3-zarr python3-dask python3-distributed  # fsspec, Zarr, Dask
	python3-prometheus-client      # gpufile stats --serve: its OpenMetrics parser checks a scrape
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
echo "deps: (waits up to ${lock_timeout} s for the dpkg lock if another apt holds it)"
export DEBIAN_FRONTEND=noninteractive
# apt 2.6 (Debian 12) waits DPkg::Lock::Timeout seconds for the dpkg
# frontend lock of install, but apt-get update fails at once on the lists
# lock ("Could not get lock /var/lib/apt/lists/lock. It is held by process
# N"), whatever that option says: update waits in the loop below.
apt_get=("${as_root[@]}" apt-get -o "DPkg::Lock::Timeout=$lock_timeout")

update_waiting() {
	local deadline=$((SECONDS + lock_timeout)) log rc
	log=$(mktemp)
	while :; do
		rc=0
		# pipefail: rc is apt-get's status (tee does not fail).
		"${apt_get[@]}" update 2>&1 | tee "$log" || rc=$?
		if [ "$rc" -eq 0 ]; then
			rm -f "$log"
			return 0
		fi
		if ! grep -q 'Could not get lock' "$log"; then
			rm -f "$log"
			return "$rc"
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "deps: apt-get update: the lock is still held after ${lock_timeout} s; giving up (DEPS_LOCK_TIMEOUT sets the wait)" >&2
			rm -f "$log"
			return "$rc"
		fi
		echo "deps: another apt holds the package lists' lock; waiting (up to ${lock_timeout} s in all)" >&2
		sleep "$lock_poll"
	done
}

update_waiting
"${apt_get[@]}" install -y --no-install-recommends "${missing[@]}"
