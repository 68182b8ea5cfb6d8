#!/usr/bin/env python3
"""Captures, from pseudo-terminals, what a user sees while a single large
read runs (issue 35's must-show):

  1. `gpufile stats PID --watch 0.2` of a `gpufile read` of a 2 GiB file
     with one worker (GPUFILE_NTHREADS=1), read as one request (--window
     2g, no progress line): the counters move task by task;
  2. the read's own progress line during a 1 GiB read (its \\r redraws
     shown one per line).

Each file is dropped from the page cache first (`gpufile cache FILE
--drop`: no root needed), so the reads are cold unless the kernel keeps
pages it was asked to drop (the capture says how much was cached).

  bench/stats_watch_capture.py [--dir DIR] [--out DIR] [--direct]
                               [--device N]

--direct reads with GPUFILE_DIRECT_IO=on (O_DIRECT); --device N reads
into GPU N's memory instead of host memory (the files are then named
stats_watch_gpuN.txt and read_progress_gpuN.txt). Writes
OUT/stats_watch.txt and OUT/read_progress.txt (default bench/captures)
and prints both.
"""
import argparse
import json
import os
import pty
import select
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CLI = os.environ.get("GPUFILE_CLI") or os.path.join(HERE, "..", os.environ.get("BUILD_DIR", "build"),
                                                    "gpufile")


def make_file(path, size):
    if os.path.exists(path) and os.path.getsize(path) == size:
        return
    chunk = bytes(range(256)) * 4096  # 1 MiB
    with open(path, "wb") as f:
        for _ in range(size >> 20):
            f.write(chunk)


def cached(path):
    out = subprocess.run([CLI, "cache", path], stdout=subprocess.PIPE,
                         universal_newlines=True).stdout
    lines = [x for x in out.splitlines() if x.startswith("now")]
    return lines[0][3:].strip() if lines else "?"


def on_pty(argv, env=None, until=None):
    """Runs argv with stdout and stderr on a new pseudo-terminal; returns
    what it wrote. Stops it when until() turns true (then reads what is
    left)."""
    master, slave = pty.openpty()
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env,
                         close_fds=True)
    os.close(slave)
    out = b""
    while True:
        r, _, _ = select.select([master], [], [], 0.05)
        if r:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the other side is closed
                break
            if not data:
                break
            out += data
        elif p.poll() is not None:
            break
        if until is not None and until() and p.poll() is None:
            time.sleep(0.3)  # its last sample
            p.terminate()
    p.wait()
    os.close(master)
    return out.decode("utf-8", "replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--out", default=os.path.join(HERE, "captures"))
    ap.add_argument("--direct", action="store_true")
    ap.add_argument("--device", type=int, default=None)
    a = ap.parse_args()
    dest = ["--host"] if a.device is None else ["--device", str(a.device)]
    suffix = "" if a.device is None else "_gpu%d" % a.device
    os.makedirs(a.out, exist_ok=True)
    env = dict(os.environ, GPUFILE_NTHREADS="1")
    if a.direct:
        env["GPUFILE_DIRECT_IO"] = "on"
    big = os.path.join(a.dir, "gpufile-capture-2g.bin")
    one = os.path.join(a.dir, "gpufile-capture-1g.bin")
    make_file(big, 2 << 30)
    make_file(one, 1 << 30)

    # 1. stats --watch during one 2 GiB request with one worker.
    subprocess.run([CLI, "cache", big, "--drop"], stdout=subprocess.DEVNULL, check=True)
    note = "page cache before the read: " + cached(big)
    reader = subprocess.Popen([CLI, "read", big] + dest + ["--window", "2g", "--no-progress"],
                              stdout=subprocess.PIPE, env=env, universal_newlines=True)
    # Watched from when its request is in flight (it first allocates and
    # touches its 2 GiB buffer): bounded wait.
    deadline = time.monotonic() + 300
    while reader.poll() is None and time.monotonic() < deadline:
        r = subprocess.run([CLI, "stats", str(reader.pid), "--json"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, universal_newlines=True)
        if r.returncode == 0 and json.loads(r.stdout)["inflight"]["requests"] > 0:
            break
        time.sleep(0.005)
    watch = on_pty([CLI, "stats", str(reader.pid), "--watch", "0.2"],
                   until=lambda: reader.poll() is not None)
    report = reader.communicate()[0]
    text = ("$ GPUFILE_NTHREADS=1%s gpufile read %s %s --window 2g --no-progress &\n"
            "# %s\n$ gpufile stats %d --watch 0.2   (on a pty)\n%s\n"
            "# the read's report:\n%s" % (" GPUFILE_DIRECT_IO=on" if a.direct else "", big, " ".join(dest), note,
                                          reader.pid, watch.replace("\r\n", "\n"), report))
    with open(os.path.join(a.out, "stats_watch%s.txt" % suffix), "w") as f:
        f.write(text)
    print(text)

    # 2. the progress line of a 1 GiB read.
    subprocess.run([CLI, "cache", one, "--drop"], stdout=subprocess.DEVNULL, check=True)
    note = "page cache before the read: " + cached(one)
    out = on_pty([CLI, "read", one] + dest, env=dict(os.environ, **(
        {"GPUFILE_DIRECT_IO": "on"} if a.direct else {})))
    lines = out.replace("\r\n", "\n").replace("\x1b[K", "").replace("\r", "\n\\r ")
    text = ("$ %sgpufile read %s %s   (on a pty; each \\r redraw on a line)\n# %s\n%s\n"
            % ("GPUFILE_DIRECT_IO=on " if a.direct else "", one, " ".join(dest), note, lines))
    with open(os.path.join(a.out, "read_progress%s.txt" % suffix), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    sys.exit(main())
