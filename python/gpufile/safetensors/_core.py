"""The machinery behind gpufile.safetensors: the C object
(gpufile_safetensors_*), the framework adapters (torch, numpy, cupy), the
loader that reads groups of tensors into one allocation, and the writer.

Frameworks are imported only when a call needs them.
"""

import ctypes
import json
import os
import threading

from .. import _lib


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
            "gpufile_safetensors_find": (i, [vp, cp]),
            "gpufile_safetensors_metadata_count": (i, [vp]),
            "gpufile_safetensors_metadata": (i, [vp, i, ctypes.POINTER(cp), ctypes.POINTER(cp)]),
            "gpufile_safetensors_data_offset": (u64, [vp]),
            "gpufile_safetensors_dtype_name": (cp, [i]),
            "gpufile_safetensors_data_size": (u64, [vp]),
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


class TensorInfo:
    """One tensor of a file's header."""

    __slots__ = ("index", "name", "dtype", "bits", "order", "shape", "begin", "end")

    def __init__(self, index, c):
        self.index = index
        self.name = c.name.decode("utf-8")
        self.dtype = c.dtype.decode()
        self.bits = c.dtype_bits
        self.order = c.dtype_order
        self.shape = tuple(int(c.shape[k]) for k in range(c.ndim))
        self.begin = int(c.begin)
        self.end = int(c.end)

    @property
    def nbytes(self):
        return self.end - self.begin

    def __repr__(self):
        return "TensorInfo(%r, %s, %s, [%d, %d])" % (
            self.name, self.dtype, list(self.shape), self.begin, self.end)


class Header:
    """An open safetensors file with its header parsed and validated by the
    library (gpufile_safetensors_open): the tensors in offset order, the
    metadata, and the loads. Close it (or use it as a context manager)."""

    def __init__(self, path):
        self.path = os.fsdecode(path)
        self._st = None
        lib = _c()
        st = ctypes.c_void_p()
        rc = lib.gpufile_safetensors_open(ctypes.byref(st), os.fsencode(path))
        _lib.check(rc, filename=self.path)
        self._st = st.value
        n = lib.gpufile_safetensors_count(self._st)
        self.tensors = []
        for k in range(n):
            c = _CTensor()
            _lib.check(lib.gpufile_safetensors_tensor(self._st, k, ctypes.byref(c)),
                       filename=self.path)
            self.tensors.append(TensorInfo(k, c))
        self.by_name = {t.name: t for t in self.tensors}
        nmeta = lib.gpufile_safetensors_metadata_count(self._st)
        self.metadata = None
        if nmeta > 0:
            self.metadata = {}
            for k in range(nmeta):
                key, val = ctypes.c_char_p(), ctypes.c_char_p()
                _lib.check(lib.gpufile_safetensors_metadata(
                    self._st, k, ctypes.byref(key), ctypes.byref(val)), filename=self.path)
                self.metadata[key.value.decode("utf-8")] = val.value.decode("utf-8")
        self.data_offset = int(lib.gpufile_safetensors_data_offset(self._st))
        self.data_size = int(lib.gpufile_safetensors_data_size(self._st))

    def close(self):
        st, self._st = self._st, None
        if st is not None:
            _lib.check(_c().gpufile_safetensors_close(st), filename=self.path)

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

    def _handle(self):
        if self._st is None:
            raise ValueError("%s: safetensors file is closed" % self.path)
        return self._st

    def info(self, name):
        t = self.by_name.get(name)
        if t is None:
            raise KeyError("%s: no tensor named %r" % (self.path, name))
        return t

    def load_ranges(self, tensors, ptrs):
        """Reads each tensor into the pointer beside it (the C library
        coalesces neighbours in file and memory). Returns bytes read."""
        n = len(tensors)
        idx = (ctypes.c_int * max(n, 1))(*[t.index for t in tensors])
        dst = (ctypes.c_void_p * max(n, 1))(*ptrs)
        rc = _c().gpufile_safetensors_load_tensors(self._handle(), n, idx, dst)
        return _lib.check(rc, filename=self.path)


# ---- frameworks ----------------------------------------------------------

def _parse_cuda_device(device, what):
    """The CUDA ordinal of device ("cuda", "cuda:1", 1, torch.device), or
    None for the host ("cpu")."""
    if device is None:
        return None
    if isinstance(device, bool):
        raise TypeError("%s: device must be \"cpu\", \"cuda\", \"cuda:N\" or an int, "
                        "not %r" % (what, device))
    if isinstance(device, int):
        if device < 0:
            raise ValueError("%s: device %d is negative" % (what, device))
        return device
    if type(device).__name__ == "device" and hasattr(device, "type"):  # torch.device
        if device.type == "cpu":
            return None
        if device.type == "cuda":
            return device.index if device.index is not None else _current_cuda()
        raise ValueError("%s: device %s is not cpu or cuda" % (what, device))
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
    raise ValueError("%s: device %r is not \"cpu\", \"cuda\", \"cuda:N\" or an int"
                     % (what, device))


