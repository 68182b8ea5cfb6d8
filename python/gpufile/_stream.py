"""Stream-ordered reads and writes: File.read_async / File.write_async
(gpufile_read_async / gpufile_write_async in C) and their StreamFuture.

The request is placed on a CUDA stream: work queued on the stream before
the call finishes before gpufile touches the buffer, work queued after it
sees the bytes. The count lands in a C ssize_t that the StreamFuture owns;
the library writes it when the stream reaches the request, so the future
must outlive that point: get() synchronises the stream, and dropping an
unfinished future synchronises it too (the same rule as Future, which
waits in its finaliser).
"""

import ctypes
import warnings

from . import _lib
from ._owned import Owned, Owner

# What finalisers of StreamFutures whose stream could not be synchronised
# left behind: the count and the buffer the stream may still write, kept
# for the life of the process rather than freed under it.
_unsynced = []

_DECLS = {
    "gpufile_read_async": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p,
                                          ctypes.c_size_t, ctypes.c_int64,
                                          ctypes.c_void_p,
                                          ctypes.POINTER(ctypes.c_ssize_t)]),
    "gpufile_write_async": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.c_size_t, ctypes.c_int64,
                                           ctypes.c_void_p,
                                           ctypes.POINTER(ctypes.c_ssize_t)]),
    "gpufile_stream_info": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p,
                                           ctypes.c_size_t, ctypes.c_int,
                                           ctypes.c_char_p, ctypes.c_size_t]),
}


def fn(name):
    """The C function with its prototype set; a clear error when the loaded
    library is older than stream-ordered requests."""
    f = getattr(_lib.lib(), name, None)
    if f is None:
        raise _lib.Error(95, "%s is not in %s (an older libgpufile)"
                         % (name, _lib.library_path()))
    f.restype, f.argtypes = _DECLS[name]
    return f


def stream_handle(stream, what="stream"):
    """The CUstream handle (an int) of stream: a CuPy stream (.ptr), a
    PyTorch stream (.cuda_stream), an object with __cuda_stream__ (the CUDA
    stream protocol: (version, handle)), an int (a raw CUstream; 0 is the
    legacy default stream, as are CuPy's and PyTorch's default streams), or
    None (0)."""
    if stream is None:
        return 0
    if isinstance(stream, bool):
        raise TypeError("%s: %r is not a CUDA stream" % (what, stream))
    if isinstance(stream, int):
        handle = stream
    elif hasattr(stream, "__cuda_stream__"):
        proto = stream.__cuda_stream__
        proto = proto() if callable(proto) else proto
        handle = int(proto[1])
    elif hasattr(stream, "cuda_stream"):  # torch.cuda.Stream
        handle = int(stream.cuda_stream)
    elif hasattr(stream, "ptr"):  # cupy.cuda.Stream
        handle = int(stream.ptr)
    else:
        raise TypeError("%s: %r is not a CUDA stream (give a CuPy or PyTorch "
                        "stream, an object with __cuda_stream__, or a CUstream "
                        "as an int)" % (what, stream))
    if not 0 <= handle < 1 << (8 * ctypes.sizeof(ctypes.c_void_p)):
        raise ValueError("%s: %#x is not a CUstream handle" % (what, handle))
    return handle


class StreamFuture(Owner):
    """A stream-ordered request (File.read_async / File.write_async).

    get() synchronises the stream and returns the bytes moved (or raises
    the request's error); n_out() returns the raw count without waiting:
    valid once the stream has reached the request (for instance in a
    callback or after an event the caller waited for), else whatever the
    library has written so far. The future holds the buffer and the File
    until then.

    The count the library writes is an Owned (_owned.py), as a Future's C
    future is: get() synchronises in an exclusive call (others wait for
    it), and close() lets go of the buffer once; dropping an unfinished
    future synchronises first."""

    def __init__(self, n_out, buf, file, stream, what):
        self._n_out = n_out
        self._buf = buf
        self._file = file
        self._name = file.name
        self.stream = stream
        self._what = what
        self._result = None
        self._error = None
        self._done = False
        # Host memory names no context, and a thread with none current
        # (a finaliser may run in any) fails cuStreamSynchronize with
        # CUDA_ERROR_INVALID_CONTEXT: the context current at the submit,
        # the one the library queued in (CuPy and PyTorch make the
        # stream's own current), is made current for the sync.
        self._ctx = 0
        # Before anything that may raise: the request is queued already.
        self._c = Owned(n_out, None, "stream request (%s)" % what,
                        pins=(buf, n_out))
        if not buf.device:
            from . import _cuda
            self._ctx = _cuda.current_context()

    def n_out(self):
        """The C count as it is now (no wait)."""
        return int(self._n_out.value)

    def _sync(self):
        from . import _cuda
        if self._buf.device:
            _cuda.stream_synchronize(self.stream, self._buf.ptr)
        else:
            _cuda.stream_synchronize_in(self.stream, self._ctx, self._what)

    def _free(self, n_out):
        """Owned's free function: synchronises the stream of a future
        dropped unfinished (the library still writes n_out and may use the
        buffer until the stream passes the request); returns what the
        caller lets go of, or None when it must be kept."""
        if not self._done:
            try:
                self._sync()
            except Exception as e:
                # Released (and _n_out freed with self), both could be
                # written after they were gone.
                _unsynced.append((self._n_out, self._buf, self._file))
                warnings.warn("%s: dropped unfinished and its stream could "
                              "not be synchronised (%s): its buffer is kept "
                              "for the life of the process" % (self._what, e),
                              RuntimeWarning)
                return None
        held = (self._buf, self._file)
        self._buf = self._file = None
        return held

    @staticmethod
    def _let_go(held):
        if held is not None:
            held[0].release()
            # The File goes with this frame, with nothing held.

    def get(self):
        """Synchronises the stream, then returns the bytes moved or raises
        the request's error (OSError). May be called again, from any
        thread."""
        if not self._done:
            try:
                n_out = self._c.enter(exclusive=True)
            except ValueError:
                n_out = None  # let go of, or being: close() waits for it
            if n_out is not None:
                try:
                    if not self._done:  # by a get() this one waited for
                        self._sync()
                        n = int(n_out.value)
                        if n < 0:
                            self._error = _lib.make_error(n, filename=self._name)
                        else:
                            self._result = n
                        self._done = True
                finally:
                    self._c.leave(exclusive=True)
        self._let_go(self._c.close(self._free))
        if self._error is not None:
            raise self._error
        return self._result

    result = get

    def __del__(self):
        c = getattr(self, "_c", None)
        if c is not None:
            try:
                self._let_go(c.close(self._free, finalising=True))
            except Exception:
                pass

    def __repr__(self):
        state = "pending" if not self._done else (
            "error" if self._error is not None else "done, %d bytes" % self._result)
        return "<gpufile.StreamFuture %s on stream %#x (%s)>" % (
            self._what, self.stream, state)
