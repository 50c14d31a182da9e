"""Pooling models in the mock: ``--runner pooling --convert embed|classify``.

As the real engine: ``get_supported_tasks`` reports the model's tasks, an ADD
with ``pooling_params`` gets one output, in the step that admits it, carrying
``pooling_output`` (a float32 tensor: inline under 256 bytes, else an aux
frame) and finishing with STOP. The values are a deterministic function of the
prompt and a cross-encoder's token types: an embedding of the model's hidden
size (``dimensions`` keeps the first ones), L2-normalized with
``use_activation``; or one logit per label, through a sigmoid (one label) or
softmax with ``use_activation``.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

from engine_core.mock.errors import EngineDead
from protocol.arrays import NDArray, make_array
from protocol.pooling import PoolingParams

# What the real engine reports (vLLM 0.32, CPU), in its order.
TASKS = {"embed": ("token_embed", "embed"), "classify": ("token_classify", "classify")}
DEFAULT_HIDDEN_SIZE = 64
_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


class MockPooler:
    def __init__(self, convert: str, model_dir: Path | None) -> None:
        config = {}
        if model_dir is not None and (model_dir / "config.json").is_file():
            config = json.loads((model_dir / "config.json").read_text())
        self.convert = convert
        self.tasks = TASKS[convert]
        self.hidden_size = int(config.get("hidden_size") or DEFAULT_HIDDEN_SIZE)
        labels = config.get("id2label")
        self.num_labels = len(labels) if labels else int(config.get("num_labels") or 2)

    def check(self, request_id: str, params: PoolingParams) -> None:
        """What the real engine's add_request refuses (its busy loop dies on it)."""
        if params.task not in self.tasks:
            raise EngineDead(
                f"ValueError: Unsupported task: {params.task!r} Supported tasks: "
                f"{list(self.tasks)} (request {request_id})"
            )
        if params.dimensions is not None and not 1 <= params.dimensions <= self.hidden_size:
            raise EngineDead(
                f"RuntimeError: bad dimensions {params.dimensions} (request {request_id})"
            )

    def output(self, prompt: list[int], params: PoolingParams, aux: list[bytes]) -> NDArray:
        # A pair's token types change a BERT's answer, so they change the mock's.
        types = (params.extra_kwargs or {}).get("compressed_token_type_ids")
        key = tuple(prompt) if types is None else (tuple(prompt), int(types))
        values = self._values(
            key, params.task, params.dimensions, params.use_activation is not False
        )
        return make_array(values, [len(values)], "f", aux, torch_names=True)

    # One pooler per mock process (never freed, so the cache cannot leak it);
    # benchmarks repeat prompts: pooling costs ~nothing.
    @functools.lru_cache(maxsize=4096)  # noqa: B019
    def _values(self, key: tuple, task: str, dimensions: int | None, activate: bool) -> list[float]:
        seed = _mix(hash(key) & _MASK)  # ints and tuples of them hash alike in every process
        if task in ("classify", "token_classify"):
            logits = [self._value(seed, i) * 4 for i in range(self.num_labels)]
            return _activate(logits) if activate else logits
        values = [self._value(seed, i) for i in range(dimensions or self.hidden_size)]
        if activate:
            norm = math.sqrt(sum(v * v for v in values)) or 1.0
            values = [v / norm for v in values]
        return values

    @staticmethod
    def _value(seed: int, i: int) -> float:
        return (_mix(seed ^ (i * 0x2545F4914F6CDD1D)) >> 11) / float(1 << 53) - 0.5


def _activate(logits: list[float]) -> list[float]:
    if len(logits) == 1:
        return [1.0 / (1.0 + math.exp(-logits[0]))]
    top = max(logits)
    exps = [math.exp(v - top) for v in logits]
    total = sum(exps)
    return [e / total for e in exps]
