#!/usr/bin/env python3
"""Two GPUs at once (issue 14, goal 5): warm 4 GiB reads with gpufile into
GPU 1 alone, GPU 0 alone, into both at the same time from one process (a
thread per GPU) and from two processes (one per GPU), against the pinned
host-to-device copy of 4 GiB to each GPU alone and to both at once,
measured in the same run.

Usage (on a machine with two GPUs, from the repository root, after
building; run as root for the page cache to be filled by cat):
  GPUFILE_LIBRARY=build-gpu/libgpufile.so PYTHONPATH=python \\
      python3 bench/two_gpus.py --dir /root/gpufile-bench --rounds 5

Files: two.0.bin and two.1.bin in --dir (4 GiB of random bytes each,
made once and reused), one per GPU so that each reader has its own
file, both warm (read once with cat before timing). Each round runs every
case once; the order alternates between rounds. Per case: the median of
the rounds, and the aggregate GB/s (1e9 bytes/s) of the bytes all GPUs
received over the time from the first start to the last end. Each read
is checked: three 1 MiB slices of the GPU buffer against the file.

The two-process case: two children of this script (--child), each with
its own CUDA context, buffer and gpufile pool set up before timing, start
when the parent writes a line to both; each reports its start and end on
CLOCK_MONOTONIC, which the whole machine shares.

--devices A,B picks the two GPUs (default 0,1; "GPU 0" and "GPU 1" below
name the first and the second); 0,0 tries the script out on one GPU.

Prints the GPUs with their NUMA nodes (sysfs), one line per round and
case, the medians and the ratios the issue asks for: two at once against
one alone (goal >= 1.6x), and each against the pinned copy ceiling.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import torch

import gpufile
from benchlib import run_together

SIZE = 4 << 30
SLICE = 1 << 20


def now():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def make_file(path, size):
    if os.path.exists(path) and os.path.getsize(path) == size:
        return
    with open(path + ".tmp", "wb") as f:
        left = size
        while left:
            n = min(left, 64 << 20)
            f.write(os.urandom(n))
            left -= n
    os.replace(path + ".tmp", path)


def warm(path):
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)


def numa_node(dev):
    p = torch.cuda.get_device_properties(dev)
    bus = "%04x:%02x:%02x.0" % (p.pci_domain_id, p.pci_bus_id, p.pci_device_id)
    try:
        with open("/sys/bus/pci/devices/%s/numa_node" % bus) as f:
            return f.read().strip()
    except OSError as e:
        return "unknown (%s)" % e.strerror


class Reader:
    """A 4 GiB buffer on one GPU and a gpufile read of one file into it."""

    def __init__(self, dev, path):
        self.dev, self.path = dev, path
        self.buf = torch.empty(SIZE, dtype=torch.uint8, device="cuda:%d" % dev)
        torch.cuda.synchronize(dev)

    def read(self):
        torch.cuda.set_device(self.dev)
        t0 = now()
        with gpufile.File(self.path) as f:
            n = f.read(self.buf)
        t1 = now()
        if n != SIZE:
            raise RuntimeError("%s: read %d of %d bytes" % (self.path, n, SIZE))
        return t0, t1

    def check(self):
        with open(self.path, "rb") as f:
            for off in (0, SIZE // 2 + 12345, SIZE - SLICE):
                want = os.pread(f.fileno(), SLICE, off)
                got = self.buf[off:off + SLICE].cpu().numpy().tobytes()
                if got != want:
                    raise RuntimeError("%s: GPU %d holds wrong bytes at %d"
                                       % (self.path, self.dev, off))


class Copier:
    """The pinned host-to-device copy of 4 GiB to one GPU (the ceiling)."""

    def __init__(self, dev, host):
        self.dev, self.host = dev, host
        self.buf = torch.empty(SIZE, dtype=torch.uint8, device="cuda:%d" % dev)
        self.stream = torch.cuda.Stream(device=dev)

    def read(self):
        torch.cuda.set_device(self.dev)
        t0 = now()
        with torch.cuda.stream(self.stream):
            self.buf.copy_(self.host, non_blocking=True)
        self.stream.synchronize()
        return t0, now()


def at_once(jobs):
    """Runs job.read() of every job in its own thread; (first start, last
    end) over them."""
    out = run_together([j.read for j in jobs])
    return min(s for s, _ in out), max(e for _, e in out)


def child(dev, path, rounds):
    """One process, one GPU: set up, say "ready", then one read per line
    read from stdin, each answered "start end"."""
    torch.cuda.set_device(dev)
    r = Reader(dev, path)
    gpufile.warmup()
    r.read()  # pool, bounce buffers and the context's first use
    print("ready", flush=True)
    for _ in range(rounds):
        if not sys.stdin.readline():
            return 1
        s, e = r.read()
        print("%.9f %.9f" % (s, e), flush=True)
    r.check()
    return 0


def two_processes(procs):
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    times = []
    for p in procs:
        line = p.stdout.readline().split()
        if len(line) != 2:
            raise RuntimeError("a child process failed (exit %s)" % p.poll())
        times.append((float(line[0]), float(line[1])))
    return min(s for s, _ in times), max(e for _, e in times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default="/root/gpufile-bench")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--devices", default="0,1",
                    help="the two GPUs, A,B (0,0 tries the script on one GPU)")
    ap.add_argument("--child", nargs=2, metavar=("DEV", "FILE"))
    args = ap.parse_args()
    if args.child:
        return child(int(args.child[0]), args.child[1], args.rounds)
    devs = [int(d) for d in args.devices.split(",")]
    if len(devs) != 2 or max(devs) >= torch.cuda.device_count():
        print("two_gpus: --devices %s: needs two GPU numbers below %d"
              % (args.devices, torch.cuda.device_count()))
        return 1
    print("gpufile %s (%s)" % (gpufile.version(), gpufile.library_path()))
    for d in sorted(set(devs)):
        print("GPU %d: %s, NUMA node %s" % (d, torch.cuda.get_device_name(d), numa_node(d)))
    os.makedirs(args.dir, exist_ok=True)
    paths = [os.path.join(args.dir, "two.%d.bin" % i) for i in (0, 1)]
    for p in paths:
        make_file(p, SIZE)
        warm(p)

    host = torch.empty(SIZE, dtype=torch.uint8).pin_memory()
    readers = [Reader(devs[i], paths[i]) for i in (0, 1)]
    copiers = [Copier(d, host) for d in devs]
    gpufile.warmup()
    for r in readers:  # each context's first read, untimed
        r.read()
    procs = [subprocess.Popen([sys.executable, __file__, "--child", str(devs[i]), paths[i],
                               "--rounds", str(args.rounds)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for i in (0, 1)]
    for p in procs:
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError("a child process did not start (exit %s)" % p.poll())

    cases = {
        "copy GPU 0": (1, lambda: copiers[0].read()),
        "copy GPU 1": (1, lambda: copiers[1].read()),
        "copy both": (2, lambda: at_once(copiers)),
        "read GPU 0": (1, lambda: readers[0].read()),
        "read GPU 1": (1, lambda: readers[1].read()),
        "read both, one process": (2, lambda: at_once(readers)),
        "read both, two processes": (2, lambda: two_processes(procs)),
    }
    names = list(cases)
    gbps = {n: [] for n in names}
    for rnd in range(args.rounds):
        order = names if rnd % 2 == 0 else names[::-1]
        for n in order:
            gpus, fn = cases[n]
            s, e = fn()
            gbps[n].append(gpus * SIZE / (e - s) / 1e9)
            print("  round %d %-26s %6.2f GB/s" % (rnd, n, gbps[n][-1]), flush=True)
    for r in readers:
        r.check()
    for p in procs:
        p.stdin.close()
        if p.wait() != 0:
            raise RuntimeError("a child process failed its byte check (exit %d)"
                               % p.returncode)
    print("all reads checked: three 1 MiB slices each against the file")

    med = {n: statistics.median(v) for n, v in gbps.items()}
    print("\nmedians over %d rounds (GB/s; aggregate where two GPUs)" % args.rounds)
    for n in names:
        print("  %-26s %6.2f  (%s)" % (n, med[n], " ".join("%.2f" % x for x in gbps[n])))
    alone = med["read GPU 0"]
    print("\nGPU 1 alone / GPU 0 alone:            %.3f" % (med["read GPU 1"] / alone))
    for n in ("read both, one process", "read both, two processes"):
        print("%-26s / GPU 0 alone: %.2fx (goal >= 1.6x)" % (n, med[n] / alone))
    print("copy both / copy GPU 0:               %.2fx (the host side's limit)"
          % (med["copy both"] / med["copy GPU 0"]))
    for n, c in (("read GPU 0", "copy GPU 0"), ("read GPU 1", "copy GPU 1"),
                 ("read both, one process", "copy both"),
                 ("read both, two processes", "copy both")):
        print("%-26s / %-10s: %.3f" % (n, c, med[n] / med[c]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
