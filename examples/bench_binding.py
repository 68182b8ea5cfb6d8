#!/usr/bin/env python3
"""The binding's overhead: the same 1 GiB read through Python and through
the CLI, in the same run, on the same file.

  examples/bench_binding.py [--file PATH] [--size BYTES] [--repeat K]
                            [--rounds R] [--host] [--limit RATIO]

Python: gpufile.File(path).read(buf) into a preallocated CuPy array (a
NumPy array when there is no CuPy or GPU), timed around read() only.
CLI: `gpufile read FILE --size N --repeat K --json` (its "seconds_each",
timed around gpufile_pread() only), with --host when Python reads into host
memory. Rounds interleave the two, in alternating order (Python first in
even rounds, the CLI first in odd ones), so that page-cache, clock and
neighbour states are shared and drift cancels. Each side's time in a round
is the median of its K reads; the report gives, for each side, the median
over rounds, and the median of the per-round ratios python/cli with its
spread (lowest and highest round). Noise is reported, not judged: the exit
status is 0 whenever the measurement ran; only with --limit does it exit 1,
when the median ratio is above that limit. The CLI is found as
gpufile.cli_path() does ($GPUFILE_CLI, next to the library or in bin/
beside its lib/, PATH, build/).
"""

import argparse
import json
import os
import statistics
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


def python_times(path, buf, size, repeat):
    """The seconds of each of repeat reads through the binding."""
    times = []
    with gpufile.File(path) as f:
        for _ in range(repeat):
            t0 = time.perf_counter()
            n = f.read(buf, size)
            dt = time.perf_counter() - t0
            if n != size:
                raise SystemExit("python read returned %d, wanted %d" % (n, size))
            times.append(dt)
    return times


def cli_times(cli, path, size, repeat, host):
    """The seconds of each of repeat reads in one run of the CLI."""
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
    return d.get("seconds_each") or [d["seconds"]], d.get("target")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", default="gpufile_bench_1GiB.bin")
    ap.add_argument("--size", type=int, default=1 << 30)
    ap.add_argument("--repeat", type=int, default=5, help="reads per side per round")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--host", action="store_true", help="read into host memory")
    ap.add_argument("--limit", type=float, default=None,
                    help="exit 1 when the median ratio python/cli time is above "
                         "this (default: report only)")
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
    python_times(path, buf, args.size, 1)  # first touch: pool, pinned buffers
    rounds = []  # (python median, cli median) per round
    target = None
    try:
        for r in range(args.rounds):
            if r % 2 == 0:
                py = python_times(path, buf, args.size, args.repeat)
                cl, target = cli_times(cli, path, args.size, args.repeat, host)
            else:
                cl, target = cli_times(cli, path, args.size, args.repeat, host)
                py = python_times(path, buf, args.size, args.repeat)
            rounds.append((statistics.median(py), statistics.median(cl)))
    finally:
        if created and not args.keep:
            os.unlink(path)
    p_med = statistics.median(p for p, _ in rounds)
    c_med = statistics.median(c for _, c in rounds)
    ratios = [p / c for p, c in rounds]
    ratio = statistics.median(ratios)
    gb = args.size / 1e9
    print("file %s, %d bytes, %d interleaved rounds x %d reads per side; medians"
          % (path, args.size, args.rounds, args.repeat))
    print("python  %-14s %.4f s  %7.2f GB/s" % (kind, p_med, gb / p_med))
    print("cli     %-14s %.4f s  %7.2f GB/s" % (target, c_med, gb / c_med))
    verdict = ""
    if args.limit is not None:
        verdict = "; limit %.2f: %s" % (args.limit, "ok" if ratio <= args.limit else "OVER")
    print("ratio python/cli time: median %.4f (%+.2f%%), rounds from %.4f to %.4f%s"
          % (ratio, (ratio - 1) * 100, min(ratios), max(ratios), verdict))
    print(json.dumps({"python_seconds": p_med, "cli_seconds": c_med,
                      "python_gbps": gb / p_med, "cli_gbps": gb / c_med,
                      "ratio": ratio, "ratio_min": min(ratios), "ratio_max": max(ratios),
                      "rounds": [{"python_seconds": p, "cli_seconds": c} for p, c in rounds],
                      "buffer": kind, "cli_target": target}))
    if args.limit is not None and ratio > args.limit:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
