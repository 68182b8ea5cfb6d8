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


def test_threads_without_context_read_into_each_gpu(data_file):
    """Issue 10 item 8: threads that have made no CUDA call (so no context
    is current in them) read into CuPy arrays on device d, one thread per
    GPU (two threads on one GPU), and the bytes arrive. The arrays carry
    the legacy default stream (1) in their __cuda_array_interface__, which
    the binding synchronises with the array's context pushed; before, it
    failed with 'cuStreamSynchronize(0x1) ... CUresult 201'."""
    import threading

    import cupy as cp

    path, data = data_file
    ndev = cp.cuda.runtime.getDeviceCount()
    devices = list(range(ndev)) if ndev > 1 else [0, 0]
    arrays = []
    for d in devices:
        with cp.cuda.Device(d):
            arrays.append(cp.zeros(data.size, dtype=cp.uint8))
            cp.cuda.Device(d).synchronize()
    errors, counts = [], [None] * len(devices)
    start = threading.Barrier(len(devices))

    def reader(i):
        try:
            start.wait()
            with gpufile.File(path) as f:
                n = f.read(arrays[i])  # no context current in this thread
            with cp.cuda.Device(devices[i]):  # as in the issue
                with gpufile.File(path) as f:
                    n2 = f.read(arrays[i][:4096], 4096, 4096)
            counts[i] = (n, n2)
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=reader, args=(i,), daemon=True)
               for i in range(len(devices))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
        assert not t.is_alive(), "a reader thread hangs"
    assert errors == []
    assert counts == [(data.size, 4096)] * len(devices)
    for i, a in enumerate(arrays):
        host = cp.asnumpy(a)
        assert np.array_equal(host[:4096], data[4096:8192]), "device %d" % devices[i]
        assert np.array_equal(host[4096:], data[4096:]), "device %d" % devices[i]
