"""What a remote read takes from a server's headers, against small servers
on loopback that answer oddly: a Content-Range total past what 64 bits
hold, a Content-Range that is no range at all, and a HEAD refused with
405 (found by a hostile review in session 43)."""
import errno
import http.server

import numpy as np
import pytest

import gpufile
from conftest import in_ci, loopback_server

pytestmark = pytest.mark.skipif("remote" not in gpufile.features() and not in_ci(),
                                reason="built without libcurl")


def server(content_range, size=1, head=405):
    """A server whose HEAD answers head (no Content-Length with 405) and
    whose every GET answers 206 with content_range and the first size
    bytes of b"x" * size."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_HEAD(self):
            self.send_response(head)
            if head == 200:
                self.send_header("Content-Length", str(size))
                self.send_header("Accept-Ranges", "bytes")
            else:
                self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self):
            body = b"x" * size
            rng = self.headers.get("Range", "")
            if rng.startswith("bytes=") and head == 200:
                first, last = (int(v) for v in rng[6:].split("-"))
                body = body[first:last + 1]
            self.send_response(206)
            self.send_header("Content-Range", content_range)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return loopback_server(Handler)


def test_a_total_past_64_bits_is_no_size():
    """bytes 0-0/99999999999999999999999: strtoll saturated and the
    object's size was taken as 2^63 - 1; now such a header is not a
    Content-Range, and the open fails saying so."""
    srv = server("bytes 0-0/99999999999999999999999")
    try:
        with gpufile.defaults.set(http_max_attempts=1):
            with pytest.raises(OSError) as e:
                gpufile.File("http://127.0.0.1:%d/o.bin" % srv.server_address[1])
        assert e.value.errno == errno.EIO, str(e.value)
        assert "without a Content-Range gpufile can read" in str(e.value)
    finally:
        srv.shutdown()


def test_a_range_that_is_none_is_said_so():
    """A 206 whose Content-Range is "bytes -5--1/-7": the message said
    "Content-Range bytes -1--1" (the value meaning "none"); now it says
    there was none it could read."""
    srv = server("bytes -5--1/-7", size=100, head=200)
    try:
        with gpufile.defaults.set(http_max_attempts=1):
            with gpufile.File("http://127.0.0.1:%d/o.bin" % srv.server_address[1]) as f:
                assert f.size() == 100
                with pytest.raises(OSError) as e:
                    f.read(np.zeros(100, dtype=np.uint8))
        assert "without a Content-Range gpufile can read" in str(e.value)
        assert "-1--1" not in str(e.value)
    finally:
        srv.shutdown()


def test_a_refused_head_is_not_a_presigned_url():
    """A plain URL whose server refuses HEAD (405) has its size from a GET
    of byte 0; it was then reported as a "presigned URL" with its
    credentials "in the URL's query", which it has not."""
    srv = server("bytes 0-0/1")
    try:
        with gpufile.File("http://127.0.0.1:%d/plain.bin" % srv.server_address[1]) as f:
            info = f.remote_info()
            assert f.size() == 1
            assert info["kind"] == "http", info
            assert "query" not in info["credentials"], info
    finally:
        srv.shutdown()


def test_an_etag_with_control_bytes_reaches_no_terminal():
    """An object whose ETag changes between the HEAD and the GET, the
    tags holding an ESC sequence that retitles a terminal and a C1 CSI in
    UTF-8: the -ESTALE message shows '?' for each control byte."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _head(self, tag):
            # ESC ] ... BEL, and CSI as UTF-8 (0xc2 0x9b: a C1 control).
            self.send_header("ETag", '"%s\x1b]0;pwned\x07\xc2\x9b"' % tag)
            self.send_header("Accept-Ranges", "bytes")

        def do_HEAD(self):
            self.send_response(200)
            self.send_header("Content-Length", "100")
            self._head("v1")
            self.end_headers()

        def do_GET(self):
            self.send_response(206)
            self.send_header("Content-Range", "bytes 0-99/100")
            self.send_header("Content-Length", "100")
            self._head("v2")
            self.end_headers()
            self.wfile.write(b"x" * 100)

    srv = loopback_server(Handler)
    try:
        with gpufile.File("http://127.0.0.1:%d/o.bin" % srv.server_address[1]) as f:
            with pytest.raises(OSError) as e:
                f.read(np.zeros(100, dtype=np.uint8))
        msg = str(e.value)
        assert e.value.errno == errno.ESTALE, msg
        assert '"v1?]0;pwned???" then' in msg, msg
        assert not any(c in msg for c in "\x1b\x07\x9b\xc2"), msg
    finally:
        srv.shutdown()
