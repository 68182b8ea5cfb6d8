"""gpufile.kvikio.RemoteFile's S3 openers against s3rver (the server and
object of test_remote_s3rver.py): credentials given as arguments or in
the environment, s3:// and path-style http URLs, presigned URLs."""
import os

import numpy as np
import pytest

import gpufile.kvikio as kvikio
from test_remote_s3rver import (BUCKET, KEY, SIZE, _dependencies,  # noqa: F401,F811
                                endpoint, expected)

RET = kvikio.RemoteEndpointType


@pytest.fixture
def no_aws_env(monkeypatch):
    for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_REGION",
                "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)


def check(f):
    assert f.nbytes() == SIZE
    out = np.zeros(SIZE, dtype=np.uint8)
    assert f.read(out) == SIZE
    assert (out == expected()).all()


def test_open_s3_with_arguments(endpoint, no_aws_env):
    url = endpoint[0]
    creds = dict(aws_region_name="us-east-1", aws_access_key_id="S3RVER",
                 aws_secret_access_key="S3RVER")
    with kvikio.RemoteFile.open_s3(BUCKET, KEY, aws_endpoint_url=url,
                                   **creds) as f:
        assert f.remote_endpoint_type() == RET.S3
        check(f)
    # The credentials were there for the open only.
    assert "AWS_ACCESS_KEY_ID" not in os.environ
    assert "AWS_ENDPOINT_URL" not in os.environ
    with kvikio.RemoteFile.open_s3_url("s3://%s/%s" % (BUCKET, KEY),
                                       aws_endpoint_url=url, **creds) as f:
        check(f)
    # A path-style http URL: the endpoint is the URL's own.
    with kvikio.RemoteFile.open_s3_url("%s/%s/%s" % (url, BUCKET, KEY),
                                       **creds) as f:
        check(f)


def test_open_s3_from_environment(endpoint, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint[0])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "S3RVER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "S3RVER")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    url = "s3://%s/%s" % (BUCKET, KEY)
    with kvikio.RemoteFile.open(url) as f:
        assert f.remote_endpoint_type() == RET.S3
        check(f)
    with kvikio.RemoteFile.open(url, RET.S3, [RET.S3], nbytes=1) as f:
        assert f.nbytes() == 1
    with pytest.raises(RuntimeError, match="404"):
        kvikio.RemoteFile.open_s3(BUCKET, "no/such.bin")


def test_open_presigned(endpoint, no_aws_env):
    url = endpoint[1].generate_presigned_url(
        "get_object", Params={"Bucket": BUCKET, "Key": KEY}, ExpiresIn=600)
    assert kvikio.infer_remote_endpoint_type(url) == RET.S3_PRESIGNED_URL
    with kvikio.RemoteFile.open_s3_presigned_url(url) as f:
        assert f.remote_endpoint_type() == RET.S3_PRESIGNED_URL
        check(f)
    with kvikio.RemoteFile.open(url) as f:
        check(f)
