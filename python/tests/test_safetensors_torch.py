"""gpufile.safetensors.torch as a drop-in for safetensors.torch (issue 34
item 3) on torch's CPU build (python3-torch): save_file refusing tensors
that share memory, storage_ptr/storage_size, save_model/load_model with
tied weights, device="cpu" loads that name the device to torch, gpufile's
"no usable GPU" error for a GPU load without one. Skipped without torch,
except under CI, where scripts/deps.sh installs it (then a failure)."""
import errno
import os

import numpy as np
import pytest

import gpufile
import gpufile.safetensors as st
import gpufile.safetensors.torch as stt
from gpufile.safetensors import SafetensorError
from conftest import missing

try:
    import torch
except ImportError:
    torch = None


@pytest.fixture(autouse=True)
def _need_torch():
    if torch is None:
        missing("torch (python3-torch, which scripts/deps.sh installs)")


def _no_cuda_for_torch():
    return torch is None or not torch.cuda.is_available()


def test_save_file_refuses_tensors_sharing_memory(tmp_path):
    """Accepted before: the bytes were written twice and loaded back as
    two tensors that no longer share. safetensors raises RuntimeError."""
    p = str(tmp_path / "shared.safetensors")
    w = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    for d, names in (({"a": w, "b": w}, "{'a', 'b'}"),
                     ({"x": w, "row": w[1], "u": torch.zeros(2)}, "{'row', 'x'}")):
        with pytest.raises(RuntimeError, match="share memory") as ei:
            stt.save_file(d, p)
        assert names in str(ei.value) and p in str(ei.value)
        assert "save_model" in str(ei.value)
        assert not os.path.exists(p)
    # Views of one storage that do not overlap share no bytes: saved.
    stt.save_file({"r0": w[0], "r1": w[1]}, p)
    got = stt.load_file(p)
    assert torch.equal(got["r0"], w[0]) and torch.equal(got["r1"], w[1])


def test_storage_ptr_and_size():
    w = torch.zeros(4, 4)
    assert stt.storage_ptr(w[1]) == w.data_ptr() != w[1].data_ptr()
    assert stt.storage_size(w[1]) == 64 == stt.storage_size(w)
    assert stt.storage_size(torch.zeros(3, dtype=torch.float16)) == 6


class _Tied(torch.nn.Module if torch is not None else object):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 4)
        self.b.weight = self.a.weight


def test_save_model_and_load_model_tied_weights(tmp_path):
    p = str(tmp_path / "m.safetensors")
    torch.manual_seed(3)
    m = _Tied()
    meta = {"format": "pt"}
    stt.save_model(m, p, metadata=meta)
    assert meta == {"format": "pt"}  # the caller's dict is not changed
    with st.safe_open(p, framework="pt", device="cpu") as f:
        assert f.keys() == ["a.bias", "a.weight", "b.bias"]
        assert f.metadata() == {"format": "pt", "b.weight": "a.weight"}
    m2 = _Tied()
    missing_, unexpected = stt.load_model(m2, p)
    assert missing_ == set() and unexpected == []
    for k, v in m.state_dict().items():
        assert torch.equal(m2.state_dict()[k], v)
    assert m2.b.weight is m2.a.weight
    # Another model: strict raises naming the keys; not strict returns them.
    lin = torch.nn.Linear(4, 4)
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: '
                                           r'"a.bias", "a.weight", "b.bias"'):
        stt.load_model(lin, p)
    missing_, unexpected = stt.load_model(lin, p, strict=False)
    assert missing_ == {"weight", "bias"}
    assert sorted(unexpected) == ["a.bias", "a.weight", "b.bias"]


def test_save_model_force_contiguous(tmp_path):
    p = str(tmp_path / "t.safetensors")
    m = torch.nn.Module()
    m.register_parameter("w", torch.nn.Parameter(torch.arange(12.0).reshape(3, 4).t()))
    with pytest.raises(ValueError, match="force_contiguous=True"):
        stt.save_model(m, p, force_contiguous=False)
    stt.save_model(m, p)
    assert torch.equal(stt.load_file(p)["w"], m.w.detach())


def test_save_model_refuses_a_group_with_no_whole_tensor(tmp_path):
    m = torch.nn.Module()
    base = torch.zeros(4, 4)
    m.register_buffer("x", base[:2])
    m.register_buffer("y", base[1:3])
    with pytest.raises(RuntimeError, match="none covers it whole"):
        stt.save_model(m, str(tmp_path / "n.safetensors"))


