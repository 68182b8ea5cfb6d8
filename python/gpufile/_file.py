"""gpufile.File and gpufile.Future."""

import collections
import ctypes
import errno
import os
import threading
import weakref

from . import _buffers
from . import _lib
from ._structs import PATH_NAMES, text

PathInfo = collections.namedtuple("PathInfo", ["path", "reason"])
PathInfo.__doc__ = """Which path a device request of at least gds_threshold
bytes takes on a file ("host", "posix", "cufile" or "small"), and why."""


class Future:
    """A request in flight (File.pread / File.pwrite).

    It holds the buffer until the request has ended, so that Python cannot
    free memory the library still writes: get() waits and then lets go;
    dropping an unfinished Future waits for the request in its finaliser.
    """

    def __init__(self, cfuture, buf, file, what):
        self._lock = threading.Lock()
        self._cfuture = cfuture
        self._buf = buf
        self._file = file  # the handle must outlive the request
        self._what = what
        self._result = None
        self._error = None

    def done(self):
        """True when the request has ended (never blocks)."""
        if not self._lock.acquire(blocking=False):
            return False  # another thread is in get(), waiting for it
        try:
            if self._cfuture is None:
                return True
            return _lib.lib().gpufile_future_done(self._cfuture) == 1
        finally:
            self._lock.release()

    def _finish_locked(self, timeout):
        lib = _lib.lib()
        if timeout is None:
            n = lib.gpufile_future_wait(self._cfuture)
        else:
            ms = max(0, int(timeout * 1000))
            n = lib.gpufile_future_wait_for(self._cfuture, ms)
            if n == -errno.ETIMEDOUT:
                raise TimeoutError(errno.ETIMEDOUT, "%s: not done after %gs"
                                   % (self._what, timeout))
        if n < 0:
            self._error = _lib.make_error(n, filename=self._file.name)
        else:
            self._result = int(n)
        lib.gpufile_future_free(self._cfuture)
        self._cfuture = None
        buf, self._buf = self._buf, None
        buf.release()
        self._file = None

    def _finish(self):
        with self._lock:
            if self._cfuture is not None:
                self._finish_locked(None)

    def get(self, timeout=None):
        """Waits for the request and returns the number of bytes moved, or
        raises its error (OSError). With timeout (seconds), raises
        TimeoutError when it has not ended by then (the request goes on).
        May be called again; returns or raises the same."""
        with self._lock:
            if self._cfuture is not None:
                self._finish_locked(timeout)
        if self._error is not None:
            raise self._error
        return self._result

    result = get

    def __del__(self):
        cf = getattr(self, "_cfuture", None)
        if cf is None:
            return
        try:
            # Waits when still running: the buffer is released only after.
            _lib.lib().gpufile_future_free(cf)
            self._cfuture = None
            if self._buf is not None:
                self._buf.release()
        except Exception:
            pass

    def __repr__(self):
        state = "pending" if self._cfuture is not None else (
            "error" if self._error is not None else "done, %d bytes" % self._result)
        return "<gpufile.Future %s (%s)>" % (self._what, state)


