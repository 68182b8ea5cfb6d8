"""gpufile.safetensors against the safetensors package on a GPU machine:
tensor by tensor equality (torch.equal) with safetensors.torch.load_file,
save_file bytes identical to safetensors.torch.save_file, CuPy loads, and
a device_map over two GPUs. Skipped without torch, safetensors or a GPU."""
import os

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


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"] + os.sys.argv[1:]))
