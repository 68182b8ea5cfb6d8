"""Remote objects (http://, s3://) read through gpufile.File into NumPy
(and CuPy on a GPU machine), against tests/remote/fault_server.py."""
import errno
import gc
import warnings

import numpy as np
import pytest

import gpufile
from conftest import in_ci, needs_gpu, remote_server

SIZE = (1 << 20) + 4097

# Under CI, where scripts/deps.sh installs libcurl, they run (and fail).
pytestmark = pytest.mark.skipif("remote" not in gpufile.features() and not in_ci(),
                                reason="built without libcurl")


def expected(off, n):
    i = np.arange(off, off + n, dtype=np.uint64)
    return ((i * 131 + (i >> 9)) & 255).astype(np.uint8)


@pytest.fixture(scope="module")
def server():
    with remote_server("fault_server.py", SIZE, 3) as port:
        yield "http://127.0.0.1:%d" % port


def test_read_into_numpy(server):
    with gpufile.defaults.set(remote_task_size=64 << 10):
        with gpufile.File(server + "/ok/o.bin") as f:
            assert f.size() == SIZE
            out = np.full(SIZE + 200, 0xA5, dtype=np.uint8)
            assert f.read(out[100:100 + SIZE]) == SIZE
            assert (out[100:100 + SIZE] == expected(0, SIZE)).all()
            assert (out[:100] == 0xA5).all() and (out[-100:] == 0xA5).all()
            part = np.zeros(300001, dtype=np.uint8)
            assert f.pread(part, file_offset=1000).get() == 300001
            assert (part == expected(1000, 300001)).all()


def test_retried_ranges_land_in_place(server):
    with gpufile.defaults.set(remote_task_size=64 << 10):
        with gpufile.File(server + "/closeonce/o.bin") as f:
            out = np.zeros(SIZE, dtype=np.uint8)
            assert f.read(out) == SIZE
            assert (out == expected(0, SIZE)).all()


def test_errors_name_url_and_hide_secrets(server):
    url = server + "/e404/o.bin?X-Amz-Signature=SECRETSIG"
    with pytest.raises(FileNotFoundError) as e:
        gpufile.File(url)
    assert "HTTP 404" in str(e.value)
    assert "/e404/o.bin" in str(e.value)
    assert "SECRETSIG" not in str(e.value)
    with pytest.raises(OSError) as e:
        gpufile.File(server + "/ok/o.bin", "r+")  # "w" uploads
    assert e.value.errno == errno.EROFS
    with gpufile.File(server + "/ok/o.bin?X-Amz-Signature=SECRETSIG") as f:
        assert "SECRETSIG" not in f.name and "SECRETSIG" not in repr(f)


def test_failed_range_raises(server):
    with gpufile.File(server + "/ignorerange/o.bin") as f:
        out = np.zeros(1000, dtype=np.uint8)
        with pytest.raises(OSError) as e:
            f.read(out, file_offset=10)
        assert "ignored the Range request" in str(e.value)


def test_transfer_timeout_is_not_a_wait_timeout(server):
    """A read whose transfer timed out ends with -ETIMEDOUT, the code
    gpufile_future_wait_for returns for a request not done yet:
    get(timeout=30) took it for one and raised "not done after 30s" at
    once, every time, though done() was True."""
    with gpufile.defaults.set(http_timeout=1, http_max_attempts=1):
        with gpufile.File(server + "/stall/o.bin") as f:
            fut = f.pread(np.zeros(4096, dtype=np.uint8))
            for _ in range(2):  # the transfer's end, then the same again
                with pytest.raises(TimeoutError) as e:
                    fut.get(timeout=30)
                assert "not done after" not in str(e.value)
                assert e.value.code == -errno.ETIMEDOUT
                assert "curl error 28" in str(e.value)
                assert fut.done()
            with pytest.raises(TimeoutError) as e:
                fut.get()
            assert "curl error 28" in str(e.value)


