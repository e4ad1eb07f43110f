"""A local HTTP and HTTPS object server for store tests, with misbehaviours on demand.

Certificates are made at start-up with the openssl CLI: a test CA, a server certificate it signs
(localhost, 127.0.0.1), a second certificate it signs for another host name, and an unrelated CA.

URLs are /MODE/PATH, PATH relative to the served root:
  plain/P       the file; honours single "Range: bytes=A-B" requests (206; 416 past the end)
  norange/P     the file; ignores Range (always 200 with the whole file)
  flaky-N/P     HTTP 500 for the first N requests to this URL, then as plain
  status-NNN/P  always HTTP NNN
  truncate/P    as plain, but the connection closes after half of the announced body
  stall/P       headers and one byte of the body, then nothing
  endless/P     200 without a length, then bytes until the client hangs up
  _count/URL    how many requests /URL has had so far (a decimal number)

As a script (the C++ store tests run it):
  object_server.py --root DIR --certs DIR --ready FILE
serves http and https until killed (or its parent exits) and writes FILE, a JSON object with
the ports ("http", "https", "https_wrong_host") and certificate paths ("ca", "other_ca").
"""
import argparse, collections, json, os, re, ssl, subprocess, sys, threading, time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OPENSSL_CONFIG = """
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[leaf]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = ${ENV::SAN}
"""


def _openssl(args, cwd, san="DNS:unused"):
    env = dict(os.environ, SAN=san)
    r = subprocess.run(["openssl", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("openssl " + " ".join(args) + " failed: " + r.stderr)


def make_certs(d):
    """Writes the test CA, server certificates and an unrelated CA into d; returns their paths."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "openssl.cnf"), "w") as f:
        f.write(OPENSSL_CONFIG)
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for ca in ("ca", "other-ca"):
        _openssl(["req", "-config", "openssl.cnf", "-x509", *key, "-keyout", ca + ".key",
                  "-out", ca + ".pem", "-days", "2", "-subj", "/CN=deltakv test " + ca,
                  "-extensions", "ca"], d)
    for leaf, san in (("server", "DNS:localhost,IP:127.0.0.1"), ("wrong-host", "DNS:wrong.example")):
        _openssl(["req", "-config", "openssl.cnf", "-new", *key, "-keyout", leaf + ".key",
                  "-out", leaf + ".csr", "-subj", "/CN=" + san.split(",")[0][4:]], d, san)
        _openssl(["x509", "-req", "-in", leaf + ".csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                  "-set_serial", str(int.from_bytes(os.urandom(8), "big")), "-days", "2",
                  "-extfile", "openssl.cnf", "-extensions", "leaf", "-out", leaf + ".pem"], d, san)
    p = lambda n: os.path.join(d, n)
    return {"ca": p("ca.pem"), "other_ca": p("other-ca.pem"),
            "server": (p("server.pem"), p("server.key")),
            "wrong_host": (p("wrong-host.pem"), p("wrong-host.key"))}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.answer(head=True)

    def do_GET(self):
        self.answer(head=False)

    def simple(self, code, text=b"", head=False):
        self.send_response(code)
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        if not head:
            self.wfile.write(text)

    def answer(self, head):
        srv = self.server
        url = urllib.parse.unquote(self.path.split("?", 1)[0])
        with srv.lock:
            srv.counts[url] += 1
            seen = srv.counts[url]
        mode, _, rest = url.lstrip("/").partition("/")
        if mode == "_count":
            with srv.lock:
                return self.simple(200, str(srv.counts["/" + rest]).encode(), head)
        if mode.startswith("status-"):
            return self.simple(int(mode[7:]), b"as asked\n", head)
        m = re.fullmatch(r"flaky-(\d+)", mode)
        if m and seen <= int(m.group(1)):
            return self.simple(500, b"not yet\n", head)
        if mode == "endless":
            return self.endless(head)
        path = os.path.realpath(os.path.join(srv.root, rest))
        if not path.startswith(srv.root + os.sep) or not os.path.isfile(path):
            return self.simple(404, b"no such object\n", head)
        with open(path, "rb") as f:
            data = f.read()
        code, start, end = 200, 0, len(data)
        rng = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if rng and mode != "norange":
            start = int(rng.group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                return self.end_headers()
            end = min(len(data), int(rng.group(2)) + 1 if rng.group(2) else len(data))
            code = 206
        self.send_response(code)
        self.send_header("Content-Length", str(end - start))
        if code == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        if mode in ("truncate", "stall"):
            self.send_header("Connection", "close")
        self.end_headers()
        if head:
            return
        body = data[start:end]
        if mode == "truncate":
            self.wfile.write(body[:len(body) // 2])
            self.close_connection = True
        elif mode == "stall":
            self.wfile.write(body[:1])
            self.wfile.flush()
            srv.stop.wait(120)
            self.close_connection = True
        else:
            self.wfile.write(body)

    def endless(self, head):
        self.send_response(200)
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        block = bytes(range(256)) * 256
        try:
            while not head and not self.server.stop.is_set():
                self.wfile.write(block)
        except OSError:
            pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root, cert=None):
        super().__init__(("127.0.0.1", 0), Handler)
        self.root = os.path.realpath(root)
        self.counts = collections.Counter()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.tls = None
        if cert:
            self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.tls.load_cert_chain(*cert)

    def finish_request(self, request, client_address):
        # The TLS handshake runs here, on the connection's own thread.
        if self.tls:
            try:
                request = self.tls.wrap_socket(request, server_side=True)
            except OSError:  # the client refused the certificate, or hung up
                return
        try:
            self.RequestHandlerClass(request, client_address, self)
        finally:
            if self.tls:
                request.close()

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], (ConnectionError, ssl.SSLError)):
            super().handle_error(request, client_address)  # a client hanging up is expected

    def close(self):
        self.stop.set()
        self.shutdown()
        self.server_close()


def serve(root, cert=None):
    """Starts a server on 127.0.0.1 (https when cert = (certfile, keyfile)) in a daemon thread;
    returns it (its port: server.server_address[1]; stop it with server.close())."""
    server = Server(root, cert)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--certs", required=True)
    ap.add_argument("--ready", required=True)
    args = ap.parse_args()
    parent = os.getppid()
    certs = make_certs(args.certs)
    servers = {"http": serve(args.root), "https": serve(args.root, certs["server"]),
               "https_wrong_host": serve(args.root, certs["wrong_host"])}
    ready = {k: s.server_address[1] for k, s in servers.items()}
    ready.update(ca=certs["ca"], other_ca=certs["other_ca"])
    with open(args.ready + ".tmp", "w") as f:
        json.dump(ready, f)
    os.rename(args.ready + ".tmp", args.ready)
    while os.getppid() == parent:
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
