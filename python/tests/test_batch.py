"""gpufile.batch_read / BatchRead on host memory (the C tests cover device
buffers with the fake driver; test_gpu covers the real one)."""
import errno
import os
import threading

import numpy as np
import pytest

import gpufile


def test_batch_read_host(data_file, tmp_path):
    path, data = data_file
    other = tmp_path / "other.bin"
    odata = np.random.default_rng(3).integers(0, 256, 100000, dtype=np.uint8)
    other.write_bytes(odata.tobytes())
    rng = np.random.default_rng(11)
    with gpufile.File(path) as f, gpufile.File(str(other)) as g:
        entries, want = [], []
        for i in range(500):
            src, sdata = (g, odata) if i % 4 == 0 else (f, data)
            size = int(rng.integers(1, 70000))
            off = int(rng.integers(0, len(sdata) + 100))
            buf = np.zeros(size, dtype=np.uint8)
            entries.append((src, buf, None, off))
            want.append(sdata[off:off + size])
        counts = gpufile.batch_read(entries)
        assert counts == [len(w) for w in want]
        for (_, buf, _, _), w in zip(entries, want):
            assert np.array_equal(buf[:len(w)], w)
            assert not buf[len(w):].any()


def test_batch_async_poll_wait(data_file):
    path, data = data_file
    with gpufile.File(path) as f:
        bufs = [bytearray(4096) for _ in range(64)]
        b = gpufile.BatchRead([(f, bufs[i], 4096, i * 4096) for i in range(64)])
        counts = b.wait(timeout=60)
        assert b.poll() == 64 and b.done()
        assert counts == [4096] * 64
        assert bytes(bufs[5]) == data[5 * 4096:6 * 4096].tobytes()


def test_batch_other_threads(data_file):
    """A batch made in one thread is waited for in another, and its file
    closed from a third and then from the first: the waiter got KeyError
    (the file's count of calls in flight was kept per thread), and the
    file could never be closed."""
    path, data = data_file
    f = gpufile.File(path)
    bufs = [bytearray(4096) for _ in range(8)]
    b = gpufile.BatchRead([(f, bufs[i], 4096, i * 4096) for i in range(8)])
    got, errors = [], []

    def run(fn):
        try:
            got.append(fn())
        except BaseException as e:
            errors.append(e)

    for fn in (b.wait, f.close):
        t = threading.Thread(target=run, args=(fn,), daemon=True)
        t.start()
        t.join(60)  # a watchdog: a hang fails here, not the whole run
        assert not t.is_alive(), "%s did not return" % fn.__name__
    assert errors == []
    assert got[0] == [4096] * 8
    assert f.closed
    f.close()  # closed already: nothing to do, no error
    assert bytes(bufs[3]) == data[3 * 4096:4 * 4096].tobytes()


def test_batch_close_before_wait(data_file):
    """The file may be closed before the batch is waited for: close()
    waits for the entries, and the batch still gives its counts."""
    path, data = data_file
    f = gpufile.File(path)
    buf = bytearray(5000)
    b = gpufile.BatchRead([(f, buf, None, 100)])
    f.close()
    assert b.wait() == [5000]
    assert bytes(buf) == data[100:5100].tobytes()


def test_batch_outcome_outlives_the_with_block(data_file):
    """The end of a with-block (or any other end of the C batch) threw the
    counts away: wait() or results() afterwards raised AttributeError
    '_results'. (A failed entry: test_remote.py.)"""
    path, data = data_file
    buf = bytearray(16)
    with gpufile.File(path) as f:
        with gpufile.BatchRead([(f, buf, None, 0)]) as b:
            pass
    assert b.wait() == [16] and b.results() == [16]
    assert bytes(buf) == data[:16].tobytes()


def test_batch_empty():
    assert gpufile.batch_read([]) == []


def test_batch_bad_entries(data_file, tmp_path):
    path, _ = data_file
    with gpufile.File(path) as f:
        with pytest.raises(TypeError, match="batch entry 1"):
            gpufile.batch_read([(f, bytearray(4), 4, 0), (f, bytearray(4))])
        with pytest.raises(TypeError, match="batch entry 0: file must be"):
            gpufile.batch_read([(path, bytearray(4), 4, 0)])
        with pytest.raises(ValueError, match="batch entry 2"):
            gpufile.batch_read([(f, bytearray(4), 4, 0)] * 2 +
                               [(f, bytearray(4), 8, 0)])
        with pytest.raises(ValueError, match="batch entry 0"):
            gpufile.batch_read([(f, bytearray(4), 4, -1)])
        with pytest.raises(TypeError):  # read-only target
            gpufile.batch_read([(f, b"abcd", 4, 0)])
    w = gpufile.File(str(tmp_path / "wo.bin"), "w")
    try:
        with pytest.raises(OSError) as e:
            gpufile.batch_read([(w, bytearray(4), 4, 0)])
        assert e.value.errno == errno.EBADF
        assert "batch entry 0" in str(e.value)
    finally:
        w.close()


