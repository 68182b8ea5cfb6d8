"""Every Python object that owns a C object, used from several threads at
once (issue 32 items 1 and 2): safe_open (its safetensors header),
BatchRead, Future, File and Mmap, with close() and the calls that free
racing each other.

The C functions are replaced by checking wrappers (_Checked): a call on an
object already freed, a second free, or a call beside another one on an
object the library lets one thread use at a time (a batch) is recorded
instead of made, so that the test run never corrupts its heap and the
assertion says which rule was broken. Under the python-asan stage of
scripts/test.sh the ASan runtime watches the real calls as well.

What the tests assert never depends on how the threads happen to be
scheduled: every call either succeeds (with the right bytes) or raises the
documented closed-object ValueError, and the C object is freed exactly
once. Where a test needs one thread inside a C call while another starts,
it holds the first there until the second has got as far as it can: into
the library, or blocked waiting (_stuck)."""
import ctypes
import errno
import sys
import threading
import time

import numpy as np
import pytest

import gpufile
import gpufile.safetensors as st
import gpufile.safetensors.numpy as stn
from gpufile import _batch, _lib
from gpufile.safetensors import _core

WATCHDOG_S = 120  # a deadlock fails here; a pass takes well under a second


def _wait_until(pred):
    deadline = time.monotonic() + WATCHDOG_S
    while not pred():
        assert time.monotonic() < deadline, "%r never held" % pred
        time.sleep(0.001)


def _stuck(thread):
    """True when thread has ended or waits on a lock or condition (a
    frame of threading.py's wait or of Lock.acquire: it can get no
    further until another thread lets it)."""
    if not thread.is_alive():
        return True
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        code = frame.f_code
        if code.co_filename.endswith("threading.py") and code.co_name in (
                "wait", "wait_for", "_wait_for_tstate_lock"):
            return True
        frame = frame.f_back
    return False


