"""load_distributed: a safetensors checkpoint shared by the ranks of a
torch.distributed process group, every byte read from storage by exactly
one rank (issue 37).

    import torch.distributed as dist
    from gpufile.safetensors import load_distributed, Shard
    dist.init_process_group("nccl")            # or "gloo" for CPU tensors
    sd = load_distributed("model_dir", device="cuda:%d" % local_rank,
                          plan={"*.q_proj.weight": Shard(0),
                                "*.o_proj.weight": Shard(1)})
    sd.summary["read_once"]                    # True: each byte read once

How it works, in the order it runs:
  1. Headers: file k's header is parsed by rank k % world (through
     _core.Header: the library validates it), and the tables are shared
     with all_gather_object. Every rank then builds the same plan from the
     same tables, so every decision below is taken identically everywhere
     and a bad plan raises on every rank, before any data moves.
  2. Buckets: the data is cut into buckets of at most bucket_size bytes.
     A bucket of replicated tensors is one byte range of a file (many small
     tensors in one bucket, one broadcast for all of them); a bucket of a
     tensor sharded along dim d is a block of it whose part for each rank
     has (nearly) the same size, delivered by one scatter.
  3. Owners: the buckets, in file order, are split among the ranks by
     bytes (each rank reads a contiguous stretch of the checkpoint; a big
     file is shared by several ranks, a big tensor too).
  4. Steps: in step s every rank reads its s-th bucket (a thread reads
     ahead: bucket s+1 is read while bucket s is sent), the ranks agree
     with one all_reduce whether every read succeeded, then each rank's
     s-th bucket goes out: a broadcast straight from and into the result
     memory (replicated, unconverted: no staging copy anywhere), or a
     scatter of the owner's packed parts into each rank's shard.

Memory beyond the results: the staging of the buckets read ahead and not
yet sent, at most max_staging bytes (a single bucket larger than that
runs alone). A replicated bucket without dtype conversion needs none: it
is read into the result itself.

Faults: a read that fails on one rank is reported at the next agreement;
every rank then raises DistributedLoadError naming the rank and the file,
and no rank is left waiting in a collective. A rank that dies outright
leaves the others to torch.distributed's process-group timeout.
"""

import bisect
import collections
import ctypes
import errno
import fnmatch
import os
import threading
import time

from .. import _lib
from .._info import add_collective
from . import _core

__all__ = ["load_distributed", "Shard", "REPLICATE", "DistributedLoadError",
           "DistributedStateDict"]

REPLICATE = "replicate"
_ALIGN = 64      # dest offsets of converted tensors; staging congruence
_PAGE = 4096     # bucket edges of replicated runs fall on file pages


class Shard(collections.namedtuple("Shard", "dim")):
    """A plan entry: the tensor is split along dim among the ranks of the
    group as torch.tensor_split(t, world, dim) splits it (the first
    size % world ranks get one more row)."""

    __slots__ = ()


class DistributedLoadError(OSError):
    """One rank failed: raised on every rank of the group, naming the
    rank (.rank) and, for a read, the file (.filename)."""

    rank = None


class DistributedStateDict(dict):
    """{name: tensor} as load_distributed returns it, with .summary: the
    group's statistics (see load_distributed)."""

    summary = None


# ---- the plan ------------------------------------------------------------

def _spec(value, where):
    """None for a replicated tensor, else the dim (maybe negative)."""
    if value is None or value == REPLICATE:
        return None
    if isinstance(value, Shard):
        value = value.dim
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError("%s: plan value %r is not \"replicate\", None, Shard(dim) or an int "
                     "dim" % (where, value))


def _plan_entries(plan):
    """[(pattern, spec)] of a plan given as a dict or a list of pairs
    (first match wins), or a callable(name, shape) (returned as is)."""
    if plan is None:
        return []
    if callable(plan):
        return plan
    items = plan.items() if isinstance(plan, dict) else plan
    out = []
    for item in items:
        try:
            pattern, value = item
        except (TypeError, ValueError):
            raise ValueError("plan entry %r is not a (pattern, spec) pair" % (item,)) from None
        if not isinstance(pattern, str):
            raise TypeError("plan pattern %r is not a str" % (pattern,))
        out.append((pattern, _spec(value, "pattern %r" % pattern)))
    return out


def _shard_dim(entries, info, path):
    """The dim tensor info is sharded along (>= 0), or None."""
    if callable(entries):
        where = "%s: tensor %r: plan(%r, %r)" % (path, info.name, info.name, info.shape)
        d = _spec(entries(info.name, tuple(info.shape)), where)
    else:
        d, where = None, None
        for pattern, spec in entries:
            if fnmatch.fnmatchcase(info.name, pattern):
                d, where = spec, "%s: tensor %r (pattern %r)" % (path, info.name, pattern)
                break
    if d is None:
        return None
    nd = len(info.shape)
    if not -nd <= d < nd:
        raise ValueError("%s: cannot shard shape %s along dim %d"
                         % (where, list(info.shape), d))
    return d % nd


