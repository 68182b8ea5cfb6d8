"""Uploads (issue 36 item 5): gpufile.File(url, "w") to an HTTP PUT server
and to S3 (tests/remote/s3_upload_server.py, which checks every SigV4
signature with botocore and each payload's SHA-256): one PUT for a small
object, a multipart upload of several parts for a large one, an aborted
multipart upload leaving no object and no upload in progress, failures
naming the redacted URL and never the credentials; the CLI's
`gpufile write URL` and gpufile.safetensors.save_file(..., URL)."""
import errno
import http.server
import os
import subprocess
import sys
import ssl

import numpy as np
import pytest

import gpufile
from conftest import (in_ci, loopback_server, missing, needs_gpu,
                      run_with_fake_driver, answer, trickle)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "remote"))
from put_server import put_handler  # noqa: E402

pytestmark = pytest.mark.skipif("remote" not in gpufile.features() and not in_ci(),
                                reason="built without libcurl")

AK, SK, TOKENLESS = "AKIDUPLOADTEST", "upload/secret+KEY", None
BUCKET, REGION = "up-bucket", "eu-west-3"
MiB = 1 << 20


def pattern(n, seed=0):
    i = np.arange(n, dtype=np.uint64) + seed
    return ((i * 131 + (i >> 9)) & 255).astype(np.uint8)


@pytest.fixture(scope="module")
def put_server():
    """(URL, store) of a tests/remote/put_server.py server."""
    store = {}
    srv = loopback_server(put_handler(store))
    yield "http://127.0.0.1:%d" % srv.server_address[1], store
    srv.shutdown()


@pytest.fixture(scope="module")
def tls_put_server(tmp_path_factory):
    """(URL, store, CA file, folder of nothing) of a put_server.py server
    over HTTPS, its certificate self-signed for 127.0.0.1."""
    d = tmp_path_factory.mktemp("tls")
    cert, key = str(d / "cert.pem"), str(d / "key.pem")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048",
                        "-nodes", "-keyout", key, "-out", cert, "-days", "2",
                        "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode:
        missing("openssl req: " + r.stderr.decode(errors="replace"))
    store = {}
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv = loopback_server(put_handler(store), ctx)
    yield "https://127.0.0.1:%d" % srv.server_address[1], store, cert
    srv.shutdown()


@pytest.fixture(scope="module")
def s3():
    try:
        from s3_upload_server import S3Server
    except ImportError:
        missing("python3-botocore (import botocore failed)")
    srv = S3Server(BUCKET, AK, SK, REGION)
    endpoint = srv.start()
    yield endpoint, srv
    srv.stop()


@pytest.fixture
def s3_env(s3, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3[0])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AK)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SK)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    return s3[1]


# ---- HTTP PUT ----

def test_put_round_trip_out_of_order_writes(put_server):
    url, store = put_server
    data = pattern(3 * MiB + 1001)
    with gpufile.File(url + "/obj/a.bin", "w") as f:
        half = len(data) // 2
        assert f.pwrite(data[half:], file_offset=half).get() == len(data) - half
        assert f.write(data[:half]) == half
        assert f.size() == len(data)
        assert "/obj/a.bin" not in store  # published at close only
    assert store["/obj/a.bin"] == data.tobytes()


def test_put_empty_object(put_server):
    url, store = put_server
    with gpufile.File(url + "/obj/empty.bin", "w"):
        pass
    assert store["/obj/empty.bin"] == b""


def test_failed_put_names_the_redacted_url(put_server):
    url, store = put_server
    secret_url = url.replace("http://", "http://user:PASSWORD@") + \
        "/deny/x.bin?token=SECRET"
    f = gpufile.File(secret_url, "w")
    assert f.write(pattern(1000)) == 1000
    with pytest.raises(PermissionError) as e:
        f.close()
    msg = str(e.value)
    assert url + "/deny/x.bin" in msg and "HTTP 403" in msg
    assert "PASSWORD" not in msg and "SECRET" not in msg
    assert "/deny/x.bin" not in store


