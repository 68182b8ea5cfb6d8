#!/usr/bin/env python3
"""A PUT server for gpufile's upload tests in C: each PUT's body is stored
(201 Created) and served back by GET; under /deny/ every PUT is 403; under
/busy/ the first PUT of a path is 503 with Retry-After: 0. Listens on
127.0.0.1 at a free port, prints "PORT <n>" once listening; runs until
killed.
Usage: put_server.py
"""
import http.server
import sys

store = {}
busy_seen = set()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send(self, code, body=b"", headers=()):
        self.send_response(code)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_PUT(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        path = self.path.split("?")[0]
        if path.startswith("/deny/"):
            return self.send(403, b"Forbidden")
        if path.startswith("/busy/") and path not in busy_seen:
            busy_seen.add(path)
            return self.send(503, b"busy", [("Retry-After", "0")])
        store[path] = body
        self.send(201)

    def do_GET(self):
        body = store.get(self.path.split("?")[0])
        self.send(404) if body is None else self.send(200, body)


srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
srv.daemon_threads = True
print("PORT %d" % srv.server_address[1], flush=True)
srv.serve_forever()
