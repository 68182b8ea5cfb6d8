"""gpufile stats --openmetrics and the exporter (gpufile stats --serve),
scraped with curl while another process reads, and parsed with
prometheus_client's OpenMetrics parser (Debian's python3-prometheus-client):
the counters of that process, its file names with URL secrets redacted and
control bytes escaped, the loopback default, bad addresses, a slow client
that holds up no scrape, and many scrapes in a row."""
import contextlib
import os
import shutil
import socket
import subprocess
import urllib.error
import urllib.request

import pytest

import gpufile
from conftest import in_ci, ready_child, remote_server

SIZE = (1 << 20) + 4097
SECRET = "PLANTED"
ESC = "\x1b"

try:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
except ImportError:  # scripts/deps.sh installs python3-prometheus-client
    text_string_to_metric_families = None

pytestmark = pytest.mark.skipif(text_string_to_metric_families is None and not in_ci(),
                                reason="python3-prometheus-client is not installed")
REMOTE = "remote" in gpufile.features()

# The reading process: its command name and a file name hold an ESC byte;
# it reads that file, opens it twice more with compat_mode=on (a fallback
# from cuFile, with its reason), then (when remote sources are built in) a URL with
# a password and a signature in its query, then starts a read that the
# server stalls, and waits, the read still in flight, until stdin closes.
CHILD = r"""
import os, sys, threading, numpy as np, gpufile, gpufile._info
with open("/proc/self/comm", "w") as f:
    f.write("gf\x1bchild")
local, url, stall = sys.argv[1:4]
with gpufile.File(local) as f:
    f.read(np.empty(os.path.getsize(local), np.uint8))
# Two collectives credited to this process (as load_distributed does).
assert gpufile._info.add_collective(1000, 24)
assert gpufile._info.add_collective(5, 0)
# Two handles whose device requests would not go to cuFile, for one
# reason: one fallback sample of value 2.
with gpufile.defaults.set(compat_mode="on"):
    keep = [gpufile.File(local), gpufile.File(local)]
    for k in keep:
        k.path_info()
if url:
    with gpufile.defaults.set(remote_task_size=64 << 10):
        g = gpufile.File(url)
        g.read(np.empty(g.size(), np.uint8))
    # The same object under another signature: shown under the same
    # name, so one label set (of value 2), not two samples of one.
    g2 = gpufile.File(url.replace("Signature=", "Signature=2"))
    g2.path_info()
    h = gpufile.File(stall)
    threading.Thread(target=lambda: h.read(np.empty(h.size(), np.uint8)),
                     daemon=True).start()
print("ready", flush=True)
sys.stdin.read()
os._exit(0)
"""


@pytest.fixture(scope="module")
def cli():
    return gpufile.cli_path()


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    """The reading process: (pid, local file name, its size, port)."""
    port = None
    url = stall = ""
    with contextlib.ExitStack() as stack:
        if REMOTE:
            port = stack.enter_context(remote_server("fault_server.py", SIZE, 120))
            url = "http://user:%s@127.0.0.1:%d/ok/o.bin?X-Amz-Signature=%s" % (
                SECRET, port, SECRET)
            stall = "http://127.0.0.1:%d/stall/s.bin" % port
        local = str(tmp_path_factory.mktemp("om") / ("esc" + ESC + "[31mname.bin"))
        with open(local, "wb") as f:
            f.write(os.urandom(300001))
        pid = stack.enter_context(ready_child(CHILD, local, url, stall))
        yield pid, local, 300001, port


def parse(text):
    """{family name: [samples]}, by the OpenMetrics parser (which raises on
    anything the format does not allow, '# EOF' included)."""
    assert text_string_to_metric_families, "python3-prometheus-client is not installed (scripts/deps.sh)"
    fams = {}
    for fam in text_string_to_metric_families(text):
        assert fam.name not in fams, "family %s twice" % fam.name
        keys = [(x.name, tuple(sorted(x.labels.items()))) for x in fam.samples]
        assert len(keys) == len(set(keys)), "a label set twice in %s" % fam.name
        fams[fam.name] = fam.samples
        TYPES[fam.name] = fam.type
    return fams


TYPES = {}  # family name: its type, as parse() last saw it


