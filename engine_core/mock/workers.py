"""The mock engine's model workers, as a CPU EngineCore's ``collective_rpc`` finds them.

vLLM 0.32 on CPU runs one ``CPUWorker`` per TP x PP rank under the
multiprocessing executor (``--distributed-executor-backend uni``, which
engine-core's launcher picks on CPU, runs it in the engine process), so
``collective_rpc(method, timeout, args, kwargs)`` calls ``method`` on every
worker and returns their results as a list; a worker that raises fails the
call (under mp with the executor's "Worker failed with error" message), and a method
the worker lacks is ``NotImplementedError("Method 'x' is not implemented.")``
(``v1/serial_utils.run_method``). The methods below are the worker's that the
operational routes reach, with the CPU worker's behaviour: sleep and wake_up
are no-ops with a warning, selective discard is refused, profiling needs a
profiler config, weight transfer needs a weight-transfer config (never given
to the mock), checksums are SHA-256 digests of the weights by name.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("engine_core.mock")

PROFILING_OFF = (
    "Profiling is not enabled. Please set --profiler-config to enable profiling. Example: "
    "'--profiler-config.profiler=torch --profiler-config.torch_profiler_dir"
    "=YOUR_DIR_PATH_TO_DUMP_TRACE'"
)
NO_WEIGHT_TRANSFER = (
    "Weight transfer not configured. Please set weight_transfer_config to enable weight transfer."
)
# A tiny model's parameters: name -> size in bytes.
WEIGHTS = {
    "model.embed_tokens.weight": 64,
    "model.layers.0.self_attn.qkv_proj.weight": 48,
    "model.layers.0.mlp.gate_up_proj.weight": 32,
    "model.norm.weight": 8,
    "lm_head.weight": 64,
}


class WorkerError(RuntimeError):
    """The multiprocessing executor's report of a worker that raised."""

    def __init__(self, error: Exception) -> None:
        super().__init__(
            f"Worker failed with error '{error}', please check the stack trace above "
            "for the root cause"
        )


class Worker:
    """One CPU worker (data-parallel rank ``rank``, TP and PP rank 0)."""

    def __init__(self, rank: int, profiler: str | None) -> None:
        self.rank = rank
        self.profiler = profiler
        self.profiling = False
        seed = f"mock-weights-{rank}".encode()
        self.weights = {
            name: hashlib.shake_256(seed + name.encode()).digest(size)
            for name, size in WEIGHTS.items()
        }
        self.methods: dict[str, Callable[..., Any]] = {
            "check_health": lambda: None,
            "synchronize_device": lambda: None,
            "compute_weight_checksums": self.compute_weight_checksums,
            "reset_weights": self.reset_weights,
            "sleep": self.sleep,
            "wake_up": self.wake_up,
            "discard": self.discard,
            "profile": self.profile,
            "init_weight_transfer_engine": self.needs_weight_transfer,
            "start_weight_update": self.needs_weight_transfer,
            "start_draft_weight_update": self.needs_weight_transfer,
            "update_weights": self.needs_weight_transfer,
            "finish_weight_update": self.needs_weight_transfer,
            "shutdown_weight_transfer_engine": lambda: None,  # nothing to shut down
        }

    def compute_weight_checksums(self) -> dict[str, str]:
        prefix = f"dp{self.rank}:pp0:pcp0:tp0:"
        return {prefix + n: hashlib.sha256(w).hexdigest() for n, w in self.weights.items()}

    def reset_weights(self) -> None:
        self.weights = {name: bytes(len(w)) for name, w in self.weights.items()}

    def sleep(self, level: int = 1) -> None:
        logger.warning("sleep mode is not supported on CPU, ignore it.")

    def wake_up(self, tags: list[str] | None = None) -> None:
        logger.warning("sleep mode is not supported on CPU, ignore it.")

    def discard(self, tags: Any) -> None:
        raise RuntimeError("Selective discard is not supported on CPU.")

    def profile(
        self,
        is_start: bool = True,
        profile_prefix: str | None = None,
        *,
        delay_iterations: int | None = None,
        max_iterations: int | None = None,
    ) -> None:
        if self.profiler is None:
            raise RuntimeError(PROFILING_OFF)
        self.profiling = is_start

    def needs_weight_transfer(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(NO_WEIGHT_TRANSFER)


class Executor:
    """The executor over the workers (one: TP = PP = 1)."""

    def __init__(self, rank: int, profiler: str | None, wrap_errors: bool = True) -> None:
        self.workers = [Worker(rank, profiler)]
        self.sleeping_tags: set[str] = set()
        self.wrap_errors = wrap_errors  # the mp executor's report (uni: the error itself)

    def collective_rpc(
        self,
        method: Any,
        timeout: float | None = None,
        args: Any = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[Any]:
        results = []
        for worker in self.workers:
            try:
                func = worker.methods.get(method) if isinstance(method, str) else None
                if func is None:
                    raise NotImplementedError(f"Method {method!r} is not implemented.")
                results.append(func(*(args or ()), **(kwargs or {})))
            except Exception as e:
                if not self.wrap_errors:
                    raise
                raise WorkerError(e) from e
        return results

    @property
    def is_sleeping(self) -> bool:
        return bool(self.sleeping_tags)

    def sleep(self, level: int = 1) -> None:
        """vLLM's Executor.sleep: the workers sleep, the tags record it."""
        if "weights" in self.sleeping_tags:
            logger.warning("Executor is already sleeping.")
            return
        self.collective_rpc("sleep", kwargs={"level": level})
        self.sleeping_tags |= {"weights", "kv_cache"}

    def wake_up(self, tags: list[str] | None = None) -> None:
        if not self.is_sleeping:
            logger.warning("Executor is not sleeping.")
            return
        if tags and any(tag not in self.sleeping_tags for tag in tags):
            logger.warning("Tags %s are not all in sleeping tags %s", tags, self.sleeping_tags)
            return
        self.collective_rpc("wake_up", kwargs={"tags": tags})
        if tags:
            self.sleeping_tags.difference_update(tags)
        else:
            self.sleeping_tags.clear()

    def discard(self, tags: tuple[str, ...]) -> None:
        to_discard = set(tags) - self.sleeping_tags
        if not to_discard:
            logger.warning("Tags %s are already sleeping.", tags)
            return
        try:
            self.collective_rpc("discard", args=(tuple(to_discard),))
        finally:  # (vLLM records them as discarded even when the workers refuse)
            self.sleeping_tags |= to_discard

    def profile(
        self,
        is_start: bool = True,
        profile_prefix: str | None = None,
        delay_iterations: int | None = None,
        max_iterations: int | None = None,
    ) -> None:
        kwargs = {
            k: v
            for k, v in (("delay_iterations", delay_iterations), ("max_iterations", max_iterations))
            if v is not None
        }
        self.collective_rpc("profile", args=(is_start, profile_prefix), kwargs=kwargs)
