"""safe_open(...).get_slice(name) on a machine without a GPU (NumPy): every
index form against NumPy's own indexing of the whole tensor, the bytes each
plan reads (gpufile's statistics), and the errors."""
import errno
import os

import numpy as np
import pytest

import gpufile
import gpufile.safetensors as st
import gpufile.safetensors.numpy as stn
from gpufile.safetensors import _slice

INDICES = [
    (), Ellipsis, slice(None), 1, -1, (0, 1), (0, 1, 2), (slice(0, 2), 1),
    slice(-1, None), slice(5, 10), slice(2, 1), (Ellipsis, 1), (1, Ellipsis),
    (slice(None), Ellipsis, slice(1, 2)), slice(None, None, 2),
    (slice(None), slice(None), slice(1, None, 3)), None, (None, 1),
    (slice(None), None, slice(None, None, 2)), (slice(None), -3),
    (1, slice(1, 3), slice(0, 4, 3)), np.int64(1), (np.array(1), 2),
    # not basic: the whole tensor, indexed by NumPy
    [0, 1], True, slice(None, None, -1), (slice(None), [2, 0]),
    (Ellipsis, np.array([True, False, True, False])),
]


def _tensors():
    rng = np.random.default_rng(11)
    return {
        "a": np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4),
        "w16": rng.standard_normal((2, 3, 4)).astype(np.float16),
        "i64": rng.integers(-2**40, 2**40, (2, 3, 4)).astype(np.int64),
        "u8": rng.integers(0, 256, (2, 3, 4)).astype(np.uint8),
        "b": rng.integers(0, 2, (2, 3, 4)).astype(np.bool_),
    }


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.flags.c_contiguous
    assert np.array_equal(got, want)


# (RUN_MIN, GATHER_MIN) that send every selection of several runs to one
# plan, and the defaults.
PLANS = {"runs": (1, 1), "gather": (1 << 40, 1), "span": (1 << 40, 1 << 40),
         "default": (_slice.RUN_MIN, _slice.GATHER_MIN)}


def _force(monkeypatch, plan):
    monkeypatch.setattr(_slice, "RUN_MIN", PLANS[plan][0])
    monkeypatch.setattr(_slice, "GATHER_MIN", PLANS[plan][1])


@pytest.mark.parametrize("plan", sorted(PLANS))
def test_every_index_form_as_numpy(tmp_path, monkeypatch, plan):
    _force(monkeypatch, plan)
    d = _tensors()
    p = str(tmp_path / "s.safetensors")
    stn.save_file(d, p)
    with st.safe_open(p, framework="numpy") as f:
        for name, want in d.items():
            sl = f.get_slice(name)
            assert sl.get_shape() == list(want.shape)
            assert sl.get_dtype() == {"a": "F32", "w16": "F16", "i64": "I64",
                                      "u8": "U8", "b": "BOOL"}[name]
            for idx in INDICES:
                if isinstance(idx, tuple) and any(isinstance(x, np.ndarray) and x.dtype == bool
                                                  for x in idx) and name != "a":
                    continue
                _same(sl[idx], want[idx])


def test_scalar_and_empty_tensors(tmp_path):
    d = {"s": np.array(5.5, dtype=np.float32), "e": np.zeros((0, 3), dtype=np.float16),
         "e2": np.zeros((3, 0, 2), dtype=np.int32)}
    p = str(tmp_path / "se.safetensors")
    stn.save_file(d, p)
    with st.safe_open(p, framework="numpy") as f:
        for idx in [(), Ellipsis, None]:
            _same(f.get_slice("s")[idx], d["s"][idx])
        for idx in [slice(None), (slice(None), 1), (Ellipsis, 2), None]:
            _same(f.get_slice("e")[idx], d["e"][idx])
        for idx in [1, (slice(None), slice(None), 1), slice(1, 2)]:
            _same(f.get_slice("e2")[idx], d["e2"][idx])
        with pytest.raises(IndexError, match=r"se\.safetensors: tensor 's': too many"):
            f.get_slice("s")[0]
        with pytest.raises(IndexError, match="out of bounds for dimension 0 of size 0"):
            f.get_slice("e")[0]


