#!/usr/bin/env python3
"""Serves a folder with nginx on 127.0.0.1 over HTTP and HTTPS, for
gpufile's remote tests and bench/remote_bench.sh.

Makes a self-signed certificate for 127.0.0.1 (openssl), writes an
nginx.conf into a temporary prefix, starts nginx in the foreground, waits
until both ports accept connections and prints one line:
    PORT <http-port> <https-port> <ca-file>
then runs until SIGTERM/SIGINT, when it stops nginx and removes the
prefix. The nginx binary is $GPUFILE_NGINX, else `nginx` on PATH, else
/usr/sbin/nginx (a carried copy may need LD_LIBRARY_PATH).
Usage: nginx_server.py FOLDER [WORKERS]
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

root = os.path.abspath(sys.argv[1])
workers = sys.argv[2] if len(sys.argv) > 2 else "2"
nginx = os.environ.get("GPUFILE_NGINX") or shutil.which("nginx") or "/usr/sbin/nginx"
prefix = tempfile.mkdtemp(prefix="gpufile-nginx-")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
http_port, https_port = free_port(), free_port()
# Every temporary folder this nginx was built with, moved into the prefix
# (its defaults, /var/lib/nginx/..., may not exist on a carried copy).
v = subprocess.run([nginx, "-V"], capture_output=True, text=True)
if v.returncode:
    fail("%s -V: %s" % (nginx, v.stderr))
temp = "".join("%s_temp_path %s/%s;\n" % (t.replace("-", "_"), prefix, t)
               for t in re.findall(r"--http-([a-z-]+)-temp-path=", v.stderr))
conf = os.path.join(prefix, "nginx.conf")
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
    server { listen 127.0.0.1:%(http)d; root %(root)s; }
    server {
        listen 127.0.0.1:%(https)d ssl;
        ssl_certificate %(cert)s;
        ssl_certificate_key %(key)s;
        root %(root)s;
    }
}
""" % dict(user="user root;" if os.geteuid() == 0 else "", workers=workers,
           prefix=prefix, temp=temp, http=http_port, https=https_port,
           root=root, cert=cert, key=key))
proc = subprocess.Popen([nginx, "-p", prefix, "-c", conf, "-e", "stderr",
                         "-g", "daemon off;"])


def stop(*_):
    if proc.poll() is None:
        proc.terminate()
        proc.wait()
    shutil.rmtree(prefix, ignore_errors=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
# nginx has no "ready" signal: wait for both ports to accept (bounded).
for _ in range(200):
    if proc.poll() is not None:
        fail("nginx (%s) exited with %d" % (nginx, proc.returncode))
    try:
        for p in (http_port, https_port):
            socket.create_connection(("127.0.0.1", p), 0.5).close()
        break
    except OSError:
        time.sleep(0.05)
else:
    proc.kill()
    fail("nginx did not listen on %d/%d" % (http_port, https_port))
print("PORT %d %d %s" % (http_port, https_port, cert), flush=True)
while True:
    signal.pause()
