"""gpufile.safetensors.load_distributed over torch.distributed with gloo
(issue 37): 2 and 4 ranks on localhost, each a subprocess (_dist_worker.py)
meeting through a rendezvous file. One start of the ranks per world size
runs every scenario; the tests judge what each rank wrote.

Every tensor is compared, bit for bit, with gpufile.safetensors.load_file
of the same file (on the host) sliced by hand with torch.tensor_split.
"""
import json
import os

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

from gpufile.safetensors import load_file, save_file  # noqa: E402

import _dist_worker  # noqa: E402

# Sharded tensors: dim 0 (rows), dim 1 and 2 (blocks), sizes that do not
# divide by 2 or 4, a dim smaller than the world.
PLAN = [["*.up", 0], ["*.down", 1], ["layers.1.odd", 1], ["rows10", 0],
        ["cube", 2], ["tiny", 0], ["*", None]]


def _tensors_a():
    g = torch.Generator().manual_seed(37)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return {
        "layers.0.up": r(64, 48),                       # F32, 12 KiB
        "layers.0.down": r(40, 24).to(torch.bfloat16),
        "layers.1.up": r(33, 17).to(torch.float16),
        "layers.1.down": r(20, 6).double(),
        "layers.1.odd": r(6, 7, 3),
        "big": r(1024, 64),                             # 256 KiB: split between ranks
        "i64": torch.arange(100, dtype=torch.int64) * 7919,
        "i32": torch.randint(-2**31, 2**31 - 1, (7, 9, 5), generator=g, dtype=torch.int32),
        "i16": torch.randint(-2**15, 2**15 - 1, (31,), generator=g, dtype=torch.int16),
        "i8": torch.randint(-128, 127, (3, 11), generator=g, dtype=torch.int8),
        "u8": torch.randint(0, 255, (257,), generator=g, dtype=torch.uint8),
        "flags": torch.rand(13, generator=g) > 0.5,
        "empty": torch.empty(0, 4),
        "scalar": torch.tensor(3.25),
    }


def _tensors_b():
    g = torch.Generator().manual_seed(38)
    return {
        "rows10": torch.randn(10, 300, generator=g).to(torch.bfloat16),
        "cube": torch.randn(5, 4, 9, generator=g),
        "tiny": torch.randn(3, 2, generator=g),
        "c64": torch.randn(17, generator=g, dtype=torch.complex64),
        "embed": torch.randn(512, 96, generator=g).to(torch.bfloat16),  # 96 KiB
        "norm": torch.ones(96, dtype=torch.float16),
    }


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("ckpt"))


def make_checkpoint(d):
    """Two shards and their index in folder d (a pathlib.Path), with the
    reference tensors: load_file of each shard on the host."""
    save_file(_tensors_a(), str(d / "model-00001-of-00002.safetensors"))
    save_file(_tensors_b(), str(d / "model-00002-of-00002.safetensors"),
              metadata={"format": "pt"})
    wm = {k: "model-00001-of-00002.safetensors" for k in _tensors_a()}
    wm.update({k: "model-00002-of-00002.safetensors" for k in _tensors_b()})
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    files = [str(d / "model-00001-of-00002.safetensors"),
             str(d / "model-00002-of-00002.safetensors")]
    with open(files[1], "rb") as f:
        head = f.read(4096)
    (d / "broken.safetensors").write_bytes(head[:8 + int.from_bytes(head[:8], "little")])
    ref = {}
    for f in files:
        ref.update(load_file(f, device="cpu"))
    return {"dir": str(d), "index": str(d / "model.safetensors.index.json"),
            "files": files, "ref": ref, "broken": str(d / "broken.safetensors")}


