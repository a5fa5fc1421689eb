"""Decode tokens/s at c=1 on the tiny random-weight model with and without a constraint (issue
23): whole answers over HTTP at temperature 1.5, five seeds after one warm-up answer per case
(the vocabulary, the grammar, its first masks), a fresh worker per case, the prefix cache off.
Not a ctest: run by hand, figures in the issue's note.
    TIERSERVE_BIN=build/bin/tierserve /usr/bin/python3 tests/llm/bench_structured.py"""
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "e2e"))
from conftest import start_worker  # noqa: E402
from helpers import post_json  # noqa: E402
from llm_fixture import write_tiny_llm  # noqa: E402
from test_llm_structured import Q, SCHEMA  # noqa: E402

CASES = {
    "none (ignore_eos)": (None, {"ignore_eos": True}),
    "support-bot schema": ({"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}}, {}),
    "string maxLength 1000": ({"type": "json_schema", "json_schema": {"name": "s", "schema": {
        "type": "object", "properties": {"a": {"type": "string", "maxLength": 1000}}, "required": ["a"]}}}, {}),
    "json_object": ({"type": "json_object"}, {}),
}


def main():
    d = pathlib.Path(tempfile.mkdtemp())
    write_tiny_llm(d / "repo" / "tiny" / "1")
    for name, (rf, kw) in CASES.items():
        w = start_worker(d / "repo", d, env={"EXECUTION_MODE": "cpu", "TIERSERVE_LLM_PREFIX_CACHE_SCOPE": "off"})
        try:
            def run(seed):
                b = {"model": "tiny", "messages": Q, "temperature": 1.5, "seed": seed, "max_tokens": 400, **kw}
                if rf:
                    b["response_format"] = rf
                t = time.monotonic()
                r = post_json(w, "/v1/chat/completions", b, timeout=300)
                assert r.status == 200, r
                return r.body["usage"]["completion_tokens"], time.monotonic() - t
            run(99)
            rates = sorted((n / dt, n) for n, dt in (run(s) for s in range(1, 6)))
            print(f"{name:22s} median {rates[2][0]:6.0f} tokens/s ({1e3 / rates[2][0]:.3f} ms/token); "
                  f"tokens per answer {[n for _, n in rates]}")
        finally:
            w.stop()


if __name__ == "__main__":
    main()