def value(fams, fam, name, **labels):
    got = [s.value for s in fams[fam]
           if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(got) == 1, (name, labels, got)
    return got[0]


def check_scrape(text, reader):
    """What a scrape must show of the reading process, and never show."""
    pid, local, size, port = reader
    assert SECRET not in text
    assert ESC not in text
    fams = parse(text)
    p = str(pid)
    assert value(fams, "gpufile_process", "gpufile_process_info", pid=p) == 1
    cmd = [s.labels["command"] for s in fams["gpufile_process"] if s.labels["pid"] == p]
    assert cmd == ["gf\\x1bchild"]  # as gpufile stats PID prints it
    assert value(fams, "gpufile_bytes", "gpufile_bytes_total", pid=p, path="host",
                 direction="read") == size
    assert value(fams, "gpufile_requests", "gpufile_requests_total", pid=p, path="host",
                 direction="read") == 1
    assert value(fams, "gpufile_tasks", "gpufile_tasks_total", pid=p, path="host",
                 direction="read") >= 1
    assert value(fams, "gpufile_errors", "gpufile_errors_total", pid=p, path="host",
                 direction="read") == 0
    shown_local = local.replace(ESC, "\\x1b")
    assert value(fams, "gpufile_file_handles", "gpufile_file_handles", pid=p,
                 file=shown_local, path="host") == 1
    assert value(fams, "gpufile_file_handles", "gpufile_file_handles", pid=p,
                 file=shown_local, path="posix") == 2
    assert value(fams, "gpufile_fallbacks", "gpufile_fallbacks", pid=p, path="posix",
                 reason="posix: compat_mode=on, cuFile is not used") == 2
    files = {s.labels["file"]: s for s in fams["gpufile_file_handles"]
             if s.labels["pid"] == p}
    assert value(fams, "gpufile_cufile_layer_recorded", "gpufile_cufile_layer_recorded",
                 pid=p) in (0, 1)
    # The collectives the child credited: counters.
    for fam, want in (("gpufile_collective_calls", 2),
                      ("gpufile_collective_received_bytes", 1005),
                      ("gpufile_collective_sent_bytes", 24)):
        assert TYPES[fam] == "counter", (fam, TYPES[fam])
        assert value(fams, fam, fam + "_total", pid=p) == want
    # What is in flight as it is read: gauges (the stalled remote read,
    # if any, may or may not be one of the pool's requests).
    for fam in ("gpufile_inflight_requests", "gpufile_inflight_tasks",
                "gpufile_pending_bytes"):
        assert TYPES[fam] == "gauge", (fam, TYPES[fam])
        assert value(fams, fam, fam, pid=p) >= 0
    if REMOTE:
        assert value(fams, "gpufile_bytes", "gpufile_bytes_total", pid=p, path="remote",
                     direction="read") == SIZE
        shown = "http://127.0.0.1:%d/ok/o.bin?<query redacted>" % port
        assert shown in files, sorted(files)
        assert files[shown].labels["path"] == "remote"
        assert files[shown].value == 2  # two handles, one label set
        assert value(fams, "gpufile_remote_http_bytes", "gpufile_remote_http_bytes_total",
                     pid=p) >= SIZE
        assert value(fams, "gpufile_remote_http_responses",
                     "gpufile_remote_http_responses_total", pid=p, **{"class": "2xx"}) >= 1
        # A high-water mark: a gauge; the remote reads had ranges in flight.
        assert TYPES["gpufile_remote_http_in_flight_max"] == "gauge"
        assert value(fams, "gpufile_remote_http_in_flight_max",
                     "gpufile_remote_http_in_flight_max", pid=p) >= 1
    return fams


def test_openmetrics_once(cli, reader):
    r = subprocess.run([cli, "stats", "--openmetrics"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.endswith("# EOF\n")
    check_scrape(r.stdout, reader)
    # One process alone, by PID.
    r = subprocess.run([cli, "stats", str(reader[0]), "--openmetrics"],
                       stdout=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 0
    fams = check_scrape(r.stdout, reader)
    assert {s.labels["pid"] for s in fams["gpufile_process"]} == {str(reader[0])}


@pytest.fixture(scope="module")
def exporter(cli, reader):
    p = subprocess.Popen([cli, "stats", "--serve", "0", "--timeout", "3"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    try:
        # No ADDR: loopback only.
        assert line.startswith("serving OpenMetrics at http://127.0.0.1:"), line
        yield p, line.split()[-1]
    finally:
        p.terminate()
        p.wait(timeout=60)


def curl(*args):
    # --max-time: a hang fails the test instead of stopping the run. curl
    # is not the code under test: it runs without the sanitizer runtimes
    # the python-asan stage preloads into python (with them, curl hung
    # once at its start, in setlocale's lock, for good).
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    return subprocess.run(["curl", "-sS", "--max-time", "60"] + list(args),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, timeout=120)


@pytest.mark.skipif(shutil.which("curl") is None and not in_ci(), reason="no curl")
def test_serve_scraped_with_curl(exporter, reader):
    proc, url = exporter
    r = curl("-D", "-", url)
    assert r.returncode == 0, r.stderr
    head, _, body = r.stdout.partition("\n\n")  # text=True: \r\n read as \n
    assert head.startswith("HTTP/1.1 200")
    assert "application/openmetrics-text; version=1.0.0" in head
    check_scrape(body, reader)
    r = curl("-o", "/dev/null", "-w", "%{http_code}", url.replace("/metrics", "/other"))
    assert r.stdout == "404"
    r = curl("-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", url)
    assert r.stdout == "405"
    r = curl("-I", url)
    assert r.stdout.startswith("HTTP/1.1 200") and "# EOF" not in r.stdout


def fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def get_until_close(url):
    """GET url, reading until the server closes the connection: by then
    it has closed its descriptor of it, and (one thread, in order) of every
    connection answered before."""
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data.decode()
            data += chunk


def test_serve_many_scrapes(exporter, reader):
    proc, url = exporter
    get_until_close(url)
    before = fds(proc.pid)
    for _ in range(100):
        with urllib.request.urlopen(url, timeout=60) as r:
            text = r.read().decode()
        assert text.endswith("# EOF\n")
    check_scrape(text, reader)
    head, _, body = get_until_close(url).partition("\r\n\r\n")
    check_scrape(body, reader)
    assert fds(proc.pid) == before  # every connection closed


def test_serve_slow_client_holds_up_nothing(exporter, reader):
    proc, url = exporter
    host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
    slow = socket.create_connection((host, int(port)), timeout=60)
    try:
        slow.sendall(b"GET /metr")  # and never the rest
        r = curl(url)
        assert r.returncode == 0, r.stderr
        check_scrape(r.stdout, reader)
        # --timeout 3: the server drops it (recv sees the close; the
        # socket's 60 s timeout only keeps a broken server from hanging us).
        assert slow.recv(100) == b""
    finally:
        slow.close()
    assert proc.poll() is None


@pytest.mark.parametrize("addr, says", [
    ("127.0.0.1:99999", 'the port "99999" is not a number from 0 to 65535'),
    ("127.0.0.1:", 'the port "" is not a number'),
    ("localhost:http", 'the port "http" is not a number'),
    ("::1:9400", "an IPv6 address is written in brackets"),
    ("[::1:9400", "an IPv6 address is written [ADDR]:PORT"),
    ("no-such-host.invalid:9400", '"no-such-host.invalid" is not an address'),
])
def test_serve_bad_address(cli, addr, says):
    r = subprocess.run([cli, "stats", "--serve", addr], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert says in r.stderr and addr in r.stderr, r.stderr
    assert r.stdout == ""


def test_serve_address_in_use(cli):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        addr = "127.0.0.1:%d" % s.getsockname()[1]
        r = subprocess.run([cli, "stats", "--serve", addr], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "cannot listen on 127.0.0.1 port" in r.stderr
    assert os.strerror(98) in r.stderr  # EADDRINUSE


@pytest.mark.parametrize("args, says", [
    (["--openmetrics", "--json"], "--openmetrics takes no --json"),
    (["--serve", "0", "--watch", "1"], "--serve takes no --watch"),
    (["--openmetrics", "--serve", "0"], "one or the other"),
    (["--timeout", "3"], "--timeout goes with --serve"),
])
def test_usage_errors(cli, args, says):
    r = subprocess.run([cli, "stats"] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=120)
    assert r.returncode == 2 and says in r.stderr, r.stderr


def test_serve_out_of_descriptors(cli, reader):
    """Clients beyond the descriptors the exporter may open: it says so,
    waits instead of spinning on its listener, and answers once the silent
    clients are dropped (--timeout 1)."""
    import resource

    def few_fds():
        resource.setrlimit(resource.RLIMIT_NOFILE, (8, 8))

    p = subprocess.Popen([cli, "stats", "--serve", "0", "--timeout", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=few_fds)
    silent = []
    try:
        url = p.stdout.readline().split()[-1]
        host, port = url.split("//")[1].split("/")[0].rsplit(":", 1)
        silent = [socket.create_connection((host, int(port)), timeout=60) for _ in range(6)]
        r = curl(url)
        assert r.returncode == 0, r.stderr
        assert r.stdout.endswith("# EOF\n")
    finally:
        for s in silent:
            s.close()
        p.terminate()
        err = p.communicate(timeout=60)[1]
    assert "cannot take a client: " + os.strerror(24) in err, err  # EMFILE
