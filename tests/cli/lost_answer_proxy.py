"""A TCP proxy on loopback that loses one answer: the first request whose bytes hold an armed
string is forwarded to the server, and once the server answers (past any 100 Continue), the client's
connection is closed without that answer. The request has taken effect; the client sees a broken connection
and retries, as it would after a network fault between it and S3.

    proxy = LostAnswerProxy(upstream_port)
    proxy.arm(b"PUT /vols/prefix/gc/sweep.json")
    ... run a client against http://127.0.0.1:{proxy.port} ...
    assert proxy.lost == 1
    proxy.close()
"""
import socket
import threading


class LostAnswerProxy:
    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.lost = 0  # answers lost so far
        self._match = None
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, match):
        """Loses the answer to the next request that holds `match` (bytes)."""
        with self._lock:
            self._match = match

    def close(self):
        self._closed = True
        self._listener.close()

    def _accept(self):
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client):
        try:
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:
            client.close()
            return
        drop = threading.Event()  # set once this connection carried the armed request
        threading.Thread(target=self._pump_requests, args=(client, server, drop),
                         daemon=True).start()
        try:
            while data := server.recv(65536):
                if drop.is_set() and not data.startswith(b"HTTP/1.1 100 "):
                    with self._lock:
                        self.lost += 1
                    break
                client.sendall(data)
        except OSError:
            pass
        for s in (client, server):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _pump_requests(self, client, server, drop):
        try:
            while data := client.recv(65536):
                with self._lock:
                    if self._match is not None and self._match in data:
                        self._match = None
                        drop.set()
                server.sendall(data)
        except OSError:
            pass
        try:
            server.shutdown(socket.SHUT_WR)
        except OSError:
            pass
