"""gpufile.kvikio.RemoteFile over HTTP (a local server of
gpufile.kvikio.utils.LocalHttpServer), endpoint detection, and KvikIO's
errors (issue 34)."""
import http.server

import numpy as np
import pytest

import gpufile
import gpufile.kvikio as kvikio
from conftest import in_ci
from gpufile.kvikio.utils import LocalHttpServer

pytestmark = pytest.mark.skipif(
    not kvikio.is_remote_file_available() and not in_ci(),
    reason="built without libcurl")

RET = kvikio.RemoteEndpointType


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    a = np.arange(1000, dtype=np.int32)
    a.tofile(root / "a")
    with LocalHttpServer(root, max_lifetime=600) as server:
        yield server.url, a


def test_open_http_reads(served):
    url, a = served
    with kvikio.RemoteFile.open_http(url + "/a") as f:
        assert f.nbytes() == a.nbytes
        assert url + "/a" in str(f)
        assert f.remote_endpoint_type() == RET.HTTP
        b = np.zeros_like(a)
        assert f.read(b) == a.nbytes and np.array_equal(a, b)
        c = np.zeros(10, dtype=np.int32)
        fut = f.pread(c, file_offset=400)
        assert isinstance(fut, kvikio.IOFuture) and fut.get() == 40
        assert np.array_equal(c, a[100:110])
        assert f.read(c, size=8, file_offset=0) == 8
        assert list(c[:2]) == [0, 1]
        big = np.zeros(2000, dtype=np.int32)
        with pytest.raises(ValueError, match=r"cannot read 0\+8000 bytes "
                                             r"into a 4000 bytes file"):
            f.read(big)
        with pytest.raises(ValueError, match=r"cannot read 4000\+5 bytes "
                                             r"into a 4000 bytes file"):
            f.read(big, size=5, file_offset=4000)
    # nbytes given: reported as given (KvikIO skips asking the server).
    with kvikio.RemoteFile.open_http(url + "/a", nbytes=100) as f:
        assert f.nbytes() == 100
    # open() detects HTTP.
    with kvikio.RemoteFile.open(url + "/a") as f:
        assert f.remote_endpoint_type() == RET.HTTP
        assert f.nbytes() == a.nbytes
    with kvikio.RemoteFile.open(url + "/a", RET.HTTP, [RET.HTTP], 12) as f:
        assert f.nbytes() == 12


def test_counted_as_gpufile_remote(served):
    url, a = served
    before = gpufile.stats()["gpufile"]["read"]["remote"]["bytes"]
    with kvikio.RemoteFile.open_http(url + "/a") as f:
        f.read(np.zeros_like(a))
    after = gpufile.stats()["gpufile"]["read"]["remote"]["bytes"]
    assert after - before == a.nbytes


def test_missing_object_and_retries(served):
    url, _ = served
    with pytest.raises(RuntimeError, match="404") as e:
        kvikio.RemoteFile.open_http(url + "/missing")
    assert isinstance(e.value, OSError)


def test_server_without_ranges(tmp_path):
    """KvikIO raises OverflowError for a read at an offset from a server
    that ignores Range; gpufile streams the body and keeps the bytes
    asked (docs/kvikio.md says so)."""
    a = np.arange(100, dtype=np.uint8)
    a.tofile(tmp_path / "a")
    with LocalHttpServer(tmp_path, range_support=False,
                         handler=http.server.SimpleHTTPRequestHandler) as s:
        with kvikio.RemoteFile.open_http(s.url + "/a") as f:
            assert f.nbytes() == 100
            out = np.zeros(10, dtype=np.uint8)
            assert f.read(out, size=10, file_offset=10) == 10
            assert (out == a[10:20]).all()


def test_infer_endpoint_type():
    infer = kvikio.infer_remote_endpoint_type
    assert infer("s3://bucket-name/object-key-name") == RET.S3
    assert infer("https://bucket.s3.us-east-1.amazonaws.com/key") == RET.S3
    assert infer("https://host:1234/webhdfs/v1/data.bin") == RET.WEBHDFS
    assert infer("https://example.com/path/file.bin") == RET.HTTP
    assert infer("https://bucket-name.s3.region-code.amazonaws.com/"
                 "object-key-name?X-Amz-Algorithm=AWS4-HMAC-SHA256"
                 "&X-Amz-Signature=sig&X-Amz-Credential=cred"
                 "&X-Amz-SignedHeaders=host") == RET.S3_PRESIGNED_URL
    with pytest.raises(RuntimeError, match="Bad scheme"):
        infer("example.com/path")
    with pytest.raises(RuntimeError, match="Unsupported endpoint URL"):
        infer("unsupported://example.com/path")
    with pytest.raises(RuntimeError, match="Unsupported endpoint URL"):
        infer("s3://bucket-only")


def test_open_errors():
    with pytest.raises(RuntimeError, match="Bad scheme"):
        kvikio.RemoteFile.open("://bucket/object")
    with pytest.raises(RuntimeError, match="Unsupported endpoint URL"):
        kvikio.RemoteFile.open("unsupported://bucket/object")
    with pytest.raises(RuntimeError, match="not in the allowlist"):
        kvikio.RemoteFile.open("http://127.0.0.1:9/b/o", RET.S3, [RET.WEBHDFS])
    with pytest.raises(RuntimeError, match="Invalid URL"):
        kvikio.RemoteFile.open("s3://bucket-only", RET.S3)
    with pytest.raises(ValueError, match="Unsupported protocol"):
        kvikio.RemoteFile.open_s3_url("unknown://bucket/object")
    # WebHDFS is read (test_webhdfs.py): nothing listens on port 9.
    with pytest.raises(RuntimeError, match="Unable to open"):
        kvikio.RemoteFile.open_webhdfs("http://127.0.0.1:9/webhdfs/v1/x")
    with pytest.raises(TypeError):
        kvikio.RemoteFile(object())
