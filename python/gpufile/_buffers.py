"""Turning a Python object into (pointer, length) for the C library.

Two kinds of objects are accepted:
- anything with ``__cuda_array_interface__`` (CuPy arrays, PyTorch CUDA
  tensors, Numba device arrays): device memory;
- anything with the buffer protocol (NumPy arrays, bytearray, bytes,
  memoryview, mmap, array.array): host memory.

Every check happens here, before any I/O: a read-only object as the target
of a read (TypeError), an object that is neither (TypeError), an array of
Python objects (TypeError), memory that is not contiguous (ValueError), and
a size larger than the object (ValueError).

A host object stays exported (PyObject_GetBuffer) for as long as the Buffer
lives, so that e.g. a bytearray cannot be resized under a running request.
"""

import ctypes
import re

from . import _args

_PyBUF_WRITABLE = 0x0001
_PyBUF_ANY_CONTIGUOUS = 0x0080 | 0x0010 | 0x0008  # with PyBUF_STRIDES


class _PyBuffer(ctypes.Structure):
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.c_void_p),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
        ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
        ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)),
        ("internal", ctypes.c_void_p),
    ]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None


class Buffer:
    """Memory the library may read or write: ``ptr``, ``nbytes``,
    ``device`` (True for __cuda_array_interface__ objects). Holds what keeps
    the memory alive; call release() (or let it be collected) after the
    last request on it has ended."""

    __slots__ = ("ptr", "nbytes", "device", "_obj", "_view")

    def __init__(self, ptr, nbytes, device, obj, view=None):
        self.ptr = ptr
        self.nbytes = nbytes
        self.device = device
        self._obj = obj
        self._view = view

    def release(self):
        view, self._view = self._view, None
        if view is not None:
            _release_buffer(ctypes.byref(view))
        self._obj = None

    def __del__(self):
        try:
            self.release()
        except Exception:
            pass


def _describe(obj):
    t = type(obj)
    return "%s.%s" % (t.__module__, t.__qualname__) if t.__module__ != "builtins" else t.__qualname__


def _c_contiguous(shape, strides, itemsize):
    expected = itemsize
    for dim, stride in zip(reversed(shape), reversed(strides)):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return True


def _f_contiguous(shape, strides, itemsize):
    expected = itemsize
    for dim, stride in zip(shape, strides):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return True


def _stream_sync(stream, ptr):
    """Waits for the producer's stream, as version 3 of the CUDA Array
    Interface asks of a consumer (1: legacy default stream, 2: per-thread
    default stream, else a CUstream handle), with the buffer's context
    current (see _cuda)."""
    from . import _cuda

    _cuda.stream_synchronize(stream, ptr)


# An array interface typestr: byte order, type code, size, and for a
# datetime or timedelta its unit ("<f4", "|b1", "<M8[ns]", "<U4").
_TYPESTR = re.compile(r"[<>|=]([a-zA-Z])(\d+)(?:\[\w+\])?\Z")


def _itemsize(typestr):
    """The bytes of one item of typestr, or None when it is no typestr.
    The size of "U" counts UCS-4 characters, as NumPy writes it ("<U4"
    is 16 bytes); a datetime's unit follows its size ("<M8[ns]": 8)."""
    m = _TYPESTR.match(typestr) if isinstance(typestr, str) else None
    if m is None:
        return None
    n = int(m.group(2))
    return 4 * n if m.group(1) == "U" else n


