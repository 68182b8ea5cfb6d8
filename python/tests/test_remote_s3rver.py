"""S3 reads against s3rver, an S3 server written by others (npm): path-style
S3 URLs, HEAD, ranged GETs, presigned URLs and S3's error replies as a real
S3 implementation serves them, the object uploaded with botocore. s3rver
knows the access key S3RVER and refuses unknown keys, but it does not
verify signatures (a wrong secret is accepted: checked when this test was
written); the check of gpufile's SigV4 signatures by code that is not
gpufile is tests/remote/s3_server.py (botocore recomputes each one) and
AWS's published vectors (test_remote_sigv4). scripts/s3rver.sh installs
s3rver into .deps/."""
import os
import subprocess

import numpy as np
import pytest

import gpufile
from conftest import missing

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
S3RVER = os.environ.get("S3RVER") or os.path.join(
    ROOT, ".deps", "s3rver", "node_modules", ".bin", "s3rver")
SIZE = (3 << 20) + 12345
BUCKET = "gpufile-bucket"
KEY = "shards/part 0.bin"  # a space: the key is URI-encoded when signed

try:
    import botocore.session as botocore
except ImportError:
    botocore = None


@pytest.fixture(scope="module", autouse=True)
def _dependencies():
    """Each missing one is a skip, or under CI (where scripts/deps.sh and
    scripts/test.sh install them) a failure that names it."""
    if "remote" not in gpufile.features():
        missing("libcurl (built without it)")
    if botocore is None:
        missing("python3-botocore (import botocore.session failed)")
    if not os.access(S3RVER, os.X_OK):
        missing("s3rver: %s is not installed (scripts/s3rver.sh)" % S3RVER)


def expected():
    i = np.arange(SIZE, dtype=np.uint64)
    return ((i * 7 + (i >> 13)) & 255).astype(np.uint8)


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("s3rver")
    p = subprocess.Popen([S3RVER, "-d", str(data_dir), "-a", "127.0.0.1",
                          "-p", "0", "--configure-bucket", BUCKET],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    # It prints "S3rver listening on 127.0.0.1:PORT" once listening (a
    # blank line may come first); EOF means it failed.
    line = ""
    while "listening on" not in line:
        line = p.stdout.readline()
        if not line:
            p.wait()
            pytest.fail("s3rver exited (%d) before listening" % p.returncode)
    url = "http://" + line.split("listening on")[1].strip()
    from botocore.config import Config
    client = botocore.get_session().create_client(
        "s3", endpoint_url=url, region_name="us-east-1",
        aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
        config=Config(signature_version="s3v4",
                      s3={"addressing_style": "path"}))
    client.put_object(Bucket=BUCKET, Key=KEY, Body=expected().tobytes())
    yield url, client
    p.terminate()
    p.wait()


@pytest.fixture
def s3_env(endpoint, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint[0])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "S3RVER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "S3RVER")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    return endpoint


def test_signed_reads_land_in_place(s3_env):
    url = "s3://%s/%s" % (BUCKET, KEY)
    with gpufile.defaults.set(remote_task_size=256 << 10):
        with gpufile.File(url) as f:
            assert f.size() == SIZE
            out = np.full(SIZE + 200, 0xA5, dtype=np.uint8)
            assert f.read(out[100:100 + SIZE]) == SIZE
            assert (out[100:100 + SIZE] == expected()).all()
            assert (out[:100] == 0xA5).all() and (out[-100:] == 0xA5).all()
            part = np.zeros(1000003, dtype=np.uint8)
            assert f.pread(part, file_offset=777777).get() == part.size
            assert (part == expected()[777777:777777 + part.size]).all()


def test_unknown_key_and_missing_object_fail_clearly(s3_env, monkeypatch):
    missing = "s3://%s/no/such.bin" % BUCKET
    with pytest.raises(OSError) as e:
        gpufile.File(missing)
    assert "404" in str(e.value) and "no/such.bin" in str(e.value)
    assert "not retried" in str(e.value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "UNKNOWNKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-value-42")
    with pytest.raises(OSError) as e:
        gpufile.File("s3://%s/%s" % (BUCKET, KEY))
    msg = str(e.value)
    assert "403" in msg and BUCKET in msg, msg
    assert "secret-value-42" not in msg and "UNKNOWNKEY" not in msg


def test_presigned_url(endpoint):
    url = endpoint[1].generate_presigned_url(
        "get_object", Params={"Bucket": BUCKET, "Key": KEY}, ExpiresIn=600)
    assert "X-Amz-Signature=" in url
    # s3rver answers the size probe (bytes=0-0) with bytes 0 to the end:
    # the size comes from its Content-Range total, the data ranges are
    # still checked exactly.
    with gpufile.File(url) as f:
        assert f.size() == SIZE
        out = np.zeros(SIZE, dtype=np.uint8)
        assert f.read(out) == SIZE
        assert (out == expected()).all()
