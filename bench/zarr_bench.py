#!/usr/bin/env python3
"""Array data through gpufile (issue 38), in one run, interleaved rounds
(so that drift in the machine hits every contender alike), page cache
warm (one untimed read of each first), medians of --rounds:

  zarr    a Zarr array (float64, 1-D, --chunk-sized chunks, uncompressed)
          read whole: gpufile.zarr.open_array(root)[:] against
          zarr.open_array(DirectoryStore(root))[:]          goal >= 1.5x
  ranges  --nranges ranges of --range-size at random offsets of one file:
          fsspec "file" cat_ranges against "gpufile" cat_ranges
                                                            goal >= 2x
  --gpu   the same Zarr array into CuPy: gpufile.zarr with meta_array
          against DirectoryStore + cupy.asarray per chunk   goal >= 3x
  --gpu-parts  where that read's time goes: every chunk in one batch
          into one CuPy buffer against into one NumPy buffer, and a
          profile of one read into CuPy

Every contender's result is checked against the others' (the whole array
sum, every range's bytes). Wall times are the goals' measure; each line
also gives the process's CPU time (all its threads) and the ratio of the
CPU medians, with the load average: on a shared 2-core machine a reader's
wall time is mostly its CPU time over its share of the cores.

Files (created once in --dir, reused when their size matches):
  a.zarr/     the array (--size bytes)
  ranges.bin  the file the ranges are cut from (--size bytes)

Usage, from the repository root after building:
  GPUFILE_LIBRARY=build/libgpufile.so PYTHONPATH=python \\
      python3 bench/zarr_bench.py --dir /tmp/zarr-bench --size 2GiB
  ... --gpu          (on the GPU machine, CuPy installed)
  ... --only zarr    (some parts only: zarr, parts, ranges, small)
  ... --base DIR     (DIR/gpufile: another copy of the package, e.g. from
                      git archive main python | tar -x -C DIR --strip 1;
                      its gpufile.zarr timed in the same rounds)
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import gpufile
import gpufile.fsspec  # noqa: F401  (registers "gpufile")
import gpufile.zarr as gz

import fsspec
import zarr


def size_arg(text):
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if text.endswith(u):
            return int(float(text[:-len(u)]) * m)
    return int(text)


def make_array(root, size, chunk):
    n, c = size // 8, chunk // 8
    try:
        z = zarr.open_array(zarr.storage.DirectoryStore(root), mode="r")
        if z.shape == (n,) and z.chunks == (c,) and z.compressor is None:
            return z
    except Exception:
        pass
    print("creating %s (%d MiB)" % (root, size >> 20), flush=True)
    z = zarr.open_array(zarr.storage.DirectoryStore(root), mode="w",
                        shape=(n,), chunks=(c,), dtype="<f8", compressor=None)
    step = max(c, (64 << 20) // 8 // c * c)
    for i in range(0, n, step):
        z[i:i + step] = np.arange(i, min(i + step, n), dtype="<f8")
    return z


def make_file(path, size):
    if os.path.exists(path) and os.path.getsize(path) == size:
        return
    print("creating %s (%d MiB)" % (path, size >> 20), flush=True)
    rng = np.random.default_rng(1)
    with open(path, "wb") as f:
        for i in range(0, size, 64 << 20):
            f.write(rng.integers(0, 256, min(64 << 20, size - i),
                                 dtype=np.uint8).tobytes())


def timed(fn):
    """(wall seconds, CPU seconds of the process: every thread's, the
    result)."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


class Times(dict):
    """{name: [wall seconds]}, and cpu: {name: [CPU seconds]}."""

    def __init__(self, names):
        super().__init__((name, []) for name in names)
        self.cpu = {name: [] for name in names}


def rounds(contenders, n, check):
    """Times of n interleaved rounds, after one untimed round;
    check(results by name) after each."""
    times = Times(contenders)
    for r in range(n + 1):
        results = {}
        order = list(contenders) if r % 2 == 0 else list(contenders)[::-1]
        for name in order:
            dt, cpu, results[name] = timed(contenders[name])
            if r:
                times[name].append(dt)
                times.cpu[name].append(cpu)
        check(results)
        del results
    return times