def _scenarios(ck, world):
    return [
        {"name": "replicated", "checkpoint": ck["index"], "stats_cli": True},
        {"name": "sharded", "checkpoint": ck["dir"], "plan": PLAN, "stats_cli": True},
        # Small buckets and staging: many collectives per rank, the reader
        # waiting for the budget.
        {"name": "small_buckets", "checkpoint": ck["files"], "plan": PLAN,
         "bucket_size": 4096, "max_staging": 8192},
        {"name": "to_f16", "checkpoint": ck["index"], "plan": PLAN, "dtype": "float16"},
        {"name": "bf16_to_f32", "checkpoint": ck["files"],
         "dtype": {"bfloat16": "float32"}, "bucket_size": 8192},
        {"name": "fault", "checkpoint": ck["index"], "fail_rank": world - 1},
        {"name": "fault_sharded", "checkpoint": ck["files"], "plan": PLAN,
         "bucket_size": 4096, "fail_rank": 0, "fail_at": "start"},
        {"name": "bad_plan", "checkpoint": ck["index"], "plan": [["scalar", 0]]},
        # File 1's header (parsed by rank 1) promises more data than it has.
        {"name": "bad_header", "checkpoint": [ck["files"][0], ck["broken"]]},
        # The index is missing on rank 1 only (as on a node without it).
        {"name": "missing_on_one", "checkpoint": ck["index"], "missing_rank": 1},
        {"name": "mismatch", "checkpoint": ck["index"], "bucket_size": 8192,
         "bucket_size_rank0": 4096},
    ]


@pytest.fixture(scope="module", params=[2, 4], ids=["2ranks", "4ranks"])
def ranks(request, checkpoint, tmp_path_factory):
    """{scenario: [result of rank 0, 1, ...]} of one start of world ranks."""
    world = request.param
    folder = str(tmp_path_factory.mktemp("ranks%d" % world))
    spec = {"world": world, "backend": "gloo", "timeout_s": 120,
            "scenarios": _scenarios(checkpoint, world)}
    outs = _dist_worker.run_ranks(spec, folder, wait_s=600)
    for rank, (rc, text) in enumerate(outs):
        assert rc == 0, "rank %d exited %s:\n%s" % (rank, rc, text[-4000:])
    return {"world": world, "results": {
        sc["name"]: [torch.load(os.path.join(folder, "%s.%d.pt" % (sc["name"], r)))
                     for r in range(world)] for sc in spec["scenarios"]}}


def _same(got, want, what):
    assert got.dtype == want.dtype, what
    assert tuple(got.shape) == tuple(want.shape), what
    g = got.contiguous().reshape(-1).view(torch.uint8)
    w = want.contiguous().reshape(-1).view(torch.uint8)
    assert torch.equal(g, w), what


def _expected(ref, world, rank, plan, convert=None):
    import fnmatch
    out = {}
    for name, t in ref.items():
        if convert is not None:
            t = t.to(convert.get(t.dtype, t.dtype)) if isinstance(convert, dict) else (
                t.to(convert) if t.is_floating_point() else t)
        dim = None
        for pattern, d in plan or []:
            if fnmatch.fnmatchcase(name, pattern):
                dim = d
                break
        out[name] = t if dim is None else torch.tensor_split(t, world, dim)[rank]
    return out


def _check(ranks, ck, scenario, plan=None, convert=None):
    world = ranks["world"]
    for rank, res in enumerate(ranks["results"][scenario]):
        assert "error" not in res, res
        want = _expected(ck["ref"], world, rank, plan, convert)
        assert list(res["tensors"]) == list(want) or sorted(res["tensors"]) == sorted(want)
        for name, w in want.items():
            _same(res["tensors"][name], w, "%s rank %d tensor %s" % (scenario, rank, name))


def test_replicated_every_rank_gets_every_tensor(ranks, checkpoint):
    _check(ranks, checkpoint, "replicated")


def test_sharded_plan_gives_each_rank_its_slice(ranks, checkpoint):
    _check(ranks, checkpoint, "sharded", PLAN)
    _check(ranks, checkpoint, "small_buckets", PLAN)


def test_dtype_conversion_on_the_reading_rank(ranks, checkpoint):
    _check(ranks, checkpoint, "to_f16", PLAN, torch.float16)
    _check(ranks, checkpoint, "bf16_to_f32", None, {torch.bfloat16: torch.float32})


def _data_size(files):
    total = 0
    for f in files:
        with open(f, "rb") as fh:
            total += os.path.getsize(f) - 8 - int.from_bytes(fh.read(8), "little")
    return total


@pytest.mark.parametrize("scenario", ["replicated", "sharded", "small_buckets",
                                      "bf16_to_f32"])
