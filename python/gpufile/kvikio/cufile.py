"""kvikio.CuFile, IOFuture, IOFutureStream and the page-cache functions,
on gpufile.File: the I/O, its paths and its counting are gpufile's."""

import io
import os
import warnings

from .. import _buffers
from .. import _page_cache
from .._file import File as _File
from .._stream import stream_handle as _stream_handle
from . import _errors
from ._errors import runtime, size_t

__all__ = ["CuFile", "IOFuture", "IOFutureStream", "get_page_cache_info",
           "drop_file_page_cache", "drop_system_page_cache",
           "clear_page_cache"]

PAGE = os.sysconf("SC_PAGE_SIZE")


def _call(fn, *args, prefix=None):
    """fn(*args), with a failed system or library call raised as KvikIO
    raises it (RuntimeError, see _errors); ValueErrors (bad arguments,
    a closed file, an invalid setting) stay ValueErrors."""
    try:
        return fn(*args)
    except OSError as e:
        if isinstance(e, ValueError):
            raise
        raise runtime(e, prefix) from None


class IOFuture:
    """The future of CuFile.pread/pwrite (and Mmap.pread, RemoteFile.pread):
    get() waits and returns the bytes moved; done() never blocks."""

    __slots__ = ("_handle",)

    def __init__(self, handle):
        self._handle = handle

    def get(self) -> int:
        return _call(self._handle.get)

    def done(self) -> bool:
        return self._handle.done()

    def __repr__(self):
        return "<gpufile.kvikio.IOFuture %r>" % (self._handle,)


class IOFutureStream:
    """The future of CuFile.raw_read_async/raw_write_async: keep it until
    check_bytes_done(), which synchronises the stream and returns the bytes
    moved (gpufile.StreamFuture.get)."""

    __slots__ = ("_handle",)

    def __init__(self, handle):
        self._handle = handle

    def check_bytes_done(self) -> int:
        return _call(self._handle.get)

    def __repr__(self):
        return "<gpufile.kvikio.IOFutureStream %r>" % (self._handle,)


class _DeviceRange:
    """[offset, offset + nbytes) of a device buffer, as an object with
    __cuda_array_interface__ (bytes), keeping the buffer alive: KvikIO's
    dev_offset."""

    def __init__(self, owner, ptr, nbytes):
        self._owner = owner
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
            "strides": None, "version": 3}


def _parse_flags(flags):
    """KvikIO's open flags ("r", "w", "a", each optionally with "+") as
    (gpufile flags, readable, writable, create first). KvikIO's "a" opens
    for reading and writing, creating the file, without truncating it and
    without O_APPEND (pwrite goes where it is told): gpufile's "r+" on a
    file created first."""
    if not isinstance(flags, str):
        raise TypeError("flags must be a str such as \"r\", not %s"
                        % type(flags).__name__)
    bad = [c for c in flags if c not in "rwa+"]
    base = [c for c in flags if c in "rwa"]
    if bad or len(base) != 1 or flags.count("+") > 1:
        raise ValueError("Unknown file open flag: %r (KvikIO's flags are "
                         "\"r\", \"w\", \"a\", each optionally with \"+\")"
                         % flags)
    plus = "+" in flags
    if base[0] == "r":
        return ("r+" if plus else "r"), True, plus, False
    if base[0] == "w":
        return ("w+" if plus else "w"), plus, True, False
    return "r+", True, True, True


