"""gpufile.zarr with CuPy (meta_array): chunks read into device memory.
Skipped without CuPy and a CUDA GPU; run on the GPU machine."""
import numpy as np
import pytest

import gpufile
from conftest import needs_gpu

zarr = pytest.importorskip("zarr")
pytestmark = needs_gpu


@pytest.fixture(scope="module")
def cp():
    import cupy
    return cupy


def test_whole_chunks_land_in_device_memory(cp, tmp_path):
    import gpufile.zarr as gz
    root = str(tmp_path / "g.zarr")
    a = np.arange(40 * 1000, dtype="<f4").reshape(40, 1000)
    z = gz.open_array(root, mode="w", shape=a.shape, chunks=(8, 1000),
                      dtype=a.dtype, compressor=None)
    z[:] = a
    r = gz.open_array(root, mode="r", meta_array=cp.empty(()))
    before = gpufile.stats()["gpufile"]["read"]
    got = r[:]
    after = gpufile.stats()["gpufile"]["read"]
    assert isinstance(got, cp.ndarray)
    assert (cp.asnumpy(got) == a).all()
    host = after["host"]["bytes"] - before["host"]["bytes"]
    assert host == 0  # every chunk went to the device, none via host
    part = r[3:37, 10:900]  # cut chunks: via host, decoded, copied over
    assert isinstance(part, cp.ndarray)
    assert (cp.asnumpy(part) == a[3:37, 10:900]).all()


def test_compressed_chunks_decode_on_the_host(cp, tmp_path):
    # Zlib, numcodecs' pure-Python codec: the GPU machine's numcodecs is
    # carried without its compiled codecs (scripts/make_carry.sh).
    import numcodecs
    import gpufile.zarr as gz
    root = str(tmp_path / "c.zarr")
    a = np.arange(3000, dtype="<i8")
    z = gz.open_array(root, mode="w", shape=a.shape, chunks=(256,),
                      dtype=a.dtype, compressor=numcodecs.Zlib())
    z[:] = a
    r = gz.open_array(root, mode="r", meta_array=cp.empty(()))
    got = r[:]
    assert isinstance(got, cp.ndarray) and (cp.asnumpy(got) == a).all()


def test_device_writes_round_trip(cp, tmp_path):
    import gpufile.zarr as gz
    root = str(tmp_path / "w.zarr")
    z = gz.open_array(root, mode="w", shape=(5000,), chunks=(1000,),
                      dtype="<f8", compressor=None, meta_array=cp.empty(()))
    z[:] = cp.arange(5000, dtype=cp.float64)
    back = zarr.open_array(zarr.storage.DirectoryStore(root), mode="r")[:]
    assert (back == np.arange(5000.0)).all()
