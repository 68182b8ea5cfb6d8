"""An in-memory S3 endpoint for upload tests (python/tests/test_upload.py),
served from a thread of the test: PutObject, the multipart calls
(CreateMultipartUpload, UploadPart, CompleteMultipartUpload,
AbortMultipartUpload, ListMultipartUploads) and GetObject, path style, for
one bucket. Every request's SigV4 signature is recomputed with botocore,
and the x-amz-content-sha256 it signed is checked against the body; a
mismatch is 403 SignatureDoesNotMatch / 400 XAmzContentSHA256Mismatch.

Faults, by key: a key containing "failpart2" answers every UploadPart of
part 2 with 500 InternalError.

S3Server(bucket, access_key, secret_key, region).start() -> endpoint URL;
.objects (key -> bytes), .uploads (upload id -> {key, parts}), .log
(method, key, query dict) of every request; .stop().
"""
import hashlib
import http.server
import threading
import urllib.parse
import uuid

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


class S3Server:
    def __init__(self, bucket, access_key, secret_key, region):
        self.bucket, self.ak, self.sk, self.region = (bucket, access_key,
                                                      secret_key, region)
        self.objects, self.uploads, self.log = {}, {}, []
        # Requests being handled now, and the most at once: counted from
        # a request's arrival to the start of its reply, so that a client
        # with one request in flight at a time is never seen with two.
        self.active = self.max_active = 0
        self.lock = threading.Lock()
        self.srv = None

    def start(self):
        owner = self

        class Handler(_Handler):
            server_state = owner

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        return "http://127.0.0.1:%d" % self.srv.server_address[1]

    def stop(self):
        self.srv.shutdown()
        self.srv.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_state = None

    def log_message(self, *args):
        pass

    def _reply(self, code, body=b"", headers=()):
        if getattr(self, "_active", False):
            self._active = False
            with self.server_state.lock:
                self.server_state.active -= 1
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, code, s3code, message=""):
        self._reply(code, ("<?xml version=\"1.0\"?><Error><Code>%s</Code>"
                           "<Message>%s</Message></Error>"
                           % (s3code, message)).encode())

    def _check(self, body):
        st = self.server_state
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("AWS4-HMAC-SHA256 "):
            return "no SigV4 Authorization header"
        fields = dict(p.strip().split("=", 1) for p in auth[17:].split(","))
        ak, _, region, service, _ = fields["Credential"].split("/")
        if ak != st.ak or region != st.region or service != "s3":
            return "credential scope %s" % fields["Credential"]
        signed = fields["SignedHeaders"].split(";")
        headers = {h: self.headers[h] for h in signed}
        req = AWSRequest(method=self.command, url="http://%s%s" % (
            self.headers["Host"], self.path), headers=headers)
        req.context["timestamp"] = self.headers["X-Amz-Date"]
        signer = S3SigV4Auth(Credentials(st.ak, st.sk), "s3", st.region)
        canonical = signer.canonical_request(req)
        want = signer.signature(signer.string_to_sign(req, canonical), req)
        if want != fields["Signature"]:
            return "signature differs from botocore's"
        sha = self.headers.get("X-Amz-Content-SHA256", "")
        if sha != "UNSIGNED-PAYLOAD" and sha != hashlib.sha256(body).hexdigest():
            return "x-amz-content-sha256 is not the body's"
        return None

    def _handle(self):
        st = self.server_state
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        path = urllib.parse.unquote(url.path)
        bucket, _, key = path.lstrip("/").partition("/")
        with st.lock:
            st.log.append((self.command, key, q))
            st.active += 1
            st.max_active = max(st.max_active, st.active)
        self._active = True
        why = self._check(body)
        if why:
            return self._error(403, "SignatureDoesNotMatch", why)
        if bucket != st.bucket:
            return self._error(404, "NoSuchBucket")
        if self.command == "GET" and not key and "uploads" in q:
            with st.lock:
                items = "".join("<Upload><Key>%s</Key><UploadId>%s</UploadId>"
                                "</Upload>" % (u["key"], i)
                                for i, u in st.uploads.items())
            return self._reply(200, ("<ListMultipartUploadsResult>%s"
                                     "</ListMultipartUploadsResult>"
                                     % items).encode())
        if self.command == "GET":
            with st.lock:
                data = st.objects.get(key)
            if data is None:
                return self._error(404, "NoSuchKey")
            return self._reply(200, data)
        if self.command == "POST" and "uploads" in q:
            uid = uuid.uuid4().hex + "-a.b_c~d"  # characters to encode
            with st.lock:
                st.uploads[uid] = {"key": key, "parts": {}}
            return self._reply(200, (
                "<InitiateMultipartUploadResult><Bucket>%s</Bucket>"
                "<Key>%s</Key><UploadId>%s</UploadId>"
                "</InitiateMultipartUploadResult>"
                % (bucket, key, uid)).encode())
        if "uploadId" in q:
            with st.lock:
                up = st.uploads.get(q["uploadId"])
            if up is None or up["key"] != key:
                return self._error(404, "NoSuchUpload")
            if self.command == "PUT":
                num = int(q["partNumber"])
                if "failpart2" in key and num == 2:
                    return self._error(500, "InternalError", "part 2 fails")
                etag = '"%s"' % hashlib.md5(body).hexdigest()
                with st.lock:
                    up["parts"][num] = (etag, body)
                return self._reply(200, headers=[("ETag", etag)])
            if self.command == "DELETE":
                with st.lock:
                    st.uploads.pop(q["uploadId"], None)
                return self._reply(204)
            if self.command == "POST":
                text = body.decode()
                nums = [int(x.split("</PartNumber>")[0])
                        for x in text.split("<PartNumber>")[1:]]
                tags = [x.split("</ETag>")[0]
                        for x in text.split("<ETag>")[1:]]
                parts = up["parts"]
                if nums != list(range(1, len(parts) + 1)) or \
                        tags != [parts[i][0] for i in nums]:
                    return self._error(400, "InvalidPart")
                for i in nums[:-1]:
                    if len(parts[i][1]) < 5 << 20:
                        return self._error(400, "EntityTooSmall")
                with st.lock:
                    st.objects[key] = b"".join(parts[i][1] for i in nums)
                    st.uploads.pop(q["uploadId"], None)
                return self._reply(200, (
                    "<CompleteMultipartUploadResult><Key>%s</Key>"
                    "</CompleteMultipartUploadResult>" % key).encode())
        if self.command == "PUT" and key:
            with st.lock:
                st.objects[key] = body
            return self._reply(200, headers=[
                ("ETag", '"%s"' % hashlib.md5(body).hexdigest())])
        return self._error(405, "MethodNotAllowed")

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle
