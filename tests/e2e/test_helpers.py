"""The shared e2e helpers themselves (helpers.py): the suites trust them to fail on a wrong
reply, so a helper that quietly accepts one would hide a server bug in every suite at once.
No server is started here."""
import os
import socket

import pytest

from helpers import Headers, address, free_port, metric, rss_kb, sse_data, sse_events, vm_bytes, wait_for, wait_until

TEXT = """# HELP t_requests_total Requests.
# TYPE t_requests_total counter
t_requests_total{model="a",outcome="success"} 3
t_requests_total{model="a",outcome="error"} 1
t_requests_total{model="b",outcome="success"} 7
t_up 1
t_labelled{x="1"} 5
t_reports_total{source="worker",name="n"} 2
"""


def test_metric_picks_the_series_with_every_label_given():
    assert metric(TEXT, "t_requests_total", model="a", outcome="error") == 1
    assert metric(TEXT, "t_requests_total", ['model="b"']) == 7
    assert metric(TEXT, "t_requests_total", 'model="a",outcome="success"') == 3
    assert metric(TEXT, "t_requests_total", model="c") is None
    assert metric(TEXT, "t_missing") is None
    assert metric(TEXT, "t_reports_total", source="worker", name="n") == 2  # labels named like parameters


def test_metric_without_labels_is_the_unlabelled_series_only():
    assert metric(TEXT, "t_up") == 1
    assert metric(TEXT, "t_labelled") is None  # not t_labelled{x="1"}
    with pytest.raises(AssertionError, match="no t_labelled"):
        metric(TEXT, "t_labelled", required=True)


def test_metric_refuses_to_pick_one_of_several_series():
    with pytest.raises(AssertionError, match="several series"):
        metric(TEXT, "t_requests_total", model="a")


def test_sse_framing_is_strict():
    assert sse_data(b"data: {}\n\ndata: [DONE]\n\n") == ["{}", "[DONE]"]
    assert sse_events(b'data: {"a": 1}\n\ndata: [DONE]\n\n') == [{"a": 1}]
    for bad in (b"data: {}\n\n", b"data: {}\ndata: [DONE]\n\n", b"event: x\ndata: {}\n\ndata: [DONE]\n\n",
                b"data: [DONE]\n\ndata: [DONE]\n\n", b"data: {}\n\ndata: [DONE]\n", b""):
        with pytest.raises(AssertionError):
            sse_events(bad)


def test_reply_headers_ignore_case():
    h = Headers([("Content-Type", "text/plain"), ("X-Tierrouter-Pool", "gpu")])
    assert h["content-type"] == "text/plain" and h.get("x-tierrouter-pool") == "gpu"
    assert "CONTENT-TYPE" in h and h.get("Retry-After") is None


def test_waits_return_what_they_saw():
    seen = iter(range(100))
    assert wait_until(lambda: next(seen) >= 3, 5) is True
    assert wait_until(lambda: 0, 0.05) == 0
    with pytest.raises(AssertionError, match="waiting for the thing: 0"):
        wait_until(lambda: 0, 0.05, lambda: "the thing: 0")
    assert wait_for(lambda: 7, 8, 0.05) == 7


def test_free_port_is_free_and_process_memory_is_read():
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
    assert address(port) == ("127.0.0.1", port) and address(("h", "9")) == ("h", 9)
    mem = vm_bytes(os.getpid())
    assert 0 < mem["VmRSS"] <= mem["VmHWM"] and rss_kb(os.getpid(), peak=True) * 1024 >= mem["VmHWM"]
