#!/usr/bin/env python3
"""NVIDIA's KvikIO/GDS tutorial, with gpufile.

The tutorial writes a 1 GiB file of random bytes with direct I/O, reads it
into a preallocated 1 GiB CuPy array, checks that the bytes returned equal
1 GiB, and then asks the statistics which path carried the 256 reads (1 GiB
in 4 MiB tasks): gpufile's layer (cufile / posix / small) and cuFile's
layer (nvfs / posix). It repeats the read under three settings:

  off          GPUFILE_COMPAT_MODE=off  CUFILE_EXPERIMENTAL_FS=1
  off+force    the same plus CUFILE_FORCE_COMPAT_MODE=true
  on           GPUFILE_COMPAT_MODE=on

Usage:
  examples/tutorial_cupy.py [--file PATH] [--size BYTES]
      writes the file, then runs the tutorial's read with the default
      settings ("auto") and under every mode above, each in a fresh child
      process (cuFile reads its variables once per process)
  examples/tutorial_cupy.py --mode NAME [--wait]
      one mode in this process; --wait keeps it alive after the read, so that
      `gpufile stats PID` in another shell shows its counters
  --json      one JSON object per mode instead of text (children use it)

Environment: GPUFILE_LIBRARY (path to libgpufile.so) as for the package;
CUFILE_STATS_LEVEL=3 is set for every mode so cuFile counts per GPU.
Exits 77 (skip) when CuPy or a GPU is missing.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

SKIP = 77
MODES = {
    "auto": {},
    "off": {"GPUFILE_COMPAT_MODE": "off", "CUFILE_EXPERIMENTAL_FS": "1"},
    "off+force": {"GPUFILE_COMPAT_MODE": "off", "CUFILE_EXPERIMENTAL_FS": "1",
                  "CUFILE_FORCE_COMPAT_MODE": "true"},
    "on": {"GPUFILE_COMPAT_MODE": "on"},
}
SEED = 42
CHUNK = 64 << 20


def skip(why):
    print("SKIP: %s" % why)
    sys.exit(SKIP)


def expected_chunk(i, size):
    """The bytes of chunk i of the file: reproducible, so that a child can
    verify without the parent's copy."""
    import numpy as np

    return np.random.default_rng([SEED, i]).integers(0, 256, size, dtype=np.uint8)


def write_file(path, size):
    """1 GiB of random bytes with O_DIRECT (as `dd oflag=direct`), then
    fsync: the bytes are on the device, not only in the page cache."""
    import mmap

    buf = mmap.mmap(-1, CHUNK)  # page aligned, as O_DIRECT needs
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    try:
        fd = os.open(path, flags | os.O_DIRECT, 0o644)
        direct = True
    except OSError:  # tmpfs and a few others refuse O_DIRECT
        fd = os.open(path, flags, 0o644)
        direct = False
    try:
        off = 0
        i = 0
        while off < size:
            n = min(CHUNK, size - off)
            buf[:n] = expected_chunk(i, n).tobytes()
            if direct and n % 4096:
                # The tail is not a multiple of the block: finish without O_DIRECT.
                os.close(fd)
                fd = os.open(path, os.O_WRONLY)
                direct = False
            done = os.pwrite(fd, memoryview(buf)[:n], off)
            assert done == n, "short write"
            off += n
            i += 1
        os.fsync(fd)
    finally:
        os.close(fd)
        buf.close()
    return direct


def verify(dev, size):
    import cupy as cp

    off = 0
    i = 0
    while off < size:
        n = min(CHUNK, size - off)
        if not bool(cp.array_equal(dev[off:off + n], cp.asarray(expected_chunk(i, n)))):
            return False
        off += n
        i += 1
    return True


