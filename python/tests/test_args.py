"""Integers and strings are checked against the C types they become, before
any I/O (issue 10 item 12): ctypes wraps ints modulo 2**64 and a C string
ends at its first NUL, so f.read(b, 16, 2**64 + 100) read offset 100,
f.write(x, 16, 2**64) overwrote the first bytes, and File("/tmp/x\\0junk")
opened /tmp/x."""
import os

import numpy as np
import pytest

import gpufile


def test_offsets_beyond_off_t(data_file):
    path, data = data_file
    b = bytearray(16)
    with gpufile.File(path) as f:
        for off in (2 ** 64 + 100, 2 ** 64, 2 ** 63, 2 ** 200):
            with pytest.raises(OverflowError, match="file_offset %d" % off):
                f.read(b, 16, off)
            with pytest.raises(OverflowError, match="file_offset"):
                f.pread(b, 16, off)
        assert b == bytearray(16)  # nothing was read
        with pytest.raises(ValueError, match="negative"):
            f.read(b, 16, -2 ** 64 + 100)
        # The largest offset is accepted (and is past the end: 0 bytes).
        assert f.read(b, 0, 2 ** 63 - 1) == 0
        # A range that ends past the largest offset is refused.
        with pytest.raises(OverflowError, match="ends beyond"):
            f.read(b, 16, 2 ** 63 - 8)


def test_write_beyond_off_t_writes_nothing(tmp_path):
    path = str(tmp_path / "w.bin")
    with open(path, "wb") as out:
        out.write(b"A" * 32)
    with gpufile.File(path, "r+") as f:
        with pytest.raises(OverflowError):
            f.write(b"B" * 16, 16, 2 ** 64)
        with pytest.raises(OverflowError):
            f.pwrite(b"B" * 16, 16, 2 ** 64 + 4).get()
    assert open(path, "rb").read() == b"A" * 32


def test_sizes_beyond_the_c_types(data_file):
    path, _ = data_file
    with gpufile.File(path) as f:
        for size in (2 ** 64 + 4, 2 ** 63):
            with pytest.raises(OverflowError, match="size %d" % size):
                f.read(bytearray(8), size)
        with pytest.raises(ValueError, match="negative"):
            f.read(bytearray(8), -(2 ** 64) + 4)
        with pytest.raises(TypeError, match="integer"):
            f.read(bytearray(8), 4.0)
        with pytest.raises(TypeError, match="integer"):
            f.read(bytearray(8), 4, "0")
        # numpy integers are integers.
        assert f.read(bytearray(8), np.uint64(8), np.int64(1)) == 8


def test_embedded_nul_in_path_and_flags(tmp_path):
    real = tmp_path / "x"
    real.write_bytes(b"hello")
    for p in (str(real) + "\0junk", os.fsencode(str(real)) + b"\0junk"):
        with pytest.raises(ValueError, match="embedded null byte"):
            gpufile.File(p)
        with pytest.raises(ValueError):
            open(p)  # the same kind of error as Python's own
    with pytest.raises(ValueError, match="embedded null byte"):
        gpufile.File(str(real), "r\0w")
    with pytest.raises(TypeError, match="path"):
        gpufile.File(12.5)
    with gpufile.File(real) as f:  # os.PathLike still works
        assert f.size() == 5


def test_future_timeout_out_of_range(data_file):
    path, data = data_file
    out = bytearray(4096)
    with gpufile.File(path) as f:
        # Would wrap the C long of milliseconds into a negative timeout.
        assert f.pread(out).get(timeout=1e30) == 4096
        # int() refuses infinity: OverflowError.
        assert f.pread(out).get(timeout=float("inf")) == 4096
        b = gpufile.BatchRead([(f, out, None, 0)])
        assert b.wait(timeout=float("inf")) == [4096]
    assert out == data[:4096].tobytes()


def test_future_timeout_not_a_number(data_file):
    # "1" reached "1" * 1000 >= 2**40 (TypeError "'>=' not supported
    # between instances of 'str' and 'int'") and NaN int() (ValueError
    # "cannot convert float NaN to integer"): neither named the timeout.
    path, data = data_file
    out = bytearray(4096)
    with gpufile.File(path) as f:
        fut = f.pread(out)
        b = gpufile.BatchRead([(f, out, None, 0)])
        for wait in (fut.get, b.wait):
            with pytest.raises(TypeError, match="timeout must be a number "
                               "of seconds or None, not str"):
                wait(timeout="1")
            with pytest.raises(ValueError, match="timeout is NaN"):
                wait(timeout=float("nan"))
        assert fut.get(timeout=np.float64(30)) == 4096
        assert b.wait(timeout=np.int64(30)) == [4096]
    assert out == data[:4096].tobytes()


