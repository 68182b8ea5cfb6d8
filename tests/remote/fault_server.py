#!/usr/bin/env python3
"""A misbehaving HTTP server for gpufile's remote tests (127.0.0.1 only).

Serves one deterministic object (byte i is (i * 131 + (i >> 9)) & 255) of
SIZE bytes at every path; the first path component picks a behaviour:

  /ok/...             correct 206 range responses
  /flaky503/...       the first attempt of each range: 503, then correct
  /closeonce/...      the first attempt of each range: half the body, then close
  /ignorerange/...    200 with the whole object (Range ignored)
  /longlen/...        Content-Length larger than the body, then close
  /shortlen/...       Content-Length and body shorter than the range
  /shiftrange/...     206 whose Content-Range and bytes start one byte later
  /latestart/...      206 whose Content-Range and bytes start one byte later
                      but end where asked (a range of one byte: correct)
  /e403/...           HEAD 200, every GET 403
  /e404/...           404 for everything
  /stall/...          GET: headers, then no byte for STALL seconds
  /stallonce/...      the first attempt of each range stalls, then correct
  /presigned/...      HEAD 403 (signed for GET only); GET ranges correct
  /grow/...           HEAD says SIZE; each 206 names a total of 2 * SIZE
  /etagswap/...       HEAD: ETag "v1"; GETs: ETag "v2" (a new version)
  /weaketag/...       HEAD: ETag W/"v1"; GETs: W/"v2" (weak: not compared)
  /empty/...          an empty object behind a server without HEAD (405):
                      GET bytes=0-0 is 416 with Content-Range bytes */0
  /chunkedhead/...    HEAD without Content-Length (chunked); GETs correct
  /keepdots/...       correct only for a path holding "/../" as sent (an
                      S3 key is not normalised), else 404
  /emptyget/...       an empty object whose HEAD is refused (403, as for a
                      URL presigned for GET): GETs are 200, Content-Length 0
                      (a server that ignores Range on an empty object)
  /extrabytes/...     each response leaves bytes after its Content-Length
                      on the kept-alive connection: the next response on
                      it comes after them (the first one on a connection
                      is clean)
  /longetag/...       HEAD: a strong ETag of 300 bytes; GETs: another one of
                      300 bytes differing only in its last characters
  /retryafter/N/...   the first attempt of each range (per path): 503 with
                      "Retry-After: N" (seconds), then correct
  /retryafterdate/... the first attempt of each range (per path): 503 with
                      a Retry-After HTTP-date an hour ahead, then correct
  /always503/...      every GET: 503 without Retry-After
  /redirect/...       302 to /ok/obj?token=REDIRECT-SECRET (HEAD and GET)
  /plaincut/...       a server that ignores Range (HEAD without
                      Accept-Ranges, every GET 200 with the whole object)
                      whose second GET of each path (the first read after
                      the probe at open) stops half-way and closes

Prints "PORT <n>" on stdout once listening; runs until killed.
Usage: fault_server.py SIZE [STALL_SECONDS]
"""
import email.utils
import http.server
import socketserver
import sys
import threading
import time

SIZE = int(sys.argv[1])
STALL = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
DATA = bytes(((i * 131) + (i >> 9)) & 255 for i in range(SIZE))
seen = set()
gets = {}  # GETs of each /plaincut/ path
lock = threading.Lock()