def test_batch_closed_file(data_file):
    path, _ = data_file
    f = gpufile.File(path)
    f.close()
    with pytest.raises(ValueError, match="closed"):
        gpufile.batch_read([(f, bytearray(4), 4, 0)])


from conftest import needs_gpu  # noqa: E402


@needs_gpu
def test_batch_read_cupy(data_file):
    """Device buffers (one CuPy array, packed entries and scattered ones)
    and a host buffer in one batch, on the real GPU."""
    import cupy as cp

    path, data = data_file
    rng = np.random.default_rng(5)
    n, bs = 2000, 4096
    dev = cp.zeros(n * bs, dtype=cp.uint8)
    host = np.zeros(bs, dtype=np.uint8)
    offs = [int(o) for o in rng.integers(0, len(data) - bs, n)]
    with gpufile.File(path) as f:
        entries = [(f, dev[i * bs:(i + 1) * bs], None, offs[i]) for i in range(n)]
        entries.append((f, host, None, 77))
        counts = gpufile.batch_read(entries)
    assert counts == [bs] * (n + 1)
    got = cp.asnumpy(dev).reshape(n, bs)
    for i in range(n):
        assert np.array_equal(got[i], data[offs[i]:offs[i] + bs]), i
    assert np.array_equal(host, data[77:77 + bs])


def _batch_ptr(b):
    """The C batch a BatchRead was given (before it is waited for)."""
    return b._c.ptr


def _first_kept(f, buf):
    """With no batch kept, reads buf from f's start as a batch; returns the
    C batch it used, which is then kept."""
    import gc
    from gpufile import _batch
    gc.collect()  # a BatchRead in a cycle, ended later, would be kept too
    _batch._drop_idle()
    b = gpufile.BatchRead([(f, buf, len(buf), 0)])
    first = _batch_ptr(b)
    assert b.wait() == [len(buf)]
    return first


def test_batches_one_after_another_reuse_one_c_batch(data_file):
    """A complete C batch is kept for the next BatchRead (its worker
    threads and io_uring rings are started once, not per read: 1.5-5 ms a
    batch, more than reading a 1 MiB chunk). Made afresh each time, every
    BatchRead had a new one."""
    from gpufile import _batch
    path, data = data_file
    with gpufile.File(path) as f:
        buf = bytearray(4096)
        first = _first_kept(f, buf)
        for i in range(1, 6):
            b = gpufile.BatchRead([(f, buf, 4096, i * 4096)])
            assert _batch_ptr(b) == first
            assert b.wait() == [4096]
            assert bytes(buf) == data[i * 4096:(i + 1) * 4096].tobytes()
        # Fewer entries than the kept batch's capacity, and more: the
        # larger one needs a batch of its own, which is kept after it.
        n = _batch._IDLE_MIN_CAPACITY * 2 + 1
        bufs = [bytearray(512) for _ in range(n)]
        big = gpufile.BatchRead([(f, bufs[i], 512, i * 512) for i in range(n)])
        assert _batch_ptr(big) != first
        assert big.wait() == [512] * n
        assert bytes(bufs[-1]) == data[(n - 1) * 512:n * 512].tobytes()


def test_kept_batches_are_never_shared(data_file):
    """Batches in flight at once each have a C batch of their own; no more
    than _IDLE_MAX are kept after; a failed entry's message does not
    outlive its batch into the next one's entries."""
    from gpufile import _batch
    path, data = data_file
    _batch._drop_idle()
    with gpufile.File(path) as f:
        bufs = [bytearray(4096) for _ in range(4)]
        live = [gpufile.BatchRead([(f, bufs[i], 4096, i * 4096)])
                for i in range(4)]
        assert len({_batch_ptr(b) for b in live}) == 4
        for b in live:
            assert b.wait() == [4096]
        assert len(_batch._idle) <= _batch._IDLE_MAX
        bad = gpufile.BatchRead([(f, bufs[0], 4096, len(data) + 4096),
                                 (f, bufs[1], 4096, 0)])
        assert bad.wait() == [0, 4096]  # past the end: 0 bytes, no error
        g = gpufile.File(path)
        g.close()
        again = gpufile.BatchRead([(f, bufs[2], 4096, 8192)])
        assert again.wait() == [4096]
        assert bytes(bufs[2]) == data[8192:12288].tobytes()


