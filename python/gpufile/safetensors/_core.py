"""The machinery behind gpufile.safetensors: the C object
(gpufile_safetensors_*), the framework adapters (torch, numpy, cupy), the
loader that reads groups of tensors into one allocation, and the writer.

Frameworks are imported only when a call needs them.
"""

import collections
import contextlib
import ctypes
import errno
import json
import os
import stat
import threading

from .. import _args, _lib
from .._owned import Owned, Owner
from . import _errors


class _CTensor(ctypes.Structure):
    # include/gpufile.h, gpufile_safetensors_tensor_t
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("dtype", ctypes.c_char_p),
        ("dtype_bits", ctypes.c_uint),
        ("dtype_order", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.POINTER(ctypes.c_uint64)),
        ("begin", ctypes.c_uint64),
        ("end", ctypes.c_uint64),
        ("file_offset", ctypes.c_uint64),
    ]


_declared = False
_declare_lock = threading.Lock()


def _c():
    """The library, with the safetensors functions' prototypes set."""
    global _declared
    lib = _lib.lib()
    if _declared:
        return lib
    with _declare_lock:
        vp, cp, i, u64 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint64
        protos = {
            "gpufile_safetensors_open": (i, [ctypes.POINTER(vp), cp]),
            "gpufile_safetensors_close": (i, [vp]),
            "gpufile_safetensors_count": (i, [vp]),
            "gpufile_safetensors_tensor": (i, [vp, i, ctypes.POINTER(_CTensor)]),
            "gpufile_safetensors_tensors": (i, [vp, i, i, ctypes.POINTER(_CTensor)]),
            "gpufile_safetensors_find": (i, [vp, cp]),
            "gpufile_safetensors_has_metadata": (i, [vp]),
            "gpufile_safetensors_metadata_count": (i, [vp]),
            "gpufile_safetensors_metadata": (i, [vp, i, ctypes.POINTER(cp), ctypes.POINTER(cp)]),
            "gpufile_safetensors_data_offset": (u64, [vp]),
            "gpufile_safetensors_dtype_name": (cp, [i]),
            "gpufile_safetensors_data_size": (u64, [vp]),
            "gpufile_safetensors_handle": (vp, [vp]),
            "gpufile_pread_gather": (ctypes.c_ssize_t, [vp, vp, ctypes.c_size_t,
                                                        ctypes.c_size_t,
                                                        ctypes.POINTER(ctypes.c_int64)]),
            "gpufile_safetensors_load": (ctypes.c_ssize_t, [vp, vp, ctypes.c_size_t]),
            "gpufile_safetensors_load_tensors": (ctypes.c_ssize_t,
                                                 [vp, i, ctypes.POINTER(i), ctypes.POINTER(vp)]),
        }
        for name, (res, args) in protos.items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise _lib.LibraryNotFoundError(
                    2, "%s has no %s: it predates safetensors support; rebuild it"
                    % (_lib.library_path(), name)) from None
            fn.restype, fn.argtypes = res, args
        _declared = True
    return lib


class TensorInfo(collections.namedtuple(
        "TensorInfo", "index name dtype bits order shape begin end")):
    """One tensor of a file's header: its index (offset order), name,
    dtype name ("BF16"), bits per element, rank in the dtype order, shape
    (a tuple), and [begin, end) in the data section. A named tuple: a
    loader builds thousands of them, and a tuple is built in one call."""

    __slots__ = ()

    @property
    def nbytes(self):
        return self.end - self.begin

    def __repr__(self):
        return "TensorInfo(%r, %s, %s, [%d, %d])" % (
            self.name, self.dtype, list(self.shape), self.begin, self.end)


def _table(lib, st, path):
    """Every tensor of the open file st as TensorInfo, in offset order:
    the table is fetched in one call (gpufile_safetensors_tensors), since
    one ctypes call per tensor cost ~1 us each on files of thousands."""
    n = _lib.check(lib.gpufile_safetensors_count(st), filename=path)
    arr = (_CTensor * max(n, 1))()
    got = _lib.check(lib.gpufile_safetensors_tensors(st, 0, n, arr), filename=path)
    if got != n:
        raise OSError(5, "%s: the library described %d of %d tensors" % (path, got, n))
    new, cls = tuple.__new__, TensorInfo
    dtypes = {}  # b"BF16" -> "BF16": a handful of distinct values
    out = []
    for k in range(n):
        c = arr[k]
        d = c.dtype
        ds = dtypes.get(d)
        if ds is None:
            ds = dtypes[d] = d.decode()
        out.append(new(cls, (k, c.name.decode("utf-8"), ds, c.dtype_bits, c.dtype_order,
                             tuple(c.shape[:c.ndim]), c.begin, c.end)))
    return out


class _Owned(Owned):
    """An Owned whose calls once close() has begun raise what
    safetensors raises there (SafetensorError), still a ValueError."""

    def _closed(self):
        return _errors.ClosedFileError("I/O operation on closed " + self.what)


