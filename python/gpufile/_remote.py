"""The options of one remote handle (gpufile_open_remote's
gpufile_remote_opts_t), built from File()'s keywords, and a handle's
remote_info(). Secrets (keys, tokens) are never put in an exception's
text: a bad one is named by its keyword only."""

import ctypes

from . import _args
from . import _structs as S

# keyword -> field of gpufile_remote_opts_t, for the string options.
_TEXT = {
    "aws_access_key_id": ("aws_access_key_id", True),
    "aws_secret_access_key": ("aws_secret_access_key", True),
    "aws_session_token": ("aws_session_token", True),
    "aws_region": ("aws_region", False),
    "aws_endpoint_url": ("aws_endpoint_url", False),
    "aws_profile": ("aws_profile", False),
    "ca_file": ("ca_file", False),
    "ca_path": ("ca_path", False),
}
# keyword -> field, for the counts (0 in C: the setting's value).
_COUNT = {"timeout": "timeout_s", "max_in_flight": "max_in_flight",
          "max_attempts": "max_attempts"}
KEYWORDS = tuple(_TEXT) + tuple(_COUNT) + ("known_size", "unsigned", "s3")


def _text(value, name, secret, what):
    if not isinstance(value, str):
        raise TypeError("%s: %s must be a str, not %s"
                        % (what, name, type(value).__name__))
    if "\0" in value:
        raise ValueError("%s: embedded null byte in %s%s" % (
            what, name, "" if secret else " %r" % value))
    return value.encode("utf-8")


def opts(what, known_size=None, unsigned=False, s3=False, **kw):
    """A RemoteOpts from the keywords (None: not given), or None when none
    is given. what names the call in errors."""
    given = {k: v for k, v in kw.items() if v is not None}
    unknown = sorted(set(given) - set(_TEXT) - set(_COUNT))
    if unknown:
        raise TypeError("%s: unknown keyword %s" % (what, unknown[0]))
    if not given and known_size is None and not unsigned and not s3:
        return None
    o = S.RemoteOpts()
    for name, value in given.items():
        if name in _TEXT:
            field, secret = _TEXT[name]
            setattr(o, field, _text(value, name, secret, what))
        else:
            n = _args.in_range(value, name, what, (1 << 32) - 1, "2**32 - 1")
            if n == 0:
                raise ValueError("%s: %s must be at least 1" % (what, name))
            setattr(o, _COUNT[name], n)
    if known_size is not None:
        o.known_size = _args.in_range(known_size, "known_size", what,
                                      _args.OFF_MAX, "2**63 - 1")
        o.flags |= S.REMOTE_KNOWN_SIZE
    if unsigned:
        o.flags |= S.REMOTE_UNSIGNED
    if s3:
        o.flags |= S.REMOTE_S3
    return o


def info(raw):
    """remote_info()'s dict of a RemoteFileInfo."""
    return {
        "url": S.text(raw.url), "kind": S.text(raw.kind),
        "size": raw.object_size, "etag": S.text(raw.etag),
        "region": S.text(raw.region), "credentials": S.text(raw.credentials),
        "signed": bool(raw.signed_requests), "requests": raw.requests,
        "retries": raw.retries, "ranges": raw.ranges, "bytes": raw.bytes,
        "failures": raw.failures, "redirects": raw.redirects,
        "connects": raw.connects,
    }


__all__ = ["KEYWORDS", "opts", "info", "ctypes"]
