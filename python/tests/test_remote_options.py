"""Per-handle remote options (File(url, ...) keywords), File.remote_info()
and gpufile.remote's openers, against tests/remote/fault_server.py (plain
HTTP, redirects) and tests/remote/s3_server.py (botocore checks every
signature: unsigned is 403)."""
import errno
import os

import numpy as np
import pytest

import gpufile
import gpufile.remote as remote
from conftest import in_ci, missing, remote_server

SIZE = 200001
AK, SK, REGION = "AKIDPYTEST", "py/Secret+Key0123456789abcdefghijklmnopq", \
    "eu-test-1"

pytestmark = pytest.mark.skipif("remote" not in gpufile.features() and not in_ci(),
                                reason="built without libcurl")

AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
            "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT_URL_S3", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
            "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE",
            "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "http_proxy",
            "no_proxy", "NO_PROXY", "ALL_PROXY")


def expected(n=SIZE):
    i = np.arange(n, dtype=np.uint64)
    return ((i * 131 + (i >> 9)) & 255).astype(np.uint8)


@pytest.fixture(scope="module")
def http():
    with remote_server("fault_server.py", SIZE) as port:
        yield "http://127.0.0.1:%d" % port


@pytest.fixture(scope="module")
def s3():
    try:
        import botocore  # noqa: F401
    except ImportError:
        missing("python3-botocore")
    with remote_server("s3_server.py", SIZE, "bucket", AK, SK,
                       REGION) as port:
        yield "http://127.0.0.1:%d" % port


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for var in AWS_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws of the user


def read_all(f):
    out = np.zeros(f.size(), dtype=np.uint8)
    assert f.read(out) == out.size
    assert (out == expected(out.size)).all()


def test_remote_info_counts_redirects(http):
    url = http.replace("http://", "http://u:PW-SECRET@") + \
        "/redirect/obj?sig=Q-SECRET"
    with gpufile.File(url) as f:
        read_all(f)
        info = f.remote_info()
    assert info["url"] == http + "/redirect/obj?<query redacted>"
    assert "SECRET" not in repr(info)
    assert info["kind"] == "http" and not info["signed"]
    assert info["size"] == SIZE
    assert info["redirects"] == 2  # HEAD and the one range
    assert info["requests"] == 4
    assert info["bytes"] == SIZE and info["ranges"] == 1
    assert info["retries"] == 0 and info["failures"] == 0


def test_remote_info_counts_retries_and_etag(http):
    with gpufile.File(http + "/flaky503/obj") as f:
        read_all(f)
        assert f.remote_info()["retries"] == 1
    with gpufile.File(http + "/etagswap/obj") as f:
        assert f.remote_info()["etag"] == '"v1"'


def test_remote_info_of_a_local_file(data_file):
    with gpufile.File(data_file[0]) as f:
        with pytest.raises(OSError) as e:
            f.remote_info()
    assert e.value.errno == errno.ENOTSUP


def test_known_size_skips_the_head(http):
    with gpufile.File(http + "/ok/obj", known_size=SIZE,
                      max_attempts=2, timeout=30, max_in_flight=2) as f:
        assert f.remote_info()["requests"] == 0
        assert f.size() == SIZE
        read_all(f)
        assert f.remote_info()["requests"] >= 1


def test_bad_keywords(http, data_file):
    with pytest.raises(TypeError, match="not a URL"):
        gpufile.File(data_file[0], known_size=1)
    with pytest.raises(ValueError, match="known_size -1 is negative"):
        gpufile.File(http + "/ok/obj", known_size=-1)
    with pytest.raises(ValueError, match="timeout must be at least 1"):
        gpufile.File(http + "/ok/obj", timeout=0)
    with pytest.raises(TypeError, match="aws_region must be a str"):
        gpufile.File(http + "/ok/obj", aws_region=5)
    # A secret with a NUL: named by its keyword, never shown.
    with pytest.raises(ValueError) as e:
        gpufile.File(http + "/ok/obj", aws_secret_access_key="S\0SECRET")
    assert "aws_secret_access_key" in str(e.value)
    assert "SECRET" not in str(e.value)
    with pytest.raises(OSError, match="aws_access_key_id but no") as e:
        gpufile.File("s3://bucket/k", aws_access_key_id=AK)
    assert e.value.errno == errno.EINVAL


