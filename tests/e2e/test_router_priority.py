"""Priority protection, live (issue 26): a saturated pool refuses batch first, then normal, and
serves urgent while it has a free slot; the desired-backends gauge says the pool needs more.

The saturation is held by count, not by timing: closed-loop normal clients, more of them than
normal may fill (the surplus waits in the admission queue and refills each slot the moment it
frees), so the pool stays exactly at normal's limit whatever this machine's speed. What
depends on speed (how long a slow request takes here) is measured first and sizes the
deadlines and waits.
"""
import threading
import time

from helpers import metric
from test_router import Router, post_once, slow_request, slow_workers, wait_until

ROWS = 64


def in_flight(r):
    return sum(b["in_flight"] for p in r.status()["pools"] for b in p["backends"])


def test_saturation_refuses_batch_and_serves_urgent(tmp_path, test_repo):
    (w,) = slow_workers(tmp_path, test_repo, 1)
    hdr, body = slow_request(ROWS)
    # how long one request takes on this machine (the worker runs one at a time)
    for _ in range(2):
        assert post_once(w.port, "slow", hdr, body)[0] == 200  # warm
    t0 = time.monotonic()
    for _ in range(3):
        assert post_once(w.port, "slow", hdr, body)[0] == 200
    service = (time.monotonic() - t0) / 3
    # each request about 0.2 s (scaled from the measurement): the pool frees a slot rarely, so
    # an urgent request almost never arrives in the instant one frees (it would then take that
    # slot, served at once but not above normal's count), and had it to wait for a freed slot
    # the wait would show
    rows = int(min(8192, ROWS * max(1.0, 0.2 / service)))
    service *= rows / ROWS
    hdr, body = slow_request(rows)
    # 10 slots: urgent keeps 2 (0.2), batch 1 more (0.1): batch may fill 7, normal 8, urgent 10
    slots, normal_limit = 10, 8
    # an urgent request waits in the worker behind at most `slots` others: its deadline covers
    # that many times the measured service time, with room for a loaded machine
    deadline_ms = int(max(5000, 40 * slots * service * 1000))
    # the router takes queue timeouts up to 600,000 ms; on a slow or loaded machine 4x the
    # deadline can pass that, and 600 s is still far more than any normal request waits here
    queue_ms = min(deadline_ms * 4, 600000)
    r = Router(f"""
address: 127.0.0.1
probe_interval_ms: 100
deadline_ms: {{urgent: {deadline_ms}, normal: {deadline_ms * 4}, batch: {deadline_ms}}}
admission:
  queue_size: 64
  queue_timeout_ms: {queue_ms}
  urgent_reserve: 0.2
  normal_reserve: 0.1
pools:
  - name: gpu
    kind: gpu
    min_tier: cpu
    max_in_flight: {slots}
    backends: ["127.0.0.1:{w.port}"]
""", tmp_path)
    stop = threading.Event()
    results = []

    def normal_client():
        while not stop.is_set():
            try:
                code, _, _ = post_once(r, "slow", dict(hdr, **{"X-Priority": "normal"}), body,
                                       timeout=deadline_ms * 5 / 1e3)
            except OSError as e:  # the router stopping at the end
                code = repr(e)
            if not stop.is_set():
                results.append(code)

    threads = [threading.Thread(target=normal_client, daemon=True) for _ in range(normal_limit + 4)]
    try:
        r.wait_healthy(1)
        assert metric(r, "tierrouter_pool_desired_backends", pool="gpu", required=True) == 0  # idle
        for t in threads:
            t.start()
        # saturated: normal at its limit, the surplus waiting in the admission queue
        wait_until(lambda: in_flight(r) == normal_limit, 30 + 50 * service, what="the pool at normal's limit")
        # batch is refused at once, and says why
        t_b = time.monotonic()
        code, _, raw = post_once(r, "slow", dict(hdr, **{"X-Priority": "batch"}), body)
        batch_s = time.monotonic() - t_b
        assert code == 429, raw
        assert b"batch" in raw
        assert batch_s < max(1.0, 5 * service)  # refused, not served late
        # the pool still needs more: the router says so (8 in flight + 4 queued over a target of 5)
        desired = metric(r, "tierrouter_pool_desired_backends", pool="gpu", required=True)
        assert desired >= 3, desired
        assert r.status()["pools"][0]["desired_backends"] >= 3
        # urgent is served under the same saturation, at once, in one of the slots kept for it:
        # the pool holds one more than normal may fill while it runs (had it waited for a slot
        # a normal request freed, the count would never pass normal's limit)
        urgent = {}
        # the urgent request runs long enough (about half a second, from the measured service)
        # for the poll below to see it beside the normal ones: the worker serves it next, so a
        # request as short as the others could come and go between two polls
        u_rows = int(min(8192, rows * max(1.0, 0.5 / service)))
        u_hdr, u_body = slow_request(u_rows)

        def urgent_client():
            urgent["reply"] = post_once(r, "slow", dict(u_hdr, **{"X-Priority": "urgent"}), u_body,
                                        timeout=deadline_ms / 1e3 + 5)

        u = threading.Thread(target=urgent_client)
        u.start()
        seen = wait_until(lambda: "above" if in_flight(r) == normal_limit + 1 else "done" if "reply" in urgent else None,
                          deadline_ms / 1e3, what="urgent in flight beside the saturating normal traffic")
        u.join(deadline_ms / 1e3 + 10)
        code, headers, raw = urgent["reply"]
        assert code == 200, raw
        assert headers["X-Tierrouter-Pool"] == "gpu"
        assert seen == "above", "urgent did not get a slot of its own"
        # and the saturation held throughout: normal never took urgent's slots
        assert in_flight(r) <= normal_limit + 1
        assert 429 not in results and 503 not in results  # normal waited, it was not refused
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=deadline_ms * 5 / 1e3)
        assert r.stop() == 0
        w.stop()


