"""The CUDA driver calls the binding makes itself: waiting for the stream
named by a version-3 __cuda_array_interface__ before touching the memory
(the producer may still be writing it).

A stream belongs to a context, and cuStreamSynchronize fails with
CUDA_ERROR_INVALID_CONTEXT (201) in a thread where no context is current:
a thread started by Python has none until some CUDA call makes one
current (issue 10 item 8: two threads reading with
``with cupy.cuda.Device(d): gpufile.File(p).read(arr)`` failed so). So the
context of the buffer is made current around the call, as the C library
does: the context the pointer was allocated in (CU_POINTER_ATTRIBUTE_CONTEXT),
or, for memory that reports none (cuMemMap, memory pools), the primary
context of its device.

The driver is reached through one object, ``driver()``, so that tests can
put a fake in its place (``use_driver``). libcuda.so.1 is opened only when a
stream is given, and is already loaded by then (CuPy, PyTorch and Numba
load it).
"""

import ctypes
import errno
import threading

CUDA_SUCCESS = 0
CU_POINTER_ATTRIBUTE_CONTEXT = 1
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9


class Libcuda:
    """libcuda.so.1 through ctypes. Each method returns the CUresult, or
    (CUresult, value) for a call with an output."""

    def __init__(self):
        cuda = ctypes.CDLL("libcuda.so.1")
        vp, i, pvp = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)

        def fn(name, *argtypes):
            f = getattr(cuda, name)
            f.argtypes = list(argtypes)
            f.restype = ctypes.c_int
            return f

        self._get_attr = fn("cuPointerGetAttribute", vp, i, ctypes.c_uint64)
        self._device_get = fn("cuDeviceGet", ctypes.POINTER(i), i)
        self._retain = fn("cuDevicePrimaryCtxRetain", pvp, i)
        self._release = fn("cuDevicePrimaryCtxRelease_v2", i)
        self._push = fn("cuCtxPushCurrent_v2", vp)
        self._pop = fn("cuCtxPopCurrent_v2", pvp)
        self._get_current = fn("cuCtxGetCurrent", pvp)
        self._sync = fn("cuStreamSynchronize", vp)

    def cuPointerGetAttribute(self, attribute, ptr):
        if attribute == CU_POINTER_ATTRIBUTE_CONTEXT:
            out = ctypes.c_void_p()
        else:
            out = ctypes.c_int()
        rc = self._get_attr(ctypes.byref(out), attribute, ptr)
        return rc, out.value or 0

    def cuDeviceGet(self, ordinal):
        dev = ctypes.c_int()
        rc = self._device_get(ctypes.byref(dev), ordinal)
        return rc, dev.value

    def cuDevicePrimaryCtxRetain(self, dev):
        ctx = ctypes.c_void_p()
        rc = self._retain(ctypes.byref(ctx), dev)
        return rc, ctx.value or 0

    def cuDevicePrimaryCtxRelease(self, dev):
        return self._release(dev)

    def cuCtxPushCurrent(self, ctx):
        return self._push(ctypes.c_void_p(ctx))

    def cuCtxPopCurrent(self):
        ctx = ctypes.c_void_p()
        rc = self._pop(ctypes.byref(ctx))
        return rc, ctx.value or 0

    def cuCtxGetCurrent(self):
        ctx = ctypes.c_void_p()
        rc = self._get_current(ctypes.byref(ctx))
        return rc, ctx.value or 0

    def cuStreamSynchronize(self, stream):
        return self._sync(ctypes.c_void_p(stream))


_lock = threading.Lock()
_driver = None


def driver():
    """The driver object, loading libcuda.so.1 on first call."""
    global _driver
    if _driver is None:
        with _lock:
            if _driver is None:
                try:
                    _driver = Libcuda()
                except (OSError, AttributeError) as e:
                    raise OSError(errno.ENODEV, "waiting for the stream of a "
                                  "__cuda_array_interface__: cannot use "
                                  "libcuda.so.1: %s" % e) from None
    return _driver