def test_a_kept_batch_is_not_reused_after_nthreads_changes(monkeypatch,
                                                          data_file):
    """A C batch has as many workers as nthreads said at its first submit:
    after a change of nthreads the kept one is freed and a BatchRead gets
    a new one. (Not told by its address: a new batch may be given the
    address of the one just freed.)"""
    from gpufile import _batch
    path, _ = data_file
    old = gpufile.defaults.get("nthreads")
    real_fn = _batch._fn
    freed = []

    def fn(name):
        f = real_fn(name)
        if name != "gpufile_batch_free":
            return f
        return lambda c: (freed.append(c), f(c))[1]
    with gpufile.File(path) as f:
        buf = bytearray(4096)
        first = _first_kept(f, buf)
        monkeypatch.setattr(_batch, "_fn", fn)
        try:
            gpufile.defaults.set("nthreads", old + 1)
            b = gpufile.BatchRead([(f, buf, 4096, 0)])
            assert freed == [first]
            assert b.wait() == [4096]
        finally:
            gpufile.defaults.set("nthreads", old)


def test_a_kept_batch_serves_a_forked_child(data_file):
    """The child of a fork takes the batch its parent kept (its workers
    were the parent's threads): its read starts workers of its own and
    gives the right bytes; the parent's batch still serves the parent."""
    path, data = data_file
    with gpufile.File(path) as f:
        buf = bytearray(4096)
        first = _first_kept(f, buf)
        pid = os.fork()
        if pid == 0:
            ok = False
            try:
                c = gpufile.BatchRead([(f, buf, 4096, 4096)])
                ok = (_batch_ptr(c) == first and c.wait() == [4096] and
                      bytes(buf) == data[4096:8192].tobytes())
            finally:
                os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        b = gpufile.BatchRead([(f, buf, 4096, 8192)])
        assert _batch_ptr(b) == first and b.wait() == [4096]
        assert bytes(buf) == data[8192:12288].tobytes()


def test_a_batch_ended_by_the_collector_inside_take_does_not_hang(data_file):
    """A BatchRead never waited for and only reachable through a cycle is
    ended by the cyclic collector, which runs inside any allocation: one
    in _take or _give_back, under the kept batches' lock. Its finaliser
    gave its batch back and took the lock again: the thread hung for
    ever. Run in a child, whose hang becomes a failure."""
    import subprocess
    import sys
    path, _ = data_file
    code = """if 1:
        import gc, gpufile
        f = gpufile.File(%r)
        buf = bytearray(4096)
        gc.set_threshold(1)
        for i in range(1000):  # the old code hung at the 311th here
            b = gpufile.BatchRead([(f, bytearray(4096), 4096, 0)])
            b.cycle = b
            del b
            assert gpufile.BatchRead([(f, buf, 4096, 4096)]).wait() == [4096]
        print("done")
    """ % path
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr


def test_a_submit_interrupted_after_the_library_took_it(monkeypatch, data_file):
    """KeyboardInterrupt (or any exception a signal handler raises) right
    after gpufile_batch_submit returned, before the binding noted the
    submit: the batch was kept with its entries in flight (the next
    BatchRead failed with EBUSY) and its buffers let go while the
    library still wrote into them. It is kept only once complete."""
    from gpufile import _batch
    path, data = data_file
    _batch._drop_idle()
    real_fn = _batch._fn
    submitted = []

    def interrupted_submit(c, arr, n):
        assert real_fn("gpufile_batch_submit")(c, arr, n) == 0
        submitted.append(c)
        raise KeyboardInterrupt("after the submit")

    with gpufile.File(path) as f:
        n = _batch._KEEP_CAPACITY
        bufs = [bytearray(65536) for _ in range(n)]
        size = len(data) // 65536 * 65536
        entries = [(f, bufs[i], 65536, i * 65536 % size) for i in range(n)]
        monkeypatch.setattr(_batch, "_fn", lambda name: (
            interrupted_submit if name == "gpufile_batch_submit"
            else real_fn(name)))
        with pytest.raises(KeyboardInterrupt):
            gpufile.BatchRead(entries)
        monkeypatch.setattr(_batch, "_fn", real_fn)
        assert len(submitted) == 1
        kept = [c for _, _, c in _batch._idle]
        assert kept == submitted
        assert real_fn("gpufile_batch_poll")(kept[0]) == n  # complete
        buf = bytearray(4096)
        assert gpufile.BatchRead([(f, buf, 4096, 0)]).wait() == [4096]