def report(label, times, nbytes, base, new, goal, lines=True):
    """Prints each contender's wall times (the goal's measure) and CPU
    times (the process's, all threads: on a shared machine a reader's
    wall time is mostly its CPU time over its share of the cores), unless
    lines is False, and the ratios of the medians of base and new;
    returns the wall ratio."""
    med = {k: statistics.median(v) for k, v in times.items()}
    cpu = {k: statistics.median(v) for k, v in times.cpu.items()}
    for k, v in times.items() if lines else ():
        print("%-8s %-30s median %.3f s  best %.3f s  %.2f GB/s  (%s)  "
              "cpu median %.3f s (%s)" % (
                  label, k, med[k], min(v), nbytes / med[k] / 1e9,
                  " ".join("%.3f" % x for x in v), cpu[k],
                  " ".join("%.3f" % x for x in times.cpu[k])))
    ratio = med[base] / med[new]
    print("%-8s %s / %s = %.2fx%s; cpu %.2fx, load %s" % (
        label, base, new, ratio, "" if goal is None else " (goal >= %gx: %s)"
        % (goal, "met" if ratio >= goal else "MISSED"),
        cpu[base] / cpu[new], "%.2f %.2f %.2f" % os.getloadavg()))
    return ratio


def load_base(folder):
    """The gpufile package in folder/gpufile (another checkout's python/),
    imported beside this one as gpufile_base: its zarr module. Both load
    the same libgpufile ($GPUFILE_LIBRARY)."""
    import importlib
    import importlib.util
    pkg = os.path.join(folder, "gpufile")
    spec = importlib.util.spec_from_file_location(
        "gpufile_base", os.path.join(pkg, "__init__.py"),
        submodule_search_locations=[pkg])
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpufile_base"] = module
    spec.loader.exec_module(module)
    return importlib.import_module("gpufile_base.zarr")


def bench_zarr(root, nrounds, base=None):
    """z[:] and z[:] into out=, DirectoryStore against gpufile.zarr, and
    against base's gpufile.zarr (load_base) when given; ratios printed
    for each gpufile.zarr; returns this one's z[:] ratio."""
    n = zarr.open_array(zarr.storage.DirectoryStore(root), mode="r").shape[0]
    want = n * (n - 1) / 2
    mine = {"gpufile.zarr": gz}
    if base is not None:
        mine["gpufile.zarr (base)"] = base

    def check(results):
        for k, a in results.items():
            assert a.shape == (n,) and a[-1] == n - 1 and a.sum() == want, k
    contenders = {"zarr DirectoryStore": lambda: zarr.open_array(
        zarr.storage.DirectoryStore(root), mode="r")[:]}
    for name, m in mine.items():
        contenders[name] = lambda m=m: m.open_array(root, mode="r")[:]
    times = rounds(contenders, nrounds, check)
    for name in reversed(mine):
        ratio = report("zarr", times, n * 8, "zarr DirectoryStore", name,
                       1.5, name == "gpufile.zarr (base)" or not base)
    # The same into one output array made once (zarr's out=): without the
    # kernel's first touch of 2 GiB of new pages, which z[:] pays in
    # either store (np.empty, then page faults that zero every page).
    out = np.empty(n, dtype="<f8")
    out[:] = 0
    contenders = {"zarr DirectoryStore, out=": lambda: zarr.open_array(
        zarr.storage.DirectoryStore(root), mode="r").get_basic_selection(
            slice(None), out=out)}
    for name, m in mine.items():
        contenders[name + ", out="] = lambda m=m: m.open_array(
            root, mode="r").get_basic_selection(slice(None), out=out)
    times = rounds(contenders, nrounds, lambda results: check({"out": out}))
    for name in reversed(mine):
        report("zarr-out", times, n * 8, "zarr DirectoryStore, out=",
               name + ", out=", 1.5, name == "gpufile.zarr (base)" or not base)
    return ratio


