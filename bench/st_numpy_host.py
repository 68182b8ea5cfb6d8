#!/usr/bin/env python3
"""A 2 GiB safetensors file loaded into NumPy (host memory) by
gpufile.safetensors.numpy.load_file, warm, at defaults against
host_map_copy=on and =off (issue 33), optionally while a CPU hog keeps
every core busy. Each load runs in a fresh process (the setting is read
from GPUFILE_HOST_MAP_COPY at start; the arrays are fresh memory, as a
program's first load is); the three are interleaved over --rounds rounds.

Usage (from the repository root, after building):
  GPUFILE_LIBRARY=build/libgpufile.so PYTHONPATH=python \\
      python3 bench/st_numpy_host.py --file /tmp/st2g.safetensors --rounds 5 --hog 2

--hog N starts N busy loops (one process each) for the measurement and
ends them after. Prints the seconds of each load, the medians, and each
setting's median over the defaults'.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys

CHILD = r"""
import sys, time
import gpufile.safetensors.numpy as st
t0 = time.perf_counter()
d = st.load_file(sys.argv[1])
dt = time.perf_counter() - t0
assert sum(a.nbytes for a in d.values()) > 0
print(dt)
"""


def make_file(path, tensors=8, mib=256):
    """tensors float32 tensors of mib MiB each, pseudo-random bytes."""
    n = mib << 20
    header, off = {}, 0
    for i in range(tensors):
        header[f"t{i}"] = {"dtype": "F32", "shape": [n // 4],
                           "data_offsets": [off, off + n]}
        off += n
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _ in range(tensors * mib):
            f.write(block)
    return 8 + len(h) + off


def load(path, mode):
    env = dict(os.environ)
    if mode is not None:
        env["GPUFILE_HOST_MAP_COPY"] = mode
    else:
        env.pop("GPUFILE_HOST_MAP_COPY", None)
    out = subprocess.run([sys.executable, "-c", CHILD, path], env=env,
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", default="/tmp/st2g.safetensors")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--hog", type=int, default=0)
    a = ap.parse_args()
    if not os.path.exists(a.file):
        make_file(a.file)
    with open(a.file, "rb") as f:  # warm
        while f.read(64 << 20):
            pass
    modes = [("defaults", None), ("host_map_copy=on", "on"),
             ("host_map_copy=off", "off")]
    times = {name: [] for name, _ in modes}
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"])
            for _ in range(a.hog)]
    try:
        for r in range(a.rounds):
            order = modes[r % 3:] + modes[:r % 3]
            for name, mode in order:
                times[name].append(load(a.file, mode))
            print(f"round {r + 1}: " + ", ".join(
                f"{n} {times[n][-1]:.3f} s" for n, _ in modes), flush=True)
    finally:
        for p in hogs:
            p.kill()
            p.wait()
    base = statistics.median(times["defaults"])
    print(f"file {a.file}, {os.path.getsize(a.file)} bytes, "
          f"hog {a.hog} busy loops, {a.rounds} rounds")
    for name, _ in modes:
        m = statistics.median(times[name])
        print(f"{name:18s} median {m:.3f} s  ({m / base:.2f}x the "
              f"defaults' time)")


if __name__ == "__main__":
    main()
