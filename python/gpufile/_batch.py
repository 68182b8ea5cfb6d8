"""Batches of small reads (gpufile_batch_*): many (file, buffer, size,
offset) reads at once, host or device buffers, any mix of files.

    counts = gpufile.batch_read([(f, buf, 4096, 0), (g, arr, None, 8192)])

    b = gpufile.BatchRead(entries)   # submitted at once
    b.poll()                         # entries done so far
    counts = b.wait()                # or b.wait(timeout=1.5)
"""

import array
import ctypes
import os
import threading
import time
from ctypes import POINTER, c_char_p, c_int, c_int64, c_long, c_size_t, c_ssize_t, c_uint, c_void_p

from . import _args, _buffers, _lib
from ._owned import Owned, Owner


class _Entry(ctypes.Structure):
    # gpufile_batch_entry_t
    _fields_ = [("file", c_void_p), ("buf", c_void_p), ("size", c_size_t),
                ("offset", c_int64)]


_DECLS = {
    "gpufile_batch_create": (c_int, [POINTER(c_void_p), c_uint]),
    "gpufile_batch_submit": (c_int, [c_void_p, POINTER(_Entry), c_uint]),
    "gpufile_batch_poll": (c_int, [c_void_p]),
    "gpufile_batch_wait": (c_int, [c_void_p, c_long]),
    "gpufile_batch_result": (c_ssize_t, [c_void_p, c_uint]),
    "gpufile_batch_errmsg": (c_char_p, [c_void_p, c_uint]),
    "gpufile_batch_free": (None, [c_void_p]),
    "gpufile_config_get": (c_int, [c_char_p, c_char_p, c_size_t, POINTER(c_int),
                                   c_char_p, c_size_t]),
}

_EINPROGRESS = 115
_ETIMEDOUT = 110


_fns = {}


def _fn(name):
    """The C function with its prototype, looked up once: _collect asks
    for gpufile_batch_result once per entry."""
    f = _fns.get(name)
    if f is None:
        f = _fns[name] = _lib.fn(name, _DECLS)
    return f


# C batches kept between BatchReads. A C batch starts its worker threads
# (a worker per chunk of its entries, up to nthreads) at a submit and
# ends them, with their io_uring rings, in gpufile_batch_free: 1.5-5 ms of
# a one-chunk batch on the 2-core VM, where reading its 1 MiB chunk takes
# 0.1-0.5 ms (a Zarr selection of one chunk ran at 0.08x DirectoryStore).
# A batch of _KEEP_CAPACITY entries or fewer, once no entry of it is in
# flight, goes back here instead, for the next BatchRead of as many
# entries or fewer made while nthreads is the same (its workers were
# allocated for that count). At most _IDLE_MAX wait, each holding its
# workers asleep, their io_uring rings (a descriptor each) and, after
# device entries, their pinned slots; a larger batch is freed (its start
# is a small part of its read). A batch kept under another nthreads is
# freed at the next _take.
#
# The pool's lock is an RLock, only ever taken by `with` (a C lock's
# entry runs no signal handler between the acquire and the block: an
# exception a handler raised (Ctrl-C) after acquire(blocking=False), as
# the pool first took it, left it held for ever and every later read
# waiting for it). A finaliser may run inside the block (the collector
# ends a BatchRead inside any allocation) and give a batch back: the
# same thread takes the lock again, and _take only removes what it
# takes, so what such a finaliser appends stays. Nothing under the lock
# calls the library or waits. An exception landing just as a batch moves
# between the pool and a BatchRead may still leak that one batch (its
# workers asleep), never hang a read.
# A forked child keeps the list: the library makes a batch the child's
# own at its next call (its workers were the parent's; the child's first
# submit starts new ones).
_IDLE_MAX = 2
_IDLE_MIN_CAPACITY = 64
_KEEP_CAPACITY = 4096
_idle = []  # [(capacity, nthreads, C batch)]
_idle_lock = threading.RLock()


def _nthreads():
    """The nthreads setting now, as the library's text."""
    value = ctypes.create_string_buffer(32)
    rc = _fn("gpufile_config_get")(b"nthreads", value, len(value), None,
                                   None, 0)
    return value.value if rc == 0 else None


