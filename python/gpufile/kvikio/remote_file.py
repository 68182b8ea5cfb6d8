"""kvikio.RemoteFile on gpufile's remote objects (gpufile.File of a URL:
HTTP(S), S3, presigned S3 URLs over libcurl).

The credentials, region and endpoint open_s3()/open_s3_url() are given
go to that handle only (gpufile.File's keywords, gpufile_open_remote's
options): the environment is left alone, so opens on several threads
with different credentials do not see each other's. What is not given is
found as gpufile finds it (environment, AWS profile files). WebHDFS files
are read through gpufile's WebHDFS source (GETFILESTATUS for the size,
OPEN with offset and length).
"""

import enum
import functools
import re
import urllib.parse

from .. import _lib
from .. import features as _features
from .._file import File as _File
from ._errors import size_t
from .cufile import IOFuture, _call

__all__ = ["RemoteEndpointType", "RemoteFile", "infer_remote_endpoint_type",
           "is_remote_file_available"]


class RemoteEndpointType(enum.Enum):
    """The kinds of remote endpoint (kvikio.RemoteEndpointType)."""
    AUTO = 0
    S3 = 1
    S3_PUBLIC = 2
    S3_PRESIGNED_URL = 3
    WEBHDFS = 4
    HTTP = 5


@functools.lru_cache(maxsize=None)
def is_remote_file_available():
    """True when the loaded libgpufile was built with libcurl."""
    try:
        return "remote" in _features()
    except OSError:
        return False


def _need_remote():
    if not is_remote_file_available():
        raise RuntimeError("RemoteFile not available: %s was built without "
                           "libcurl (remote objects)" % _lib.library_path())


_AWS_HOST = re.compile(r"^(?P<bucket>[^/]+)\.s3(?:[.-](?P<region>[a-z0-9-]+))?"
                       r"\.amazonaws\.com$", re.IGNORECASE)
_AWS_PATH_HOST = re.compile(r"^s3(?:[.-](?P<region>[a-z0-9-]+))?"
                            r"\.amazonaws\.com$", re.IGNORECASE)


def _split(url):
    parsed = urllib.parse.urlsplit(url)
    if not parsed.scheme or not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*$",
                                         parsed.scheme):
        raise RuntimeError("Bad scheme: %r is not a URL" % _lib.shown_name(url))
    return parsed


def _is_presigned(parsed):
    query = urllib.parse.parse_qs(parsed.query)
    return "X-Amz-Algorithm" in query and "X-Amz-Signature" in query


def _s3_parts(parsed):
    """(bucket, key, endpoint or None) of an s3:// URL or of an http(s) URL
    of an S3 object (virtual-hosted AWS, or path style on any endpoint),
    or None when it names no object."""
    if parsed.scheme.lower() == "s3":
        bucket, key = parsed.netloc, parsed.path.lstrip("/")
        return (bucket, key, None) if bucket and key else None
    if parsed.scheme.lower() not in ("http", "https"):
        return None
    host = parsed.hostname or ""
    m = _AWS_HOST.match(host)
    if m:
        key = parsed.path.lstrip("/")
        return (m.group("bucket"), key, None) if key else None
    bucket, _, key = parsed.path.lstrip("/").partition("/")
    if not bucket or not key:
        return None
    endpoint = None if _AWS_PATH_HOST.match(host) else "%s://%s" % (
        parsed.scheme, parsed.netloc)
    return bucket, key, endpoint


def _matches(kind, parsed):
    scheme = parsed.scheme.lower()
    web = scheme in ("http", "https")
    if kind is RemoteEndpointType.S3:
        if scheme == "s3":
            return _s3_parts(parsed) is not None
        return (web and _AWS_HOST.match(parsed.hostname or "") is not None
                and not _is_presigned(parsed) and bool(parsed.path.strip("/")))
    if kind is RemoteEndpointType.S3_PUBLIC:
        return False  # as S3's URLs, and tried after it
    if kind is RemoteEndpointType.S3_PRESIGNED_URL:
        return web and _is_presigned(parsed)
    if kind is RemoteEndpointType.WEBHDFS:
        return web and "/webhdfs/v1/" in parsed.path
    if kind is RemoteEndpointType.HTTP:
        return web
    return False


