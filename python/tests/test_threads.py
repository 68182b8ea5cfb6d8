"""File and Future across threads: close() while other threads read, a
Future that outlives its File, and calls after close. Every loop is bounded
and every wait has a watchdog that fails the test instead of hanging it."""
import errno
import gc
import threading
import time

import numpy as np
import pytest

import gpufile

WATCHDOG_S = 120  # a deadlock fails here; a pass takes well under a second


def _run_in_thread(fn):
    """Runs fn in a daemon thread; fails the test when it does not end
    within WATCHDOG_S (a deadlock), re-raises what it raised."""
    out = {}

    def body():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: B902 - handed to the test thread
            out["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(WATCHDOG_S)
    assert not t.is_alive(), "deadlock: %r did not return in %ds" % (fn, WATCHDOG_S)
    if "error" in out:
        raise out["error"]
    return out.get("value")


def _wait_until(pred):
    """Polls pred (a state another thread sets without notifying anyone)
    until it holds; fails the test after WATCHDOG_S."""
    deadline = time.monotonic() + WATCHDOG_S
    while not pred():
        assert time.monotonic() < deadline, "%r never held" % pred
        time.sleep(0.001)


def _close_during_call(monkeypatch, owner, module, getter, cname, call,
                       log=None, expect=("call", "return", "free")):
    """Runs call() in a thread and holds it inside the C function cname
    (what module.getter(cname) returns) until owner.close(), run in a
    second thread, has begun; then lets it go on. Returns what call()
    returned, once the order of events in log is expect: by default, the
    C call left the library before the handle was freed. A handle freed
    under the call is not passed to the library (that would crash the
    test run): the call records "used after free" instead."""
    log = [] if log is None else log
    inside = threading.Event()
    h = owner._h
    real_get = getattr(module, getter)

    def get(name, *rest):
        f = real_get(name, *rest)
        if name != cname:
            return f

        def held(ptr, *args):
            log.append("call")
            inside.set()
            _wait_until(lambda: h.state != "open")  # close() has begun
            if "free" in log:
                log.append("used after free")
                return -errno.EBADF
            rc = f(ptr, *args)
            log.append("return")
            return rc
        return held

    real_free = h.free

    def free(ptr):
        log.append("free")
        return real_free(ptr)

    monkeypatch.setattr(module, getter, get)
    h.free = free
    out = {}

    def body():
        try:
            out["value"] = call()
        except BaseException as e:  # noqa: B902 - reported below
            out["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    assert inside.wait(WATCHDOG_S)
    _run_in_thread(owner.close)
    t.join(WATCHDOG_S)
    assert not t.is_alive()
    monkeypatch.undo()
    assert log == list(expect), (log, out)
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_mmap_close_waits_for_a_read_in_flight(monkeypatch, data_file):
    """Mmap.read() in one thread, Mmap.close() in another: close() freed
    the handle under the read, which then segfaulted in
    gpufile_mmap_pread. Now close() waits for the read to leave the
    library, and later calls raise the closed-Mmap ValueError."""
    from gpufile import _mmap

    path, data = data_file
    m = gpufile.Mmap(path)
    buf = bytearray(4096)
    n = _close_during_call(monkeypatch, m, _mmap, "_f", "gpufile_mmap_pread",
                           lambda: m.read(buf, 4096, 8192))
    assert n == 4096 and buf == data[8192:8192 + 4096].tobytes()
    assert m.closed
    for call in (lambda: m.read(buf), lambda: m.pread(buf), m.file_size,
                 m.path_info):
        with pytest.raises(ValueError, match="I/O operation on closed Mmap"):
            call()


@pytest.mark.parametrize("what", ["fd", "fileno", "page_cache_info",
                                  "drop_file_page_cache"])
def test_file_helpers_hold_the_file_open(monkeypatch, data_file, what):
    """fd(), fileno(), page_cache_info(f) and drop_file_page_cache(f)
    passed the raw handle to C without entering it: a close() in another
    thread freed it under them (EBADF naming a garbage path, or the
    descriptor number of a closed file)."""
    from gpufile import _file, _page_cache

    path, data = data_file
    f = gpufile.File(path)
    module, getter, cname, call = {
        "fd": (_file, "_fn", "gpufile_fd", f.fd),
        "fileno": (_file, "_fn", "gpufile_fd", f.fileno),
        "page_cache_info": (_page_cache, "fn", "gpufile_page_cache_info",
                            lambda: gpufile.page_cache_info(f, 0, 4096)),
        "drop_file_page_cache": (_page_cache, "fn", "gpufile_drop_page_cache",
                                 lambda: gpufile.drop_file_page_cache(f)),
    }[what]
    got = _close_during_call(monkeypatch, f, module, getter, cname, call)
    if what == "page_cache_info":
        assert got[1] == 4096
    elif what in ("fd", "fileno"):
        assert got >= 0
    assert f.closed
    with pytest.raises(ValueError, match="I/O operation on closed file"):
        call()


def test_open_flags_holds_the_file_open(monkeypatch, data_file):
    """open_flags() took fileno() and then called fcntl() on it with the
    file no longer held: a close() between the two closed the descriptor
    (EBADF, or the flags of another file that took its number). fcntl
    is held here until the handle is closed or this thread still counts
    as a user of it; the flags must be read before the handle is freed."""
    import fcntl
    import os

    from gpufile import _file

    path, _ = data_file
    f = gpufile.File(path)
    h, log, real_fcntl = f._h, [], fcntl.fcntl

    def held_fcntl(fd, op, *rest):
        me = threading.get_ident()
        with h.cond:
            assert h.cond.wait_for(lambda: me in h.users or h.state == "closed",
                                   WATCHDOG_S)
        log.append("fcntl")
        return real_fcntl(fd, op, *rest)

    monkeypatch.setattr(fcntl, "fcntl", held_fcntl)
    flags = _close_during_call(monkeypatch, f, _file, "_fn", "gpufile_fd",
                               f.open_flags, log,
                               ("call", "return", "fcntl", "free"))
    assert flags & os.O_ACCMODE == os.O_RDONLY


def test_close_while_other_threads_read(data_file):
    """Every read either completes with the right bytes or raises the
    closed-file ValueError; never EBADF, never a use-after-free (run under
    ASan by scripts/test.sh), and close() returns only after the readers'
    calls have left the library."""
    path, data = data_file
    want = data[:1 << 20]
    for _ in range(40):
        f = gpufile.File(path)
        started = threading.Barrier(3)
        results = []

        def reader():
            out = np.zeros(1 << 20, dtype=np.uint8)
            started.wait()
            for _ in range(10000):  # bounded; ends at the first closed error
                try:
                    n = f.read(out)
                except ValueError as e:
                    results.append(("closed", str(e)))
                    return
                except BaseException as e:  # noqa: B902 - reported below
                    results.append(("error", repr(e)))
                    return
                if n != out.size or not np.array_equal(out, want):
                    results.append(("bytes", n))
                    return
            results.append(("never closed", None))

        threads = [threading.Thread(target=reader, daemon=True) for _ in range(2)]
        for t in threads:
            t.start()
        started.wait()
        _run_in_thread(f.close)
        for t in threads:
            t.join(WATCHDOG_S)
            assert not t.is_alive()
        assert f.closed
        for kind, detail in results:
            assert kind == "closed", (kind, detail)
            assert "I/O operation on closed file" in detail


def test_calls_after_close_raise_value_error(data_file, tmp_path):
    path, _ = data_file
    f = gpufile.File(path)
    f.close()
    for call in (lambda: f.read(bytearray(8)), lambda: f.pread(bytearray(8)),
                 lambda: f.write(b"x"), lambda: f.pwrite(b"x"),
                 f.size, f.sync, f.path_info):
        with pytest.raises(ValueError, match="I/O operation on closed file"):
            call()
    f.close()  # again: nothing


def test_close_waits_for_futures_in_flight(data_file):
    path, data = data_file
    f = gpufile.File(path)
    outs = [np.zeros(1 << 20, dtype=np.uint8) for _ in range(4)]
    futs = [f.pread(o, file_offset=i << 20) for i, o in enumerate(outs)]
    _run_in_thread(f.close)
    # The requests ended before close() returned: the bytes are there
    # before any get(), and the Futures still hand out their results.
    for i, o in enumerate(outs):
        assert np.array_equal(o, data[i << 20:(i + 1) << 20])
    assert [fu.get() for fu in futs] == [1 << 20] * 4


def test_future_outlives_its_file(data_file):
    """gpufile.File(p).pread(a, 10, 0).get(): the Future holds the last
    reference to the File; dropping it must not deadlock (issue 10 item 7)."""
    path, data = data_file
    a = bytearray(10)
    assert _run_in_thread(lambda: gpufile.File(path, "r").pread(a, 10, 0).get()) == 10
    assert a == data[:10].tobytes()
    # done() first, then get(); and a Future dropped without get().
    b = bytearray(10)

    def done_then_get():
        fut = gpufile.File(path).pread(b, 10, 5)
        while not fut.done():  # bounded by the read's end
            pass
        return fut.get()

    assert _run_in_thread(done_then_get) == 10
    assert b == data[5:15].tobytes()
    _run_in_thread(lambda: gpufile.File(path).pread(bytearray(10)) and None)
    gc.collect()


def test_future_and_file_in_a_garbage_cycle(data_file):
    """A cycle File -> list -> Future -> File, collected by the GC with the
    request still in flight or done: no deadlock, no crash."""
    path, _ = data_file

    def make_cycles():
        for _ in range(20):
            f = gpufile.File(path)
            keep = [f.pread(np.zeros(1 << 20, dtype=np.uint8))]
            f.cycle = keep
            keep.append(f)
        gc.collect()

    _run_in_thread(make_cycles)


def test_get_from_many_threads(data_file):
    path, data = data_file
    out = np.zeros(1 << 20, dtype=np.uint8)
    fut = gpufile.File(path).pread(out)
    got = []
    threads = [threading.Thread(target=lambda: got.append(fut.get()), daemon=True)
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WATCHDOG_S)
        assert not t.is_alive()
    assert got == [1 << 20] * 4
    assert np.array_equal(out, data[:1 << 20])


def test_forked_child_can_close_a_file_another_thread_was_using(data_file):
    """A thread of the parent had a call in flight at fork(); the child has
    no such thread, so its close() must not wait for it."""
    import os

    path, _ = data_file
    f = gpufile.File(path)
    entered, leave = threading.Event(), threading.Event()

    def user():  # holds a use of the handle as a read in flight does
        f._h.enter()
        entered.set()
        leave.wait(WATCHDOG_S)
        f._h.leave()

    t = threading.Thread(target=user, daemon=True)
    t.start()
    assert entered.wait(WATCHDOG_S)
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 when close() returned
        code = 1
        try:
            import faulthandler
            faulthandler.dump_traceback_later(60, exit=True)
            assert f.size() == len(_)
            f.close()
            code = 0 if f.closed else 2
        finally:
            os._exit(code)
    leave.set()
    t.join(WATCHDOG_S)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    f.close()


@pytest.mark.parametrize("kind", ["File", "Mmap"])
def test_interrupt_after_submit_keeps_the_request(monkeypatch, data_file,
                                                  kind):
    """An exception (KeyboardInterrupt) after the library took a pread
    and before its Future existed released the buffer under the running
    request, and the C future was never freed. The Future now exists
    before the submit: its finaliser waits for the request (frees the C
    future) and only then lets go of the buffer."""
    from gpufile import _buffers, _lib, _mmap

    path, data = data_file
    gc.collect()  # other tests' garbage Futures are freed before the log
    lib, log = _lib.lib(), []
    real_free, real_release = lib.gpufile_future_free, _buffers.Buffer.release
    monkeypatch.setattr(lib, "gpufile_future_free",
                        lambda cf: (log.append("free"), real_free(cf))[1])

    def release(b):
        if b._view is not None:  # the export ends here (once)
            log.append("release")
        real_release(b)

    monkeypatch.setattr(_buffers.Buffer, "release", release)

    def interrupted(real):
        def submit(*args):
            assert real(*args) == 0
            log.append("submitted")
            raise KeyboardInterrupt  # as a signal on the way back
        return submit

    if kind == "File":
        owner = gpufile.File(path)
        monkeypatch.setattr(lib, "gpufile_pread_async",
                            interrupted(lib.gpufile_pread_async))
    else:
        owner = gpufile.Mmap(path)
        real_f = _mmap._f
        monkeypatch.setattr(_mmap, "_f", lambda name: (
            interrupted(real_f(name)) if name == "gpufile_mmap_pread_async"
            else real_f(name)))
    out = np.zeros(1 << 20, dtype=np.uint8)
    try:
        owner.pread(out)
    except KeyboardInterrupt:
        pass  # its traceback, which holds the Future, goes here
    gc.collect()
    assert log == ["submitted", "free", "release"]
    assert np.array_equal(out, data[:1 << 20])
    monkeypatch.undo()
    owner.close()


def _fork_and_check(check):
    """Runs check() in a forked child; its exit status is 0 when check()
    returned, 2 when it raised, 1 when it hung (faulthandler's watchdog
    ends the child). Returns the child's pid, for _child_passed()."""
    import os

    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            import faulthandler
            faulthandler.dump_traceback_later(WATCHDOG_S, exit=True)
            check()
            code = 0
        except BaseException:  # noqa: B902 - the exit status reports it
            import traceback
            traceback.print_exc()
        finally:
            os._exit(code)
    return pid


def _child_passed(pid):
    import os

    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def test_forked_child_of_a_close_waiting_for_calls(data_file):
    """A close() of another thread, still waiting for a call to leave, at
    fork(): the child's copy of the file was left "closing", and its own
    close() waited for the parent's thread for ever. That close() is not
    the child's: the file is open there, and closes."""
    path, data = data_file
    f = gpufile.File(path)
    f._h.enter()  # a call in flight, so that close() waits
    closer = threading.Thread(target=f.close, daemon=True)
    closer.start()
    _wait_until(lambda: f._h.state == "closing")

    def check():
        assert not f.closed
        assert f.size() == len(data)
        f.close()
        assert f.closed

    pid = _fork_and_check(check)
    f._h.leave()
    closer.join(WATCHDOG_S)
    assert not closer.is_alive() and f.closed
    _child_passed(pid)


def test_forked_child_of_a_close_freeing_the_handle(data_file):
    """A close() of another thread inside the C free function at fork():
    the child's copy of the handle may be half freed, so it is closed
    there (never handed to the library again), and close() returns."""
    path, _ = data_file
    f = gpufile.File(path)
    inside, go = threading.Event(), threading.Event()
    real_free = f._h.free

    def free(ptr):
        inside.set()
        go.wait(WATCHDOG_S)
        return real_free(ptr)

    f._h.free = free
    closer = threading.Thread(target=f.close, daemon=True)
    closer.start()
    assert inside.wait(WATCHDOG_S)

    def check():
        assert f.closed
        f.close()  # returns: nothing left to close here
        with pytest.raises(ValueError, match="closed file"):
            f.size()

    pid = _fork_and_check(check)
    go.set()
    closer.join(WATCHDOG_S)
    assert not closer.is_alive() and f.closed
    _child_passed(pid)


def test_forked_child_of_a_future_being_waited_for(monkeypatch, data_file):
    """A thread waiting in Future.get() at fork() holds the Future's lock:
    in the child nothing released it, so get() hung and done() said False
    for ever. The child starts the lock afresh."""
    import os

    from gpufile import _lib

    path, data = data_file
    lib, parent = _lib.lib(), os.getpid()
    waiting, go = threading.Event(), threading.Event()
    real_wait = lib.gpufile_future_wait

    def wait(cf):  # holds get() inside the lock, in the parent only
        if os.getpid() == parent:
            waiting.set()
            go.wait(WATCHDOG_S)
        return real_wait(cf)

    monkeypatch.setattr(lib, "gpufile_future_wait", wait)
    out = np.zeros(1 << 20, dtype=np.uint8)
    with gpufile.File(path) as f:
        fut = f.pread(out)
        getter = threading.Thread(target=fut.get, daemon=True)
        getter.start()
        assert waiting.wait(WATCHDOG_S)

        def check():
            try:
                assert fut.get() == 1 << 20
            except OSError as e:  # in flight at the fork: ended there
                assert e.errno == errno.ECANCELED, e
            assert fut.done()

        pid = _fork_and_check(check)
        go.set()
        getter.join(WATCHDOG_S)
        assert not getter.is_alive()
        assert fut.get() == 1 << 20
    _child_passed(pid)
