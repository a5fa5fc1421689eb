"""Raw HTTP/1.1 reading for the suites that check bytes on the wire: no client library that
would undo the framing or retry behind the test's back."""
import time


def read_to_close(s, within=None):
    """Everything the peer sends until it closes (with `within`: or until that many seconds
    have passed); closes s."""
    raw = b""
    deadline = None if within is None else time.monotonic() + within
    while deadline is None or time.monotonic() < deadline:
        b = s.recv(65536)
        if not b:
            break
        raw += b
    s.close()
    return raw


def dechunk(body):
    """A chunked body, strictly: size CRLF data CRLF ... 0 CRLF CRLF, and nothing after."""
    payload, i = b"", 0
    while True:
        j = body.index(b"\r\n", i)
        n = int(body[i:j], 16)
        assert body[j + 2 + n:j + 4 + n] == b"\r\n"
        payload += body[j + 2:j + 2 + n]
        i = j + 4 + n
        if n == 0:
            break
    assert i == len(body)
    return payload