_ORDER = (RemoteEndpointType.S3, RemoteEndpointType.S3_PUBLIC,
          RemoteEndpointType.S3_PRESIGNED_URL, RemoteEndpointType.WEBHDFS,
          RemoteEndpointType.HTTP)


def infer_remote_endpoint_type(url, allow_list=None):
    """The endpoint type RemoteFile.open() would use for url (AUTO's
    rules): S3 for s3:// and AWS S3 URLs, S3_PRESIGNED_URL for a query
    with X-Amz-Algorithm and X-Amz-Signature, WEBHDFS for a path with
    /webhdfs/v1/, else HTTP for http(s)."""
    parsed = _split(url)
    for kind in (allow_list or _ORDER):
        if _matches(kind, parsed):
            return kind
    raise RuntimeError("Unsupported endpoint URL: %r" % _lib.shown_name(url))


def _open(url, nbytes=None, **kw):
    """gpufile.File(url, "r") with nbytes as its known size (no HEAD) and
    kw's options that are not None, for this handle only."""
    _need_remote()
    kw = {k: v for k, v in kw.items() if v is not None}
    if nbytes is not None:
        kw["known_size"] = size_t(nbytes, "nbytes", "RemoteFile")
    return _call(lambda: _File(url, "r", **kw),
                 prefix="Unable to open %s" % _lib.shown_name(url))