PUT_CHILD = r"""
import sys
import numpy as np
import gpufile
opts = {"ca_file": sys.argv[2]} if len(sys.argv) > 2 else {}
with gpufile.File(sys.argv[1], "w", **opts) as f:
    assert f.write(np.full(1000, 7, dtype=np.uint8)) == 1000
"""
CA_VARIABLES = ("AWS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE",
                "SSL_CERT_DIR")


def _put_in_child(url, *args, **env_more):
    """Uploads 1000 bytes of 7 to url in a child (settings come from its
    environment, read once), with no CA variable but env_more's."""
    env = {k: v for k, v in os.environ.items() if k not in CA_VARIABLES}
    env.update(env_more)
    env["GPUFILE_LIBRARY"] = gpufile.library_path()
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(gpufile.__file__))
    return subprocess.run([sys.executable, "-c", PUT_CHILD, url] + list(args),
                          env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True,
                          timeout=120)


def test_put_waits_as_retry_after_asks_and_logs_redacted(put_server):
    """A PUT answered 503 + Retry-After: 1 goes again after that second
    (the wait rule of remote reads, http_policy.c), and http_verbose logs
    each exchange and the wait, the URL's secrets redacted."""
    url, store = put_server
    secret_url = url.replace("http://", "http://user:PASSWORD@") + \
        "/busy/r.bin?token=SECRET"
    p = _put_in_child(secret_url, GPUFILE_HTTP_VERBOSE="1",
                      GPUFILE_HTTP_RETRY_AFTER_MAX="60")
    log = p.stderr
    assert p.returncode == 0, log
    assert store["/busy/r.bin"] == b"\x07" * 1000
    shown = url + "/busy/r.bin?<query redacted>"
    assert "gpufile: http: PUT %s -> HTTP 503" % shown in log, log
    assert "(Retry-After: 1 s)" in log, log
    assert "gpufile: http: PUT %s -> HTTP 201" % shown in log, log
    assert "PASSWORD" not in log and "SECRET" not in log, log
    first, second = store["busy-times"]["/busy/r.bin"]
    assert second - first >= 1.0  # a lower bound only


def test_retry_after_is_cut_to_the_setting(put_server):
    url, store = put_server
    p = _put_in_child(url + "/busy/cut.bin", GPUFILE_HTTP_VERBOSE="1",
                      GPUFILE_HTTP_RETRY_AFTER_MAX="0")
    assert p.returncode == 0, p.stderr
    assert store["/busy/cut.bin"] == b"\x07" * 1000
    assert "waiting 0 ms before attempt 2 of" in p.stderr, p.stderr
    assert "cut to http_retry_after_max" in p.stderr, p.stderr


@pytest.mark.parametrize("how", ["AWS_CA_BUNDLE", "SSL_CERT_DIR", "ca_file"])
def test_https_put_checks_the_peer_against_the_ca_settings(how,
                                                           tls_put_server,
                                                           tmp_path):
    """Uploads check HTTPS peers against the CA settings reads use
    (aws_config.c's gpufile__ca_settings): the handle's ca_file, else
    AWS_CA_BUNDLE, ...; SSL_CERT_DIR a folder of hashed certificates."""
    url, store, cert = tls_put_server
    name = "/tls/%s.bin" % how
    if how == "ca_file":
        p = _put_in_child(url + name, cert)
    elif how == "SSL_CERT_DIR":
        r = subprocess.run(["openssl", "x509", "-hash", "-noout", "-in", cert],
                           stdout=subprocess.PIPE, universal_newlines=True)
        assert r.returncode == 0
        os.symlink(cert, str(tmp_path / (r.stdout.strip() + ".0")))
        p = _put_in_child(url + name, SSL_CERT_DIR=str(tmp_path))
    else:
        p = _put_in_child(url + name, AWS_CA_BUNDLE=cert)
    assert p.returncode == 0, p.stderr
    assert store[name] == b"\x07" * 1000


def test_https_put_refuses_a_peer_the_ca_does_not_vouch_for(tls_put_server):
    url, store, cert = tls_put_server
    p = _put_in_child(url + "/tls/untrusted.bin", AWS_CA_BUNDLE="/dev/null")
    assert p.returncode != 0
    assert "/tls/untrusted.bin" not in store