def test_each_byte_is_read_by_one_rank(ranks, checkpoint, scenario):
    world, files = ranks["world"], checkpoint["files"]
    data = _data_size(files)
    file_bytes = sum(os.path.getsize(f) for f in files)
    results = ranks["results"][scenario]
    for res in results:
        s = res["summary"]
        # The rank's own gpufile counters, summed over ranks: every byte
        # of every file (headers once, data once), no more.
        assert sum(sum(r["storage_read"].values()) for r in s["ranks"]) == file_bytes
        assert sum(r["data_bytes_read"] for r in s["ranks"]) == data
        assert s["data_bytes"] == data and s["read_once"] is True
        # Balanced: every rank reads part of the data.
        assert all(r["data_bytes_read"] > 0 for r in s["ranks"])
        assert len(s["ranks"]) == world
    # Each rank's counters as it saw them itself.
    own = [res["summary"]["ranks"][r]["storage_read"] for r, res in enumerate(results)]
    assert sum(sum(c.values()) for c in own) == file_bytes
    # Collectives: a replicated load sends every byte to the world - 1 others.
    if scenario == "replicated":
        got = sum(r["collective_recv_bytes"] for r in results[0]["summary"]["ranks"])
        assert got == data * (world - 1)


@pytest.mark.parametrize("scenario", ["replicated", "sharded"])
def test_collective_bytes_show_in_each_ranks_stats(ranks, scenario):
    """What each rank received and sent by collectives is in its process
    counters, as `gpufile stats PID --json` (another process, reading the
    rank's segment) shows them right after the load."""
    for rank, res in enumerate(ranks["results"][scenario]):
        mine = res["summary"]["ranks"][rank]
        seen = res["stats_cli"]
        assert seen["bytes_received"] == mine["collective_recv_bytes"], (rank, seen, mine)
        assert seen["bytes_sent"] == mine["collective_sent_bytes"], (rank, seen, mine)
        assert seen["calls"] == mine["broadcasts"] + mine["scatters"], (rank, seen, mine)
        # Every rank reads a share only and receives the rest.
        assert seen["bytes_received"] > 0, (rank, seen)


@pytest.mark.parametrize("scenario,bad", [("fault", -1), ("fault_sharded", 0)])
def test_one_rank_read_fails_every_rank_raises(ranks, checkpoint, scenario, bad):
    world = ranks["world"]
    bad %= world
    for rank, res in enumerate(ranks["results"][scenario]):
        err = res.get("error")
        assert err is not None, "rank %d did not raise" % rank
        assert err["type"] == "DistributedLoadError", err
        assert err["rank"] == bad, err
        assert "rank %d" % bad in err["str"], err
        assert err["filename"] in checkpoint["files"], err
        assert "injected" in err["str"], err


def test_a_plan_that_does_not_fit_raises_on_every_rank(ranks):
    for rank, res in enumerate(ranks["results"]["bad_plan"]):
        err = res.get("error")
        assert err is not None and err["type"] == "ValueError", (rank, res)
        assert "'scalar'" in err["str"] and "dim 0" in err["str"], err


def test_a_bad_header_raises_on_every_rank_naming_file_and_rank(ranks, checkpoint):
    for rank, res in enumerate(ranks["results"]["bad_header"]):
        err = res.get("error")
        assert err is not None and err["type"] == "DistributedLoadError", (rank, res)
        assert err["rank"] == 1 and "rank 1" in err["str"], err
        assert err["filename"] == checkpoint["broken"], err


def test_arguments_that_differ_between_ranks_raise_on_every_rank(ranks):
    for rank, res in enumerate(ranks["results"]["mismatch"]):
        err = res.get("error")
        assert err is not None and err["type"] == "ValueError", (rank, res)
        assert "other arguments" in err["str"], err


def test_files_missing_on_one_rank_raise_on_every_rank(ranks, checkpoint):
    for rank, res in enumerate(ranks["results"]["missing_on_one"]):
        err = res.get("error")
        assert err is not None and err["type"] == "DistributedLoadError", (rank, res)
        assert err["rank"] == 1 and "rank 1" in err["str"], err
        assert "nowhere" in err["str"], err


def test_staging_stays_within_max_staging(ranks):
    # small_buckets: bucket_size 4096, max_staging 8192; a bucket's cost
    # (read + packed parts) is at most about 2 x 4096, and one bucket may
    # run alone past the limit.
    peaks = [res["summary"]["ranks"][r]["staging_peak"]
             for r, res in enumerate(ranks["results"]["small_buckets"])]
    assert max(peaks) > 0, peaks
    assert max(peaks) <= 8192 + 4096, peaks
