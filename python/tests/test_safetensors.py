"""gpufile.safetensors on a machine without a GPU: NumPy loads compared with
a reference parser written here, save_file bytes against the layout the
format prescribes (and the byte strings of safetensors' own serializer
tests), malformed files, safe_open, load_checkpoint and device_map."""
import errno
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import gpufile.safetensors as st
import gpufile.safetensors.numpy as stn
from gpufile.safetensors import _core

NP = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": np.int16,
      "U16": np.uint16, "F16": np.float16, "I32": np.int32, "U32": np.uint32,
      "F32": np.float32, "F64": np.float64, "I64": np.int64, "U64": np.uint64}
NAMES = {np.dtype(v): k for k, v in NP.items()}


def ref_parse(path):
    """A reader of the format written from its description: header length,
    JSON, data section; returns (metadata, {name: ndarray})."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    hdr = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    meta = hdr.pop("__metadata__", None)
    out = {}
    for name, e in hdr.items():
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], dtype=NP[e["dtype"]]).reshape(e["shape"])
    return meta, out


def ref_write(path, entries, metadata=None, order=None):
    """Writes entries [(name, dtype, shape, bytes)] in the given order (as
    listed when order is None), header keys in that order."""
    parts, blobs, at = [], [], 0
    if metadata is not None:
        parts.append('"__metadata__":' + json.dumps(metadata, separators=(",", ":")))
    for name, dtype, shape, blob in entries:
        parts.append('"%s":{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}'
                     % (name, dtype, json.dumps(list(shape), separators=(",", ":")),
                        at, at + len(blob)))
        blobs.append(blob)
        at += len(blob)
    hdr = ("{" + ",".join(parts) + "}").encode()
    hdr += b" " * ((8 - len(hdr) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr + b"".join(blobs))


def sample(rng):
    return {
        "w.f32": rng.standard_normal((3, 5)).astype(np.float32),
        "w.f16": rng.standard_normal((7,)).astype(np.float16),
        "w.f64": rng.standard_normal((2, 2, 2)).astype(np.float64),
        "i.i64": rng.integers(-2**40, 2**40, (4,)).astype(np.int64),
        "i.u8": rng.integers(0, 256, (9,)).astype(np.uint8),
        "i.i16": rng.integers(-300, 300, (3, 3)).astype(np.int16),
        "m.bool": rng.integers(0, 2, (5,)).astype(np.bool_),
        "s.scalar": np.array(3.5, dtype=np.float32),
        "e.empty": np.zeros((0, 3), dtype=np.float16),
        "big": rng.integers(0, 256, (3 << 20,)).astype(np.uint8),  # several tasks
    }


def test_import_is_lazy():
    code = ("import sys, gpufile.safetensors, gpufile.safetensors.torch, "
            "gpufile.safetensors.numpy, gpufile.safetensors.cupy; "
            "print(sorted(m for m in ('torch', 'numpy', 'cupy') if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(st.__file__))))
    out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                         capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_load_matches_reference_parser(tmp_path):
    rng = np.random.default_rng(1)
    d = sample(rng)
    p = str(tmp_path / "a.safetensors")
    # Written by the test's own writer, in an order save_file would not use.
    ref_write(p, [(k, NAMES[v.dtype], v.shape, v.tobytes()) for k, v in d.items()],
              metadata={"format": "np"})
    meta, ref = ref_parse(p)
    got = stn.load_file(p)
    assert set(got) == set(ref)
    for k in ref:
        assert got[k].dtype == ref[k].dtype, k
        assert got[k].shape == ref[k].shape, k
        assert got[k].tobytes() == ref[k].tobytes(), k
    with st.safe_open(p, framework="numpy") as f:
        assert f.keys() == sorted(d)
        assert f.offset_keys() == list(d)
        assert f.metadata() == meta == {"format": "np"}
        for k in d:
            t = f.get_tensor(k)
            assert t.dtype == d[k].dtype and t.shape == d[k].shape
            assert t.tobytes() == d[k].tobytes()
        with pytest.raises(KeyError, match="nope"):
            f.get_tensor("nope")
    with pytest.raises(ValueError, match="closed"):
        f.get_tensor("w.f32")


def test_load_places_data_congruent_to_file_offsets(tmp_path):
    # Runs of tensors start at addresses congruent to their file offsets
    # modulo 4096, so that page-aligned file ranges land page-aligned.
    d = {"a": np.arange(1000, dtype=np.float32), "b": np.arange(7, dtype=np.int16)}
    p = str(tmp_path / "c.safetensors")
    stn.save_file(d, p)
    got = stn.load_file(p)
    with st.safe_open(p, "numpy") as f:
        for k in d:
            info = f.tensor_info(k)
            assert got[k].ctypes.data % 4096 == (f._h.data_offset + info.begin) % 4096
            assert f.get_tensor(k).ctypes.data % 4096 == \
                (f._h.data_offset + info.begin) % 4096


def test_loads_count_on_host_path(tmp_path):
    import gpufile

    d = {"x": np.arange(1 << 20, dtype=np.float32)}
    p = str(tmp_path / "h.safetensors")
    stn.save_file(d, p)
    before = gpufile.stats()["gpufile"]["read"]["host"]["bytes"]
    stn.load_file(p)
    after = gpufile.stats()["gpufile"]["read"]["host"]["bytes"]
    assert after - before >= 4 << 20


def test_save_file_layout(tmp_path):
    rng = np.random.default_rng(2)
    d = sample(rng)
    p = str(tmp_path / "s.safetensors")
    stn.save_file(d, p, metadata={"z": "1", "a": "\u00e9\"\n"})
    raw = open(p, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    text = raw[8:8 + n]
    assert text == text.rstrip(b" ") + b" " * (n - len(text.rstrip(b" ")))
    # Keys in layout order: __metadata__ (keys sorted), then dtype order
    # descending, then name.
    order = {k: i for i, k in enumerate(st.dtype_order())}
    names = sorted(d, key=lambda k: (-order[NAMES[d[k].dtype]], k))
    expected = ['"__metadata__":{"a":"\u00e9\\"\\n","z":"1"}']
    at = 0
    for k in names:
        nb = d[k].nbytes
        expected.append('"%s":{"dtype":"%s","shape":%s,"data_offsets":[%d,%d]}'
                        % (k, NAMES[d[k].dtype], json.dumps(list(d[k].shape)).replace(" ", ""),
                           at, at + nb))
        at += nb
    assert text.rstrip(b" ").decode() == "{" + ",".join(expected) + "}"
    assert raw[8 + n:] == b"".join(d[k].tobytes() for k in names)
    meta, back = ref_parse(p)
    assert meta == {"z": "1", "a": "\u00e9\"\n"}
    for k in d:
        assert back[k].tobytes() == d[k].tobytes()


def test_dtype_order():
    # safetensors' Dtype enum order (safetensors/src/tensor.rs), which
    # save_file's layout follows.
    assert st.dtype_order() == [
        "BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3",
        "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16",
        "I32", "U32", "F32", "C64", "F64", "I64", "U64"]


def test_save_file_bytes_as_safetensors_tests(tmp_path):
    # The byte strings safetensors' own serializer tests expect
    # (safetensors/src/tensor.rs: test_serialization, test_empty).
    p = str(tmp_path / "one.safetensors")
    stn.save_file({"attn.0": np.arange(6, dtype=np.float32).reshape(1, 2, 3)}, p)
    hdr = b'{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}'
    assert len(hdr) == 64
    assert open(p, "rb").read() == struct.pack("<Q", 64) + hdr + \
        np.arange(6, dtype="<f4").tobytes()
    stn.save_file({}, p)
    assert open(p, "rb").read() == bytes([8, 0, 0, 0, 0, 0, 0, 0]) + b"{}      "
    stn.save_file({}, p, metadata={"framework": "pt"})
    assert open(p, "rb").read() == bytes([40, 0, 0, 0, 0, 0, 0, 0]) + \
        b'{"__metadata__":{"framework":"pt"}}     '
    assert st.save({}, metadata={"framework": "pt"}) == open(p, "rb").read()


def test_save_file_big_endian_and_strided_as_safetensors_numpy(tmp_path):
    # safetensors.numpy byteswaps a big-endian array and writes a
    # non-contiguous one in C order (tobytes()): the same file as for the
    # little-endian C-contiguous copies, the caller's arrays untouched.
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    given = {"be": np.arange(5, dtype=">f4"), "be_c": np.array([1 + 2j], ">c8"),
             "be_i": np.arange(-3, 3, dtype=">i8").reshape(2, 3),
             "t": base.T, "step": base[:, ::2], "be_t": base.astype(">u2").T,
             "u8": np.arange(4, dtype=np.uint8)[::-1]}
    def state(arrays):
        return {k: (v.dtype, v.strides, v.tobytes()) for k, v in arrays.items()}

    before = state(given)
    plain = {k: np.ascontiguousarray(v, dtype=v.dtype.newbyteorder("<"))
             for k, v in given.items()}
    p = str(tmp_path / "given.safetensors")
    q = str(tmp_path / "plain.safetensors")
    stn.save_file(given, p, metadata={"m": "1"})
    stn.save_file(plain, q, metadata={"m": "1"})
    raw = open(p, "rb").read()
    assert raw == open(q, "rb").read()
    assert raw == stn.save(given, metadata={"m": "1"})
    assert state(given) == before
    back = stn.load_file(p)
    for k, v in given.items():
        assert back[k].dtype == v.dtype.newbyteorder("<")
        assert back[k].shape == v.shape and np.array_equal(back[k], v)
        assert back[k].tobytes() == plain[k].tobytes()


def test_save_file_rejects(tmp_path):
    p = str(tmp_path / "bad.safetensors")
    with pytest.raises(TypeError, match="metadata"):
        stn.save_file({"x": np.zeros(2)}, p, metadata={"a": 1})
    with pytest.raises(ValueError, match="'x'.*dtype"):
        stn.save_file({"x": np.zeros(2, dtype=np.complex128)}, p)


@pytest.mark.parametrize("short", [0, 1])
def test_save_file_short_write(tmp_path, monkeypatch, short):
    """A write that moved fewer bytes than asked, without an error, was
    not noticed: save_file returned and left a file whose header promises
    bytes it lacks. It raises OSError EIO naming the file and what was
    cut short (issue 39 item 4). short: which write is cut (0: the header,
    1: the first tensor's data)."""
    from gpufile import _lib

    p = str(tmp_path / "short.safetensors")
    lib = _lib.lib()
    real, calls = lib.gpufile_pwrite, []

    def pwrite(h, buf, n, off):
        rc = real(h, buf, n, off)
        calls.append(n)
        return rc - 1 if len(calls) == short + 1 and rc > 0 else rc

    monkeypatch.setattr(lib, "gpufile_pwrite", pwrite)
    with pytest.raises(OSError) as ei:
        stn.save_file({"x": np.arange(10, dtype=np.int32)}, p)
    assert ei.value.errno == errno.EIO and ei.value.filename == p
    what = "the header" if short == 0 else "tensor 'x'"
    assert "wrote %d of the %d bytes of %s" % (calls[short] - 1, calls[short],
                                                what) in str(ei.value)


@pytest.mark.parametrize("header, ndata, field", [
    ('{"w":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}}', 1, 'tensor "w": dtype "Q7"'),
    ('{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', 4, 'tensor "w": shape [2] of F32'),
    ('{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,9]}}', 1,
     'tensor "w": data_offsets [0, 9] reach past the data section'),
    ('{"__metadata__":{"a":1}}', 0, '__metadata__ key "a"'),
])
def test_malformed_names_file_tensor_field(tmp_path, header, ndata, field):
    p = str(tmp_path / "bad.safetensors")
    h = header.encode()
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"\0" * ndata)
    for call in (lambda: stn.load_file(p), lambda: st.safe_open(p, "numpy")):
        with pytest.raises(OSError) as ei:
            call()
        assert ei.value.errno == errno.EBADMSG
        assert p in str(ei.value) and field in str(ei.value)


