"""load_distributed with NCCL on GPUs (issue 37): the scenarios of
test_distributed.py, one rank per GPU, each rank's tensors on its own
device. Skips without CUDA, NCCL and the GPUs a case needs (two for the
group case; the one-rank case checks the device path on any GPU)."""
import os

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import _dist_worker  # noqa: E402
import test_distributed as base  # noqa: E402


def _gpus():
    try:
        return torch.cuda.device_count() if dist.is_nccl_available() else 0
    except Exception:
        return 0


def _run(world, checkpoint, tmp_path):
    if _gpus() < world:
        pytest.skip("needs %d CUDA GPU(s) and NCCL (have %d)" % (world, _gpus()))
    spec = {"world": world, "backend": "nccl", "timeout_s": 300,
            "scenarios": [sc for sc in base._scenarios(checkpoint, world)
                          if not sc["name"].startswith("fault") or world > 1]}
    outs = _dist_worker.run_ranks(spec, str(tmp_path), wait_s=900)
    for rank, (rc, text) in enumerate(outs):
        assert rc == 0, "rank %d exited %s:\n%s" % (rank, rc, text[-4000:])
    ranks = {"world": world, "results": {
        sc["name"]: [torch.load(os.path.join(str(tmp_path), "%s.%d.pt" % (sc["name"], r)))
                     for r in range(world)] for sc in spec["scenarios"]}}
    base._check(ranks, checkpoint, "replicated")
    base._check(ranks, checkpoint, "sharded", base.PLAN)
    base._check(ranks, checkpoint, "small_buckets", base.PLAN)
    base._check(ranks, checkpoint, "to_f16", base.PLAN, torch.float16)
    base._check(ranks, checkpoint, "bf16_to_f32", None, {torch.bfloat16: torch.float32})
    for scenario in ("replicated", "sharded", "small_buckets", "bf16_to_f32"):
        base.test_each_byte_is_read_by_one_rank(ranks, checkpoint, scenario)
    if world > 1:
        base.test_one_rank_read_fails_every_rank_raises(ranks, checkpoint, "fault", -1)
        base.test_one_rank_read_fails_every_rank_raises(ranks, checkpoint, "fault_sharded", 0)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return base.make_checkpoint(tmp_path_factory.mktemp("ckpt"))


def test_nccl_two_ranks_one_gpu_each(checkpoint, tmp_path):
    _run(2, checkpoint, tmp_path)


def test_nccl_one_rank_reads_into_its_gpu(checkpoint, tmp_path):
    _run(1, checkpoint, tmp_path)
