"""Errors from the library surface as OSError with errno, gpufile's message
and code, and the cuFile status where there is one."""
import errno
import os

import pytest

import gpufile
from gpufile import _lib


def test_missing_file():
    with pytest.raises(FileNotFoundError) as ei:
        gpufile.File("/nonexistent/dir/file.bin")
    e = ei.value
    assert e.errno == errno.ENOENT
    assert e.filename == "/nonexistent/dir/file.bin"
    assert "/nonexistent/dir/file.bin" in e.strerror  # gpufile's message
    assert e.code == -errno.ENOENT and e.code_name == "ENOENT"
    assert e.cufile_status is None


def test_bad_flags(data_file):
    path, _ = data_file
    with pytest.raises(gpufile.Error) as ei:
        gpufile.File(path, "rw")
    e = ei.value
    assert isinstance(e, OSError)
    assert e.errno == errno.EINVAL
    assert e.code == -5007 and e.code_name == "GPUFILE_EFLAGS"
    assert e.strerror


def test_wrong_direction(data_file, tmp_path):
    path, _ = data_file
    with gpufile.File(path, "r") as f:
        with pytest.raises(OSError) as ei:
            f.write(b"x" * 10)
        assert ei.value.errno == errno.EBADF
        assert ei.value.filename == path
        # Found when submitted (or else by get()): the same error.
        with pytest.raises(OSError) as ei:
            f.pwrite(b"abc").get()
        assert ei.value.errno == errno.EBADF
    w = str(tmp_path / "wo.bin")
    with gpufile.File(w, "w") as f:
        f.write(b"hello")
        with pytest.raises(OSError) as ei:
            f.read(bytearray(5))
        assert ei.value.errno == errno.EBADF


def test_is_a_directory(tmp_path):
    with pytest.raises(OSError) as ei:
        with gpufile.File(str(tmp_path), "w"):
            pass
    assert ei.value.errno in (errno.EISDIR, errno.EINVAL)


def test_bad_setting_from_environment(monkeypatch, data_file):
    path, _ = data_file
    monkeypatch.setenv("GPUFILE_TASK_SIZE", "banana")
    gpufile.defaults.reset()
    with pytest.raises(gpufile.ConfigError) as ei:
        with gpufile.File(path) as f:
            f.read(bytearray(10))
    e = ei.value
    assert isinstance(e, OSError) and isinstance(e, ValueError)
    assert e.errno == errno.EINVAL and e.code_name == "GPUFILE_ECONFIG"
    assert "GPUFILE_TASK_SIZE" in str(e) and "banana" in str(e)
    with pytest.raises(gpufile.ConfigError, match="banana"):
        gpufile.defaults.get("task_size")
    monkeypatch.delenv("GPUFILE_TASK_SIZE")
    gpufile.defaults.reset()
    assert gpufile.defaults.get("task_size") > 0


@pytest.mark.parametrize("code,name,err", [
    (-5001, "GPUFILE_ECONFIG", errno.EINVAL),
    (-5002, "GPUFILE_ENOCUDA", errno.ENODEV),
    (-5003, "GPUFILE_ECUDA", errno.EIO),
    (-5004, "GPUFILE_ENOCUFILE", errno.ENODEV),
    (-5005, "GPUFILE_ECUFILE", errno.EIO),
    (-5006, "GPUFILE_EBADPTR", errno.EFAULT),
    (-5007, "GPUFILE_EFLAGS", errno.EINVAL),
])
def test_library_codes(code, name, err):
    e = _lib.make_error(code, message="")
    assert isinstance(e, gpufile.Error) and e.errno == err
    assert e.code == code and e.code_name == name
    assert e.strerror == gpufile._lib.strerror(code)  # no message: strerror


def test_cufile_status_is_kept():
    msg = ("read of 4194304 bytes of /data/x at offset 0: "
           "CU_FILE_HANDLE_NOT_REGISTERED (5027)")
    e = _lib.make_error(-5005, message=msg, filename="/data/x")
    assert e.cufile_status == 5027
    assert e.cufile_status_name == "CU_FILE_HANDLE_NOT_REGISTERED"
    assert e.strerror == msg and e.filename == "/data/x"
    assert e.errno == errno.EIO


def test_system_errno_becomes_its_subclass():
    assert isinstance(_lib.make_error(-errno.EACCES, "denied"), PermissionError)
    assert isinstance(_lib.make_error(-errno.ESRCH, "gone"), ProcessLookupError)
    e = _lib.make_error(-errno.ENOSPC, "full")
    assert type(e) is OSError and e.errno == errno.ENOSPC and e.code_name == "ENOSPC"


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_permission_denied(tmp_path):
    p = tmp_path / "secret"
    p.write_bytes(b"x")
    p.chmod(0)
    with pytest.raises(PermissionError):
        gpufile.File(str(p))


def test_url_secrets_stay_out_of_errors():
    """File redacts a URL's user:password and presigned query; Mmap(url)
    and page_cache_info(url) opened it as a local path and put it whole
    in the message and OSError.filename. No server is needed: they refuse
    a URL before any I/O."""
    url = ("http://user:hunter2@127.0.0.1:9/o.bin"
           "?X-Amz-Signature=SECRETSIG")
    for call in (lambda: gpufile.Mmap(url),
                 lambda: gpufile.page_cache_info(url)):
        with pytest.raises(OSError) as e:
            call()
        assert e.value.errno == errno.ENOTSUP
        assert "remote object" in str(e.value)
        assert "http://127.0.0.1:9/o.bin?<query redacted>" in str(e.value)
        for secret in ("hunter2", "SECRETSIG"):
            assert secret not in str(e.value)
            assert secret not in repr(e.value.filename)
