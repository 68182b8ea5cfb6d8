"""gpufile.kvikio, KvikIO's Python API on gpufile (issue 34): files, maps,
page cache, buffers, the cuFile driver and the NumPy helpers, in host
memory (the CuPy parts are in test_kvikio_gpu.py). Written from KvikIO's
documented behaviour."""
import errno
import os

import numpy as np
import pytest

import gpufile
import gpufile.kvikio as kvikio
import gpufile.kvikio.numpy as kvikio_numpy

PAGE = os.sysconf("SC_PAGE_SIZE")


@pytest.fixture
def npfile(tmp_path):
    a = np.arange(10000, dtype=np.int64)
    path = tmp_path / "a.bin"
    a.tofile(path)
    return path, a


# ---- CuFile ----

def test_cufile_roundtrip(tmp_path):
    path = tmp_path / "f"
    a = np.arange(1000, dtype=np.int64)
    with kvikio.CuFile(path, "w") as f:
        assert not f.closed
        assert f.write(a) == a.nbytes
        fut = f.pwrite(a[:10], file_offset=a.nbytes)
        assert isinstance(fut, kvikio.IOFuture)
        assert fut.get() == 80
        assert fut.done()
        assert f.write(a, size=16, file_offset=a.nbytes + 80,
                       task_size=1024) == 16
    assert f.closed
    b = np.empty_like(a)
    with kvikio.CuFile(str(path), "r") as f:
        assert f.nbytes() == a.nbytes + 96
        assert f.read(b) == a.nbytes
        assert np.array_equal(a, b)
        c = np.zeros(10, dtype=np.int64)
        assert f.pread(c, file_offset=a.nbytes).get() == 80
        assert np.array_equal(c, a[:10])
        assert f.read(c, size=16, file_offset=a.nbytes + 80) == 16
        assert list(c[:2]) == [0, 1]
        assert os.fstat(f.fileno()).st_size == a.nbytes + 96
        assert f.open_flags() & os.O_ACCMODE == os.O_RDONLY
        assert isinstance(f.file, gpufile.File)  # gpufile's extras


def test_cufile_flags(tmp_path):
    path = tmp_path / "f"
    a = np.arange(100, dtype=np.uint8)
    with kvikio.CuFile(path, "w+") as f:
        assert f.open_flags() & os.O_ACCMODE == os.O_RDWR
        assert f.write(a) == 100
        b = np.empty_like(a)
        assert f.read(b) == 100 and np.array_equal(a, b)
    # "a" (KvikIO: read and write, create, no truncation, no O_APPEND):
    # a write lands at its offset, the rest stays.
    with kvikio.CuFile(path, "a") as f:
        assert f.write(np.full(10, 7, np.uint8), file_offset=5) == 10
        b = np.empty_like(a)
        assert f.read(b) == 100
    want = a.copy()
    want[5:15] = 7
    assert np.array_equal(b, want)
    with kvikio.CuFile(tmp_path / "new", "a") as f:
        assert f.nbytes() == 0
    with kvikio.CuFile(path, "r+") as f:
        assert f.open_flags() & os.O_ACCMODE == os.O_RDWR
    with kvikio.CuFile(path, "w") as f:  # truncates
        assert f.nbytes() == 0
        assert f.open_flags() & os.O_ACCMODE == os.O_WRONLY
    for bad in ("", "z", "rb", "rw", "r++"):
        with pytest.raises(ValueError, match="Unknown file open flag"):
            kvikio.CuFile(path, bad)


def test_cufile_errors(tmp_path, npfile):
    path, a = npfile
    missing = tmp_path / "missing"
    with pytest.raises(RuntimeError,
                       match="Unable to open file.*No such file or directory"
                       ) as e:
        kvikio.CuFile(missing, "r")
    # Still an OSError with gpufile's details, for gpufile code.
    assert isinstance(e.value, OSError)
    assert e.value.errno == errno.ENOENT
    assert isinstance(e.value, kvikio.RuntimeOSError)

    with kvikio.CuFile(path, "r") as f:
        with pytest.raises(RuntimeError, match="Operation not permitted"):
            f.write(a)
        with pytest.raises(RuntimeError, match="Operation not permitted"):
            f.pwrite(a)
        b = np.empty_like(a)
        with pytest.raises(OverflowError, match="negative value"):
            f.read(b, file_offset=-1)
        with pytest.raises(OverflowError, match="negative value"):
            f.read(b, size=-1)
        with pytest.raises(ValueError, match="task_size must be a positive"):
            f.read(b, task_size=0)
        with pytest.raises(ValueError, match="Non-CUDA buffers not supported"):
            f.raw_read(b)
        with pytest.raises(ValueError, match="Non-CUDA buffers not supported"):
            f.raw_read_async(b, 0)
    with kvikio.CuFile(tmp_path / "w", "w") as f:
        with pytest.raises(RuntimeError, match="Operation not permitted"):
            f.read(np.empty(10))
        with pytest.raises(ValueError, match="Non-CUDA buffers not supported"):
            f.raw_write(a)
        with pytest.raises(ValueError, match="Non-CUDA buffers not supported"):
            f.raw_write_async(a, 0)
        with pytest.raises(RuntimeError, match="Operation not permitted"):
            f.raw_read_async(a, 0)
    with pytest.raises(ValueError, match="closed"):
        f.write(a)


