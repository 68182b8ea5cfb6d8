"""Shared fixtures. Run from the repo root:

    GPUFILE_LIBRARY=$PWD/build/libgpufile.so /usr/bin/python3 -m pytest -q python/tests

The package is imported from python/ of this checkout (not an installed
copy) unless GPUFILE_TEST_INSTALLED=1.
"""
import contextlib
import http.server
import os
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_ROOT = os.path.dirname(HERE)
REPO = os.path.dirname(PKG_ROOT)
# The servers the remote tests run as processes (fault_server.py, ...).
REMOTE_SERVERS = os.path.join(REPO, "tests", "remote")
if os.environ.get("GPUFILE_TEST_INSTALLED") != "1" and PKG_ROOT not in sys.path:
    sys.path.insert(0, PKG_ROOT)

import gpufile  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_settings():
    """Every test starts from the environment's settings."""
    gpufile.defaults.reset()
    yield
    gpufile.defaults.reset()


@pytest.fixture
def data_file(tmp_path):
    """A 5 MiB + 123 bytes file of known bytes; returns (path, bytes)."""
    import numpy as np

    data = np.random.default_rng(7).integers(0, 256, (5 << 20) + 123, dtype=np.uint8)
    path = tmp_path / "data.bin"
    path.write_bytes(data.tobytes())
    return str(path), data


def have_gpu():
    try:
        import cupy  # noqa: F401
    except Exception:
        return False
    try:
        return gpufile.cuda_device_count() > 0
    except Exception:
        return False


needs_gpu = pytest.mark.skipif(not have_gpu(), reason="needs CuPy and a CUDA GPU")


def in_ci():
    """Whether this runs under CI (CI set, and not "", "0" or "false";
    .ci/run runs with CI=true)."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false")


def missing(what):
    """A test needs what (a program, module or build product) that
    scripts/deps.sh or scripts/test.sh installs or builds, and it is
    missing: a skip, or under CI, where it must be there, a failure."""
    if in_ci():
        pytest.fail("%s: missing under CI (CI=%s), where scripts/deps.sh or "
                    "scripts/test.sh installs it" % (what, os.environ["CI"]),
                    pytrace=False)
    pytest.skip(what)


# ---- servers of the remote tests ----

class _LoopbackServer(http.server.ThreadingHTTPServer):
    daemon_threads = True


def answer(handler, status, body):
    """Answers handler's request with status and body (its
    Content-Length given), whether or not the client stays to read it."""
    handler.send_response(status)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    try:
        handler.wfile.write(body)
    except OSError:
        pass


def trickle(handler, status, chunk, every, seconds=120):
    """Answers handler's request (a BaseHTTPRequestHandler's) with status
    and a chunked body of spaces that goes on: chunk bytes every `every`
    seconds, for `seconds` at most or until the client goes. A server
    that never ends its reply, yet never stalls."""
    handler.send_response(status)
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            handler.wfile.write(b"%x\r\n%s\r\n" % (chunk, b" " * chunk))
            handler.wfile.flush()
            time.sleep(every)
    except OSError:
        pass


def loopback_server(handler, ssl_context=None):
    """An HTTP server of handler (a BaseHTTPRequestHandler class) on
    127.0.0.1, a free port (server_address[1]), serving from a daemon
    thread; HTTPS with ssl_context. The caller stops it (shutdown())."""
    srv = _LoopbackServer(("127.0.0.1", 0), handler)
    if ssl_context is not None:
        srv.socket = ssl_context.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


class _RangelessHandler(http.server.BaseHTTPRequestHandler):
    """One object at every path, as `python3 -m http.server` serves a
    file: HEAD with its Content-Length and no Accept-Ranges, every GET
    200 with the whole body, whatever its Range. Each GET's bytes are
    counted before they are handed to the socket (server.gets)."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.server.data)))
        self.end_headers()

    def do_GET(self):
        data = self.server.data
        count = [self.headers.get("Range"), 0]
        with self.server.lock:
            self.server.gets.append(count)
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            for i in range(0, len(data), 1 << 16):
                piece = data[i:i + (1 << 16)]
                count[1] += len(piece)
                self.wfile.write(piece)
        except OSError:
            # The client stops a body once it has the bytes it asked for.
            self.close_connection = True


class _RangelessServer(_LoopbackServer):
    def handle_error(self, request, client_address):
        pass


