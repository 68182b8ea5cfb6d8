"""The context of a __cuda_array_interface__ buffer is made current before
its stream is synchronised (issue 10 item 8), tested on a machine without a
GPU with a fake of the driver calls in gpufile._cuda: like libcuda, it keeps
one stack of current contexts per thread, a new thread starts with none,
and cuStreamSynchronize without a current context fails with
CUDA_ERROR_INVALID_CONTEXT (201)."""
import threading

import numpy as np
import pytest

import gpufile
from gpufile import _cuda

CTX = {0: 0xC0, 1: 0xC1}  # the context each fake device's memory belongs to
PRIMARY = {0: 0xB0, 1: 0xB1}
INVALID_CONTEXT = 201


class FakeDriver:
    def __init__(self, memory):
        self.memory = memory  # ptr -> (device, ctx or 0)
        self.tls = threading.local()
        self.events = []
        self.lock = threading.Lock()
        self.retained = {}

    def _stack(self):
        if not hasattr(self.tls, "stack"):
            self.tls.stack = []  # a new thread: no current context
        return self.tls.stack

    def _log(self, *e):
        with self.lock:
            # The thread object, not its ident: idents are reused.
            self.events.append((threading.current_thread(),) + e)

    def cuPointerGetAttribute(self, attribute, ptr):
        dev, ctx = self.memory[ptr]
        if attribute == _cuda.CU_POINTER_ATTRIBUTE_CONTEXT:
            return 0, ctx
        assert attribute == _cuda.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        return 0, dev

    def cuDeviceGet(self, ordinal):
        return 0, ordinal

    def cuDevicePrimaryCtxRetain(self, dev):
        with self.lock:
            self.retained[dev] = self.retained.get(dev, 0) + 1
        return 0, PRIMARY[dev]

    def cuDevicePrimaryCtxRelease(self, dev):
        with self.lock:
            self.retained[dev] -= 1
        return 0

    def cuCtxPushCurrent(self, ctx):
        self._stack().append(ctx)
        self._log("push", ctx)
        return 0

    def cuCtxPopCurrent(self):
        s = self._stack()
        if not s:
            return INVALID_CONTEXT, 0
        ctx = s.pop()
        self._log("pop", ctx)
        return 0, ctx

    def cuCtxGetCurrent(self):
        s = self._stack()
        return 0, s[-1] if s else 0

    def cuStreamSynchronize(self, stream):
        s = self._stack()
        if not s:
            self._log("sync failed", stream)
            return INVALID_CONTEXT
        self._log("sync", stream, s[-1])
        return 0


class FakeDeviceArray:
    """Host memory presented as device memory with a stream; without a
    CUDA driver the library reads into it as host memory."""

    def __init__(self, host, stream):
        self.host = host
        self.__cuda_array_interface__ = {
            "data": (host.ctypes.data, False), "shape": host.shape,
            "typestr": host.dtype.str, "strides": None, "version": 3,
            "stream": stream,
        }


@pytest.fixture
def fake(request):
    holder = {}

    def install(memory):
        holder["fake"] = FakeDriver(memory)
        holder["previous"] = _cuda.use_driver(holder["fake"])
        return holder["fake"]

    yield install
    if "fake" in holder:
        _cuda.use_driver(holder["previous"])


