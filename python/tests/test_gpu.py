"""Device buffers through CuPy; skipped without CuPy and a GPU."""
import numpy as np
import pytest

import gpufile
from conftest import needs_gpu

pytestmark = needs_gpu


def test_read_write_cupy(data_file, tmp_path):
    import cupy as cp

    path, data = data_file
    dev = cp.empty(data.size, dtype=cp.uint8)
    before = gpufile.stats()["gpufile"]["read"]
    with gpufile.File(path) as f:
        assert f.read(dev) == data.size
        info = f.path_info()
    assert info.path in ("cufile", "posix")
    assert np.array_equal(cp.asnumpy(dev), data)
    after = gpufile.stats()["gpufile"]["read"]
    moved = sum(after[p]["bytes"] - before[p]["bytes"] for p in ("cufile", "posix", "small"))
    assert moved == data.size
    out = str(tmp_path / "out.bin")
    with gpufile.File(out, "w") as f:
        assert f.pwrite(dev).get() == data.size
    assert open(out, "rb").read() == data.tobytes()


def test_cupy_argument_errors(data_file):
    import cupy as cp

    path, _ = data_file
    a = cp.zeros((64, 64), dtype=cp.float32)
    with gpufile.File(path) as f:
        with pytest.raises(ValueError, match="not contiguous"):
            f.read(a[:, ::2])
        with pytest.raises(ValueError, match="too small"):
            f.read(a, a.nbytes + 1)
        fut = f.pread(a)
        assert fut.get() == a.nbytes