def test_settings_and_info_arguments(tmp_path):
    with pytest.raises(ValueError, match="embedded null byte"):
        gpufile.defaults.set(task_size="4m\0junk")
    with pytest.raises(OverflowError, match="pid"):
        gpufile.stats(2 ** 32 + os.getpid())
    with pytest.raises(ValueError, match="negative"):
        gpufile.stats(-1)
    with pytest.raises(OverflowError, match="size"):
        gpufile.explain(2 ** 64 + 1)
    with pytest.raises(ValueError, match="negative"):
        gpufile.explain(1 << 20, offset=-1)
    with pytest.raises(ValueError, match="embedded null byte"):
        gpufile.explain(1 << 20, cufile_json=str(tmp_path / "c.json") + "\0x")
    with pytest.raises(ValueError, match="embedded null byte"):
        gpufile.check(str(tmp_path) + "\0x")
    with pytest.raises(OverflowError, match="flags"):
        gpufile.buf_register(bytearray(8), 2 ** 32)


def test_mmap_and_page_cache_arguments(data_file):
    """Mmap() and page_cache_info() skipped File's checks: Mmap(p + "\\0junk")
    mapped p, initial_map_offset=2**64 + 4096 mapped from 4096,
    page_cache_info(p, 2**64, 4096) counted from 0 and took 1.9 as 1."""
    path, data = data_file
    for bad in (path + "\0junk", os.fsencode(path) + b"\0junk"):
        with pytest.raises(ValueError, match="embedded null byte"):
            gpufile.Mmap(bad)
        with pytest.raises(ValueError, match="embedded null byte"):
            gpufile.page_cache_info(bad)
        with pytest.raises(ValueError, match="embedded null byte"):
            gpufile.drop_file_page_cache(bad)
    with pytest.raises(ValueError, match="embedded null byte"):
        gpufile.Mmap(path, "r\0w")
    for big in (2 ** 64 + 4096, 2 ** 64, 2 ** 63):
        with pytest.raises(OverflowError, match="initial_map_offset %d" % big):
            gpufile.Mmap(path, initial_map_offset=big)
        with pytest.raises(OverflowError, match="initial_map_size %d" % big):
            gpufile.Mmap(path, initial_map_size=big)
        with pytest.raises(OverflowError, match="offset %d" % big):
            gpufile.page_cache_info(path, big, 4096)
        with pytest.raises(OverflowError, match="size %d" % big):
            gpufile.page_cache_info(path, 0, big)
        with pytest.raises(OverflowError, match="offset %d" % big):
            gpufile.drop_file_page_cache(path, big, 4096)
    with pytest.raises(ValueError, match="negative"):
        gpufile.Mmap(path, initial_map_size=-(2 ** 64) + 16)
    with pytest.raises(ValueError, match="negative"):
        gpufile.Mmap(path, initial_map_offset=-1)
    with pytest.raises(ValueError, match="negative"):
        gpufile.page_cache_info(path, 0, -1)
    with pytest.raises(ValueError, match="negative"):
        gpufile.drop_file_page_cache(path, -1)
    for kw in ({"initial_map_size": 16.0}, {"initial_map_offset": 1.9}):
        with pytest.raises(TypeError, match="integer"):
            gpufile.Mmap(path, **kw)
    with pytest.raises(TypeError, match="integer"):
        gpufile.page_cache_info(path, 1.9, 2.7)
    with pytest.raises(TypeError, match="integer"):
        gpufile.drop_file_page_cache(path, 0, 2.7)
    with gpufile.Mmap(path) as m:
        b = bytearray(16)
        with pytest.raises(OverflowError, match="offset"):
            m.read(b, 16, 2 ** 64 + 100)
        with pytest.raises(TypeError, match="integer"):
            m.read(b, 16, 100.0)
        assert b == bytearray(16)  # nothing was read
    # numpy integers are integers.
    with gpufile.Mmap(path, initial_map_size=np.uint64(4096),
                      initial_map_offset=np.int64(4096)) as m:
        assert (m.initial_map_offset(), m.initial_map_size()) == (4096, 4096)
    info = gpufile.page_cache_info(path, np.int64(0), np.uint64(4096))
    assert info[1] == 4096
