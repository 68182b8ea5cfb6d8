"""gpufile.zarr and gpufile.fsspec over S3 (s3rver, as in
test_remote_s3rver.py, whose fixtures these are: skipped where s3rver,
botocore or libcurl are missing, failing under CI): a Zarr array written
locally, uploaded with botocore, read back through gpufile's S3 source."""
import os

import numpy as np
import pytest

from conftest import missing
from test_remote_s3rver import BUCKET, _dependencies, endpoint, s3_env  # noqa: F401

try:
    import zarr
except ImportError:
    zarr = None

PREFIX = "arrays/z.zarr"


@pytest.fixture(scope="module")
def uploaded(endpoint, tmp_path_factory):  # noqa: F811
    if zarr is None:
        missing("python3-zarr")
    import gpufile.zarr as gz
    root = str(tmp_path_factory.mktemp("s3zarr") / "z.zarr")
    a = (np.arange(50 * 30, dtype="<i4") * 3).reshape(50, 30)
    z = gz.open_array(root, mode="w", shape=a.shape, chunks=(16, 30),
                      dtype=a.dtype, compressor=None)
    z[:] = a
    client = endpoint[1]
    for name in os.listdir(root):
        with open(os.path.join(root, name), "rb") as f:
            client.put_object(Bucket=BUCKET, Key=PREFIX + "/" + name,
                              Body=f.read())
    return a


def test_zarr_array_on_s3(s3_env, uploaded):  # noqa: F811
    import gpufile
    import gpufile.zarr as gz
    url = "s3://%s/%s" % (BUCKET, PREFIX)
    before = gpufile.stats()["gpufile"]["read"]["remote"]["bytes"]
    z = gz.open_array(url, mode="r")
    assert type(z.store) is gz.RemoteStore
    assert (z[:] == uploaded).all()
    assert (z[10:40, 3:7] == uploaded[10:40, 3:7]).all()
    after = gpufile.stats()["gpufile"]["read"]["remote"]["bytes"]
    assert after - before >= uploaded.nbytes
    # zarr's own Array over the store (getitems: one batch).
    assert (zarr.open_array(gz.RemoteStore(url), mode="r")[:] == uploaded).all()
    with pytest.raises(PermissionError):
        z.store["0.0"] = b"x"


def test_fsspec_cat_ranges_on_s3(s3_env, uploaded):  # noqa: F811
    import fsspec
    import gpufile.fsspec  # noqa: F401
    fs = fsspec.filesystem("gpufile")
    url = "s3://%s/%s/1.0" % (BUCKET, PREFIX)
    raw = uploaded[16:32].tobytes()
    assert fs.info(url)["size"] == len(raw)
    assert fs.cat_ranges([url, url, "gpufile://" + url], [0, 100, -8],
                         [10, 200, None]) == [raw[:10], raw[100:200], raw[-8:]]
    with pytest.raises(FileNotFoundError):
        fs.cat_file("s3://%s/%s/9.9" % (BUCKET, PREFIX))
    # zarr through the protocol, storage_options and all.
    z = zarr.open_array("gpufile://s3://%s/%s" % (BUCKET, PREFIX), mode="r",
                        storage_options={})
    assert (z[:] == uploaded).all()