class _CudaArrayInterface:
    """Host memory presented as device memory (__cuda_array_interface__):
    without CUDA, gpufile reads it as host memory, which tests the raw
    calls' argument handling (dev_offset, sizes) on any machine."""

    def __init__(self, a):
        self.a = a
        self.__cuda_array_interface__ = {
            "shape": (a.nbytes,), "typestr": "|u1", "version": 3,
            "data": (a.ctypes.data, False), "strides": None}


def test_cufile_raw_dev_offset(npfile):
    if gpufile.cuda_device_count() > 0:
        pytest.skip("CUDA is there: test_kvikio_gpu.py tests device memory")
    path, a = npfile
    c = np.zeros(100, dtype=np.int64)
    with kvikio.CuFile(path, "r+") as f:
        assert f.raw_read(_CudaArrayInterface(c), 80, 400, 160) == 80
        assert np.array_equal(c[20:30], a[50:60])
        assert not c[:20].any() and not c[30:].any()
        assert f.raw_write(_CudaArrayInterface(c), 16, 8, dev_offset=160) == 16
        d = np.empty(4, dtype=np.int64)
        assert f.read(d) == 32
        assert list(d) == [0, 50, 51, 3]
        with pytest.raises(IndexError, match="dev_offset"):
            f.raw_read(_CudaArrayInterface(c), 8, 0, dev_offset=c.nbytes + 1)
        with pytest.raises(IndexError, match="do not fit"):
            f.raw_read(_CudaArrayInterface(c), c.nbytes, 0, dev_offset=8)
        with pytest.raises(OverflowError, match="negative value"):
            f.raw_read(_CudaArrayInterface(c), 8, 0, dev_offset=-1)


def test_cufile_direct_io_supported(npfile):
    path, _ = npfile
    with kvikio.CuFile(path, "r") as f:
        assert isinstance(f.is_direct_io_supported(), bool)
        with kvikio.defaults.set({"auto_direct_io_read": False,
                                  "auto_direct_io_write": False}):
            assert f.is_direct_io_supported() is False


# ---- page cache ----

