"""gpufile.File and gpufile.Future."""

import collections
import ctypes
import errno
import os
import threading
import weakref

from . import _args
from . import _buffers
from . import _lib
from ._structs import PATH_NAMES, text

PathInfo = collections.namedtuple("PathInfo", ["path", "reason"])
PathInfo.__doc__ = """Which path a device request of at least gds_threshold
bytes takes on a file ("host", "posix", "cufile" or "small"), and why."""


class Future:
    """A request in flight (File.pread / File.pwrite).

    It holds the buffer until the request has ended, so that Python cannot
    free memory the library still writes: get() waits and then lets go;
    dropping an unfinished Future waits for the request in its finaliser,
    and one dropped with a failure get() never gave warns (RuntimeWarning).
    It also holds its File, so that ``File(p).pread(a).get()`` works.

    Lock design: _lock serialises the calls on the C future (wait, free).
    Nothing that can run a finaliser happens under it: the buffer and the
    File are let go only after it is released, because dropping the last
    reference to the File runs File.__del__ -> close(), which may wait
    (issue 10 item 7: it deadlocked when close() took this lock again).
    close() never takes a Future's lock.
    """

    def __init__(self, buf, file, what):
        self._lock = threading.Lock()
        # The C future, written by the submit itself (_submit): the Future
        # owns the request from the moment the library takes it, with no
        # Python step in between that an exception (KeyboardInterrupt)
        # could cut short. Made after the submit, a Future was never made
        # then: the buffer was released under the running request, and
        # the C future never freed.
        self._out = ctypes.c_void_p()
        _futures.add(self)
        self._buf = buf
        self._file = file  # the File outlives the request
        self._name = file.name
        self._what = what
        self._result = None
        self._error = None
        self._seen = False  # get() gave the outcome

    @property
    def _cfuture(self):
        return self._out.value

    def done(self):
        """True when the request has ended (never blocks)."""
        if not self._lock.acquire(blocking=False):
            return False  # another thread is in get(), waiting for it
        try:
            if self._cfuture is None:
                return True
            return _lib.lib().gpufile_future_done(self._cfuture) == 1
        finally:
            self._lock.release()

    def _finish_locked(self, timeout):
        """Waits, records the outcome and frees the C future. Returns what
        the caller lets go of once it has released _lock."""
        lib = _lib.lib()
        ms = _args.wait_ms(timeout, self._what)
        if ms is None:
            n = lib.gpufile_future_wait(self._cfuture)
        else:
            n = lib.gpufile_future_wait_for(self._cfuture, ms)
            if n == -errno.ETIMEDOUT:
                # Also the result of a request that failed so (a remote
                # read whose transfer timed out): only one not done yet
                # is this wait's timeout. One done by now (maybe just
                # after the wait gave up) has its own result and message,
                # which gpufile_future_wait returns at once.
                if lib.gpufile_future_done(self._cfuture) != 1:
                    raise TimeoutError(errno.ETIMEDOUT, "%s: not done after "
                                       "%gs" % (self._what, timeout))
                n = lib.gpufile_future_wait(self._cfuture)
        if n < 0:
            self._error = _lib.make_error(n, filename=self._name)
        else:
            self._result = int(n)
        lib.gpufile_future_free(self._cfuture)
        self._out.value = None
        held = (self._buf, self._file)
        self._buf = self._file = None
        return held

    @staticmethod
    def _let_go(held):
        buf, _file = held
        buf.release()
        # _file goes with this frame: File.__del__ may run here, with no
        # lock held.

    def _finish(self):
        """Waits for the request, for an owner that does so in its close();
        lets go as get() does, after releasing the lock."""
        held = None
        with self._lock:
            if self._cfuture is not None:
                held = self._finish_locked(None)
        if held is not None:
            self._let_go(held)

    def get(self, timeout=None):
        """Waits for the request and returns the number of bytes moved, or
        raises its error (OSError). With timeout (seconds), raises
        TimeoutError saying "not done after" when it has not ended by then
        (the request goes on; get() may be called again). A request that
        failed with ETIMEDOUT (a remote transfer that timed out) raises its
        own error, as without timeout.
        May be called again, from any thread; returns or raises the same."""
        held = None
        with self._lock:
            if self._cfuture is not None:
                held = self._finish_locked(timeout)
        if held is not None:
            self._let_go(held)
            held = None
        self._seen = True
        if self._error is not None:
            raise self._error
        return self._result

    result = get

    def _abandon(self):
        """After a failed or interrupted submit: lets go of the buffer,
        unless the library took the request (then the finaliser, or get(),
        waits for it first)."""
        if self._out.value is None and self._buf is not None:
            self._buf.release()

    def __del__(self):
        out = getattr(self, "_out", None)
        if out is None:
            return
        try:
            if out.value is not None:
                lib = _lib.lib()
                # Waits when still running: the buffer goes only after.
                n = lib.gpufile_future_wait(out.value)
                if n < 0:
                    self._error = _lib.make_error(n, filename=self._name)
                lib.gpufile_future_free(out.value)
                out.value = None
            if self._buf is not None:
                self._buf.release()
            if self._error is not None and not self._seen:
                _lib.warn_dropped("%s (a Future never got)" % self._what,
                                  self._error)
        except Exception:
            pass

    def __repr__(self):
        state = "pending" if self._cfuture is not None else (
            "error" if self._error is not None else "done, %d bytes" % self._result)
        return "<gpufile.Future %s (%s)>" % (self._what, state)


