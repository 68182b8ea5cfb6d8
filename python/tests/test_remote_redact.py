"""A URL's secrets never reach a Python exception or name: every exception
raised for a URL with a planted secret in its user information (with the
raw characters that confuse URL parsers) and in its query, and every name
shown for it, is searched for the secret; none may hold it. Against
tests/remote/fault_server.py."""
import numpy as np
import pytest

import gpufile
import gpufile.safetensors
from conftest import remote_server

SECRET = "PLANTED"

pytestmark = pytest.mark.skipif("remote" not in gpufile.features(),
                                reason="built without libcurl")


@pytest.fixture(scope="module")
def port():
    with remote_server("fault_server.py", 5000, 3) as port:
        yield port


def urls(port):
    for auth in ("u:%s@" % SECRET, "u:%s#x@" % SECRET, "u:%s/x@" % SECRET,
                 "u:%s?x@" % SECRET, "u:%s@x@" % SECRET):
        for mode in ("ok", "e404", "presigned"):
            yield ("http://%s127.0.0.1:%d/%s/o.safetensors"
                   "?X-Amz-Signature=%s#%s" % (auth, port, mode, SECRET, SECRET))


def texts(exc):
    """Everything an exception shows: str, repr, args, filename, and the
    same for the exceptions it chains to."""
    out = []
    while exc is not None:
        out += [str(exc), repr(exc), repr(exc.args),
                repr(getattr(exc, "filename", None))]
        exc = exc.__cause__ or exc.__context__
    return out


def no_secret(call):
    """Runs call; whatever it raises or returns must not hold SECRET."""
    try:
        result = call()
    except Exception as e:  # every kind: OSError, ValueError, gpufile.Error
        for t in texts(e):
            assert SECRET not in t, t
        return None
    assert SECRET not in repr(result)
    return result


def test_exceptions_never_hold_the_secret(port):
    sf = gpufile.safetensors
    for url in urls(port):
        calls = [
            lambda: gpufile.File(url),
            lambda: gpufile.File(url, "w"),
            lambda: gpufile.File(url, "rb"),
            lambda: gpufile.Mmap(url),
            lambda: gpufile.Mmap(url, initial_map_size=0),
            lambda: gpufile.page_cache_info(url),
            lambda: gpufile.drop_file_page_cache(url),
            lambda: sf.safe_open(url, framework="np"),
            lambda: sf.safe_open(url, framework="np", device="bogus"),
            lambda: sf.load_file(url, device="cpu", framework="np"),
            lambda: sf.load_checkpoint(url, device="cpu", framework="np"),
            lambda: sf.load_checkpoint(url + ".index.json", device="cpu",
                                       framework="np"),
            lambda: sf.save_file({"t": np.zeros(2, np.float32)}, url),
            lambda: gpufile.check(url),
            lambda: gpufile.explain(4096, cufile_json=url),
        ]
        for call in calls:
            no_secret(call)


def test_names_are_redacted(port):
    url = ("http://u:%s@127.0.0.1:%d/ok/o.bin?X-Amz-Signature=%s"
           % (SECRET, port, SECRET))
    with gpufile.File(url) as f:
        assert f.name == "http://127.0.0.1:%d/ok/o.bin?<query redacted>" % port
        assert f.size() == 5000
        out = np.zeros(5000, dtype=np.uint8)
        assert f.read(out) == 5000
    # Not a URL: unchanged.
    assert gpufile._lib.shown_name("/tmp/a?b#c@d") == "/tmp/a?b#c@d"


def test_embedded_nul_not_shown():
    # A URL with an embedded NUL is refused before the library sees it;
    # the ValueError named it with repr(), secrets and all.
    url = "http://u:%s@127.0.0.1:1/o?X-Amz-Signature=%s\0x" % (SECRET, SECRET)
    for make in (lambda: gpufile.File(url, "r"),
                 lambda: gpufile.safetensors.safe_open(url, "np")):
        with pytest.raises(ValueError) as e:
            make()
        assert SECRET not in str(e.value) and SECRET not in repr(e.value)
