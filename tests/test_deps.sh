#!/usr/bin/env bash
# scripts/deps.sh and the apt locks: apt-get update that finds the lists'
# lock held is tried again until the lock is free (with a message), up to
# DEPS_LOCK_TIMEOUT; apt-get install is told to wait for the dpkg lock;
# other failures stop at once. apt-get and dpkg-query are faked on PATH, so
# nothing is installed. Usage: test_deps.sh PATH/TO/deps.sh
set -u
deps=${1:?usage: test_deps.sh deps.sh}
if [ "$(id -u)" -ne 0 ]; then
	echo "not root: deps.sh would go through sudo; skipped"
	exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fails=0
fail() {
	echo "FAIL: $*"
	fails=$((fails + 1))
}

# Every package is installed except fio.
cat >"$dir/dpkg-query" <<'EOF'
#!/bin/sh
[ "$3" = fio ] && exit 1
echo "install ok installed"
EOF
# update fails on the lock while $dir/held_updates (a count) is above 0;
# with $dir/broken it fails as if the network were down.
cat >"$dir/apt-get" <<EOF
#!/bin/sh
echo "\$*" >>"$dir/calls"
case "\$*" in
*update*)
	if [ -e "$dir/broken" ]; then
		echo "E: Failed to fetch http://deb.debian.org/" >&2
		exit 100
	fi
	n=\$(cat "$dir/held_updates")
	if [ "\$n" -gt 0 ]; then
		echo \$((n - 1)) >"$dir/held_updates"
		echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)" >&2
		exit 100
	fi
	;;
esac
exit 0
EOF
chmod +x "$dir/dpkg-query" "$dir/apt-get"

run() { # HELD-UPDATES ENV...: runs deps.sh; output in $dir/out, status in $rc
	: >"$dir/calls"
	echo "$1" >"$dir/held_updates"
	shift
	env PATH="$dir:$PATH" DEPS_LOCK_POLL=0 "$@" bash "$deps" >"$dir/out" 2>&1
	rc=$?
}

# The lock is held for two tries of update, then freed: deps.sh waits,
# says so, and installs with install's own wait for the dpkg lock.
run 2
[ "$rc" -eq 0 ] || fail "held lock: deps.sh exits $rc, wanted 0"
[ "$(grep -c update "$dir/calls")" -eq 3 ] ||
	fail "held lock: update run $(grep -c update "$dir/calls") times, wanted 3"
grep -q "waiting (up to 600 s" "$dir/out" || fail "held lock: no waiting message"
grep -q "install .*fio" "$dir/calls" || fail "held lock: fio not installed"
grep -q "DPkg::Lock::Timeout=600 install" "$dir/calls" ||
	fail "install does not wait for the dpkg lock"

# The lock stays held past DEPS_LOCK_TIMEOUT: deps.sh gives up, says why,
# and installs nothing.
run 1000000 DEPS_LOCK_TIMEOUT=0
[ "$rc" -ne 0 ] || fail "lock never freed: deps.sh exits 0"
grep -q "still held after 0 s" "$dir/out" || fail "lock never freed: no message"
grep -q install "$dir/calls" && fail "lock never freed: install ran"

# Any other failure of update stops at once.
touch "$dir/broken"
run 0
[ "$rc" -ne 0 ] || fail "broken update: deps.sh exits 0"
[ "$(grep -c update "$dir/calls")" -eq 1 ] || fail "broken update: tried again"
rm "$dir/broken"

# A bad DEPS_LOCK_TIMEOUT is named.
run 0 DEPS_LOCK_TIMEOUT=ten
[ "$rc" -eq 2 ] && grep -q 'DEPS_LOCK_TIMEOUT="ten"' "$dir/out" ||
	fail "bad DEPS_LOCK_TIMEOUT: exit $rc, $(cat "$dir/out")"

if [ "$fails" -ne 0 ]; then
	echo "test_deps: $fails failure(s); last output:"
	cat "$dir/out"
	exit 1
fi
echo "test_deps: ok"
