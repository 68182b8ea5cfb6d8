"""Owned: a C object owned by a Python object, and the calls in flight on
it. Every Python object of the binding that holds a C pointer keeps it in
one: File (gpufile_t), Mmap (gpufile_mmap_t), the safetensors Header
(gpufile_safetensors_t), BatchRead (gpufile_batch_t), Future
(gpufile_future_t) and StreamFuture (the count the stream writes)."""

import os
import threading
import time
import weakref

# States: _CLOSING while close() waits for the calls in flight, _FREEING
# while it runs the free function.
_OPEN, _CLOSING, _FREEING, _CLOSED = "open", "closing", "freeing", "closed"


class Owned:
    """The rule (one for every object of the binding that owns a C object).

    These objects may be shared by threads, and a C object freed under a
    call still using it, or freed twice, corrupts the heap: issue 10 item 6
    (File.read racing close(): a use after free under ASan, EBADF, another
    file's descriptor), issue 32 items 1 and 2 (safe_open.close() under a
    get_tensor(): a segfault; BatchRead.wait() from two threads, or poll()
    beside a wait(): "double free or corruption", a hang, a bogus EINVAL).
    So:

    1. The pointer reaches the library only inside a call counted here:
       shared calls (call(), hold(), enter()/leave()) run together;
       exclusive calls (enter(exclusive=True)) run alone, for C functions
       that must not run beside any other on the object: a batch is used
       "by one thread at a time" (gpufile.h), and a future's wait records
       an outcome once. Nothing hands the raw pointer out otherwise.
    2. close() runs the free function exactly once, and only once no call
       is in flight: it waits for them. From the moment it begins, a new
       call raises ValueError("I/O operation on closed <what>"); a
       close() of another thread meanwhile waits for the first and
       returns None; a close() again returns None. A close() from within
       a call of the same thread (a signal handler, another object's
       finaliser), or from within its own close(), raises RuntimeError:
       it could never end.
       A close() interrupted while it waits (KeyboardInterrupt) frees
       nothing and leaves the object open.
    3. lock (cond's) guards the state and the counts only: it is never
       held across a call into the library, the free function, or anything
       that may run a finaliser. What the free function lets go of (a
       buffer, a File whose finaliser closes it) it returns, and the caller
       lets go of it after close() has returned, with nothing held.
    4. A call holds its owner for as long as it is counted (a method of
       the owner runs it; a BatchRead keeps each File it entered until it
       leaves it). So a finaliser (__del__), which runs only when no
       other reference exists, cannot race a call; it calls
       close(finalising=True), which frees in spite of records an
       interrupted call left (an exception raised by a signal handler
       between a record and its try, where no code of the binding can
       catch it).
    5. What the C object may write while it runs (pins: a batch's
       buffers, a request's) is kept until the free function has
       returned; where an interrupt leaves that unknown, for the life of
       the process: a leak, never memory let go under the library.

    An owner says which of its calls are exclusive; the others are shared.
    A Buffer (_buffers) is no such object: each is held by one call or one
    request, and let go by it under its owner's rule. cufile_driver holds
    no C object (the driver is the library's, behind its own lock).
    ptr is what the calls get: a C pointer, or for a Future the ctypes box
    the library writes the C future into at submit.
    """

    def __init__(self, ptr, free, what, pins=None):
        self.ptr = ptr
        # free(ptr) frees the C object; what it returns close() returns.
        # A plain function, never a bound method of the owner: the owner
        # holds this object, and a cycle through it would leave the
        # owner's finaliser to the garbage collector, which may run the
        # finaliser of a buffer the library still writes before it (an
        # owner whose free function needs its state passes it to close()).
        self.free = free
        self.what = what  # "file 'a.bin'": for the messages
        # Blocks take lock itself, a C lock: entered through the Condition
        # (its __enter__ is Python code), an exception a signal handler
        # raised (Ctrl-C) as the lock was taken left it held for ever,
        # and every later call, close() and finaliser waited for it.
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.state = _OPEN
        self.users = {}  # thread ident -> shared calls of it in flight
        self.exclusive_by = None  # the thread ident in an exclusive call
        self.waiting = 0  # calls waiting in enter() for others to end
        self.closing_by = None  # the thread ident in close(), once begun
        # What the C object may still write (a batch's buffers, a
        # request's): kept here, and this object kept in _unfreed, until
        # the free function has returned. An exception raised where no
        # code of the binding could catch it (Ctrl-C between a record and
        # its try, at the start of a free function) left the owner dropped
        # with its C object running: its finaliser released the buffers
        # under the library's writes (a segfault in a later allocation).
        # Cut short so, they are kept for the life of the process instead.
        self.pins = pins
        if pins is not None:
            _unfreed.add(self)
        _owned.add(self)

    @property
    def closed(self):
        return self.state != _OPEN

    def _closed(self):
        return ValueError("I/O operation on closed " + self.what)

    def _same_thread(self, what):
        # Waiting for this thread's own call would never end.
        return RuntimeError("%s of %s from within a call on it in the same "
                            "thread" % (what, self.what))

    def enter(self, exclusive=False, blocking=True, timeout=None):
        """Begins a call: returns ptr, or None when not blocking (or after
        timeout seconds) another call keeps it out. Raises ValueError once
        close() has begun. Pair with leave(exclusive)."""
        me = threading.get_ident()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while True:
                if self.state != _OPEN:
                    raise self._closed()
                if self.exclusive_by is None and not (exclusive and self.users):
                    break
                if self.exclusive_by == me or (exclusive and self.users.get(me)):
                    raise self._same_thread("a call")
                if not blocking:
                    return None
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self.waiting += 1
                try:
                    self.cond.wait(left)
                finally:
                    self.waiting -= 1
            if exclusive:
                self.exclusive_by = me
            else:
                self.users[me] = self.users.get(me, 0) + 1
            return self.ptr

    def leave(self, exclusive=False):
        me = threading.get_ident()
        with self.lock:
            if exclusive:
                assert self.exclusive_by == me
                self.exclusive_by = None
            else:
                n = self.users[me] - 1
                if n:
                    self.users[me] = n
                    return
                del self.users[me]
            if self.waiting or self.state != _OPEN:  # a call or close() waits
                self.cond.notify_all()

    def call(self, fn, *args):
        """fn(ptr, *args) as a shared call."""
        ptr = self.enter()
        try:
            return fn(ptr, *args)
        finally:
            self.leave()

    def hold(self):
        """with owned.hold() as ptr: a shared call for the block."""
        return _Hold(self)

    def close(self, free=None, finalising=False):
        """Frees the C object once no call is in flight (see the rule),
        with free (default: the one given at creation); returns what it
        returned, or None when this call did not free it. The owner's
        finaliser passes finalising=True (rule 4)."""
        me = threading.get_ident()
        mine = freed = False
        try:
            with self.lock:
                if finalising:
                    # No reference to the owner is left, so no call of it
                    # is in flight (rule 4), nor another close(): a record
                    # left is that of a call an exception ended between
                    # its record in enter() and the try that leaves it
                    # (Ctrl-C). Heeded, the finaliser raised RuntimeError
                    # ("from within a call") and the C object was never
                    # freed.
                    self.users, self.exclusive_by = {}, None
                    if self.state == _CLOSING and self.closing_by == me:
                        self.state, self.closing_by = _OPEN, None
                    elif self.state != _OPEN:
                        # Closed; or freeing, or closing in another
                        # thread, which rule 4 rules out: left to that
                        # close().
                        return None
                while self.state != _OPEN:
                    if self.state == _CLOSED:
                        return None
                    if self.closing_by == me:  # a signal handler inside it
                        raise self._same_thread("close()")
                    # By another thread: wait for it (it may be
                    # interrupted, leaving the object open: then close it
                    # here).
                    self.cond.wait_for(lambda: self.state in (_OPEN, _CLOSED))
                if self.users.get(me) or self.exclusive_by == me:
                    raise self._same_thread("close()")
                self.state, self.closing_by = _CLOSING, me
                try:
                    self.cond.wait_for(lambda: not self.users
                                       and self.exclusive_by is None)
                except BaseException:
                    # Interrupted (KeyboardInterrupt): nothing was freed,
                    # the object stays open; left closing, every later
                    # close() waited for this one for ever.
                    self.state, self.closing_by = _OPEN, None
                    self.cond.notify_all()
                    raise
                # One statement, no point between: the finally below must
                # know whether this call owns the freeing (the try began
                # after the lock's release, a point where Ctrl-C left the
                # object freeing for ever, the free function never run).
                self.state, mine = _FREEING, True
                ptr = self.ptr
            out = (free or self.free)(ptr)
            freed = True
            return out
        finally:
            if mine:
                pins = None
                with self.lock:
                    self.ptr = None
                    self.state, self.closing_by = _CLOSED, None
                    if freed:  # else it may still run: pins kept
                        pins, self.pins = self.pins, None
                        _unfreed.discard(self)
                    self.cond.notify_all()
                # Let go with nothing held (rule 3): a buffer's
                # finaliser may run here.
                del pins