def submit(owner, fn, b, n, off, what):
    """fn(handle, b.ptr, n, off, &future) through owner._call (a File's or
    an Mmap's): the Future of the request, which holds b. The Future is
    made first and the library writes the C future into it (see
    Future.__init__)."""
    fut = Future(b, owner, what)
    try:
        rc = owner._call(fn, b.ptr, n, off, ctypes.byref(fut._out))
    except BaseException:
        fut._abandon()
        raise
    if rc < 0:
        fut._abandon()
        _lib.check(rc, filename=owner.name)
    return fut


# A handle's states: _CLOSING while close() waits for the calls in flight,
# _FREEING while it runs the C function that frees the handle.
_OPEN, _CLOSING, _FREEING, _CLOSED = "open", "closing", "freeing", "closed"


class _Handle:
    """A C handle (a File's gpufile_t, an Mmap's gpufile_mmap_t) and the
    calls in flight on it.

    Invariant: the handle is passed to the library only between enter() and
    leave() (call() does both), and close() frees it only when no call is
    between them; once close() has begun, enter() raises ValueError. So no
    call ever uses a freed handle (issue 10 item 6: a read racing close()
    used it after free: a heap use-after-free under ASan, EBADF, or a
    reused descriptor of another file). Nothing hands out the raw handle
    without counting the call: a former File._h() and Mmap._h() did, and
    fd(), page_cache_info(f) and Mmap.read() racing close() used a freed
    handle (EBADF with a garbage path in the message, a segfault).

    Requests (Futures) and batches (BatchRead, once submitted) need no
    count here: gpufile_close() and gpufile_mmap_close() wait for every
    request and batch entry on the handle (their contracts in gpufile.h),
    and neither a C future nor a C batch refers to its handle once its work
    has ended, so either can be waited for and freed after close(), in any
    thread.

    The lock of cond guards state and users only; it is never held across
    a call into the library or anything that may run a finaliser.
    """

    def __init__(self, ptr, name, free, kind="file"):
        self.ptr = ptr
        self.name = name
        self.free = free  # the C function that frees ptr, returning 0 or -errno
        self.kind = kind  # what the closed-handle error calls it
        self.cond = threading.Condition(threading.Lock())
        self.state = _OPEN
        self.users = {}  # thread ident -> calls of that thread in flight
        _handles.add(self)

    def _closed(self):
        return ValueError("I/O operation on closed %s %r"
                          % (self.kind, self.name))

    def enter(self):
        me = threading.get_ident()
        with self.cond:
            if self.state != _OPEN:
                raise self._closed()
            self.users[me] = self.users.get(me, 0) + 1
            return self.ptr

    def leave(self):
        me = threading.get_ident()
        with self.cond:
            n = self.users[me] - 1
            if n:
                self.users[me] = n
            else:
                del self.users[me]
                if self.state == _CLOSING:
                    self.cond.notify_all()

    def call(self, fn, *args):
        """fn(handle, *args) with the handle held open for the call."""
        ptr = self.enter()
        try:
            return fn(ptr, *args)
        finally:
            self.leave()

    def close(self):
        """Returns the free function's code, 0 when closed already."""
        me = threading.get_ident()
        with self.cond:
            if self.state == _CLOSED:
                return 0
            if self.state != _OPEN:  # by another thread: wait for it
                self.cond.wait_for(lambda: self.state == _CLOSED)
                return 0
            if self.users.get(me):
                # Only a signal handler or a finaliser run in the middle of
                # a call of this thread gets here; waiting would never end.
                raise RuntimeError("close() of %r from within a call on it "
                                   "in the same thread" % self.name)
            self.state = _CLOSING
            self.cond.wait_for(lambda: not self.users)
            self.state = _FREEING
            ptr = self.ptr
        try:
            return self.free(ptr)  # waits for its requests
        finally:
            with self.cond:
                self.ptr = None
                self.state = _CLOSED
                self.cond.notify_all()