def _target_dtype(fw, info, path, dtype):
    """(source torch dtype, result torch dtype) of a tensor. dtype: None,
    a torch dtype (floating-point tensors become it, as Module.to(dtype)
    does), or {source dtype: result dtype}."""
    src = fw.dtype(info, path)
    if dtype is None:
        return src, src
    if isinstance(dtype, dict):
        dst = dtype.get(src, src)
    else:
        dst = dtype if src.is_floating_point else src
    if dst not in fw.names:
        raise ValueError("%s: tensor %r: cannot convert %s to %s (not a safetensors dtype)"
                         % (path, info.name, src, dst))
    return src, dst


class _Run:
    """Consecutive replicated tensors of one file, all converted or none
    (conv), held by every rank in one allocation (buf). Unconverted, the
    allocation mirrors the file (dest offset = file offset - rb), so a
    bucket is read straight into it; converted, the tensors lie packed at
    _ALIGN-aligned offsets and a bucket is read into staging first."""

    def __init__(self, fidx, infos, types, conv):
        self.fidx, self.infos, self.types, self.conv = fidx, infos, types, conv
        self.rb, self.re = infos[0].begin, infos[-1].end
        self.begins = [t.begin for t in infos]
        self.doffs, at = [], 0
        for t, (src, dst) in zip(infos, types):
            if conv:
                at = -(-at // _ALIGN) * _ALIGN
                self.doffs.append(at)
                at += t.nbytes // _itemsize(src) * _itemsize(dst)
            else:
                self.doffs.append(t.begin - self.rb)
                at = t.end - self.rb
        self.size = at
        self.buf = self.base = None
        self.shift = 0

    def dest(self, x):
        """The dest offset (from base) of file data offset x (a bucket
        edge: a tensor's element boundary, or the run's end)."""
        if not self.conv:
            return x - self.rb
        if x == self.re:
            return self.size
        i = bisect.bisect_right(self.begins, x) - 1
        while self.infos[i].end <= x:  # empty tensors share a begin
            i += 1
        t, (src, dst) = self.infos[i], self.types[i]
        return self.doffs[i] + (x - t.begin) // _itemsize(src) * _itemsize(dst)


class _Sharded:
    """A tensor split along dim among the ranks: every rank holds its part
    (shard, allocated whole). Viewed as (outer, D, inner), rank q's part is
    [:, lo[q]:hi[q], :]. With outer == 1 ("rows") a bucket is rows
    [j0, j1) of every rank's part (W ranges of the file); otherwise
    ("blocks") a bucket is outer blocks [o0, o1) (one range)."""

    def __init__(self, fidx, info, dim, src, dst, world):
        self.fidx, self.info, self.dim, self.src, self.dst = fidx, info, dim, src, dst
        shape = info.shape
        self.D = shape[dim]
        self.outer = _prod(shape[:dim])
        self.inner = _prod(shape[dim + 1:])
        base, extra = divmod(self.D, world)
        self.rows = [base + (q < extra) for q in range(world)]
        self.lo = [sum(self.rows[:q]) for q in range(world)]
        self.rows_mode = self.outer == 1
        self.shard = None

    def shard_shape(self, q):
        s = list(self.info.shape)
        s[self.dim] = self.rows[q]
        return tuple(s)


class _Bucket:
    __slots__ = ("kind", "fidx", "item", "a", "b", "nbytes", "cost", "owner", "step")

    def __init__(self, kind, fidx, item, a, b, nbytes, cost):
        self.kind, self.fidx, self.item, self.a, self.b = kind, fidx, item, a, b
        self.nbytes, self.cost = nbytes, cost
        self.owner = self.step = None

    def reads(self, world):
        """[(data offset, bytes)] this bucket reads, in staging order."""
        if self.kind == "rep":
            return [(self.a, self.b - self.a)]
        s = self.item
        isz = _itemsize(s.src)
        if s.rows_mode:
            row = s.inner * isz
            out = []
            for q in range(world):
                j1 = min(self.b, s.rows[q])
                if j1 > self.a:
                    out.append((s.info.begin + (s.lo[q] + self.a) * row, (j1 - self.a) * row))
            return out
        unit = s.D * s.inner * isz
        return [(s.info.begin + self.a * unit, (self.b - self.a) * unit)]

    def part_bytes(self, q):
        """The bytes (result dtype) of rank q's part of a sharded bucket."""
        s = self.item
        if s.rows_mode:
            n = max(0, min(self.b, s.rows[q]) - self.a)
            return n * s.inner * _itemsize(s.dst)
        return (self.b - self.a) * s.rows[q] * s.inner * _itemsize(s.dst)


_ISZ = {}


def _itemsize(dtype):
    n = _ISZ.get(dtype)
    if n is None:
        import torch
        n = _ISZ[dtype] = torch.empty((), dtype=dtype).element_size()
    return n


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def _cut_run(run, fidx, data_offset, eff, out):
    """Buckets of at most eff bytes over run: edges on file pages where
    they can be, and on element boundaries of a converted tensor."""
    pos = run.rb
    while pos < run.re:
        end = pos + eff
        if end >= run.re:
            end = run.re
        else:
            paged = end - (data_offset + end) % _PAGE
            if paged > pos:
                end = paged
            if run.conv:
                i = bisect.bisect_right(run.begins, end) - 1
                t, isz = run.infos[i], _itemsize(run.types[i][0])
                e2 = t.begin + (end - t.begin) // isz * isz
                end = e2 if e2 > pos else pos + isz
        n = end - pos
        out.append(_Bucket("rep", fidx, run, pos, end, n, n if run.conv else 0))
        pos = end


def _cut_sharded(s, eff, world, out):
    isz = _itemsize(s.src)
    ratio = _itemsize(s.dst) / isz
    if s.info.nbytes == 0:
        return
    if s.rows_mode:
        row = s.inner * isz
        nmax = max(s.rows)
        k = max(1, eff // max(1, row * world))
        for j0 in range(0, nmax, k):
            b = _Bucket("shard", s.fidx, s, j0, min(nmax, j0 + k), 0, 0)
            b.nbytes = sum(n for _, n in b.reads(world))
            b.cost = b.nbytes + int(world * b.part_bytes(0) * max(1.0, ratio))
            out.append(b)
        return
    unit = s.D * s.inner * isz
    k = max(1, eff // unit)
    for o0 in range(0, s.outer, k):
        o1 = min(s.outer, o0 + k)
        n = (o1 - o0) * unit
        b = _Bucket("shard", s.fidx, s, o0, o1, n, 0)
        b.cost = n + int(world * b.part_bytes(0) * max(1.0, ratio))
        out.append(b)


def _build_plan(fw, tables, entries, dtype, world, bucket_size):
    """(runs, sharded tensors, buckets in file order) from the shared
    tables. Pure: every rank computes the same plan."""
    runs, sharded, items = [], [], []
    for fidx, tab in enumerate(tables):
        path = tab["path"]
        cur, cur_types, cur_conv = [], [], None
        for info in tab["tensors"]:
            src, dst = _target_dtype(fw, info, path, dtype)
            dim = _shard_dim(entries, info, path)
            if dim is None:
                conv = src != dst
                if cur and conv != cur_conv:
                    items.append(_Run(fidx, cur, cur_types, cur_conv))
                    cur, cur_types = [], []
                cur.append(info)
                cur_types.append((src, dst))
                cur_conv = conv
                continue
            if cur:
                items.append(_Run(fidx, cur, cur_types, cur_conv))
                cur, cur_types = [], []
            items.append(_Sharded(fidx, info, dim, src, dst, world))
        if cur:
            items.append(_Run(fidx, cur, cur_types, cur_conv))
    total = sum(t["data_size"] for t in tables)
    # Small checkpoints still give every rank some reading.
    eff = max(1, min(bucket_size, max(_PAGE, -(-total // (4 * world)))))
    buckets = []
    for it in items:
        if isinstance(it, _Run):
            runs.append(it)
            _cut_run(it, it.fidx, tables[it.fidx]["data_offset"], eff, buckets)
        else:
            sharded.append(it)
            _cut_sharded(it, eff, world, buckets)
    # Owners: contiguous stretches balanced by bytes (midpoint rule).
    done, steps = 0, [0] * world
    for b in buckets:
        b.owner = min(world - 1, int(world * (done + b.nbytes / 2) / total)) if total else 0
        done += b.nbytes
        b.step = steps[b.owner]
        steps[b.owner] += 1
    return runs, sharded, buckets


# ---- the group -----------------------------------------------------------

class _Group:
    def __init__(self, dist, group, device):
        self.dist, self.group = dist, group
        self.rank = dist.get_rank(group)
        self.world = dist.get_world_size(group)
        world_group = group is None or group is dist.group.WORLD
        self.globals = [q if world_group else dist.get_global_rank(group, q)
                        for q in range(self.world)]
        self.device = device

    def all_gather_object(self, obj):
        out = [None] * self.world
        self.dist.all_gather_object(out, obj, group=self.group)
        return out

    def first_failure(self, failed):
        """The lowest rank whose flag is set, or None (one all_reduce)."""
        import torch
        flag = torch.tensor([self.rank if failed else self.world], dtype=torch.int64,
                            device=self.device)
        self.dist.all_reduce(flag, op=self.dist.ReduceOp.MIN, group=self.group)
        r = int(flag.item())
        return None if r >= self.world else r

    def share_from(self, rank, obj):
        box = [obj]
        self.dist.broadcast_object_list(box, src=self.globals[rank], group=self.group)
        return box[0]


def _raise_failure(g, rank, mine):
    """Every rank raises the failure of rank (its (errno, message, file))."""
    err, msg, filename = g.share_from(rank, mine)
    e = DistributedLoadError(err, msg, filename) if filename else DistributedLoadError(err, msg)
    e.rank = rank
    raise e


def _failure(rank, exc, what):
    err = getattr(exc, "errno", None) or errno.EIO
    filename = getattr(exc, "filename", None)
    detail = getattr(exc, "strerror", None) if isinstance(exc, OSError) else None
    detail = detail or str(exc) or type(exc).__name__
    return (err, "rank %d: %s: %s" % (rank, what, detail), filename)


def _read_headers(g, files, fingerprint, failed=None):
    """The tables of every file, each header parsed by one rank. failed:
    this rank's failure to find the files (a folder or index that one node
    lacks), raised on every rank as a header's would be."""
    mine = {}
    for k, path in enumerate(files if failed is None else ()):
        if k % g.world != g.rank:
            continue
        try:
            with _core.Header(path) as h:
                mine[k] = {"path": h.path, "data_offset": h.data_offset,
                           "data_size": h.data_size, "metadata": h.metadata,
                           "tensors": [tuple(t) for t in h.tensors]}
        except Exception as e:  # noqa: BLE001 - carried to every rank
            shown = _lib.shown_name(os.fsdecode(path))
            failed = _failure(g.rank, e, "reading the header of %s" % shown)
            failed = (failed[0], failed[1], failed[2] or shown)
            break
    got = g.all_gather_object((fingerprint, failed, mine))
    for q, (_, f, _) in enumerate(got):
        if f is not None:
            e = DistributedLoadError(f[0], f[1], f[2])
            e.rank = q
            raise e
    for q, (fp, _, _) in enumerate(got):
        if fp != fingerprint:
            (key, there), (_, here) = next(
                (a, b) for a, b in zip(fp, fingerprint) if a != b)
            raise ValueError("load_distributed: rank %d was called with other arguments "
                             "than rank %d: %s %s there, %s here"
                             % (q, g.rank, key, there, here))
    tables = [None] * len(files)
    for _, _, part in got:
        for k, tab in part.items():
            tab["tensors"] = [_core.TensorInfo(*t) for t in tab["tensors"]]
            tables[k] = tab
    return tables


def _check_names(tables, index, folder, where):
    owner = {}
    for tab in tables:
        for t in tab["tensors"]:
            if t.name in owner:
                raise ValueError("tensor %r is in both %s and %s"
                                 % (t.name, owner[t.name], tab["path"]))
            owner[t.name] = tab["path"]
    if index is not None:
        for name, shard in index["weight_map"].items():
            p = _lib.shown_name(_core.shard_path(folder, shard))
            if owner.get(name) != p:
                raise ValueError("%s: weight_map puts tensor %r in %s, which has no such "
                                 "tensor" % (where, name, p))


def _resolve(checkpoint):
    """(index or None, folder, [files]) of files, a folder or an index."""
    if isinstance(checkpoint, (list, tuple)):
        files = [os.fsdecode(p) for p in checkpoint]
        if not files:
            raise ValueError("load_distributed: an empty list of files")
        return None, None, files
    return _core.checkpoint_files(checkpoint)


# ---- reading -------------------------------------------------------------

def _pread_start(f, ptr, n, off):
    """Starts reading n bytes at file offset off of gpufile.File f into
    address ptr (host or device); returns wait(), to be called once: it
    returns when the bytes are in place and raises OSError for a failed or
    short read. A layer tests replace to make one rank's read fail."""
    lib = _lib.lib()
    fut = ctypes.c_void_p()
    _lib.check(f._call(lib.gpufile_pread_async, ctypes.c_void_p(ptr), n, off,
                       ctypes.byref(fut)), filename=f.name)

    def wait():
        got = lib.gpufile_future_wait(fut.value)
        lib.gpufile_future_free(fut.value)
        if got < 0:
            raise _lib.make_error(got, filename=f.name)
        if got != n:
            raise OSError(errno.EIO, "read %d of %d bytes at file offset %d (the file is "
                          "shorter than its header says)" % (got, n, off), f.name)
    return wait


def _wait_all(waiters):
    """Waits for every read of waiters; returns the first error, or None."""
    first = None
    for w in waiters:
        try:
            w()
        except Exception as e:  # noqa: BLE001 - returned
            if first is None:
                first = e
    return first


# Buckets read straight into the results whose reads are in flight at
# once: one 64 MiB request after another left the pool idle between them
# (one H200, one rank, 4 GiB warm: 0.155 s in 64 MiB buckets read in turn
# against 0.081 s for load_file's one request).
_READ_AHEAD = 4


class _Budget:
    """Staging bytes in use, at most limit (one bucket alone may exceed
    it). The reader thread acquires before reading a bucket; the main
    thread releases once the bucket is sent."""

    def __init__(self, limit):
        self.limit, self.used, self.peak = limit, 0, 0
        self.cond = threading.Condition()
        self.cancelled = False

    def acquire(self, n):
        with self.cond:
            while (not self.cancelled and self.used and self.used + n > self.limit):
                self.cond.wait()
            self.used += n
            self.peak = max(self.peak, self.used)
            return not self.cancelled

    def release(self, n):
        with self.cond:
            self.used -= n
            self.cond.notify_all()

    def cancel(self):
        with self.cond:
            self.cancelled = True
            self.cond.notify_all()


class _Reader:
    """The thread that reads this rank's buckets in order, ahead of the
    sends, and packs them (conversion, the parts of a scatter). Results go
    to slots[step]: ("ok", parts or None) or ("error", failure)."""

    def __init__(self, ctx, mine):
        self.ctx, self.mine = ctx, mine
        self.slots = {}
        self.cond = threading.Condition()
        self.files = {}
        self.ranges = []
        self.thread = threading.Thread(target=self._run, name="gpufile-dist-reader",
                                       daemon=True)

    def _file(self, fidx):
        f = self.files.get(fidx)
        if f is None:
            from .._file import File
            f = self.files[fidx] = File(self.ctx.files[fidx], "r")
        return f

    def _run(self):
        ctx = self.ctx
        if ctx.device is not None:
            ctx.torch.cuda.set_device(ctx.device)
        inflight = collections.deque()  # (bucket, waiters), in order
        try:
            for b in self.mine:
                if b.kind == "rep" and not b.item.conv:  # no staging: no budget
                    run = b.item
                    try:
                        waiters = self._start(b, lambda off, at: run.base + run.dest(off))
                    except Exception as e:  # noqa: BLE001 - agreed on by every rank
                        if self._complete(inflight):
                            self._post(b, self._error(b, e))
                        return
                    inflight.append((b, waiters))
                    if ctx.budget.cancelled or not self._complete(inflight, keep=_READ_AHEAD):
                        return
                    continue
                # Every bucket before b is posted before b waits for the
                # budget, which only the sending of posted buckets frees.
                if not self._complete(inflight) or not ctx.budget.acquire(b.cost):
                    return
                try:
                    res = ("ok", self._staged(b))
                except Exception as e:  # noqa: BLE001 - agreed on by every rank
                    res = self._error(b, e)
                self._post(b, res)
                if res[0] == "error":
                    return
            self._complete(inflight)
        finally:
            while inflight:  # no read may go on into memory after we leave
                _wait_all(inflight.popleft()[1])

    def _complete(self, inflight, keep=0):
        """Waits for the oldest reads in flight until keep are left, posting
        each bucket; at a failure, posts it, waits for the rest without
        posting them and returns False."""
        while len(inflight) > keep:
            b, waiters = inflight.popleft()
            err = _wait_all(waiters)
            if err is not None:
                self._post(b, self._error(b, err))
                while inflight:
                    _wait_all(inflight.popleft()[1])
                return False
            self._post(b, ("ok", None))
        return True

    def _error(self, b, exc):
        ctx = self.ctx
        path = ctx.tables[b.fidx]["path"]
        what = "reading %s (%d bytes from data offset %d)" % (
            path, b.nbytes, b.reads(ctx.g.world)[0][0])
        err, msg, filename = _failure(ctx.g.rank, exc, what)
        return ("error", (err, msg, filename or path))

    def _post(self, b, res):
        with self.cond:
            self.slots[b.step] = res
            self.cond.notify_all()

    def wait(self, step):
        with self.cond:
            while step not in self.slots:
                self.cond.wait()
            return self.slots.pop(step)

    def _start(self, b, ptr_of):
        """Starts the reads of bucket b; returns their waiters (on a
        failure to start one, waits for those started, then raises)."""
        f = self._file(b.fidx)
        doff = self.ctx.tables[b.fidx]["data_offset"]
        at, waiters = 0, []
        try:
            for off, n in b.reads(self.ctx.g.world):
                if n:
                    waiters.append(_pread_start(f, ptr_of(off, at), n, doff + off))
                    self.ranges.append((b.fidx, off, n))
                at += n
        except BaseException:
            _wait_all(waiters)
            raise
        return waiters

    def _staging(self, b):
        """A uint8 staging tensor of b.nbytes whose address is congruent to
        the first file offset modulo _ALIGN (tensors keep their alignment)."""
        t = self.ctx.torch
        first = self.ctx.tables[b.fidx]["data_offset"] + b.reads(self.ctx.g.world)[0][0]
        raw = t.empty(b.nbytes + 2 * _ALIGN, dtype=t.uint8, device=self.ctx.tdevice)
        _settle(self.ctx)
        shift = (first - raw.data_ptr()) % _ALIGN
        return raw[shift:shift + b.nbytes]

    def _staged(self, b):
        """Reads bucket b into staging, then converts it into the results
        (replicated) or packs the parts of its scatter (returned)."""
        st = self._staging(b)
        base = st.data_ptr()
        err = _wait_all(self._start(b, lambda off, at: base + at))
        if err is not None:
            raise err
        if b.kind == "rep":
            self._convert_run(b, st)
            return None
        return self._pack(b, st)

    def _convert_run(self, b, st):
        run = b.item
        for i, info in enumerate(run.infos):
            lo, hi = max(b.a, info.begin), min(b.b, info.end)
            if hi <= lo:
                continue
            src, dst = run.types[i]
            isz, osz = _itemsize(src), _itemsize(dst)
            piece = _typed(st[lo - b.a:hi - b.a], src)
            d0 = run.doffs[i] + (lo - info.begin) // isz * osz
            d1 = run.doffs[i] + (hi - info.begin) // isz * osz
            run.buf[run.shift + d0:run.shift + d1].view(dst).copy_(piece)

    def _pack(self, b, st):
        """The parts of a scatter, uint8, padded to the largest."""
        t, s, world = self.ctx.torch, b.item, self.ctx.g.world
        parts = []
        if s.rows_mode:
            at = 0
            for q in range(world):
                n = max(0, min(b.b, s.rows[q]) - b.a) * s.inner * _itemsize(s.src)
                parts.append(_typed(st[at:at + n], s.src))
                at += n
        else:
            blocks = _typed(st, s.src).view(b.b - b.a, s.D, s.inner)
            for q in range(world):
                parts.append(blocks[:, s.lo[q]:s.lo[q] + s.rows[q], :])
        size = max(b.part_bytes(q) for q in range(world))
        out = []
        for p in parts:
            p = p.to(s.dst).contiguous().reshape(-1).view(t.uint8)
            if p.numel() != size:
                padded = t.zeros(size, dtype=t.uint8, device=p.device)
                padded[:p.numel()].copy_(p)
                p = padded
            out.append(p)
        return out


def _typed(raw, dtype):
    """uint8 tensor raw seen as dtype (a copy when its address does not
    suit the dtype: a tensor misaligned in its file)."""
    isz = _itemsize(dtype)
    if raw.data_ptr() % isz:
        raw = raw.clone()
    return raw.view(dtype)


# ---- the sends -----------------------------------------------------------

class _Ctx:
    pass


def _send(ctx, b, parts, stats):
    """Starts the collective of bucket b (owned by b.owner), on every rank;
    returns (work, finish, moved): finish() after work.wait() puts a padded
    scatter part in place; moved is (bytes received, bytes sent) by this
    rank, credited to the process's gpufile counters once the work ends.
    The collectives of one step are started together, so that the owners'
    sends overlap."""
    g, dist, t = ctx.g, ctx.dist, ctx.torch
    src = g.globals[b.owner]
    if b.kind == "rep":
        run = b.item
        d0, d1 = run.dest(b.a), run.dest(b.b)
        msg = run.buf[run.shift + d0:run.shift + d1]
        work = dist.broadcast(msg, src=src, group=g.group, async_op=True)
        stats["broadcasts"] += 1
        if g.rank == b.owner:
            moved = (0, msg.numel() * (g.world - 1))
        else:
            moved = (msg.numel(), 0)
        stats["collective_recv_bytes"] += moved[0]
        stats["collective_sent_bytes"] += moved[1]
        return work, None, moved
    s = b.item
    size = max(b.part_bytes(q) for q in range(g.world))
    mine = b.part_bytes(g.rank)
    if s.rows_mode:
        dest = s.shard[b.a:b.a + max(0, min(b.b, s.rows[g.rank]) - b.a)]
    else:
        dest = s.shard.view(s.outer, s.rows[g.rank], s.inner)[b.a:b.b]
    dest = dest.reshape(-1).view(t.uint8)
    out = dest if mine == size else t.empty(size, dtype=t.uint8, device=ctx.tdevice)
    work = dist.scatter(out, scatter_list=parts if g.rank == b.owner else None, src=src,
                        group=g.group, async_op=True)

    def finish():
        if out is not dest and mine:
            dest.copy_(out[:mine])
    stats["scatters"] += 1
    if g.rank == b.owner:
        moved = (0, size * (g.world - 1))
    else:
        moved = (size, 0)
    stats["collective_recv_bytes"] += moved[0]
    stats["collective_sent_bytes"] += moved[1]
    return work, finish, moved


def _storage_counters():
    from .._info import stats
    return {p: c["bytes"] for p, c in stats()["gpufile"]["read"].items()}


def _allocate(ctx, runs, sharded):
    t = ctx.torch
    for run in runs:
        n = run.size + _PAGE + _ALIGN
        run.buf = t.empty((n + 7) & ~7, dtype=t.uint8, device=ctx.tdevice)
        ptr = run.buf.data_ptr()
        if run.conv:
            run.shift = (-ptr) % _ALIGN
        else:  # dest congruent to the file offset modulo a page
            want = (ctx.tables[run.fidx]["data_offset"] + run.rb) % _PAGE
            run.shift = (want - ptr) % _PAGE
        run.base = ptr + run.shift
    for s in sharded:
        s.shard = t.empty(s.shard_shape(ctx.g.rank), dtype=s.dst, device=ctx.tdevice)
    _settle(ctx)


def _settle(ctx):
    """After allocating device memory that gpufile writes (on streams of
    its own): the caching allocator may hand out memory that kernels
    queued on the current stream still use (as _core's alloc() says)."""
    if ctx.device is not None:
        ctx.torch.cuda.current_stream(ctx.tdevice).synchronize()


def _results(ctx, runs, sharded):
    fw = ctx.fw
    out = DistributedStateDict()
    named = {}
    for run in runs:
        infos, offs = [], []
        for info, (src, dst), doff in zip(run.infos, run.types, run.doffs):
            n = info.nbytes // _itemsize(src) * _itemsize(dst)
            infos.append(info._replace(dtype=fw.names[dst], begin=0, end=n))
            offs.append(run.shift + doff)
        named.update(fw.views(run.buf, run.buf.data_ptr(), infos, offs,
                              ctx.tables[run.fidx]["path"]))
    for s in sharded:
        named[s.info.name] = s.shard
    for tab in ctx.tables:  # file order, then offset order
        for info in tab["tensors"]:
            out[info.name] = named[info.name]
    return out


def _tile_check(tables, ranges):
    """Whether ranges [(file, offset, n)] cover each file's data exactly
    once."""
    per = collections.defaultdict(list)
    for fidx, off, n in ranges:
        per[fidx].append((off, n))
    for fidx, tab in enumerate(tables):
        at = 0
        for off, n in sorted(per.get(fidx, ())):
            if off != at:
                return False
            at += n
        if at != tab["data_size"]:
            return False
    return True


def load_distributed(checkpoint, group=None, device=None, plan=None, dtype=None,
                     bucket_size=64 << 20, max_staging=256 << 20):
    """Loads a safetensors checkpoint on every rank of a torch.distributed
    process group, each byte read from storage by one rank only and
    delivered to the others by collectives. Call it on every rank of the
    group with the same arguments (device aside).

    checkpoint: a .safetensors file (path or URL), a list of them, a folder,
    or a model.safetensors.index.json. group: the process group (default:
    the world). device: this rank's device ("cuda:N", an int,
    torch.device, "cpu"; default: the current CUDA device under NCCL,
    else "cpu"). plan: which tensors are split among the ranks:
    {pattern: spec} or [(pattern, spec)] (fnmatch patterns on names,
    first match wins) or a callable(name, shape) -> spec; spec is
    "replicate" (or None) or Shard(dim) (or an int dim): rank q gets
    torch.tensor_split(tensor, world, dim)[q]. Unmatched: replicated.
    dtype: a torch dtype the floating-point tensors are converted to (on
    the device, by the rank that read them), or {from dtype: to dtype}.
    bucket_size: the most bytes one collective carries (small replicated
    tensors share a bucket). max_staging: the most staging memory held
    beyond the results (read ahead, converted, packed for a scatter).

    Returns a DistributedStateDict ({name: tensor}, file order) whose
    .summary holds, for the group: "data_bytes" and "header_bytes" of the
    checkpoint, "data_bytes_read" (the sum over ranks), "storage_bytes_read"
    (the sum of every rank's gpufile read counters over the call: headers
    and data), "read_once" (the ranges read tile every file's data exactly
    and the storage counters add up to data + headers: each byte read once;
    other gpufile reads in these processes during the call would make it
    False), "seconds", and "ranks": per rank "data_bytes_read",
    "header_bytes_read", "storage_read" ({path: bytes}: host, posix,
    cufile, remote...), "collective_recv_bytes", "collective_sent_bytes",
    "broadcasts", "scatters", "buckets", "staging_peak".

    Raises DistributedLoadError (an OSError with .rank) on every rank when
    one rank fails to read a header or data, naming the rank and file;
    ValueError on every rank for a plan or dtype that does not fit a
    tensor, or arguments that differ between ranks."""
    import torch
    import torch.distributed as dist

    t0 = time.perf_counter()
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("load_distributed: torch.distributed has no process group; "
                           "call torch.distributed.init_process_group() first")
    for name, v in (("bucket_size", bucket_size), ("max_staging", max_staging)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError("load_distributed: %s must be a positive int, not %r" % (name, v))
    backend = dist.get_backend(group)
    if device is None:
        device = "cuda" if backend == "nccl" else "cpu"
    dev = _core._parse_cuda_device(device, "load_distributed")
    entries = _plan_entries(plan)
    failed = None
    try:
        index, folder, files = _resolve(checkpoint)
    except (OSError, ValueError) as e:  # raised on every rank below
        index = folder = None
        files = []
        failed = _failure(dist.get_rank(group), e, "finding the files of %r" % (checkpoint,))
    fingerprint = (("files", tuple(_lib.shown_name(p) for p in files)),
                   ("bucket_size", bucket_size), ("max_staging", max_staging),
                   ("dtype", repr(dtype)),
                   ("plan", "a callable" if callable(entries) else repr(entries)))
    ctx = _Ctx()
    ctx.torch, ctx.dist, ctx.files, ctx.device = torch, dist, files, dev
    ctx.max_staging = max_staging
    ctx.tdevice = torch.device("cpu") if dev is None else torch.device("cuda", dev)
    ctx.fw = _core.framework("pt")
    cuda_scope = torch.cuda.device(dev) if dev is not None else _nullcontext()
    with cuda_scope:
        g = ctx.g = _Group(dist, group, ctx.tdevice)
        before = _storage_counters()
        ctx.tables = _read_headers(g, files, fingerprint, failed)
        _check_names(ctx.tables, index, folder, checkpoint)
        runs, sharded, buckets = _build_plan(ctx.fw, ctx.tables, entries, dtype, g.world,
                                             bucket_size)
        _allocate(ctx, runs, sharded)
        stats = _run_steps(ctx, buckets)
        after = _storage_counters()
        stats["storage_read"] = {p: after[p] - before.get(p, 0) for p in after
                                 if after[p] != before.get(p, 0)}
        out = _results(ctx, runs, sharded)
        out.summary = _summary(ctx, stats, time.perf_counter() - t0)
    return out


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _run_steps(ctx, buckets):
    g = ctx.g
    mine = [b for b in buckets if b.owner == g.rank]
    by_step = collections.defaultdict(list)
    for b in buckets:
        by_step[b.step].append(b)
    ctx.budget = _Budget(ctx.max_staging)
    reader = _Reader(ctx, mine)
    stats = {"rank": g.rank, "buckets": len(mine), "broadcasts": 0, "scatters": 0,
             "collective_recv_bytes": 0, "collective_sent_bytes": 0}
    reader.thread.start()
    try:
        for step in sorted(by_step):
            res = reader.wait(step) if step < len(mine) else ("ok", None)
            failed = g.first_failure(res[0] == "error")
            if failed is not None:
                _raise_failure(g, failed, res[1] if failed == g.rank else None)
            started = [(b, _send(ctx, b, res[1] if b.owner == g.rank else None, stats))
                       for b in sorted(by_step[step], key=lambda b: b.owner)]
            for b, (work, finish, moved) in started:
                work.wait()
                # Live in gpufile stats PID of this rank, beside its reads.
                add_collective(*moved)
                if finish is not None:
                    finish()
                if b.owner == g.rank:
                    ctx.budget.release(b.cost)
            res = started = None
    finally:
        ctx.budget.cancel()
        reader.thread.join()
        for f in reader.files.values():
            f.close()
    stats["data_bytes_read"] = sum(n for _, _, n in reader.ranges)
    stats["ranges"] = reader.ranges
    stats["staging_peak"] = ctx.budget.peak
    return stats


def _summary(ctx, stats, seconds):
    g = ctx.g
    stats["header_bytes_read"] = sum(tab["data_offset"] for k, tab in enumerate(ctx.tables)
                                     if k % g.world == g.rank)
    ranks = g.all_gather_object(stats)
    ranges = [r for s in ranks for r in s.pop("ranges")]
    data = sum(tab["data_size"] for tab in ctx.tables)
    headers = sum(tab["data_offset"] for tab in ctx.tables)
    storage = sum(sum(s["storage_read"].values()) for s in ranks)
    read = sum(s["data_bytes_read"] for s in ranks)
    return {"world_size": g.world, "files": len(ctx.tables),
            "tensors": sum(len(tab["tensors"]) for tab in ctx.tables),
            "data_bytes": data, "header_bytes": headers, "data_bytes_read": read,
            "storage_bytes_read": storage,
            "read_once": _tile_check(ctx.tables, ranges) and read == data
            and storage == data + headers,
            "seconds": seconds, "ranks": ranks}
