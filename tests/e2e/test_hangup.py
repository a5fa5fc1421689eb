"""A client that hangs up while its inference request runs: the worker notices it and cancels
the request, also when a pipelined request waits behind it that the worker's receive window
cannot hold.

libevent stops reading a connection while its request is served. Once the worker's receive
window is full, the client's kernel keeps the rest of the pipelined bytes, and the FIN behind
them, until the worker reads: a worker that only looks at its socket's state never learns
that the client has gone. It must read those bytes (they are the next request's) to see the
hang-up behind them.

Raw sockets (helpers from test_hostile.py); every loop has a deadline, and the waits are for
the worker's own counters, not for time.
"""
import json
import time

import numpy as np

from test_hostile import (F32, INFER, MAX_BODY, SLOW, Conn, _metric, assert_serving, bin_inp,
                          binary, check_slow_reply, exchange, http_bytes, one_runner, repo, req,
                          slow_request)

assert repo and one_runner  # fixtures shared with test_hostile.py

SLOW_LABELS = {"model": "slow", "version": "1"}
OUTCOMES = ("success", "client_error", "rejected", "timeout", "error", "cancelled")
# the longest slow request the 1 MiB body limit lets through: its run is the time the worker
# has to notice the hang-up
ROWS = 448


def outcomes(w):
    return {o: _metric(w, "tierserve_requests_total", outcome=o, **SLOW_LABELS) for o in OUTCOMES}


def wait_settled(w, base, n, timeout):
    """Waits until n more slow requests than in base have an outcome and nothing is in flight
    or queued; returns the outcomes since base."""
    deadline = time.monotonic() + timeout
    while True:
        now = outcomes(w)
        doc = json.loads(exchange(w, http_bytes("GET", "/v2/status"))[2])
        done = sum(now.values()) - sum(base.values())
        if done >= n and doc["in_flight"] == 0 and doc["queue_depth"] == 0:
            return {o: now[o] - base[o] for o in OUTCOMES}
        assert w.proc.poll() is None, f"worker died (exit {w.proc.returncode})"
        assert time.monotonic() < deadline, f"{done} of {n} settled, status {doc}"
        time.sleep(0.05)


def send_what_fits(sock, data):
    """Sends as much of data as the kernels take now, without waiting for the worker to read
    any of it; returns how many bytes went."""
    sock.setblocking(False)
    sent = 0
    try:
        while sent < len(data):
            sent += sock.send(data[sent:sent + 65536])
    except BlockingIOError:
        pass
    return sent


def test_hangup_behind_a_pipelined_request_larger_than_the_receive_window(one_runner):
    w = one_runner
    base = outcomes(w)
    # a whole request the worker would accept (a body just under the limit): far more than a
    # receive window holds, so on a worker that does not read it the hang-up stays in the
    # client's kernel behind it
    pipelined = http_bytes("POST", INFER, b"0" * (MAX_BODY - 4096))
    c = Conn(w)
    c.send(slow_request(ROWS))
    sent = send_what_fits(c.sock, pipelined)
    c.close()
    got = wait_settled(w, base, 1, 10 * SLOW)
    assert got["cancelled"] == 1 and got["success"] == 0, (
        f"the client hung up behind {sent} pipelined bytes, but its request was not "
        f"cancelled: {got}")
    assert_serving(w, w.baseline_probs)


def test_pipelined_requests_behind_a_running_one_are_answered_in_order(one_runner):
    """The bytes the worker takes in while a request runs are the next requests': a client
    that stays gets every reply, in order, and nothing is cancelled."""
    w = one_runner
    base = outcomes(w)
    x = (np.arange(200 * 1024, dtype="<f4") % 13).tobytes()  # 800 KiB: past a receive window
    body, headers = binary(req(bin_inp("INPUT0", shape=(200, 1024), size=len(x)),
                               parameters={"binary_data_output": True}), x)
    pad = http_bytes("GET", "/v2", headers={"X-Pad": "p" * 40000})
    c = Conn(w, timeout=10 * SLOW)
    c.send(slow_request(ROWS) + http_bytes("POST", F32, body, headers) + pad)
    check_slow_reply(c.response(), rows=ROWS)
    status, rh, rbody = c.response()
    assert status == 200, (status, rbody[:300])
    hl = int(rh["inference-header-content-length"])
    assert json.loads(rbody[:hl])["outputs"][0]["shape"] == [200, 1024]
    assert rbody[hl:] == x, "the pipelined request's tensor came back changed"
    status, _, rbody = c.response()
    assert status == 200 and json.loads(rbody)["name"], (status, rbody[:300])
    c.close()
    got = wait_settled(w, base, 1, 10 * SLOW)
    assert got["success"] == 1 and got["cancelled"] == 0, got