class CuFile:
    """File handle for GPUDirect Storage (GDS), as kvikio.CuFile, on
    gpufile.File: reads and writes take gpufile's path (cuFile, its own
    staged path, or the host path) and are counted in gpufile.stats()."""

    def __init__(self, file, flags="r"):
        self._file = None
        gflags, self._readable, self._writable, create = _parse_flags(flags)
        self._flags = flags
        path = os.fspath(file)
        if create:
            try:
                os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o644))
            except OSError as e:
                raise runtime(e, "Unable to open file") from None
        self._file = _call(_File, path, gflags, prefix="Unable to open file")

    # ---- lifetime ----

    def close(self) -> None:
        if self._file is not None:
            _call(self._file.close)

    @property
    def closed(self) -> bool:
        return self._file is None or self._file.closed

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()

    def __repr__(self):
        return "<gpufile.kvikio.CuFile %r flags=%r%s>" % (
            getattr(self._file, "name", None), self._flags,
            " closed" if self.closed else "")

    def fileno(self) -> int:
        return _call(self._file.fileno)

    def open_flags(self) -> int:
        return _call(self._file.open_flags)

    def nbytes(self) -> int:
        """The file's size in bytes."""
        return _call(self._file.size)

    @property
    def file(self):
        """The gpufile.File underneath (path_info(), stream_info(), ...)."""
        return self._file

    def is_direct_io_supported(self) -> bool:
        """Whether the file has an O_DIRECT descriptor (the file system
        takes O_DIRECT) and auto_direct_io_read or auto_direct_io_write is
        on (gpufile.kvikio.defaults)."""
        from . import defaults
        if not (defaults.get("auto_direct_io_read") or
                defaults.get("auto_direct_io_write")):
            return False
        try:
            self._file.fd(direct=True)
        except OSError:
            return False
        return True

    # ---- checks ----

    def _check(self, doing, size, file_offset, task_size=None):
        if self.closed:
            raise ValueError("I/O operation on closed file %r"
                             % getattr(self._file, "name", None))
        if (doing == "read" and not self._readable) or (
                doing == "write" and not self._writable):
            raise _errors.not_permitted(self._file.name, self._flags, doing)
        if size is not None:
            size = size_t(size, "size", doing)
        file_offset = size_t(file_offset, "file_offset", doing)
        if task_size is not None:
            # Checked as KvikIO checks it. gpufile splits a request by
            # its task_size setting (and halves it for reads the page
            # cache holds): a per-call task_size does not change the split.
            if size_t(task_size, "task_size", doing) == 0:
                raise ValueError("task_size must be a positive integer")
        return size, file_offset

    def _device_range(self, buf, size, dev_offset, writable, doing,
                      stream=None):
        """buf from dev_offset on, as raw_read/raw_write take it: device
        memory only (KvikIO: "Non-CUDA buffers not supported"). The
        buffer's own stream is waited for here, unless it is stream (the
        CUstream of a stream-ordered request, which comes after its work
        anyway); the range itself names no stream."""
        dev_offset = size_t(dev_offset, "dev_offset", doing)
        b = _buffers.as_buffer(buf, writable, doing, stream=stream)
        try:
            if not b.device:
                raise ValueError("Non-CUDA buffers not supported (%s takes "
                                 "device memory; read/write take host "
                                 "memory too)" % doing)
            if dev_offset > b.nbytes:
                raise IndexError("%s: dev_offset %d is past the end of the "
                                 "%d-byte buffer" % (doing, dev_offset,
                                                     b.nbytes))
            ptr, nbytes = b.ptr + dev_offset, b.nbytes - dev_offset
        finally:
            b.release()
        if size is not None and size > nbytes:
            raise IndexError("%s: %d bytes at dev_offset %d do not fit the "
                             "%d-byte buffer" % (doing, size, dev_offset,
                                                 nbytes + dev_offset))
        return _DeviceRange(buf, ptr, nbytes)

    # ---- threaded, host or device ----

    def pread(self, buf, size=None, file_offset=0, task_size=None):
        size, file_offset = self._check("read", size, file_offset, task_size)
        return IOFuture(_call(self._file.pread, buf, size, file_offset))

    def pwrite(self, buf, size=None, file_offset=0, task_size=None):
        size, file_offset = self._check("write", size, file_offset, task_size)
        return IOFuture(_call(self._file.pwrite, buf, size, file_offset))

    def read(self, buf, size=None, file_offset=0, task_size=None):
        return self.pread(buf, size, file_offset, task_size).get()

    def write(self, buf, size=None, file_offset=0, task_size=None):
        return self.pwrite(buf, size, file_offset, task_size).get()

    # ---- device memory, no threads of the caller's ----

    def raw_read(self, buf, size=None, file_offset=0, dev_offset=0):
        size, file_offset = self._check("read", size, file_offset)
        view = self._device_range(buf, size, dev_offset, True, "raw_read")
        return _call(self._file.read, view, size, file_offset)

    def raw_write(self, buf, size=None, file_offset=0, dev_offset=0):
        size, file_offset = self._check("write", size, file_offset)
        view = self._device_range(buf, size, dev_offset, False, "raw_write")
        return _call(self._file.write, view, size, file_offset)

    def raw_read_async(self, buf, raw_stream, size=None, file_offset=0,
                       dev_offset=0):
        return self._raw_async("read", buf, raw_stream, size, file_offset, dev_offset)

    def raw_write_async(self, buf, raw_stream, size=None, file_offset=0,
                        dev_offset=0):
        return self._raw_async("write", buf, raw_stream, size, file_offset, dev_offset)

    def _raw_async(self, op, buf, raw_stream, size, file_offset, dev_offset):
        """raw_read_async / raw_write_async: op is "read" or "write"."""
        what = "raw_%s_async" % op
        size, file_offset = self._check(op, size, file_offset)
        view = self._device_range(buf, size, dev_offset, op == "read", what,
                                  _stream_handle(raw_stream, what))
        call = self._file.read_async if op == "read" else self._file.write_async
        return IOFutureStream(_call(call, view, raw_stream, size, file_offset))

    # KvikIO's C++ FileHandle::read_async/write_async names; the stream
    # (a CuPy or PyTorch stream, or a CUstream as an int) comes second.
    read_async = raw_read_async
    write_async = raw_write_async