class Owner:
    """The base of every owner of an Owned: one cannot be copied or
    pickled. A copy (copy.copy, which the default reduce made) shared
    the original's Owned, so dropping it ran the finaliser, which frees in
    spite of the calls in flight (rule 4 holds for one owner per Owned):
    another thread's size() or Future.get() used the freed C object
    (ASan: heap-use-after-free). Python's own open files refuse the same
    way."""

    __slots__ = ()

    def __reduce_ex__(self, protocol):
        raise TypeError("cannot copy or pickle a %s object: it owns a C "
                        "object (open another)" % type(self).__name__)


class _Hold:
    __slots__ = ("owned",)

    def __init__(self, owned):
        self.owned = owned

    def __enter__(self):
        return self.owned.enter()

    def __exit__(self, *exc):
        self.owned.leave()
        return False


_owned = weakref.WeakSet()  # every Owned, for _after_fork_in_child
_unfreed = set()  # each Owned with pins, until its C object is freed


def _after_fork_in_child():
    """In a forked child only the forking thread exists, and it was in no
    call (it was running os.fork): counts of calls in flight of the other
    threads would make close() wait forever, and a lock one of them held
    would never be released. Start both afresh.

    A close() another thread had begun is that thread's, and it does not
    exist here either: left _CLOSING, the child's close() waited for it
    forever. While it still waited for calls to leave, the object was
    whole: the child's copy is open. Once it was freeing it, the child's
    copy may be half freed: it is closed, what is left of it leaked rather
    than used.

    An exclusive call of another thread (a Future.get() waiting) would
    never end either: get() hung, done() said False for ever (the child's
    copy of a request ends with -ECANCELED, pool.c)."""
    for o in list(_owned):
        o.lock = threading.Lock()
        o.cond = threading.Condition(o.lock)
        o.users = {}
        o.exclusive_by = None
        o.waiting = 0
        o.closing_by = None
        if o.state == _CLOSING:
            o.state = _OPEN
        elif o.state == _FREEING:
            o.state, o.ptr = _CLOSED, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
