"""kvikio.Mmap on gpufile.Mmap, with KvikIO's checks and wording."""

import os
import stat

from .._mmap import Mmap as _Mmap
from ._errors import size_t
from .cufile import IOFuture, _call

__all__ = ["Mmap"]


class Mmap:
    """A read-only memory-mapped file handle, as kvikio.Mmap: read() and
    pread() into host or device memory, by gpufile's pool (counted as the
    "mmap" path)."""

    def __init__(self, file_path, flags="r", initial_map_size=None,
                 initial_map_offset=0,
                 mode=stat.S_IRUSR | stat.S_IWUSR | stat.S_IRGRP | stat.S_IROTH,
                 map_flags=None):
        self._m = None
        self._file_size = 0
        if not isinstance(flags, str) or not flags or any(
                c not in "rwa+" for c in flags):
            raise ValueError("Unknown file open flag: %r" % (flags,))
        if flags != "r":
            # KvikIO: writable maps are not implemented either.
            raise NotImplementedError("Mmap: flags %r: only \"r\" is "
                                      "implemented" % flags)
        if map_flags is not None:
            size_t(map_flags, "map_flags", "Mmap")
        initial_map_offset = size_t(initial_map_offset, "initial_map_offset",
                                    "Mmap")
        if initial_map_size is not None:
            initial_map_size = size_t(initial_map_size, "initial_map_size",
                                      "Mmap")
        path = os.fspath(file_path)
        try:
            file_size = os.stat(path).st_size
        except OSError as e:
            from ._errors import runtime
            raise runtime(e, "Unable to open file") from None
        if initial_map_offset >= file_size:
            raise IndexError("Offset must be less than the file size "
                             "(initial_map_offset %d, file size %d)"
                             % (initial_map_offset, file_size))
        if initial_map_size is not None:
            if initial_map_size == 0:
                raise ValueError("Mapped region should not be zero byte")
            if initial_map_offset + initial_map_size > file_size:
                raise IndexError("Mapped region is past the end of file "
                                 "(%d bytes at %d, file size %d)"
                                 % (initial_map_size, initial_map_offset,
                                    file_size))
        self._m = _call(_Mmap, path, "r", initial_map_size,
                        initial_map_offset, prefix="Unable to open file")
        self._file_size = file_size

    def initial_map_size(self):
        return self._m.initial_map_size()

    def initial_map_offset(self):
        return self._m.initial_map_offset()

    def file_size(self):
        """The file's size in bytes; 0 once closed."""
        if self.closed():
            return 0
        return _call(self._m.file_size)

    def close(self):
        if self._m is not None:
            _call(self._m.close)

    def closed(self):
        return self._m is None or self._m.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _range(self, size, offset, what):
        if self.closed():
            raise RuntimeError("Cannot read from a closed MmapHandle")
        offset = size_t(offset, "offset", what)
        file_size = _call(self._m.file_size)
        if offset > file_size:
            raise IndexError("Offset is past the end of file (offset %d, "
                             "file size %d)" % (offset, file_size))
        size = file_size - offset if size is None else size_t(size, "size",
                                                              what)
        start = self._m.initial_map_offset()
        end = start + self._m.initial_map_size()
        if offset < start or offset + size > end:
            raise IndexError("Read is out of bound: %d bytes at %d, the "
                             "mapped region is [%d, %d)"
                             % (size, offset, start, end))
        return size, offset

    def read(self, buf, size=None, offset=0):
        size, offset = self._range(size, offset, "read")
        return _call(self._m.read, buf, size, offset)

    def pread(self, buf, size=None, offset=0, task_size=None):
        size, offset = self._range(size, offset, "pread")
        if task_size is not None and size_t(task_size, "task_size",
                                            "pread") == 0:
            raise ValueError("task_size must be a positive integer")
        return IOFuture(_call(self._m.pread, buf, size, offset))
