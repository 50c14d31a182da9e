"""LoRA adapters: the names clients put in ``model``, and what the engine knows of them.

As in vLLM 0.32's server (``vllm/entrypoints/openai/models/serving.py``):

* an adapter is registered only once the engine's ``add_lora`` accepted it, so
  an ADD never names an adapter the engine could not load (a failed lazy load
  inside the engine's step would kill it);
* ids count from 1 in load order; a new name takes the next id before the
  engine is asked (a failed load uses one up), an in-place reload keeps its
  id, a name loaded again after an unload gets a new one;
* unloading only forgets the name here. The engine keeps the adapter in its
  LRU cache (``--max-cpu-loras``) until it is evicted, exactly as vLLM does:
  asking it to ``remove_lora`` would gain nothing the LRU does not give, and a
  request still running with the adapter would make the engine load it again
  from its files, which may be gone by then.

Deliberate details: ``add_lora`` always goes with ``load_inplace=true``, so
an id the engine cached for another adapter (left by an earlier frontend
process on the same engine) is replaced instead of silently reused; ADDs
carry ``load_inplace=false`` (vLLM sends what was loaded, which makes the
engine reload an in-place adapter from disk every step). Load and unload are
serialized by one lock (vLLM: one per name); they are rare admin calls.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from frontend.errors import ApiError
from protocol.errors import UtilityCallError
from protocol.lora import LoRARequest

log = logging.getLogger("frontend.lora")

ADD_LORA_TIMEOUT_S = 120.0  # loading an adapter reads its weights from disk


@dataclass(frozen=True)
class LoRAModulePath:
    """One ``--lora-modules`` entry (vLLM's dataclass of the same name)."""

    name: str
    path: str
    base_model_name: str | None = None
    is_3d_lora_weight: bool = False


def parse_lora_modules(items: list[str] | None) -> list[LoRAModulePath]:
    """vLLM's ``LoRAParserAction``: ``name=path`` (with ``=`` and no ``,``) or one
    JSON object per item. Raises ValueError with vLLM's message."""
    modules = []
    for item in items or ():
        if not item:
            continue
        if "=" in item and "," not in item:
            name, path = item.split("=", 1)
            modules.append(LoRAModulePath(name, path))
            continue
        try:
            fields = json.loads(item)
        except json.JSONDecodeError:
            raise ValueError(f"Invalid JSON format for --lora-modules: {item}") from None
        try:
            modules.append(LoRAModulePath(**fields))
        except TypeError as e:
            raise ValueError(f"Invalid fields for --lora-modules: {item} - {e}") from None
    return modules


class EngineUtilities(Protocol):
    async def call_utility_all(
        self, method: str, *args: Any, timeout: float = 10.0
    ) -> list[Any]: ...


class LoraRegistry:
    """The adapters this frontend serves, by name, in load order."""

    def __init__(self, engine: EngineUtilities, served_names: list[str]) -> None:
        self.engine = engine
        self.served_names = served_names
        self.adapters: dict[str, LoRARequest] = {}  # what ADDs carry
        self._last_id = 0
        self._lock = asyncio.Lock()

    def get(self, name: str | None) -> LoRARequest | None:
        return self.adapters.get(name) if name else None

    # ------------------------------------------------------------ load / unload
    async def load(
        self,
        name: str,
        path: str,
        *,
        load_inplace: bool = False,
        is_3d_lora_weight: bool = False,
        base_model_name: str | None = None,
    ) -> str:
        """Register an adapter the engine accepted; vLLM's checks and answers."""
        async with self._lock:
            if not name or not path:
                raise invalid_input("Both 'lora_name' and 'lora_path' must be provided.")
            if name in self.served_names:
                raise invalid_input(
                    f"The lora adapter '{name}' conflicts with a served base model."
                )
            previous = self.adapters.get(name)
            if previous is not None and not load_inplace:
                raise invalid_input(
                    f"The lora adapter '{name}' has already been loaded. If you want to "
                    "load the adapter in place, set 'load_inplace' to True."
                )
            if previous is not None:
                lora_id = previous.lora_int_id
            else:
                self._last_id += 1
                lora_id = self._last_id
            lora = LoRARequest(
                name,
                lora_id,
                path,
                base_model_name if base_model_name in self.served_names else None,
                False,
                is_3d_lora_weight,
            )
            await self._add_to_engine(lora)
            if previous is not None and previous.lora_path == path:
                log.warning(
                    "Reloaded LoRA adapter '%s' in place from the same path '%s'. "
                    "Prefix-cache blocks computed with its previous weights are "
                    "not invalidated; load changed weights from a new path to "
                    "avoid reusing them.",
                    name,
                    path,
                )
            self.adapters[name] = lora
            log.info("Loaded new LoRA adapter: name '%s', path '%s'", name, path)
            return f"Success: LoRA adapter '{name}' added successfully."

    async def _add_to_engine(self, lora: LoRARequest) -> None:
        try:
            await self.engine.call_utility_all(
                "add_lora",
                msgspec.structs.replace(lora, load_inplace=True),
                timeout=ADD_LORA_TIMEOUT_S,
            )
        except UtilityCallError as e:
            not_found = (
                f"Loading lora {lora.lora_name} failed: No adapter found for {lora.lora_path}"
            )
            if not_found in e.failure_message:
                raise ApiError(not_found, 404, "NotFoundError") from None
            raise ApiError(e.failure_message, 500, "InternalServerError") from None
        except Exception as e:  # engine gone, timeout
            raise ApiError(str(e) or type(e).__name__, 500, "InternalServerError") from None

    async def unload(self, name: str) -> str:
        async with self._lock:
            if not name:
                raise invalid_input("'lora_name' needs to be provided to unload a LoRA adapter.")
            if name not in self.adapters:
                raise ApiError(f"The lora adapter '{name}' cannot be found.", 404, "NotFoundError")
            del self.adapters[name]
            log.info("Removed LoRA adapter: name '%s'", name)
            return f"Success: LoRA adapter '{name}' removed successfully."

    # ------------------------------------------------------------ engine lifecycle
    async def load_static(self, modules: list[LoRAModulePath]) -> None:
        """``--lora-modules`` at start-up, in order; any failure stops the start."""
        for m in modules:
            try:
                await self.load(
                    m.name,
                    m.path,
                    is_3d_lora_weight=m.is_3d_lora_weight,
                    base_model_name=m.base_model_name,
                )
            except ApiError as e:
                raise ValueError(e.message) from None

    async def restore(self) -> None:
        """A new engine attached: it knows none of our adapters, so add them all
        again (same ids). One it no longer accepts is dropped, with an error."""
        async with self._lock:
            for name, lora in list(self.adapters.items()):
                try:
                    await self._add_to_engine(lora)
                except ApiError as e:
                    log.error(
                        "LoRA adapter '%s' dropped: the new engine did not load it: %s",
                        name,
                        e.message,
                    )
                    del self.adapters[name]

    def parent(self, lora: LoRARequest) -> str:
        """The base model an adapter is listed under in /v1/models."""
        return lora.base_model_name or self.served_names[0]


def invalid_input(message: str) -> ApiError:
    return ApiError(message, 400, "InvalidUserInput")