def _take(n):
    """(C batch, capacity, nthreads): a kept one of capacity n or more made
    at the same nthreads (the smallest such), or a new one."""
    threads = _nthreads()
    found, stale = None, []
    with _idle_lock:
        # A finaliser run by an allocation here may take (_take) or give
        # back (_give_back) on this thread: only what is still there is
        # removed.
        for item in list(_idle):
            if item[1] != threads:
                if item in _idle:
                    _idle.remove(item)
                    stale.append(item[2])
            elif item[0] >= n and (found is None or item[0] < found[0]):
                found = item
        if found is not None:
            if found in _idle:
                _idle.remove(found)
            else:
                found = None
    free = _fn("gpufile_batch_free")
    for c in stale:
        free(c)
    if found is not None:
        return found[2], found[0], threads
    cap = max(n, 1)
    if n <= _KEEP_CAPACITY:
        cap = _IDLE_MIN_CAPACITY
        while cap < n:
            cap *= 2
    out = c_void_p()
    _lib.check(_fn("gpufile_batch_create")(ctypes.byref(out), cap))
    return out.value, cap, threads


def _give_back(c, cap, threads):
    """Keeps the C batch c for a later BatchRead, or frees it. c may have
    entries in flight (a submit interrupted after the library took it):
    the wait makes it complete, as a free would."""
    if _fn("gpufile_batch_wait")(c, -1) >= 0 and threads is not None and \
            cap <= _KEEP_CAPACITY:
        with _idle_lock:
            if len(_idle) < _IDLE_MAX:
                _idle.append((cap, threads, c))
                return
    _fn("gpufile_batch_free")(c)


def _drop_idle():
    """Frees the kept C batches (their workers end)."""
    with _idle_lock:
        kept = [c for _, _, c in _idle]
        del _idle[:]
    for c in kept:
        _fn("gpufile_batch_free")(c)


