#!/usr/bin/env python3
"""Checkpoint loading benchmark (issue 16): gpufile.safetensors.load_file
against safetensors.torch.load_file and against gpufile's raw read of the
same file into GPU memory, warm (page cache hot) and cold (page cache
dropped before each run; needs root), in interleaved rounds so that drift
in the machine hits every contender alike.

Files (created once in --dir, reused when their size matches):
  big.safetensors    64 bf16 tensors of 4096x8192 (4 GiB of data)
  many.safetensors   2,000 bf16 tensors of 512x1024 (1 MiB each)
  --two-gpus also:   shard0/shard1.safetensors, 4 GiB each, loaded at the
                     same time onto GPU 0 and GPU 1, against shard0 alone.

Usage (on the GPU machine, from the repository root, after building):
  GPUFILE_LIBRARY=build-gpu/libgpufile.so PYTHONPATH=python \\
      python3 bench/st_bench.py --dir /root/gpufile-bench --rounds 3
  ... bench/st_bench.py --dir /root/gpufile-bench --two-gpus --rounds 3

Prints one line per (file, mode, contender): median and best seconds, GB/s
(1 GB = 1e9 bytes of tensor data), then the ratios the issue asks for.
"""
import argparse
import os
import statistics
import sys
import time

import torch

import gpufile
import gpufile.safetensors as gst
from benchlib import run_together

try:
    import safetensors.torch as sttorch
except ImportError:  # the comparison is skipped, not the benchmark
    sttorch = None


def make_file(path, ntensors, shape):
    """A safetensors file of ntensors random bf16 tensors of shape, written
    through gpufile from GPU memory; kept when it already has the size."""
    per = shape[0] * shape[1] * 2
    if os.path.exists(path):
        try:
            with gst.safe_open(path, framework="pt") as f:
                if len(f.keys()) == ntensors and f._h.data_size == ntensors * per:
                    return
        except OSError:
            pass
    print("creating %s (%d x %s bf16)" % (path, ntensors, list(shape)), flush=True)
    g = torch.Generator(device="cuda:0").manual_seed(1)
    d = {}
    for i in range(ntensors):
        d["layer.%05d.weight" % i] = torch.randint(
            -32768, 32767, shape, generator=g, device="cuda:0", dtype=torch.int16
        ).view(torch.bfloat16)
    gst.save_file(d, path, metadata={"format": "pt"})
    del d
    torch.cuda.empty_cache()
    os.sync()


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def data_bytes(path):
    with gst.safe_open(path, framework="pt") as f:
        return f._h.data_size


def run_gpufile(path, dev=0):
    out = gst.load_file(path, device="cuda:%d" % dev)
    torch.cuda.synchronize(dev)
    return out


def run_safetensors(path, dev=0):
    out = sttorch.load_file(path, device="cuda:%d" % dev)
    torch.cuda.synchronize(dev)
    return out


_raw_bufs = {}


def run_raw(path, dev=0):
    """gpufile's raw read of the whole file into one GPU buffer (allocated
    once, outside the timing)."""
    size = os.path.getsize(path)
    key = (size, dev)
    if key not in _raw_bufs:
        _raw_bufs[key] = torch.empty(size, dtype=torch.uint8, device="cuda:%d" % dev)
        torch.cuda.synchronize(dev)
    with gpufile.File(path) as f:
        n = f.read(_raw_bufs[key])
    assert n == size
    return None


def path_bytes():
    s = gpufile.stats()["gpufile"]["read"]
    return {k: s[k]["bytes"] for k in ("host", "posix", "cufile", "small")}


def device_mallocs():
    """cudaMalloc calls by torch's caching allocator on GPU 0 so far."""
    return torch.cuda.memory_stats(0).get("num_device_alloc", 0)


def bench(files, rounds, cold, contenders):
    """{(label, contender): [seconds]} over interleaved rounds."""
    times = {}
    for r in range(rounds):
        for label, path in files:
            order = contenders[r % len(contenders):] + contenders[:r % len(contenders)]
            for name, fn in order:
                if cold:
                    drop_caches()
                before = path_bytes()
                mallocs = device_mallocs()
                t0 = time.perf_counter()
                out = fn(path)
                dt = time.perf_counter() - t0
                del out
                mallocs = device_mallocs() - mallocs
                after = path_bytes()
                times.setdefault((label, name), []).append(dt)
                moved = {k: after[k] - before[k] for k in after if after[k] != before[k]}
                # cudaMallocs inside the timing (the caching allocator had
                # no fitting block): a cost the raw read, whose buffer is
                # allocated once, does not pay.
                print("  round %d %-5s %-6s %-12s %7.3f s  cudaMalloc: %d  gpufile paths: %s"
                      % (r, "cold" if cold else "warm", label, name, dt, mallocs,
                         moved or "-"), flush=True)
    return times


