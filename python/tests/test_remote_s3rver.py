"""S3 reads against s3rver, an S3 server written by others (npm): path-style
S3 URLs, HEAD, ranged GETs, presigned URLs and S3's error replies as a real
S3 implementation serves them, the object uploaded with botocore. s3rver
knows the access key S3RVER and refuses unknown keys, but it does not
verify signatures (a wrong secret is accepted: checked when this test was
written); the check of gpufile's SigV4 signatures by code that is not
gpufile is tests/remote/s3_server.py (botocore recomputes each one) and
AWS's published vectors (test_remote_sigv4). scripts/s3rver.sh installs
s3rver into .deps/."""
import numpy as np
import pytest

import gpufile
from conftest import need_s3rver, s3rver, s3rver_env

SIZE = (3 << 20) + 12345
BUCKET = "gpufile-bucket"
KEY = "shards/part 0.bin"  # a space: the key is URI-encoded when signed


@pytest.fixture(scope="module", autouse=True)
def _dependencies():
    need_s3rver()


def expected():
    i = np.arange(SIZE, dtype=np.uint64)
    return ((i * 7 + (i >> 13)) & 255).astype(np.uint8)


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    """(URL, botocore client) of an s3rver holding KEY."""
    with s3rver(tmp_path_factory.mktemp("s3rver"), BUCKET) as (url, client, _):
        client.put_object(Bucket=BUCKET, Key=KEY, Body=expected().tobytes())
        yield url, client


@pytest.fixture
def s3_env(endpoint, monkeypatch):
    s3rver_env(monkeypatch, endpoint[0])
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
