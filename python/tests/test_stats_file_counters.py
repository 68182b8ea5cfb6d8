"""Per-file counters in every output of gpufile stats PID (text, --json,
--watch --json, --openmetrics, --serve), read from another process: each
file's bytes, with names that carry planted secrets (a URL's user:password@
and ?X-Amz-Signature=) and bytes that could act on a terminal or break a
format (ESC, a newline, a double quote, a backslash). The secrets never
appear; the other bytes never appear raw; the OpenMetrics text is parsed
with prometheus_client's parser (Debian's python3-prometheus-client)."""
import contextlib
import json
import os
import subprocess
import urllib.request

import pytest

import gpufile
from conftest import in_ci, ready_child, remote_server

SIZE = (1 << 20) + 4097
SECRET = "PLANTED"
ESC = "\x1b"
REMOTE = "remote" in gpufile.features()

try:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
except ImportError:  # scripts/deps.sh installs python3-prometheus-client
    text_string_to_metric_families = None

# Reads each file named on the command line (a URL too) whole, closes it,
# and waits until stdin closes.
CHILD = r"""
import sys, numpy as np, gpufile
for name in sys.argv[1:]:
    with gpufile.File(name) as f:
        f.read(np.empty(f.size(), np.uint8))
print("ready", flush=True)
sys.stdin.read()
"""


def shown(name):
    """name as gpufile stats prints it (text_escape)."""
    out = []
    for ch in name:
        if ch == "\\":
            out.append("\\\\")
        elif ord(ch) < 0x20 or ord(ch) == 0x7f:
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    return "".join(out)


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    """(pid, {name as read: (name as shown by gpufile, size)})."""
    d = tmp_path_factory.mktemp("fc")
    files = {}
    for name, size in (("esc" + ESC + "[31mname.bin", 300001),
                       ('q"uote\nline\\back.bin', 4096 * 3 + 5)):
        path = str(d / name)
        with open(path, "wb") as f:
            f.write(os.urandom(size))
        files[path] = (path, size)
    with contextlib.ExitStack() as stack:
        if REMOTE:
            port = stack.enter_context(remote_server("fault_server.py", SIZE, 120))
            url = "http://user:%s@127.0.0.1:%d/ok/o.bin?X-Amz-Signature=%s" % (
                SECRET, port, SECRET)
            files[url] = ("http://127.0.0.1:%d/ok/o.bin?<query redacted>" % port, SIZE)
        yield stack.enter_context(ready_child(CHILD, *files)), files


def run(*args):
    r = subprocess.run([gpufile.cli_path(), "stats"] + [str(a) for a in args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode("utf-8")
    never_raw(out)
    return out


def never_raw(out):
    assert SECRET not in out
    assert ESC not in out
    assert "uote\nline" not in out


def test_text(reader):
    pid, files = reader
    out = run(pid)
    assert "files counted: %d (" % len(files) in out
    for name, (shown_name, size) in files.items():
        line = "  %s: 0 handles open; read %d bytes" % (shown(shown_name), size)
        assert line in out, (line, out)


def by_name(doc):
    return {f["name"]: f for f in doc["file_counters"]["files"]}


def test_json(reader):
    pid, files = reader
    doc = json.loads(run(pid, "--json"))
    fc = doc["file_counters"]
    assert fc["counted"] == len(files) and fc["partial"] is False
    got = by_name(doc)
    for shown_name, size in files.values():
        f = got[shown_name]  # decoded: the name itself, URLs redacted
        assert f["read"]["bytes"] == size and f["read"]["ops"] == 1
        assert f["inflight"] == {"requests": 0, "tasks": 0, "pending_bytes": 0}
        assert f["handles"] == 0 and f["name_cut"] is False


def test_watch_json_rates(reader):
    """Two samples of --watch --json: the second has each file's rates over
    the interval (0: the process is idle)."""
    pid, files = reader
    p = subprocess.Popen([gpufile.cli_path(), "stats", str(pid), "--watch", "0.2",
                          "--json"], stdout=subprocess.PIPE, text=True)
    try:
        lines = [p.stdout.readline(), p.stdout.readline()]
        for line in lines:
            never_raw(line)
        first, second = [json.loads(line) for line in lines]
    finally:
        p.terminate()
        p.wait(timeout=60)
    assert "read_gbps" not in first["file_counters"]["files"][0]
    for f in second["file_counters"]["files"]:
        assert f["read_gbps"] == 0 and f["write_gbps"] == 0


def parse(text):
    assert text_string_to_metric_families or not in_ci(), \
        "python3-prometheus-client is not installed (scripts/deps.sh)"
    if not text_string_to_metric_families:
        pytest.skip("python3-prometheus-client is not installed")
    fams = {}
    for fam in text_string_to_metric_families(text):
        keys = [(x.name, tuple(sorted(x.labels.items()))) for x in fam.samples]
        assert len(keys) == len(set(keys)), "a label set twice in %s" % fam.name
        fams[fam.name] = (fam.type, fam.samples)
    return fams


def check_openmetrics(text, reader):
    pid, files = reader
    never_raw(text)
    fams = parse(text)
    p = str(pid)
    assert fams["gpufile_file_bytes"][0] == "counter"
    assert fams["gpufile_file_pending_bytes"][0] == "gauge"
    bytes_ = {(s.labels["file"], s.labels["path"], s.labels["direction"]): s.value
              for s in fams["gpufile_file_bytes"][1] if s.labels["pid"] == p}
    pending = {s.labels["file"]: s.value
               for s in fams["gpufile_file_pending_bytes"][1] if s.labels["pid"] == p}
    for name, (shown_name, size) in files.items():
        label = shown(shown_name)  # the label decoded: as the text shows it
        path = "remote" if name.startswith("http") else "host"
        assert bytes_[(label, path, "read")] == size, (label, sorted(bytes_))
        assert pending[label] == 0
    dropped = [s.value for s in fams["gpufile_file_counters_dropped"][1]
               if s.labels["pid"] == p]
    assert dropped == [0]


def test_openmetrics(reader):
    check_openmetrics(run(reader[0], "--openmetrics"), reader)


def test_serve(reader):
    p = subprocess.Popen([gpufile.cli_path(), "stats", str(reader[0]), "--serve", "0"],
                         stdout=subprocess.PIPE, text=True)
    try:
        url = p.stdout.readline().split()[-1]
        with urllib.request.urlopen(url, timeout=60) as r:
            text = r.read().decode("utf-8")
    finally:
        p.terminate()
        p.wait(timeout=60)
    check_openmetrics(text, reader)