def _after_fork_in_child():
    """The lock may have been held by a thread the child does not have."""
    global _idle_lock
    _idle_lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class BatchRead(Owner):
    """A batch of reads, submitted when made. entries: an iterable of
    (file, buf, size, offset) with file an open gpufile.File, buf a host
    object with the buffer protocol or a device array
    (__cuda_array_interface__), size None for all of buf. Every entry is
    checked before anything is read; a bad one raises naming its index.
    The buffers stay alive until the batch is complete; a file may be
    closed meanwhile, from any thread (close() waits for its entries).

    The batch may be waited for, polled and freed from any thread, at the
    same time: the library uses a batch "by one thread at a time"
    (gpufile.h), so the C batch is an Owned (_owned.py) whose calls are all
    exclusive, freed once, by whichever wait() (or the with-block's end,
    or the finaliser) gets there first. A wait() while another thread
    waits waits for it (its timeout counting that time too); poll() while
    another thread waits does not block: it returns the count the last
    poll saw.

    As a context manager, the batch is complete and freed at the end of
    the block; wait() and results() still give its outcome afterwards. A
    block that ends without an exception and without a wait() or
    results() raises the error of the first entry that failed, so that a
    failed read is never dropped unseen; a batch dropped without either
    warns (RuntimeWarning) with that error."""

    def __init__(self, entries, _rows=None):
        """_rows (the integrations' own form, _ranges): a list of (File,
        pointer, size, offset) rows their caller made and checked itself,
        and keeps the memory of alive until the batch is complete (new
        bytes objects, parts of a NumPy result); entries is then what
        holds that memory, kept as the buffers are."""
        from ._file import File
        self._c = None
        self._submitted = False
        self._results = None  # each entry's result, kept once complete
        self._msgs = {}  # index -> the library's message, for failed ones
        self._reported = False  # wait() or results() gave the outcome
        self._polled = 0  # what the last poll() saw
        self._bufs = []
        self._files = []
        self._keep = None
        # The handles are entered only until the submit has returned:
        # from then on gpufile_close() waits for the batch's entries (its
        # contract in gpufile.h), as for a Future, and the C batch does
        # not touch a handle once its entries have ended. (Held until the
        # batch ended, they were left by whichever thread waited, which
        # Owned counts per thread: KeyError, and a file never closed.)
        held = {}  # id(Owned) -> Owned: one look-up per entry (a scan of
        # a list was quadratic: 2,048 files, 2 million comparisons)
        try:
            if _rows is None:
                flat = self._check(list(entries), held, File)
            else:
                self._keep = entries
                flat = self._rows(_rows, held)
            self._submit(flat)
        except BaseException:
            self._end()
            raise
        finally:
            for h, _f in held.values():
                h.leave()

    @staticmethod
    def _enter(f, held, i):
        """f's handle, entered once per batch (a closed File raises)."""
        h = f._h
        if id(h) not in held:
            if f.closed:
                raise ValueError("batch entry %d: %r is closed" % (i, f.name))
            h.enter()
            # With its File: the handle is entered until the submit has
            # returned, and the File alone (from a generator of entries)
            # was let go before, its finaliser freeing the handle the
            # submit then used (Owned's rule 4).
            held[id(h)] = (h, f)
        return h.ptr

    def _check(self, entries, held, File):
        """Checks every (file, buf, size, offset) entry, naming the first
        bad one; returns the C entries as a flat list of integers (file,
        buf, size, offset each). The checks of one entry are a few
        comparisons when its values are plain ints in range; anything else
        goes through _buffers.check_range for its words."""
        self.n = len(entries)
        flat = [0] * (4 * self.n)
        bufs, files = self._bufs, self._files
        as_buffer, Buffer = _buffers.as_buffer, _buffers.Buffer
        for i, ent in enumerate(entries):
            try:
                f, buf, size, offset = ent
            except (TypeError, ValueError):
                raise TypeError("batch entry %d: expected (file, buf, size, "
                                "offset), got %r" % (i, ent)) from None
            if not isinstance(f, File):
                raise TypeError("batch entry %d: file must be a gpufile.File, "
                                "not %s" % (i, type(f).__name__))
            if f.closed:
                raise ValueError("batch entry %d: %r is closed" % (i, f.name))
            b = buf if type(buf) is Buffer else \
                as_buffer(buf, True, "batch entry %d" % i)
            bufs.append(b)
            if size is None:
                size = b.nbytes
            if not (type(size) is int and type(offset) is int and
                    0 <= size <= b.nbytes and 0 <= offset and
                    size + offset <= _args.OFF_MAX + 1):
                size, offset = _buffers.check_range(b, size, offset,
                                                    "batch entry %d" % i)
            k = 4 * i
            flat[k] = self._enter(f, held, i)
            flat[k + 1] = b.ptr or 0
            flat[k + 2] = size
            flat[k + 3] = offset
            files.append(f.name)
        return flat

    def _rows(self, rows, held):
        """The flat C entries of the integrations' rows (see __init__)."""
        self.n = len(rows)
        flat = [0] * (4 * self.n)
        enter = self._enter
        for i, (f, ptr, size, offset) in enumerate(rows):
            k = 4 * i
            flat[k] = enter(f, held, i)
            flat[k + 1] = ptr
            flat[k + 2] = size
            flat[k + 3] = offset
        self._files = [r[0].name for r in rows]
        return flat

    def _submit(self, flat):
        """Makes the C batch and submits the entries (flat, as _check
        gives them): one array.array of 64-bit words, the layout of
        gpufile_batch_entry_t (a ctypes Structure per entry cost more than
        the 64 KiB read of a cat_ranges range)."""
        words = array.array("Q", flat)
        arr = (_Entry * max(self.n, 1)).from_buffer(words) if self.n else \
            (_Entry * 1)()
        c, self._cap, self._threads = _take(self.n)
        # The buffers are pinned to the C batch: kept until it is freed.
        self._c = Owned(c, None, "batch of %d entries" % self.n,
                        pins=(self._bufs, self._keep))
        # No other thread knows the batch yet: no call to count.
        _lib.check(_fn("gpufile_batch_submit")(c, arr, self.n))
        self._submitted = True

    def _collect(self, b, ms):
        """Waits at most ms milliseconds (-1: no limit) for the batch b (in
        an exclusive call), then keeps each entry's result and message:
        they are the C batch's, and go with it (wait() after the
        with-block raised AttributeError, and a failed entry was lost)."""
        rc = _fn("gpufile_batch_wait")(b, ms)
        if rc == -_ETIMEDOUT:
            raise TimeoutError(_ETIMEDOUT, _lib.errmsg())
        _lib.check(rc)
        result = _fn("gpufile_batch_result")
        results = [result(b, i) for i in range(self.n)]
        for i, r in enumerate(results):
            if r < 0:
                m = _fn("gpufile_batch_errmsg")(b, i)
                self._msgs[i] = m.decode("utf-8", "replace") if m else None
        self._results = results

    def _free(self, b):
        """Owned's free function: waits for a batch not waited for (its
        outcome kept), frees it, and returns what _end() lets go of once
        close() has returned: the buffers, the error of that wait, and
        what held the memory of _rows."""
        err = None
        try:
            if self._submitted and self._results is None:
                try:
                    self._collect(b, -1)
                except Exception as e:  # the batch is freed all the same
                    err = e
        finally:
            # Interrupted (KeyboardInterrupt in the wait): freed here, its
            # entries waited for, before the buffers can be let go (it was
            # neither freed nor kept: its workers and rings stayed for the
            # life of the process).
            if err is None and (self._results is not None or
                                not self._submitted):
                _give_back(b, self._cap, self._threads)  # kept or freed
            else:
                _fn("gpufile_batch_free")(b)  # waits for the entries
        bufs, self._bufs = self._bufs, []
        keep, self._keep = self._keep, None
        return bufs, err, keep

    def _end(self, finalising=False):
        """Frees the C batch (waiting for it, its outcome kept) and lets go
        of the buffers; from any thread, any number of times: the first
        frees, the others wait for it. The finaliser passes finalising
        (Owned.close)."""
        if self._c is None:  # failed before the C batch was made
            bufs, err, keep = self._bufs, None, self._keep
            self._bufs, self._keep = [], None
        else:
            bufs, err, keep = self._c.close(self._free, finalising) or \
                ((), None, None)
        for buf in bufs:
            buf.release()
        del keep  # the rows' memory, let go with nothing held
        if err is not None:
            raise err

    def _error_of(self, i):
        """The exception of entry i, which failed (once complete)."""
        r = self._results[i]
        return _lib.make_error(r, self._msgs.get(i) or
                               "batch entry %d (%s): %s"
                               % (i, self._files[i], _lib.strerror(r)),
                               filename=self._files[i])

    def _first_error(self):
        for i, r in enumerate(self._results):
            if r < 0:
                return self._error_of(i)
        return None

    def poll(self):
        """The number of entries done so far; never blocks. While another
        thread waits for the batch (or polls it), the count the last
        poll() saw."""
        try:
            b = self._c.enter(exclusive=True, blocking=False)
        except ValueError:  # freed: complete
            return self.n
        if b is None:
            return self._polled
        try:
            n = _lib.check(_fn("gpufile_batch_poll")(b))
            self._polled = max(self._polled, n)
            return n
        finally:
            self._c.leave(exclusive=True)

    def done(self):
        return self.poll() == self.n

    def wait(self, timeout=None):
        """Waits for every entry (at most timeout seconds: TimeoutError) and
        returns the list of counts, short only at end of file. Raises the
        error of the first entry that failed, its message naming the entry
        and the file."""
        what = "batch of %d entries" % self.n
        ms = _args.wait_ms(timeout, what)
        if not self._c.closed:
            start = time.monotonic()
            try:
                b = self._c.enter(exclusive=True,
                                  timeout=None if ms is None else ms / 1000)
            except ValueError:
                b = 0  # freed, or being freed: _end() waits for it
            if b is None:
                raise TimeoutError(_ETIMEDOUT, "%s: not done after %gs "
                                   "(another thread waits for it)"
                                   % (what, timeout))
            if b:
                try:
                    if self._results is None:
                        if ms is not None:  # what is left of the timeout
                            ms = max(0, ms - int(1000 * (time.monotonic()
                                                         - start)))
                        self._collect(b, -1 if ms is None else ms)
                finally:
                    self._c.leave(exclusive=True)
        self._end()
        if self._results is None:  # _collect() failed within _end()
            raise RuntimeError("%s: freed before its results were read"
                               % what)
        self._reported = True
        err = self._first_error()
        if err is not None:
            raise err
        return list(self._results)

    def results(self):
        """Waits, then returns each entry's count or negative error code
        (no exception for failed entries)."""
        try:
            self.wait()
        except OSError:
            pass
        return list(self._results)

    def __del__(self):
        try:
            self._end(finalising=True)
            if not self._reported and self._results:
                err = self._first_error()
                if err is not None:
                    _lib.warn_dropped("a batch of %d entries (never "
                                      "waited for)" % self.n, err)
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._end()
        if exc[0] is None and not self._reported and self._results:
            self._reported = True
            err = self._first_error()
            if err is not None:
                raise err
        return False


def batch_read(entries):
    """Reads every (file, buf, size, offset) entry as one batch and returns
    the list of byte counts (short only at end of file). Raises the first
    failed entry's error, naming the entry."""
    b = BatchRead(entries)
    return b.wait()
