"""The one CUDA driver call the binding makes itself: waiting for the
stream named by a version-3 __cuda_array_interface__ before touching the
memory (the producer may still be writing it). libcuda.so.1 is opened only
when such a stream is given, and is already loaded by then (CuPy, PyTorch
and Numba load it)."""

import ctypes
import errno
import threading

_lock = threading.Lock()
_sync = None


def stream_synchronize(stream):
    global _sync
    if _sync is None:
        with _lock:
            if _sync is None:
                try:
                    cuda = ctypes.CDLL("libcuda.so.1")
                except OSError as e:
                    raise OSError(errno.ENODEV, "waiting for stream %#x of a "
                                  "__cuda_array_interface__: cannot load "
                                  "libcuda.so.1: %s" % (stream, e)) from None
                fn = cuda.cuStreamSynchronize
                fn.argtypes = [ctypes.c_void_p]
                fn.restype = ctypes.c_int
                _sync = fn
    rc = _sync(ctypes.c_void_p(int(stream)))
    if rc != 0:
        raise OSError(errno.EIO, "cuStreamSynchronize(%#x) of a "
                      "__cuda_array_interface__ stream failed: CUresult %d"
                      % (int(stream), rc))