def test_hole_fails_and_nothing_is_stored(put_server):
    url, store = put_server
    f = gpufile.File(url + "/obj/hole.bin", "w")
    f.pwrite(pattern(100), file_offset=50).get()
    with pytest.raises(OSError) as e:
        f.close()
    assert "bytes 0-49" in str(e.value) and "never written" in str(e.value)
    assert "/obj/hole.bin" not in store


def test_overlapping_write_is_refused(put_server):
    url, store = put_server
    with gpufile.File(url + "/obj/twice.bin", "w") as f:
        f.write(pattern(100))
        with pytest.raises(OSError) as e:
            f.pwrite(pattern(10), file_offset=95).get()
        assert e.value.errno == errno.EINVAL
        assert "bytes 95-104" in str(e.value) and "written before" in str(e.value)
        f.pwrite(pattern(50, 100), file_offset=100).get()
    assert store["/obj/twice.bin"] == pattern(150).tobytes()


def test_write_overlapping_the_span_after_its_neighbour_is_refused(put_server):
    """[0,10) and [15,20) written, then [10,17): it touches the first
    span and overlaps the second; the overlap check looked only at the
    first (found by a hostile review, session 43)."""
    url, store = put_server
    data = pattern(20)
    with gpufile.File(url + "/obj/past.bin", "w") as f:
        f.pwrite(data[:10], file_offset=0).get()
        f.pwrite(data[15:], file_offset=15).get()
        with pytest.raises(OSError) as e:
            f.pwrite(data[10:17], file_offset=10).get()
        assert e.value.errno == errno.EINVAL
        assert "bytes 10-16" in str(e.value) and "written before" in str(e.value)
        f.pwrite(data[10:15], file_offset=10).get()
    assert store["/obj/past.bin"] == data.tobytes()


def test_s3_part_is_not_sent_with_bytes_counted_twice(s3_env):
    """On S3 with 5 MiB parts, [0,1M), [2M,4M), then [1M,3M) overlapping
    the second: refused, so the part is not counted full and sent with a
    MiB that nobody wrote."""
    data = pattern(5 * MiB)
    with gpufile.defaults.set(upload_part_size=5 * MiB):
        with gpufile.File("s3://%s/twice.bin" % BUCKET, "w") as f:
            f.pwrite(data[:MiB], file_offset=0).get()
            f.pwrite(data[2 * MiB:4 * MiB], file_offset=2 * MiB).get()
            with pytest.raises(OSError) as e:
                f.pwrite(data[MiB:3 * MiB], file_offset=MiB).get()
            assert e.value.errno == errno.EINVAL
            f.pwrite(data[MiB:2 * MiB], file_offset=MiB).get()
            f.pwrite(data[4 * MiB:], file_offset=4 * MiB).get()
    assert s3_env.objects["twice.bin"] == data.tobytes()


def test_upload_handle_is_write_only(put_server):
    url, _ = put_server
    with gpufile.File(url + "/obj/wo.bin", "w") as f:
        f.write(pattern(10))
        with pytest.raises(OSError):
            f.read(np.zeros(10, dtype=np.uint8))


