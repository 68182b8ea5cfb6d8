"""gpufile.File on host buffers: read, write, pread, pwrite, sizes,
offsets, the context manager, and the argument errors raised before any
I/O."""
import array
import gc
import mmap

import numpy as np
import pytest

import gpufile


def test_read_numpy(data_file):
    path, data = data_file
    out = np.zeros_like(data)
    with gpufile.File(path) as f:
        assert f.size() == data.size
        assert f.read(out) == data.size
    assert np.array_equal(out, data)


def test_read_size_and_offset(data_file):
    path, data = data_file
    out = np.zeros(1000, dtype=np.uint8)
    with gpufile.File(path, "r") as f:
        assert f.read(out, 500, 4096 + 3) == 500
    assert np.array_equal(out[:500], data[4099:4599])
    assert not out[500:].any()


def test_short_read_at_end_of_file(data_file):
    path, data = data_file
    out = bytearray(4096)
    with gpufile.File(path) as f:
        assert f.read(out, file_offset=data.size - 100) == 100
        assert f.read(out, file_offset=data.size) == 0
    assert out[:100] == data[-100:].tobytes()


def test_read_other_host_buffers(data_file):
    path, data = data_file
    with gpufile.File(path) as f:
        ba = bytearray(3000)
        assert f.read(ba) == 3000 and ba == data[:3000].tobytes()
        mv = memoryview(bytearray(3000))
        assert f.read(mv, file_offset=1) == 3000 and mv.tobytes() == data[1:3001].tobytes()
        arr = array.array("I", [0] * 250)
        assert f.read(arr) == 1000 and arr.tobytes() == data[:1000].tobytes()
        m = mmap.mmap(-1, 8192)
        assert f.read(m, 8192, 5) == 8192 and m[:] == data[5:8197].tobytes()
        m.close()
        two_d = np.zeros((10, 30), dtype=np.float32)  # C order
        assert f.read(two_d) == 1200
        assert two_d.tobytes() == data[:1200].tobytes()
        fortran = np.zeros((10, 30), dtype=np.uint8, order="F")  # contiguous too
        assert f.read(fortran) == 300
        assert fortran.tobytes(order="A") == data[:300].tobytes()


def test_write_then_read(tmp_path):
    path = str(tmp_path / "w.bin")
    payload = np.arange(1 << 20, dtype=np.uint32)
    with gpufile.File(path, "w") as f:
        assert f.write(payload) == payload.nbytes
        assert f.write(b"tail", file_offset=payload.nbytes) == 4  # bytes: read-only is fine
        f.sync()
        assert f.size() == payload.nbytes + 4
    back = np.empty_like(payload)
    with gpufile.File(path, "r+") as f:
        assert f.read(back) == payload.nbytes
        assert f.write(memoryview(b"xyz"), 2, 0) == 2
    assert np.array_equal(back, payload)
    raw = open(path, "rb").read()
    assert raw[:2] == b"xy" and raw[-4:] == b"tail"


def test_pread_pwrite_futures(tmp_path):
    path = str(tmp_path / "f.bin")
    chunks = [np.full(1 << 20, i, dtype=np.uint8) for i in range(8)]
    with gpufile.File(path, "w+") as f:
        futs = [f.pwrite(c, file_offset=i << 20) for i, c in enumerate(chunks)]
        assert sum(fu.get() for fu in futs) == 8 << 20
        assert all(fu.done() for fu in futs)
        outs = [np.empty(1 << 20, dtype=np.uint8) for _ in range(8)]
        futs = [f.pread(o, file_offset=i << 20) for i, o in enumerate(outs)]
        assert [fu.get(timeout=30) for fu in futs] == [1 << 20] * 8
        assert futs[0].get() == 1 << 20  # again: the same value
    for i, o in enumerate(outs):
        assert (o == i).all()


def test_future_keeps_buffer_alive(data_file):
    path, data = data_file
    with gpufile.File(path) as f:
        fut = f.pread(bytearray(data.size))  # no other reference
        gc.collect()
        assert fut.get() == data.size
        # A dropped, unfinished future waits for its request.
        f.pread(np.empty(data.size, dtype=np.uint8))
        gc.collect()


def test_bytearray_cannot_be_resized_while_in_flight(data_file):
    path, data = data_file
    buf = bytearray(data.size)
    with gpufile.File(path) as f:
        fut = f.pread(buf)
        if not fut.done():
            with pytest.raises(BufferError):
                buf.extend(b"x")
        fut.get()
    buf.extend(b"x")  # released after get()