class RangelessServer:
    """A loopback server that ignores Range (every GET 200 with the whole
    object) and counts what it sends: url; data, the object (assign to
    change it); mark() and bodies(mark), the bytes each GET without a
    Range header (a read's body; the probe at open asks bytes=0-0) was
    handed to send since the mark, each counted before it is written, so
    never fewer than the client received."""

    def __init__(self, data):
        self._srv = _RangelessServer(("127.0.0.1", 0), _RangelessHandler)
        self._srv.data = data
        self._srv.gets = []
        self._srv.lock = threading.Lock()
        threading.Thread(target=self._srv.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d/o.bin" % self._srv.server_address[1]

    @property
    def data(self):
        return self._srv.data

    @data.setter
    def data(self, value):
        self._srv.data = value

    def mark(self):
        with self._srv.lock:
            return len(self._srv.gets)

    def bodies(self, mark):
        with self._srv.lock:
            return [n for rng, n in self._srv.gets[mark:] if rng is None]

    def close(self):
        self._srv.shutdown()
        self._srv.server_close()


@contextlib.contextmanager
def remote_server(script, *args):
    """Runs tests/remote/SCRIPT with args (fault_server.py SIZE [STALL],
    s3_server.py ...), which prints "PORT N" once it listens on
    127.0.0.1; yields N and ends the server on exit."""
    p = subprocess.Popen([sys.executable, os.path.join(REMOTE_SERVERS, script)]
                         + [str(a) for a in args],
                         stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline()
        assert line.startswith("PORT "), line
        yield int(line.split()[1])
    finally:
        p.terminate()
        p.wait()
        p.stdout.close()


@contextlib.contextmanager
def ready_child(code, *args):
    """Runs python -c CODE with args and this package on its path; CODE
    prints "ready" once it has done what the test looks at, then waits
    until stdin closes. Yields the child's pid; on exit closes its stdin
    and waits for it."""
    env = dict(os.environ, PYTHONPATH=PKG_ROOT)
    child = subprocess.Popen([sys.executable, "-c", code] + [str(a) for a in args],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env=env, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        yield child.pid
    finally:
        child.stdin.close()
        child.wait(timeout=60)
        child.stdout.close()


# s3rver, an S3 server written by others (npm), installed by
# scripts/s3rver.sh; S3RVER (or GPUFILE_S3RVER) names another copy.
S3RVER = (os.environ.get("S3RVER") or os.environ.get("GPUFILE_S3RVER") or
          os.path.join(REPO, ".deps", "s3rver", "node_modules", ".bin",
                       "s3rver"))


def need_s3rver():
    """What the s3rver tests need: each missing one is a skip, or under CI
    (where scripts/deps.sh and scripts/test.sh install them) a failure
    that names it."""
    if "remote" not in gpufile.features():
        missing("libcurl (built without it)")
    try:
        import botocore.session  # noqa: F401
    except ImportError:
        missing("python3-botocore (import botocore.session failed)")
    if not os.access(S3RVER, os.X_OK):
        missing("s3rver: %s is not installed (scripts/s3rver.sh)" % S3RVER)


@contextlib.contextmanager
def s3rver(data_dir, bucket):
    """Runs s3rver on 127.0.0.1 (a free port) with bucket, its objects in
    data_dir; yields (URL, a botocore S3 client of it, its log: the lines
    it prints, one a request, read as they come so that its pipe never
    fills) and ends it on exit."""
    import botocore.session
    from botocore.config import Config
    p = subprocess.Popen([S3RVER, "-d", str(data_dir), "-a", "127.0.0.1",
                          "-p", "0", "--configure-bucket", bucket],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    try:
        # It prints "S3rver listening on 127.0.0.1:PORT" once listening (a
        # blank line may come first); EOF means it failed.
        line = ""
        while "listening on" not in line:
            line = p.stdout.readline()
            if not line:
                p.wait()
                pytest.fail("s3rver exited (%d) before listening"
                            % p.returncode)
        url = "http://" + line.split("listening on")[1].strip()
        log = []
        threading.Thread(target=lambda: log.extend(iter(p.stdout.readline, "")),
                         daemon=True).start()
        client = botocore.session.get_session().create_client(
            "s3", endpoint_url=url, region_name="us-east-1",
            aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
            config=Config(signature_version="s3v4",
                          s3={"addressing_style": "path"}))
        yield url, client, log
    finally:
        p.terminate()
        p.wait()


def s3rver_env(monkeypatch, url):
    """The environment of gpufile's S3 requests to the s3rver at url: its
    endpoint and keys, region us-east-1, no session token."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "S3RVER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "S3RVER")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)


# ---- the fake CUDA driver (tests/fake_libcuda), in a child process ----

# What a child script run by run_with_fake_driver begins with: gpufile,
# the driver (checked to be the fake one) as cuda, the library as lib with
# gpufile_device_alloc's argument types set.
FAKE_DRIVER_CHILD = r'''
import ctypes, sys
import gpufile

cuda = ctypes.CDLL("libcuda.so.1")
assert hasattr(cuda, "fake_cuda_wait_ops"), "not the fake driver"
lib = gpufile._lib.lib()
lib.gpufile_device_alloc.argtypes = [ctypes.c_int, ctypes.c_size_t,
                                     ctypes.POINTER(ctypes.c_void_p)]
'''


def run_with_fake_driver(script, args, env=None, text=True):
    """Runs FAKE_DRIVER_CHILD + script with args in a child Python whose
    libcuda.so.1 is the fake driver built beside the library, with
    compat_mode=on (fake device memory never goes to cuFile) and env's
    variables besides; returns subprocess.run's result (output captured,
    as text when text). No fake driver is a skip (under CI a failure)."""
    d = os.path.join(os.path.dirname(gpufile.library_path()), "tests",
                     "fake_libcuda", "lib")
    if not os.path.exists(os.path.join(d, "libcuda.so.1")):
        missing("no tests/fake_libcuda/lib/libcuda.so.1 next to the library")
    child_env = dict(os.environ)
    child_env["LD_LIBRARY_PATH"] = d + os.pathsep + child_env.get(
        "LD_LIBRARY_PATH", "")
    child_env["GPUFILE_LIBRARY"] = gpufile.library_path()
    child_env["GPUFILE_COMPAT_MODE"] = "on"
    child_env["PYTHONPATH"] = os.path.dirname(
        os.path.dirname(gpufile.__file__))
    child_env.update(env or {})
    return subprocess.run([sys.executable, "-c", FAKE_DRIVER_CHILD + script]
                          + [str(a) for a in args], env=child_env,
                          capture_output=True, text=text, timeout=120)