def test_cli_write_url(put_server):
    url, store = put_server
    try:
        cli = gpufile.cli_path()
    except OSError:
        missing("no gpufile tool built")
    p = subprocess.run([cli, "write", url + "/cli/seq.bin", "--size", "3MiB",
                        "--pattern", "sequence", "--chunk", "1MiB", "--host",
                        "--no-progress"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, universal_newlines=True)
    assert p.returncode == 0, p.stderr
    i = np.arange(3 * MiB, dtype=np.uint64)
    assert store["/cli/seq.bin"] == (i % 251).astype(np.uint8).tobytes()
    p = subprocess.run([cli, "write", url + "/deny/c.bin?sig=SECRET",
                        "--size", "4096", "--host", "--no-progress"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    assert p.returncode == 1
    assert "HTTP 403" in p.stderr and "SECRET" not in p.stderr + p.stdout


def test_safetensors_save_file_to_url(put_server):
    import gpufile.safetensors as st
    url, store = put_server
    tensors = {"a": np.arange(1000, dtype=np.float32),
               "b": np.ones((3, 5), dtype=np.int64)}
    st.save_file(tensors, url + "/ckpt/model.safetensors",
                 metadata={"step": "7"})
    assert store["/ckpt/model.safetensors"] == st.save(tensors, {"step": "7"})


# ---- S3 ----

def test_s3_small_object_is_one_put(s3_env):
    srv = s3_env
    del srv.log[:]
    data = pattern(MiB + 17)
    with gpufile.File("s3://%s/small/one put.bin" % BUCKET, "w") as f:
        assert f.write(data) == len(data)
    assert srv.objects["small/one put.bin"] == data.tobytes()
    assert [(m, sorted(q)) for m, k, q in srv.log] == [("PUT", [])]


def test_s3_multipart_several_parts(s3_env):
    srv = s3_env
    del srv.log[:]
    data = pattern(17 * MiB + 12345, seed=3)
    with gpufile.defaults.set(upload_part_size=5 * MiB):
        with gpufile.File("s3://%s/big/multi.bin" % BUCKET, "w") as f:
            # Two writes, the second first: parts are stored as they fill.
            cut = 7 * MiB + 5
            assert f.pwrite(data[cut:], file_offset=cut).get() == len(data) - cut
            assert f.write(data[:cut]) == cut
    assert srv.objects["big/multi.bin"] == data.tobytes()
    parts = sorted(int(q["partNumber"]) for m, k, q in srv.log
                   if m == "PUT" and "partNumber" in q)
    assert parts == [1, 2, 3, 4]
    assert [m for m, k, q in srv.log if m == "POST"] == ["POST", "POST"]
    assert srv.uploads == {}


def test_s3_multipart_counts_on_the_handle(s3_env):
    """remote_info() of an S3 upload counts its requests: the
    CreateMultipartUpload and the two whole parts stored during the
    write (the last part and the completion go at close)."""
    data = pattern(11 * MiB + 7, seed=5)
    with gpufile.defaults.set(upload_part_size=5 * MiB):
        with gpufile.File("s3://%s/big/counted.bin" % BUCKET, "w") as f:
            assert f.write(data) == len(data)
            info = f.remote_info()
    assert info["requests"] == 3, info
    assert info["ranges"] == 2 and info["bytes"] == 10 * MiB, info
    assert info["retries"] == 0 and info["failures"] == 0, info
    assert info["connects"] >= 1 and info["size"] == len(data), info
    assert s3_env.objects["big/counted.bin"] == data.tobytes()


def test_s3_parts_in_flight_at_most_max_in_flight(s3_env):
    """An upload's requests run on its handle's transfer engine
    (http_multi.c), as reads do: with max_in_flight=1, the parts that four
    workers send at once reach the server one at a time (over the
    engine's connections)."""
    srv = s3_env
    with srv.lock:  # no request of an earlier test is in flight
        srv.active = srv.max_active = 0
    data = pattern(20 * MiB + 3, seed=9)
    with gpufile.defaults.set(upload_part_size=5 * MiB, nthreads=4):
        with gpufile.File("s3://%s/big/one-at-a-time.bin" % BUCKET, "w",
                          max_in_flight=1) as f:
            assert f.write(data) == len(data)
            info = f.remote_info()
    assert srv.objects["big/one-at-a-time.bin"] == data.tobytes()
    assert srv.max_active == 1
    assert info["ranges"] == 4 and info["connects"] == 1, info


def test_put_upload_info_before_close(put_server):
    """An HTTP PUT upload's remote_info(): its size is the bytes written so
    far; nothing is sent before close (the one PUT; its counting:
    tests/test_upload_counters.c)."""
    url, store = put_server
    with gpufile.File(url + "/obj/info.bin", "w") as f:
        assert f.write(pattern(1000)) == 1000
        info = f.remote_info()
    assert info["size"] == 1000 and info["requests"] == 0, info
    assert store["/obj/info.bin"] == pattern(1000).tobytes()


def test_s3_aborted_multipart_leaves_nothing(s3_env):
    srv = s3_env
    del srv.log[:]
    key = "big/failpart2.bin"
    data = pattern(12 * MiB)
    with gpufile.defaults.set(upload_part_size=5 * MiB, http_max_attempts=2):
        f = gpufile.File("s3://%s/%s" % (BUCKET, key), "w")
        with pytest.raises(OSError) as e:
            f.write(data)
        with pytest.raises(OSError) as e2:
            f.close()
    for msg in (str(e.value), str(e2.value)):
        assert "s3://%s/%s" % (BUCKET, key) in msg
        assert "part 2" in msg and "HTTP 500" in msg
        assert SK not in msg and AK not in msg
    assert "aborted" in str(e2.value)
    assert key not in srv.objects
    assert srv.uploads == {}  # the listing of uploads in progress is empty
    assert [m for m, k, q in srv.log if m == "DELETE"] == ["DELETE"]


def test_s3_part_size_setting_is_checked():
    # S3's smallest part is 5 MiB: a smaller setting is refused.
    with pytest.raises(Exception) as e:
        with gpufile.defaults.set(upload_part_size=MiB):
            pass
    assert "upload_part_size" in str(e.value) and "out of range" in str(e.value)
    with gpufile.defaults.set(upload_part_size=6 * MiB):
        assert gpufile.defaults.get("upload_part_size") == 6 * MiB


# ---- device memory (the fake driver, in a child process) ----

DEVICE_CHILD = r'''
url, size = sys.argv[1], int(sys.argv[2])
ptr = ctypes.c_void_p()
assert lib.gpufile_device_alloc(0, size, ctypes.byref(ptr)) == 0
data = bytes((i * 7 + (i >> 13)) & 255 for i in range(size))
ctypes.memmove(ptr.value, data, size)  # the fake's device memory is host's


class Dev:
    __cuda_array_interface__ = {"data": (ptr.value, False), "shape": (size,),
                                "typestr": "|u1", "version": 2}


kind = ctypes.c_int()
dev = ctypes.c_int()
assert lib.gpufile_mem_kind(ctypes.c_void_p(ptr.value), ctypes.byref(kind),
                            ctypes.byref(dev)) == 0
print("kind", kind.value)
with gpufile.File(url, "w") as f:
    assert f.write(Dev()) == size
print("ok")
'''


@pytest.mark.parametrize("where", ["put", "s3"])
def test_upload_from_device_memory(where, put_server, s3, monkeypatch):
    size = 11 * MiB + 333
    env = {"GPUFILE_UPLOAD_PART_SIZE": "5MiB"}
    if where == "put":
        url, store = put_server[0] + "/dev/obj.bin", put_server[1]
        key = "/dev/obj.bin"
    else:
        env.update(AWS_ENDPOINT_URL=s3[0], AWS_ACCESS_KEY_ID=AK,
                   AWS_SECRET_ACCESS_KEY=SK, AWS_DEFAULT_REGION=REGION)
        url, store, key = "s3://%s/dev/obj.bin" % BUCKET, s3[1].objects, \
            "dev/obj.bin"
    p = run_with_fake_driver(DEVICE_CHILD, [url, size], env)
    assert p.returncode == 0, p.stderr
    assert "kind 2" in p.stdout, p.stdout  # GPUFILE_MEM_DEVICE
    i = np.arange(size, dtype=np.uint64)
    assert store[key] == ((i * 7 + (i >> 13)) & 255).astype(np.uint8).tobytes()


@needs_gpu
@pytest.mark.parametrize("where", ["put", "s3"])
def test_upload_from_cupy_array(where, put_server, request, monkeypatch):
    """A real GPU's memory (CuPy) uploaded in parts: what the store holds
    is what the GPU held."""
    import cupy as cp
    size = 11 * MiB + 333
    i = cp.arange(size, dtype=cp.uint64)
    dev = ((i * 7 + (i >> 13)) & 255).astype(cp.uint8)
    if where == "put":
        url, store, key = put_server[0] + "/gpu/obj.bin", put_server[1], "/gpu/obj.bin"
    else:
        s3 = request.getfixturevalue("s3")  # (botocore may be missing there)
        for k, v in dict(AWS_ENDPOINT_URL=s3[0], AWS_ACCESS_KEY_ID=AK,
                         AWS_SECRET_ACCESS_KEY=SK, AWS_DEFAULT_REGION=REGION).items():
            monkeypatch.setenv(k, v)
        url, store, key = "s3://%s/gpu/obj.bin" % BUCKET, s3[1].objects, "gpu/obj.bin"
    with gpufile.defaults.set(upload_part_size=5 * MiB):
        with gpufile.File(url, "w") as f:
            assert f.write(dev) == size
    assert store[key] == cp.asnumpy(dev).tobytes()


class _ReplyWithoutEnd(http.server.BaseHTTPRequestHandler):
    """Takes a PUT's body, then answers 200 with a chunked body of spaces
    that never ends (64 bytes every 0.1 s), for two minutes at most."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_PUT(self):
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        trickle(self, 200, 64, 0.1)


def test_a_reply_that_never_ends_times_out():
    """The reply to a PUT trickling on without end: once the body is
    sent the reply has 10 x http_timeout (S3's CompleteMultipartUpload
    may keep a connection alive with spaces for minutes), then the
    upload fails with ETIMEDOUT (it waited for ever: found by a hostile
    review)."""
    srv = loopback_server(_ReplyWithoutEnd)
    try:
        with gpufile.defaults.set(http_timeout=1, http_max_attempts=1):
            f = gpufile.File("http://127.0.0.1:%d/obj/drip.bin"
                             % srv.server_address[1], "w")
            f.write(pattern(1000))
            with pytest.raises(OSError) as e:
                f.close()
        assert e.value.errno == errno.ETIMEDOUT, str(e.value)
        assert "once the request's body was sent or answered" in str(e.value)
    finally:
        srv.shutdown()


class _AnswerBeforeTheBody(http.server.BaseHTTPRequestHandler):
    """Answers a PUT 500 at once, reading none of its body, with a chunked
    reply of 8 bytes every 0.5 s for a minute at most: libcurl stops
    sending, so the body is never all sent."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_PUT(self):
        trickle(self, 500, 8, 0.5, seconds=60)


def test_a_reply_before_the_body_is_bounded_too():
    """A server that answers before it has read the body: the reply's
    time counts from its status, not from a body that is never all sent
    (the bound never started: found by a review)."""
    srv = loopback_server(_AnswerBeforeTheBody)
    try:
        with gpufile.defaults.set(http_timeout=1, http_max_attempts=1):
            f = gpufile.File("http://127.0.0.1:%d/obj/early.bin"
                             % srv.server_address[1], "w")
            f.write(pattern(64 * MiB))
            with pytest.raises(OSError) as e:
                f.close()
        assert e.value.errno == errno.ETIMEDOUT, str(e.value)
    finally:
        srv.shutdown()


class _LongAnswer(http.server.BaseHTTPRequestHandler):
    """Stores a PUT's body in .stored, then answers 201 with 2 MiB."""
    protocol_version = "HTTP/1.1"
    stored = {}

    def log_message(self, *args):
        pass

    def do_PUT(self):
        _LongAnswer.stored[self.path] = self.rfile.read(
            int(self.headers.get("Content-Length", "0")))
        answer(self, 201, b" " * (2 << 20))


def test_an_object_stored_with_a_long_answer_is_stored():
    """The reply to an object's PUT is not read as text: one longer than
    what is kept (1 MiB) does not fail an upload the server stored."""
    srv = loopback_server(_LongAnswer)
    try:
        with gpufile.File("http://127.0.0.1:%d/obj/long.bin"
                          % srv.server_address[1], "w") as f:
            f.write(pattern(1000))
        assert _LongAnswer.stored["/obj/long.bin"] == pattern(1000).tobytes()
    finally:
        srv.shutdown()