def use_driver(d):
    """Puts d in place of libcuda (a test's fake); returns the previous
    one (None when libcuda was not loaded yet)."""
    global _driver
    with _lock:
        previous, _driver = _driver, d
    return previous


def _fail(call, rc):
    return OSError(errno.EIO, "%s of a __cuda_array_interface__ buffer failed: "
                   "CUresult %d" % (call, rc))


class _Current:
    """Makes ctx current in this thread for the block (pushed, then
    popped); ctx 0: leaves the thread's contexts as they are."""

    def __init__(self, d, ctx):
        self.d = d
        self.ctx = ctx

    def __enter__(self):
        if self.ctx:
            rc = self.d.cuCtxPushCurrent(self.ctx)
            if rc != CUDA_SUCCESS:
                raise _fail("cuCtxPushCurrent", rc)
        return self.ctx

    def __exit__(self, *exc):
        if self.ctx:
            rc, _ = self.d.cuCtxPopCurrent()
            if rc != CUDA_SUCCESS and exc[0] is None:
                raise _fail("cuCtxPopCurrent", rc)
        return False


def current_context():
    """This thread's current context, 0 for none (or no driver)."""
    try:
        rc, ctx = driver().cuCtxGetCurrent()
    except OSError:
        return 0
    return ctx if rc == CUDA_SUCCESS else 0


def stream_synchronize_in(stream, ctx, what):
    """Waits for stream with ctx current in this thread (0: with whatever
    context is current), for memory that names no context (host memory);
    what names the request in the error."""
    d = driver()
    stream = int(stream)
    with _Current(d, ctx):
        rc = d.cuStreamSynchronize(stream)
    if rc != CUDA_SUCCESS:
        raise OSError(errno.EIO, "%s: cuStreamSynchronize(%#x) failed: "
                      "CUresult %d" % (what, stream, rc))


class _BufferContext:
    """Makes the context of the memory at ptr current in this thread for
    the block (pushed, then popped: the thread's own stack of contexts is
    left as it was)."""

    def __init__(self, d, ptr):
        self.d = d
        self.ptr = ptr
        self.primary_of = None

    def __enter__(self):
        d = self.d
        rc, ctx = d.cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_CONTEXT, self.ptr)
        if rc != CUDA_SUCCESS or not ctx:
            # No context of its own (cuMemMap, pools): the device's primary.
            rc, ordinal = d.cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                                  self.ptr)
            if rc != CUDA_SUCCESS:
                raise _fail("cuPointerGetAttribute(%#x, DEVICE_ORDINAL)" % self.ptr, rc)
            rc, dev = d.cuDeviceGet(ordinal)
            if rc != CUDA_SUCCESS:
                raise _fail("cuDeviceGet(%d)" % ordinal, rc)
            rc, ctx = d.cuDevicePrimaryCtxRetain(dev)
            if rc != CUDA_SUCCESS:
                raise _fail("cuDevicePrimaryCtxRetain(device %d)" % ordinal, rc)
            self.primary_of = dev
        rc = d.cuCtxPushCurrent(ctx)
        if rc != CUDA_SUCCESS:
            self._release()
            raise _fail("cuCtxPushCurrent", rc)
        return ctx

    def _release(self):
        if self.primary_of is not None:
            self.d.cuDevicePrimaryCtxRelease(self.primary_of)
            self.primary_of = None

    def __exit__(self, *exc):
        rc, _ = self.d.cuCtxPopCurrent()
        self._release()
        if rc != CUDA_SUCCESS and exc[0] is None:
            raise _fail("cuCtxPopCurrent", rc)
        return False


def stream_synchronize(stream, ptr):
    """Waits for stream (1: legacy default stream, 2: per-thread default
    stream, else a CUstream handle), with the context of the memory at ptr
    current in this thread."""
    d = driver()
    stream = int(stream)
    with _BufferContext(d, ptr):
        rc = d.cuStreamSynchronize(stream)
    if rc != CUDA_SUCCESS:
        raise _fail("cuStreamSynchronize(%#x)" % stream, rc)