def _random_index(rng, shape):
    """A random basic index over shape: ints (some negative), slices with
    bounds past the ends and steps 1-3, None, and at times an Ellipsis
    standing for the dimensions between the leading and trailing ones
    indexed."""
    nd = len(shape)
    use = int(rng.integers(0, nd + 1))
    if rng.random() < 0.3:
        lead = int(rng.integers(0, use + 1))
        dims = list(range(lead)) + [Ellipsis] + list(range(nd - (use - lead), nd))
    else:
        dims = list(range(use))
    items = []
    for d in dims:
        if rng.random() < 0.1:
            items.append(None)
        if d is Ellipsis:
            items.append(Ellipsis)
            continue
        n = shape[d]
        if rng.random() < 0.25 and n > 0:
            items.append(int(rng.integers(-n, n)))
        else:
            lo = int(rng.integers(-n - 2, n + 3)) if rng.random() < 0.7 else None
            hi = int(rng.integers(-n - 2, n + 3)) if rng.random() < 0.7 else None
            items.append(slice(lo, hi, int(rng.integers(1, 4))))
    return tuple(items)


@pytest.mark.parametrize("seed", range(4))
def test_random_basic_indices_as_numpy(tmp_path, monkeypatch, seed):
    rng = np.random.default_rng(seed)
    shapes = [(7,), (5, 6), (3, 4, 5), (2, 3, 2, 4), (1, 9, 1)]
    d = {"t%d" % k: rng.integers(0, 1 << 30, s).astype(np.int32) for k, s in enumerate(shapes)}
    p = str(tmp_path / "r.safetensors")
    stn.save_file(d, p)
    with st.safe_open(p, framework="numpy") as f:
        for _ in range(150):
            name = "t%d" % rng.integers(0, len(shapes))
            idx = _random_index(rng, d[name].shape)
            _force(monkeypatch, sorted(PLANS)[rng.integers(0, len(PLANS))])
            got = f.get_slice(name)[idx]
            want = d[name][idx]
            assert got.shape == want.shape, (name, idx)
            assert np.array_equal(got, want), (name, idx)


def _host_bytes():
    return gpufile.stats()["gpufile"]["read"]["host"]["bytes"]


def test_reads_only_what_the_plan_needs(tmp_path):
    d = {"rows": np.arange(1024 * 1024, dtype=np.float32).reshape(1024, 1024),
         "cols": np.arange(64 * 8192, dtype=np.float32).reshape(64, 8192),
         "experts": np.arange(4 * 512 * 1024, dtype=np.float32).reshape(4, 512, 1024)}
    p = str(tmp_path / "b.safetensors")
    stn.save_file(d, p)

    def moved(fn):
        b0 = _host_bytes()
        out = fn()
        return out, _host_bytes() - b0

    with st.safe_open(p, framework="numpy") as f:
        sl, n = moved(lambda: f.get_slice("rows"))
        assert n == 0 and sl.get_shape() == [1024, 1024]  # nothing read yet
        # One run: rows 100-299, exactly their bytes.
        out, n = moved(lambda: f.get_slice("rows")[100:300])
        _same(out, d["rows"][100:300])
        assert n == 200 * 1024 * 4
        # Runs of 2 KiB (GATHER_MIN to RUN_MIN): gathered, exactly the
        # result's bytes, as one request.
        ops0 = gpufile.stats()["gpufile"]["read"]["host"]["ops"]
        out, n = moved(lambda: f.get_slice("cols")[:, :512])
        _same(out, d["cols"][:, :512])
        assert n == 64 * 512 * 4
        assert gpufile.stats()["gpufile"]["read"]["host"]["ops"] == ops0 + 1
        # Runs of 256 bytes (< GATHER_MIN): one span, row 0 col 0 to row 63
        # col 63.
        out, n = moved(lambda: f.get_slice("cols")[:, :64])
        _same(out, d["cols"][:, :64])
        assert n == (63 * 8192 + 64) * 4
        # Runs of 1 MiB (= RUN_MIN): half of each expert, read run by run,
        # exactly the result's 4 MiB (the span would be 7 MiB).
        assert 256 * 1024 * 4 == _slice.RUN_MIN
        out, n = moved(lambda: f.get_slice("experts")[:, 256:])
        _same(out, d["experts"][:, 256:])
        assert n == 4 * 256 * 1024 * 4
        # Not a basic index: the tensor whole.
        out, n = moved(lambda: f.get_slice("cols")[[0, 5]])
        _same(out, d["cols"][[0, 5]])
        assert n == 64 * 8192 * 4
        # An empty selection reads nothing.
        out, n = moved(lambda: f.get_slice("rows")[5:5])
        assert out.shape == (0, 1024) and n == 0


