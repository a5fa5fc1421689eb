"""tierrouter: a DNS name that keeps failing warns once, not on every refresh.

A backends entry given by name is re-resolved every dns_refresh_s. While the name does not
resolve, the router warns on the first failure and then at most once a minute (each warning
saying how many were suppressed); when it resolves again it says so at info, and the next
failure warns at once.
"""

from test_router import Router, TinyDNS
from helpers import wait_until

NAME = "workers.test"


class CountingAddrs(dict):
    """TinyDNS's table, counting the A queries it answers for NAME (one per resolution)."""

    def __init__(self):
        super().__init__()
        self.asked = 0

    def get(self, key, default=None):
        if key == NAME:
            self.asked += 1
        return super().get(key, default)


def failures_logged(r):
    return [l for l in r.log_lines() if l["msg"].startswith(f"resolving {NAME} failed")]


def test_failing_dns_name_warns_once_then_recovers(tmp_path):
    dns = TinyDNS()
    dns.addrs = CountingAddrs()  # NAME has no address: every resolution fails
    r = Router(f"""
address: 127.0.0.1
probe_interval_ms: 100
dns_refresh_s: 1
dns_nameserver: "127.0.0.1:{dns.port}"
pools:
  - name: cpu
    kind: cpu
    backends: ["{NAME}:9"]
""", tmp_path)
    try:
        assert wait_until(lambda: dns.addrs.asked >= 4, 15), dns.addrs.asked  # 4 failed refreshes
        assert wait_until(lambda: failures_logged(r), 15)
        warns = failures_logged(r)
        assert len(warns) == 1, warns  # the first failure; the rest wait for the minute
        assert warns[0]["level"] == "warn" and warns[0]["dns_name"] == NAME
        assert "suppressed" not in warns[0]["msg"]

        dns.addrs[NAME] = ["127.0.0.2"]
        assert wait_until(lambda: any("works again" in l["msg"] for l in r.log_lines()), 15)
        again = [l for l in r.log_lines() if "works again" in l["msg"]][0]
        assert again["level"] == "info" and again["dns_name"] == NAME
        assert f"resolving {NAME} works again after " in again["msg"]

        del dns.addrs[NAME]  # failing again: warned at once, not a minute later
        assert wait_until(lambda: len(failures_logged(r)) == 2, 15)
    finally:
        assert r.stop() == 0
        dns.close()


def test_sigterm_with_a_dns_lookup_in_flight_frees_it(tmp_path):
    """A lookup the nameserver never answers is still pending at SIGTERM: the router cancels
    it and frees what it held (the ASan build's leak check reads the log in Router.stop)."""
    import socket
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # receives queries, answers none
    silent.bind(("127.0.0.1", 0))
    try:
        r = Router(f"""
address: 127.0.0.1
probe_interval_ms: 100
dns_refresh_s: 1
dns_nameserver: "127.0.0.1:{silent.getsockname()[1]}"
pools:
  - name: cpu
    kind: cpu
    backends: ["{NAME}:9"]
""", tmp_path)
        silent.settimeout(10)
        silent.recvfrom(512)  # the router's query: a lookup is in flight now
        assert r.stop() == 0
        assert "LeakSanitizer" not in r.log.read_text(errors="replace")
    finally:
        silent.close()
