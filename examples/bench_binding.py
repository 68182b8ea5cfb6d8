#!/usr/bin/env python3
"""The binding's overhead: the same 1 GiB read through Python and through
the CLI, in the same run, on the same file.

  examples/bench_binding.py [--file PATH] [--size BYTES] [--repeat K] [--rounds R]

Python: gpufile.File(path).read(buf) into a preallocated CuPy array (a
NumPy array when there is no CuPy or GPU), timed around read() only.
CLI: `gpufile read FILE --size N --repeat K --json` (its "seconds" is the
best of K, timed around gpufile_pread() only), with --host when Python
reads into host memory. Rounds alternate Python and CLI so that page-cache
and clock states are shared; the best of each is compared. Prints both
GB/s and the ratio python/cli; exits 1 when Python is more than 3% slower
(--limit). The CLI is found as gpufile.cli_path() does ($GPUFILE_CLI, next
to the library, PATH, build/).
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import gpufile  # noqa: E402


def make_buffer(size, want_host):
    if not want_host:
        try:
            import cupy as cp

            if gpufile.cuda_device_count() > 0:
                buf = cp.empty(size, dtype=cp.uint8)
                cp.cuda.Device().synchronize()
                return buf, "device (CuPy)"
        except Exception:
            pass
    import numpy as np

    buf = np.empty(size, dtype=np.uint8)
    buf[::4096] = 0  # fault the pages in, as the CLI's buffer is
    return buf, "host (NumPy)"


def python_best(path, buf, size, repeat):
    best = None
    with gpufile.File(path) as f:
        for _ in range(repeat):
            t0 = time.perf_counter()
            n = f.read(buf, size)
            dt = time.perf_counter() - t0
            if n != size:
                raise SystemExit("python read returned %d, wanted %d" % (n, size))
            best = dt if best is None else min(best, dt)
    return best


def cli_best(cli, path, size, repeat, host):
    argv = [cli, "read", path, "--size", str(size), "--repeat", str(repeat), "--json"]
    if host:
        argv.append("--host")
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if p.returncode != 0:
        raise SystemExit("%s failed (%d): %s" % (" ".join(argv), p.returncode, p.stderr))
    d = json.loads(p.stdout)
    if d["bytes"] != size:
        raise SystemExit("cli read %d bytes, wanted %d" % (d["bytes"], size))
    return d["seconds"], d.get("target")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", default="gpufile_bench_1GiB.bin")
    ap.add_argument("--size", type=int, default=1 << 30)
    ap.add_argument("--repeat", type=int, default=5, help="reads per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--host", action="store_true", help="read into host memory")
    ap.add_argument("--limit", type=float, default=1.03,
                    help="fail when python/cli time exceeds this (default 1.03)")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    path = os.path.abspath(args.file)
    cli = gpufile.cli_path()

    created = False
    if not os.path.exists(path) or os.path.getsize(path) < args.size:
        p = subprocess.run([cli, "write", path, "--size", str(args.size), "--direct"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        if p.returncode != 0:
            raise SystemExit("gpufile write failed: %s" % p.stderr)
        created = True

    buf, kind = make_buffer(args.size, args.host)
    host = kind.startswith("host")
    gpufile.warmup()
    python_best(path, buf, args.size, 1)  # first touch: pool, pinned buffers
    py, cl = [], []
    target = None
    try:
        for _ in range(args.rounds):
            py.append(python_best(path, buf, args.size, args.repeat))
            t, target = cli_best(cli, path, args.size, args.repeat, host)
            cl.append(t)
    finally:
        if created and not args.keep:
            os.unlink(path)
    p_best, c_best = min(py), min(cl)
    ratio = p_best / c_best
    gb = args.size / 1e9
    print("file %s, %d bytes, %d rounds x %d reads, best of each" %
          (path, args.size, args.rounds, args.repeat))
    print("python  %-14s %.4f s  %7.2f GB/s" % (kind, p_best, gb / p_best))
    print("cli     %-14s %.4f s  %7.2f GB/s" % (target, c_best, gb / c_best))
    print("ratio python/cli time: %.4f (%+.2f%%); limit %.2f: %s" %
          (ratio, (ratio - 1) * 100, args.limit, "ok" if ratio <= args.limit else "OVER"))
    print(json.dumps({"python_seconds": p_best, "cli_seconds": c_best,
                      "python_gbps": gb / p_best, "cli_gbps": gb / c_best,
                      "ratio": ratio, "buffer": kind, "cli_target": target}))
    return 0 if ratio <= args.limit else 1


if __name__ == "__main__":
    sys.exit(main())