def test_errors_name_the_file_and_tensor(tmp_path):
    d = _tensors()
    p = str(tmp_path / "err.safetensors")
    stn.save_file(d, p)
    f = st.safe_open(p, framework="numpy")
    sl = f.get_slice("a")
    with pytest.raises(IndexError, match=r"err\.safetensors: tensor 'a': index 2 is out of "
                                         r"bounds for dimension 0 of size 2"):
        sl[2]
    with pytest.raises(IndexError, match=r"tensor 'a': index -4 is out of bounds for "
                                         r"dimension 1 of size 3"):
        sl[0, -4]
    with pytest.raises(IndexError, match=r"tensor 'a': too many indices \(4\) for a "
                                         r"tensor of 3 dimensions"):
        sl[0, 0, 0, 0]
    # The framework's own errors (a float, a zero step) name them too.
    with pytest.raises(IndexError, match=r"err\.safetensors: tensor 'a': index 1\.5: "):
        sl[1.5]
    with pytest.raises(ValueError, match=r"err\.safetensors: tensor 'a': index .*step"):
        sl[::0]
    with pytest.raises(KeyError, match="no tensor named 'nope'"):
        f.get_slice("nope")
    # Refused at open, where safetensors refuses it (issue 34).
    with pytest.raises(ValueError, match="loads into host memory"):
        st.safe_open(p, framework="numpy", device="cuda:0")
    f.close()
    with pytest.raises(ValueError, match="closed safetensors file"):
        sl[0]


@pytest.mark.parametrize("plan", ["runs", "gather", "span"])
@pytest.mark.parametrize("index", [np.s_[3:], np.s_[:, 2:]])
def test_file_cut_short_after_open(tmp_path, monkeypatch, index, plan):
    # [3:] is one run; [:, 2:] one run per row, read by the plan given:
    # each must see the short read, not return stale bytes.
    _force(monkeypatch, plan)
    d = {"x": np.arange(8 * 4, dtype=np.int64).reshape(8, 4)}
    p = str(tmp_path / "cut.safetensors")
    stn.save_file(d, p)
    with st.safe_open(p, framework="numpy") as f:
        with open(p, "r+b") as w:
            w.truncate(os.path.getsize(p) - 8 * 4 * 2)  # the last two rows
        with pytest.raises(OSError) as e:
            f.get_slice("x")[index]
        assert e.value.errno == errno.EIO
        msg = str(e.value)
        assert "cut.safetensors" in msg and "tensor 'x'" in msg
        if plan == "gather" and index != np.s_[3:]:
            assert "run 6 (16 bytes at offset" in msg and "the file ends at" in msg
        else:
            assert "shorter than its header says" in msg


def test_plan_and_runs():
    # The planner alone, on shapes where the runs are easy to write out.
    def runs(dims, shape, isz=1, base=0):
        offs, run = _slice.runs(dims, shape, isz, base)
        return list(offs), run

    dims, out = _slice.plan((slice(None), slice(1, 3)), (2, 4), "w")
    assert dims == [(0, 2, 1), (1, 2, 1)] and out == (2, 2)
    assert runs(dims, (2, 4)) == ([1, 5], 2)
    assert runs(dims, (2, 4), 4, 100) == ([104, 120], 8)
    assert _slice.span(dims, (2, 4)) == (1, 6)
    dims, out = _slice.plan((1,), (3, 4), "w")
    assert runs(dims, (3, 4)) == ([4], 4) and out == (4,)
    dims, out = _slice.plan((slice(None, None, 2),), (3, 2), "w")
    assert runs(dims, (3, 2)) == ([0, 4], 2) and out == (2, 2)
    dims, _ = _slice.plan((), (3, 2), "w")
    assert runs(dims, (3, 2), 2) == ([0], 12)
    # Two outer dimensions: rows 1-2 of planes 0 and 2, columns 1-2.
    dims, out = _slice.plan((slice(None, None, 2), slice(1, 3), slice(1, 3)), (3, 4, 5), "w")
    assert out == (2, 2, 2)
    assert runs(dims, (3, 4, 5)) == ([6, 11, 46, 51], 2)
    assert _slice.plan([0, 1], (3,), "w") is None
    assert _slice.plan(slice(None, None, -1), (3,), "w") is None
    assert _slice.plan((Ellipsis, Ellipsis), (3,), "w") is None
