"""Remote objects, opened by kind: each helper returns a gpufile.File
(read-only) and takes File()'s remote keywords (known_size, aws_*,
ca_file, ca_path, timeout, max_in_flight, max_attempts, unsigned), which
apply to this handle only: nothing is put in the environment.

    import gpufile.remote as remote
    f = remote.open_s3("bucket", "dir/model.safetensors",
                       aws_region="eu-west-1", aws_profile="training")
    print(f.remote_info())   # url, size, etag, requests, retries, ...

Credentials not given are found as the AWS CLI finds them (environment,
then AWS_PROFILE in ~/.aws/credentials and ~/.aws/config): see the
README's "Remote objects" and gpufile_open_remote(3).
"""

import urllib.parse

from . import _lib
from ._file import File

__all__ = ["open_http", "open_s3", "open_s3_url", "open_s3_presigned_url",
           "open_webhdfs", "is_presigned_url"]


def _scheme(url, allowed, what):
    if not isinstance(url, str):
        raise TypeError("%s: url must be a str, not %s"
                        % (what, type(url).__name__))
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in allowed:
        raise ValueError("%s: %r is not a %s URL" % (
            what, _lib.shown_name(url),
            " or ".join(s + "://" for s in allowed)))
    return scheme


def is_presigned_url(url):
    """True when url's query holds X-Amz-Signature (a presigned S3 URL,
    which gpufile sends as it is, never signed again)."""
    query = urllib.parse.urlsplit(url).query
    return "X-Amz-Signature" in urllib.parse.parse_qs(query)


def open_http(url, **kw):
    """An http:// or https:// URL, requests unsigned (AWS's own S3 URLs
    excepted: use open_s3_url for those, which File() signs the same
    way)."""
    _scheme(url, ("http", "https"), "open_http")
    return File(url, "r", **kw)


def open_s3(bucket, key, **kw):
    """s3://bucket/key: at aws_endpoint_url (path style) or AWS's
    virtual-hosted URL for the region; signed when credentials are found
    (none: unsigned, a public bucket)."""
    for name, value in (("bucket", bucket), ("key", key)):
        if not isinstance(value, str):
            raise TypeError("open_s3: %s must be a str, not %s"
                            % (name, type(value).__name__))
    if not bucket or "/" in bucket:
        raise ValueError("open_s3: bucket %r is not a bucket name" % bucket)
    if not key:
        raise ValueError("open_s3: key is empty")
    return File("s3://%s/%s" % (bucket, key), "r", **kw)


def open_s3_url(url, **kw):
    """An S3 object by URL: s3://BUCKET/KEY, AWS's https:// forms
    (https://BUCKET.s3.REGION.amazonaws.com/KEY, https://s3.REGION.
    amazonaws.com/BUCKET/KEY, ...), or http(s)://HOST/BUCKET/KEY of an S3
    endpoint of its own (MinIO, s3rver), signed the same way. A presigned
    URL goes to open_s3_presigned_url."""
    scheme = _scheme(url, ("s3", "http", "https"), "open_s3_url")
    if scheme != "s3":
        if is_presigned_url(url):
            return open_s3_presigned_url(url, **kw)
        kw.setdefault("s3", True)
    return File(url, "r", **kw)


def open_s3_presigned_url(url, **kw):
    """A presigned S3 URL: sent as it is (its query is its credential),
    the size from a GET of bytes 0-0 unless known_size is given."""
    _scheme(url, ("http", "https"), "open_s3_presigned_url")
    if not is_presigned_url(url):
        raise ValueError("open_s3_presigned_url: %r has no X-Amz-Signature "
                         "in its query" % _lib.shown_name(url))
    return File(url, "r", **kw)


def open_webhdfs(url, **kw):
    """A WebHDFS file: webhdfs://HOST:PORT/PATH or
    http(s)://HOST:PORT/webhdfs/v1/PATH (opened through File, which reads
    it with OPEN and its redirect to the datanode)."""
    scheme = _scheme(url, ("webhdfs", "http", "https"), "open_webhdfs")
    if scheme != "webhdfs" and \
            not urllib.parse.urlsplit(url).path.startswith("/webhdfs/v1/"):
        raise ValueError("open_webhdfs: %r is neither webhdfs://HOST/PATH "
                         "nor http(s)://HOST/webhdfs/v1/PATH"
                         % _lib.shown_name(url))
    return File(url, "r", **kw)
