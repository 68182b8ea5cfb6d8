"""File.fileno(), File.fd(direct), File.open_flags(), bounce_buffer_free()."""
import os

import pytest

import gpufile


def test_fileno_and_flags(data_file):
    path, _ = data_file
    with gpufile.File(path, "r+") as f:
        assert os.fstat(f.fileno()).st_ino == os.stat(path).st_ino
        flags = f.open_flags()
        assert flags & os.O_ACCMODE == os.O_RDWR
        assert not flags & os.O_DIRECT
    with gpufile.File(path) as f:
        assert f.open_flags() & os.O_ACCMODE == os.O_RDONLY


def test_direct_fd(data_file):
    path, _ = data_file
    gpufile.defaults.set("direct_io", "off")
    with gpufile.File(path) as f:
        with pytest.raises(FileNotFoundError) as e:
            f.fd(direct=True)
        assert "direct_io=off" in str(e.value)
    gpufile.defaults.set("direct_io", "on")
    with gpufile.File(path) as f:
        import fcntl
        d = f.fd(direct=True)
        assert fcntl.fcntl(d, fcntl.F_GETFL) & os.O_DIRECT
        assert os.fstat(d).st_ino == os.stat(path).st_ino


def test_closed_file(data_file):
    path, _ = data_file
    f = gpufile.File(path)
    f.close()
    with pytest.raises(ValueError):
        f.fileno()


def test_bounce_buffer_free():
    """Nothing held: 0. With a GPU, after a device read: the bytes that
    were pinned, and a second call frees nothing."""
    from conftest import have_gpu
    if not have_gpu():
        assert gpufile.bounce_buffer_free() == 0
        return
    import cupy
    a = cupy.empty(8 << 20, dtype=cupy.uint8)
    with open_tmp(8 << 20) as path, gpufile.File(path) as f:
        assert f.read(a) == 8 << 20
    gpufile.defaults.set("compat_mode", "on")
    assert gpufile.bounce_buffer_free() >= 0
    with open_tmp(8 << 20) as path, gpufile.File(path) as f:
        assert f.read(a) == 8 << 20
    assert gpufile.bounce_buffer_free() > 0
    assert gpufile.bounce_buffer_free() == 0


class open_tmp:
    def __init__(self, size):
        import tempfile
        self.f = tempfile.NamedTemporaryFile()
        self.f.write(os.urandom(size))
        self.f.flush()

    def __enter__(self):
        return self.f.name

    def __exit__(self, *exc):
        self.f.close()
