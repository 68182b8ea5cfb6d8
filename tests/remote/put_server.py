#!/usr/bin/env python3
"""A PUT server for gpufile's upload tests, in C (run as a program) and
in Python (python/tests/test_upload.py imports put_handler): each PUT's
body is stored (201 Created) and served back by GET; a PUT without a
Content-Length, or chunked, is 411; under /deny/ every PUT is 403; under
/busy/ the first PUT of a path is 503 with Retry-After (store["busy-times"]
keeps when each PUT of such a path came).
As a program it listens on 127.0.0.1 at a free port, prints "PORT <n>"
once listening, answers Retry-After: 0 and runs until killed.
Usage: put_server.py
"""
import http.server
import time


def put_handler(store, retry_after="1"):
    """The request handler class of a server keeping its objects in the
    dict store."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _send(self, code, body=b"", headers=()):
            self.send_response(code)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_PUT(self):
            n = int(self.headers.get("Content-Length") or -1)
            if n < 0 or self.headers.get("Transfer-Encoding"):
                return self._send(411)
            body = self.rfile.read(n)
            path = self.path.split("?")[0]
            if path.startswith("/deny/"):
                return self._send(403, b"Forbidden: no writes here")
            if path.startswith("/busy/"):
                times = store.setdefault("busy-times", {})
                times.setdefault(path, []).append(time.monotonic())
                if len(times[path]) == 1:
                    return self._send(503, b"busy",
                                      [("Retry-After", retry_after)])
            store[path] = body
            self._send(201)

        def do_GET(self):
            body = store.get(self.path.split("?")[0])
            self._send(404) if body is None else self._send(200, body)

    return Handler


def main():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                          put_handler({}, retry_after="0"))
    srv.daemon_threads = True
    print("PORT %d" % srv.server_address[1], flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
