"""Batches of small reads (gpufile_batch_*): many (file, buffer, size,
offset) reads at once, host or device buffers, any mix of files.

    counts = gpufile.batch_read([(f, buf, 4096, 0), (g, arr, None, 8192)])

    b = gpufile.BatchRead(entries)   # submitted at once
    b.poll()                         # entries done so far
    counts = b.wait()                # or b.wait(timeout=1.5)
"""

import ctypes
import time
from ctypes import POINTER, c_char_p, c_int, c_int64, c_long, c_size_t, c_ssize_t, c_uint, c_void_p

from . import _args, _buffers, _lib
from ._owned import Owned


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

    def __init__(self, entries):
        from ._file import File
        self._c = None
        self._submitted = False
        self._results = None  # each entry's result, kept once complete
        self._msgs = {}  # index -> the library's message, for failed ones
        self._reported = False  # wait() or results() gave the outcome
        self._polled = 0  # what the last poll() saw
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
        # Owned counts per thread: KeyError, and a file never closed.)
        held = {}  # id(Owned) -> Owned: one look-up per entry (a scan of
        # a list was quadratic: 2,048 files, 2 million comparisons)
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
                if id(h) not in held:
                    h.enter()
                    held[id(h)] = h
                arr[i] = _Entry(h.ptr, b.ptr, n, off)
                self._files.append(f.name)
            out = c_void_p()
            _lib.check(_fn("gpufile_batch_create")(ctypes.byref(out),
                                                   max(self.n, 1)))
            self._c = Owned(out.value, None,
                            "batch of %d entries" % self.n)
            # No other thread knows the batch yet: no call to count.
            _lib.check(_fn("gpufile_batch_submit")(out.value, arr, self.n))
            self._submitted = True
        except BaseException:
            self._end()
            raise
        finally:
            for h in held.values():
                h.leave()

    def _collect(self, b, ms):
        """Waits at most ms milliseconds (-1: no limit) for the batch b (in
        an exclusive call), then keeps each entry's result and message:
        they are the C batch's, and go with it (wait() after the
        with-block raised AttributeError, and a failed entry was lost)."""
        rc = _fn("gpufile_batch_wait")(b, ms)
        if rc == -_ETIMEDOUT:
            raise TimeoutError(_ETIMEDOUT, _lib.errmsg())
        _lib.check(rc)
        results = [_fn("gpufile_batch_result")(b, i) for i in range(self.n)]
        for i, r in enumerate(results):
            if r < 0:
                m = _fn("gpufile_batch_errmsg")(b, i)
                self._msgs[i] = m.decode("utf-8", "replace") if m else None
        self._results = results

    def _free(self, b):
        """Owned's free function: waits for a batch not waited for (its
        outcome kept), frees it, and returns what _end() lets go of once
        close() has returned: the buffers, and the error of that wait."""
        err = None
        if self._submitted and self._results is None:
            try:
                self._collect(b, -1)
            except Exception as e:  # the batch is freed all the same
                err = e
        _fn("gpufile_batch_free")(b)  # waits for the entries in flight
        bufs, self._bufs = self._bufs, []
        return bufs, err

    def _end(self):
        """Frees the C batch (waiting for it, its outcome kept) and lets go
        of the buffers; from any thread, any number of times: the first
        frees, the others wait for it."""
        if self._c is None:  # failed before the C batch was made
            bufs, err = self._bufs, None
            self._bufs = []
        else:
            bufs, err = self._c.close(self._free) or ((), None)
        for buf in bufs:
            buf.release()
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
