"""Stand-in for numcodecs' compiled Blosc module on the GPU machine.

scripts/make_carry.sh carries Debian's zarr 2.13 and the pure-Python part of
its numcodecs to the GPU machine, whose Python has neither (no package
registry there); numcodecs' compiled modules are built for Debian's Python
and cannot load there. zarr imports Blosc (and two helpers of this module)
whether or not an array uses it, so this module gives those names. The GPU
benchmarks and tests that use it read uncompressed arrays only; any actual
use of Blosc here raises, so no figure can come from it silently.
"""

from .abc import Codec


def _refuse(*args, **kwargs):
    raise NotImplementedError(
        "numcodecs.blosc is a stand-in on this machine (scripts/carry/"
        "numcodecs_stubs): only uncompressed arrays can be read")


def init():
    pass


def destroy():
    pass


def set_nthreads(n):
    return 1


cbuffer_sizes = _refuse
cbuffer_metainfo = _refuse


class Blosc(Codec):
    codec_id = "blosc"
    NOSHUFFLE, SHUFFLE, BITSHUFFLE, AUTOSHUFFLE = 0, 1, 2, -1

    def __init__(self, cname="lz4", clevel=5, shuffle=SHUFFLE, blocksize=0):
        self.cname = cname
        self.clevel = clevel
        self.shuffle = shuffle
        self.blocksize = blocksize

    encode = _refuse
    decode = _refuse