def test_page_cache_info(tmp_path, npfile):
    path, a = npfile
    pages = -(-a.nbytes // PAGE)
    for arg in (path, str(path)):
        cached, total = kvikio.get_page_cache_info(arg)
        assert total == pages and 0 <= cached <= total
    with open(path, "rb") as f:
        assert kvikio.get_page_cache_info(f.fileno())[1] == pages
        assert kvikio.get_page_cache_info(f)[1] == pages
    # Partial pages at both ends count whole; offset past the end: (0, 0).
    assert kvikio.get_page_cache_info(path, PAGE - 1, 2)[1] == 2
    assert kvikio.get_page_cache_info(path, 1, 1)[1] == 1
    assert kvikio.get_page_cache_info(path, a.nbytes + 1) == (0, 0)
    with pytest.raises(RuntimeError, match="Unable to open file"):
        kvikio.get_page_cache_info(tmp_path / "missing")
    for bad in (123.456, ["path_in_a_list"]):
        with pytest.raises(ValueError):
            kvikio.get_page_cache_info(bad)


def test_drop_page_cache(npfile, monkeypatch):
    path, a = npfile
    kvikio.drop_file_page_cache(path)
    kvikio.drop_file_page_cache(str(path), 0, PAGE, sync_first=False)

    # Without the privilege: False, as KvikIO (not run for real here: the
    # machine may be shared, and the test may run as root).
    def refuse(reclaim):
        raise PermissionError(errno.EACCES, "not root")
    monkeypatch.setattr(gpufile._page_cache, "drop_system_page_cache", refuse)
    assert kvikio.drop_system_page_cache() is False
    with pytest.warns(FutureWarning, match="drop_system_page_cache"):
        assert kvikio.clear_page_cache() is False


# ---- Mmap ----

def test_mmap_reads(npfile):
    path, a = npfile
    b = np.zeros_like(a)
    m = kvikio.Mmap(path, "r")
    assert m.initial_map_size() == a.nbytes and m.initial_map_offset() == 0
    assert m.file_size() == a.nbytes
    assert m.read(b) == a.nbytes and np.array_equal(a, b)
    b[:] = 0
    fut = m.pread(b, task_size=4096)
    assert isinstance(fut, kvikio.IOFuture) and fut.get() == a.nbytes
    assert np.array_equal(a, b)
    m.close()
    assert m.closed()
    assert m.file_size() == 0
    with pytest.raises(RuntimeError, match="Cannot read from a closed "
                                           "MmapHandle"):
        m.read(b)
    with pytest.raises(RuntimeError, match="Cannot read from a closed "
                                           "MmapHandle"):
        m.pread(b)

    with kvikio.Mmap(path, "r", 1024, 512) as m:
        c = np.zeros(128, dtype=np.int64)
        assert m.read(c, 1024, 512) == 1024
        assert np.array_equal(c, a[64:192])
        assert m.read(c, 0, 512) == 0


def test_mmap_errors(tmp_path, npfile):
    path, a = npfile
    with pytest.raises(RuntimeError, match="Unable to open file"):
        kvikio.Mmap(tmp_path / "missing")
    for bad in ("", "z"):
        with pytest.raises(ValueError, match="Unknown file open flag"):
            kvikio.Mmap(path, bad)
    with pytest.raises(IndexError, match="Offset must be less than the file "
                                         "size"):
        kvikio.Mmap(path, "r", None, a.nbytes * 2)
    with pytest.raises(IndexError, match="Mapped region is past the end of "
                                         "file"):
        kvikio.Mmap(path, "r", a.nbytes * 2)
    with pytest.raises(ValueError, match="Mapped region should not be zero "
                                         "byte"):
        kvikio.Mmap(path, "r", 0)
    out = np.zeros_like(a)
    with kvikio.Mmap(path, "r", 1024, 512) as m:
        with pytest.raises(IndexError, match="Offset is past the end of file"):
            m.read(out, 1024, a.nbytes + 1)
        for size, off in ((1024, 513), (1024, 384), (1152, 512)):
            with pytest.raises(IndexError, match="Read is out of bound"):
                m.read(out, size, off)
        # Without size: to the end of the file, outside this map.
        with pytest.raises(IndexError, match="Read is out of bound"):
            m.read(out, None, 512)


# ---- buffers, streams, driver ----

def test_buffers_and_streams():
    a = np.zeros(4096, dtype=np.uint8)
    kvikio.memory_register(a)  # host memory: nothing to register
    kvikio.memory_deregister(a)
    assert isinstance(kvikio.bounce_buffer_free(), int)
    kvikio.stream_register(0, 0)
    kvikio.stream_deregister(0)
    with pytest.raises(TypeError):
        kvikio.stream_register("a stream", 0)


def test_cufile_driver_names():
    drv = kvikio.cufile_driver
    major, minor = drv.libcufile_version()
    assert major >= 0 and minor >= 0
    with pytest.raises(KeyError):
        drv.get("nonexistent_property")
    with pytest.raises(KeyError):
        drv.set("nonexistent_property", 123)
    with pytest.raises(KeyError, match="read-only"):
        drv.set("major_version", 2077)
    with pytest.raises(ValueError, match="Valid arguments"):
        drv.set("poll_mode")
    if gpufile.cuda_device_count() > 0:
        return  # a real driver may open: test_kvikio_gpu.py
    # No usable cuFile here: KvikIO's RuntimeError, saying why.
    with pytest.raises(RuntimeError):
        drv.driver_open()
    with pytest.raises(RuntimeError):
        drv.get("poll_mode")


# ---- NumPy helpers ----

def test_numpy_fromfile_tofile(tmp_path):
    a = np.arange(100, dtype=np.float32)
    path = tmp_path / "f"
    kvikio_numpy.tofile(a[::2], path)  # not contiguous: written in C order
    assert np.array_equal(np.fromfile(path, dtype=np.float32), a[::2])
    kvikio_numpy.tofile(a, str(path))
    assert np.array_equal(kvikio_numpy.fromfile(path, dtype=np.float32), a)
    got = kvikio_numpy.fromfile(path, dtype=np.float32, count=10, offset=8)
    assert np.array_equal(got, a[2:12])
    assert kvikio_numpy.fromfile(path, dtype=np.float32, count=1000).size == 100
    with open(path, "rb") as f:
        assert np.array_equal(kvikio_numpy.fromfile(f, dtype=np.float32), a)
    like = kvikio_numpy.LikeWrapper(np.empty(()))
    assert np.array_equal(np.fromfile(path, dtype=np.float32, like=like), a)
    with pytest.raises(FileNotFoundError, match="no file"):
        kvikio_numpy.fromfile("no file")
    with pytest.raises(NotImplementedError, match="Non-default value of the "
                                                  "`sep`"):
        kvikio_numpy.fromfile(path, sep=",")
    assert kvikio.numpy is kvikio_numpy


# ---- utils, names ----

def test_utils_and_names():
    @kvikio.kvikio_deprecation_notice("use bar", since="1.0")
    def foo():
        return 3
    with pytest.warns(FutureWarning, match="use bar"):
        assert foo() == 3
    assert "1.0" in foo.__doc__
    with pytest.warns(FutureWarning, match="since 2.0.*gone"):
        kvikio.utils.kvikio_deprecate_module("gone", since="2.0")
    calls = []

    @kvikio.utils.call_once
    def once():
        calls.append(1)
        return len(calls)
    assert once() == 1 and once() == 1
    assert isinstance(kvikio.__version__, str) and kvikio.__version__
    assert isinstance(kvikio.__git_commit__, str)
    for name in kvikio.__all__:
        assert hasattr(kvikio, name), name
