"""gpufile.safetensors against the safetensors package on a GPU machine:
tensor by tensor equality (torch.equal) with safetensors.torch.load_file,
save_file bytes identical to safetensors.torch.save_file, get_slice
against safetensors' own, CuPy loads, and a device_map over two GPUs.
Skipped without torch, safetensors or a GPU."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

import gpufile  # noqa: E402
import gpufile.safetensors as gst  # noqa: E402

if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU for torch", allow_module_level=True)


def _sample():
    g = torch.Generator().manual_seed(5)
    d = {
        "w.bf16": torch.randn(33, 65, generator=g).to(torch.bfloat16),
        "w.f16": torch.randn(7, 3, generator=g).to(torch.float16),
        "w.f32": torch.randn(1000, 1000, generator=g),  # 4 MB: several tasks
        "i.i64": torch.randint(-2**40, 2**40, (17,), generator=g),
        "m.bool": torch.randint(0, 2, (9,), generator=g).bool(),
        "s.scalar": torch.tensor(2.5),
        "s.scalar_i64": torch.tensor(7),
        "e.empty": torch.zeros(0, 4, dtype=torch.float16),
        "e.empty_bf16": torch.zeros(3, 0, dtype=torch.bfloat16),
        "u.u8": torch.randint(0, 256, (5,), generator=g, dtype=torch.uint8),
        "w.f64": torch.randn(3, generator=g, dtype=torch.float64),
    }
    for name in ("float8_e4m3fn", "float8_e5m2"):
        if hasattr(torch, name):
            d["f8." + name] = torch.randn(6, 6, generator=g).to(getattr(torch, name))
    return d


def _same(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device
    if a.dtype in (getattr(torch, "float8_e4m3fn", None), getattr(torch, "float8_e5m2", None)):
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    assert torch.equal(a, b)


@pytest.mark.parametrize("device", ["cuda:0", "cpu"])
def test_load_file_equals_safetensors(tmp_path, device):
    p = str(tmp_path / "t.safetensors")
    safetensors_torch.save_file(_sample(), p, metadata={"format": "pt"})
    want = safetensors_torch.load_file(p, device=device)
    got = gst.load_file(p, device=device)
    assert set(got) == set(want)
    for k in want:
        _same(got[k], want[k])
    with gst.safe_open(p, framework="pt", device=device) as f:
        assert f.metadata() == {"format": "pt"}
        for k in f.keys():
            _same(f.get_tensor(k), want[k])


def test_load_counts_device_bytes(tmp_path):
    p = str(tmp_path / "c.safetensors")
    safetensors_torch.save_file({"x": torch.randn(1 << 20)}, p)
    s0 = gpufile.stats()["gpufile"]["read"]
    gst.load_file(p, device="cuda:0")
    s1 = gpufile.stats()["gpufile"]["read"]
    moved = sum(s1[k]["bytes"] - s0[k]["bytes"] for k in ("posix", "cufile", "small"))
    assert moved >= 4 << 20


@pytest.mark.parametrize("metadata", [None, {"format": "pt"}])
def test_save_file_bytes_identical(tmp_path, metadata):
    d = _sample()
    a, b = str(tmp_path / "ours.safetensors"), str(tmp_path / "theirs.safetensors")
    safetensors_torch.save_file(d, b, metadata=metadata)
    gst.save_file({k: v.cuda() for k, v in d.items()}, a, metadata=metadata)
    assert open(a, "rb").read() == open(b, "rb").read()
    gst.save_file(d, a, metadata=metadata)  # from host tensors too
    assert open(a, "rb").read() == open(b, "rb").read()


def test_cupy_load(tmp_path):
    cupy = pytest.importorskip("cupy")
    p = str(tmp_path / "cp.safetensors")
    d = {"a": torch.arange(12, dtype=torch.float32).reshape(3, 4),
         "b": torch.arange(5, dtype=torch.int64)}
    safetensors_torch.save_file(d, p)
    import gpufile.safetensors.cupy as gcp

    got = gcp.load_file(p, device=0)
    for k in d:
        assert isinstance(got[k], cupy.ndarray)
        assert cupy.asnumpy(got[k]).tobytes() == d[k].numpy().tobytes()


def test_device_map_two_gpus(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    d = {"model.layers.0.w": torch.randn(512, 512), "model.layers.1.w": torch.randn(512, 512),
         "lm_head.w": torch.randn(100, 512).to(torch.bfloat16)}
    p = str(tmp_path / "m.safetensors")
    safetensors_torch.save_file(d, p)
    got = gst.load_file(p, device="cuda:0", device_map={"model.layers.1": "cuda:1",
                                                         "lm_head": 1})
    assert got["model.layers.0.w"].device == torch.device("cuda:0")
    assert got["model.layers.1.w"].device == torch.device("cuda:1")
    assert got["lm_head.w"].device == torch.device("cuda:1")
    for k in d:
        assert torch.equal(got[k].cpu(), d[k])


def test_checkpoint_shards_on_two_gpus(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    import json

    a = {"a.%d" % i: torch.randn(256, 256) for i in range(8)}
    b = {"b.%d" % i: torch.randn(256, 256).half() for i in range(8)}
    safetensors_torch.save_file(a, str(tmp_path / "s1.safetensors"))
    safetensors_torch.save_file(b, str(tmp_path / "s2.safetensors"))
    wm = {k: "s1.safetensors" for k in a}
    wm.update({k: "s2.safetensors" for k in b})
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    got = gst.load_checkpoint(str(tmp_path), device="cuda:0", device_map={"b": "cuda:1"})
    for k, v in a.items():
        assert got[k].device.index == 0 and torch.equal(got[k].cpu(), v)
    for k, v in b.items():
        assert got[k].device.index == 1 and torch.equal(got[k].cpu(), v)


def _write_raw(path, entries):
    """A safetensors file written here, tensors in the given order and
    back to back: entries [(name, dtype, shape, bytes)]."""
    import json
    import struct

    parts, at = [], 0
    for name, dt, shape, blob in entries:
        parts.append('"%s":{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}'
                     % (name, dt, json.dumps(list(shape)), at, at + len(blob)))
        at += len(blob)
    hdr = ("{" + ",".join(parts) + "}").encode()
    hdr += b" " * ((8 - len(hdr) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr + b"".join(e[3] for e in entries))


_TORCH_ST = [("BOOL", "bool"), ("U8", "uint8"), ("I8", "int8"), ("I16", "int16"),
             ("F16", "float16"), ("BF16", "bfloat16"), ("I32", "int32"),
             ("F32", "float32"), ("F64", "float64"), ("I64", "int64"),
             ("F8_E4M3", "float8_e4m3fn"), ("F8_E5M2", "float8_e5m2"),
             ("U16", "uint16"), ("U32", "uint32"), ("U64", "uint64"),
             ("C64", "complex64")]


def _mixed(n, misalign):
    """n tensors over every dtype this torch has, varied shapes (scalars,
    1-sized and empty dimensions); with misalign, odd-sized U8 tensors in
    between put many tensors at offsets that are not a multiple of their
    itemsize. Returns [(name, st dtype, shape, bytes, torch dtype)]."""
    g = torch.Generator().manual_seed(11)
    kinds = [(s, getattr(torch, t)) for s, t in _TORCH_ST if hasattr(torch, t)]
    shapes = [(), (1,), (3,), (2, 5), (1, 1, 4), (0,), (4, 0), (3, 1, 2), (64, 33)]
    out = []
    for i in range(n):
        st_dt, dt = kinds[i % len(kinds)]
        shape = shapes[(i * 7) % len(shapes)]
        nbytes = torch.empty(shape, dtype=dt).numel() * torch.empty((), dtype=dt).element_size()
        blob = torch.randint(0, 256, (nbytes,), generator=g, dtype=torch.uint8)
        if st_dt == "BOOL":
            blob &= 1
        out.append(("t.%04d" % i, st_dt, shape, blob.numpy().tobytes(), dt))
        if misalign and i % 3 == 0:
            pad = bytes(range(1 + i % 3))
            out.append(("pad.%04d" % i, "U8", (len(pad),), pad, torch.uint8))
    return out


def _bytes(t):
    """The bytes of tensor t (on the host), as a uint8 tensor: compared
    instead of values, since random bytes make NaNs (NaN != NaN)."""
    t = t.detach().cpu().contiguous().reshape(-1)
    if t.is_complex():
        t = torch.view_as_real(t).reshape(-1)
    return t.view(torch.uint8) if t.numel() else torch.empty(0, dtype=torch.uint8)


def _same_bytes(a, b, name):
    assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device, name
    assert torch.equal(_bytes(a), _bytes(b)), name


@pytest.mark.parametrize("misalign", [False, True])
@pytest.mark.parametrize("device", ["cuda:0", "cpu"])
def test_many_mixed_tensors(tmp_path, device, misalign):
    # Hundreds of tensors of every dtype and of odd shapes, at aligned and
    # (misalign) unaligned offsets: the names, dtypes, shapes, devices and
    # bytes are those of safetensors.torch.load_file (when it reads the
    # file) and of the bytes written; every tensor is usable (contiguous,
    # aligned for its dtype).
    p = str(tmp_path / "mixed.safetensors")
    entries = _mixed(500, misalign)
    _write_raw(p, [e[:4] for e in entries])
    got = gst.load_file(p, device=device)
    assert list(got) == [e[0] for e in entries]
    dev = torch.device(device)
    for name, _, shape, blob, dt in entries:
        g = got[name]
        assert g.dtype == dt and g.shape == torch.Size(shape) and g.device == dev, name
        assert g.is_contiguous() and g.data_ptr() % g.element_size() == 0, name
        assert _bytes(g).numpy().tobytes() == blob, name
    try:
        ref = safetensors_torch.load_file(p, device=device)
    except Exception as e:  # some versions refuse unaligned tensors
        if not misalign:
            raise
        print("safetensors.torch.load_file refused the unaligned file: %s" % e)
        return
    assert set(ref) == set(got)
    for k in ref:
        _same_bytes(got[k], ref[k], k)


@pytest.mark.parametrize("lead", [0, 1])
@pytest.mark.parametrize("device", ["cuda:0", "cpu"])
def test_runs_of_same_shaped_tensors(tmp_path, device, lead):
    # Runs of tensors of one dtype and shape back to back (their views are
    # made by one as_strided(...).unbind(0)), broken by dtype, shape,
    # scalars and empty tensors; lead=1 puts every run at an odd offset.
    # Each tensor: its own bytes, dtype, shape, device; contiguous, aligned,
    # overlapping no other; writing one leaves its neighbours as they were.
    g = torch.Generator().manual_seed(3)
    spec = [("F32", torch.float32, (4, 3))] * 7 + [("F32", torch.float32, (3, 4))] * 3 + \
        [("I64", torch.int64, ())] * 5 + [("F16", torch.float16, (0, 2))] * 3 + \
        [("BF16", torch.bfloat16, (5,))] * 4 + [("F64", torch.float64, (2, 1, 2))] * 6 + \
        [("BOOL", torch.bool, (9,))] * 2 + [("I16", torch.int16, (1,))] * 3 + \
        [("U8", torch.uint8, (3,))] * 4
    entries = [("lead", "U8", (1,), b"\x07", torch.uint8)] if lead else []
    for i, (st_dt, dt, shape) in enumerate(spec):
        n = torch.empty(shape, dtype=dt).numel() * torch.empty((), dtype=dt).element_size()
        blob = torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8)
        if st_dt == "BOOL":
            blob &= 1
        entries.append(("r.%03d" % i, st_dt, shape, blob.numpy().tobytes(), dt))
    p = str(tmp_path / "runs.safetensors")
    _write_raw(p, [e[:4] for e in entries])
    got = gst.load_file(p, device=device)
    dev = torch.device(device)
    assert list(got) == [e[0] for e in entries]
    for name, _, shape, blob, dt in entries:
        t = got[name]
        assert t.dtype == dt and t.shape == torch.Size(shape) and t.device == dev, name
        assert t.is_contiguous() and t.data_ptr() % t.element_size() == 0, name
        assert _bytes(t).numpy().tobytes() == blob, name
    live = [got[e[0]] for e in entries if e[3]]
    for a, b in zip(live, live[1:]):
        assert a.data_ptr() + a.numel() * a.element_size() <= b.data_ptr() or \
            b.data_ptr() + b.numel() * b.element_size() <= a.data_ptr()
    r0, r1 = got["r.000"], got["r.001"]
    before = _bytes(r1).clone()
    r0.fill_(1.5)
    assert torch.equal(_bytes(r1), before)
    if not lead:
        ref = safetensors_torch.load_file(p, device=device)
        for k in ref:
            if k != "r.000":
                _same_bytes(got[k], ref[k], k)


def test_many_mixed_tensors_cupy(tmp_path):
    cupy = pytest.importorskip("cupy")
    import gpufile.safetensors.cupy as gcp

    p = str(tmp_path / "mixedcp.safetensors")
    npt = {"BOOL", "U8", "I8", "I16", "U16", "F16", "I32", "U32", "F32", "F64", "I64",
           "U64", "C64"}
    entries = [e for e in _mixed(300, True) if e[1] in npt]
    _write_raw(p, [e[:4] for e in entries])
    got = gcp.load_file(p, device=0)
    for name, st_dt, shape, blob, _ in entries:
        g = got[name]
        assert isinstance(g, cupy.ndarray) and g.shape == tuple(shape), name
        assert g.data.ptr % g.dtype.itemsize == 0, name
        assert cupy.asnumpy(g).tobytes() == blob, name


# Index forms safetensors 0.8's get_slice takes (the pt framework); a
# negative step it refuses, as torch does.
SLICE_INDICES = [
    slice(None), (slice(None), slice(1, 3)), 1, -1, (0, 1), (0, 1, 2), (slice(0, 2), 1),
    slice(-1, None), slice(5, 10), slice(2, 1), (Ellipsis, 1), (1, Ellipsis),
    (slice(None), Ellipsis, slice(1, 2)), slice(None, None, 2), None, (None, 1),
    (slice(None), -3), (slice(None), slice(None), slice(0, 4, 3)), [0, 1],
]


# (RUN_MIN, GATHER_MIN) sending every selection of several runs to one
# plan of gpufile/safetensors/_slice.py.
SLICE_PLANS = {"runs": (1, 1), "gather": (1 << 40, 1), "span": (1 << 40, 1 << 40)}


@pytest.mark.parametrize("plan", ["runs", "gather", "span", "default"])
@pytest.mark.parametrize("device", ["cuda:0", "cpu"])
def test_get_slice_equals_safetensors(tmp_path, monkeypatch, device, plan):
    from safetensors import safe_open as ref_open
    from gpufile.safetensors import _slice

    if plan in SLICE_PLANS:
        monkeypatch.setattr(_slice, "RUN_MIN", SLICE_PLANS[plan][0])
        monkeypatch.setattr(_slice, "GATHER_MIN", SLICE_PLANS[plan][1])
    g = torch.Generator().manual_seed(9)
    d = {"bf16": torch.randn(2, 3, 4, generator=g).to(torch.bfloat16),
         "f32": torch.randn(2, 3, 4, generator=g),
         "i64": torch.randint(-2**40, 2**40, (2, 3, 4), generator=g),
         "bool": torch.randint(0, 2, (2, 3, 4), generator=g).bool()}
    if hasattr(torch, "float8_e4m3fn"):
        d["f8"] = torch.randn(2, 3, 4, generator=g).to(torch.float8_e4m3fn)
    p = str(tmp_path / "sl.safetensors")
    safetensors_torch.save_file(d, p)
    with ref_open(p, framework="pt", device=device) as r, \
            gst.safe_open(p, framework="pt", device=device) as f:
        for name in r.keys():
            rs, fs = r.get_slice(name), f.get_slice(name)
            assert fs.get_shape() == rs.get_shape()
            assert fs.get_dtype() == rs.get_dtype()
            for idx in SLICE_INDICES:
                got = fs[idx]
                assert got.is_contiguous(), (name, idx)
                _same(got, rs[idx].contiguous())
            with pytest.raises(ValueError, match=r"sl\.safetensors: tensor '%s'" % name):
                fs[::-1]


def _read_bytes():
    """(bytes read into device memory, into host memory) so far."""
    s = gpufile.stats()["gpufile"]["read"]
    return sum(s[k]["bytes"] for k in ("posix", "cufile", "small")), s["host"]["bytes"]


def test_get_slice_reads_its_bytes_into_gpu_memory(tmp_path):
    w = torch.randn(4, 512, 1024)  # 8 MiB: four "experts"
    p = str(tmp_path / "w.safetensors")
    safetensors_torch.save_file({"w": w}, p)
    ref = w.cuda()
    span = ((3 * 512 + 511) * 1024 + 8) * 4
    with gst.safe_open(p, framework="pt", device="cuda:0") as f:
        sl = f.get_slice("w")
        # index, bytes read into GPU memory, into host memory
        for idx, dev, host in [(np.s_[1:3], 4 << 20, 0),           # one run
                               (np.s_[:, 256:], 4 << 20, 0),       # four runs of 1 MiB
                               (np.s_[:, :, :256], 0, 2 << 20),    # gathered (1 KiB runs)
                               (np.s_[:, :, :8], span, 0)]:        # a span, copied out
            d0, h0 = _read_bytes()
            got = sl[idx]
            d1, h1 = _read_bytes()
            assert got.device == torch.device("cuda:0") and got.is_contiguous()
            assert torch.equal(got, ref[idx])
            assert (d1 - d0, h1 - h0) == (dev, host), idx


@pytest.mark.parametrize("side_stream", [False, True])
def test_gathered_slices_queued_in_turn(tmp_path, side_stream):
    # Gathered slices are copied to the GPU on the current stream from two
    # pinned buffers used in turn: sixteen in a row, compared only after
    # all were queued, must each hold their own columns.
    # Integers, so that the sums queued on the stream are exact: rows of
    # 16 KiB, 256 columns are 1 KiB runs.
    w = torch.randint(-2**20, 2**20, (64, 4096), dtype=torch.int32,
                      generator=torch.Generator().manual_seed(3))
    p = str(tmp_path / "q.safetensors")
    safetensors_torch.save_file({"w": w}, p)
    stream = torch.cuda.Stream() if side_stream else torch.cuda.current_stream()
    with torch.cuda.stream(stream):
        with gst.safe_open(p, framework="pt", device="cuda:0") as f:
            sl = f.get_slice("w")
            parts = [sl[:, k * 256:(k + 1) * 256] for k in range(16)]
            sums = [x.sum() for x in parts]  # used in stream order at once
    stream.synchronize()
    for k, part in enumerate(parts):
        assert torch.equal(part.cpu(), w[:, k * 256:(k + 1) * 256]), k
        assert sums[k].item() == w[:, k * 256:(k + 1) * 256].sum().item(), k


def test_gather_refuses_device_memory(tmp_path):
    import ctypes
    from gpufile.safetensors import _core

    p = str(tmp_path / "g.bin")
    with open(p, "wb") as fh:
        fh.write(bytes(range(256)) * 16)
    lib = _core._c()
    with gpufile.File(p) as f:
        dst = torch.empty(64, dtype=torch.uint8, device="cuda:0")
        offs = (ctypes.c_int64 * 2)(0, 100)
        h = f._h.enter()
        try:
            rc = lib.gpufile_pread_gather(h, dst.data_ptr(), 32, 2, offs)
        finally:
            f._h.leave()
        assert rc == -22
        assert "host memory" in gpufile._lib.errmsg() and p in gpufile._lib.errmsg()


def test_get_slice_cupy(tmp_path):
    cupy = pytest.importorskip("cupy")
    w = torch.arange(6 * 5 * 4, dtype=torch.int32).reshape(6, 5, 4)
    p = str(tmp_path / "c.safetensors")
    safetensors_torch.save_file({"w": w}, p)
    ref = w.numpy()
    with gst.safe_open(p, framework="cupy", device=0) as f:
        sl = f.get_slice("w")
        for idx in [np.s_[2:4], np.s_[:, 1:3], np.s_[..., 1], np.s_[::2, None], np.s_[[1, 0]]]:
            got = sl[idx]
            assert isinstance(got, cupy.ndarray) and got.flags.c_contiguous
            assert got.shape == ref[idx].shape and (cupy.asnumpy(got) == ref[idx]).all()


def test_get_slice_on_gpu_1(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    w = torch.randn(64, 300)
    p = str(tmp_path / "g1.safetensors")
    safetensors_torch.save_file({"w": w}, p)
    with gst.safe_open(p, framework="pt", device="cuda:1") as f:
        for idx in [np.s_[10:20], np.s_[:, 100:200]]:
            got = f.get_slice("w")[idx]
            assert got.device == torch.device("cuda:1")
            assert torch.equal(got.cpu(), w[idx])


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"] + os.sys.argv[1:]))