def test_close_waits_and_futures_keep_results(data_file):
    path, data = data_file
    f = gpufile.File(path)
    out = np.empty_like(data)
    fut = f.pread(out)
    f.close()
    assert f.closed
    assert fut.done() and fut.get() == data.size
    assert np.array_equal(out, data)
    f.close()  # again: nothing


def test_context_manager_closes(data_file):
    path, _ = data_file
    with gpufile.File(path) as f:
        assert not f.closed
    assert f.closed
    for call in (lambda: f.read(bytearray(1)), f.size, f.path_info,
                 lambda: f.pread(bytearray(1)), lambda: f.write(b"x")):
        with pytest.raises(ValueError, match="closed file"):
            call()
    with pytest.raises(RuntimeError):
        with gpufile.File(path) as g:
            raise RuntimeError("inside")
    assert g.closed


def test_path_info_host_machine(data_file):
    path, _ = data_file
    with gpufile.File(path) as f:
        info = f.path_info()
    assert info.path in ("host", "posix", "cufile", "small")
    assert isinstance(info.reason, str) and info.reason and "\0" not in info.reason
    assert info._asdict()["path"] == info.path


# ---- argument errors, raised before any I/O ----

def test_read_only_buffer_as_read_target(data_file):
    path, data = data_file
    ro = np.zeros(10, dtype=np.uint8)
    ro.flags.writeable = False
    with gpufile.File(path) as f:
        for target in (b"0123456789", ro, memoryview(bytearray(10)).toreadonly()):
            with pytest.raises(TypeError, match="read-only"):
                f.read(target)
            with pytest.raises(TypeError, match="read-only"):
                f.pread(target)


def test_arrays_of_python_objects_refused(data_file):
    # Their items are object pointers: a read stored file bytes there and
    # the process crashed (segfault) when the array was next used or freed.
    import ctypes

    path, _ = data_file

    class Pair(ctypes.Structure):
        _fields_ = [("obj", ctypes.py_object), ("n", ctypes.c_int)]

    objs = [np.array([None, "x", 3], dtype=object),
            np.zeros(2, dtype=[("a", "O"), ("b", "<i4")]),
            (ctypes.py_object * 2)(1, 2), (Pair * 2)()]
    with gpufile.File(path) as f:
        for a in objs:
            with pytest.raises(TypeError, match="Python objects"):
                f.read(a)
            with pytest.raises(TypeError, match="Python objects"):
                f.pread(a)
    with gpufile.File(path + ".w", "w") as f:
        for a in objs:
            with pytest.raises(TypeError, match="Python objects"):
                f.write(a)
        assert f.size() == 0
    assert list(objs[0]) == [None, "x", 3]
    # A field whose name holds an O is data.
    named = np.zeros(2, dtype=[("Obj", "<i4")])
    with gpufile.File(path) as f:
        assert f.read(named) == 8


def test_non_contiguous(data_file):
    path, _ = data_file
    a = np.zeros((10, 10), dtype=np.uint8)
    with gpufile.File(path) as f:
        with pytest.raises(ValueError, match="not contiguous"):
            f.read(a[:, ::2])
        with pytest.raises(ValueError, match="not contiguous"):
            f.pread(a[::2])
        with pytest.raises(ValueError, match="not contiguous"):
            f.read(memoryview(bytearray(10))[::2])
    with gpufile.File(path + ".w", "w") as f:
        with pytest.raises(ValueError, match="not contiguous"):
            f.write(a.T[::3])


def test_too_small_buffer(data_file):
    path, _ = data_file
    with gpufile.File(path) as f:
        with pytest.raises(ValueError, match="too small.*100 bytes.*holds 99"):
            f.read(bytearray(99), 100)
        with pytest.raises(ValueError, match="too small"):
            f.pread(np.zeros(3, dtype=np.uint16), 7)
    with gpufile.File(path + ".w", "w") as f:
        with pytest.raises(ValueError, match="too small"):
            f.write(b"abc", 4)
        assert f.size() == 0  # nothing written


def test_bad_arguments(data_file):
    path, _ = data_file
    with gpufile.File(path) as f:
        with pytest.raises(TypeError, match="neither a device array"):
            f.read(12345)
        with pytest.raises(TypeError, match="neither a device array"):
            f.read("a string")
        with pytest.raises(ValueError, match="negative"):
            f.read(bytearray(4), -1)
        with pytest.raises(ValueError, match="negative"):
            f.read(bytearray(4), file_offset=-4096)
        with pytest.raises(TypeError, match="integer"):
            f.read(bytearray(4), 2.5)
    with pytest.raises(TypeError, match="flags"):
        gpufile.File(path, 0)