def run_mode(name, path, size, wait):
    """One read in this process; returns the report as a dict."""
    try:
        import cupy as cp
    except Exception as e:
        skip("CuPy is not installed (%s)" % e)
    import gpufile

    if gpufile.cuda_device_count() == 0:
        skip("no usable CUDA GPU")
    try:
        cp.cuda.runtime.getDeviceCount()
    except Exception as e:
        skip("CuPy sees no GPU (%s)" % e)

    dev = cp.empty(size, dtype=cp.uint8)  # preallocated, as in the tutorial
    cp.cuda.Device().synchronize()
    before = gpufile.stats()
    report = {"mode": name, "env": MODES.get(name, {}), "pid": os.getpid(),
              "file": path, "size": size}
    try:
        with gpufile.File(path, "r") as f:
            t0 = time.perf_counter()
            n = f.read(dev)
            report["seconds"] = time.perf_counter() - t0
            report["bytes_read"] = n
            info = f.path_info()
            report["path_info"] = {"path": info.path, "reason": info.reason}
    except OSError as e:
        report["error"] = {"errno": e.errno, "message": str(e),
                           "code": getattr(e, "code_name", None),
                           "cufile_status": getattr(e, "cufile_status", None)}
        return report
    report["bytes_ok"] = report["bytes_read"] == size
    report["verified"] = verify(dev, size)
    after = gpufile.stats()
    report["gpufile"] = {
        p: {k: after["gpufile"]["read"][p][k] - before["gpufile"]["read"][p][k]
            for k in ("ops", "tasks", "bytes", "errors")}
        for p in ("cufile", "posix", "small", "host")}
    gpus_before = {g["gpu"]: g for g in before["cufile"].get("gpus", [])}
    report["cufile"] = {
        "stats_level": after["cufile"].get("stats_level"),
        "loaded": after["cufile"].get("loaded"),
        "message": after["cufile"].get("message"),
        "gpus": [dict({k: g[k] - gpus_before.get(g["gpu"], {}).get(k, 0)
                       for k in ("nvfs_reads", "posix_reads", "p2p_reads")},
                      gpu=g["gpu"]) for g in after["cufile"].get("gpus", [])],
    }
    if wait:
        print("pid %d: run `gpufile stats %d` in another shell; press Enter "
              "to exit" % (os.getpid(), os.getpid()), flush=True)
        try:
            input()
        except EOFError:
            pass
    return report


def print_report(r):
    print("== mode %s  %s" % (r["mode"], " ".join("%s=%s" % kv for kv in r["env"].items())
                               or "(defaults)"))
    if "error" in r:
        e = r["error"]
        print("   FAILED: %s (errno %s, %s, cuFile status %s)"
              % (e["message"], e["errno"], e["code"], e["cufile_status"]))
        return
    print("   bytes read: %d (%s 1 GiB)  %.3f s  %.2f GB/s"
          % (r["bytes_read"], "==" if r["bytes_read"] == r["size"] else "!=",
             r["seconds"], r["bytes_read"] / r["seconds"] / 1e9))
    print("   data verified: %s" % ("yes" if r["verified"] else "NO, MISMATCH"))
    for p, c in r["gpufile"].items():
        if c["ops"] or c["errors"]:
            print("   gpufile %-6s ops %d  tasks %d  bytes %d  errors %d"
                  % (p, c["ops"], c["tasks"], c["bytes"], c["errors"]))
    cf = r["cufile"]
    if cf["gpus"]:
        for g in cf["gpus"]:
            print("   cuFile gpu %d: nvfs %d  posix %d  p2p %d"
                  % (g["gpu"], g["nvfs_reads"], g["posix_reads"], g["p2p_reads"]))
    else:
        print("   cuFile layer: no per-GPU counts (loaded %s, stats level %s%s)"
              % (cf["loaded"], cf["stats_level"],
                 ", " + cf["message"] if cf["message"] else ""))
    print("   path_info: %s: %s" % (r["path_info"]["path"], r["path_info"]["reason"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file", default=os.environ.get("GPUFILE_TUTORIAL_FILE",
                                                     "gpufile_tutorial_1GiB.bin"))
    ap.add_argument("--size", type=int, default=1 << 30)
    ap.add_argument("--mode", choices=sorted(MODES))
    ap.add_argument("--wait", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the file")
    args = ap.parse_args()
    path = os.path.abspath(args.file)

    if args.mode:
        r = run_mode(args.mode, path, args.size, args.wait)
        print(json.dumps(r) if args.json else "", end="\n" if args.json else "")
        if not args.json:
            print_report(r)
        return 0 if r.get("verified") else 1

    try:
        import cupy  # noqa: F401
    except Exception as e:
        skip("CuPy is not installed (%s)" % e)
    direct = write_file(path, args.size)
    print("wrote %s: %d random bytes, %s, fsynced" % (path, args.size,
          "O_DIRECT" if direct else "page cache (O_DIRECT refused)"))
    reports = []
    try:
        for name, env in MODES.items():
            e = dict(os.environ, CUFILE_STATS_LEVEL="3", **env)
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--mode", name,
                                "--file", path, "--size", str(args.size), "--json"],
                               env=e, stdout=subprocess.PIPE, universal_newlines=True)
            if p.returncode == SKIP:
                skip(p.stdout.strip())
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            if not lines:
                print("== mode %s: child exited %d without a report" % (name, p.returncode))
                continue
            r = json.loads(lines[-1])
            reports.append(r)
            if args.json:
                print(json.dumps(r))
            else:
                print_report(r)
    finally:
        if not args.keep:
            os.unlink(path)
    # A mode may fail with a clear error (compat_mode=off without a usable
    # cuFile); every read that returned must be whole and verified.
    ok = all("error" in r or (r["bytes_ok"] and r["verified"]) for r in reports)
    return 0 if ok and reports else 1


if __name__ == "__main__":
    sys.exit(main())
