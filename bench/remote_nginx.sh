# The nginx setup of the remote benchmarks (remote_bench.sh,
# remote_must_show.sh), which source it from the repository's root:
#   . bench/remote_nginx.sh NAME
# makes dir, a fresh folder NAME.XXXXXX under WORKDIR (default
# /root/gpufile-bench, else /tmp) that nginx's workers can read, and
# removes it at exit after stopping nginx; uses the carried .carry/nginx
# where there is no nginx. Then
#   nginx_serve
# serves dir with nginx on 127.0.0.1 (tests/remote/nginx_server.py,
# NGINX_WORKERS workers, default 8) and sets port.
work=${WORKDIR:-/root/gpufile-bench}
mkdir -p "$work" 2>/dev/null || work=/tmp
dir=$(mktemp -d "$work/$1.XXXXXX")
chmod 755 "$dir"
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ] &&
	[ -x "$root/.carry/nginx/run" ]; then
	export GPUFILE_NGINX=$root/.carry/nginx/run
fi
cleanup() {
	[ -n "${NGX_PID:-}" ] && kill "$NGX_PID" 2>/dev/null
	wait 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT

# Sets port (NGX and NGX_PID: the server's coprocess).
nginx_serve() {
	coproc NGX { exec python3 tests/remote/nginx_server.py "$dir" "${NGINX_WORKERS:-8}"; }
	read -r _ port _ _ <&"${NGX[0]}"
}