_handles = weakref.WeakSet()  # every _Handle, for _after_fork_in_child
_futures = weakref.WeakSet()  # every Future, for _after_fork_in_child


def _after_fork_in_child():
    """In a forked child only the forking thread exists, and it was in no
    call (it was running os.fork): counts of calls in flight of the other
    threads would make close() wait forever, and a lock one of them held
    would never be released. Start both afresh.

    A close() another thread had begun is that thread's, and it does not
    exist here either: left _CLOSING, the child's close() waited for it
    forever. While it still waited for calls to leave, the handle was
    whole: the child's copy is open. Once it was freeing the handle, the
    child's copy may be half freed: it is closed, what is left of it
    leaked rather than used.

    A Future's lock held by a thread waiting in get() would never be
    released either: get() hung, done() said False for ever (the child's
    copy of the request ends with -ECANCELED, pool.c)."""
    for h in list(_handles):
        h.cond = threading.Condition(threading.Lock())
        h.users = {}
        if h.state == _CLOSING:
            h.state = _OPEN
        elif h.state == _FREEING:
            h.state, h.ptr = _CLOSED, None
    for f in list(_futures):
        f._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class File:
    """A file opened for I/O into host or GPU memory.

    flags as for fopen(): "r", "r+", "w", "w+", "a". Use as a context
    manager, or call close(). Buffers may be CuPy arrays, PyTorch CUDA
    tensors, Numba device arrays (anything with __cuda_array_interface__),
    or host objects with the buffer protocol (NumPy arrays, bytearray,
    memoryview, bytes as a write source).

    A File may be shared by threads: calls run concurrently, and close()
    waits for the calls of other threads (see close()).
    """

    def __init__(self, path, flags="r"):
        self._h = None
        if not isinstance(flags, str):
            raise TypeError("flags must be a str such as \"r\" or \"w\", not %s"
                            % type(flags).__name__)
        raw = _args.c_path(path, "File")
        _args.c_text(flags, "flags", "File")
        self.name = os.fsdecode(path)
        self.flags = flags
        lib = _lib.lib()
        handle = ctypes.c_void_p()
        rc = lib.gpufile_open(ctypes.byref(handle), raw, flags.encode())
        # A URL may carry secrets (a presigned query, user:password): the
        # library's messages and its gpufile_filename() are redacted.
        _lib.check(rc, filename=_lib.shown_name(self.name))
        if "://" in self.name:
            name = lib.gpufile_filename
            name.restype, name.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
            self.name = name(handle.value).decode("utf-8", "replace")
        self._h = _Handle(handle.value, self.name, lib.gpufile_close)

    # ---- lifetime ----

    @property
    def closed(self):
        return self._h is None or self._h.state != _OPEN

    def close(self):
        """Closes the file. Calls already running in other threads (read,
        write, size, ...) are waited for, and so is every request (Future)
        in flight; their Futures keep their results. A call that starts
        once close() has begun, or after, raises ValueError("I/O operation
        on closed file"), as Python's io does. Calling close() again does
        nothing (from another thread while the first is closing: waits for
        it). Raises RuntimeError when called from within a call on this
        file in the same thread (a signal handler), which could never end.
        """
        if self._h is None:
            return
        _lib.check(self._h.close(), filename=self.name)

    def __enter__(self):
        if self.closed:
            raise ValueError("I/O operation on closed file %r" % self.name)
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        # No call can be in flight (they hold self); requests are waited
        # for by gpufile_close. No lock of a Future is taken.
        if getattr(self, "_h", None) is not None:
            try:
                self.close()
            except Exception:
                pass

    def __repr__(self):
        return "<gpufile.File %r flags=%r%s>" % (self.name, self.flags,
                                                 " closed" if self.closed else "")

    def _call(self, fn, *args):
        """fn(handle, *args) with the handle held open for the call."""
        if self._h is None:
            raise ValueError("I/O operation on closed file %r" % self.name)
        return self._h.call(fn, *args)

    # ---- I/O ----

    def _prepare(self, buf, size, file_offset, writable, what, stream=None):
        if self.closed:  # before touching buf, as after close() below
            raise ValueError("I/O operation on closed file %r" % self.name)
        b = _buffers.as_buffer(buf, writable, what, stream=stream)
        try:
            n, off = _buffers.check_range(b, size, file_offset, what)
        except BaseException:
            b.release()
            raise
        return b, n, off

    def read(self, buf, size=None, file_offset=0):
        """Reads up to size bytes (default: all of buf) at file_offset into
        buf. Returns the number of bytes read, fewer than size only at the
        end of the file."""
        b, n, off = self._prepare(buf, size, file_offset, True, "read")
        try:
            rc = self._call(_lib.lib().gpufile_pread, b.ptr, n, off)
        finally:
            b.release()
        return _lib.check(rc, filename=self.name)

    def write(self, buf, size=None, file_offset=0):
        """Writes size bytes (default: all of buf) at file_offset. Returns
        the number of bytes written."""
        b, n, off = self._prepare(buf, size, file_offset, False, "write")
        try:
            rc = self._call(_lib.lib().gpufile_pwrite, b.ptr, n, off)
        finally:
            b.release()
        return _lib.check(rc, filename=self.name)

    def _submit(self, fn, buf, size, file_offset, writable, what):
        b, n, off = self._prepare(buf, size, file_offset, writable, what)
        return submit(self, fn, b, n, off, "%s of %d bytes at %d of %s"
                      % (what, n, off, self.name))

    def pread(self, buf, size=None, file_offset=0):
        """As read(), but returns at once with a Future; buf is kept alive
        until the request has ended. Future.get() returns the bytes read."""
        return self._submit(_lib.lib().gpufile_pread_async, buf, size,
                            file_offset, True, "pread")

    def pwrite(self, buf, size=None, file_offset=0):
        """As write(), but returns at once with a Future."""
        return self._submit(_lib.lib().gpufile_pwrite_async, buf, size,
                            file_offset, False, "pwrite")

    # ---- stream-ordered requests (issue 13 item 2) ----

    def _stream_submit(self, name, buf, stream, size, file_offset, writable,
                       what):
        from . import _stream
        handle = _stream.stream_handle(stream, what)
        f = _stream.fn(name)
        b, n, off = self._prepare(buf, size, file_offset, writable, what,
                                  stream=handle)
        n_out = ctypes.c_ssize_t(0)
        try:
            rc = self._call(f, b.ptr, n, off, ctypes.c_void_p(handle or None),
                            ctypes.byref(n_out))
        except BaseException:
            b.release()
            raise
        if rc < 0:
            b.release()
            _lib.check(rc, filename=self.name)
        return _stream.StreamFuture(n_out, b, self, handle,
                                    "%s of %d bytes at %d of %s"
                                    % (what, n, off, self.name))

    def read_async(self, buf, stream, size=None, file_offset=0):
        """Reads as read(), in the order of the CUDA stream stream (a CuPy
        or PyTorch stream, or a CUstream as an int; 0 or None: the legacy
        default stream): work queued on it before the call runs first, work
        queued after sees the bytes. Returns at once with a StreamFuture
        whose get() synchronises the stream and returns the bytes read. A
        device buffer's own __cuda_array_interface__ stream is waited for
        only when it is another stream."""
        return self._stream_submit("gpufile_read_async", buf, stream, size,
                                   file_offset, True, "read_async")

    def write_async(self, buf, stream, size=None, file_offset=0):
        """Writes as write(), in the order of stream: the bytes the stream
        produced before the call are written. Returns a StreamFuture."""
        return self._stream_submit("gpufile_write_async", buf, stream, size,
                                   file_offset, False, "write_async")

    def stream_info(self, buf, size=None, write=False):
        """How a stream-ordered request on buf keeps its order: a sentence
        starting with "cufile:", "staged:", "wait-value:", "host-func:" or
        "blocking:"."""
        from . import _stream
        b, n, _ = self._prepare(buf, size, 0, not write, "stream_info",
                                stream=-1)
        reason = ctypes.create_string_buffer(1024)
        try:
            rc = self._call(_stream.fn("gpufile_stream_info"), b.ptr, n,
                            1 if write else 0, reason, len(reason))
        finally:
            b.release()
        _lib.check(rc, filename=self.name)
        return text(reason.raw)

    def size(self):
        """The file's current size in bytes."""
        return _lib.check(self._call(_lib.lib().gpufile_size), filename=self.name)

    nbytes = size

    def sync(self):
        """Flushes the file's data to storage (fdatasync)."""
        _lib.check(self._call(_lib.lib().gpufile_sync), filename=self.name)

    # ---- descriptors (KvikIO parity, issue 13) ----

    def fd(self, direct=False):
        """The buffered descriptor, or with direct=True the O_DIRECT one
        (FileNotFoundError saying why when there is none). Owned by the
        File: do not close it; close() closes it, so it is valid only until
        then, as io's fileno() is."""
        from ._page_cache import fn
        return _lib.check(self._call(fn("gpufile_fd"), 1 if direct else 0),
                          filename=self.name)

    def fileno(self):
        """The buffered descriptor, as io objects have (os.fstat(f) works)."""
        return self.fd(False)

    def open_flags(self):
        """The status flags of the buffered descriptor (fcntl F_GETFL), as
        KvikIO's CuFile.open_flags(): test them with os.O_RDONLY, ..."""
        import fcntl

        from ._page_cache import fn

        def flags(h):
            # Under the hold of the handle: a close() in another thread
            # between fileno() and fcntl() would close the descriptor, and
            # fcntl would see EBADF or another file that took its number.
            fd = _lib.check(fn("gpufile_fd")(h, 0), filename=self.name)
            return fcntl.fcntl(fd, fcntl.F_GETFL)
        return self._call(flags)

    def path_info(self):
        """PathInfo(path, reason): the path a device request of at least
        gds_threshold bytes takes on this file ("cufile", "posix", ...) and
        why. May load cuFile and register the file, as the first device
        request would."""
        path = ctypes.c_int(0)
        reason = ctypes.create_string_buffer(1024)
        rc = self._call(_lib.lib().gpufile_path_info, ctypes.byref(path), reason,
                        len(reason))
        _lib.check(rc, filename=self.name)
        p = path.value
        return PathInfo(PATH_NAMES[p] if 0 <= p < len(PATH_NAMES) else str(p),
                        text(reason.raw))
