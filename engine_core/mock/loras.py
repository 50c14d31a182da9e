"""LoRA adapters in the mock engine (``--enable-lora``), with vLLM 0.32's rules.

``add_lora`` checks the adapter directory as the real engine's loader does
(``adapter_config.json`` present, its rank within ``--max-lora-rank``) and
answers with the real failure texts; adapters are kept by ``lora_int_id`` in
an LRU of ``--max-cpu-loras``. An ADD with an adapter loads it lazily, like
the real worker; if that load fails, or the engine has no LoRA at all, the
step would fail inside the real engine's model runner, so the mock dies
(ENGINE_CORE_DEAD): a frontend must never send such an ADD.

The "model" under an adapter: a request's tokens depend on the adapter's name
too (requests.py), so adapter and base outputs differ and each is repeatable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec

from engine_core.mock.errors import EngineDead
from protocol.lora import LoRARequest

NOT_ENABLED = "LoRA is not enabled. Use --enable-lora to enable LoRA."


class Loras:
    def __init__(
        self, enabled: bool, max_loras: int, max_lora_rank: int, max_cpu_loras: int | None
    ) -> None:
        self.enabled = enabled
        self.max_loras = max_loras if enabled else 0
        self.max_lora_rank = max_lora_rank
        self.capacity = max(max_cpu_loras or max_loras, max_loras)
        self.cached: dict[int, LoRARequest] = {}  # least recently used first
        self.adds_with_lora = 0  # ADDs that named an adapter

    # --- utilities (the argument arrives as the wire array)

    def add_lora(self, lora_request: Any) -> bool:
        lora = msgspec.convert(lora_request, LoRARequest)
        if not self.enabled:
            raise RuntimeError(NOT_ENABLED)
        if lora.lora_int_id in self.cached and not lora.load_inplace:
            self._touch(lora.lora_int_id)
            return True
        self._load(lora)
        return True

    def remove_lora(self, lora_id: int) -> bool:
        return self.cached.pop(lora_id, None) is not None

    def list_loras(self) -> list[int]:
        return sorted(self.cached)

    def pin_lora(self, lora_id: int) -> bool:
        return lora_id in self.cached

    # --- ADD

    def on_add(self, lora: LoRARequest) -> None:
        """An ADD names ``lora``: use the cached adapter, or load it now."""
        self.adds_with_lora += 1
        if not self.enabled:
            raise EngineDead(f"AssertionError: a request with a LoRA adapter ({NOT_ENABLED})")
        if lora.lora_int_id in self.cached:
            self._touch(lora.lora_int_id)
            return
        try:
            self._load(lora)
        except (FileNotFoundError, ValueError) as e:
            raise EngineDead(f"loading LoRA adapter {lora.lora_name} in a step failed: {e}") from e

    # --- loading

    def _load(self, lora: LoRARequest) -> None:
        config_path = Path(lora.lora_path) / "adapter_config.json"
        if not config_path.is_file():
            raise FileNotFoundError(
                f"Loading lora {lora.lora_name} failed: No adapter found for {lora.lora_path}"
            )
        config = json.loads(config_path.read_text())
        rank = config.get("r")
        if not isinstance(rank, int) or rank <= 0:
            raise ValueError("Missing required configuration fields: {'r'}")
        if rank > self.max_lora_rank:
            raise ValueError(
                f"LoRA rank {rank} is greater than max_lora_rank {self.max_lora_rank}."
            )
        self.cached.pop(lora.lora_int_id, None)
        if len(self.cached) >= self.capacity:
            del self.cached[next(iter(self.cached))]
        self.cached[lora.lora_int_id] = lora

    def _touch(self, lora_id: int) -> None:
        self.cached[lora_id] = self.cached.pop(lora_id)
