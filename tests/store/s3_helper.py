#!/usr/bin/env python3
"""S3-API servers on loopback for the S3 volume store tests (run with the moto venv's python).

  s3_helper.py moto --ready FILE [--auth]
      moto's S3 server on 127.0.0.1 (a free port). With --auth, moto checks every request's
      SigV4 signature: an IAM user with full access and its key are made first, and the bucket
      "authed"; FILE gets {"port", "key", "secret"}. Without it, any credentials are accepted.
  s3_helper.py sigv4 --ready FILE
      A minimal in-memory S3 (PutObject with If-None-Match/If-Match, GetObject, HeadObject,
      DeleteObject, ListObjectsV2 with max-keys and a continuation token full of characters
      that need encoding) that recomputes every request's signature with botocore's SigV4Auth
      from what it received (method, path, query, the signed headers, x-amz-content-sha256,
      which must also equal the sha256 of the body) and answers 403 SignatureDoesNotMatch on
      any difference. Credentials: key AKIDEXAMPLE, secret "wJalrXUtnFEMI/K7MDENG+bPxRfiCY",
      region us-east-1, session token optional. Buckets are addressed path-style
      (127.0.0.1:PORT/BUCKET/KEY) or virtual-hosted (BUCKET.localhost:PORT/KEY). It counts the
      requests it checked; GET /__checked answers that count and /__hosts the Host headers of
      the checked requests (a sorted JSON list), without a signature.
  s3_helper.py not-s3 --ready FILE
      A web server that is not S3 (a wrong endpoint): every request gets 404 with a plain-text
      body, no S3 error document.
The server runs until SIGTERM.
"""
import argparse
import hashlib
import http.server
import json
import os
import signal
import sys
import threading
import urllib.parse