class RemoteFile:
    """A remote file (kvikio.RemoteFile), opened by one of the class
    methods; read() and pread() into host or device memory."""

    def __init__(self, handle, endpoint_type=RemoteEndpointType.HTTP,
                 nbytes=None):
        if not isinstance(handle, _File):
            raise TypeError("RemoteFile is made by open_http(), open_s3(), "
                            "... not directly")
        self._file = handle
        self._type = endpoint_type
        self._nbytes = None if nbytes is None else size_t(nbytes, "nbytes",
                                                          "RemoteFile")

    @classmethod
    def open_http(cls, url, nbytes=None):
        return cls(_open(url, nbytes), RemoteEndpointType.HTTP, nbytes)

    @classmethod
    def _s3(cls, bucket, key, nbytes, region, key_id, secret, endpoint,
            token):
        url = "s3://%s/%s" % (bucket, key)
        return cls(_open(url, nbytes, aws_region=region,
                         aws_access_key_id=key_id,
                         aws_secret_access_key=secret,
                         aws_endpoint_url=endpoint,
                         aws_session_token=token),
                   RemoteEndpointType.S3, nbytes)

    @classmethod
    def open_s3(cls, bucket_name, object_name, nbytes=None,
                aws_region_name=None, aws_access_key_id=None,
                aws_secret_access_key=None, aws_endpoint_url=None,
                aws_session_token=None):
        return cls._s3(bucket_name, object_name, nbytes, aws_region_name,
                       aws_access_key_id, aws_secret_access_key,
                       aws_endpoint_url, aws_session_token)

    @classmethod
    def open_s3_url(cls, url, nbytes=None, aws_region_name=None,
                    aws_access_key_id=None, aws_secret_access_key=None,
                    aws_endpoint_url=None, aws_session_token=None):
        scheme = urllib.parse.urlsplit(url.lower()).scheme
        if scheme not in ("http", "https", "s3"):
            raise ValueError("Unsupported protocol: %s" % _lib.shown_name(url))
        parts = _s3_parts(urllib.parse.urlsplit(url))
        if parts is None:
            raise RuntimeError("Invalid URL: %r names no S3 bucket and "
                               "object" % _lib.shown_name(url))
        bucket, key, endpoint = parts
        if scheme != "s3" and endpoint is None:
            # AWS's own URL: sent as it is, signed for its host's region
            # (gpufile_open_remote recognises it).
            return cls(_open(url, nbytes, aws_region=aws_region_name,
                             aws_access_key_id=aws_access_key_id,
                             aws_secret_access_key=aws_secret_access_key,
                             aws_session_token=aws_session_token),
                       RemoteEndpointType.S3, nbytes)
        if scheme != "s3":
            aws_endpoint_url = endpoint  # the URL's own host
        return cls._s3(bucket, key, nbytes, aws_region_name,
                       aws_access_key_id, aws_secret_access_key,
                       aws_endpoint_url, aws_session_token)

    @classmethod
    def open_s3_public(cls, url, nbytes=None):
        """A public S3 object: unsigned requests to its http(s) URL (an
        s3:// URL goes to AWS, or AWS_ENDPOINT_URL, unsigned)."""
        return cls(_open(url, nbytes, unsigned=True),
                   RemoteEndpointType.S3_PUBLIC, nbytes)

    @classmethod
    def open_s3_presigned_url(cls, presigned_url, nbytes=None):
        return cls(_open(presigned_url, nbytes),
                   RemoteEndpointType.S3_PRESIGNED_URL, nbytes)

    @classmethod
    def open_webhdfs(cls, url, nbytes=None):
        """A WebHDFS file: http(s)://HOST:PORT/webhdfs/v1/PATH (or
        webhdfs://HOST:PORT/PATH); its size by GETFILESTATUS, its bytes by
        OPEN with offset and length."""
        return cls(_open(url), RemoteEndpointType.WEBHDFS, nbytes)

    @classmethod
    def open(cls, url, remote_endpoint_type=RemoteEndpointType.AUTO,
             allow_list=None, nbytes=None):
        """Opens url as remote_endpoint_type, or (AUTO) as the first type
        of allow_list (default: S3, S3_PUBLIC, S3_PRESIGNED_URL, WEBHDFS,
        HTTP) whose URLs it matches."""
        kind = RemoteEndpointType(remote_endpoint_type)
        if kind is RemoteEndpointType.AUTO:
            kind = infer_remote_endpoint_type(url, allow_list)
        else:
            parsed = _split(url)
            if allow_list is not None and kind not in allow_list:
                raise RuntimeError("%s is not in the allowlist (%s)" % (
                    kind.name, ", ".join(k.name for k in allow_list)))
            if kind is RemoteEndpointType.S3:
                if _s3_parts(parsed) is None:
                    raise RuntimeError("Invalid URL for S3: %r"
                                       % _lib.shown_name(url))
            elif not _matches(kind, parsed) and not (
                    kind is RemoteEndpointType.S3_PUBLIC and
                    _s3_parts(parsed) is not None):
                raise RuntimeError("Invalid URL for %s: %r"
                                   % (kind.name, _lib.shown_name(url)))
        if kind is RemoteEndpointType.S3:
            return cls.open_s3_url(url, nbytes)
        if kind is RemoteEndpointType.S3_PUBLIC:
            return cls.open_s3_public(url, nbytes)
        if kind is RemoteEndpointType.S3_PRESIGNED_URL:
            return cls.open_s3_presigned_url(url, nbytes)
        if kind is RemoteEndpointType.WEBHDFS:
            return cls.open_webhdfs(url, nbytes)
        return cls.open_http(url, nbytes)

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()

    def __str__(self):
        return "RemoteFile(%s, %s)" % (self._type.name, self._file.name)

    def remote_endpoint_type(self):
        return self._type

    def nbytes(self):
        """The object's size: the nbytes it was opened with, else the
        server's."""
        if self._nbytes is not None:
            return self._nbytes
        return _call(self._file.size)

    @property
    def file(self):
        """The gpufile.File underneath."""
        return self._file

    def _range(self, buf, size, file_offset):
        from .. import _buffers
        file_offset = size_t(file_offset, "file_offset", "RemoteFile.pread")
        if size is None:
            b = _buffers.as_buffer(buf, True, "RemoteFile.pread")
            size = b.nbytes
            b.release()
        size = size_t(size, "size", "RemoteFile.pread")
        nbytes = self.nbytes()
        if file_offset + size > nbytes:
            raise ValueError("cannot read %d+%d bytes into a %d bytes file "
                             "(%s)" % (file_offset, size, nbytes,
                                       self._file.name))
        return size, file_offset

    def pread(self, buf, size=None, file_offset=0):
        size, file_offset = self._range(buf, size, file_offset)
        return IOFuture(_call(self._file.pread, buf, size, file_offset))

    def read(self, buf, size=None, file_offset=0):
        return self.pread(buf, size, file_offset).get()
