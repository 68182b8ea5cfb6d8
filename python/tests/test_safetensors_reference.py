"""gpufile's header acceptance against the real safetensors package, where
it is installed (the GPU machine; not a dependency of CI): gpufile must
accept nothing the reference refuses, and where both accept, give the
same tensors (issue 34; the decisions in gpufile_safetensors_open(3)).
Host memory and NumPy only."""
import struct

import numpy as np
import pytest

import gpufile.safetensors as st

safetensors = pytest.importorskip("safetensors")

E = '"dtype":"U8","shape":[1],"data_offsets":[0,1]'
CASES = {
    "plain": ('{"a":{%s}}' % E, 1),
    "unknown 1e400": ('{"a":{%s,"x":1e400}}' % E, 1),
    "unknown -1e400": ('{"a":{%s,"x":[-1e400]}}' % E, 1),
    "unknown 1e308": ('{"a":{%s,"x":1e308}}' % E, 1),
    "unknown 1e-400": ('{"a":{%s,"x":1e-400}}' % E, 1),
    "unknown 0e400": ('{"a":{%s,"x":0e400}}' % E, 1),
    "unknown 400 digits": ('{"a":{%s,"x":1%s}}' % (E, "0" * 400), 1),
    "unknown 2^64": ('{"a":{%s,"x":18446744073709551616}}' % E, 1),
    "unknown 1.79769313486231e308": ('{"a":{%s,"x":1.79769313486231e308}}' % E, 1),
    "unknown 1.797693134862315e308": ('{"a":{%s,"x":1.797693134862315e308}}' % E, 1),
    "unknown 1.7976931348623157e308": ('{"a":{%s,"x":1.7976931348623157e308}}' % E, 1),
    "unknown 1.8e308": ('{"a":{%s,"x":1.8e308}}' % E, 1),
    "top-level 1e400": ('{"a":{%s},"b":1e400}' % E, 1),
    "name twice, same": ('{"a":{%s},"a":{%s}}' % (E, E), 1),
    "name twice, last I8": ('{"a":{%s},"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}}'
                            % E, 1),
    "name twice, gap": ('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                        '"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},'
                        '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', 2),
    "name twice, first past the data": (
        '{"a":{"dtype":"U8","shape":[1],"data_offsets":[7,8]},"a":{%s}}' % E, 1),
    "entry array": ('{"a":["U8",[1],[0,1]]}', 1),
    "entry array of 2": ('{"a":["U8",[1]]}', 1),
    "entry array of 4": ('{"a":["U8",[1],[0,1],5]}', 1),
    "entry array, dtype map": ('{"a":[{"U8":null},[1],[0,1]]}', 1),
    "dtype map null": ('{"a":{"dtype":{"U8":null},"shape":[1],"data_offsets":[0,1]}}', 1),
    "dtype map {}": ('{"a":{"dtype":{"U8":{}},"shape":[1],"data_offsets":[0,1]}}', 1),
    "dtype map []": ('{"a":{"dtype":{"U8":[]},"shape":[1],"data_offsets":[0,1]}}', 1),
    "dtype map 1": ('{"a":{"dtype":{"U8":1},"shape":[1],"data_offsets":[0,1]}}', 1),
    "dtype map two keys": ('{"a":{"dtype":{"U8":null,"I8":null},"shape":[1],'
                           '"data_offsets":[0,1]}}', 1),
    "entry null": ('{"a":null}', 0),
}
for depth in (127, 128):
    CASES["nesting %d in unknown" % depth] = (
        '{"a":{%s,"x":%s%s}}' % (E, "[" * (depth - 2), "]" * (depth - 2)), 1)
    CASES["nesting %d of objects" % depth] = (
        '{"a":{%s,"x":%s1%s}}' % (E, '{"q":' * (depth - 2), "}" * (depth - 2)), 1)


def _load(loader, path):
    try:
        return loader(path)
    except Exception as e:  # noqa: BLE001 - which error is compared below
        return e


@pytest.mark.parametrize("name", sorted(CASES))
def test_header_acceptance_matches_reference(tmp_path, name):
    header, ndata = CASES[name]
    h = header.encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    p = str(tmp_path / "h.safetensors")
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + bytes(range(1, ndata + 1)))
    import safetensors.numpy as ref

    want = _load(ref.load_file, p)
    got = _load(lambda q: st.load_file(q, framework="numpy", device="cpu"), p)
    print(name, "reference:", type(want).__name__, "gpufile:", type(got).__name__)
    if isinstance(got, Exception):
        assert isinstance(got, st.SafetensorError), got
        return  # stricter than the reference is allowed (and documented)
    assert not isinstance(want, Exception), (
        "gpufile accepts what safetensors %s refuses: %s" % (safetensors.__version__, want))
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape
        np.testing.assert_array_equal(got[k], want[k])
