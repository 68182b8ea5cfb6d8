"""safe_open(...).get_slice(name): part of one tensor, as safetensors'
slice object has it (get_shape(), get_dtype(), [index]). The use it exists
for is tensor parallelism: each GPU of a model loads its rows or columns of
every weight, and reading the whole tensor on every GPU would read the
checkpoint once per GPU.

A basic index (ints, slices with a positive step, Ellipsis, None) is planned
here; what it selects is a list of equal runs of bytes in the file (the
rows of a row block, one run; a block of columns, one run per row). The
plan by run length:

  one run      the selection is one contiguous range: read straight into
               the result, cut into a few requests read at once when it is
               1-128 MiB (one request of a few MiB keeps only a few of the
               pool's threads busy);
  runs         runs of at least RUN_MIN bytes (a slice of every expert):
               each read straight into its place in the result, all at
               once;
  gather       runs of GATHER_MIN bytes up to RUN_MIN (a column block of a
               weight: 2 KiB per row for 1024 bf16 columns):
               gpufile_pread_gather packs them into host memory, one
               request whose tasks copy the runs in turn; for a GPU
               result into pinned memory, then one copy to the GPU,
               queued on the current stream (see Staging);
  span         shorter runs (every other element): the range from the
               first selected element to the last is read in one request
               and the selection copied out where it was read to; a
               system call per run of a few bytes would cost more than
               the extra bytes.

Each plan reads the selected bytes exactly, except span. Any other index
(a list, an array, a mask, a negative step) is given to the framework: the
tensor is read whole and indexed there, so the result and any error are
the framework's own (torch refuses a negative step, NumPy takes it), with
the file and the tensor named in the error.

The result always has memory of its own and is C-contiguous, as
safetensors gives it on a GPU.
"""

import array
import ctypes
import errno
import operator
import threading

from .. import _lib
from . import _core, _errors

# The shortest run read as a request of its own (plan "runs"). A request
# of 1 MiB is one task of the pool; thousands of shorter ones cost a
# hand-off and a wake-up each.
RUN_MIN = 1 << 20
# The shortest run gathered (plan "gather"): a copy per run, against the
# span's extra bytes read at tens of GB/s.
GATHER_MIN = 512
# A one-run read from PIECE_MIN to PIECE_MAX bytes is cut into pieces of
# n / 32 (at least 1 MiB, at most 4 MiB) read at once. Measured on the
# H200 (bench/st_slice_bench.py's rows and whole): 8 MiB reads went from
# 8.5 to 12.9 GB/s in 1 MiB pieces, 64 MiB reads from 27 to 31 in 2 MiB
# pieces. Beyond PIECE_MAX one request's own tasks fill the pool.
PIECE_MIN = 1 << 20
PIECE_MAX = 128 << 20