def test_framework_and_device_errors(tmp_path):
    p = str(tmp_path / "d.safetensors")
    stn.save_file({"x": np.zeros(3, np.float32)}, p)
    with pytest.raises(ValueError, match="framework 'tf'"):
        st.load_file(p, framework="tf")
    with pytest.raises(ValueError, match="host memory"):
        st.load_file(p, framework="numpy", device="cuda:0")
    with pytest.raises(ValueError, match="device 'gpu7'"):
        st.load_file(p, framework="numpy", device="gpu7")
    # BF16 has no NumPy dtype: a clear error naming the tensor.
    ref_write(p, [("b", "BF16", (2,), b"\0" * 4)])
    with pytest.raises(ValueError, match="'b'.*BF16"):
        stn.load_file(p)


def test_device_for():
    m = {"model.layers.0": 1, "model": 2, "lm_head.weight": 3, "": 4}
    assert _core.device_for("model.layers.0.w", m, 0) == 1
    assert _core.device_for("model.layers.01.w", m, 0) == 2  # not a prefix at a dot
    assert _core.device_for("lm_head.weight", m, 0) == 3
    assert _core.device_for("other", m, 0) == 4
    assert _core.device_for("other", {"model": 1}, "cpu") == "cpu"
    assert _core.device_for("x", None, 5) == 5


