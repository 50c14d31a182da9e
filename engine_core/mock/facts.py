"""What the mock needs to know about the model: vocabulary and special ids."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ModelFacts:
    vocab_size: int
    token_limit: int  # natural tokens are drawn from [0, token_limit)
    eos_token_id: int
    special_ids: frozenset[int]  # added/special tokens: never generated naturally


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _as_ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [value] if isinstance(value, int) else [v for v in value if isinstance(v, int)]


def load_model_facts(model_dir: Path | None, vocab_size: int, eos_token_id: int) -> ModelFacts:
    """Vocabulary size and special ids from a Hugging Face model directory."""
    if model_dir is None:
        return ModelFacts(vocab_size, vocab_size, eos_token_id, frozenset({eos_token_id}))
    config = _read_json(model_dir / "config.json")
    vocab_size = (
        config.get("vocab_size") or config.get("text_config", {}).get("vocab_size") or vocab_size
    )
    tok_config = _read_json(model_dir / "tokenizer_config.json")
    tokenizer = _read_json(model_dir / "tokenizer.json")
    added = {
        int(i): t.get("content") for i, t in tok_config.get("added_tokens_decoder", {}).items()
    }
    added.update({t["id"]: t.get("content") for t in tokenizer.get("added_tokens", ())})
    # Ids a padded embedding has but the tokenizer cannot decode are never produced.
    token_limit = vocab_size
    if vocab := tokenizer.get("model", {}).get("vocab"):
        token_limit = min(vocab_size, max(len(vocab), max(added, default=-1) + 1))
    gen_eos = _as_ids(_read_json(model_dir / "generation_config.json").get("eos_token_id"))
    eos_name = tok_config.get("eos_token")
    if isinstance(eos_name, dict):
        eos_name = eos_name.get("content")
    by_name = {name: i for i, name in added.items()}
    eos_candidates = [by_name.get(eos_name), *_as_ids(config.get("eos_token_id")), *gen_eos]
    eos = next((i for i in eos_candidates if i is not None), eos_token_id)
    special = set(added) | set(gen_eos) | {eos}
    special |= set(_as_ids(config.get("bos_token_id"))) | set(_as_ids(config.get("pad_token_id")))
    return ModelFacts(vocab_size, token_limit, eos, frozenset(special))
