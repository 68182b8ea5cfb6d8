#!/usr/bin/env python3
"""An S3 endpoint for gpufile's tests that checks every request's SigV4
signature with botocore (not with gpufile's own signer).

Serves, path style, /BUCKET/KEY for the one bucket named on the command
line, and virtual-hosted (Host: BUCKET.s3...) /KEY; also as an HTTP proxy
(absolute-form requests "GET http://HOST/PATH"), so that a test can send
AWS's own host names here through http_proxy: every key holds the same deterministic object (byte i is
(i * 131 + (i >> 9)) & 255) of SIZE bytes, except keys starting with
"missing", which are 404 NoSuchKey. A request whose signature botocore
computes differently is answered 403 SignatureDoesNotMatch; so is one
without a signature, or with a wrong session token. HEAD and ranged GET.

Prints "PORT <n>" once listening; runs until killed.
Usage: s3_server.py SIZE BUCKET ACCESS_KEY SECRET_KEY REGION [TOKEN]
"""
import http.server
import socketserver
import sys
import urllib.parse

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

SIZE = int(sys.argv[1])
BUCKET, AK, SK, REGION = sys.argv[2:6]
TOKEN = sys.argv[6] if len(sys.argv) > 6 else None
DATA = bytes(((i * 131) + (i >> 9)) & 255 for i in range(SIZE))


def origin_path(handler):
    """The request's path (and query), also of an absolute-form request
    made to a proxy."""
    path = handler.path
    if path.startswith("http://"):
        path = "/" + path[7:].partition("/")[2]
    return path


def check_signature(handler):
    """None when botocore agrees with the request's signature, else why.
    A presigned URL (X-Amz-Signature in the query) must come unsigned:
    S3 refuses a request with two signatures (400)."""
    auth = handler.headers.get("Authorization", "")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(
        origin_path(handler)).query)
    if "X-Amz-Signature" in query:
        return "presigned URL with an Authorization header" if auth \
            else None
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return "no SigV4 Authorization header"
    fields = dict(p.strip().split("=", 1) for p in auth[17:].split(","))
    ak, date, region, service, _ = fields["Credential"].split("/")
    if ak != AK or region != REGION or service != "s3":
        return "credential scope %s" % fields["Credential"]
    if TOKEN is not None and \
            handler.headers.get("X-Amz-Security-Token") != TOKEN:
        return "session token missing or wrong"
    signed = fields["SignedHeaders"].split(";")
    for required in ("host", "x-amz-date", "x-amz-content-sha256"):
        if required not in signed:
            return "header %s not signed" % required
    if "range" in (h.lower() for h in handler.headers.keys()) and \
            "range" not in signed:
        return "Range header not signed"
    headers = {h: handler.headers[h] for h in signed}
    req = AWSRequest(method=handler.command,
                     url="http://%s%s" % (handler.headers["Host"],
                                          origin_path(handler)),
                     headers=headers)
    req.context["timestamp"] = handler.headers["X-Amz-Date"]
    signer = S3SigV4Auth(Credentials(AK, SK, TOKEN), "s3", REGION)
    canonical = signer.canonical_request(req)
    want = signer.signature(signer.string_to_sign(req, canonical), req)
    if want != fields["Signature"]:
        return "signature differs from botocore's; canonical request:\n" + \
            canonical
    return None


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, headers, body=b""):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)

    def error(self, status, code, detail=""):
        body = ("<Error><Code>%s</Code></Error>" % code).encode()
        if detail:
            sys.stderr.write("s3_server: %s %s: %s\n" %
                             (self.command, self.path, detail))
        self.reply(status, [("Content-Length", str(len(body)))], body)

    def serve(self):
        why = check_signature(self)
        if why:
            return self.error(400 if why.startswith("presigned") else 403,
                              "SignatureDoesNotMatch", why)
        path = urllib.parse.unquote(origin_path(self).split("?", 1)[0])
        host = self.headers.get("Host", "").split(":")[0]
        if host.startswith(BUCKET + ".s3.") or \
                host.startswith(BUCKET + ".s3-"):
            path = "/" + BUCKET + path  # virtual-hosted
        bucket, _, key = path.lstrip("/").partition("/")
        if bucket != BUCKET:
            return self.error(404, "NoSuchBucket")
        if key.startswith("missing"):
            return self.error(404, "NoSuchKey")
        rng = self.headers.get("Range")
        if self.command == "HEAD" or not rng:
            return self.reply(200, [("Content-Length", str(SIZE)),
                                    ("X-Key", urllib.parse.quote(key))],
                              DATA)
        a, b = (int(x) for x in rng[6:].split("-"))
        b = min(b, SIZE - 1)
        body = DATA[a:b + 1]
        self.reply(206, [("Content-Length", str(len(body))),
                         ("Content-Range", "bytes %d-%d/%d" % (a, b, SIZE))],
                   body)

    do_GET = serve
    do_HEAD = serve


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


srv = Server(("127.0.0.1", 0), Handler)
print("PORT %d" % srv.server_address[1], flush=True)
srv.serve_forever()