class File:
    """A file opened for I/O into host or GPU memory.

    flags as for fopen(): "r", "r+", "w", "w+", "a". Use as a context
    manager, or call close(). Buffers may be CuPy arrays, PyTorch CUDA
    tensors, Numba device arrays (anything with __cuda_array_interface__),
    or host objects with the buffer protocol (NumPy arrays, bytearray,
    memoryview, bytes as a write source).
    """

    def __init__(self, path, flags="r"):
        self._handle = None
        self.name = os.fsdecode(path)
        self.flags = flags
        self._pending = weakref.WeakSet()
        self._lock = threading.Lock()
        if not isinstance(flags, str):
            raise TypeError("flags must be a str such as \"r\" or \"w\", not %s"
                            % type(flags).__name__)
        lib = _lib.lib()
        handle = ctypes.c_void_p()
        rc = lib.gpufile_open(ctypes.byref(handle), os.fsencode(path),
                              flags.encode())
        # A URL may carry secrets (a presigned query, user:password): the
        # library's messages and its gpufile_filename() are redacted.
        remote = "://" in self.name
        _lib.check(rc, filename=None if remote else self.name)
        self._handle = handle.value
        if remote:
            name = lib.gpufile_filename
            name.restype, name.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
            self.name = name(self._handle).decode("utf-8", "replace")

    # ---- lifetime ----

    @property
    def closed(self):
        return self._handle is None

    def close(self):
        """Waits for every request on the file (their Futures keep their
        results), then closes it. Calling it again does nothing."""
        with self._lock:
            handle, self._handle = self._handle, None
        if handle is None:
            return
        for fut in list(self._pending):
            fut._finish()
        _lib.check(_lib.lib().gpufile_close(handle), filename=self.name)

    def __enter__(self):
        self._h()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self):
        return "<gpufile.File %r flags=%r%s>" % (self.name, self.flags,
                                                 " closed" if self.closed else "")

    def _h(self):
        h = self._handle
        if h is None:
            raise ValueError("I/O operation on closed file %r" % self.name)
        return h

    # ---- I/O ----

    def _prepare(self, buf, size, file_offset, writable, what):
        h = self._h()
        b = _buffers.as_buffer(buf, writable, what)
        try:
            n, off = _buffers.check_range(b, size, file_offset, what)
        except BaseException:
            b.release()
            raise
        return h, b, n, off

    def read(self, buf, size=None, file_offset=0):
        """Reads up to size bytes (default: all of buf) at file_offset into
        buf. Returns the number of bytes read, fewer than size only at the
        end of the file."""
        h, b, n, off = self._prepare(buf, size, file_offset, True, "read")
        try:
            rc = _lib.lib().gpufile_pread(h, b.ptr, n, off)
        finally:
            b.release()
        return _lib.check(rc, filename=self.name)

    def write(self, buf, size=None, file_offset=0):
        """Writes size bytes (default: all of buf) at file_offset. Returns
        the number of bytes written."""
        h, b, n, off = self._prepare(buf, size, file_offset, False, "write")
        try:
            rc = _lib.lib().gpufile_pwrite(h, b.ptr, n, off)
        finally:
            b.release()
        return _lib.check(rc, filename=self.name)

    def _submit(self, fn, buf, size, file_offset, writable, what):
        h, b, n, off = self._prepare(buf, size, file_offset, writable, what)
        out = ctypes.c_void_p()
        rc = fn(h, b.ptr, n, off, ctypes.byref(out))
        if rc < 0:
            b.release()
            _lib.check(rc, filename=self.name)
        fut = Future(out.value, b, self, "%s of %d bytes at %d of %s"
                     % (what, n, off, self.name))
        self._pending.add(fut)
        return fut

    def pread(self, buf, size=None, file_offset=0):
        """As read(), but returns at once with a Future; buf is kept alive
        until the request has ended. Future.get() returns the bytes read."""
        return self._submit(_lib.lib().gpufile_pread_async, buf, size,
                            file_offset, True, "pread")

    def pwrite(self, buf, size=None, file_offset=0):
        """As write(), but returns at once with a Future."""
        return self._submit(_lib.lib().gpufile_pwrite_async, buf, size,
                            file_offset, False, "pwrite")

    def size(self):
        """The file's current size in bytes."""
        return _lib.check(_lib.lib().gpufile_size(self._h()), filename=self.name)

    nbytes = size

    def sync(self):
        """Flushes the file's data to storage (fdatasync)."""
        _lib.check(_lib.lib().gpufile_sync(self._h()), filename=self.name)

    def path_info(self):
        """PathInfo(path, reason): the path a device request of at least
        gds_threshold bytes takes on this file ("cufile", "posix", ...) and
        why. May load cuFile and register the file, as the first device
        request would."""
        path = ctypes.c_int(0)
        reason = ctypes.create_string_buffer(1024)
        rc = _lib.lib().gpufile_path_info(self._h(), ctypes.byref(path), reason,
                                          len(reason))
        _lib.check(rc, filename=self.name)
        p = path.value
        return PathInfo(PATH_NAMES[p] if 0 <= p < len(PATH_NAMES) else str(p),
                        text(reason.raw))