class _Recorder(torch.overrides.TorchFunctionMode if torch is not None else object):
    """Records each torch factory call made without device=: under
    torch.set_default_device("cuda") (torch >= 2.0) it would allocate on
    the GPU."""

    FACTORIES = ("empty", "zeros", "ones", "full", "tensor", "arange", "empty_strided",
                 "frombuffer")

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") in self.FACTORIES and func in (
                getattr(torch, n, None) for n in self.FACTORIES) \
                and kwargs.get("device") is None:
            self.calls.append(func.__name__)
        return func(*args, **kwargs)


@pytest.fixture
def cpu_file(tmp_path):
    p = str(tmp_path / "c.safetensors")
    d = {"w": torch.arange(4096, dtype=torch.float32).reshape(64, 64),
         "s": torch.tensor(1.5), "e": torch.zeros(0, 3, dtype=torch.float16),
         "b": torch.arange(8, dtype=torch.int64)}
    stt.save_file(d, p)
    return p, d


def _every_cpu_load(p):
    """Every way of loading on the host: load_file, load, get_tensor,
    get_tensors, the slice plans (one run, gathered runs, a span, a
    framework index)."""
    out = [stt.load_file(p), st.load_file(p, device="cpu"),
           stt.load(open(p, "rb").read())]
    with st.safe_open(p, framework="pt", device="cpu") as f:
        out.append({k: f.get_tensor(k) for k in f.keys()})
        out.append(f.get_tensors())
        sl = f.get_slice("w")
        out.append({"rows": sl[2:5], "cols": sl[:, 8:40], "span": sl[:, ::3],
                    "mask": f.get_slice("s")[True]})
    return out


def test_cpu_loads_name_the_device(cpu_file):
    """device="cpu" loads called torch.empty without device="cpu"."""
    p, d = cpu_file
    rec = _Recorder()
    with rec:
        got = _every_cpu_load(p)
    assert rec.calls == []
    for g in got[:5]:
        for k, v in d.items():
            assert g[k].device.type == "cpu" and torch.equal(g[k], v)
    parts = got[5]
    assert torch.equal(parts["rows"], d["w"][2:5])
    assert torch.equal(parts["cols"], d["w"][:, 8:40])
    assert torch.equal(parts["span"], d["w"][:, ::3])


@pytest.mark.skipif(torch is None or not hasattr(torch, "set_default_device"),
                    reason="torch.set_default_device needs torch >= 2.0")
def test_cpu_loads_under_default_device_cuda(cpu_file):
    """Under torch.set_default_device("cuda"): on the host, as asked (on
    a machine without a GPU, torch refused every allocation instead)."""
    p, d = cpu_file
    torch.set_default_device("cuda")
    try:
        got = _every_cpu_load(p)
    finally:
        torch.set_default_device("cpu")
    for g in got:
        assert all(v.device.type == "cpu" for v in g.values())
    assert torch.equal(got[0]["w"], d["w"])


@pytest.mark.skipif(not _no_cuda_for_torch(), reason="torch can use a GPU here")
def test_gpu_load_without_usable_gpu_is_gpufiles_error(cpu_file):
    """The default device ("cuda:0") on a machine (or a torch) without a
    usable GPU gave torch's AssertionError "Torch not compiled with CUDA
    enabled"; it is gpufile's error now, naming what is missing."""
    p, _ = cpu_file
    calls = [lambda: st.load_file(p), lambda: stt.load_file(p, device="cuda"),
             lambda: st.safe_open(p, framework="pt", device="cuda:0").get_tensor("w"),
             lambda: st.safe_open(p, framework="pt", device=0).get_slice("w")[0],
             lambda: st.load_checkpoint(p)]
    for call in calls:
        with pytest.raises(gpufile.Error, match="no usable GPU") as ei:
            call()
        assert ei.value.errno == errno.ENODEV
        assert not isinstance(ei.value, AssertionError)


def test_torch_get_slice_bool_and_errors(cpu_file):
    p, d = cpu_file
    with st.safe_open(p, framework="pt", device="cpu") as f:
        assert f.get_slice("s")[True].shape == (1,)
        assert f.get_slice("s")[False].shape == (0,)
        assert torch.equal(f.get_slice("b")[True], d["b"][True])
        with pytest.raises(SafetensorError):
            f.get_tensor("nope")
    with pytest.raises(SafetensorError, match="closed"):
        f.keys()


def test_numpy_values_unaffected_by_shared_check(tmp_path):
    """The shared-memory refusal is torch's (as in safetensors.torch):
    NumPy arrays viewing one buffer save as before."""
    p = str(tmp_path / "np.safetensors")
    a = np.arange(8, dtype=np.float32)
    st.save_file({"a": a, "b": a, "t": torch.ones(2)}, p)
    with st.safe_open(p, framework="numpy") as f:
        np.testing.assert_array_equal(f.get_tensor("b"), a)