class _Thread(threading.Thread):
    """Runs fn; keeps what it returned or raised."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn, self.value, self.error = fn, None, None

    def run(self):
        try:
            self.value = self.fn()
        except BaseException as e:  # noqa: B902 - the test looks at it
            self.error = e

    def finish(self):
        self.join(WATCHDOG_S)
        assert not self.is_alive(), "deadlock: %r did not return" % self.fn
        return self


def _start(fn):
    t = _Thread(fn)
    t.start()
    return t


class _Checked:
    """Checking wrappers of the C functions of one C object."""

    def __init__(self, one_at_a_time=False):
        self.one_at_a_time = one_at_a_time
        self.lock = threading.Lock()
        self.serial = threading.Lock()  # real calls of a one-at-a-time object
        self.ptr = None  # what the create function made
        self.frees = []
        self.busy = 0
        self.calls = []
        self.violations = []
        self.hooks = {}  # name -> fn() run inside the call, before the real one

    @staticmethod
    def _addr(p):
        return p.value if isinstance(p, ctypes.c_void_p) else p

    def create(self, name, real):
        def call(out, *args):
            rc = real(out, *args)
            if rc == 0:
                self.ptr = out._obj.value
            return rc
        call.__name__ = name
        return call

    def use(self, name, real, fail=-errno.EBADF):
        def call(*args):
            with self.lock:
                self.calls.append(name)
                if self.one_at_a_time and self.busy:
                    self.violations.append("%s beside another call" % name)
                self.busy += 1
            try:
                hook = self.hooks.get(name)
                if hook is not None:
                    hook()
                with self.lock:
                    if self.frees:
                        self.violations.append("%s after free" % name)
                        return fail
                if self.one_at_a_time:
                    with self.serial:
                        return real(*args)
                return real(*args)
            finally:
                with self.lock:
                    self.busy -= 1
        call.__name__ = name
        return call

    def free(self, name, real):
        def call(p):
            p = self._addr(p)
            with self.lock:
                self.calls.append(name)
                if self.frees:
                    self.violations.append("%s again (double free)" % name)
                    return 0
                if self.busy:
                    self.violations.append("%s under a call in flight" % name)
                self.frees.append(p)
            if self.one_at_a_time:
                with self.serial:
                    return real(p)
            return real(p)
        call.__name__ = name
        return call

    def freed_once(self):
        assert self.violations == [], self.violations
        assert self.ptr is not None and self.frees == [self.ptr], (self.frees, self.ptr)


# ---- safe_open ----------------------------------------------------------

def _checkpoint(tmp_path):
    rng = np.random.default_rng(5)
    tensors = {"a": rng.standard_normal((64, 256)).astype(np.float32),
               "b": rng.integers(0, 1000, (300,), dtype=np.int64)}
    p = str(tmp_path / "t.safetensors")
    stn.save_file(tensors, p)
    return p, tensors


def _checked_safetensors(monkeypatch):
    lib = _core._c()  # the prototypes are set before the wrappers go in
    c = _Checked()
    monkeypatch.setattr(lib, "gpufile_safetensors_open",
                        c.create("open", lib.gpufile_safetensors_open))
    for name in ("gpufile_safetensors_load_tensors", "gpufile_pread",
                 "gpufile_pread_async", "gpufile_pread_gather",
                 "gpufile_safetensors_handle"):
        fail = None if name == "gpufile_safetensors_handle" else -errno.EBADF
        monkeypatch.setattr(lib, name, c.use(name, getattr(lib, name), fail))
    monkeypatch.setattr(lib, "gpufile_safetensors_close",
                        c.free("gpufile_safetensors_close",
                               lib.gpufile_safetensors_close))
    return c


@pytest.mark.parametrize("what", ["get_tensor", "get_slice"])
def test_safe_open_close_waits_for_a_read(monkeypatch, tmp_path, what):
    """close() while another thread was inside get_tensor() (the load) or
    a slice read (a pread on the file's handle) freed the C object under
    it: a segfault, a heap use after free under ASan. close() now waits
    for the read, which returns its bytes; later reads raise ValueError."""
    p, tensors = _checkpoint(tmp_path)
    c = _checked_safetensors(monkeypatch)
    f = st.safe_open(p, framework="numpy", device="cpu")
    cname, read, want = {
        "get_tensor": ("gpufile_safetensors_load_tensors",
                       lambda: f.get_tensor("a"), tensors["a"]),
        "get_slice": ("gpufile_pread", lambda: f.get_slice("a")[3:5],
                      tensors["a"][3:5]),
    }[what]
    inside, closer = threading.Event(), []

    def hold():  # the read stays in the library until close() can go no further
        inside.set()
        _wait_until(lambda: closer and (c.frees or _stuck(closer[0])))

    c.hooks[cname] = hold
    reader = _start(read)
    assert inside.wait(WATCHDOG_S)
    closer.append(_start(f.close))
    closer[0].finish()
    reader.finish()
    assert closer[0].error is None, closer[0].error
    c.freed_once()
    assert reader.error is None, reader.error
    assert np.array_equal(reader.value, want)
    for call in (lambda: f.get_tensor("a"), lambda: f.get_slice("a"),
                 lambda: f.load_all()):
        with pytest.raises(ValueError, match="I/O operation on closed "
                                             "safetensors file"):
            call()
    f.close()  # again: nothing
    assert c.frees == [c.ptr]


def test_safe_open_readers_and_closers(monkeypatch, tmp_path):
    """Threads reading tensors and slices while two others close the file:
    every read returns the right bytes or raises the closed-file
    ValueError, and the C object is freed once, after the last read."""
    p, tensors = _checkpoint(tmp_path)
    for _ in range(10):
        with monkeypatch.context() as m:
            c = _checked_safetensors(m)
            f = st.safe_open(p, framework="numpy", device="cpu")
            go = threading.Barrier(6)
            bad = []

            def reader(k):
                go.wait()
                for i in range(2000):  # bounded; ends at the first closed error
                    try:
                        if (i + k) % 2:
                            ok = np.array_equal(f.get_tensor("b"), tensors["b"])
                        else:
                            ok = np.array_equal(f.get_slice("a")[:, 7:9],
                                                tensors["a"][:, 7:9])
                    except ValueError as e:
                        if "I/O operation on closed safetensors file" not in str(e):
                            bad.append(repr(e))
                        return
                    if not ok:
                        bad.append("wrong bytes")
                        return

            def closer():
                go.wait()
                f.close()

            threads = ([_start(lambda k=k: reader(k)) for k in range(4)]
                       + [_start(closer) for _ in range(2)])
            for t in threads:
                assert t.finish().error is None, t.error
            assert bad == []
            c.freed_once()


# ---- BatchRead ----------------------------------------------------------

def _checked_batch(monkeypatch):
    real_fn = _batch._fn
    c = _Checked(one_at_a_time=True)
    wrapped = {}
    for name in ("gpufile_batch_submit", "gpufile_batch_poll",
                 "gpufile_batch_wait", "gpufile_batch_result",
                 "gpufile_batch_errmsg"):
        fail = None if name == "gpufile_batch_errmsg" else -errno.EBADF
        wrapped[name] = c.use(name, real_fn(name), fail)
    wrapped["gpufile_batch_create"] = c.create("create",
                                              real_fn("gpufile_batch_create"))
    wrapped["gpufile_batch_free"] = c.free("gpufile_batch_free",
                                           real_fn("gpufile_batch_free"))
    wrapped["gpufile_config_get"] = real_fn("gpufile_config_get")
    # A complete batch is kept for the next BatchRead rather than freed
    # (_batch._give_back): that is its end here, checked as a free is
    # (once, under no call), and then it is freed. No kept batch is
    # taken: this one is made by the checked create.
    released = c.free("gpufile_batch_free", real_fn("gpufile_batch_free"))
    monkeypatch.setattr(_batch, "_give_back",
                        lambda p, cap, threads: released(p))
    _batch._drop_idle()
    monkeypatch.setattr(_batch, "_fn", lambda name: wrapped[name])
    return c


def _batch_of(f, n=16):
    bufs = [bytearray(4096) for _ in range(n)]
    return gpufile.BatchRead([(f, bufs[i], 4096, i * 4096) for i in range(n)]), bufs


@pytest.mark.parametrize("second", ["wait", "poll", "done", "results",
                                    "with-end"])
def test_batch_call_while_another_thread_waits(monkeypatch, data_file, second):
    """One thread inside wait(), another calling wait(), poll(), done(),
    results() or ending the with-block: both waits ran the batch and freed
    it (double free or corruption, a segfault, a hang, a bogus EINVAL),
    and poll() used the batch beside the wait (which the library allows
    one thread at a time) or after its free. Now the batch's calls run one
    at a time, the batch is freed once, and every call gives the batch's
    outcome."""
    path, data = data_file
    c = _checked_batch(monkeypatch)
    with gpufile.File(path) as f:
        b, bufs = _batch_of(f)
        inside, other = threading.Event(), []

        def hold():  # the first wait, until the other call got stuck or done
            if inside.is_set():
                return
            inside.set()
            _wait_until(lambda: other and (len(c.calls) > calls_before or
                                           _stuck(other[0])))

        c.hooks["gpufile_batch_wait"] = hold
        calls_before = len(c.calls) + 1  # + the first wait
        waiter = _start(b.wait)
        assert inside.wait(WATCHDOG_S)
        call = {"wait": b.wait, "poll": b.poll, "done": b.done,
                "results": b.results,
                "with-end": lambda: b.__exit__(None, None, None)}[second]
        other.append(_start(call))
        other[0].finish()
        waiter.finish()
        assert waiter.error is None, waiter.error
        assert other[0].error is None, other[0].error
        assert waiter.value == [4096] * 16
        got = other[0].value
        if second in ("wait", "results"):
            assert got == [4096] * 16
        elif second == "poll":
            assert 0 <= got <= 16
        c.freed_once()
        assert b.poll() == 16 and b.done() and b.wait() == [4096] * 16
        assert bufs[3] == data[3 * 4096:4 * 4096].tobytes()
    assert c.frees == [c.ptr]


def test_batch_many_threads(monkeypatch, data_file):
    """Threads waiting (some with a timeout), polling, taking results and
    ending the batch at once: the calls never overlap, the batch is freed
    once, and every wait returns the counts (or, with a timeout, raises
    TimeoutError)."""
    path, _ = data_file
    ops = ["wait", "wait-timeout", "poll", "done", "results", "end"] * 2
    with gpufile.File(path) as f:
        for _ in range(10):
            with monkeypatch.context() as m:
                c = _checked_batch(m)
                b, _bufs = _batch_of(f, 64)
                go = threading.Barrier(len(ops))

                def run(op):
                    go.wait()
                    for _ in range(20):
                        if op == "wait":
                            assert b.wait() == [4096] * 64
                        elif op == "wait-timeout":
                            try:
                                assert b.wait(timeout=0.001) == [4096] * 64
                            except TimeoutError:
                                pass
                        elif op == "poll":
                            assert 0 <= b.poll() <= 64
                        elif op == "done":
                            b.done()
                        elif op == "results":
                            assert b.results() == [4096] * 64
                        else:
                            b.__exit__(None, None, None)

                threads = [_start(lambda op=op: run(op)) for op in ops]
                for t in threads:
                    assert t.finish().error is None, t.error
                c.freed_once()


# ---- Future, File, Mmap -------------------------------------------------

def test_futures_got_done_and_closed_at_once(monkeypatch, data_file):
    """get() and done() from several threads while the Mmap that made the
    Futures closes (and finishes them): each C future is freed once, every
    get() returns the count, and the bytes are there."""
    path, data = data_file
    lib = _lib.lib()
    frees, lock = [], threading.Lock()
    real_free = lib.gpufile_future_free

    def free(cf):
        with lock:
            frees.append(cf)
        real_free(cf)

    monkeypatch.setattr(lib, "gpufile_future_free", free)
    for _ in range(10):
        del frees[:]
        m = gpufile.Mmap(path)
        outs = [np.zeros(1 << 18, dtype=np.uint8) for _ in range(4)]
        futs = [m.pread(o, offset=i << 18) for i, o in enumerate(outs)]
        go = threading.Barrier(6)

        def getter():
            go.wait()
            return [fu.get() for fu in futs]

        def poller():
            go.wait()
            for fu in futs:
                fu.done()

        def closer():
            go.wait()
            m.close()

        threads = ([_start(getter) for _ in range(3)] + [_start(poller)]
                   + [_start(closer) for _ in range(2)])
        for t in threads:
            assert t.finish().error is None, t.error
        for t in threads[:3]:
            assert t.value == [1 << 18] * 4
        assert len(frees) == 4 and len(set(frees)) == 4, frees
        for i, o in enumerate(outs):
            assert np.array_equal(o, data[i << 18:(i + 1) << 18])


@pytest.mark.parametrize("kind", ["Future", "BatchRead"])
def test_wait_with_timeout_while_another_thread_waits(monkeypatch, data_file,
                                                      kind):
    """get(timeout) of a Future (wait(timeout) of a batch) while another
    thread waits for it without one: the second waited for the first,
    however long, past its own timeout. It raises TimeoutError once its
    timeout is over, and a later get() (wait()) gives the outcome."""
    path, _ = data_file
    lib = _lib.lib()
    waiting, other = threading.Event(), []
    real = {"Future": lib.gpufile_future_wait,
            "BatchRead": _batch._fn("gpufile_batch_wait")}[kind]

    def held(*args):  # the first wait, until the second has ended
        if not waiting.is_set():
            waiting.set()
            _wait_until(lambda: other and not other[0].is_alive())
        return real(*args)

    if kind == "Future":
        monkeypatch.setattr(lib, "gpufile_future_wait", held)
    else:
        real_fn = _batch._fn
        monkeypatch.setattr(_batch, "_fn", lambda name: (
            held if name == "gpufile_batch_wait" else real_fn(name)))
    with gpufile.File(path) as f:
        if kind == "Future":
            obj = f.pread(np.zeros(1 << 20, dtype=np.uint8))
            wait, want = obj.get, 1 << 20
        else:
            obj, _bufs = _batch_of(f)
            wait, want = obj.wait, [4096] * 16
        first = _start(wait)
        assert waiting.wait(WATCHDOG_S)
        other.append(_start(lambda: wait(timeout=0.01)))
        other[0].finish()
        first.finish()
        assert isinstance(other[0].error, TimeoutError), other[0].error
        assert "not done after 0.01s" in str(other[0].error)
        assert first.error is None and first.value == want
        assert wait(timeout=0.01) == want


def _checked_open(monkeypatch, kind, path):
    """(_Checked, a File or Mmap of path opened through its wrappers)."""
    lib = _lib.lib()
    c = _Checked()
    opener, name = {"File": ("gpufile_open", "gpufile_close"),
                    "Mmap": ("gpufile_mmap_open", "gpufile_mmap_close")}[kind]
    if kind == "Mmap":
        gpufile.Mmap(path).close()  # its prototypes are set
    monkeypatch.setattr(lib, opener, c.create(opener, getattr(lib, opener)))
    monkeypatch.setattr(lib, name, c.free(name, getattr(lib, name)))
    return c, getattr(gpufile, kind)(path)


@pytest.mark.parametrize("kind", ["File", "Mmap", "safe_open", "BatchRead"])
def test_close_from_many_threads_frees_once(monkeypatch, data_file, tmp_path,
                                            kind):
    """close() (for a batch: the end of its with-block) from eight threads
    at once: the C object is freed once, every close() returns, and a
    later call raises the closed-object ValueError (a batch: gives its
    outcome)."""
    path, _ = data_file
    p, _ = _checkpoint(tmp_path)
    keep = gpufile.File(path)
    for _ in range(10):
        with monkeypatch.context() as m:
            if kind == "BatchRead":
                c = _checked_batch(m)
                obj, _bufs = _batch_of(keep)
                close, after = (lambda: obj.__exit__(None, None, None)), None
            elif kind == "safe_open":
                c = _checked_safetensors(m)
                obj = st.safe_open(p, framework="numpy", device="cpu")
                close, after = obj.close, lambda: obj.get_tensor("a")
            else:
                c, obj = _checked_open(m, kind, path)
                close = obj.close
                after = obj.size if kind == "File" else obj.file_size
            go = threading.Barrier(8)

            def run():
                go.wait()
                close()

            threads = [_start(run) for _ in range(8)]
            for t in threads:
                assert t.finish().error is None, t.error
            c.freed_once()
            if after is None:
                assert obj.wait() == [4096] * 16 and obj.poll() == 16
            else:
                with pytest.raises(ValueError, match="I/O operation on closed"):
                    after()
    keep.close()


@pytest.mark.parametrize("kind", ["File", "Mmap", "BatchRead"])
def test_a_record_an_interrupt_left_does_not_keep_the_finaliser_from_freeing(
        monkeypatch, data_file, kind):
    """Ctrl-C raised between a call's record (Owned.enter) and the try
    that leaves it leaves the call counted, the object unreferenced. Its
    finaliser raised RuntimeError ("from within a call") and freed
    nothing: a File's descriptor, or a running batch whose buffers were
    then let go under its writes (a segfault in a later allocation). No
    call can be in flight once no reference is left: it frees."""
    import gc
    path, _ = data_file
    keep = gpufile.File(path)
    with monkeypatch.context() as m:
        if kind == "BatchRead":
            c = _checked_batch(m)
            obj, _bufs = _batch_of(keep)
            owned, exclusive = obj._c, True
        else:
            c, obj = _checked_open(m, kind, path)
            owned, exclusive = obj._h, False
        owned.enter(exclusive=exclusive)  # the record an interrupt left
        with pytest.raises(RuntimeError, match="within a call"):
            owned.close()  # while the object lives, refused as before
        del obj, owned
        gc.collect()
        c.freed_once()
    keep.close()


@pytest.mark.parametrize("kind", ["File", "Future", "Mmap", "BatchRead",
                                  "Header"])
def test_an_owner_cannot_be_copied_or_pickled(data_file, tmp_path, kind):
    """copy.copy() of an owner shared its Owned: dropping the copy ran the
    finaliser, which frees in spite of calls in flight (one owner per
    Owned), under another thread's size() or get() (ASan:
    heap-use-after-free). Copies and pickles are refused, as Python's
    open files refuse them, and the original goes on."""
    import copy
    import pickle
    path, data = data_file
    with gpufile.File(path) as f:
        if kind == "File":
            obj, check = f, lambda: f.size() == len(data)
        elif kind == "Future":
            out = bytearray(4096)
            obj = f.pread(out, 4096, 0)
            check = lambda: obj.get() == 4096  # noqa: E731
        elif kind == "Mmap":
            obj = gpufile.Mmap(path)
            check = lambda: obj.file_size() == len(data)  # noqa: E731
        elif kind == "BatchRead":
            obj, _bufs = _batch_of(f, 2)
            check = lambda: obj.wait() == [4096] * 2  # noqa: E731
        else:
            p, _ = _checkpoint(tmp_path)
            obj = _core.Header(p)
            check = lambda: "a" in obj.by_name  # noqa: E731
        for make in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError, match="cannot copy or pickle a %s "
                               "object" % type(obj).__name__):
                make(obj)
        assert check()
        if kind in ("Mmap", "Header"):
            obj.close()


def test_close_interrupted_while_waiting_stays_open():
    """A close() interrupted (Ctrl-C: a signal handler that raises) while it
    waits for a call of another thread leaves the object open, not stuck
    half closed: a later close() frees it once. Before, it stayed
    "closing" for ever, and every later close() (a with block's end, the
    finaliser) waited for a close that would never end."""
    import signal
    from gpufile import _owned

    frees = []
    o = _owned.Owned(1234, frees.append, "thing")
    entered, release = threading.Event(), threading.Event()

    def caller():
        with o.hold():
            entered.set()
            release.wait()

    class Interrupt(Exception):
        pass

    def handler(signum, frame):
        raise Interrupt()

    t = _start(caller)
    assert entered.wait(WATCHDOG_S)
    main = threading.get_ident()

    def kick():
        _wait_until(lambda: o.state == "closing")
        signal.pthread_kill(main, signal.SIGUSR1)

    old = signal.signal(signal.SIGUSR1, handler)
    try:
        k = _start(kick)
        with pytest.raises(Interrupt):
            o.close()
        k.finish()
    finally:
        signal.signal(signal.SIGUSR1, old)
        release.set()
    assert t.finish().error is None
    assert not o.closed and frees == []
    assert _start(o.close).finish().error is None
    assert frees == [1234] and o.closed


_NESTED_CLOSE = r'''
import signal, sys, threading, time
sys.path.insert(0, %(pkg)r)
from gpufile import _owned

frees, seen = [], []
o = _owned.Owned(1234, frees.append, "thing")
entered, release = threading.Event(), threading.Event()

def caller():
    with o.hold():
        entered.set()
        release.wait()

def handler(signum, frame):
    try:
        o.close()
    except RuntimeError as e:
        seen.append(str(e))
    release.set()

signal.signal(signal.SIGUSR1, handler)
t = threading.Thread(target=caller)
t.start()
entered.wait()
main = threading.get_ident()

def kick():
    while o.state != "closing":
        time.sleep(0.001)
    signal.pthread_kill(main, signal.SIGUSR1)

k = threading.Thread(target=kick)
k.start()
o.close()
k.join()
t.join()
assert frees == [1234], frees
assert len(seen) == 1 and "same thread" in seen[0], seen
print("ok")
'''


def test_close_from_a_signal_handler_inside_close():
    """A signal handler that runs while close() waits for another thread's
    call, in the thread of that close(), and closes the same object gets
    RuntimeError, as a close() from within a call does; before, it waited
    for the close() it had interrupted, which could never go on: a hang."""
    import os
    import subprocess
    out = subprocess.run(
        [sys.executable, "-c",
         _NESTED_CLOSE % {"pkg": os.path.join(os.path.dirname(
             os.path.abspath(__file__)), os.pardir)}],
        capture_output=True, text=True, timeout=WATCHDOG_S)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "ok"