def test_large_and_stale_batches_are_not_kept(data_file):
    """A batch of more than _KEEP_CAPACITY entries is freed after its read
    (kept, its arrays, threads and rings stayed for the life of the
    process after one large cat_ranges); one kept under another nthreads
    is freed at the next read (it was never used again, and filled the
    places of batches that would have been)."""
    from gpufile import _batch
    path, _ = data_file
    _batch._drop_idle()
    old = gpufile.defaults.get("nthreads")
    with gpufile.File(path) as f:
        n = _batch._KEEP_CAPACITY + 1
        bufs = [bytearray(512) for _ in range(n)]
        assert gpufile.BatchRead(
            [(f, bufs[i], 512, i * 512) for i in range(n)]).wait() == [512] * n
        assert _batch._idle == []
        buf = bytearray(4096)
        _first_kept(f, buf)
        assert len(_batch._idle) == 1
        try:
            gpufile.defaults.set("nthreads", old + 1)
            assert gpufile.BatchRead([(f, buf, 4096, 0)]).wait() == [4096]
            assert [nt for _, nt, _ in _batch._idle] == [b"%d" % (old + 1)]
        finally:
            gpufile.defaults.set("nthreads", old)


_INTERRUPTED_READS = """if 1:
    import dis, gc, os, sys, threading, weakref, gpufile
    from gpufile import _batch
    traced = (os.path.dirname(gpufile.__file__), threading.__file__)
    f = gpufile.File(%r)
    # The C batches whose entries may still run: submitted, and neither
    # waited for to the end nor freed since. A read's buffer let go while
    # its batch does was memory the library could still write.
    running, submitted, let_go_under = set(), {}, []
    real_fn = _batch._fn
    def fn(name):
        c_fn = real_fn(name)
        def tracked(c, *args):
            rc = c_fn(c, *args)
            if name == "gpufile_batch_submit" and rc == 0:
                running.add(c)
                submitted[target] = c
            elif name == "gpufile_batch_free" or (
                    name == "gpufile_batch_wait" and args[0] < 0 and rc >= 0):
                running.discard(c)
            return rc
        return tracked if name in ("gpufile_batch_submit", "gpufile_batch_free",
                                   "gpufile_batch_wait") else c_fn
    _batch._fn = fn
    class Memory(bytearray):  # a bytearray a weak reference can follow
        pass
    def gone(ref):
        t = of_read.pop(id(ref))[1]
        if t in submitted and submitted[t] in running:
            let_go_under.append(t)
    of_read = {}
    calls = {"CALL", "CALL_FUNCTION", "CALL_METHOD", "CALL_FUNCTION_KW",
             "CALL_FUNCTION_EX", "JUMP_BACKWARD", "JUMP_ABSOLUTE"}
    target = 0
    while True:
        target += 1
        seen = [0]
        def tracer(frame, event, arg):
            if not frame.f_code.co_filename.startswith(traced):
                return None
            seen[0] += 1  # a function's start: the interpreter checks there
            if seen[0] == target:
                raise KeyboardInterrupt("at the start of %%s" %% frame.f_code.co_name)
            frame.f_trace_opcodes = True
            last = [None]
            def local(fr, ev, a):
                if ev != "opcode":
                    return local
                if last[0] in calls:  # after a call returned, a jump back
                    seen[0] += 1
                    if seen[0] == target:
                        last[0] = None
                        raise KeyboardInterrupt("in %%s" %% fr.f_code.co_name)
                last[0] = dis.opname[fr.f_code.co_code[fr.f_lasti]]
                return local
            return local
        memory = Memory(4096)
        ref = weakref.ref(memory, gone)
        of_read[id(ref)] = (ref, target)
        sys.settrace(tracer)
        try:
            gpufile.BatchRead([(f, memory, 4096, 0)]).wait()
        except KeyboardInterrupt:
            pass
        finally:
            sys.settrace(None)
            del memory
        assert not _batch._idle_lock._is_owned(), target
        gc.collect()
        buf = bytearray(4096)
        assert gpufile.BatchRead([(f, buf, 4096, 4096)]).wait() == [4096], target
        if seen[0] < target:  # the read ran through without one
            break
    assert not let_go_under, "memory let go under a running batch, " \
        "interrupted at points %%s" %% let_go_under
    print("done", target)
"""