def _make_checkpoint(folder, rng):
    tensors = {"model.a": rng.standard_normal((4, 4)).astype(np.float32),
               "model.b": np.arange(10, dtype=np.int64),
               "lm_head.w": rng.standard_normal((3,)).astype(np.float16)}
    stn.save_file({k: tensors[k] for k in ("model.a", "model.b")},
                  os.path.join(folder, "model-00001-of-00002.safetensors"))
    stn.save_file({"lm_head.w": tensors["lm_head.w"]},
                  os.path.join(folder, "model-00002-of-00002.safetensors"))
    index = {"metadata": {"total_size": 0},
             "weight_map": {"model.a": "model-00001-of-00002.safetensors",
                            "model.b": "model-00001-of-00002.safetensors",
                            "lm_head.w": "model-00002-of-00002.safetensors"}}
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)
    return tensors, index


@pytest.mark.parametrize("parallel", [True, False])
def test_load_checkpoint(tmp_path, parallel):
    tensors, index = _make_checkpoint(str(tmp_path), np.random.default_rng(3))
    for where in (str(tmp_path), str(tmp_path / "model.safetensors.index.json")):
        got = stn.load_checkpoint(where, parallel=parallel)
        assert set(got) == set(tensors)
        for k in tensors:
            assert got[k].tobytes() == tensors[k].tobytes()
    # The index names a tensor its shard lacks.
    index["weight_map"]["ghost"] = "model-00002-of-00002.safetensors"
    bad = tmp_path / "bad.safetensors.index.json"
    bad.write_text(json.dumps(index))
    with pytest.raises(ValueError, match="'ghost'"):
        stn.load_checkpoint(str(bad))
    index["weight_map"]["ghost"] = "../elsewhere.safetensors"
    bad.write_text(json.dumps(index))
    with pytest.raises(ValueError, match="outside the folder"):
        stn.load_checkpoint(str(bad))