def _current_cuda():
    try:
        import torch
        return torch.cuda.current_device()
    except Exception:
        return 0


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
        self.itemsize = {v: t.empty((), dtype=v).element_size() for v in self.dtypes.values()}

    def dtype(self, info, path):
        d = self.dtypes.get(info.dtype)
        if d is None:
            raise ValueError("%s: tensor %r: dtype %s has no torch dtype in torch %s"
                             % (path, info.name, info.dtype, self.torch.__version__))
        return d

    def alloc(self, nbytes, device):
        t = self.torch
        if device is None:
            return t.empty(nbytes, dtype=t.uint8)
        dev = t.device("cuda", device)
        buf = t.empty(nbytes, dtype=t.uint8, device=dev)
        # The caching allocator may hand out memory that kernels queued on
        # the current stream still use; gpufile writes on its own streams.
        t.cuda.current_stream(dev).synchronize()
        return buf

    def ptr(self, buf):
        return buf.data_ptr()

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
            raise ValueError("%s: tensor %r: dtype %s has no NumPy dtype (use "
                             "framework=\"pt\")" % (path, info.name, info.dtype))
        return d

    def alloc(self, nbytes, device):
        if device is not None:
            raise ValueError("framework \"numpy\" loads into host memory; device "
                             "must be \"cpu\", not cuda:%d" % device)
        return self.np.empty(nbytes, dtype=self.np.uint8)

    def ptr(self, buf):
        return buf.ctypes.data

    def view(self, buf, off, info, path):
        dtype = self.dtype(info, path)
        if info.nbytes == 0:
            return self.np.empty(info.shape, dtype=dtype)
        raw = buf[off:off + info.nbytes]
        if (buf.ctypes.data + off) % dtype.alignment != 0:
            raw = raw.copy()
        return raw.view(dtype).reshape(info.shape)

    def describe(self, obj):
        np = self.np
        a = np.asarray(obj)
        dt = a.dtype.newbyteorder("<") if a.dtype.byteorder in "=|" else a.dtype
        if dt not in self.names:
            raise ValueError("dtype %s cannot be saved in safetensors" % a.dtype)
        if not a.flags.c_contiguous:
            raise ValueError("array is not C-contiguous; use numpy.ascontiguousarray")
        return self.names[dt], tuple(a.shape), a.nbytes, a.ctypes.data, a


class _Cupy(_Numpy):
    name = "cupy"

    def __init__(self):
        super().__init__()
        import cupy
        self.cp = cupy

    def alloc(self, nbytes, device):
        if device is None:
            raise ValueError("framework \"cupy\" loads into GPU memory; device must "
                             "be \"cuda\", \"cuda:N\" or an int, not \"cpu\"")
        with self.cp.cuda.Device(device):
            buf = self.cp.empty(nbytes, dtype=self.cp.uint8)
            self.cp.cuda.get_current_stream().synchronize()
        return buf

    def ptr(self, buf):
        return buf.data.ptr

    def view(self, buf, off, info, path):
        dtype = self.dtype(info, path)
        with self.cp.cuda.Device(buf.device.id):
            if info.nbytes == 0:
                return self.cp.empty(info.shape, dtype=dtype)
            raw = buf[off:off + info.nbytes]
            if (buf.data.ptr + off) % dtype.alignment != 0:
                raw = raw.copy()
            return raw.view(dtype).reshape(info.shape)

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
        raise ValueError("framework %r is not one of \"pt\", \"numpy\", \"cupy\""
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


def load_group(header, infos, fw, device):
    """Reads the tensors infos of header into one new allocation on device
    (None: host) and returns {name: tensor}.

    Tensors next to each other in the file stay next to each other in
    memory, so that they are read as one request. Each run of adjacent
    tensors starts at an address congruent to its file offset modulo 4096:
    then every task boundary (a multiple of task_size in the file) is
    4096-aligned in memory too, which O_DIRECT and cuFile's direct path
    need to move the bytes without an extra bounce. This costs at most
    4 KiB per run; the alignment of each tensor for its dtype is kept
    because the data section of a well-formed file starts at a multiple
    of 8."""
    infos = sorted(infos, key=lambda t: (t.begin, t.end))
    offs, at, prev = [], 0, None
    for t in infos:
        if prev is None or prev.end != t.begin:
            at += (header.data_offset + t.begin - at) % _PAGE
        offs.append(at)
        at += t.nbytes
        prev = t
    buf = fw.alloc(at + _PAGE, device)
    base = fw.ptr(buf)
    shift = (-base) % _PAGE  # base + shift is page aligned
    offs = [o + shift for o in offs]
    live = [(t, o) for t, o in zip(infos, offs) if t.nbytes]
    header.load_ranges([t for t, _ in live], [base + o for _, o in live])
    return {t.name: fw.view(buf, o, t, header.path) for t, o in zip(infos, offs)}


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
    entries, ptrs = [], {}
    for name, obj in tensors.items():
        fw = _framework_for(obj)
        try:
            dtype, shape, nbytes, ptr, keep = fw.describe(obj)
        except ValueError as e:
            raise ValueError("%s: tensor %r: %s" % (os.fsdecode(path), name, e)) from None
        entries.append((name, dtype, shape, nbytes))
        ptrs[name] = (ptr, keep)  # keep: what holds the memory
    header, layout = build_header(entries, metadata)
    from .._file import File

    lib = _lib.lib()
    with File(path, "w") as f:
        f.write(bytearray(len(header).to_bytes(8, "little") + header))
        base = 8 + len(header)
        h = f._h()
        for name, begin, end in layout:
            if end == begin:
                continue
            ptr = ptrs[name][0]
            rc = lib.gpufile_pwrite(h, ctypes.c_void_p(ptr), end - begin, base + begin)
            _lib.check(rc, filename=f.name)
    return None


__all__ = ["Header", "TensorInfo", "framework", "load_group", "device_for",
           "build_header", "save", "dtype_order"]
