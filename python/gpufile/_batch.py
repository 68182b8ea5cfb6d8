"""Batches of small reads (gpufile_batch_*): many (file, buffer, size,
offset) reads at once, host or device buffers, any mix of files.

    counts = gpufile.batch_read([(f, buf, 4096, 0), (g, arr, None, 8192)])

    b = gpufile.BatchRead(entries)   # submitted at once
    b.poll()                         # entries done so far
    counts = b.wait()                # or b.wait(timeout=1.5)
"""

import ctypes
from ctypes import POINTER, c_char_p, c_int, c_int64, c_long, c_size_t, c_ssize_t, c_uint, c_void_p

from . import _args, _buffers, _lib


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
}

_EINPROGRESS = 115
_ETIMEDOUT = 110


def _fn(name):
    from ._page_cache import fn
    return fn(name, _DECLS)


class BatchRead:
    """A batch of reads, submitted when made. entries: an iterable of
    (file, buf, size, offset) with file an open gpufile.File, buf a host
    object with the buffer protocol or a device array
    (__cuda_array_interface__), size None for all of buf. Every entry is
    checked before anything is read; a bad one raises naming its index.
    The buffers stay alive until the batch is complete; a file may be
    closed meanwhile, from any thread (close() waits for its entries). The
    batch may be waited for, polled and freed from any thread, one at a
    time.

    As a context manager, the batch is complete and freed at the end of
    the block; wait() and results() still give its outcome afterwards. A
    block that ends without an exception and without a wait() or
    results() raises the error of the first entry that failed, so that a
    failed read is never dropped unseen; a batch dropped without either
    warns (RuntimeWarning) with that error."""

    def __init__(self, entries):
        from ._file import File
        self._b = None
        self._submitted = False
        self._results = None  # each entry's result, kept once complete
        self._msgs = {}  # index -> the library's message, for failed ones
        self._reported = False  # wait() or results() gave the outcome
        self._bufs = []
        self._files = []
        entries = list(entries)
        self.n = len(entries)
        arr = (_Entry * max(self.n, 1))()
        # The handles are entered only until the submit has returned:
        # from then on gpufile_close() waits for the batch's entries (its
        # contract in gpufile.h), as for a Future, and the C batch does
        # not touch a handle once its entries have ended. (Held until the
        # batch ended, they were left by whichever thread waited, which
        # _Handle counts per thread: KeyError, and a file never closed.)
        held = []
        try:
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
                what = "batch entry %d" % i
                b = _buffers.as_buffer(buf, True, what)
                self._bufs.append(b)
                n, off = _buffers.check_range(b, size, offset, what)
                h = f._h
                if not any(h is x for x in held):
                    h.enter()
                    held.append(h)
                arr[i] = _Entry(h.ptr, b.ptr, n, off)
                self._files.append(f.name)
            out = c_void_p()
            _lib.check(_fn("gpufile_batch_create")(ctypes.byref(out),
                                                   max(self.n, 1)))
            self._b = out.value
            _lib.check(_fn("gpufile_batch_submit")(self._b, arr, self.n))
            self._submitted = True
        except BaseException:
            self._end()
            raise
        finally:
            for h in held:
                h.leave()

    def _collect(self, ms):
        """Waits at most ms milliseconds (-1: no limit) for the batch, then
        keeps each entry's result and message: they are the C batch's, and
        go with it (wait() after the with-block raised AttributeError, and
        a failed entry was lost)."""
        rc = _fn("gpufile_batch_wait")(self._b, ms)
        if rc == -_ETIMEDOUT:
            raise TimeoutError(_ETIMEDOUT, _lib.errmsg())
        _lib.check(rc)
        results = [_fn("gpufile_batch_result")(self._b, i)
                   for i in range(self.n)]
        for i, r in enumerate(results):
            if r < 0:
                m = _fn("gpufile_batch_errmsg")(self._b, i)
                self._msgs[i] = m.decode("utf-8", "replace") if m else None
        self._results = results

    def _end(self):
        """Frees the C batch (waiting for it, its outcome kept) and lets go
        of the buffers."""
        if self._b is not None:
            try:
                if self._submitted and self._results is None:
                    self._collect(-1)
            finally:
                _fn("gpufile_batch_free")(self._b)
                self._b = None
        for b in self._bufs:
            b.release()
        self._bufs = []

    def _first_error(self):
        for i, r in enumerate(self._results):
            if r < 0:
                return _lib.make_error(r, self._msgs.get(i) or
                                       "batch entry %d (%s): %s"
                                       % (i, self._files[i], _lib.strerror(r)),
                                       filename=self._files[i])
        return None

    def poll(self):
        """The number of entries done so far; never blocks."""
        if self._b is None:
            return self.n
        return _lib.check(_fn("gpufile_batch_poll")(self._b))

    def done(self):
        return self.poll() == self.n

    def wait(self, timeout=None):
        """Waits for every entry (at most timeout seconds: TimeoutError) and
        returns the list of counts, short only at end of file. Raises the
        error of the first entry that failed, its message naming the entry
        and the file."""
        if self._b is not None:
            ms = _args.wait_ms(timeout, "batch of %d entries" % self.n)
            self._collect(-1 if ms is None else ms)
            self._end()
        if self._results is None:  # _collect() failed within _end()
            raise RuntimeError("batch of %d entries: freed before its "
                               "results were read" % self.n)
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
            self._end()
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