def test_a_read_interrupted_anywhere_hangs_nothing(data_file):
    """An exception a signal handler raises (Ctrl-C) lands where the
    interpreter checks for one: a function's start, a call's return, a
    jump back. Raised at each such point of a BatchRead's life in turn
    (its making, submit, wait, free and the kept batches, and the
    threading code they run), it never leaves a lock held: after the
    acquire in _give_back every later BatchRead waited for ever, after
    Owned's Condition took its lock the batch's finaliser did. Run in a
    child, whose hang becomes a failure."""
    import subprocess
    import sys
    path, _ = data_file
    out = subprocess.run([sys.executable, "-c", _INTERRUPTED_READS % path],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.startswith("done"), \
        out.stdout[-2000:] + out.stderr[-4000:]


def test_a_file_only_the_entries_hold_stays_open_until_the_submit(data_file):
    """Entries from a generator that opens each File: the File's handle is
    entered until the submit has returned, but nothing else held the File
    once the entries were checked. Its finaliser freed the handle under
    that record (a use after free in gpufile_batch_submit under ASan,
    KeyError at the leave); the batch holds the File until then. The
    File, its batch done, is then closed by its finaliser."""
    import gc
    import warnings
    path, data = data_file
    bufs = [bytearray(4096) for _ in range(3)]

    def entries():
        for i, buf in enumerate(bufs):
            yield gpufile.File(path), buf, 4096, 4096 * i
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gpufile.BatchRead(entries()).wait() == [4096] * 3
        gc.collect()
    for i, buf in enumerate(bufs):
        assert bytes(buf) == data[4096 * i:4096 * (i + 1)].tobytes()


def test_memory_of_a_batch_whose_free_was_cut_short_is_kept(monkeypatch,
                                                            data_file):
    """Ctrl-C at the start of the free function of a batch dropped
    unfinished: whether the C batch was freed (its entries ended) is
    unknown, and its buffers were let go with the object all the same,
    memory the library could still write. They are kept for the life of
    the process (a leak, never a write into freed memory)."""
    import gc
    import sys
    import weakref
    from gpufile import _batch, _owned
    ignored = []  # the finaliser's exception, without its frames (which
    # hold the batch: pytest's own hook kept them)
    monkeypatch.setattr(sys, "unraisablehook",
                        lambda u: ignored.append(repr(u.exc_value)))

    class Memory(bytearray):  # a bytearray a weak reference can follow
        pass
    path, _ = data_file
    real_free = _batch.BatchRead._free

    def cut_short(self, b):
        raise KeyboardInterrupt("at the start of _free")
    with gpufile.File(path) as f:
        memory = Memory(4096)
        alive = weakref.ref(memory)
        b = gpufile.BatchRead([(f, memory, 4096, 0)])  # not waited for
        owned, c = b._c, b._c.ptr
        monkeypatch.setattr(_batch.BatchRead, "_free", cut_short)
        del memory, b
        gc.collect()  # the finaliser ran; its KeyboardInterrupt was ignored
        monkeypatch.setattr(_batch.BatchRead, "_free", real_free)
        # (other garbage the collection finalised may have added its own)
        assert "KeyboardInterrupt('at the start of _free')" in ignored
        assert alive() is not None, "the buffer was let go"
        assert owned.closed and owned in _owned._unfreed
        _batch._fn("gpufile_batch_free")(c)  # this test's own clean-up
        _owned._unfreed.discard(owned)


def test_a_batch_interrupted_in_its_wait_is_freed(monkeypatch, data_file):
    """Ctrl-C while a with-block's end waits for its batch: the batch was
    neither freed nor kept (_free caught Exception only), its workers and
    io_uring descriptors left for the life of the process. It is freed,
    its entries waited for."""
    from gpufile import _batch
    path, _ = data_file
    _batch._drop_idle()
    real_fn = _batch._fn
    made, freed = [], []

    def create(out, cap):
        rc = real_fn("gpufile_batch_create")(out, cap)
        made.append(out._obj.value)
        return rc

    def interrupted_wait(c, ms):
        real_fn("gpufile_batch_wait")(c, ms)
        raise KeyboardInterrupt("in the wait")

    def free(c):
        freed.append(c)
        return real_fn("gpufile_batch_free")(c)
    with gpufile.File(path) as f:
        monkeypatch.setattr(_batch, "_fn", lambda name: {
            "gpufile_batch_create": create,
            "gpufile_batch_wait": interrupted_wait,
            "gpufile_batch_free": free}.get(name) or real_fn(name))
        with pytest.raises(KeyboardInterrupt):
            with gpufile.BatchRead([(f, bytearray(4096), 4096, 0)]):
                pass
        monkeypatch.setattr(_batch, "_fn", real_fn)
        assert len(made) == 1 and freed == made
        assert _batch._idle == []