def _from_cai(obj, cai, writable, what, ordered_on=None):
    ptr, readonly = cai["data"]
    shape = tuple(int(d) for d in cai["shape"])
    typestr = cai["typestr"]
    itemsize = _itemsize(typestr)
    if itemsize is None:
        raise TypeError("%s: %s has an unknown __cuda_array_interface__ typestr %r"
                        % (what, _describe(obj), typestr))
    count = 1
    for d in shape:
        count *= d
    nbytes = count * itemsize
    if writable and readonly:
        raise TypeError("%s: %s is read-only (its __cuda_array_interface__ says so); "
                        "a read needs a writable buffer" % (what, _describe(obj)))
    strides = cai.get("strides")
    if strides is not None and count > 1:
        strides = tuple(int(s) for s in strides)
        if not (_c_contiguous(shape, strides, itemsize) or _f_contiguous(shape, strides, itemsize)):
            raise ValueError("%s: %s of shape %s with strides %s is not contiguous; "
                             "gpufile moves one contiguous range (use .copy() or "
                             "an ascontiguousarray first)" % (what, _describe(obj), shape, strides))
    if cai.get("mask") is not None:
        raise ValueError("%s: %s has a mask; masked arrays are not supported"
                         % (what, _describe(obj)))
    ptr = int(ptr or 0)
    if not 0 <= ptr < 1 << (8 * ctypes.sizeof(ctypes.c_void_p)):
        raise ValueError("%s: %s has a __cuda_array_interface__ data pointer %#x "
                         "that is no address" % (what, _describe(obj), ptr))
    stream = cai.get("stream")
    # A stream-ordered request (ordered_on: its stream; -1: none queued)
    # already comes after the work of its own stream.
    if ordered_on is not None and (ordered_on == -1 or
                                   _same_stream(stream, ordered_on)):
        stream = None
    if stream and ptr:  # no memory (an empty array): nothing to wait for
        _stream_sync(stream, ptr)
    return Buffer(ptr, nbytes, True, obj)


# A field name in a buffer format ("T{O:a:<i:b:}"), which may hold an "O".
_FIELD_NAME = re.compile(r":[^:]*:")


def _holds_objects(fmt):
    """Whether items of buffer format fmt (struct syntax, PEP 3118) hold a
    Python object ("O"): a pointer with a reference count, not data."""
    return fmt is not None and "O" in _FIELD_NAME.sub("", fmt)


def _from_buffer_protocol(obj, writable, what):
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError("%s: %s is neither a device array (__cuda_array_interface__) "
                        "nor a host buffer (buffer protocol: NumPy array, bytearray, "
                        "memoryview)" % (what, _describe(obj))) from None
    with mv:
        if writable and mv.readonly:
            raise TypeError("%s: %s is read-only; a read needs a writable buffer "
                            "(e.g. bytearray or a writable NumPy array)" % (what, _describe(obj)))
        if _holds_objects(mv.format):
            # A read stored file bytes as object pointers: a segfault when
            # the array was next used or freed. A write wrote addresses.
            raise TypeError("%s: %s holds Python objects (buffer format %r), "
                            "not data: its bytes are object pointers"
                            % (what, _describe(obj), mv.format))
        if not mv.contiguous:
            raise ValueError("%s: %s of shape %s with strides %s is not contiguous; "
                             "gpufile moves one contiguous range (use "
                             "numpy.ascontiguousarray first)"
                             % (what, _describe(obj), mv.shape, mv.strides))
    view = _PyBuffer()
    flags = _PyBUF_ANY_CONTIGUOUS | (_PyBUF_WRITABLE if writable else 0)
    _get_buffer(obj, ctypes.byref(view), flags)
    return Buffer(int(view.buf or 0), int(view.len), False, obj, view)


def _same_stream(cai_stream, handle):
    """Whether a __cuda_array_interface__ stream (1: legacy default) is the
    CUstream handle (0 or 1: the legacy default stream)."""
    if cai_stream is None:
        return False
    cai_stream = int(cai_stream)
    legacy = (0, 1)
    return cai_stream == handle or (cai_stream in legacy and handle in legacy)


def as_buffer(obj, writable, what="buffer", stream=None):
    """A Buffer for obj; writable=True for the target of a read. stream:
    for a stream-ordered request, its CUstream handle (the producer's
    stream is not waited for when it is that one)."""
    if isinstance(obj, Buffer):
        return obj
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is not None:
        return _from_cai(obj, cai, writable, what, stream)
    return _from_buffer_protocol(obj, writable, what)


def check_range(buf, size, file_offset, what):
    """The size to move: buf.nbytes when size is None; raises ValueError for
    a negative size or offset or a size larger than the buffer, and
    OverflowError for values beyond the C types (see _args)."""
    if size is None:
        size = buf.nbytes
    size = _args.size(size, what)
    file_offset = _args.offset(file_offset, what)
    if size > buf.nbytes:
        raise ValueError("%s: buffer too small: size is %d bytes but the buffer "
                         "holds %d" % (what, size, buf.nbytes))
    _args.span(size, file_offset, what)
    return size, file_offset
