#!/usr/bin/env python3
"""`python3 -m http.server` for gpufile's remote tests: the standard
library's SimpleHTTPRequestHandler (which ignores Range: every GET is 200
with the whole file, and its HEAD says nothing of Accept-Ranges), serving
FOLDER on 127.0.0.1 at a free port. Prints "PORT <n>" once listening;
runs until killed.
Usage: plain_server.py FOLDER
"""
import functools
import http.server
import sys


class Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        # The client stops a 200 body once it has the bytes it asked
        # for (a read from offset 0, the Range probe at open): the
        # broken pipe is expected, not worth a traceback.
        pass


handler = functools.partial(Handler, directory=sys.argv[1])
srv = Server(("127.0.0.1", 0), handler)
print("PORT %d" % srv.server_address[1], flush=True)
srv.serve_forever()