def report(times, sizes, mode, counts=None):
    res = {}
    for (label, name), ts in sorted(times.items()):
        med, best = statistics.median(ts), min(ts)
        gbps = sizes[label] / med / 1e9
        res[(label, name)] = med
        print("%-5s %-6s %-12s median %7.3f s  best %7.3f s  %6.2f GB/s  (%d runs)"
              % (mode, label, name, med, best, gbps, len(ts)))
    for label in sizes:
        g = res.get((label, "gpufile"))
        s = res.get((label, "safetensors"))
        r = res.get((label, "raw"))
        if g and s:
            print("%-5s %-6s gpufile vs safetensors.torch: %.2fx faster" % (mode, label, s / g))
        if g and r:
            print("%-5s %-6s gpufile vs gpufile raw read:  %.2fx of raw speed" % (mode, label, r / g))
            if counts and counts.get(label):
                print("%-5s %-6s gpufile - raw read: %.1f us per tensor (%d tensors)"
                      % (mode, label, (g - r) / counts[label] * 1e6, counts[label]))


def two_gpus(args):
    if torch.cuda.device_count() < 2:
        print("--two-gpus: needs 2 GPUs, found %d" % torch.cuda.device_count())
        return 1
    shards = [os.path.join(args.dir, "shard%d.safetensors" % i) for i in range(2)]
    for p in shards:
        make_file(p, 64, (4096, 8192))
    size = data_bytes(shards[0])
    for dev in (0, 1):  # contexts and pinned buffers before timing
        torch.empty(1, device="cuda:%d" % dev)
    gpufile.warmup()

    def one(i):
        torch.cuda.set_device(i)
        run_gpufile(shards[i], i)

    def both():
        run_together([lambda: one(0), lambda: one(1)])

    for cold in ([False, True] if args.cold else [False]):
        mode = "cold" if cold else "warm"
        one_t, two_t = [], []
        for r in range(args.rounds):
            for kind in (["one", "two"] if r % 2 == 0 else ["two", "one"]):
                if cold:
                    drop_caches()
                t0 = time.perf_counter()
                if kind == "one":
                    run_gpufile(shards[0], 0)
                else:
                    both()
                dt = time.perf_counter() - t0
                (one_t if kind == "one" else two_t).append(dt)
                print("  round %d %s %s GPU(s): %.3f s" % (r, mode, kind, dt), flush=True)
        o, t = statistics.median(one_t), statistics.median(two_t)
        print("%s one GPU : %.3f s  %.2f GB/s" % (mode, o, size / o / 1e9))
        print("%s two GPUs: %.3f s  %.2f GB/s aggregate" % (mode, t, 2 * size / t / 1e9))
        print("%s aggregate ratio two/one: %.2fx (goal >= 1.6x)" % (mode, (2 * size / t) / (size / o)))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/root/gpufile-bench")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-cold", dest="cold", action="store_false")
    ap.add_argument("--two-gpus", action="store_true")
    ap.add_argument("--only", choices=["big", "many"], default=None)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    if args.cold and os.geteuid() != 0:
        print("not root: cold runs skipped (they drop the page cache)")
        args.cold = False
    print("gpufile %s (%s), torch %s, safetensors %s" % (
        gpufile.version(), gpufile.library_path(), torch.__version__,
        getattr(sys.modules.get("safetensors"), "__version__", "not installed")))
    if args.two_gpus:
        return two_gpus(args)

    files = []
    if args.only in (None, "big"):
        p = os.path.join(args.dir, "big.safetensors")
        make_file(p, 64, (4096, 8192))
        files.append(("big", p))
    if args.only in (None, "many"):
        p = os.path.join(args.dir, "many.safetensors")
        make_file(p, 2000, (512, 1024))
        files.append(("many", p))
    sizes = {label: data_bytes(p) for label, p in files}
    counts = {}
    for label, p in files:
        with gst.safe_open(p, framework="pt") as f:
            counts[label] = len(f.keys())
    contenders = [("gpufile", run_gpufile), ("raw", run_raw)]
    if sttorch is not None:
        contenders.insert(1, ("safetensors", run_safetensors))
    torch.empty(1, device="cuda:0")
    gpufile.warmup()
    for label, p in files:  # one untimed run each: allocator, page cache
        for _, fn in contenders:
            fn(p)
    with gpufile.File(files[0][1]) as f:
        print("device path of %s: %s" % (files[0][1], f.path_info()))
    warm = bench(files, args.rounds, False, contenders)
    report(warm, sizes, "warm", counts)
    if args.cold:
        cold = bench(files, args.rounds, True, contenders)
        report(warm, sizes, "warm", counts)
        report(cold, sizes, "cold", counts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
