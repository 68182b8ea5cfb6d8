"""One rank of the load_distributed tests (test_distributed*.py), started
as a subprocess per rank: python3 _dist_worker.py SPEC.json RANK.

SPEC (JSON): world, backend ("gloo"/"nccl"), rendezvous (a file:// URL),
timeout_s (the process-group timeout), out (a folder), scenarios: a list
of {"name", "checkpoint", "plan": [[pattern, dim or null]], "dtype":
null | "float16" | {"bfloat16": "float32"}, "bucket_size", "max_staging",
"fail_rank": int or null, "stats_cli": bool}. Each scenario's result is
written to OUT/NAME.RANK.pt: {"tensors", "summary"} or {"error": {...}};
with stats_cli also "stats_cli": the growth over the load of the rank's
"collectives" counters as `gpufile stats PID --json` shows them.
"""
import datetime
import errno
import json
import os
import sys


def _dtype(torch, spec):
    if spec is None:
        return None
    if isinstance(spec, str):
        return getattr(torch, spec)
    return {getattr(torch, k): getattr(torch, v) for k, v in spec.items()}


def run_ranks(spec, folder, wait_s):
    """Starts spec["world"] ranks of this program (rendezvous: a file in
    folder), waits for them (at most wait_s, then kills them) and returns
    [(returncode, output)] by rank. spec gets rendezvous and out filled."""
    import subprocess

    spec = dict(spec, rendezvous="file://" + os.path.join(folder, "rendezvous"),
                out=folder)
    path = os.path.join(folder, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([os.path.dirname(here)] + [
                   p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), path, str(r)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
             for r in range(spec["world"])]
    out = []
    for p in procs:
        try:
            text = p.communicate(timeout=wait_s)[0]
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    q.kill()
            text = p.communicate()[0] + b"\n(killed after %d s)" % wait_s
        out.append((p.returncode, text.decode("utf-8", "replace")))
    return out


def _cli_collectives():
    """This process's collective counters, read by `gpufile stats PID
    --json` from another process (as a user watching the rank would)."""
    import subprocess
    import gpufile
    gpufile.stats()  # the library loaded: no counters yet read as zeros
    out = subprocess.run([gpufile.cli_path(), "stats", str(os.getpid()), "--json"],
                         check=True, stdout=subprocess.PIPE).stdout
    return json.loads(out)["collectives"]


def main():
    spec = json.load(open(sys.argv[1]))
    rank = int(sys.argv[2])
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    from gpufile.safetensors import _distributed, load_distributed

    dist.init_process_group(spec["backend"], init_method=spec["rendezvous"], rank=rank,
                            world_size=spec["world"],
                            timeout=datetime.timedelta(seconds=spec["timeout_s"]))
    device = "cuda:%d" % rank if spec["backend"] == "nccl" else "cpu"
    real_start = _distributed._pread_start

    def fail_at_start(f, ptr, n, off):
        raise OSError(errno.EIO, "Input/output error (injected at the start)")

    def fail_at_end(f, ptr, n, off):
        wait = real_start(f, ptr, n, off)

        def failing_wait():
            wait()
            raise OSError(errno.EIO, "Input/output error (injected at the end)")
        return failing_wait

    for sc in spec["scenarios"]:
        _distributed._pread_start = real_start
        if sc.get("fail_rank") == rank:
            _distributed._pread_start = (fail_at_start if sc.get("fail_at") == "start"
                                         else fail_at_end)
        out = os.path.join(spec["out"], "%s.%d.pt" % (sc["name"], rank))
        before = _cli_collectives() if sc.get("stats_cli") else None
        try:
            ck = sc["checkpoint"]
            if sc.get("missing_rank") == rank:
                ck = os.path.join(os.path.dirname(ck), "nowhere", os.path.basename(ck))
            sd = load_distributed(ck, device=device,
                                  plan=[(p, d) for p, d in sc.get("plan") or []],
                                  dtype=_dtype(torch, sc.get("dtype")),
                                  bucket_size=sc.get("bucket_size_rank%d" % rank,
                                                     sc.get("bucket_size", 64 << 20)),
                                  max_staging=sc.get("max_staging", 256 << 20))
            res = {"tensors": {k: v.cpu().clone() for k, v in sd.items()}, "summary": sd.summary}
            if before is not None:
                after = _cli_collectives()
                res["stats_cli"] = {k: after[k] - before[k] for k in after
                                    if isinstance(after[k], int)}
        except Exception as e:  # noqa: BLE001 - the test judges it
            res = {"error": {"type": type(e).__name__, "str": str(e),
                             "rank": getattr(e, "rank", None),
                             "filename": getattr(e, "filename", None)}}
        torch.save(res, out)
    _distributed._pread_start = real_start
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