def _in_new_thread(fn):
    out = {}

    def body():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: B902 - handed to the test
            out["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(120)
    assert not t.is_alive()
    if "error" in out:
        raise out["error"]
    return out["value"], t


def test_threads_without_a_context_push_the_buffers_context(data_file, fake):
    path, data = data_file
    arrays = [np.zeros(1 << 20, dtype=np.uint8) for _ in CTX]
    drv = fake({a.ctypes.data: (d, CTX[d]) for d, a in enumerate(arrays)})
    results = [None] * len(arrays)

    def reader(d):
        with gpufile.File(path) as f:
            results[d] = f.read(FakeDeviceArray(arrays[d], stream=1))

    threads = [threading.Thread(target=reader, args=(d,), daemon=True) for d in CTX]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        assert not t.is_alive()
    assert results == [1 << 20] * len(arrays)
    for a in arrays:
        assert np.array_equal(a, data[:1 << 20])
    # Per thread: push the buffer's own context, sync with it, pop it.
    for d, t in enumerate(threads):
        mine = [e[1:] for e in drv.events if e[0] is t]
        assert mine == [("push", CTX[d]), ("sync", 1, CTX[d]), ("pop", CTX[d])], mine


def test_memory_without_a_context_uses_the_primary_context(data_file, fake):
    path, data = data_file
    host = np.zeros(4096, dtype=np.uint8)
    drv = fake({host.ctypes.data: (1, 0)})  # as cuMemMap memory: no context

    def read():
        with gpufile.File(path) as f:
            return f.read(FakeDeviceArray(host, stream=0x5EED))

    n, thread = _in_new_thread(read)
    assert n == 4096 and host.tobytes() == data[:4096].tobytes()
    mine = [e[1:] for e in drv.events if e[0] is thread]
    assert mine == [("push", PRIMARY[1]), ("sync", 0x5EED, PRIMARY[1]),
                    ("pop", PRIMARY[1])]
    assert drv.retained == {1: 0}  # retained for the call, then released


def test_stream_failure_is_a_clear_error(data_file, fake):
    path, _ = data_file
    host = np.zeros(64, dtype=np.uint8)
    drv = fake({host.ctypes.data: (0, CTX[0])})
    drv.cuStreamSynchronize = lambda stream: 999
    with gpufile.File(path) as f:
        with pytest.raises(OSError, match=r"cuStreamSynchronize\(0x1\).*CUresult 999"):
            f.read(FakeDeviceArray(host, stream=1))
    # The context was popped even so: this thread's stack is as before.
    assert [e[1] for e in drv.events] == ["push", "pop"]


# ---- StreamFuture of host memory (the library's part faked away) ----

class _Owner:
    name = "data.bin"


def _host_stream_future(nbytes, stream):
    import ctypes

    from gpufile import _buffers, _stream
    b = _buffers.as_buffer(bytearray(nbytes), True, "read_async")
    return b, _stream.StreamFuture(ctypes.c_ssize_t(nbytes), b, _Owner(),
                                   stream, "read_async of %d bytes" % nbytes)


def test_stream_future_of_host_memory_syncs_in_its_context(fake):
    """Host memory names no context: get() (or the finaliser) in a thread
    with none current failed cuStreamSynchronize with
    CUDA_ERROR_INVALID_CONTEXT. The context current at the submit is
    pushed for the sync, in whatever thread it runs."""
    drv = fake({})
    drv.cuCtxPushCurrent(0xC0)  # current at the submit, as CuPy makes it
    try:
        _, fut = _host_stream_future(16, 0x5EED)
    finally:
        drv.cuCtxPopCurrent()
    n, thread = _in_new_thread(fut.get)
    assert n == 16
    mine = [e[1:] for e in drv.events if e[0] is thread]
    assert mine == [("push", 0xC0), ("sync", 0x5EED, 0xC0), ("pop", 0xC0)]


def test_stream_future_dropped_unsynchronised_keeps_its_buffer(fake):
    """A StreamFuture dropped unfinished whose stream could not be
    synchronised swallowed the error and let its buffer and count go,
    which the stream could still write. They are kept, with a warning."""
    import gc

    from gpufile import _stream

    drv = fake({})
    drv.cuStreamSynchronize = lambda stream: 999
    b, fut = _host_stream_future(16, 0x5EED)
    n_out = fut._n_out
    with pytest.warns(RuntimeWarning, match="could not be synchronised"):
        del fut
        gc.collect()
    assert b._view is not None  # the export was not ended
    kept = [e for e in _stream._unsynced if e[1] is b]
    assert len(kept) == 1 and kept[0][0] is n_out
    _stream._unsynced.remove(kept[0])  # no real stream: safe to let go
    b.release()
