#!/usr/bin/env python3
"""Serves a folder with nginx on 127.0.0.1 over HTTP and HTTPS, for
gpufile's remote tests and bench/remote_bench.sh.

Makes a self-signed certificate for 127.0.0.1 (openssl), writes an
nginx.conf into a temporary prefix, starts nginx in the foreground, waits
until both ports answer with this server's own token and prints one line:
    PORT <http-port> <https-port> <ca-file>
then runs until SIGTERM/SIGINT, when it stops nginx and removes the
prefix. The nginx binary is $GPUFILE_NGINX, else `nginx` on PATH, else
/usr/sbin/nginx (a carried copy may need LD_LIBRARY_PATH).

Ports: nginx cannot listen on port 0 and say which port it got, so free
ports are chosen here and handed to it; between the two another process
(another test running in parallel) may take one. nginx then fails to
bind and exits, and new ports are tried; a port that answers is only
believed when it serves this server's random token, never another
server's reply.
Usage: nginx_server.py FOLDER [WORKERS]
"""
import os
import re
import ssl
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

root = os.path.abspath(sys.argv[1])
workers = sys.argv[2] if len(sys.argv) > 2 else "2"
nginx = os.environ.get("GPUFILE_NGINX") or shutil.which("nginx") or "/usr/sbin/nginx"
prefix = tempfile.mkdtemp(prefix="gpufile-nginx-")


def free_ports(n):
    """n different free ports. Each socket stays bound until all are
    chosen: ports asked for one after another can come back equal (the
    first is free again once its socket closes), and nginx, given one
    port for both servers, takes the HTTP one for TLS too and exits with
    'no "ssl_certificate" is defined' (a CI run did, once)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def fail(msg):
    sys.stderr.write("nginx_server: %s\n" % msg)
    shutil.rmtree(prefix, ignore_errors=True)
    sys.exit(1)


cert, key = os.path.join(prefix, "cert.pem"), os.path.join(prefix, "key.pem")
r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2",
                    "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   capture_output=True)
if r.returncode:
    fail("openssl: " + r.stderr.decode(errors="replace"))
token = os.urandom(16).hex()
# Every temporary folder this nginx was built with, moved into the prefix
# (its defaults, /var/lib/nginx/..., may not exist on a carried copy).
v = subprocess.run([nginx, "-V"], capture_output=True, text=True)
if v.returncode:
    fail("%s -V: %s" % (nginx, v.stderr))
temp = "".join("%s_temp_path %s/%s;\n" % (t.replace("-", "_"), prefix, t)
               for t in re.findall(r"--http-([a-z-]+)-temp-path=", v.stderr))
conf = os.path.join(prefix, "nginx.conf")


def write_conf(http_port, https_port):
    with open(conf, "w") as f:
        f.write("""%(user)s
worker_processes %(workers)s;
pid %(prefix)s/nginx.pid;
error_log stderr warn;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    default_type application/octet-stream;
    %(temp)s
    server {
        listen 127.0.0.1:%(http)d; root %(root)s;
        location = /.gpufile-nginx-token { return 200 "%(token)s"; }
    }
    server {
        listen 127.0.0.1:%(https)d ssl;
        ssl_certificate %(cert)s;
        ssl_certificate_key %(key)s;
        root %(root)s;
        location = /.gpufile-nginx-token { return 200 "%(token)s"; }
    }
}
""" % dict(user="user root;" if os.geteuid() == 0 else "", workers=workers,
           prefix=prefix, temp=temp, http=http_port, https=https_port,
           root=root, cert=cert, key=key, token=token))


def answers_token(port, tls):
    """Whether 127.0.0.1:port serves this server's token (bounded)."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), 0.5)
        if tls:
            ctx = ssl.create_default_context(cafile=cert)
            sock = ctx.wrap_socket(sock, server_hostname="127.0.0.1")
        with sock:
            sock.sendall(b"GET /.gpufile-nginx-token HTTP/1.0\r\n"
                         b"Host: 127.0.0.1\r\n\r\n")
            reply = b""
            while len(reply) < 4096:
                part = sock.recv(4096)
                if not part:
                    break
                reply += part
        return reply.startswith(b"HTTP/1.1 200") and \
            reply.endswith(token.encode())
    except (OSError, ssl.SSLError):
        return False


proc = None


def stop(*_):
    if proc is not None and proc.poll() is None:
        proc.terminate()
        proc.wait()
    shutil.rmtree(prefix, ignore_errors=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
# nginx has no "ready" signal: wait until both ports serve the token
# (bounded). A port taken by another process in the meantime makes nginx
# exit with "Address already in use": then again with new ports.
for attempt in range(20):
    http_port, https_port = free_ports(2)
    write_conf(http_port, https_port)
    proc = subprocess.Popen([nginx, "-p", prefix, "-c", conf, "-e", "stderr",
                             "-g", "daemon off;"], stderr=subprocess.PIPE,
                            text=True)
    ready = False
    for _ in range(200):
        if proc.poll() is not None:
            break
        ready = answers_token(http_port, False) and \
            answers_token(https_port, True)
        if ready:
            break
        time.sleep(0.05)
    if ready:
        break
    if proc.poll() is None:
        proc.kill()
        proc.wait()
        fail("nginx did not serve on %d/%d" % (http_port, https_port))
    err = proc.stderr.read()
    if "Address already in use" not in err:
        fail("nginx (%s) exited with %d: %s" % (nginx, proc.returncode, err))
else:
    fail("no free port pair after 20 tries")
# From here on nginx's warnings go to this process's stderr, as before.
threading.Thread(target=lambda: shutil.copyfileobj(proc.stderr, sys.stderr),
                 daemon=True).start()
print("PORT %d %d %s" % (http_port, https_port, cert), flush=True)
while True:
    signal.pause()
