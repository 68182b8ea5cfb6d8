"""Stand-in for numcodecs' compiled shuffle kernels on the GPU machine (see
blosc.py here): numcodecs imports them at start; using them raises."""


def _refuse(*args, **kwargs):
    raise NotImplementedError(
        "numcodecs._shuffle is a stand-in on this machine (scripts/carry/"
        "numcodecs_stubs)")


_doShuffle = _refuse
_doUnshuffle = _refuse
