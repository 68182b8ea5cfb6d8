"""gpufile.kvikio with CuPy device memory (issue 34): CuFile's threaded
and raw calls, dev_offset, stream-ordered raw_read_async/raw_write_async,
Mmap and the NumPy helpers into device memory, registration, and small
bounce buffers through the staged path. Skipped without CuPy and a GPU."""
import numpy as np
import pytest

import gpufile
import gpufile.kvikio as kvikio
import gpufile.kvikio.numpy as kvikio_numpy
from conftest import needs_gpu

pytestmark = needs_gpu


@pytest.fixture
def cp():
    import cupy
    return cupy


def test_cufile_device_roundtrip(cp, tmp_path):
    path = tmp_path / "f"
    a = cp.arange(1 << 20, dtype=cp.int64)
    with kvikio.CuFile(path, "w+") as f:
        assert f.write(a) == a.nbytes
        b = cp.empty_like(a)
        assert f.pread(b, task_size=1 << 20).get() == a.nbytes
        assert bool((a == b).all())
        c = cp.zeros(100, dtype=cp.int64)
        assert f.raw_read(c, 80, 800, dev_offset=160) == 80
        assert bool((c[20:30] == a[100:110]).all())
        assert bool((c[:20] == 0).all()) and bool((c[30:] == 0).all())
        assert f.raw_write(a, 16, a.nbytes, dev_offset=8) == 16
        d = np.empty(2, dtype=np.int64)
        assert f.read(d, file_offset=a.nbytes) == 16
        assert list(d) == [1, 2]
        with pytest.raises(IndexError):
            f.raw_read(c, 100, 0, dev_offset=800)


def test_raw_async_on_a_stream(cp, tmp_path):
    path = tmp_path / "f"
    a = cp.arange(1 << 18, dtype=cp.int32)
    stream = cp.cuda.Stream(non_blocking=True)
    with kvikio.CuFile(path, "w+") as f:
        fut = f.raw_write_async(a, stream.ptr)
        assert isinstance(fut, kvikio.IOFutureStream)
        assert fut.check_bytes_done() == a.nbytes
        b = cp.zeros_like(a)
        fut = f.raw_read_async(b, stream.ptr, a.nbytes - 8, 8, dev_offset=4)
        assert fut.check_bytes_done() == a.nbytes - 8
        stream.synchronize()
        assert bool((b[1:-1] == a[2:]).all())
    with kvikio.CuFile(path, "r") as f:
        with pytest.raises(RuntimeError, match="Operation not permitted"):
            f.raw_write_async(a, stream.ptr)


def test_mmap_and_numpy_into_device(cp, tmp_path):
    path = tmp_path / "f"
    a = np.arange(100000, dtype=np.float64)
    a.tofile(path)
    b = cp.zeros(a.size, dtype=cp.float64)
    with kvikio.Mmap(path, "r") as m:
        assert m.read(b) == a.nbytes
        assert np.array_equal(cp.asnumpy(b), a)
        b[:] = 0
        assert m.pread(b).get() == a.nbytes
        assert np.array_equal(cp.asnumpy(b), a)
    got = kvikio_numpy.fromfile(path, dtype=np.float64, like=cp.empty(()))
    assert isinstance(got, cp.ndarray)
    assert np.array_equal(cp.asnumpy(got), a)
    kvikio_numpy.tofile(cp.asarray(a[::3]), tmp_path / "g")
    assert np.array_equal(np.fromfile(tmp_path / "g"), a[::3])


def test_memory_register(cp, tmp_path):
    a = cp.arange(1 << 16, dtype=cp.uint8)
    kvikio.memory_register(a)
    try:
        with kvikio.CuFile(tmp_path / "f", "w+") as f:
            assert f.write(a) == a.nbytes
            b = cp.zeros_like(a)
            assert f.read(b) == a.nbytes
            assert bool((a == b).all())
    finally:
        kvikio.memory_deregister(a)


@pytest.mark.parametrize("bounce", [3, 1000, 4097])
def test_small_bounce_buffers_staged(cp, tmp_path, bounce):
    """A bounce_buffer_size below 64 KiB is the size used (issue 34):
    device reads and writes staged through it, in compat mode."""
    path = tmp_path / "f"
    a = cp.arange(20000, dtype=cp.uint8)
    with kvikio.defaults.set({"compat_mode": kvikio.CompatMode.ON,
                              "bounce_buffer_size": bounce,
                              "gds_threshold": 0}):
        assert kvikio.defaults.get("bounce_buffer_size") == bounce
        with kvikio.CuFile(path, "w+") as f:
            assert f.write(a[1:], file_offset=4097) == a.nbytes - 1
            b = cp.zeros(a.size + 2, dtype=cp.uint8)
            assert f.read(b[3:], a.nbytes - 1, 4097) == a.nbytes - 1
            assert bool((b[3:] == a[1:]).all())
            assert f.file.path_info().path == "posix"
        freed = kvikio.bounce_buffer_free()
        assert freed > 0 and freed % 4096 == 0


def test_cufile_driver_on_the_gpu_machine():
    drv = kvikio.cufile_driver
    if gpufile.defaults.get("compat_mode") == "on":
        pytest.skip("compat_mode=on: cuFile is not loaded")
    try:
        drv.driver_open()
    except RuntimeError as e:
        pytest.skip("no usable cuFile: %s" % e)
    try:
        assert drv.libcufile_version() >= (1, 0)
        assert isinstance(drv.get("is_gds_available"), bool)
        # A setting either takes (and the context restores it) or, where
        # cuFile accepts the call yet keeps its value (cuFile 1.15 without
        # nvidia-fs does so for the poll threshold), is refused naming the
        # setting, the value and what cuFile still reports.
        for name in ("poll_thresh_size", "max_device_cache_size",
                     "max_pinned_memory_size"):
            before = drv.get(name)
            want = before * 2 if before else 1024
            try:
                ctx = drv.set(name, want)
            except RuntimeError as e:
                assert "%s=%d" % (name, want) in str(e), str(e)
                assert "still reports %d" % before in str(e), str(e)
                assert drv.get(name) == before
                continue
            with ctx:
                assert drv.get(name) == want
                assert getattr(drv.properties, name) == want
            assert drv.get(name) == before
    finally:
        drv.driver_close()