def first_time(key):
    with lock:
        if key in seen:
            return False
        seen.add(key)
        return True


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def mode(self):
        return self.path.lstrip("/").split("/", 1)[0]

    def send(self, status, headers, body=b"", close=False):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if body:
            self.wfile.write(body)

    def etag(self, head):
        m = self.mode()
        if m == "longetag":
            return [("ETag", '"%s%s"' % ("e" * 296, "v1" if head else "v2"))]
        if m == "etagswap":
            return [("ETag", '"v1"' if head else '"v2"')]
        if m == "weaketag":
            return [("ETag", 'W/"v1"' if head else 'W/"v2"')]
        return []

    def redirect(self):
        self.send(302, [("Location", "/ok/obj?token=REDIRECT-SECRET"),
                        ("Content-Length", "0")])

    def do_HEAD(self):
        m = self.mode()
        if m == "redirect":
            return self.redirect()
        if m == "e404" or (m == "keepdots" and "/../" not in self.path):
            return self.send(404, [("Content-Length", "0")])
        if m in ("presigned", "emptyget"):
            return self.send(403, [("Content-Length", "0")])
        if m == "empty":
            return self.send(405, [("Content-Length", "0")])
        if m == "chunkedhead":
            return self.send(200, [("Transfer-Encoding", "chunked")])
        if m == "plaincut":
            return self.send(200, [("Content-Length", str(SIZE))])
        self.send(200, [("Content-Length", str(SIZE)),
                        ("Accept-Ranges", "bytes")] + self.etag(True))

    def do_GET(self):
        m = self.mode()
        rng = self.headers.get("Range", "")
        if m == "redirect":
            return self.redirect()
        if m in ("retryafter", "retryafterdate") and \
                first_time((self.path, rng)):
            when = self.path.split("/")[2] if m == "retryafter" else \
                email.utils.formatdate(time.time() + 3600, usegmt=True)
            err = b"slow down"
            return self.send(503, [("Retry-After", when),
                                   ("Content-Length", str(len(err)))], err)
        if m == "plaincut":
            with lock:
                gets[self.path] = nth = gets.get(self.path, 0) + 1
            cut = nth == 2
            return self.send(200, [("Content-Length", str(SIZE))],
                             DATA[:SIZE // 2] if cut else DATA, close=cut)
        if m == "always503":
            err = b"slow down"
            return self.send(503, [("Content-Length", str(len(err)))], err)
        if m == "e404" or (m == "keepdots" and "/../" not in self.path):
            body = b"<html>not found</html>"
            return self.send(404, [("Content-Length", str(len(body)))], body)
        if m == "empty":
            return self.send(416, [("Content-Length", "0"),
                                   ("Content-Range", "bytes */0")])
        if m == "emptyget":
            return self.send(200, [("Content-Length", "0")])
        if m == "extrabytes":
            # What the previous response on this connection sent past
            # its Content-Length reaches the client before this one.
            served = getattr(self, "served", 0)
            self.served = served + 1
            if served:
                self.wfile.write(b"LEFTOVER-BYTES\r\n")
        if m == "e403":
            body = b"<Error>AccessDenied</Error>"
            return self.send(403, [("Content-Length", str(len(body)))], body)
        if not rng.startswith("bytes="):
            return self.send(200, [("Content-Length", str(SIZE))], DATA)
        a, b = (int(x) for x in rng[6:].split("-"))
        b = min(b, SIZE - 1)
        body = DATA[a:b + 1]
        key = (m, a, b)
        total = 2 * SIZE if m == "grow" else SIZE
        ok = [("Content-Length", str(len(body))),
              ("Content-Range", "bytes %d-%d/%d" % (a, b, total))]
        ok += self.etag(False)
        if m == "flaky503" and first_time(key):
            err = b"slow down"
            return self.send(503, [("Content-Length", str(len(err)))], err)
        if m == "closeonce" and first_time(key):
            self.send(206, ok, body[:len(body) // 2], close=True)
            return
        if m == "ignorerange":
            return self.send(200, [("Content-Length", str(SIZE))], DATA)
        if m == "longlen":
            hdr = [("Content-Length", str(len(body) + 100)),
                   ("Content-Range", "bytes %d-%d/%d" % (a, b, SIZE))]
            return self.send(206, hdr, body, close=True)
        if m == "shortlen":
            short = body[:-10]
            hdr = [("Content-Length", str(len(short))),
                   ("Content-Range", "bytes %d-%d/%d" % (a, b, SIZE))]
            return self.send(206, hdr, short)
        if m == "shiftrange" and a + 1 < SIZE:
            body = DATA[a + 1:b + 2]
            hdr = [("Content-Length", str(len(body))),
                   ("Content-Range",
                    "bytes %d-%d/%d" % (a + 1, a + len(body), SIZE))]
            return self.send(206, hdr, body)
        if m == "latestart" and a < b:
            body = DATA[a + 1:b + 1]
            hdr = [("Content-Length", str(len(body))),
                   ("Content-Range", "bytes %d-%d/%d" % (a + 1, b, SIZE))]
            return self.send(206, hdr, body)
        if m == "stall" or (m == "stallonce" and first_time(key)):
            self.send_response(206)
            for k, v in ok:
                self.send_header(k, v)
            self.send_header("Connection", "close")
            self.close_connection = True
            self.end_headers()
            self.wfile.flush()
            time.sleep(STALL)
            return
        self.send(206, ok, body)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # A client that gave up on a stalled or broken response (the point
        # of several modes) resets the connection: not worth a traceback.
        pass


srv = Server(("127.0.0.1", 0), Handler)
print("PORT %d" % srv.server_address[1], flush=True)
srv.serve_forever()
