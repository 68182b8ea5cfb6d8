"""kvikio.numpy: numpy.fromfile/tofile through gpufile.kvikio.CuFile, into
NumPy or (like=) CuPy arrays."""

import io
import os
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["FileLike", "LikeWrapper", "fromfile", "tofile"]


@runtime_checkable
class FileLike(Protocol):
    """An open file object (fileno() and name)."""

    def fileno(self) -> int: ...

    @property
    def name(self) -> str: ...


class LikeWrapper:
    """Wraps an array for NumPy's like= argument: np.fromfile(path,
    like=LikeWrapper(cupy.empty(()))) reads with gpufile into an array of
    that kind; every other NumPy function runs unchanged."""

    def __init__(self, like):
        self._like = like

    def __array_function__(self, func, types, args, kwargs):
        if func is not np.fromfile:
            return func(*args, **kwargs)
        return fromfile(*args, like=self._like, **kwargs)


def _path(file):
    if isinstance(file, FileLike) and not isinstance(file, io.BytesIO):
        return file.name
    return os.fspath(file) if isinstance(file, os.PathLike) else str(file)


def fromfile(file, dtype=float, count=-1, sep="", offset=0, *, like=None):
    """numpy.fromfile for binary files, read by gpufile: count items
    (-1: to the end; fewer where the file ends first, as NumPy) of dtype
    from byte offset of file (a path or an open file object), into an
    array like like (NumPy by default)."""
    from . import CuFile
    if sep != "":
        raise NotImplementedError("Non-default value of the `sep` argument "
                                  "is not supported")
    path = _path(file)
    nbytes = os.path.getsize(path)
    itemsize = np.dtype(dtype).itemsize
    count = nbytes if count == -1 else count
    count = min(count, (nbytes - offset) // itemsize)
    out = np.empty_like(like, shape=(count,), dtype=dtype)
    with CuFile(path, "r") as f:
        f.read(out, file_offset=offset)
    return out


def tofile(ary, file):
    """ndarray.tofile, written by gpufile: the array's bytes in C order
    (a copy when it is not C-contiguous) to file (a path or an open file
    object), which is truncated first."""
    from . import CuFile
    with CuFile(_path(file), "w") as f:
        f.write(np.ascontiguousarray(ary, like=ary))
