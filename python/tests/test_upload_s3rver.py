"""Uploads to s3rver, an S3 server written by others (npm): PutObject for a
small object and a multipart upload of several parts (CreateMultipartUpload,
UploadPart, CompleteMultipartUpload) as a real S3 implementation takes
them, read back with botocore and with gpufile. s3rver implements neither
AbortMultipartUpload nor ListMultipartUploads (405 / NotImplemented in its
lib/routes.js), so the aborted upload is tested against
tests/remote/s3_upload_server.py (test_upload.py). scripts/s3rver.sh
installs s3rver into .deps/."""
import numpy as np
import pytest

import gpufile
from conftest import need_s3rver, s3rver, s3rver_env

BUCKET = "gpufile-uploads"
MiB = 1 << 20


@pytest.fixture(scope="module", autouse=True)
def _dependencies():
    need_s3rver()


def pattern(n, seed):
    i = np.arange(n, dtype=np.uint64) + seed
    return ((i * 7 + (i >> 13)) & 255).astype(np.uint8)


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    """(URL, botocore client, log of requests) of an s3rver."""
    with s3rver(tmp_path_factory.mktemp("s3rver"), BUCKET) as served:
        yield served


@pytest.fixture
def s3_env(endpoint, monkeypatch):
    s3rver_env(monkeypatch, endpoint[0])
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
