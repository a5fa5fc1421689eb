"""A raw-socket HTTP/1.1 backend for router tests, for what a real worker never does (garbage,
hangs, resets, huge replies). It answers the router's /v2/status probes as a healthy CPU
worker; every other request goes to respond(conn, head, body), which writes whatever it likes
and returns False to stop serving that connection."""
import json
import re
import socket
import threading


def echo_id(head):
    """The X-Request-Id line a worker puts on its reply to the request with this head: the
    router accepts a reply only when it carries the id it sent with that try."""
    m = re.search(rb"(?im)^x-request-id: *([!-~]+)\r?$", head)
    return b"X-Request-Id: " + m.group(1) + b"\r\n" if m else b""


class FakeHTTP:
    # what the router's /v2/status probes read: a healthy CPU worker
    status = {"live": True, "ready": True, "tier": "cpu", "queue_depth": 0, "gpu_memory_used_fraction": None}

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.hits = 0
        self.conns = []
        threading.Thread(target=self.serve, daemon=True).start()

    def respond(self, c, head, body):
        raise NotImplementedError

    def seen(self, head):
        """Called with the head of every request, probes included."""

    def serve(self):
        self.sock.settimeout(0.2)
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            self.conns.append(c)
            threading.Thread(target=self.handle, args=(c,), daemon=True).start()

    def handle(self, c):
        buf = b""
        try:
            c.settimeout(10)  # inside the try: close() may have closed c before this thread ran
            while not self.stop.is_set():
                data = c.recv(65536)
                if not data:
                    return
                buf += data
                while b"\r\n\r\n" in buf:
                    head, rest = buf.split(b"\r\n\r\n", 1)
                    m = re.search(rb"(?im)^content-length: *(\d+)", head)
                    n = int(m.group(1)) if m else 0
                    if len(rest) < n:
                        break
                    body, buf = rest[:n], rest[n:]
                    self.seen(head)
                    if head.startswith(b"GET /v2/status"):
                        st = json.dumps(self.status).encode()
                        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                  b"Content-Length: %d\r\n\r\n" % len(st) + st)
                        continue
                    self.hits += 1
                    if self.respond(c, head, body) is False:
                        return
        except OSError:
            return

    def close(self):
        self.stop.set()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass
        self.sock.close()
