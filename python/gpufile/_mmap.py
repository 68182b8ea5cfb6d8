"""gpufile.Mmap: a read-only memory-mapped file handle, as KvikIO's
kvikio.Mmap, read into host or GPU memory by gpufile's pool and counted as
the "mmap" path."""

import ctypes
import os
import threading
import weakref
from ctypes import POINTER, c_char_p, c_int, c_int64, c_size_t, c_ssize_t, c_void_p

from . import _args
from . import _buffers
from . import _lib
from ._file import PathInfo, submit
from ._owned import Owned, Owner
from ._page_cache import fn as _fn
from ._structs import text

_DECLS = {
    "gpufile_mmap_open": (c_int, [POINTER(c_void_p), c_char_p, c_char_p,
                                  c_int64, c_size_t]),
    "gpufile_mmap_close": (c_int, [c_void_p]),
    "gpufile_mmap_file_size": (c_int64, [c_void_p]),
    "gpufile_mmap_range": (c_int, [c_void_p, POINTER(c_int64), POINTER(c_size_t)]),
    "gpufile_mmap_pread": (c_ssize_t, [c_void_p, c_void_p, c_size_t, c_int64]),
    "gpufile_mmap_pread_async": (c_int, [c_void_p, c_void_p, c_size_t, c_int64,
                                         POINTER(c_void_p)]),
    "gpufile_mmap_path_info": (c_int, [c_void_p, c_char_p, c_size_t]),
}


def _f(name):
    return _fn(name, _DECLS)


class Mmap(Owner):
    """A read-only mapping of [initial_map_offset, initial_map_offset +
    initial_map_size) of a file (initial_map_size None: to the end).

    flags must be "r" (KvikIO does not implement writable maps either).
    read()/pread() take file offsets inside the mapped range; a range
    outside it is an error, never a short read. Buffers are those
    gpufile.File takes (CuPy, PyTorch, NumPy, bytearray, ...).

    A Mmap may be shared by threads as a File is: close() waits for the
    calls of other threads, and a call that starts once close() has begun
    raises ValueError("I/O operation on closed Mmap").
    """

    def __init__(self, file_path, flags="r", initial_map_size=None,
                 initial_map_offset=0):
        self._h = None
        # The Futures of pread(), finished by close(). A WeakSet is not
        # safe to add to while another thread lists it (RuntimeError: Set
        # changed size during iteration): both under _pending_lock.
        self._pending = weakref.WeakSet()
        self._pending_lock = threading.Lock()
        if not isinstance(flags, str):
            raise TypeError("flags must be a str such as \"r\", not %s"
                            % type(flags).__name__)
        # File's checks (_args): a NUL would cut the C string short and
        # ctypes would wrap an offset of 2**64 + 4096 to 4096.
        raw = _args.c_path(file_path, "Mmap")
        _args.c_text(flags, "flags", "Mmap")
        self.name = _lib.shown_name(os.fsdecode(file_path))  # URL: redacted
        offset = _args.offset(initial_map_offset, "Mmap", "initial_map_offset")
        if initial_map_size is None:
            size = 0  # the library's "to the end of the file"
        else:
            size = _args.size(initial_map_size, "Mmap", "initial_map_size")
            if size == 0:
                raise ValueError("Mmap %r: initial_map_size 0 maps nothing "
                                 "(None maps to the end of the file)"
                                 % self.name)
            _args.span(size, offset, "Mmap")
        handle = c_void_p()
        rc = _f("gpufile_mmap_open")(ctypes.byref(handle), raw,
                                     flags.encode(), offset, size)
        # A URL is refused, named without its secrets (as File does).
        _lib.check(rc, filename=self.name)
        # As File's handle (see File): calls are shared calls of it.
        self._h = Owned(handle.value, _f("gpufile_mmap_close"),
                        "Mmap %r" % self.name)
        off, sz = c_int64(), c_size_t()
        _f("gpufile_mmap_range")(handle.value, ctypes.byref(off),
                                 ctypes.byref(sz))
        self._map_offset, self._map_size = off.value, sz.value

    # ---- lifetime ----

    @property
    def closed(self):
        return self._h is None or self._h.closed

    def close(self):
        """Waits for the calls of other threads and every request on the
        map, then unmaps it; as File.close() (ValueError for calls that
        start once it has begun). Calling it again does nothing."""
        self._close(False)

    def _close(self, finalising):
        if self._h is None:
            return
        rc = self._h.close(finalising=finalising) or 0
        # gpufile_mmap_close waited for the requests: their buffers are let
        # go now rather than at each Future's get().
        with self._pending_lock:
            pending = list(self._pending)
        for fut in pending:
            fut._finish()
        _lib.check(rc, filename=self.name)

    def __enter__(self):
        if self.closed:
            raise ValueError("I/O operation on closed Mmap %r" % self.name)
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        if getattr(self, "_h", None) is not None:
            try:
                self._close(True)
            except Exception:
                pass

    def __repr__(self):
        return "<gpufile.Mmap %r [%d, %d)%s>" % (
            self.name, self._map_offset, self._map_offset + self._map_size,
            " closed" if self.closed else "")

    def _call(self, fn, *args):
        """fn(handle, *args) with the handle held open for the call."""
        if self._h is None:
            raise ValueError("I/O operation on closed Mmap %r" % self.name)
        return self._h.call(fn, *args)

    # ---- queries ----

    def initial_map_size(self):
        return self._map_size

    def initial_map_offset(self):
        return self._map_offset

    def file_size(self):
        """The file's current size in bytes."""
        return _lib.check(self._call(_f("gpufile_mmap_file_size")),
                          filename=self.name)

    nbytes = file_size

    def path_info(self):
        """PathInfo("mmap", reason): how host and device reads are done."""
        reason = ctypes.create_string_buffer(1024)
        rc = self._call(_f("gpufile_mmap_path_info"), reason, len(reason))
        _lib.check(rc, filename=self.name)
        return PathInfo("mmap", text(reason.raw))

    # ---- I/O ----

    def _prepare(self, buf, size, offset, what):
        if self.closed:  # before touching buf, as File does
            raise ValueError("I/O operation on closed Mmap %r" % self.name)
        offset = _args.offset(offset, what, "offset")
        if size is None:
            # To the end of the mapped range, as KvikIO; bounded by buf.
            b = _buffers.as_buffer(buf, True, what)
            size = max(0, min(b.nbytes,
                              self._map_offset + self._map_size - offset))
        else:
            b = _buffers.as_buffer(buf, True, what)
        try:
            n, off = _buffers.check_range(b, size, offset, what)
        except BaseException:
            b.release()
            raise
        return b, n, off

    def read(self, buf, size=None, offset=0):
        """Reads size bytes (default: to the end of the mapped range, at
        most the buffer's size) at file offset into buf. Returns size."""
        b, n, off = self._prepare(buf, size, offset, "read")
        try:
            rc = self._call(_f("gpufile_mmap_pread"), b.ptr, n, off)
        finally:
            b.release()
        return _lib.check(rc, filename=self.name)

    def pread(self, buf, size=None, offset=0):
        """As read(), but returns at once with a Future (get() gives the
        bytes read); buf is kept alive until the request has ended."""
        b, n, off = self._prepare(buf, size, offset, "pread")
        fut = submit(self, _f("gpufile_mmap_pread_async"), b, n, off,
                     "pread of %d bytes at %d of mapped %s"
                     % (n, off, self.name))
        with self._pending_lock:
            self._pending.add(fut)
        return fut