class FakeDeviceArray:
    """A __cuda_array_interface__ producer for tests without a GPU. The
    pointer is host memory; without a CUDA driver the library treats every
    pointer as host memory, so I/O through it works."""

    def __init__(self, host, readonly=False, strides=None, shape=None,
                 typestr=None):
        self.host = host
        self.__cuda_array_interface__ = {
            "data": (host.ctypes.data, readonly),
            "shape": shape or host.shape,
            "typestr": typestr or host.dtype.str,
            "strides": strides,
            "version": 3,
            "stream": None,
        }


def test_cuda_array_interface_objects(data_file):
    path, data = data_file
    host = np.zeros(4096, dtype=np.uint32)
    dev = FakeDeviceArray(host)
    with gpufile.File(path) as f:
        if gpufile.cuda_device_count() == 0:
            assert f.read(dev) == host.nbytes
            assert host.tobytes() == data[:host.nbytes].tobytes()
        with pytest.raises(TypeError, match="read-only"):
            f.read(FakeDeviceArray(host, readonly=True))
        with pytest.raises(ValueError, match="not contiguous"):
            f.read(FakeDeviceArray(host, strides=(8,), shape=(2048,)))
        with pytest.raises(ValueError, match="too small"):
            f.read(dev, host.nbytes + 1)
        # C-contiguous strides spelled out are accepted.
        ok = FakeDeviceArray(host.reshape(64, 64), strides=(256, 4))
        assert gpufile._buffers.as_buffer(ok, True).nbytes == host.nbytes


def test_cuda_array_interface_typestr_sizes(data_file):
    # The item size is not always the number after the type code: a
    # datetime carries its unit ("<M8[ns]", refused as an unknown
    # typestr, though cuDF's timestamp columns have it) and NumPy's "<U4"
    # is 4 characters of 4 bytes (read as 4 bytes: 16 of 64 bytes moved).
    path, data = data_file
    for dtype, nbytes in (("M8[ns]", 32), ("m8[us]", 32), ("U4", 64),
                          ("V12", 48), ("c8", 32)):
        host = np.zeros(4, dtype=dtype)
        dev = FakeDeviceArray(host)
        assert gpufile._buffers.as_buffer(dev, True).nbytes == nbytes
        if gpufile.cuda_device_count() == 0:
            with gpufile.File(path) as f:
                assert f.read(dev) == nbytes
            assert host.tobytes() == data[:nbytes].tobytes()
    with pytest.raises(TypeError, match="unknown __cuda_array_interface__ "
                       "typestr '<M8junk'"):
        gpufile._buffers.as_buffer(FakeDeviceArray(
            np.zeros(4, dtype="M8[ns]"), typestr="<M8junk"), True)


def test_the_integrations_open_is_files(data_file, tmp_path, monkeypatch):
    # _ranges.open_files opens local paths through File._reader, not
    # File() (issue 38: its keyword handling, 2,048 times for a Zarr
    # read): the same File, errors and close as File(path).
    from gpufile._ranges import open_files
    path, data = data_file
    bad = [str(tmp_path / "none"), str(tmp_path), str(tmp_path) + "\0x"]
    inits = []
    real = gpufile.File.__init__

    def counting(self, p, *args, **kwargs):
        inits.append(p)
        real(self, p, *args, **kwargs)
    monkeypatch.setattr(gpufile.File, "__init__", counting)
    files = open_files([path] + bad)
    assert inits == [bad[2]]  # only the path File() refuses itself
    monkeypatch.undo()
    f = files[path]
    with gpufile.File(path) as g:
        assert (type(f), f.name, f.flags, repr(f)) == \
            (type(g), g.name, g.flags, repr(g))
        assert f.size() == g.size() == data.size
    out = np.zeros_like(data)
    assert f.read(out) == data.size and np.array_equal(out, data)
    f.close()
    assert f.closed
    with pytest.raises(ValueError, match="closed"):
        f.size()
    for p in bad:
        with pytest.raises(Exception) as theirs:
            gpufile.File(p)
        got = files[p]
        assert type(got) is type(theirs.value) and \
            str(got) == str(theirs.value)