def test_batch_failed_entry_outlives_the_with_block(server, data_file):
    """A batch ended by its with-block lost its results and messages: a
    failed entry was never seen (wait() afterwards: AttributeError)."""
    path, data = data_file
    buf = bytearray(16)
    with gpufile.File(server + "/e403/o.bin") as r, gpufile.File(path) as f:
        entries = [(f, buf, None, 0), (r, bytearray(4), 4, 0)]
        # Ended without a wait: the failed entry is raised at the end.
        with pytest.raises(PermissionError) as e:
            with gpufile.BatchRead(entries) as b:
                pass
        assert "batch entry 1" in str(e.value) and "403" in str(e.value)
        assert b.results() == [16, -errno.EACCES]
        with pytest.raises(PermissionError) as e:
            b.wait()
        assert "batch entry 1" in str(e.value) and "403" in str(e.value)
        assert bytes(buf) == data[:16].tobytes()
        # Waited for in the block: reported there, not again at its end.
        with gpufile.BatchRead(entries) as b:
            assert b.results() == [16, -errno.EACCES]
        assert b.results() == [16, -errno.EACCES]


def test_dropped_failures_warn(server):
    """A Future or a BatchRead dropped before its outcome was read lost a
    failed read without a word; now its finaliser warns with the error.
    One whose outcome was read says nothing."""
    with gpufile.File(server + "/e403/o.bin") as r:
        fut = r.pread(bytearray(4), 4, 0)
        with pytest.warns(RuntimeWarning, match="Future never got.*403"):
            del fut
            gc.collect()
        b = gpufile.BatchRead([(r, bytearray(4), 4, 0)])
        with pytest.warns(RuntimeWarning,
                          match="never waited for.*batch entry 0.*403"):
            del b
            gc.collect()
        fut = r.pread(bytearray(4), 4, 0)
        with pytest.raises(PermissionError):
            fut.get()
        b = gpufile.BatchRead([(r, bytearray(4), 4, 0)])
        assert b.results() == [-errno.EACCES]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            del fut, b
            gc.collect()


def test_batch_wait_long_timeout(server):
    """BatchRead.wait(timeout) handed int(timeout * 1000) to the C long of
    gpufile_batch_wait: 2**64 / 1000 s wrapped to 0 ms, a TimeoutError at
    once for a batch still running (Future.get() had a guard). The first
    attempt at this range stalls past http_timeout, so the batch runs for
    a second at least."""
    with gpufile.defaults.set(http_timeout=1, http_max_attempts=2):
        with gpufile.File(server + "/stallonce/o.bin") as r:
            buf = np.zeros(4096, dtype=np.uint8)
            b = gpufile.BatchRead([(r, buf, None, 12345)])
            assert b.wait(timeout=2 ** 64 / 1000) == [4096]
            assert (buf == expected(12345, 4096)).all()


@needs_gpu
def test_read_into_cupy(server):
    import cupy as cp

    with gpufile.File(server + "/ok/o.bin") as f:
        out = cp.zeros(SIZE, dtype=cp.uint8)
        assert f.read(out) == SIZE
        assert (cp.asnumpy(out) == expected(0, SIZE)).all()


def test_batch_read_remote_and_local(server, data_file):
    """A batch mixing a remote object and a local file: the remote entries
    are read as File.read reads them, the local ones through io_uring."""
    path, data = data_file
    with gpufile.File(server + "/ok/o.bin") as r, gpufile.File(path) as f:
        bufs = [np.zeros(5000, dtype=np.uint8) for _ in range(8)]
        entries = [(r if i % 2 else f, bufs[i], None, i * 7000)
                   for i in range(8)]
        assert gpufile.batch_read(entries) == [5000] * 8
        for i in range(8):
            want = expected(i * 7000, 5000) if i % 2 else data[i * 7000:i * 7000 + 5000]
            assert (bufs[i] == want).all(), i
