"""gpufile.File and gpufile.Future."""

import collections
import ctypes
import errno
import os
import time

from . import _args
from . import _buffers
from . import _lib
from . import _remote
from ._owned import Owned, Owner
from ._structs import _OPTIONAL as _OPTIONAL_DECLS, PATH_NAMES, RemoteFileInfo, text

# C functions not in every libgpufile (_structs declares the others), got
# through _fn.
_DECLS = {
    "gpufile_fd": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
}


def _fn(name):
    return _lib.fn(name, _DECLS)


PathInfo = collections.namedtuple("PathInfo", ["path", "reason"])
PathInfo.__doc__ = """Which path a device request of at least gds_threshold
bytes takes on a file ("host", "posix", "cufile" or "small"), and why."""


class Future(Owner):
    """A request in flight (File.pread / File.pwrite / Mmap.pread).

    It holds the buffer until the request has ended, so that Python cannot
    free memory the library still writes: get() waits and then lets go;
    dropping an unfinished Future waits for the request in its finaliser,
    and one dropped with a failure get() never gave warns (RuntimeWarning).
    It also holds its File, so that ``File(p).pread(a).get()`` works.

    The C future is an Owned (_owned.py): get() waits in an exclusive call
    (one thread waits, others wait for it), then close() frees the C
    future once. The buffer and the File are let go only after close()
    has returned, with nothing held, because dropping the last reference
    to the File runs File.__del__ -> close(), which may wait, and an
    Mmap's close() finishes its Futures (issue 10 item 7: it deadlocked
    when close() took a Future's lock again).
    """

    def __init__(self, buf, file, what):
        # The C future, written by the submit itself (submit()): the Future
        # owns the request from the moment the library takes it, with no
        # Python step in between that an exception (KeyboardInterrupt)
        # could cut short. Made after the submit, a Future was never made
        # then: the buffer was released under the running request, and
        # the C future never freed.
        self._out = ctypes.c_void_p()
        self._buf = buf
        self._file = file  # the File outlives the request
        self._name = file.name
        self._what = what
        self._result = None
        self._error = None
        self._ended = False  # the outcome is recorded
        self._seen = False  # get() gave the outcome
        self._c = Owned(self._out, None, "request (%s)" % what, pins=buf)

    @property
    def _cfuture(self):
        return self._out.value

    def done(self):
        """True when the request has ended (never blocks: False while
        another thread waits in get())."""
        try:
            out = self._c.enter(exclusive=True, blocking=False)
        except ValueError:  # freed: ended
            return True
        if out is None:
            return False  # another thread is in get(), waiting
        try:
            return (self._ended or out.value is None or
                    _lib.lib().gpufile_future_done(out.value) == 1)
        finally:
            self._c.leave(exclusive=True)

    def _record(self, n):
        if n < 0:
            self._error = _lib.make_error(n, filename=self._name)
        else:
            self._result = int(n)
        self._ended = True

    def _wait(self, out, ms, timeout):
        """Waits (an exclusive call) and records the outcome."""
        lib = _lib.lib()
        if ms is None:
            n = lib.gpufile_future_wait(out.value)
        else:
            n = lib.gpufile_future_wait_for(out.value, ms)
            if n == -errno.ETIMEDOUT:
                # Also the result of a request that failed so (a remote
                # read whose transfer timed out): only one not done yet
                # is this wait's timeout. One done by now (maybe just
                # after the wait gave up) has its own result and message,
                # which gpufile_future_wait returns at once.
                if lib.gpufile_future_done(out.value) != 1:
                    raise TimeoutError(errno.ETIMEDOUT, "%s: not done after "
                                       "%gs" % (self._what, timeout))
                n = lib.gpufile_future_wait(out.value)
        self._record(n)

    def _free(self, out):
        """Owned's free function: waits for a request still running (a
        dropped Future, an owner's close()), frees the C future, and
        returns what the caller lets go of once close() has returned."""
        if out.value is not None:
            lib = _lib.lib()
            if not self._ended:
                self._record(lib.gpufile_future_wait(out.value))
            lib.gpufile_future_free(out.value)
            out.value = None
        held = (self._buf, self._file)
        self._buf = self._file = None
        return held

    @staticmethod
    def _let_go(held):
        if held is not None:
            buf, _file = held
            if buf is not None:
                buf.release()
            # _file goes with this frame: File.__del__ may run here, with
            # nothing held.

    def _finish(self):
        """Waits for the request and frees it, for an owner that does so
        in its close(); lets go as get() does."""
        self._let_go(self._c.close(self._free))

    def get(self, timeout=None):
        """Waits for the request and returns the number of bytes moved, or
        raises its error (OSError). With timeout (seconds), raises
        TimeoutError saying "not done after" when it has not ended by then
        (the request goes on; get() may be called again). A request that
        failed with ETIMEDOUT (a remote transfer that timed out) raises its
        own error, as without timeout.
        May be called again, from any thread; returns or raises the same."""
        if not self._ended:
            ms = _args.wait_ms(timeout, self._what)
            start = time.monotonic()
            try:
                # Another thread's get() first: within the timeout too.
                out = self._c.enter(exclusive=True,
                                    timeout=None if ms is None else ms / 1000)
                if out is None:
                    raise TimeoutError(errno.ETIMEDOUT, "%s: not done after "
                                       "%gs" % (self._what, timeout))
            except ValueError:
                pass  # freed, or being freed: close() waits for it
            else:
                try:
                    if not self._ended:  # by a get() this one waited for
                        if ms is not None:  # what is left of the timeout
                            ms = max(0, ms - int(1000 * (time.monotonic()
                                                         - start)))
                        self._wait(out, ms, timeout)
                finally:
                    self._c.leave(exclusive=True)
        self._finish()
        self._seen = True
        if self._error is not None:
            raise self._error
        return self._result

    result = get

    def _abandon(self):
        """After a failed or interrupted submit: lets go of the buffer,
        unless the library took the request (then the finaliser, or get(),
        waits for it first)."""
        if self._out.value is None:
            self._finish()

    def __del__(self):
        c = getattr(self, "_c", None)
        if c is None:
            return
        try:
            # Waits when still running.
            self._let_go(c.close(self._free, finalising=True))
            if self._error is not None and not self._seen:
                _lib.warn_dropped("%s (a Future never got)" % self._what,
                                  self._error)
        except Exception:
            pass

    def __repr__(self):
        state = "pending" if not self._ended else (
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


class File(Owner):
    """A file opened for I/O into host or GPU memory.

    flags as for fopen(): "r", "r+", "w", "w+", "a". Use as a context
    manager, or call close(). Buffers may be CuPy arrays, PyTorch CUDA
    tensors, Numba device arrays (anything with __cuda_array_interface__),
    or host objects with the buffer protocol (NumPy arrays, bytearray,
    memoryview, bytes as a write source).

    A File may be shared by threads: calls run concurrently, and close()
    waits for the calls of other threads (see close()).

    The gpufile_t is an Owned (_owned.py): every call that passes it to
    the library is a shared call of it (_call), so close() frees it only
    once no call is in flight; nothing hands the raw handle out without
    counting the call (a former File._h() did, and fd(),
    page_cache_info(f) racing close() used a freed handle). Requests
    (Futures) and batches (BatchRead, once submitted) need no count:
    gpufile_close() waits for every request and batch entry on the handle
    (its contract in gpufile.h), and neither a C future nor a C batch
    refers to the handle once its work has ended.
    """

    def __init__(self, path, flags="r", *, known_size=None,
                 aws_access_key_id=None, aws_secret_access_key=None,
                 aws_session_token=None, aws_region=None,
                 aws_endpoint_url=None, aws_profile=None, ca_file=None,
                 ca_path=None, timeout=None, max_in_flight=None,
                 max_attempts=None, unsigned=False, s3=False):
        """Opens path (a file, or an http://, https:// or s3:// URL).

        The keywords are for URLs only (gpufile_open_remote(3)); None
        means "not given", and the value then comes from the environment,
        the AWS profile files or the settings as without them:
        known_size (bytes: the open sends no request), aws_access_key_id
        and aws_secret_access_key (both), aws_session_token, aws_region,
        aws_endpoint_url (s3:// URLs), aws_profile, ca_file, ca_path,
        timeout (seconds, http_timeout), max_in_flight
        (remote_connections), max_attempts (http_max_attempts),
        unsigned=True (never sign: a public bucket), s3=True (an
        http(s):// URL of an S3 object on an endpoint of its own, signed
        as AWS's S3 URLs are)."""
        self._h = None
        if not isinstance(flags, str):
            raise TypeError("flags must be a str such as \"r\" or \"w\", not %s"
                            % type(flags).__name__)
        raw = _args.c_path(path, "File")
        _args.c_text(flags, "flags", "File")
        # A URL may carry secrets (a presigned query, user:password):
        # named as the library names it, in every message and exception.
        self.name = _lib.shown_name(os.fsdecode(path))
        self.flags = flags
        opts = _remote.opts(
            "File", known_size=known_size, unsigned=unsigned, s3=s3,
            aws_access_key_id=aws_access_key_id,
            aws_secret_access_key=aws_secret_access_key,
            aws_session_token=aws_session_token, aws_region=aws_region,
            aws_endpoint_url=aws_endpoint_url, aws_profile=aws_profile,
            ca_file=ca_file, ca_path=ca_path, timeout=timeout,
            max_in_flight=max_in_flight, max_attempts=max_attempts)
        if opts is None:
            self._open(raw, flags.encode())
            return
        if "://" not in self.name:
            raise TypeError("File: %r is not a URL; the remote keywords "
                            "(known_size, aws_*, ca_*, ...) are for "
                            "http://, https:// and s3:// URLs" % self.name)
        handle = ctypes.c_void_p()
        rc = _lib.fn("gpufile_open_remote", _OPTIONAL_DECLS)(
            ctypes.byref(handle), raw, flags.encode(), ctypes.byref(opts))
        self._own(rc, handle)

    def _open(self, raw, flags):
        """gpufile_open of raw (c_path's) with flags (bytes), self.name
        set: the handle owned (_own)."""
        handle = ctypes.c_void_p()
        self._own(_lib.lib().gpufile_open(ctypes.byref(handle), raw, flags),
                  handle)

    def _own(self, rc, handle):
        """The open's return code and handle: the error raised, or the
        handle kept in an Owned (for a URL, named as the library names
        it)."""
        lib = _lib.lib()
        _lib.check(rc, filename=self.name)
        if "://" in self.name:
            name = lib.gpufile_filename
            name.restype, name.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
            self.name = name(handle.value).decode("utf-8", "replace")
        self._h = Owned(handle.value, lib.gpufile_close, "file %r" % self.name)

    @classmethod
    def _reader(cls, path):
        """File(path) of a local file's path (a str, no URL) for reading,
        as the integrations open their files (_ranges.open_files):
        the same gpufile_open, Owned and errors as File(path), without the
        work File() does for other arguments (its keywords, the checks of
        flags, naming a URL). A Zarr read of 2,048 chunk files paid that
        2,048 times (issue 38)."""
        raw = os.fsencode(path)
        if b"\0" in raw or "://" in path:
            return cls(path)  # its errors, its naming of a URL
        f = cls.__new__(cls)
        f._h = None
        f.name, f.flags = path, "r"
        f._open(raw, b"r")
        return f

    # ---- lifetime ----

    @property
    def closed(self):
        return self._h is None or self._h.closed

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
        _lib.check(self._h.close() or 0, filename=self.name)

    def __enter__(self):
        if self.closed:
            raise ValueError("I/O operation on closed file %r" % self.name)
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        # No call can be in flight (they hold self, a BatchRead's submit
        # included: _owned.py rule 4); requests are waited for by
        # gpufile_close. No Future's Owned is entered.
        if getattr(self, "_h", None) is not None:
            try:
                self._h.close(finalising=True)
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
        "blocking:"; without a usable CUDA driver, "none:" and why (then
        read_async and write_async raise, even for host memory)."""
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
        return _lib.check(self._call(_fn("gpufile_fd"), 1 if direct else 0),
                          filename=self.name)

    def fileno(self):
        """The buffered descriptor, as io objects have (os.fstat(f) works)."""
        return self.fd(False)

    def open_flags(self):
        """The status flags of the buffered descriptor (fcntl F_GETFL), as
        KvikIO's CuFile.open_flags(): test them with os.O_RDONLY, ..."""
        import fcntl

        def flags(h):
            # Under the hold of the handle: a close() in another thread
            # between fileno() and fcntl() would close the descriptor, and
            # fcntl would see EBADF or another file that took its number.
            fd = _lib.check(_fn("gpufile_fd")(h, 0), filename=self.name)
            return fcntl.fcntl(fd, fcntl.F_GETFL)
        return self._call(flags)

    def remote_info(self):
        """What this remote object's handle did since it was opened, as a
        dict: url (redacted: no user information, no query), kind ("http",
        "s3", "presigned URL"), size, etag (None when the server gave no
        strong one), region, credentials (where they came from, never
        their values), signed, and the counts requests (redirect hops
        included), retries, ranges, bytes, failures, redirects, connects.
        OSError (ENOTSUP) for a local file."""
        out = RemoteFileInfo()
        rc = self._call(_lib.fn("gpufile_remote_file_info", _OPTIONAL_DECLS),
                        ctypes.byref(out))
        _lib.check(rc, filename=self.name)
        return _remote.info(out)

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