def test_load_checkpoint_folder_without_index(tmp_path):
    stn.save_file({"a": np.ones(2, np.float32)}, str(tmp_path / "x.safetensors"))
    stn.save_file({"b": np.ones(3, np.float32)}, str(tmp_path / "y.safetensors"))
    got = stn.load_checkpoint(str(tmp_path))
    assert sorted(got) == ["a", "b"]
    stn.save_file({"a": np.ones(2, np.float32)}, str(tmp_path / "z.safetensors"))
    with pytest.raises(ValueError, match="'a' is in both"):
        stn.load_checkpoint(str(tmp_path))
    with pytest.raises(FileNotFoundError):
        stn.load_checkpoint(str(tmp_path / "nothing-here"))


def test_misaligned_tensor_is_copied(tmp_path):
    # A U8 tensor of 3 bytes puts the F32 tensor after it at offset 3:
    # the view would be misaligned, so it is copied, with the same bytes.
    p = str(tmp_path / "m.safetensors")
    f = np.arange(4, dtype=np.float32)
    ref_write(p, [("a", "U8", (3,), b"\1\2\3"), ("b", "F32", (4,), f.tobytes())])
    got = stn.load_file(p)
    assert got["b"].tobytes() == f.tobytes()
    assert got["b"].ctypes.data % 4 == 0


