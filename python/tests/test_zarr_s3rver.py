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


def test_example_computes_over_s3_with_two_workers(s3_env, uploaded):  # noqa: F811
    """examples/zarr_s3_dask.py on a LocalCluster of 2 worker processes."""
    import re
    import subprocess
    import sys

    import gpufile
    from conftest import PKG_ROOT
    pytest.importorskip("distributed")
    example = os.path.join(PKG_ROOT, "..", "examples", "zarr_s3_dask.py")
    env = dict(os.environ, GPUFILE_LIBRARY=gpufile.library_path(),
               PYTHONPATH=os.pathsep.join(
                   [PKG_ROOT] + [p for p in [os.environ.get("PYTHONPATH")]
                                 if p]))
    url = "s3://%s/%s" % (BUCKET, PREFIX)
    p = subprocess.run([sys.executable, example, url, "--workers", "2",
                        "--timeout", "300"], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "sum %r " % float(uploaded.sum()) in p.stdout, p.stdout
    assert "max %r" % float(uploaded.max()) in p.stdout, p.stdout
    workers = re.findall(r"^worker \S+ pid (\d+): (\d+) bytes read from S3",
                         p.stdout, re.M)
    assert len(workers) == 2, p.stdout
    # Each chunk is read by one worker per computation (4 of them here);
    # together they read the array through gpufile's S3 source.
    assert sum(int(b) for _, b in workers) >= uploaded.nbytes, p.stdout
