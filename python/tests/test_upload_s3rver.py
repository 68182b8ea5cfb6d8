"""Uploads to s3rver, an S3 server written by others (npm): PutObject for a
small object and a multipart upload of several parts (CreateMultipartUpload,
UploadPart, CompleteMultipartUpload) as a real S3 implementation takes
them, read back with botocore and with gpufile. s3rver implements neither
AbortMultipartUpload nor ListMultipartUploads (405 / NotImplemented in its
lib/routes.js), so the aborted upload is tested against
tests/remote/s3_upload_server.py (test_upload.py). scripts/s3rver.sh
installs s3rver into .deps/."""
import os
import subprocess
import threading

import numpy as np
import pytest

import gpufile
from conftest import missing

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
S3RVER = os.environ.get("GPUFILE_S3RVER") or os.path.join(
    ROOT, ".deps", "s3rver", "node_modules", ".bin", "s3rver")
BUCKET = "gpufile-uploads"
MiB = 1 << 20

try:
    import botocore.session as botocore
except ImportError:
    botocore = None


@pytest.fixture(scope="module", autouse=True)
def _dependencies():
    if "remote" not in gpufile.features():
        missing("libcurl (built without it)")
    if botocore is None:
        missing("python3-botocore (import botocore.session failed)")
    if not os.access(S3RVER, os.X_OK):
        missing("s3rver: %s is not installed (scripts/s3rver.sh)" % S3RVER)


def pattern(n, seed):
    i = np.arange(n, dtype=np.uint64) + seed
    return ((i * 7 + (i >> 13)) & 255).astype(np.uint8)


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("s3rver")
    p = subprocess.Popen([S3RVER, "-d", str(data_dir), "-a", "127.0.0.1",
                          "-p", "0", "--configure-bucket", BUCKET],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    line = ""
    while "listening on" not in line:
        line = p.stdout.readline()
        if not line:
            p.wait()
            pytest.fail("s3rver exited (%d) before listening" % p.returncode)
    url = "http://" + line.split("listening on")[1].strip()
    # Its log of requests, one line each (also keeps its pipe drained).
    log = []
    threading.Thread(target=lambda: log.extend(iter(p.stdout.readline, "")),
                     daemon=True).start()
    from botocore.config import Config
    client = botocore.get_session().create_client(
        "s3", endpoint_url=url, region_name="us-east-1",
        aws_access_key_id="S3RVER", aws_secret_access_key="S3RVER",
        config=Config(signature_version="s3v4",
                      s3={"addressing_style": "path"}))
    yield url, client, log
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
    return endpoint[1]


@pytest.fixture
def s3_log(endpoint):
    return endpoint[2]


def read_back(client, key):
    return client.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def test_put_object_round_trip(s3_env):
    data = pattern(2 * MiB + 3, 1)
    key = "small/put one.bin"
    with gpufile.File("s3://%s/%s" % (BUCKET, key), "w") as f:
        assert f.write(data) == data.size
    assert read_back(s3_env, key) == data.tobytes()
    with gpufile.File("s3://%s/%s" % (BUCKET, key)) as f:
        out = np.zeros(data.size, dtype=np.uint8)
        assert f.read(out) == data.size
        assert (out == data).all()


def test_multipart_round_trip(s3_env, s3_log):
    data = pattern(16 * MiB + 4321, 2)
    key = "big/multi.bin"
    with gpufile.defaults.set(upload_part_size=5 * MiB):
        with gpufile.File("s3://%s/%s" % (BUCKET, key), "w") as f:
            assert f.write(data) == data.size
    head = s3_env.head_object(Bucket=BUCKET, Key=key)
    assert head["ContentLength"] == data.size
    assert read_back(s3_env, key) == data.tobytes()
    # s3rver logs each request before answering it: 4 parts of 5 MiB went
    # up (its multipart ETag has no "-4" to tell).
    parts = {l.split("partNumber=")[1].split("&")[0] for l in s3_log
             if "big/multi.bin?partNumber=" in l}
    assert parts == {"1", "2", "3", "4"}, "".join(s3_log)


def test_safetensors_save_file_to_s3(s3_env):
    import gpufile.safetensors as st
    tensors = {"w": np.arange(4096, dtype=np.float32).reshape(64, 64)}
    st.save_file(tensors, "s3://%s/ckpt/model.safetensors" % BUCKET)
    assert read_back(s3_env, "ckpt/model.safetensors") == st.save(tensors)
    from gpufile.safetensors.numpy import load_file
    got = load_file("s3://%s/ckpt/model.safetensors" % BUCKET)
    assert (got["w"] == tensors["w"]).all()