def _mixed_entries(rng, n):
    """n tensors of every NumPy-loadable dtype and of varied shapes
    (scalars, 1-sized and empty dimensions), written back to back with
    odd-sized U8 tensors between some of them, so that many tensors sit at
    offsets that are not a multiple of their itemsize (the format allows
    it; safetensors' own writer never makes it)."""
    kinds = sorted(NP)
    shapes = [(), (1,), (3,), (2, 5), (1, 1, 4), (0,), (4, 0), (3, 1, 2)]
    out = []
    for i in range(n):
        dt = kinds[i % len(kinds)]
        shape = shapes[(i * 7) % len(shapes)]
        a = rng.integers(0, 256, int(np.prod(shape, dtype=np.int64)) *
                         np.dtype(NP[dt]).itemsize, dtype=np.uint8)
        if dt == "BOOL":
            a = a & 1
        out.append(("t.%04d" % i, dt, shape, a.tobytes()))
        if i % 3 == 0:  # shifts what follows by 1..3 bytes
            pad = rng.integers(0, 256, 1 + i % 3, dtype=np.uint8).tobytes()
            out.append(("pad.%04d" % i, "U8", (len(pad),), pad))
    return out


def test_many_mixed_and_misaligned_tensors(tmp_path):
    # Every tensor of a file of hundreds equals the reference reader's,
    # with its dtype and shape; a tensor whose address suits its dtype is
    # a view of the one buffer, the others are aligned copies.
    p = str(tmp_path / "mixed.safetensors")
    entries = _mixed_entries(np.random.default_rng(7), 400)
    ref_write(p, entries)
    _, ref = ref_parse(p)
    got = stn.load_file(p)
    assert list(got) == [e[0] for e in entries]  # offset order, as before
    misaligned = shared = 0
    bufs = set()
    for name, dt, shape, blob in entries:
        g = got[name]
        assert g.dtype == np.dtype(NP[dt]) and g.shape == tuple(shape), name
        assert g.tobytes() == blob == ref[name].tobytes(), name
        assert g.ctypes.data % g.dtype.alignment == 0, name
        if g.nbytes and _owner(g).nbytes > 1000:
            bufs.add(id(_owner(g)))
            shared += 1
        elif g.nbytes:
            misaligned += 1
    assert len(bufs) == 1 and shared > 100 and misaligned > 20, (shared, misaligned)
    with st.safe_open(p, framework="numpy") as f:
        for name, dt, shape, blob in entries[:60]:
            t = f.get_tensor(name)
            assert t.dtype == np.dtype(NP[dt]) and t.shape == tuple(shape)
            assert t.tobytes() == blob


def _owner(a):
    while a.base is not None:
        a = a.base
    return a


