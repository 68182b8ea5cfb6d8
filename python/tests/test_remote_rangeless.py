"""Reads from a server that ignores Range (tests/remote/plain_server.py,
the standard library's http.server: every GET is 200 with the whole
file): every read, at any offset and of any size, into host memory and
into device memory (the fake driver, tests/fake_libcuda) through many
small bounce buffers, delivers exactly its bytes; each call downloads
the body once, never more than the object (conftest's RangelessServer
counts what it sends); a body whose length is not the size at open
fails the read."""
import errno
import os
import subprocess
import sys

import numpy as np
import pytest

import gpufile
from conftest import RangelessServer, in_ci, missing, run_with_fake_driver

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "..", "..", "tests", "remote", "plain_server.py")
FAULTS = os.path.join(HERE, "..", "..", "tests", "remote", "fault_server.py")
SIZE = (1 << 20) + 4097
DATA = ((np.arange(SIZE, dtype=np.uint64) * 131 + 7) & 255).astype(
    np.uint8).tobytes()

pytestmark = pytest.mark.skipif("remote" not in gpufile.features() and not in_ci(),
                                reason="built without libcurl")


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plain")
    (folder / "o.bin").write_bytes(DATA)
    p = subprocess.Popen([sys.executable, SERVER, str(folder)],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("PORT "), line
    yield "http://127.0.0.1:%d/o.bin" % int(line.split()[1])
    p.terminate()
    p.wait()


@pytest.fixture(scope="module")
def faults():
    """fault_server.py's base URL, serving an object of SIZE bytes whose
    byte i is (i * 131 + (i >> 9)) & 255."""
    p = subprocess.Popen([sys.executable, FAULTS, str(SIZE)],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("PORT "), line
    yield "http://127.0.0.1:%d" % int(line.split()[1])
    p.terminate()
    p.wait()


def fault_data():
    i = np.arange(SIZE, dtype=np.uint64)
    return ((i * 131 + (i >> 9)) & 255).astype(np.uint8).tobytes()


def test_path_reason_says_the_body_is_streamed(url):
    with gpufile.File(url) as f:
        path, reason = f.path_info()
    assert path == "remote"
    assert "ignores Range" in reason and "dropped" in reason, reason


def test_host_read_at_an_offset(url):
    with gpufile.File(url) as f:
        out = np.full(300001 + 200, 0xA5, dtype=np.uint8)
        assert f.read(out[100:100 + 300001], file_offset=5000) == 300001
        assert out[100:100 + 300001].tobytes() == DATA[5000:305001]
        assert (out[:100] == 0xA5).all() and (out[-100:] == 0xA5).all()
        info = f.remote_info()
    assert info["failures"] == 0


DEVICE_CHILD = r'''
import ctypes, sys
import gpufile

cuda = ctypes.CDLL("libcuda.so.1")
assert hasattr(cuda, "fake_cuda_wait_ops"), "not the fake driver"
lib = gpufile._lib.lib()
lib.gpufile_device_alloc.argtypes = [ctypes.c_int, ctypes.c_size_t,
                                     ctypes.POINTER(ctypes.c_void_p)]
url, size, off, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4])
mode = sys.argv[5]
ptr = ctypes.c_void_p()
assert lib.gpufile_device_alloc(0, size, ctypes.byref(ptr)) == 0
ctypes.memset(ptr.value, 0xA5, size)


class Dev:
    __cuda_array_interface__ = {"data": (ptr.value, False), "shape": (n,),
                                "typestr": "|u1", "version": 2}


with gpufile.File(url) as f:
    if mode == "async":  # on a stream of its own
        cuda.cuStreamCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p),
                                        ctypes.c_uint]
        s = ctypes.c_void_p()
        assert cuda.cuStreamCreate(ctypes.byref(s), 1) == 0
        got = f.read_async(Dev(), s.value, file_offset=off).get()
    else:
        got = f.read(Dev(), file_offset=off)
    assert got == n, got
    print("retries", f.remote_info()["retries"], file=sys.stderr)
sys.stdout.buffer.write(ctypes.string_at(ptr.value, size))
'''


def device_read(url, off, n, mode="read"):
    """Runs DEVICE_CHILD under the fake driver: 64 KiB bounce buffers, two
    per worker (each refilled many times), File.read or (mode "async")
    File.read_async; returns its stdout (the device buffer of SIZE
    bytes)."""
    d = os.path.join(os.path.dirname(gpufile.library_path()), "tests",
                     "fake_libcuda", "lib")
    if not os.path.exists(os.path.join(d, "libcuda.so.1")):
        missing("no tests/fake_libcuda/lib/libcuda.so.1 next to the library")
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = d + os.pathsep + env.get("LD_LIBRARY_PATH", "")
    env["GPUFILE_LIBRARY"] = gpufile.library_path()
    env["GPUFILE_COMPAT_MODE"] = "on"
    env["GPUFILE_BOUNCE_BUFFER_SIZE"] = "64KiB"
    env["GPUFILE_BOUNCE_BUFFERS"] = "2"
    env["GPUFILE_REMOTE_TASK_SIZE"] = "256KiB"
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(gpufile.__file__))
    p = subprocess.run([sys.executable, "-c", DEVICE_CHILD, url, str(SIZE),
                        str(off), str(n), mode],
                       env=env, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    assert len(p.stdout) == SIZE
    return p.stdout, p.stderr.decode()


@pytest.mark.parametrize("off,n", [(0, SIZE), (70001, SIZE - 70001 - 3333)])
def test_device_read_through_many_bounce_buffers(url, off, n):
    """More than a dozen bounce buffers, whole and at an offset: every
    byte arrives, nothing past the read is written."""
    out, _ = device_read(url, off, n)
    assert out[:n] == DATA[off:off + n]
    assert out[n:] == b"\xa5" * (SIZE - n)


def test_device_read_cut_half_way_is_read_again(faults):
    """The body's first attempt stops half-way (after many bounce buffers
    went to the GPU): the retry writes from the start again, and the
    device buffer ends with exactly the object."""
    out, err = device_read(faults + "/plaincut/o.bin", 0, SIZE)
    assert out == fault_data()
    assert "retries 1" in err, err


# ---- one body per call (conftest's RangelessServer counts the bytes) ----


@pytest.fixture(scope="module")
def counted():
    srv = RangelessServer(DATA)
    yield srv
    srv.close()


def assert_one_body(srv, mark):
    """What the GETs of reads since mark were handed to send (each
    counted before it went out: never less than the client took) is at
    most the object: one body, not one per task or range."""
    bodies = srv.bodies(mark)
    assert bodies, "no body was read"
    assert sum(bodies) <= SIZE, "bodies of %s bytes for an object of %d" % (
        bodies, SIZE)


def test_whole_object_host_read_is_one_body(counted):
    with gpufile.File(counted.url) as f:
        out = np.zeros(SIZE, dtype=np.uint8)
        mark = counted.mark()
        assert f.read(out) == SIZE
        assert_one_body(counted, mark)
    assert out.tobytes() == DATA


@pytest.mark.parametrize("task", [None, 64 << 10])
@pytest.mark.parametrize("off,n", [(500000, 300000), (510000, 300000),
                                   (SIZE - 5000, 4000)])
def test_host_read_of_a_middle_range_is_one_body(counted, task, off, n):
    """A read at an offset that is no multiple of its size: the pool cut
    it in two tasks at multiples of the task size, and a task in two
    ranges at multiples of its length, each a body from the start; with
    small tasks (task_size, remote_task_size 64 KiB) as with the
    defaults, one body."""
    if task:
        gpufile.defaults.set({"task_size": task, "remote_task_size": task})
    with gpufile.File(counted.url) as f:
        out = np.full(n + 200, 0xA5, dtype=np.uint8)
        mark = counted.mark()
        assert f.read(out[100:100 + n], file_offset=off) == n
        assert_one_body(counted, mark)
    assert out[100:100 + n].tobytes() == DATA[off:off + n]
    assert (out[:100] == 0xA5).all() and (out[-100:] == 0xA5).all()


@pytest.mark.parametrize("mode", ["read", "async"])
def test_device_read_is_one_body(counted, mode):
    """A device read at an offset through the fake driver, blocking or
    stream-ordered: one body through the bounce buffers (the pool cut it
    in two tasks, each streaming the body from its start)."""
    off, n = 70001, SIZE - 70001 - 3333
    mark = counted.mark()
    out, _ = device_read(counted.url, off, n, mode)
    assert_one_body(counted, mark)
    assert out[:n] == DATA[off:off + n]
    assert out[n:] == b"\xa5" * (SIZE - n)


@pytest.mark.parametrize("count", [5, 700])
def test_batch_is_one_body(counted, count):
    """The host entries of a batch, out of order, overlapping, beyond
    one round of the batch's workers (700 entries): one body serves them
    all in offset order."""
    rng = np.random.default_rng(count)
    offs = rng.integers(0, SIZE - 3000, count)
    sizes = rng.integers(1, 3000, count)
    bufs = [np.zeros(int(k), dtype=np.uint8) for k in sizes]
    with gpufile.File(counted.url) as f:
        mark = counted.mark()
        got = gpufile.batch_read([(f, b, None, int(o))
                                  for b, o in zip(bufs, offs)])
        assert_one_body(counted, mark)
    assert got == [int(k) for k in sizes]
    for b, o in zip(bufs, offs):
        assert b.tobytes() == DATA[o:o + len(b)]


@pytest.mark.parametrize("delta", [1000, -1000])
def test_a_body_of_another_size_fails_the_read(delta):
    """The object changed between the open and the read: a 200 whose
    Content-Length is not the size at open fails the read (ESTALE),
    naming the URL and both sizes; no byte of the other object is
    returned."""
    srv = RangelessServer(DATA)
    try:
        with gpufile.File(srv.url) as f:
            srv.data = DATA + b"\x01" * delta if delta > 0 else \
                DATA[:delta]
            out = np.zeros(SIZE, dtype=np.uint8)
            with pytest.raises(OSError) as e:
                f.read(out)
    finally:
        srv.close()
    msg = str(e.value)
    assert e.value.errno == errno.ESTALE, msg
    assert srv.url in msg and "ignor" not in msg, msg
    assert "%d bytes then, %d now" % (SIZE, SIZE + delta) in msg, msg


BATCH_CHILD = r'''
url = sys.argv[1]
ptr = ctypes.c_void_p()
assert lib.gpufile_device_alloc(0, 4096, ctypes.byref(ptr)) == 0


class Dev:
    __cuda_array_interface__ = {"data": (ptr.value, False), "shape": (4096,),
                                "typestr": "|u1", "version": 2}


host = bytearray(4096)
with gpufile.File(url) as f:
    try:
        gpufile.batch_read([(f, host, None, 0), (f, Dev(), None, 9000)])
    except OSError as e:
        print(e)
    else:
        print("read")
'''


def test_batch_device_entry_beside_others_is_refused(counted):
    """A device entry is read alone (a body of its own): beside another
    entry of the same object the batch is refused at submit, naming the
    entry, the URL and why, and nothing is read."""
    mark = counted.mark()
    p = run_with_fake_driver(BATCH_CHILD, [counted.url])
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "batch entry 1" in out and counted.url in out, out
    assert "ignores Range requests" in out, out
    assert counted.bodies(mark) == []