def write_ready(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.rename(tmp, path)


def run_moto(args):
    if args.auth:
        os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "4"
    import logging
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    from moto.server import ThreadedMotoServer
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    port = server.get_host_and_port()[1]
    ready = {"port": port}
    if args.auth:
        import boto3
        kw = dict(endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                  aws_access_key_id="setup", aws_secret_access_key="setup")
        iam = boto3.client("iam", **kw)
        iam.create_user(UserName="deltakv")
        key = iam.create_access_key(UserName="deltakv")["AccessKey"]
        policy = {"Version": "2012-10-17",
                  "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="deltakv", PolicyName="all", PolicyDocument=json.dumps(policy))
        kw.update(aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])
        boto3.client("s3", **kw).create_bucket(Bucket="authed")
        ready.update(key=key["AccessKeyId"], secret=key["SecretAccessKey"])
    write_ready(args.ready, ready)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop()


SIGV4_KEY = "AKIDEXAMPLE"
SIGV4_SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCY"
TOKEN = "c2-nWHBO_+/="  # a continuation token that needs percent-encoding


def run_sigv4(args):
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    objects = {}
    lock = threading.Lock()
    checked = [0]
    hosts = set()

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
            if self.command != "HEAD":
                self.wfile.write(body)

        def error(self, code, s3code, message):
            body = (f"<?xml version=\"1.0\"?><Error><Code>{s3code}</Code>"
                    f"<Message>{message}</Message></Error>").encode()
            self.reply(code, body)

        def verify(self, body):
            auth = self.headers.get("Authorization", "")
            if not auth.startswith("AWS4-HMAC-SHA256 "):
                return "no SigV4 Authorization header"
            fields = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(","))
            key, date, region, service, _ = fields["Credential"].split("/")
            if key != SIGV4_KEY or region != "us-east-1" or service != "s3":
                return f"credential scope {fields['Credential']}"
            payload = self.headers.get("x-amz-content-sha256")
            if payload is None:
                return "no x-amz-content-sha256"
            if payload != "UNSIGNED-PAYLOAD" and payload != hashlib.sha256(body).hexdigest():
                return "x-amz-content-sha256 is not the sha256 of the body"
            signed = fields["SignedHeaders"].split(";")
            for required in ("host", "x-amz-date", "x-amz-content-sha256"):
                if required not in signed:
                    return f"{required} is not signed"
            raw_query = urllib.parse.urlsplit(self.path).query
            pairs = urllib.parse.parse_qsl(raw_query, keep_blank_values=True)
            canonical_query = "&".join(sorted(
                urllib.parse.quote(k, safe="-_.~") + "=" + urllib.parse.quote(v, safe="-_.~")
                for k, v in pairs))
            if raw_query != canonical_query:
                return f"query '{raw_query}' is not in AWS canonical form '{canonical_query}'"
            headers = {h: self.headers.get(h) for h in signed}
            url = f"http://{self.headers['Host']}{self.path}"
            req = AWSRequest(method=self.command, url=url, headers=headers, data=body)
            amz_date = self.headers["X-Amz-Date"]
            req.context["timestamp"] = amz_date
            token = self.headers.get("x-amz-security-token")
            signer = SigV4Auth(Credentials(SIGV4_KEY, SIGV4_SECRET, token), "s3", "us-east-1")
            canonical = signer.canonical_request(req)
            expect = signer.signature(signer.string_to_sign(req, canonical), req)
            if expect != fields["Signature"]:
                return "signature differs from botocore's; canonical request:\n" + canonical
            return None

        def handle_any(self):
            n = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(n) if n else b""
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/__checked":
                return self.reply(200, str(checked[0]).encode())
            if url.path == "/__hosts":
                with lock:
                    return self.reply(200, json.dumps(sorted(hosts)).encode())
            why = self.verify(body)
            if why is not None:
                sys.stderr.write(f"sigv4 check: {self.command} {self.path}: {why}\n")
                return self.error(403, "SignatureDoesNotMatch", "botocore disagrees")
            host = self.headers.get("Host", "")
            with lock:
                checked[0] += 1
                hosts.add(host)
            if host.split(":")[0].endswith(".localhost"):  # virtual-hosted: the bucket is in Host
                key = urllib.parse.unquote(url.path.lstrip("/"))
            else:
                parts = url.path.lstrip("/").split("/", 1)
                key = urllib.parse.unquote(parts[1]) if len(parts) > 1 else ""
            query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
            with lock:
                if self.command == "GET" and not key and query.get("list-type") == ["2"]:
                    return self.list(query)
                cur = objects.get(key)
                if self.command in ("GET", "HEAD"):
                    if cur is None:
                        return self.error(404, "NoSuchKey", "no such key")
                    return self.reply(200, cur[0], [("ETag", cur[1])])
                if self.command == "DELETE":
                    objects.pop(key, None)
                    return self.reply(204)
                if self.command == "PUT":
                    if self.headers.get("If-None-Match") == "*" and cur is not None:
                        return self.error(412, "PreconditionFailed", "If-None-Match")
                    im = self.headers.get("If-Match")
                    if im is not None and (cur is None or cur[1] != im):
                        if cur is None:  # as S3: If-Match on an absent object
                            return self.error(404, "NoSuchKey", "no such key")
                        return self.error(412, "PreconditionFailed", "If-Match")
                    etag = '"' + hashlib.md5(body).hexdigest() + '"'
                    objects[key] = (body, etag)
                    return self.reply(200, b"", [("ETag", etag)])
            self.error(501, "NotImplemented", self.command)

        def list(self, query):
            prefix = query.get("prefix", [""])[0]
            max_keys = int(query.get("max-keys", ["1000"])[0])
            keys = sorted(k for k in objects if k.startswith(prefix))
            start = 0
            if "continuation-token" in query:
                token, _, at = query["continuation-token"][0].partition("@")
                if token != TOKEN:
                    return self.error(400, "InvalidArgument", "bad continuation token")
                start = int(at)
            page = keys[start:start + max_keys]
            more = start + max_keys < len(keys)
            xml = "<ListBucketResult>" + "".join(f"<Contents><Key>{k}</Key></Contents>" for k in page)
            xml += f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>"
            if more:
                xml += f"<NextContinuationToken>{TOKEN}@{start + max_keys}</NextContinuationToken>"
            self.reply(200, (xml + "</ListBucketResult>").encode())

        do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = handle_any

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    write_ready(args.ready, {"port": server.server_address[1]})
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


def run_not_s3(args):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def handle_any(self):
            n = int(self.headers.get("Content-Length", "0"))
            if n:
                self.rfile.read(n)
            body = b"404 page not found\n"
            self.send_response(404)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = handle_any

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    write_ready(args.ready, {"port": server.server_address[1]})
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["moto", "sigv4", "not-s3"])
    p.add_argument("--ready", required=True)
    p.add_argument("--auth", action="store_true")
    args = p.parse_args()
    {"moto": run_moto, "sigv4": run_sigv4, "not-s3": run_not_s3}[args.mode](args)


if __name__ == "__main__":
    main()