@pytest.mark.parametrize("lead", [0, 1, 2])
def test_runs_of_same_shaped_tensors(tmp_path, lead):
    # Runs of tensors of one dtype and shape back to back (the views of a
    # run are made in one call) next to runs broken by a dtype, a shape or
    # a gap, scalars and empty tensors: each tensor has its own bytes,
    # dtype and shape, is C-contiguous and aligned, and overlaps no other.
    # lead: bytes of U8 first, so that with 1 and 2 every run is at an
    # offset that is not a multiple of its itemsize.
    rng = np.random.default_rng(lead)
    spec = [("F32", (4, 3))] * 7 + [("F32", (3, 4))] * 3 + [("I64", ())] * 5 + \
        [("F16", (0, 2))] * 3 + [("F16", (5,))] * 4 + [("F64", (2, 1, 2))] * 6 + \
        [("BOOL", (9,))] * 2 + [("I16", (1,))] * 3 + [("U8", (3,))] * 4
    entries = []
    if lead:
        entries.append(("lead", "U8", (lead,), bytes(range(lead))))
    for i, (dt, shape) in enumerate(spec):
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(NP[dt]).itemsize
        blob = rng.integers(0, 256, n, dtype=np.uint8)
        if dt == "BOOL":
            blob &= 1
        entries.append(("r.%03d" % i, dt, shape, blob.tobytes()))
    p = str(tmp_path / "runs.safetensors")
    ref_write(p, entries)
    got = stn.load_file(p)
    assert list(got) == [e[0] for e in entries]
    for name, dt, shape, blob in entries:
        g = got[name]
        assert isinstance(g, np.ndarray), name
        assert g.dtype == np.dtype(NP[dt]) and g.shape == tuple(shape), name
        assert g.tobytes() == blob, name
        assert g.flags.c_contiguous and g.ctypes.data % g.dtype.alignment == 0, name
    arrays = [got[e[0]] for e in entries if e[3]]
    for a, b in zip(arrays, arrays[1:]):
        assert not np.shares_memory(a, b)
    if lead == 0:  # aligned: all of them views of the one buffer
        assert len({id(_owner(a)) for a in arrays}) == 1


def test_runs():
    T = _core.TensorInfo
    a = [T(0, "a", "F32", 32, 0, (2,), 0, 8), T(1, "b", "F32", 32, 0, (2,), 8, 16),
         T(2, "c", "F32", 32, 0, (1, 2), 16, 24), T(3, "d", "F32", 32, 0, (1, 2), 24, 32),
         T(4, "e", "I32", 32, 0, (1, 2), 32, 40), T(5, "f", "I32", 32, 0, (0,), 40, 40),
         T(6, "g", "I32", 32, 0, (0,), 40, 40), T(7, "h", "I32", 32, 0, (1, 2), 40, 48),
         T(8, "i", "I32", 32, 0, (1, 2), 48, 56)]
    offs = [0, 8, 16, 24, 32, 40, 40, 40, 4096 + 48]  # a gap before "i"
    assert _core._runs(a, offs) == [(0, 2), (2, 2), (4, 1), (5, 1), (6, 1), (7, 1), (8, 1)]
    assert _core._runs([], []) == []


def test_tensor_table_matches_per_index_accessor(tmp_path):
    # The table fetched in one call (gpufile_safetensors_tensors) equals
    # what gpufile_safetensors_tensor gives index by index.
    import ctypes

    p = str(tmp_path / "tab.safetensors")
    entries = _mixed_entries(np.random.default_rng(3), 50)
    ref_write(p, entries)
    lib = _core._c()
    with _core.Header(p) as h, h.hold() as st:
        assert len(h.tensors) == len(entries)
        for k, t in enumerate(h.tensors):
            c = _core._CTensor()
            assert lib.gpufile_safetensors_tensor(st, k, ctypes.byref(c)) == 0
            assert t == _core.TensorInfo(k, c.name.decode(), c.dtype.decode(), c.dtype_bits,
                                         c.dtype_order, tuple(c.shape[:c.ndim]), c.begin,
                                         c.end)
            assert t.nbytes == c.end - c.begin
            assert h.by_name[t.name] is t
        assert [t.name for t in h.tensors] == [e[0] for e in entries]
        assert "TensorInfo('t.0000'" in repr(h.tensors[0])


def test_device_map_cpu_groups(tmp_path):
    # A device_map whose values all name the host: every tensor loads, each
    # distinct value parsed (and checked) once per call.
    p = str(tmp_path / "dm.safetensors")
    d = {"a.w": np.arange(6, dtype=np.float32), "b.w": np.arange(3, dtype=np.int64),
         "c": np.ones(2, np.float16)}
    stn.save_file(d, p)
    got = st.load_file(p, device="cpu", framework="numpy", device_map={"a": "cpu", "b": "CPU"})
    for k in d:
        assert got[k].tobytes() == d[k].tobytes()
    with pytest.raises(ValueError, match="'gpu:0'"):
        st.load_file(p, device="cpu", framework="numpy", device_map={"b": "gpu:0"})


