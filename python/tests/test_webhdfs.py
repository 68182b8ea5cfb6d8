"""WebHDFS reads (issue 36 item 3) through gpufile.File against a small
WebHDFS started here on loopback: a namenode answering GETFILESTATUS with
FileStatus JSON and OPEN with a 307 redirect to a datanode, which serves
the bytes of offset/length (and refuses a request without them)."""
import errno
import http.server
import json
import urllib.parse

import numpy as np
import pytest

import gpufile
from conftest import (answer, in_ci, loopback_server, needs_gpu,
                      run_with_fake_driver, trickle)

pytestmark = pytest.mark.skipif("remote" not in gpufile.features() and not in_ci(),
                                reason="built without libcurl")

SIZE = (3 << 20) + 4321
PATH = "/user/alice/data.bin"


def expected(off, n):
    i = np.arange(off, off + n, dtype=np.uint64)
    return ((i * 37 + (i >> 11)) & 255).astype(np.uint8)


DATA = expected(0, SIZE).tobytes()


@pytest.fixture(scope="module")
def webhdfs():
    """(namenode port, log of (who, method, path, query dict)). The
    datanode answers the first OPEN of each busy= value 503 with
    Retry-After: 1."""
    log = []
    busy_seen = set()

    class Datanode(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            q = dict(urllib.parse.parse_qsl(url.query))
            log.append(("datanode", "GET", url.path, q))
            if q.get("op") != "OPEN" or "offset" not in q or "length" not in q:
                return self._send(400, b'{"error":"op, offset, length"}')
            off, n = int(q["offset"]), int(q["length"])
            if "busy" in q and q["busy"] not in busy_seen:
                busy_seen.add(q["busy"])
                self.send_response(503)
                self.send_header("Retry-After", "1")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            self._send(200, DATA[off:off + n], "application/octet-stream")

        def _send(self, code, body, ctype="application/json"):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    datanode = loopback_server(Datanode)

    class Namenode(Datanode):
        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            q = dict(urllib.parse.parse_qsl(url.query))
            log.append(("namenode", "GET", url.path, q))
            if not url.path.startswith("/webhdfs/v1/"):
                return self._send(404, b"{}")
            path = url.path[len("/webhdfs/v1"):]
            if path == "/user/alice":
                status = {"type": "DIRECTORY", "length": 0}
            elif path == PATH:
                status = {"type": "FILE", "length": SIZE,
                          "pathSuffix": "", "replication": 3}
            else:
                return self._send(404, json.dumps({"RemoteException": {
                    "exception": "FileNotFoundException",
                    "message": "File does not exist: " + path}}).encode())
            if q.get("op") == "GETFILESTATUS":
                return self._send(200, json.dumps(
                    {"FileStatus": status}).encode())
            if q.get("op") == "OPEN":
                self.send_response(307)
                self.send_header("Location", "http://127.0.0.1:%d%s?%s" % (
                    datanode.server_address[1], url.path, url.query))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            return self._send(400, b'{"error":"op"}')

    namenode = loopback_server(Namenode)
    yield namenode.server_address[1], log
    namenode.shutdown()
    datanode.shutdown()


def test_webhdfs_url_reads_through_the_datanode(webhdfs):
    port, log = webhdfs
    del log[:]
    with gpufile.defaults.set(remote_task_size=1 << 20):
        with gpufile.File("webhdfs://127.0.0.1:%d%s" % (port, PATH)) as f:
            assert f.size() == SIZE
            out = np.zeros(SIZE, dtype=np.uint8)
            assert f.read(out) == SIZE
            assert (out == expected(0, SIZE)).all()
            part = np.zeros(100001, dtype=np.uint8)
            assert f.pread(part, file_offset=2000000).get() == 100001
            assert (part == expected(2000000, 100001)).all()
    ops = [e[3].get("op") for e in log if e[0] == "namenode"]
    assert ops[0] == "GETFILESTATUS"
    reads = [e[3] for e in log if e[0] == "datanode"]
    # Every range went to the datanode by OPEN's redirect, with its
    # offset and length: 4 tasks of 1 MiB, then the pread's two (split at
    # the 1 MiB task boundary 2 MiB).
    assert sorted((int(q["offset"]), int(q["length"])) for q in reads) == sorted([
        (0, 1 << 20), (1 << 20, 1 << 20), (2 << 20, 1 << 20), (3 << 20, 4321),
        (2000000, (2 << 20) - 2000000),
        (2 << 20, 2000000 + 100001 - (2 << 20))])


def test_open_answered_503_waits_as_retry_after_asks(webhdfs, capfd):
    """An OPEN whose datanode answers 503 + Retry-After: 1 is tried again
    after that second (the wait rule of remote reads, http_policy.c);
    http_verbose logs each exchange, its redirect and the wait, the URL's
    query (a delegation token) redacted."""
    port, log = webhdfs
    del log[:]
    url = "webhdfs://127.0.0.1:%d%s?busy=once&delegation=SECRET" % (port, PATH)
    with gpufile.defaults.set(http_verbose=1, http_retry_after_max=60):
        with gpufile.File(url) as f:
            part = np.zeros(1000, dtype=np.uint8)
            assert f.pread(part, file_offset=5000).get() == 1000
    assert (part == expected(5000, 1000)).all()
    err = capfd.readouterr().err
    assert "(Retry-After: 1 s)" in err, err
    namenode = "http://127.0.0.1:%d/webhdfs/v1%s?<query redacted>" % (port,
                                                                     PATH)
    assert "gpufile: http: GET %s -> HTTP 503 (redirected to " % namenode \
        in err, err
    assert "gpufile: http: GET %s -> HTTP 200 (redirected to " % namenode \
        in err, err
    assert "SECRET" not in err, err
    opens = [e for e in log if e[0] == "datanode"]
    assert len(opens) == 2 and all(e[3]["busy"] == "once" for e in opens)


def test_remote_info_counts_the_requests(webhdfs):
    """remote_info() of a WebHDFS handle: GETFILESTATUS, then each OPEN's
    attempt (the namenode's redirect and the datanode: two requests, one
    hop), the retry of the OPEN answered 503, the ranges and bytes."""
    port, _ = webhdfs
    url = "webhdfs://127.0.0.1:%d%s?busy=counted" % (port, PATH)
    with gpufile.defaults.set(remote_task_size=1 << 20,
                              http_retry_after_max=0):
        with gpufile.File(url) as f:
            info = f.remote_info()
            assert info["requests"] == 1 and info["ranges"] == 0, info
            assert info["size"] == SIZE, info
            out = np.zeros(SIZE, dtype=np.uint8)
            assert f.read(out) == SIZE
            info = f.remote_info()
    assert out.tobytes() == DATA
    assert info["ranges"] == 4 and info["bytes"] == SIZE, info
    assert info["retries"] == 1 and info["failures"] == 0, info
    assert info["redirects"] == 5, info
    assert info["requests"] == 1 + 2 * 5, info


def test_batch_read(webhdfs):
    """A batch's entries on a WebHDFS handle are read by OPEN requests
    (they went to remote.c's ranges, which knew no size: 0 bytes each)."""
    port, _ = webhdfs
    with gpufile.File("webhdfs://127.0.0.1:%d%s" % (port, PATH)) as f:
        bufs = [np.zeros(5000, dtype=np.uint8) for _ in range(3)]
        entries = [(f, bufs[i], None, i * 7000) for i in range(3)]
        assert gpufile.batch_read(entries) == [5000] * 3
        tail = [(f, np.zeros(10, dtype=np.uint8), None, SIZE - 4)]
        assert gpufile.batch_read(tail) == [4]
    for i in range(3):
        assert (bufs[i] == expected(i * 7000, 5000)).all(), i


def test_http_webhdfs_url_keeps_its_parameters(webhdfs):
    port, log = webhdfs
    del log[:]
    url = "http://127.0.0.1:%d/webhdfs/v1%s?op=OPEN&user.name=alice" % (
        port, PATH)
    with gpufile.File(url) as f:
        assert f.size() == SIZE
        out = np.zeros(5000, dtype=np.uint8)
        assert f.pread(out, file_offset=SIZE - 5000).get() == 5000
        assert (out == expected(SIZE - 5000, 5000)).all()
    assert log and all(e[3].get("user.name") == "alice" for e in log)
    assert {e[3]["op"] for e in log} == {"GETFILESTATUS", "OPEN"}


def test_missing_file_names_the_url(webhdfs):
    port, _ = webhdfs
    url = "webhdfs://127.0.0.1:%d/user/alice/nothing.bin?delegation=SECRET" % port
    with pytest.raises(FileNotFoundError) as e:
        gpufile.File(url)
    msg = str(e.value)
    assert "webhdfs://127.0.0.1:%d/user/alice/nothing.bin" % port in msg
    assert "HTTP 404" in msg and "SECRET" not in msg


def test_directory_is_refused(webhdfs):
    port, _ = webhdfs
    with pytest.raises(IsADirectoryError):
        gpufile.File("webhdfs://127.0.0.1:%d/user/alice" % port)


def test_webhdfs_is_read_only(webhdfs):
    port, _ = webhdfs
    with pytest.raises(OSError) as e:
        gpufile.File("webhdfs://127.0.0.1:%d%s" % (port, PATH), "w")
    assert "read-only" in str(e.value)
    assert e.value.errno == errno.EROFS


def test_kvikio_open_webhdfs(webhdfs):
    from gpufile.kvikio.remote_file import RemoteEndpointType, RemoteFile
    port, _ = webhdfs
    url = "http://127.0.0.1:%d/webhdfs/v1%s" % (port, PATH)
    with RemoteFile.open_webhdfs(url) as f:
        assert f.nbytes() == SIZE
        out = np.zeros(4096, dtype=np.uint8)
        assert f.read(out, file_offset=12345) == 4096
        assert (out == expected(12345, 4096)).all()
    with RemoteFile.open(url) as f:
        assert f.remote_endpoint_type() is RemoteEndpointType.WEBHDFS
        assert f.nbytes() == SIZE


DEVICE_CHILD = r'''
url, size = sys.argv[1], int(sys.argv[2])
ptr = ctypes.c_void_p()
assert lib.gpufile_device_alloc(0, size, ctypes.byref(ptr)) == 0
ctypes.memset(ptr.value, 0xA5, size)


class Dev:
    __cuda_array_interface__ = {"data": (ptr.value, False), "shape": (size,),
                                "typestr": "|u1", "version": 2}


with gpufile.File(url) as f:
    path, _ = f.path_info()
    print("path", path)
    assert f.read(Dev()) == size
sys.stdout.flush()
sys.stdout.buffer.write(ctypes.string_at(ptr.value, size))
'''


def test_read_into_device_memory_fake_driver(webhdfs):
    """Device memory through the staging path (the fake driver)."""
    port, log = webhdfs
    del log[:]
    url = "webhdfs://127.0.0.1:%d%s" % (port, PATH)
    p = run_with_fake_driver(DEVICE_CHILD, [url, SIZE],
                             {"GPUFILE_REMOTE_TASK_SIZE": "1MiB"}, text=False)
    assert p.returncode == 0, p.stderr.decode()
    head, _, body = p.stdout.partition(b"\n")
    assert head == b"path remote", head
    assert body == DATA
    assert sum(1 for e in log if e[0] == "datanode") >= 4


def test_check_reports_a_webhdfs_url(webhdfs):
    import subprocess
    from conftest import missing
    port, _ = webhdfs
    try:
        cli = gpufile.cli_path()
    except OSError:
        missing("no gpufile tool built")
    url = "webhdfs://127.0.0.1:%d%s?delegation=SECRET" % (port, PATH)
    p = subprocess.run([cli, "check", url], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    out = p.stdout + p.stderr
    # (The exit status also counts this machine's missing GPU and cuFile.)
    lines = [l.split() for l in out.splitlines()]
    assert ["[pass", "]", "remote.kind", "webhdfs"] in lines, out
    assert ["[pass", "]", "remote.size", str(SIZE), "bytes"] in lines, out
    assert "SECRET" not in out


@needs_gpu
def test_read_into_cupy_array(webhdfs):
    """A real GPU's memory (CuPy) filled from WebHDFS in several tasks."""
    import cupy as cp
    port, log = webhdfs
    del log[:]
    dev = cp.full(SIZE, 0xA5, dtype=cp.uint8)
    with gpufile.defaults.set(remote_task_size=1 << 20):
        with gpufile.File("webhdfs://127.0.0.1:%d%s" % (port, PATH)) as f:
            assert f.path_info()[0] == "remote"
            assert f.read(dev) == SIZE
    assert cp.asnumpy(dev).tobytes() == DATA
    assert sum(1 for e in log if e[0] == "datanode") >= 4


class _EndlessStatus(http.server.BaseHTTPRequestHandler):
    """Every GET answered 200 with a chunked body of spaces that never
    ends (64 bytes every 0.1 s: above libcurl's low-speed limit of 1
    byte a second), for two minutes at most."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        trickle(self, 200, 64, 0.1)


class _HugeStatus(http.server.BaseHTTPRequestHandler):
    """Every GET answered 200 with 2 MiB of spaces, at once."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        answer(self, 200, b" " * (2 << 20))


def test_a_status_that_never_ends_times_out():
    """GETFILESTATUS whose reply trickles on without end: the request
    has no body, so it may take http_timeout in all, as a remote read's
    range does (it ran for ever: found by a hostile review)."""
    srv = loopback_server(_EndlessStatus)
    try:
        with gpufile.defaults.set(http_timeout=1, http_max_attempts=1):
            with pytest.raises(OSError) as e:
                gpufile.File("webhdfs://127.0.0.1:%d/user/x/f.bin"
                             % srv.server_address[1])
        assert e.value.errno == errno.ETIMEDOUT, str(e.value)
        assert "GETFILESTATUS" in str(e.value)
    finally:
        srv.shutdown()


def test_a_status_longer_than_what_is_kept_is_refused():
    """A 2 MiB GETFILESTATUS reply: the first MiB is kept, the rest not
    read (it was read on and dropped), and the open says why."""
    srv = loopback_server(_HugeStatus)
    try:
        with gpufile.defaults.set(http_max_attempts=1):
            with pytest.raises(OSError) as e:
                gpufile.File("webhdfs://127.0.0.1:%d/user/x/f.bin"
                             % srv.server_address[1])
        assert e.value.errno == errno.EPROTO, str(e.value)
        assert "longer than 1048576 bytes" in str(e.value)
    finally:
        srv.shutdown()
