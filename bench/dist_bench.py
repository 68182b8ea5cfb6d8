#!/usr/bin/env python3
"""load_distributed against every rank loading the whole checkpoint
(issue 37, must-show): N ranks on this host under torch.distributed, a
checkpoint of --tensors tensors of --size bytes in all (one file).

Usage (from the repository root, after building):
  GPUFILE_LIBRARY=build/libgpufile.so LD_LIBRARY_PATH=build PYTHONPATH=python \\
      /usr/bin/python3 bench/dist_bench.py --size 2g --ranks 2,4 --repeat 3
  # GPU form (a machine with 2 GPUs): NCCL, one rank per GPU, 16 GiB
  ... bench/dist_bench.py --backend nccl --size 16g --ranks 2 --repeat 3

Cases, each run --repeat times in turn (interleaved, so that load from
elsewhere falls on all of them), every rank starting together after a
barrier; the time of a case is from the barrier to the last rank's end
(a second barrier):
  dist_replicated  load_distributed, every tensor on every rank
  dist_sharded     load_distributed, every tensor split along dim 0
  load_file_all    every rank calls gpufile.safetensors.load_file on the
                   whole checkpoint (what each rank does without sharing)
  load_file_one    rank 0 alone loads it (the others wait): one full load
Storage bytes read: the sum over ranks of gpufile's read counters
(gpufile.stats(), headers and data) during the case. Prints the medians
and the ratios, and --json FILE writes every figure.

The checkpoint is made once in --dir (bench.safetensors, random F32/BF16
data) and read warm (the first round is thrown away as a warm-up unless
--no-warmup), or with --cold from storage: the file is dropped from the
page cache (gpufile.drop_file_page_cache) before each case. Each case's result is checked on every rank against the
file (the first and the last row of each tensor, or of its part).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CASES = ["dist_replicated", "dist_sharded", "load_file_all", "load_file_one"]


def parse_size(text):
    text = text.strip().lower()
    for suffix, mult in (("gib", 1 << 30), ("g", 1 << 30), ("mib", 1 << 20),
                         ("m", 1 << 20), ("kib", 1 << 10), ("k", 1 << 10)):
        if text.endswith(suffix):
            return int(float(text[:-len(suffix)]) * mult)
    return int(text)


def make_checkpoint(path, size, ntensors):
    import torch
    from gpufile.safetensors import save_file

    per = size // ntensors
    rows = 1024
    if os.path.exists(path):
        from gpufile.safetensors import safe_open
        with safe_open(path, device="cpu") as f:
            have = sum(f.tensor_info(k).nbytes for k in f.keys())
            if have == per // (rows * 4) * rows * 4 * ntensors and len(f.keys()) == ntensors:
                return
    g = torch.Generator().manual_seed(1)
    tensors = {}
    for k in range(ntensors):
        cols = per // (rows * 4)
        t = torch.randn(rows, cols, generator=g)
        if k % 2:  # BF16 of the same byte count
            t = torch.randn(rows, cols * 2, generator=g).to(torch.bfloat16)
        tensors["layers.%02d.weight" % k] = t
    save_file(tensors, path + ".tmp")
    os.replace(path + ".tmp", path)


def storage_read():
    import gpufile
    return sum(c["bytes"] for c in gpufile.stats()["gpufile"]["read"].values())


def check(sd, path, rank, world, sharded):
    """The first and the last row of each tensor (of this rank's part)
    against the file's bytes (read with safe_open's get_slice)."""
    import torch
    from gpufile.safetensors import safe_open
    with safe_open(path, device="cpu") as f:
        for name in f.keys():
            t = sd[name]
            n = f.tensor_info(name).shape[0]
            r0, r1 = 0, n
            if sharded:
                rows = torch.tensor_split(torch.arange(n), world)[rank]
                r0, r1 = int(rows[0]), int(rows[-1]) + 1
            if t.shape[0] != r1 - r0:
                raise SystemExit("rank %d: %s has %d rows, not %d" % (rank, name,
                                                                      t.shape[0], r1 - r0))
            sl = f.get_slice(name)
            for got, want in ((t[:1], sl[r0:r0 + 1]), (t[-1:], sl[r1 - 1:r1])):
                a = got.cpu().contiguous().reshape(-1).view(torch.uint8)
                b = want.contiguous().reshape(-1).view(torch.uint8)
                if not torch.equal(a, b):
                    raise SystemExit("rank %d: %s differs from the file" % (rank, name))


def child(args):
    import torch
    import torch.distributed as dist
    import datetime
    from gpufile.safetensors import Shard, load_distributed, load_file

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group(args.backend, init_method="file://" + args.rendezvous,
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=1800))
    device = "cuda:%d" % rank if args.backend == "nccl" else "cpu"
    if args.backend == "nccl":
        torch.cuda.set_device(rank)
    path = args.file
    out = []
    rounds = args.repeat + (0 if args.no_warmup else 1)
    for rnd in range(rounds):
        for case in args.cases:
            if args.cold and rank == 0:
                import gpufile
                gpufile.drop_file_page_cache(path)
            dist.barrier()
            before = storage_read()
            t0 = time.perf_counter()
            sd = None
            if case == "dist_replicated":
                sd = load_distributed(path, device=device, bucket_size=args.bucket)
            elif case == "dist_sharded":
                sd = load_distributed(path, device=device, plan={"*": Shard(0)},
                                      bucket_size=args.bucket)
            elif case == "load_file_all" or rank == 0:
                sd = load_file(path, device=device)
            if args.backend == "nccl":
                torch.cuda.synchronize()
            mine = time.perf_counter() - t0
            dist.barrier()
            wall = time.perf_counter() - t0
            read = storage_read() - before
            if sd is not None and rnd == rounds - 1:
                check(sd, path, rank, world, case == "dist_sharded")
            del sd
            gathered = [None] * world
            dist.all_gather_object(gathered, (read, mine))
            if rank == 0 and (args.no_warmup or rnd > 0):
                out.append({"case": case, "round": rnd, "wall_s": wall,
                            "storage_bytes_read": sum(r for r, _ in gathered),
                            "rank_s": [m for _, m in gathered],
                            "rank_bytes_read": [r for r, _ in gathered]})
    if rank == 0:
        with open(args.result, "w") as f:
            json.dump(out, f)
    dist.barrier()
    dist.destroy_process_group()


def run_world(args, world):
    folder = os.path.join(args.dir, "run%d" % world)
    os.makedirs(folder, exist_ok=True)
    rendezvous = os.path.join(folder, "rendezvous")
    if os.path.exists(rendezvous):
        os.unlink(rendezvous)
    result = os.path.join(folder, "result.json")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--file", args.file,
           "--backend", args.backend, "--repeat", str(args.repeat),
           "--bucket", str(args.bucket), "--rendezvous", rendezvous, "--result", result,
           "--cases", ",".join(args.cases)] + (["--no-warmup"] if args.no_warmup else []) + (
               ["--cold"] if args.cold else [])
    env = dict(os.environ, WORLD_SIZE=str(world), OMP_NUM_THREADS=str(args.omp))
    procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r))) for r in range(world)]
    rcs = [p.wait() for p in procs]
    if any(rcs):
        raise SystemExit("ranks exited %s" % rcs)
    with open(result) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="2g")
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--bucket", type=parse_size, default=64 << 20)
    ap.add_argument("--dir", default="/tmp/gpufile-dist-bench")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--omp", type=int, default=1, help="OMP_NUM_THREADS of each rank")
    ap.add_argument("--no-warmup", action="store_true")
    ap.add_argument("--cold", action="store_true",
                    help="drop the file from the page cache before each case")
    ap.add_argument("--json")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--file", help=argparse.SUPPRESS)
    ap.add_argument("--rendezvous", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.cases = [c for c in args.cases.split(",") if c]
    for c in args.cases:
        if c not in CASES:
            raise SystemExit("--cases: %r is not one of %s" % (c, ", ".join(CASES)))
    if args.child:
        return child(args)
    size = parse_size(args.size)
    os.makedirs(args.dir, exist_ok=True)
    args.file = os.path.join(args.dir, "bench-%d-%d.safetensors" % (size, args.tensors))
    make_checkpoint(args.file, size, args.tensors)
    with open(args.file, "rb") as f:  # warm the page cache
        while not args.cold and f.read(64 << 20):
            pass
    fsize = os.path.getsize(args.file)
    with open(args.file, "rb") as f:
        data = fsize - 8 - int.from_bytes(f.read(8), "little")
    print("checkpoint %s: %d tensors, %d data bytes (%.2f GiB), file %d bytes; backend %s; %s"
          % (args.file, args.tensors, data, data / (1 << 30), fsize, args.backend,
             "cold (dropped from the page cache before each case)" if args.cold else "warm"))
    report = {"file": args.file, "data_bytes": data, "file_bytes": fsize,
              "backend": args.backend, "worlds": {}}
    for world in [int(w) for w in args.ranks.split(",")]:
        rows = run_world(args, world)
        med = {}
        print("\n%d ranks (median of %d):" % (world, args.repeat))
        print("  %-16s %9s %22s %s" % ("case", "wall s", "storage bytes read", "x data"))
        for case in args.cases:
            rs = [r for r in rows if r["case"] == case]
            wall = statistics.median(r["wall_s"] for r in rs)
            read = statistics.median(r["storage_bytes_read"] for r in rs)
            med[case] = {"wall_s": wall, "storage_bytes_read": read,
                         "walls": [r["wall_s"] for r in rs]}
            print("  %-16s %9.3f %22d %6.2f   (rounds: %s)"
                  % (case, wall, read, read / data,
                     ", ".join("%.3f" % r["wall_s"] for r in rs)))
        for a, b in (("dist_replicated", "load_file_all"), ("dist_sharded", "load_file_all"),
                     ("dist_replicated", "load_file_one"), ("dist_sharded", "load_file_one")):
            if a in med and b in med:
                print("  %s / %s = %.2f" % (a, b, med[a]["wall_s"] / med[b]["wall_s"]))
        report["worlds"][world] = {"medians": med, "rounds": rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
