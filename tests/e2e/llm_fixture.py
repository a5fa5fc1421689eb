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


def write_tiny_llm(d, context=None):
    """Writes the tiny decoder into version folder d (created). context: another
    max_position_embeddings than its 2048 (its rotary embedding is computed, not a table, so
    any context works; the same weights answer the same)."""
    d = pathlib.Path(d)
    d.mkdir(parents=True)
    r = subprocess.run([sys.executable, str(MODELS / "gen_llm_model.py"), str(d)], capture_output=True,
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