def _pieces(n):
    """[(start, length)] of a one-run read of n bytes."""
    if n <= PIECE_MIN or n >= PIECE_MAX:
        return [(0, n)]
    piece = min(max(n // 32, 1 << 20), 4 << 20)
    return [(at, min(piece, n - at)) for at in range(0, n, piece)]


def _as_int(x):
    """x as an index int when it selects one element (an int, a NumPy
    integer, a 0-d integer array or tensor), else None. bool is not an int
    here: as an index it is a mask."""
    if isinstance(x, bool):
        return None
    if isinstance(x, int):
        return x
    if getattr(x, "ndim", None) != 0 or not hasattr(type(x), "__index__"):
        return None
    if "bool" in str(getattr(x, "dtype", "")):
        return None
    try:
        return operator.index(x)
    except TypeError:
        return None


def plan(index, shape, where):
    """([(start, count, step)] per dimension of the tensor, result shape)
    for a basic index, or None for any other (the caller reads the tensor
    whole and lets the framework index it). An int keeps count 1 and drops
    its dimension from the result; None adds a dimension of 1. Raises
    IndexError for an int out of bounds or too many indices (where names
    the file and the tensor)."""
    items = index if isinstance(index, tuple) else (index,)
    nd = len(shape)
    if sum(1 for x in items if x is Ellipsis) > 1:
        return None
    # Anything but ints, slices, None and Ellipsis is the framework's to
    # index, before the count below: a bool (a mask) selects no
    # dimension of the tensor, and [True] on a 0-d tensor gives shape
    # (1,) in NumPy and torch.
    if any(x is not None and x is not Ellipsis and not isinstance(x, slice)
           and _as_int(x) is None for x in items):
        return None
    used = sum(1 for x in items if x is not None and x is not Ellipsis)
    if used > nd:
        raise _errors.SliceError("%s: too many indices (%d) for a tensor of %d dimensions"
                         % (where, used, nd))
    dims, out, d = [], [], 0
    for x in items:
        if x is None:
            out.append(1)
        elif x is Ellipsis:
            for _ in range(nd - used):
                dims.append((0, shape[d], 1))
                out.append(shape[d])
                d += 1
        elif isinstance(x, slice):
            try:
                start, stop, step = x.indices(shape[d])
            except (TypeError, ValueError):  # a non-int bound, a zero step
                return None
            if step <= 0:
                return None
            count = max(0, (stop - start + step - 1) // step)
            dims.append((start, count, step))
            out.append(count)
            d += 1
        else:
            i = _as_int(x)
            if i is None:
                return None
            n = shape[d]
            if not -n <= i < n:
                raise _errors.SliceError("%s: index %d is out of bounds for dimension %d of "
                                 "size %d" % (where, i, d, n))
            dims.append((i + n if i < 0 else i, 1, 1))
            d += 1
    while d < nd:
        dims.append((0, shape[d], 1))
        out.append(shape[d])
        d += 1
    return dims, tuple(out)


def runs(dims, shape, itemsize=1, base=0):
    """(array('q') of the byte offset of each contiguous run, base plus
    its place in the tensor, in result order; bytes per run) of a plan's
    dims over a C-contiguous tensor of shape. Every count must be > 0.
    The last dimension that varies is laid out by range() into the array
    (thousands of rows per weight: no Python loop per run)."""
    st = [x * itemsize for x in _core._contiguous_strides(shape)]
    k = len(shape) - 1
    while k >= 0 and dims[k] == (0, shape[k], 1):
        k -= 1
    if k < 0:
        return array.array("q", [base]), (st[0] * shape[0]) if shape else itemsize
    start, count, step = dims[k]
    if step == 1:
        outer, length, first = dims[:k], count * st[k], base + start * st[k]
    else:
        outer, length, first = dims[:k + 1], st[k], base
    if not outer:
        return array.array("q", [first]), length
    last = len(outer) - 1
    s0, c0, p0 = outer[last]
    stride = p0 * st[last]
    heads = [first + s0 * st[last]]
    for d, (s, c, p) in enumerate(outer[:last]):
        heads = [o + (s + i * p) * st[d] for o in heads for i in range(c)]
    offs = array.array("q")
    for h in heads:
        offs.extend(range(h, h + c0 * stride, stride))
    return offs, length


def span(dims, shape):
    """(first, last) element offsets of a plan's selection."""
    st = _core._contiguous_strides(shape)
    first = sum(s * st[d] for d, (s, c, p) in enumerate(dims))
    last = sum((s + (c - 1) * p) * st[d] for d, (s, c, p) in enumerate(dims))
    return first, last


class _Reader:
    """Reads byte ranges of one tensor's data through the file's gpufile
    handle, checking each count: a file cut shorter after its header was
    read gives fewer bytes than asked, which is an error. Used only while
    the header is held (st from header.hold()): the handle is the C
    object's, freed with it."""

    def __init__(self, header, info, st):
        self.lib = _core._c()
        self.h = self.lib.gpufile_safetensors_handle(st)
        self.path = header.path
        self.info = info
        self.base = header.data_offset + info.begin

    def _short(self, got, n, off):
        return OSError(errno.EIO, "%s: tensor %r: read %d of %d bytes at file offset %d "
                       "(the file is shorter than its header says)"
                       % (self.path, self.info.name, got, n, off), self.path)

    def read(self, items):
        """Reads each (address, bytes, file offset) of items; several at
        once. Every request has ended when this returns or raises."""
        lib = self.lib
        if len(items) == 1:
            ptr, n, off = items[0]
            got = _lib.check(lib.gpufile_pread(self.h, ptr, n, off), filename=self.path)
            if got != n:
                raise self._short(got, n, off)
            return
        futs, first = [], None
        try:
            for ptr, n, off in items:
                f = ctypes.c_void_p()
                rc = lib.gpufile_pread_async(self.h, ptr, n, off, ctypes.byref(f))
                if rc < 0:
                    first = _lib.make_error(rc, filename=self.path)
                    break
                futs.append((f.value, n, off))
        finally:
            for f, n, off in futs:
                got = lib.gpufile_future_wait(f)
                if first is None and got < 0:
                    first = _lib.make_error(got, filename=self.path)
                elif first is None and got != n:
                    first = self._short(got, n, off)
                lib.gpufile_future_free(f)
        if first is not None:
            raise first

    def gather(self, ptr, run, offs):
        """Packs the runs of run bytes at file offsets offs (array('q'))
        into host memory at ptr (gpufile_pread_gather)."""
        addr = offs.buffer_info()[0]
        rc = self.lib.gpufile_pread_gather(self.h, ptr, run, len(offs),
                                           ctypes.cast(addr, ctypes.POINTER(ctypes.c_int64)))
        if rc < 0:  # the library's message names the file and the run
            e = _lib.make_error(rc, filename=self.path)
            e.strerror = "tensor %r: %s" % (self.info.name, e.strerror)
            raise e


class Staging:
    """A safe_open's pinned host buffers for gathered reads bound for a GPU,
    kept between slices (pinning memory costs more than the copy) and
    grown as needed. Two, used in turn: a slice gathers into one while the
    copy of the slice before it, from the other, may still run (torch
    queues it on the current stream; the result is ready in stream order,
    as with tensor.to(device, non_blocking=True)). A buffer is written
    again only after the event of its last copy. One slice at a time."""

    def __init__(self):
        self.lock = threading.Lock()
        self.slots = [[None, 0, 0, None], [None, 0, 0, None]]  # buf, ptr, size, event
        self.turn = 0

    def run(self, fw, nbytes, fill, out):
        """fill(address) packs nbytes into a pinned buffer, then they are
        copied into out (device memory)."""
        with self.lock:
            slot = self.slots[self.turn]
            self.turn ^= 1
            if slot[3] is not None:
                fw.wait(slot[3])
                slot[3] = None
            if slot[2] < nbytes:
                slot[0] = None  # the old one can go before the new is made
                size = max(1 << 20, 1 << (nbytes - 1).bit_length())
                slot[0], slot[1] = fw.pinned(size)
                slot[2] = size
            fill(slot[1])
            slot[3] = fw.from_pinned(out, slot[0], nbytes)

    def drop(self):
        with self.lock:
            for slot in self.slots:
                if slot[3] is not None:
                    slot[3].synchronize()
                slot[:] = [None, 0, 0, None]


class Slice:
    """One tensor of an open safe_open, read in parts: get_shape(),
    get_dtype() and [index] (see the module's text for what is read)."""

    def __init__(self, owner, info):
        self._owner = owner
        self._info = info
        self._where = "%s: tensor %r" % (owner._h.path, info.name)

    def get_shape(self):
        return list(self._info.shape)

    def get_dtype(self):
        return self._info.dtype

    def __repr__(self):
        return "<gpufile.safetensors slice %s %s>" % (self._where, self._info.dtype)

    def __getitem__(self, index):
        owner, info = self._owner, self._info
        owner._check_open()
        with _core_device(owner):
            p = plan(index, info.shape, self._where)
            if p is None or info.bits % 8:
                return self._whole(index)
            return self._read(*p)

    def _whole(self, index):
        fw = self._owner._fw
        full = self._owner.get_tensor(self._info.name)
        try:
            part = full[index]
        except (IndexError, ValueError, TypeError) as e:
            raise type(e)("%s: index %r: %s" % (self._where, index, e)) from None
        return fw.contiguous(part)

    def _read(self, dims, out_shape):
        owner, info = self._owner, self._info
        fw, dev, h = owner._fw, owner._device, owner._h
        if any(c == 0 for _, c, _ in dims):
            return fw.empty(out_shape, info, dev, h.path)
        # The whole read holds the file open: close() in another thread
        # waits for it (issue 32 item 1).
        with h.hold() as st:
            return self._read_held(_Reader(h, info, st), dims, out_shape)

    def _read_held(self, reader, dims, out_shape):
        owner, info = self._owner, self._info
        fw, dev, h = owner._fw, owner._device, owner._h
        isz = info.bits // 8
        offs, run = runs(dims, info.shape, isz, reader.base)
        if len(offs) == 1 or run >= RUN_MIN:
            out = fw.empty(out_shape, info, dev, h.path)
            base = fw.ptr(out)
            if len(offs) == 1:
                at = offs[0]
                reader.read([(base + p, n, at + p) for p, n in _pieces(run)])
            else:
                reader.read([(base + j * run, run, o) for j, o in enumerate(offs)])
            return out
        if run >= GATHER_MIN:
            return self._gather(reader, offs, run, out_shape)
        return self._span(reader, dims, out_shape)

    def _gather(self, reader, offs, run, out_shape):
        owner, info = self._owner, self._info
        fw, dev = owner._fw, owner._device
        if dev is None:
            out = fw.empty(out_shape, info, dev, owner._h.path)
            reader.gather(fw.ptr(out), run, offs)
            return out
        # Written by a copy on the current stream: no wait for it here.
        out = fw.empty(out_shape, info, dev, owner._h.path, sync=False)
        owner._staging.run(fw, run * len(offs),
                           lambda ptr: reader.gather(ptr, run, offs), out)
        return out

    def _span(self, reader, dims, out_shape):
        owner, info = self._owner, self._info
        fw, dev, h = owner._fw, owner._device, owner._h
        isz = info.bits // 8
        first, last = span(dims, info.shape)
        n = (last - first + 1) * isz
        file_off = h.data_offset + info.begin + first * isz
        buf = fw.alloc(n + _core._PAGE + 8, dev)
        # As load_group: the bytes land at an address congruent to their
        # file offset modulo a page, which O_DIRECT and cuFile need to move
        # them without a second bounce (and which keeps the dtype's
        # alignment wherever the file keeps it).
        at = (file_off - fw.ptr(buf)) % _core._PAGE
        reader.read([(fw.ptr(buf) + at + p, k, file_off + p) for p, k in _pieces(n)])
        flat = fw.view(buf, at, info._replace(shape=(last - first + 1,), begin=0,
                                              end=n), h.path)
        st = _core._contiguous_strides(info.shape)
        return fw.gather(flat, [c for _, c, _ in dims],
                         [p * st[d] for d, (_, _, p) in enumerate(dims)], out_shape)


def _core_device(owner):
    # The framework's current device is the safe_open's for the copies
    # and allocations a slice makes (the caller's is restored).
    return _core.on_device(owner._fw, owner._device)
