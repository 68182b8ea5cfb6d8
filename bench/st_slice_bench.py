#!/usr/bin/env python3
"""Tensor-parallel loading benchmark: safe_open(...).get_slice(name)[index]
of gpufile.safetensors against safetensors' own, into GPU memory, on the
4 GiB file of st_bench.py (64 bf16 tensors of 4096x8192), warm.

One rank's share of every tensor, as a tensor-parallel loader takes it
(--tp ranks, rank --rank):
  rows   [r*4096/tp : (r+1)*4096/tp]           one contiguous run each
  cols   [:, r*8192/tp : (r+1)*8192/tp]        4096 runs of 2 KiB each
                                               (gpufile gathers them)
  whole  [:]                                   the tensor whole

Rounds interleave the contenders. Every result is checked against the
other library's (torch.equal of the bits) before timing. Prints per (case, contender)
the median and best seconds, GB/s of result bytes (1e9 bytes), the bytes
gpufile read for it, and gpufile's speed as a ratio to safetensors'.

Usage (on the GPU machine, from the repository root, after building):
  GPUFILE_LIBRARY=build-gpu/libgpufile.so PYTHONPATH=python \\
      python3 bench/st_slice_bench.py --dir /root/gpufile-bench --rounds 5
"""
import argparse
import os
import statistics
import time

import torch

import gpufile
import gpufile.safetensors as gst
from st_bench import make_file

from safetensors import safe_open as st_open

CASES = ("rows", "cols", "whole")


def index_of(case, shape, tp, rank):
    rows, cols = shape[0] // tp, shape[1] // tp
    if case == "rows":
        return slice(rank * rows, (rank + 1) * rows)
    if case == "cols":
        return (slice(None), slice(rank * cols, (rank + 1) * cols))
    return slice(None)


def load(opener, path, case, tp, rank):
    """{name: part} of every tensor for case, synchronised."""
    out = {}
    with opener(path, framework="pt", device="cuda:0") as f:
        for name in f.keys():
            sl = f.get_slice(name)
            out[name] = sl[index_of(case, sl.get_shape(), tp, rank)]
    torch.cuda.synchronize()
    return out


def read_bytes():
    """Bytes gpufile has read, into GPU memory and into host memory (the
    gathered plan reads into pinned memory, then copies)."""
    s = gpufile.stats()["gpufile"]["read"]
    return sum(s[k]["bytes"] for k in ("posix", "cufile", "small", "host"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/root/gpufile-bench")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--rank", type=int, default=1)
    args = ap.parse_args()
    os.makedirs(args.dir, exist_ok=True)
    path = os.path.join(args.dir, "big.safetensors")
    make_file(path, 64, (4096, 8192))
    with open(path, "rb") as f:  # warm: the page cache holds the file
        while f.read(64 << 20):
            pass
    contenders = {"gpufile": gst.safe_open, "safetensors": st_open}

    sizes, read = {}, {}
    for case in CASES:  # check, and measure what each case moves
        b0 = read_bytes()
        mine = load(gst.safe_open, path, case, args.tp, args.rank)
        read[case] = read_bytes() - b0
        theirs = load(st_open, path, case, args.tp, args.rank)
        assert mine.keys() == theirs.keys()
        for k in mine:  # the bits: random bf16 bits hold NaNs, which never compare equal
            assert mine[k].is_contiguous(), (case, k)
            assert torch.equal(mine[k].view(torch.int16), theirs[k].view(torch.int16)), (case, k)
        sizes[case] = sum(t.numel() * t.element_size() for t in mine.values())
        del mine, theirs
        torch.cuda.empty_cache()

    times = {(c, n): [] for c in CASES for n in contenders}
    for r in range(args.rounds):
        order = list(contenders.items())
        if r % 2:
            order.reverse()
        for case in CASES:
            for name, opener in order:
                t0 = time.perf_counter()
                parts = load(opener, path, case, args.tp, args.rank)
                times[case, name].append(time.perf_counter() - t0)
                del parts
                torch.cuda.empty_cache()

    print("tp=%d rank=%d, %d rounds, warm, file %s" % (args.tp, args.rank, args.rounds, path))
    for case in CASES:
        med = {}
        for name in contenders:
            t = times[case, name]
            med[name] = statistics.median(t)
            extra = ", gpufile read %.0f MiB" % (read[case] / 2**20) if name == "gpufile" else ""
            print("%-5s %-11s median %.4f s best %.4f s  %6.2f GB/s of %.0f MiB result%s"
                  % (case, name, med[name], min(t), sizes[case] / med[name] / 1e9,
                     sizes[case] / 2**20, extra))
        print("%-5s gpufile / safetensors: %.2fx faster"
              % (case, med["safetensors"] / med["gpufile"]))


if __name__ == "__main__":
    main()
