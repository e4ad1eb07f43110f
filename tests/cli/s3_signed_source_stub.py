#!/usr/bin/env python3
"""A read-only S3 bucket on loopback that checks every request's signature with botocore's
S3SigV4Auth, for the plain-source sync tests (run with the moto venv's python).

  s3_signed_source_stub.py --ready FILE --dir DIR --bucket B --prefix P

serves the files under DIR as the objects P/<relative path> of bucket B: ListObjectsV2 (prefix,
encoding-type=url as AWS writes it: '+' for a space, %XX for the rest; Size and ETag) and
GetObject with Range and If-Match. A request whose signature differs from botocore's is
answered 403 SignatureDoesNotMatch. Credentials: key AKIDEXAMPLE, secret "wJalr/K7+MDENG",
region us-east-1. FILE gets {"port"}; GET /__checked answers "<verified> <refused>" unsigned.
Runs until SIGTERM.
"""
import argparse, hashlib, http.server, json, os, signal, sys, threading, urllib.parse

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

KEY, SECRET = "AKIDEXAMPLE", "wJalr/K7+MDENG"


def main():
    p = argparse.ArgumentParser()
    for name in ("--ready", "--dir", "--bucket", "--prefix"):
        p.add_argument(name, required=True)
    args = p.parse_args()
    objects = {}
    for d, _, files in os.walk(args.dir):
        for n in files:
            full = os.path.join(d, n)
            with open(full, "rb") as f:
                data = f.read()
            key = args.prefix + "/" + os.path.relpath(full, args.dir)
            objects[key] = (data, '"' + hashlib.md5(data).hexdigest() + '"')
    counts = {"verified": 0, "refused": 0}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, code, body=b"", headers=()):
            self.send_response(code)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def error(self, code, s3code):
            self.reply(code, f"<Error><Code>{s3code}</Code><Message>{s3code}</Message></Error>"
                       .encode())

        def signature_ok(self):
            auth = self.headers.get("Authorization", "")
            if not auth.startswith("AWS4-HMAC-SHA256 "):
                return False
            fields = dict(f.strip().split("=", 1) for f in auth[17:].split(","))
            signed = fields["SignedHeaders"].split(";")
            req = AWSRequest(method=self.command, url=f"http://{self.headers['Host']}{self.path}",
                             headers={h: self.headers.get(h) for h in signed})
            req.context["timestamp"] = self.headers["X-Amz-Date"]
            signer = S3SigV4Auth(Credentials(KEY, SECRET), "s3", "us-east-1")
            expect = signer.signature(
                signer.string_to_sign(req, signer.canonical_request(req)), req)
            return expect == fields["Signature"]

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/__checked":
                return self.reply(200, f"{counts['verified']} {counts['refused']}".encode())
            ok = self.signature_ok()
            with lock:
                counts["verified" if ok else "refused"] += 1
            if not ok:
                sys.stderr.write(f"signature refused: {self.command} {self.path}\n")
                return self.error(403, "SignatureDoesNotMatch")
            bucket, _, key = url.path.lstrip("/").partition("/")
            if bucket != args.bucket:
                return self.error(404, "NoSuchBucket")
            key = urllib.parse.unquote(key)
            if not key:
                return self.list(urllib.parse.parse_qs(url.query, keep_blank_values=True))
            if key not in objects:
                return self.error(404, "NoSuchKey")
            data, etag = objects[key]
            if self.headers.get("If-Match") not in (None, etag):
                return self.error(412, "PreconditionFailed")
            first, _, last = self.headers.get("Range", "bytes=0-").removeprefix("bytes=") \
                .partition("-")
            first, last = int(first), min(int(last or len(data) - 1), len(data) - 1)
            self.reply(206, data[first:last + 1],
                       [("ETag", etag), ("Content-Range", f"bytes {first}-{last}/{len(data)}")])

        def list(self, query):
            prefix = query.get("prefix", [""])[0]
            url_encode = query.get("encoding-type") == ["url"]
            xml = "<ListBucketResult>"
            for key in sorted(k for k in objects if k.startswith(prefix)):
                shown = urllib.parse.quote_plus(key, safe="/") if url_encode else key
                etag = objects[key][1].replace('"', "&quot;")
                xml += (f"<Contents><Key>{shown}</Key><Size>{len(objects[key][0])}</Size>"
                        f"<ETag>{etag}</ETag></Contents>")
            self.reply(200, (xml + "<IsTruncated>false</IsTruncated></ListBucketResult>").encode())

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tmp = args.ready + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"port": server.server_address[1]}, f)
    os.rename(tmp, args.ready)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


if __name__ == "__main__":
    main()