def _write_header(path, header, data=b""):
    h = header.encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def test_metadata_empty_none_and_duplicate_keys(tmp_path):
    # As the reference's safe_open().metadata(): {} for an empty
    # __metadata__ (so that save_file(metadata={}) round-trips), None for
    # none or null; a key given twice has its last value (a dict's rule,
    # and the C accessors' since they keep one entry per key).
    p = str(tmp_path / "m.safetensors")
    for md in ({}, None, {"a": "b"}):
        stn.save_file({"x": np.zeros(1, np.uint8)}, p, metadata=md)
        with st.safe_open(p, "numpy") as f:
            assert f.metadata() == md
    for header, want in (('{"__metadata__":null}', None), ("{}", None),
                         ('{"__metadata__":{}}', {}),
                         ('{"__metadata__":{"k":"first","j":"x","k":"last"}}',
                          {"k": "last", "j": "x"})):
        _write_header(p, header)
        with st.safe_open(p, "numpy") as f:
            got = f.metadata()
            assert got == want
            if want:
                assert list(got) == list(want)  # first place, last value
        assert json.loads(header).get("__metadata__") == want  # the rule


def _index(folder, weight_map):
    p = os.path.join(folder, "model.safetensors.index.json")
    with open(p, "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return p


@pytest.mark.parametrize("parallel", [True, False])
def test_load_checkpoint_without_tensors(tmp_path, parallel):
    # No tensor to load is {} (ThreadPoolExecutor(max_workers=0) raised):
    # an empty weight_map, and shards that hold no tensor, with and
    # without a device_map.
    idx = _index(str(tmp_path), {})
    assert stn.load_checkpoint(idx, parallel=parallel) == {}
    os.remove(idx)
    stn.save_file({}, str(tmp_path / "a.safetensors"))
    stn.save_file({}, str(tmp_path / "b.safetensors"))
    for dm in (None, {"x": "cpu"}):
        assert stn.load_checkpoint(str(tmp_path), device="cpu", device_map=dm,
                                   parallel=parallel) == {}


def test_load_checkpoint_shard_names_normalised(tmp_path):
    # "./s1.safetensors" and "s1.safetensors" (or "sub/./s2" and "sub/s2")
    # are one shard, opened once (not "tensor 'x' is in both").
    os.makedirs(str(tmp_path / "sub"))
    a, b = np.arange(3, dtype=np.float32), np.arange(2, dtype=np.int64)
    stn.save_file({"x": a, "y": a}, str(tmp_path / "s1.safetensors"))
    stn.save_file({"z": b}, str(tmp_path / "sub" / "s2.safetensors"))
    idx = _index(str(tmp_path), {"x": "./s1.safetensors", "y": "s1.safetensors",
                                 "z": "sub/./s2.safetensors"})
    for parallel in (True, False):
        got = stn.load_checkpoint(idx, parallel=parallel)
        assert sorted(got) == ["x", "y", "z"]
        assert got["x"].tobytes() == a.tobytes()
        assert got["z"].tobytes() == b.tobytes()
    # The index still has to put each tensor in the shard that holds it.
    _index(str(tmp_path), {"x": "./sub/s2.safetensors", "y": "s1.safetensors",
                           "z": "sub//s2.safetensors"})
    with pytest.raises(ValueError,
                       match="puts tensor 'x' in .*sub/s2.safetensors"):
        stn.load_checkpoint(idx)


def test_path_with_embedded_nul_refused(tmp_path):
    # Passed to C as is, the path ended at the NUL: load_file, safe_open
    # and load_checkpoint of "a.safetensors\0junk" read a.safetensors.
    p = str(tmp_path / "a.safetensors")
    stn.save_file({"x": np.arange(3, dtype=np.int8)}, p)
    for bad in (p + "\0junk", os.fsencode(p) + b"\0junk"):
        for call in (stn.load_file, lambda q: st.safe_open(q, "numpy"),
                     stn.load_checkpoint):
            with pytest.raises(ValueError, match="embedded null byte"):
                call(bad)
    with pytest.raises(TypeError, match="a path is a str"):
        stn.load_file(3)