def bench_small(root, nrounds, base=None, nsel=500):
    """Selections of one chunk each (nsel of them, at chunks spread over
    the array, the array opened once): the per-selection cost a data
    loader reading a sample at a time pays. DirectoryStore against
    gpufile.zarr (and base's, when given)."""
    zd = zarr.open_array(zarr.storage.DirectoryStore(root), mode="r")
    n, c = zd.shape[0], zd.chunks[0]
    starts = [((i * 7919) % (n // c)) * c for i in range(nsel)]
    mine = {"gpufile.zarr": gz}
    if base is not None:
        mine["gpufile.zarr (base)"] = base

    def run(z):
        return [float(z[a:a + c][-1]) for a in starts]

    def check(results):
        want = [float(a + c - 1) for a in starts]
        for k, got in results.items():
            assert got == want, k
    contenders = {"zarr DirectoryStore, one chunk": lambda: run(zd)}
    for name, m in mine.items():
        z = m.open_array(root, mode="r")
        contenders[name + ", one chunk"] = lambda z=z: run(z)
    times = rounds(contenders, nrounds, check)
    for name in reversed(mine):
        report("small", times, nsel * c * 8,
               "zarr DirectoryStore, one chunk", name + ", one chunk", None,
               name == "gpufile.zarr (base)" or not base)


def bench_parts(root, nrounds):
    """Where the time of a whole read goes: opening every chunk file
    (gpufile.File: a buffered and an O_DIRECT descriptor; Python's open:
    one), and reading every chunk into one reused buffer (one gpufile
    batch; Python's readinto, one chunk after the other)."""
    names = sorted((k for k in os.listdir(root) if not k.startswith(".")),
                   key=int)
    paths = [os.path.join(root, k) for k in names]
    chunk = os.path.getsize(paths[0])
    buf = np.zeros(chunk * len(paths), dtype=np.uint8)

    def gpufile_open():
        for f in [gpufile.File(p) for p in paths]:
            f.close()

    def python_open():
        for f in [open(p, "rb") for p in paths]:
            f.close()

    files = [gpufile.File(p) for p in paths]
    pyfiles = [open(p, "rb", buffering=0) for p in paths]

    def batch():
        gpufile.batch_read([(f, buf[i * chunk:(i + 1) * chunk], None, 0)
                            for i, f in enumerate(files)])

    def readinto():
        for i, f in enumerate(pyfiles):
            f.seek(0)
            f.readinto(buf[i * chunk:(i + 1) * chunk])
    for label, a, b in (("opens", python_open, gpufile_open),
                        ("reads", readinto, batch)):
        times = rounds({"python " + label: a, "gpufile " + label: b},
                       nrounds, lambda results: None)
        report("parts", times, len(paths) * chunk, "python " + label,
               "gpufile " + label, None)
    for f in files + pyfiles:
        f.close()


def bench_ranges(path, nranges, range_size, nrounds):
    size = os.path.getsize(path)
    rng = np.random.default_rng(2)
    starts = [int(s) for s in rng.integers(0, size - range_size, nranges)]
    ends = [s + range_size for s in starts]
    local = fsspec.filesystem("file")
    gfs = fsspec.filesystem("gpufile")

    def check(results):
        a, b = results.values()
        assert a == b and all(len(x) == range_size for x in a)
    times = rounds({
        "fsspec file:// cat_ranges": lambda: local.cat_ranges(
            [path] * nranges, starts, ends),
        "fsspec gpufile:// cat_ranges": lambda: gfs.cat_ranges(
            [path] * nranges, starts, ends),
    }, nrounds, check)
    return report("ranges", times, nranges * range_size,
                  "fsspec file:// cat_ranges", "fsspec gpufile:// cat_ranges",
                  2.0)


def bench_gpu(root, nrounds):
    import cupy as cp
    z0 = zarr.open_array(zarr.storage.DirectoryStore(root), mode="r")
    n, c = z0.shape[0], z0.chunks[0]
    want = n * (n - 1) / 2

    def per_chunk():
        store = zarr.storage.DirectoryStore(root)
        out = cp.empty(n, dtype=cp.float64)
        for i in range(0, (n + c - 1) // c):
            a = np.frombuffer(store[str(i)], dtype="<f8")
            m = min(c, n - i * c)
            out[i * c:i * c + m] = cp.asarray(a[:m])
        cp.cuda.Device().synchronize()
        return out

    def through_store():
        out = gz.open_array(root, mode="r", meta_array=cp.empty(()))[:]
        cp.cuda.Device().synchronize()
        return out

    def check(results):
        for k, a in results.items():
            assert isinstance(a, cp.ndarray) and float(a.sum()) == want, k
    times = rounds({"DirectoryStore + cupy.asarray": per_chunk,
                    "gpufile.zarr meta_array=cupy": through_store},
                   nrounds, check)
    return report("gpu", times, n * 8, "DirectoryStore + cupy.asarray",
                  "gpufile.zarr meta_array=cupy", 3.0)


def bench_gpu_parts(root, nrounds):
    """Where the time of a whole read into CuPy goes: the batch of every
    chunk read into one device buffer (the rows the store makes: no per
    chunk slicing), the same into host memory, and a profile of one
    z[:] into CuPy (the 15 largest cumulative times)."""
    import cProfile
    import pstats
    import cupy as cp
    from gpufile import _ranges
    names = sorted((k for k in os.listdir(root) if not k.startswith(".")),
                   key=int)
    paths = [os.path.join(root, k) for k in names]
    chunk = os.path.getsize(paths[0])
    files = [gpufile.File(p) for p in paths]
    dev = cp.zeros(chunk * len(paths), dtype=cp.uint8)
    host = np.zeros(chunk * len(paths), dtype=np.uint8)

    def batch(base):
        def run():
            got = _ranges.read_rows(
                [(f, base + i * chunk, chunk, 0) for i, f in enumerate(files)],
                [])
            assert all(g == chunk for g in got)
        return run
    times = rounds({"batch into CuPy": batch(dev.data.ptr),
                    "batch into NumPy": batch(host.ctypes.data)},
                   nrounds, lambda results: None)
    report("gpu-parts", times, len(paths) * chunk, "batch into NumPy",
           "batch into CuPy", None)
    for f in files:
        f.close()
    z = gz.open_array(root, mode="r", meta_array=cp.empty(()))
    z[:]
    prof = cProfile.Profile()
    prof.enable()
    z[:]
    cp.cuda.Device().synchronize()
    prof.disable()
    pstats.Stats(prof).sort_stats("cumulative").print_stats(15)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/tmp/zarr-bench")
    ap.add_argument("--size", type=size_arg, default=2 << 30)
    ap.add_argument("--chunk", type=size_arg, default=1 << 20)
    ap.add_argument("--nranges", type=int, default=10000)
    ap.add_argument("--range-size", type=size_arg, default=64 << 10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gpu", action="store_true",
                    help="only the CuPy form (the GPU machine)")
    ap.add_argument("--gpu-parts", action="store_true",
                    help="where the CuPy form's time goes (the GPU machine)")
    ap.add_argument("--only", default="zarr,parts,ranges",
                    help="the parts to run, of zarr,parts,ranges,small "
                    "(selections of one chunk)")
    ap.add_argument("--base", metavar="DIR",
                    help="time DIR/gpufile's gpufile.zarr too (another "
                    "copy of the package), in the same rounds")
    args = ap.parse_args()
    only = set(args.only.split(","))
    if not only or only - {"zarr", "parts", "ranges", "small"}:
        sys.exit("zarr_bench: --only %r: a comma-separated list of zarr, "
                 "parts, ranges and small" % args.only)
    if args.base and not os.path.isfile(
            os.path.join(args.base, "gpufile", "__init__.py")):
        sys.exit("zarr_bench: --base %s: no gpufile package in it "
                 "(%s/gpufile/__init__.py)" % (args.base, args.base))
    if args.size % args.chunk or args.chunk % 8:
        sys.exit("zarr_bench: --size must be a multiple of --chunk, and "
                 "--chunk of 8 bytes")
    os.makedirs(args.dir, exist_ok=True)
    root = os.path.join(args.dir, "a.zarr")
    make_array(root, args.size, args.chunk)
    print("gpufile %s, zarr %s, fsspec %s, %d CPUs, load %s; array %d MiB "
          "in %d KiB chunks" % (gpufile.version(), zarr.__version__,
                                fsspec.__version__, os.cpu_count(),
                                "%.2f %.2f %.2f" % os.getloadavg(),
                                args.size >> 20, args.chunk >> 10), flush=True)
    if args.gpu or args.gpu_parts:
        if args.gpu:
            bench_gpu(root, args.rounds)
        if args.gpu_parts:
            bench_gpu_parts(root, args.rounds)
        return
    if "zarr" in only:
        bench_zarr(root, args.rounds,
                   load_base(args.base) if args.base else None)
    if "small" in only:
        bench_small(root, args.rounds,
                    load_base(args.base) if args.base else None)
    if "parts" in only:
        bench_parts(root, args.rounds)
    if "ranges" in only:
        path = os.path.join(args.dir, "ranges.bin")
        make_file(path, args.size)
        bench_ranges(path, args.nranges, args.range_size, args.rounds)


if __name__ == "__main__":
    main()
