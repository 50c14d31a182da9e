"""Build a PEFT LoRA adapter for the tiny test model (harness/tiny_model.py).

Usage::

    python -m tools.make_tiny_lora MODEL_DIR OUTDIR [SEED]

or, from Python, ``build(model_dir, outdir, seed=...)`` (``harness.models.tiny_lora_dirs``
builds two once under build/).

The adapter is what ``peft`` would save for a Llama with ``r=8``,
``lora_alpha=16`` and ``target_modules=["q_proj", "v_proj"]``: an
``adapter_config.json`` and an ``adapter_model.safetensors`` holding, per
layer L, ``base_model.model.model.layers.L.self_attn.{q,v}_proj.lora_{A,B}.weight``
with PEFT's shapes (``lora_A`` is ``[r, in_features]``, ``lora_B`` is
``[out_features, r]``, not transposed). The weights are random (a fixed seed
per adapter) and large enough that the adapter's greedy output differs from
the base model's, which is what the tests need: ``vllm serve --enable-lora
--max-lora-rank 8`` loads it, and a request naming it is visibly different.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np

from harness.tiny_model import write_safetensors

RANK = 8
ALPHA = 16
TARGET_MODULES = ["q_proj", "v_proj"]
# Per-entry std of A and B: B @ A * (alpha / r) then has entries of about
# 2 * sqrt(8) * 0.3 ** 2 ~ 0.5, far above the base projections' weights.
WEIGHT_STD = 0.3


def adapter_config(base_model: str) -> dict:
    return {
        "base_model_name_or_path": base_model,
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": RANK,
        "lora_alpha": ALPHA,
        "lora_dropout": 0.0,
        "target_modules": TARGET_MODULES,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "use_rslora": False,
        "use_dora": False,
    }


def adapter_weights(config: dict, seed: int) -> dict[str, np.ndarray]:
    hidden = config["hidden_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    out_features = {"q_proj": config["num_attention_heads"] * head_dim,
                    "v_proj": config["num_key_value_heads"] * head_dim}
    rng = np.random.default_rng(seed)
    weights = {}
    for layer in range(config["num_hidden_layers"]):
        for module in TARGET_MODULES:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            weights[f"{prefix}.lora_A.weight"] = (
                rng.standard_normal((RANK, hidden)) * WEIGHT_STD).astype(np.float32)
            weights[f"{prefix}.lora_B.weight"] = (
                rng.standard_normal((out_features[module], RANK)) * WEIGHT_STD
            ).astype(np.float32)
    return weights


def build(model_dir: pathlib.Path, outdir: pathlib.Path, seed: int = 1) -> None:
    config = json.loads((model_dir / "config.json").read_text())
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "adapter_config.json").write_text(
        json.dumps(adapter_config(str(model_dir)), indent=2, sort_keys=True) + "\n")
    write_safetensors(outdir / "adapter_model.safetensors", adapter_weights(config, seed))