class Header(Owner):
    """An open safetensors file with its header parsed and validated by the
    library (gpufile_safetensors_open): the tensors in offset order, the
    metadata, and the loads. Close it (or use it as a context manager).

    The C object is an Owned (.._owned), as a File's handle is: a load, or
    a read through its gpufile handle (gpufile_safetensors_handle), is a
    shared call of it (call(), hold()), so that close() frees it only once
    they have ended (issue 32 item 1: safe_open.close() while other
    threads were in get_tensor() freed it under them: a segfault, a heap
    use after free under ASan); a call once close() has begun raises
    ValueError("I/O operation on closed safetensors file ...")."""

    def __init__(self, path):
        self._c = None
        # A C string ends at a NUL: "a.safetensors\0junk" opened a.safetensors.
        raw = _args.c_path(path, "safetensors")
        # A URL named as the library names it: no password, no query.
        self.path = _lib.shown_name(os.fsdecode(path))
        lib = _c()
        out = ctypes.c_void_p()
        rc = lib.gpufile_safetensors_open(ctypes.byref(out), raw)
        try:
            _lib.check(rc, filename=self.path)
        except OSError as e:
            # A malformed file: safetensors raises SafetensorError.
            if e.errno != errno.EBADMSG:
                raise
            raise _errors.header_error(e) from None
        st = out.value
        self._c = _Owned(st, lib.gpufile_safetensors_close,
                         "safetensors file %r" % self.path)
        # No other thread knows the object yet: no call to count.
        self.tensors = _table(lib, st, self.path)
        self.by_name = {t.name: t for t in self.tensors}
        # None without __metadata__ (or with null), {} for an empty one,
        # as the reference's metadata() returns them.
        self.metadata = None
        if _lib.check(lib.gpufile_safetensors_has_metadata(st),
                      filename=self.path):
            nmeta = lib.gpufile_safetensors_metadata_count(st)
            self.metadata = {}
            for k in range(nmeta):
                key, val = ctypes.c_char_p(), ctypes.c_char_p()
                _lib.check(lib.gpufile_safetensors_metadata(
                    st, k, ctypes.byref(key), ctypes.byref(val)), filename=self.path)
                self.metadata[key.value.decode("utf-8")] = val.value.decode("utf-8")
        self.data_offset = int(lib.gpufile_safetensors_data_offset(st))
        self.data_size = int(lib.gpufile_safetensors_data_size(st))

    @property
    def closed(self):
        return self._c is None or self._c.closed

    def close(self):
        """Closes the file once the loads and reads of other threads have
        ended; a load that starts once close() has begun raises
        ValueError. Calling it again does nothing."""
        if self._c is not None:
            _lib.check(self._c.close() or 0, filename=self.path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def hold(self):
        """with header.hold() as st: the C object held open for the block
        (a shared call); ValueError once close() has begun."""
        if self._c is None:
            raise _errors.ClosedFileError(
                "I/O operation on closed safetensors file %r" % self.path)
        return self._c.hold()

    def info(self, name):
        t = self.by_name.get(name)
        if t is None:
            raise _errors.TensorNotFoundError("%s: no tensor named %r"
                                              % (self.path, name))
        return t

    def load_indices(self, indices, ptrs):
        """Reads tensor indices[i] into ptrs[i] (the C library coalesces
        neighbours in file and memory). Returns bytes read."""
        n = len(indices)
        idx = (ctypes.c_int * max(n, 1))(*indices)
        dst = (ctypes.c_void_p * max(n, 1))(*ptrs)
        with self.hold() as st:
            rc = _c().gpufile_safetensors_load_tensors(st, n, idx, dst)
        return _lib.check(rc, filename=self.path)


# ---- frameworks ----------------------------------------------------------

def _parse_cuda_device(device, what):
    """The CUDA ordinal of device ("cuda", "cuda:1", 1, torch.device), or
    None for the host ("cpu")."""
    if device is None:
        return None
    if isinstance(device, bool):
        raise _errors.UsageTypeError("%s: device must be \"cpu\", \"cuda\", \"cuda:N\" or an int, "
                        "not %r" % (what, device))
    if isinstance(device, int):
        if device < 0:
            raise _errors.UsageError("%s: device %d is negative" % (what, device))
        return device
    if type(device).__name__ == "device" and hasattr(device, "type"):  # torch.device
        if device.type == "cpu":
            return None
        if device.type == "cuda":
            return device.index if device.index is not None else _current_cuda()
        raise _errors.UsageError("%s: device %s is not cpu or cuda" % (what, device))
    if isinstance(device, str):
        d = device.strip().lower()
        if d == "cpu":
            return None
        if d == "cuda":
            return _current_cuda()
        if d.startswith("cuda:") and d[5:].isdigit():
            return int(d[5:])
        if d.isdigit():
            return int(d)
    raise _errors.UsageError("%s: device %r is not \"cpu\", \"cuda\", \"cuda:N\" or an int"
                     % (what, device))


def need_gpu(device):
    """Raises gpufile's error (GPUFILE_ENOCUDA: "no usable GPU", with the
    driver's reason) unless CUDA ordinal device is a usable GPU here."""
    n = _lib.lib().gpufile_cuda_device_count()
    if n < 0:
        raise _lib.make_error(n, "cuda:%d: no usable GPU: %s"
                              % (device, _lib.errmsg() or _lib.strerror(n)))
    if device >= n:
        raise _lib.Error(errno.ENODEV, "cuda:%d: no usable GPU of that ordinal (this "
                         "machine has %d)" % (device, n))


def on_device(fw, device):
    """A context manager making device current in the caller's thread for
    its duration only (the caller's own current device is restored)."""
    if device is None or fw.name not in ("pt", "cupy"):
        return contextlib.nullcontext()
    fw.need_gpu(device)  # gpufile's "no usable GPU", not the framework's error
    if fw.name == "pt":
        return fw.torch.cuda.device(device)
    return fw.cp.cuda.Device(device)


def _current_cuda():
    try:
        import torch
        return torch.cuda.current_device()
    except Exception:
        return 0


def _runs(infos, offs):
    """Splits infos (at byte offsets offs of one buffer) into runs of
    tensors of one dtype and shape that lie back to back in the buffer, as
    [(first, count)]: a framework makes the views of a run in one call
    (thousands of same-shaped tensors are common). An empty tensor is a
    run of its own. Within a run every tensor has the same alignment for
    its dtype as the first (the stride is a whole number of elements)."""
    runs, n, i = [], len(infos), 0
    while i < n:
        t = infos[i]
        j = i + 1
        nb = t.end - t.begin
        if nb:
            dt, sh, nxt = t.dtype, t.shape, offs[i] + nb
            while j < n:
                u = infos[j]
                if offs[j] != nxt or u.dtype != dt or u.shape != sh:
                    break
                nxt += nb
                j += 1
        runs.append((i, j - i))
        i = j
    return runs


def _contiguous_strides(shape):
    """The strides (in elements) of a C-contiguous tensor of shape, as
    torch computes them (a dimension of size 0 counts as 1)."""
    st, acc = [], 1
    for d in reversed(shape):
        st.append(acc)
        acc *= d if d > 1 else 1
    return tuple(reversed(st))


class _Torch:
    name = "pt"

    def __init__(self):
        import torch
        self.torch = torch
        t = torch
        self.dtypes = {"BOOL": t.bool, "U8": t.uint8, "I8": t.int8, "I16": t.int16,
                       "F16": t.float16, "BF16": t.bfloat16, "I32": t.int32,
                       "F32": t.float32, "F64": t.float64, "I64": t.int64}
        for st_name, attr in (("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"),
                              ("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2"),
                              ("F8_E8M0", "float8_e8m0fnu"),
                              ("F8_E4M3FNUZ", "float8_e4m3fnuz"),
                              ("F8_E5M2FNUZ", "float8_e5m2fnuz"), ("C64", "complex64")):
            if hasattr(t, attr):
                self.dtypes[st_name] = getattr(t, attr)
        self.names = {v: k for k, v in self.dtypes.items()}
        # device="cpu" on every host allocation: under
        # torch.set_default_device("cuda") one without it lands on the
        # GPU (issue 34 item 3).
        self.itemsize = {v: t.empty((), dtype=v, device="cpu").element_size()
                         for v in self.dtypes.values()}
        self.usable = set()  # CUDA ordinals need_gpu() has seen usable

    def dtype(self, info, path):
        d = self.dtypes.get(info.dtype)
        if d is None:
            raise _errors.UsageError("%s: tensor %r: dtype %s has no torch dtype in torch %s"
                             % (path, info.name, info.dtype, self.torch.__version__))
        return d

    def need_gpu(self, device):
        """Raises gpufile's "no usable GPU" error for CUDA ordinal device
        on a machine (or a torch) that cannot use it, instead of what
        torch raises there ("Torch not compiled with CUDA enabled")."""
        if device in self.usable:
            return
        need_gpu(device)
        if not self.torch.cuda.is_available():
            raise _lib.Error(errno.ENODEV, "cuda:%d: no usable GPU for torch %s "
                             "(torch.cuda.is_available() is False: torch "
                             "built without CUDA); load with device=\"cpu\""
                             % (device, self.torch.__version__))
        self.usable.add(device)

    def alloc(self, nbytes, device):
        t = self.torch
        if device is None:
            return t.empty(nbytes, dtype=t.uint8, device="cpu")
        self.need_gpu(device)
        dev = t.device("cuda", device)
        buf = t.empty(nbytes, dtype=t.uint8, device=dev)
        # The caching allocator may hand out memory that kernels queued on
        # the current stream still use; gpufile writes on its own streams.
        t.cuda.current_stream(dev).synchronize()
        return buf

    def ptr(self, buf):
        return buf.data_ptr()

    def empty(self, shape, info, device, path, sync=True):
        """A new C-contiguous tensor of shape and info's dtype on device.
        sync=False: the caller writes it on the current stream only (no
        wait for the work queued there, see alloc())."""
        t = self.torch
        dtype = self.dtype(info, path)
        if device is None:
            return t.empty(shape, dtype=dtype, device="cpu")
        self.need_gpu(device)
        dev = t.device("cuda", device)
        out = t.empty(shape, dtype=dtype, device=dev)
        if sync:
            t.cuda.current_stream(dev).synchronize()  # as alloc()
        return out

    def gather(self, flat, shape, strides, out_shape):
        """A C-contiguous copy of the elements of flat (1-d) at shape x
        strides (in elements), shaped out_shape (as many elements)."""
        view = flat.as_strided(shape, strides)
        return view.clone(memory_format=self.torch.contiguous_format).view(out_shape)

    def contiguous(self, obj):
        return obj.contiguous()

    def pinned(self, nbytes):
        """(pinned host buffer of nbytes, its address)."""
        buf = self.torch.empty(nbytes, dtype=self.torch.uint8, device="cpu",
                               pin_memory=True)
        return buf, buf.data_ptr()

    def from_pinned(self, out, pinned, nbytes):
        """Queues the copy of nbytes of pinned into out (device memory,
        contiguous) on the current stream, as torch's own non_blocking
        copies are: out is ready in stream order. Returns the event after
        which pinned may be reused."""
        t = self.torch
        dst = out.view(-1).view(t.uint8)
        dst.copy_(pinned[:nbytes], non_blocking=True)
        done = t.cuda.Event()
        done.record(t.cuda.current_stream(out.device))
        return done

    def wait(self, event):
        event.synchronize()

    def view(self, buf, off, info, path):
        """The tensor info at byte off of buf, sharing buf's memory when
        the offset suits the dtype's alignment, else a copy."""
        t = self.torch
        dtype = self.dtype(info, path)
        if info.nbytes == 0:
            return t.empty(info.shape, dtype=dtype, device=buf.device)
        raw = buf[off:off + info.nbytes]
        if (buf.data_ptr() + off) % self.itemsize[dtype] != 0:
            raw = raw.clone()
        return raw.view(dtype).view(info.shape)

    def views(self, buf, base, infos, offs, path):
        """{name: tensor} for infos[i] at byte offs[i] of buf (at address
        base): one as_strided view of buf seen as the tensor's dtype (one
        torch call per tensor instead of slice, view(dtype), view(shape));
        a tensor whose address does not suit its dtype goes the copying
        way of view()."""
        dtypes, sizes = self.dtypes, self.itemsize
        typed, out = {}, {}
        for i, k in _runs(infos, offs):
            info, off = infos[i], offs[i]
            dtype = dtypes.get(info.dtype)
            if dtype is None:
                dtype = self.dtype(info, path)  # raises
            isz = sizes[dtype]
            if info.end == info.begin or (base + off) % isz:
                for m in range(i, i + k):
                    out[infos[m].name] = self.view(buf, offs[m], infos[m], path)
                continue
            tv = typed.get(dtype)
            if tv is None:
                tv = typed[dtype] = buf.view(dtype)  # len(buf) % 8 == 0
            shape, st = info.shape, _contiguous_strides(info.shape)
            if k == 1:
                out[info.name] = tv.as_strided(shape, st, off // isz)
                continue
            # k tensors back to back: one (k, *shape) view, unbound into
            # k views in one call.
            numel = (info.end - info.begin) // isz
            run = tv.as_strided((k,) + shape, (numel,) + st, off // isz).unbind(0)
            for m, v in zip(range(i, i + k), run):
                out[infos[m].name] = v
        return out

    def describe(self, obj):
        """(dtype name, shape, nbytes, Buffer) of a tensor to save."""
        t = self.torch
        if obj.dtype not in self.names:
            raise ValueError("dtype %s cannot be saved in safetensors" % obj.dtype)
        if not obj.is_contiguous():
            raise ValueError("tensor is not contiguous; call .contiguous() first "
                             "(safetensors saves contiguous tensors only)")
        if obj.is_cuda:
            t.cuda.current_stream(obj.device).synchronize()
        n = obj.numel() * obj.element_size()
        return self.names[obj.dtype], tuple(obj.shape), n, obj.data_ptr(), obj


class _Numpy:
    name = "numpy"

    def __init__(self):
        import numpy as np
        self.np = np
        self.dtypes = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16,
                       "U16": np.uint16, "F16": np.float16, "I32": np.int32,
                       "U32": np.uint32, "F32": np.float32, "F64": np.float64,
                       "I64": np.int64, "U64": np.uint64, "C64": np.complex64}
        self.dtypes = {k: np.dtype(v).newbyteorder("<") for k, v in self.dtypes.items()}
        self.names = {v: k for k, v in self.dtypes.items()}

    def dtype(self, info, path):
        d = self.dtypes.get(info.dtype)
        if d is None:
            raise _errors.UsageError("%s: tensor %r: dtype %s has no NumPy dtype (use "
                             "framework=\"pt\")" % (path, info.name, info.dtype))
        return d

    def _host_only(self, device):
        if device is not None:
            raise _errors.UsageError("framework \"numpy\" loads into host memory; device "
                             "must be \"cpu\", not cuda:%d" % device)

    def alloc(self, nbytes, device):
        self._host_only(device)
        return self.np.empty(nbytes, dtype=self.np.uint8)

    def ptr(self, buf):
        return buf.ctypes.data

    def empty(self, shape, info, device, path, sync=True):
        self._host_only(device)
        return self.np.empty(shape, dtype=self.dtype(info, path))

    def gather(self, flat, shape, strides, out_shape):
        isz = flat.dtype.itemsize
        view = self._xp().lib.stride_tricks.as_strided(flat, shape, [s * isz for s in strides])
        return view.copy(order="C").reshape(out_shape)

    def contiguous(self, obj):
        # asarray: an index may give a NumPy scalar; ascontiguousarray
        # would make a 0-d result 1-d.
        a = self._xp().asarray(obj)
        return a if a.flags.c_contiguous else a.copy(order="C")

    def _xp(self):
        return self.np

    def view(self, buf, off, info, path):
        dtype = self.dtype(info, path)
        if info.nbytes == 0:
            return self.np.empty(info.shape, dtype=dtype)
        raw = buf[off:off + info.nbytes]
        if (buf.ctypes.data + off) % dtype.alignment != 0:
            raw = raw.copy()
        return raw.view(dtype).reshape(info.shape)

    def views(self, buf, base, infos, offs, path):
        """{name: array} for infos[i] at byte offs[i] of buf: one ndarray
        over buf's memory per tensor; a tensor whose address does not suit
        its dtype goes the copying way of view()."""
        dtypes, nd = self.dtypes, self.np.ndarray
        out = {}
        for i, k in _runs(infos, offs):
            info, off = infos[i], offs[i]
            dtype = dtypes.get(info.dtype)
            if dtype is None:
                dtype = self.dtype(info, path)  # raises
            if info.end == info.begin or (base + off) % dtype.alignment:
                for m in range(i, i + k):
                    out[infos[m].name] = self.view(buf, offs[m], infos[m], path)
            elif k == 1 or not info.shape:  # a scalar run would iterate to scalars
                nb = info.end - info.begin
                for m in range(i, i + k):
                    out[infos[m].name] = nd(info.shape, dtype, buf, off + (m - i) * nb)
            else:
                # k arrays back to back: one (k, *shape) array, iterated
                # into k views in one call.
                run = nd((k,) + info.shape, dtype, buf, off)
                for m, v in zip(range(i, i + k), run):
                    out[infos[m].name] = v
        return out

    def describe(self, obj):
        np = self.np
        a = np.asarray(obj)
        le = a.dtype.newbyteorder("<")
        if le not in self.names:
            raise ValueError("dtype %s cannot be saved in safetensors" % a.dtype)
        # As safetensors.numpy saves it: a big-endian array byteswapped to
        # little-endian, a non-contiguous one in C order (its tobytes());
        # a copy, the caller's array untouched. Not ascontiguousarray(),
        # which makes a 0-d array 1-d (shape [1] written for []).
        if a.dtype != le or not a.flags.c_contiguous:
            a = a.astype(le, order="C")
        return self.names[le], tuple(a.shape), a.nbytes, a.ctypes.data, a


class _Cupy(_Numpy):
    name = "cupy"

    def __init__(self):
        super().__init__()
        import cupy
        self.cp = cupy

    def need_gpu(self, device):
        need_gpu(device)

    def alloc(self, nbytes, device):
        if device is None:
            raise _errors.UsageError("framework \"cupy\" loads into GPU memory; device must "
                             "be \"cuda\", \"cuda:N\" or an int, not \"cpu\"")
        with self.cp.cuda.Device(device):
            buf = self.cp.empty(nbytes, dtype=self.cp.uint8)
            self.cp.cuda.get_current_stream().synchronize()
        return buf

    def ptr(self, buf):
        return buf.data.ptr

    def empty(self, shape, info, device, path, sync=True):
        if device is None:
            self.alloc(0, device)  # raises
        with self.cp.cuda.Device(device):
            out = self.cp.empty(shape, dtype=self.dtype(info, path))
            self.cp.cuda.get_current_stream().synchronize()  # as alloc()
        return out

    def gather(self, flat, shape, strides, out_shape):
        with self.cp.cuda.Device(flat.device.id):
            return super().gather(flat, shape, strides, out_shape)

    def _xp(self):
        return self.cp

    def pinned(self, nbytes):
        mem = self.cp.cuda.alloc_pinned_memory(nbytes)
        return mem, mem.ptr

    def from_pinned(self, out, pinned, nbytes):
        """Copies, and returns once done (no event to wait for)."""
        rt = self.cp.cuda.runtime
        with self.cp.cuda.Device(out.device.id):
            rt.memcpy(out.data.ptr, pinned.ptr, nbytes, rt.memcpyHostToDevice)
        return None

    def wait(self, event):
        pass

    def view(self, buf, off, info, path):
        dtype = self.dtype(info, path)
        with self.cp.cuda.Device(buf.device.id):
            if info.nbytes == 0:
                return self.cp.empty(info.shape, dtype=dtype)
            raw = buf[off:off + info.nbytes]
            # On the GPU a complex64 is a float2, aligned to 8 bytes
            # (numpy's alignment for it is 4): the item size is the rule.
            if (buf.data.ptr + off) % dtype.itemsize != 0:
                raw = raw.copy()
            return raw.view(dtype).reshape(info.shape)

    def views(self, buf, base, infos, offs, path):
        """{name: array} for infos[i] at byte offs[i] of buf: one ndarray
        on buf's memory per tensor; a tensor whose address does not suit
        its dtype goes the copying way of view()."""
        dtypes, nd, mem = self.dtypes, self.cp.ndarray, buf.data
        out = {}
        with self.cp.cuda.Device(buf.device.id):
            for info, off in zip(infos, offs):
                dtype = dtypes.get(info.dtype)
                if dtype is None:
                    dtype = self.dtype(info, path)  # raises
                if info.end == info.begin or (base + off) % dtype.itemsize:
                    out[info.name] = self.view(buf, off, info, path)
                else:
                    out[info.name] = nd(info.shape, dtype, mem + off)
        return out

    def describe(self, obj):
        a = obj
        if not a.flags.c_contiguous:
            raise ValueError("array is not C-contiguous; use cupy.ascontiguousarray")
        dt = self.np.dtype(a.dtype).newbyteorder("<")
        if dt not in self.names:
            raise ValueError("dtype %s cannot be saved in safetensors" % a.dtype)
        with self.cp.cuda.Device(a.device.id):
            self.cp.cuda.get_current_stream().synchronize()
        return self.names[dt], tuple(a.shape), a.nbytes, a.data.ptr, a


_FRAMEWORKS = {"pt": _Torch, "torch": _Torch, "pytorch": _Torch,
               "np": _Numpy, "numpy": _Numpy, "cupy": _Cupy, "cp": _Cupy}


def framework(name):
    try:
        cls = _FRAMEWORKS[name]
    except (KeyError, TypeError):
        raise _errors.UsageError("framework %r is not one of \"pt\", \"numpy\", \"cupy\""
                         % (name,)) from None
    return cls()


def _framework_for(obj):
    mod = type(obj).__module__.split(".")[0]
    if mod == "torch":
        return _Torch()
    if mod == "cupy":
        return _Cupy()
    return _Numpy()


# ---- loading -------------------------------------------------------------

_PAGE = 4096


def _by_offset(t):
    return (t.begin, t.end)


def load_group(header, infos, fw, device, ordered=False):
    """Reads the tensors infos of header into one new allocation on device
    (None: host) and returns {name: tensor}. ordered: infos are already in
    offset order (header.tensors or a subsequence of it).

    Tensors next to each other in the file stay next to each other in
    memory, so that they are read as one request. Each run of adjacent
    tensors starts at an address congruent to its file offset modulo 4096:
    then every task boundary (a multiple of task_size in the file) is
    4096-aligned in memory too, which O_DIRECT and cuFile's direct path
    need to move the bytes without an extra bounce. This costs at most
    4 KiB per run; the alignment of each tensor for its dtype is kept
    because the data section of a well-formed file starts at a multiple
    of 8 (a tensor whose offset does not suit its dtype is copied out).

    This runs once per tensor on files of thousands of tensors, so the
    loops below avoid per-tensor calls and attribute lookups."""
    if not ordered:
        infos = sorted(infos, key=_by_offset)
    doff = header.data_offset
    offs, at, prev_end = [], 0, None
    append = offs.append
    for t in infos:
        b = t.begin
        if b != prev_end:
            at += (doff + b - at) % _PAGE
        append(at)
        prev_end = t.end
        at += prev_end - b
    # + a page for the shift below; a multiple of 8 so that the buffer can
    # be viewed as any dtype whole.
    buf = fw.alloc((at + _PAGE + 7) & ~7, device)
    base = fw.ptr(buf)
    shift = (-base) % _PAGE  # base + shift is page aligned
    if shift:
        offs = [o + shift for o in offs]
    idx = [t.index for t in infos if t.end != t.begin]
    if len(idx) == len(infos):
        ptrs = [base + o for o in offs]
    else:
        ptrs = [base + o for t, o in zip(infos, offs) if t.end != t.begin]
    header.load_indices(idx, ptrs)
    return fw.views(buf, base, infos, offs, header.path)


def device_for(name, device_map, default):
    """The device of tensor name under device_map (a name or a dotted
    prefix -> device; "" matches everything; the longest match wins)."""
    if not device_map:
        return default
    best, best_len = default, -1
    for key, dev in device_map.items():
        if key == "" or name == key or name.startswith(key + "."):
            if len(key) > best_len:
                best, best_len = dev, len(key)
    return best


# ---- saving --------------------------------------------------------------

def dtype_order():
    """The format's dtype names in its order (safetensors' Dtype enum; save_file
    lays tensors out by it, descending, then by name), as the library knows
    them (gpufile_safetensors_dtype_name), so that the rule lives in one
    place."""
    lib = _c()
    names, k = [], 0
    while True:
        n = lib.gpufile_safetensors_dtype_name(k)
        if n is None:
            return names
        names.append(n.decode())
        k += 1


def checkpoint_files(path):
    """(index dict or None, folder, [shard files]) for an index .json, a
    folder holding model.safetensors.index.json or *.safetensors, or one
    .safetensors file."""
    path = os.fsdecode(path)
    if os.path.isdir(path):
        idx = [n for n in sorted(os.listdir(path)) if n.endswith(".safetensors.index.json")]
        if len(idx) > 1:
            raise ValueError("%s: several index files (%s); name the one to load"
                             % (path, ", ".join(idx)))
        if idx:
            path = os.path.join(path, idx[0])
        else:
            shards = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
            if not shards:
                raise FileNotFoundError(2, "%s: no *.safetensors.index.json and no "
                                        "*.safetensors file in the folder" % path, path)
            return None, path, [os.path.join(path, n) for n in shards]
    if not path.endswith(".json"):
        return None, os.path.dirname(path), [path]
    text = _read_index(path)
    try:
        index = json.loads(text)
    except ValueError as e:
        raise ValueError("%s: not a valid JSON index: %s" % (path, e)) from None
    wm = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
        raise ValueError("%s: no \"weight_map\" object of tensor name -> shard file"
                         % path)
    folder = os.path.dirname(os.path.abspath(path))
    # A dict keeps the first appearance of each shard, in order: the list
    # it replaced was searched once per tensor, pairwise work that grew
    # with tensors x shards (gpufile load's drop_repeats says the same).
    shards = {}
    for v in wm.values():
        if os.path.isabs(v) or ".." in v.split("/"):
            raise ValueError("%s: weight_map names shard %r outside the folder" % (path, v))
        shards.setdefault(shard_path(folder, v))
    return index, folder, list(shards)


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"))


def _read_index(path):
    """The bytes of the index file path. Opened without blocking and
    refused unless a regular file, as gpufile load refuses it: a FIFO
    named *.json blocked open() for ever, and /dev/zero was read until
    memory ran out."""
    failed = None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        failed = (type(e), e.errno, e.strerror)
    if failed:  # named as the library names a URL; no chained original
        raise failed[0](failed[1], failed[2], _lib.shown_name(path))
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((" but " + k for test, k in _KINDS if test(mode)), "")
            raise ValueError("%s: not a regular file%s (an index is a JSON file)"
                             % (_lib.shown_name(path), kind))
        return f.read()


def shard_path(folder, shard):
    """The path of a weight_map shard name: normalised, so that
    "./s1.safetensors" and "s1.safetensors" are one file, opened once."""
    return os.path.join(folder, os.path.normpath(shard))


def build_header(entries, metadata):
    """The header bytes (padded with spaces to a multiple of 8) and the
    layout for entries [(name, dtype, shape, nbytes)], as safetensors'
    save_file writes them: tensors sorted by dtype order descending, then
    name; JSON compact, __metadata__ first, then tensors in layout order.
    Returns (header bytes, [(name, begin, end)] in layout order)."""
    order = {d: k for k, d in enumerate(dtype_order())}
    for name, dtype, _, _ in entries:
        if not isinstance(name, str):
            raise TypeError("tensor names must be str, not %s" % type(name).__name__)
        if name == "__metadata__":
            raise ValueError("a tensor cannot be named __metadata__")
    entries = sorted(entries, key=lambda e: (-order[e[1]], e[0]))
    parts, layout, at = [], [], 0
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise TypeError("metadata must be a dict of str to str")
        parts.append('"__metadata__":' + _dumps(dict(sorted(metadata.items()))))
    for name, dtype, shape, nbytes in entries:
        parts.append('%s:{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}' % (
            _dumps(name), dtype, _dumps([int(d) for d in shape]), at, at + nbytes))
        layout.append((name, at, at + nbytes))
        at += nbytes
    text = ("{" + ",".join(parts) + "}").encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return text, layout


def _dumps(obj):
    # serde_json's escaping: only '"', '\\' and control characters.
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def save(tensors, path, metadata):
    if not isinstance(tensors, dict):
        raise TypeError("tensors must be a dict of name -> tensor, not %s"
                        % type(tensors).__name__)
    if any(type(v).__module__.split(".")[0] == "torch" for v in tensors.values()):
        from . import _torch_model
        _torch_model.refuse_shared(tensors, _lib.shown_name(os.fsdecode(path)))
    entries, ptrs = [], {}
    for name, obj in tensors.items():
        fw = _framework_for(obj)
        try:
            dtype, shape, nbytes, ptr, keep = fw.describe(obj)
        except ValueError as e:
            raise ValueError("%s: tensor %r: %s"
                             % (_lib.shown_name(os.fsdecode(path)), name, e)) from None
        entries.append((name, dtype, shape, nbytes))
        ptrs[name] = (ptr, keep)  # keep: what holds the memory
    header, layout = build_header(entries, metadata)
    with _Replacing(path) as tmp:
        _write(tmp, _lib.shown_name(os.fsdecode(path)), header, layout, ptrs,
               sync=tmp is not path)
    return None


class _Replacing:
    """with _Replacing(path) as tmp: the file is written at tmp, a new
    file in path's folder, then fsync'ed and renamed over path, so that a
    save that fails part-way (a full disk, an I/O error, an exception)
    leaves the file that was there whole (issue 34 item 3), and a reader
    never sees a file half written. On failure tmp is removed.

    Written in place (tmp is path) where a rename cannot stand in: a URL,
    or a path naming something other than a regular file (/dev/null, a
    FIFO). A symbolic link is followed: the file it names is replaced
    and the link kept. The new file has the mode the file it replaces
    had, else what gpufile gives a file it creates (0644 less the umask).
    """

    def __init__(self, path):
        _args.c_path(path, "save_file")  # TypeError/ValueError as File gives
        self.path = path
        self.tmp = None

    def __enter__(self):
        path = os.fsdecode(self.path)
        if "://" in path:
            return self.path
        target = os.path.realpath(path)
        try:
            mode = os.stat(target).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            return self.path
        folder, base = os.path.split(target)
        while True:
            tmp = os.path.join(folder, ".%s.%s.gpufile-tmp"
                               % (base, os.urandom(6).hex()))
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                             0o644)
            except FileExistsError:
                continue
            except OSError as e:  # named as the caller named it
                raise type(e)(e.errno, e.strerror, _lib.shown_name(path)) from None
            break
        self.tmp, self.target = tmp, target
        try:
            if mode is not None:
                os.fchmod(fd, stat.S_IMODE(mode))
        except BaseException:
            os.close(fd)
            os.unlink(tmp)
            raise
        os.close(fd)
        return tmp

    def __exit__(self, exc_type, exc, tb):
        if self.tmp is None:
            return False
        if exc_type is not None:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            return False
        try:
            os.replace(self.tmp, self.target)
        except BaseException:
            os.unlink(self.tmp)
            raise
        _fsync_folder(os.path.dirname(self.target))
        return False


def _fsync_folder(folder):
    """Makes a rename in folder durable (the rename is done either way)."""
    fd = os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as e:
        # Some file systems (and /proc-like ones) refuse fsync on a
        # folder; the data of the file itself was synced already.
        if e.errno not in (errno.EINVAL, errno.EROFS, errno.EBADF):
            raise
    finally:
        os.close(fd)


def _write(path, shown, header, layout, ptrs, sync):
    """Writes the header and each tensor's bytes (layout, ptrs: as save()
    built them) into a file at path; with sync, then syncs its data. Our
    messages name shown, the file the caller named (path may be the
    temporary file that will replace it; the library's own messages name
    the file it wrote)."""
    from .._file import File

    lib = _lib.lib()
    with File(path, "w") as f:
        head = bytearray(len(header).to_bytes(8, "little") + header)
        _check_written(f.write(head), len(head), 0, "the header", shown)
        base = 8 + len(header)
        for name, begin, end in layout:
            if end == begin:
                continue
            ptr = ptrs[name][0]
            rc = f._call(lib.gpufile_pwrite, ctypes.c_void_p(ptr),
                         end - begin, base + begin)
            _check_written(_lib.check(rc, filename=shown), end - begin,
                           base + begin, "tensor %r" % name, shown)
        if sync:
            f.sync()


def _check_written(got, asked, offset, what, path):
    """A write that moved fewer bytes than asked (without an error) would
    leave a file whose header promises bytes it lacks (issue 39 item 4)."""
    if got != asked:
        raise OSError(errno.EIO, "%s: wrote %d of the %d bytes of %s at file "
                      "offset %d" % (path, got, asked, what, offset), path)


__all__ = ["Header", "TensorInfo", "framework", "load_group", "device_for",
           "build_header", "save", "dtype_order"]