# ---- page cache ----

def _file_path(file, what):
    """A path gpufile can open for file: a path (str, bytes, PathLike), a
    file descriptor (int) or a file object with fileno()."""
    if isinstance(file, bool):
        raise ValueError("%s: %r is not a path, a file descriptor or a file "
                         "object" % (what, file))
    if isinstance(file, int):
        return "/proc/self/fd/%d" % file
    if isinstance(file, (str, bytes, os.PathLike)):
        return file
    if isinstance(file, io.IOBase) or hasattr(file, "fileno"):
        return "/proc/self/fd/%d" % file.fileno()
    raise ValueError("%s: %r is not a path, a file descriptor or a file "
                     "object" % (what, file))


def get_page_cache_info(file, offset=0, length=0):
    """(pages in the page cache, pages) of [offset, offset + length) of
    file (length 0: to the end), in whole pages: a range that does not
    start or end at a page edge counts its partial pages. (0, 0) when
    offset is at or past the end of the file."""
    path = _file_path(file, "get_page_cache_info")
    offset = size_t(offset, "offset", "get_page_cache_info")
    length = size_t(length, "length", "get_page_cache_info")
    try:
        if offset >= os.stat(path).st_size:
            return (0, 0)
    except OSError as e:
        raise runtime(e, "Unable to open file") from None
    start = offset - offset % PAGE
    if length:
        end = offset + length
        end += -end % PAGE
        span = end - start
    else:
        span = 0
    cached, total = _call(_page_cache.page_cache_info, path, start, span,
                          prefix="Unable to open file")
    # The range starts at a page edge and ends at one or at the file's
    # end: every page but the file's last is whole, so rounding up
    # counts that last one (cached or not) once.
    return -(-cached // PAGE), -(-total // PAGE)


def drop_file_page_cache(file, offset=0, length=0, sync_first=True):
    """Drops the pages wholly inside [offset, offset + length) (length 0:
    to the end) from the page cache. gpufile always flushes the file's
    dirty pages first (fdatasync), so sync_first=False changes nothing."""
    path = _file_path(file, "drop_file_page_cache")
    offset = size_t(offset, "offset", "drop_file_page_cache")
    length = size_t(length, "length", "drop_file_page_cache")
    _call(_page_cache.drop_file_page_cache, path, offset, length,
          prefix="Unable to open file")


def drop_system_page_cache(reclaim_dentries_and_inodes=True, sync_first=True):
    """Drops the whole system's page cache; True when it was dropped,
    False without the privilege (gpufile writes /proc/sys/vm/drop_caches
    itself and never runs sudo). Always syncs first."""
    try:
        _page_cache.drop_system_page_cache(bool(reclaim_dentries_and_inodes))
    except PermissionError:
        return False
    except OSError as e:
        raise runtime(e) from None
    return True


def clear_page_cache(reclaim_dentries_and_inodes=True, clear_dirty_pages=True):
    """Deprecated since KvikIO 26.04: drop_system_page_cache()."""
    warnings.warn("Use :func:`drop_system_page_cache` instead.",
                  FutureWarning, stacklevel=2)
    return drop_system_page_cache(reclaim_dentries_and_inodes,
                                  clear_dirty_pages)