def test_full_queue_gives_a_normal_place_to_urgent(tmp_path, test_repo):
    """A full admission queue: an urgent request takes the place of the newest waiting normal
    one (that one gets 503 saying so), and is served before the normal ones that wait."""
    (w,) = slow_workers(tmp_path, test_repo, 1)
    hdr, body = slow_request(ROWS)
    for _ in range(2):
        assert post_once(w.port, "slow", hdr, body)[0] == 200
    t0 = time.monotonic()
    assert post_once(w.port, "slow", hdr, body)[0] == 200
    service = time.monotonic() - t0
    # each request holds its slot for about 1.5 s (sized from the measured service), so the two
    # in flight are still running when the test looks at the queue after the displacement
    hdr, body = slow_request(int(min(8192, ROWS * max(1.0, 1.5 / service))))
    # nobody times out while the test looks (600,000 ms is the most the router takes)
    wait_ms = int(min(600000, max(20000, 200 * service * 1000)))
    r = Router(f"""
address: 127.0.0.1
probe_interval_ms: 100
deadline_ms: {{urgent: {wait_ms * 2}, normal: {wait_ms * 2}, batch: {wait_ms * 2}}}
admission:
  queue_size: 2
  queue_timeout_ms: {wait_ms}
  urgent_reserve: 0
  normal_reserve: 0
pools:
  - name: gpu
    kind: gpu
    min_tier: cpu
    max_in_flight: 2
    backends: ["127.0.0.1:{w.port}"]
""", tmp_path)
    replies, order = {}, []

    def send(tag, prio):
        replies[tag] = post_once(r, "slow", dict(hdr, **{"X-Priority": prio}), body, timeout=wait_ms * 3 / 1e3)
        order.append(tag)

    def queued():
        return r.status()["admission_queue"]

    threads = []
    try:
        r.wait_healthy(1)
        # two in flight, then two waiting, one at a time so "newest" is known
        for i, want in enumerate([None, None, {"urgent": 0, "normal": 1, "batch": 0},
                                  {"urgent": 0, "normal": 2, "batch": 0}]):
            t = threading.Thread(target=send, args=(f"n{i}", "normal"))
            t.start()
            threads.append(t)
            if want is None:
                wait_until(lambda: in_flight(r) == i + 1, wait_ms / 1e3, what=f"n{i} in flight")
            else:
                wait_until(lambda: queued() == want, wait_ms / 1e3, what=f"n{i} queued")
        # the queue is full: urgent displaces n3, the newest normal, at once
        t = threading.Thread(target=send, args=("u", "urgent"))
        t.start()
        threads.append(t)
        wait_until(lambda: "n3" in replies, wait_ms / 1e3, what="n3 displaced")
        code, _, raw = replies["n3"]
        assert code == 503 and b"higher-priority" in raw, (code, raw)
        assert queued() == {"urgent": 1, "normal": 1, "batch": 0}
        for t in threads:
            t.join(wait_ms * 3 / 1e3)
        assert [replies[k][0] for k in ("n0", "n1", "n2", "u")] == [200] * 4
        # urgent left the queue before n2, which had waited longer
        assert order.index("u") < order.index("n2"), order
    finally:
        for t in threads:
            t.join(wait_ms * 3 / 1e3)
        assert r.stop() == 0
        w.stop()