def test_credentials_per_handle(s3, clean_env):
    url = "s3://bucket/per-handle.bin"
    kw = dict(aws_access_key_id=AK, aws_secret_access_key=SK,
              aws_region=REGION, aws_endpoint_url=s3)
    with gpufile.File(url, **kw) as f:
        read_all(f)
        info = f.remote_info()
    assert info["signed"] and info["credentials"] == "explicit options"
    assert info["region"] == REGION and info["kind"] == "s3"
    assert "AWS_ACCESS_KEY_ID" not in os.environ
    with remote.open_s3("bucket", "dir/a b.bin", **kw) as f:
        read_all(f)
    # Path style on an endpoint of its own: signed as S3.
    with remote.open_s3_url(s3 + "/bucket/own.bin", **kw) as f:
        assert f.remote_info()["signed"]
        read_all(f)
    # The same URL through open_http: unsigned, refused.
    with pytest.raises(PermissionError):
        remote.open_http(s3 + "/bucket/own.bin", **kw)
    with pytest.raises(PermissionError):
        gpufile.File(url, unsigned=True, **kw)


def test_aws_urls_and_presigned(s3, clean_env, monkeypatch):
    monkeypatch.setenv("http_proxy", s3)  # AWS's host names, sent here
    kw = dict(aws_access_key_id=AK, aws_secret_access_key=SK)
    for url in ("http://bucket.s3.%s.amazonaws.com/k.bin" % REGION,
                "http://s3.%s.amazonaws.com/bucket/k.bin" % REGION):
        with remote.open_s3_url(url, **kw) as f:
            assert f.remote_info()["region"] == REGION
            read_all(f)
    presigned = ("http://bucket.s3.%s.amazonaws.com/k.bin?X-Amz-Algorithm="
                 "AWS4-HMAC-SHA256&X-Amz-Signature=00ff" % REGION)
    with remote.open_s3_presigned_url(presigned) as f:
        assert not f.remote_info()["signed"]
        assert f.remote_info()["kind"] == "presigned URL"
        read_all(f)
    # Credentials in the environment do not sign a presigned URL.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AK)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SK)
    with remote.open_s3_url(presigned) as f:
        read_all(f)
    with pytest.raises(ValueError, match="no X-Amz-Signature"):
        remote.open_s3_presigned_url("http://h/k?<query redacted>")


def test_profile_keyword(s3, clean_env, tmp_path):
    aws = tmp_path / ".aws"
    aws.mkdir()
    (aws / "credentials").write_text(
        "[train]\naws_access_key_id = %s\naws_secret_access_key = %s\n"
        % (AK, SK))
    (aws / "config").write_text(
        "[profile train]\nregion = %s\nendpoint_url = %s\n" % (REGION, s3))
    with remote.open_s3("bucket", "p.bin", aws_profile="train") as f:
        info = f.remote_info()
        assert info["credentials"].startswith('profile "train"')
        assert SK not in repr(info)
        read_all(f)
    with pytest.raises(OSError, match='profile "nope" .options. is in '
                       'neither') as e:
        remote.open_s3("bucket", "p.bin", aws_profile="nope")
    assert e.value.errno == errno.EINVAL


def test_openers_check_their_urls():
    with pytest.raises(ValueError, match="not a http:// or https://"):
        remote.open_http("s3://b/k")
    with pytest.raises(ValueError, match="bucket"):
        remote.open_s3("a/b", "k")
    with pytest.raises(ValueError, match="webhdfs"):
        remote.open_webhdfs("http://host/not-webhdfs/x")


class _Recorder(dict):
    """os.environ's stand-in that records writes."""
    writes = []

    def __setitem__(self, k, v):
        self.writes.append(k)
        super().__setitem__(k, v)

    def __delitem__(self, k):
        self.writes.append(k)
        super().__delitem__(k)

    def pop(self, k, *default):
        self.writes.append(k)
        return super().pop(k, *default)


def test_kvikio_open_s3_leaves_environment_alone(s3, clean_env, monkeypatch):
    """KvikIO's openers give the credentials to the handle: the
    environment (which other threads' opens read) is never written."""
    import gpufile.kvikio as kvikio
    # AWS's host names below reach the test server as a proxy.
    monkeypatch.setenv("http_proxy", s3)
    rec = _Recorder(os.environ)
    monkeypatch.setattr(os, "environ", rec)
    with kvikio.RemoteFile.open_s3(
            "bucket", "kv.bin", aws_region_name=REGION, aws_access_key_id=AK,
            aws_secret_access_key=SK, aws_endpoint_url=s3) as f:
        assert f.nbytes() == SIZE
        read_all(f.file)
    with kvikio.RemoteFile.open_s3_url(
            s3 + "/bucket/kv.bin", nbytes=SIZE, aws_region_name=REGION,
            aws_access_key_id=AK, aws_secret_access_key=SK) as f:
        assert f.file.remote_info()["requests"] == 0  # nbytes: no HEAD
        read_all(f.file)
    # AWS's own URL: sent as it is, signed for the host's region.
    with kvikio.RemoteFile.open_s3_url(
            "http://bucket.s3.%s.amazonaws.com/kv.bin" % REGION,
            aws_access_key_id=AK, aws_secret_access_key=SK) as f:
        assert f.file.remote_info()["region"] == REGION
        read_all(f.file)
    assert rec.writes == []
