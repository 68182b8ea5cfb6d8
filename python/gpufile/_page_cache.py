"""Page-cache controls: how much of a file the page cache holds, and
dropping it for one file (no root needed) or for the whole system (root).
"""

import ctypes
import os
from ctypes import POINTER, c_char_p, c_int, c_int64, c_size_t, c_uint64, c_void_p

from . import _args
from . import _lib
from ._file import File

_DECLS = {
    "gpufile_page_cache_info": (c_int, [c_void_p, c_char_p, c_int64, c_size_t,
                                        POINTER(c_uint64), POINTER(c_uint64)]),
    "gpufile_drop_page_cache": (c_int, [c_void_p, c_int64, c_size_t]),
    "gpufile_drop_system_page_cache": (c_int, [c_int]),
    "gpufile_bounce_buffer_free": (c_size_t, []),
}


def fn(name, decls=_DECLS):
    """The C function name with its prototype set (_lib.fn); decls defaults
    to the page-cache controls'."""
    return _lib.fn(name, decls)


def _range(offset, size, what):
    """offset and size checked as File checks them (_args): int() took 1.9
    as 1, and ctypes wrapped 2**64 to 0."""
    offset = _args.offset(offset, what, "offset")
    size = _args.size(size, what)
    _args.span(size, offset, what)
    return offset, size


def page_cache_info(file, offset=0, size=0):
    """(cached_bytes, total_bytes) of [offset, offset+size) of file (a path
    or an open gpufile.File), clipped to the file's end; size 0: to the
    end. KvikIO's get_page_cache_info counts pages; this counts bytes."""
    info = fn("gpufile_page_cache_info")
    offset, size = _range(offset, size, "page_cache_info")
    cached, total = c_uint64(), c_uint64()
    out = (ctypes.byref(cached), ctypes.byref(total))
    if isinstance(file, File):
        # Held open for the call, as File's own calls are.
        rc = file._call(info, None, offset, size, *out)
        name = file.name
    else:
        rc = info(None, _args.c_path(file, "page_cache_info"), offset, size,
                  *out)
        name = _lib.shown_name(os.fsdecode(file))  # a URL: no secrets
    _lib.check(rc, filename=name)
    return cached.value, total.value


def drop_file_page_cache(file, offset=0, size=0):
    """Flushes file's dirty pages and drops [offset, offset+size) (size 0:
    to the end) from the page cache. No root needed."""
    offset, size = _range(offset, size, "drop_file_page_cache")
    if isinstance(file, File):
        rc = file._call(fn("gpufile_drop_page_cache"), offset, size)
        _lib.check(rc, filename=file.name)
        return
    with File(file, "r") as f:
        drop_file_page_cache(f, offset, size)


def drop_system_page_cache(reclaim_inodes=True):
    """Drops the whole system's page cache (and, by default, dentries and
    inodes), after a sync. Needs root: PermissionError otherwise, saying
    why."""
    _lib.check(fn("gpufile_drop_system_page_cache")(1 if reclaim_inodes else 0))


def bounce_buffer_free():
    """Frees every pinned bounce buffer (waiting for those that running
    device requests use) and returns the bytes freed; the worker pool keeps
    running."""
    return fn("gpufile_bounce_buffer_free")()
