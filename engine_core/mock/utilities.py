"""The UTILITY methods a frontend may call, with vLLM 0.32's semantics.

A method returns its value, or a ``Pending`` whose ``complete()`` gives the
value once the engine is idle (pause "wait" replies after draining). The
methods that reach the model workers go through ``workers.Executor`` (a CPU
engine's: sleep has no memory effect, selective discard and weight transfer
fail, profiling needs ``--profiler-config``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine_core.mock.scheduler import PauseState, Scheduler
from engine_core.mock.workers import Executor


class Pending:
    """A utility result that is ready once the engine is idle (pause "wait")."""

    def __init__(self, complete: Callable[[], Any]) -> None:
        self.complete = complete


class Utilities:
    def __init__(
        self,
        sched: Scheduler,
        abort_in_flight: Callable[[], None],
        rank: int = 0,
        profiler: str | None = None,
        wrap_worker_errors: bool = True,
    ) -> None:
        self.sched = sched
        self.abort_in_flight = abort_in_flight  # engine-built ABORT outputs for all
        self.weight_version = "default"
        self.executor = Executor(rank, profiler, wrap_worker_errors)
        self.methods: dict[str, Callable[..., Any]] = {
            "get_supported_tasks": lambda: ("generate",),
            "is_sleeping": lambda: self.is_scheduler_paused() or self.executor.is_sleeping,
            "sleep": self.sleep,
            "wake_up": self.wake_up,
            "has_work": sched.has_work,
            "reset_prefix_cache": self.reset_prefix_cache,
            "reset_mm_cache": lambda: None,
            "reset_encoder_cache": lambda: None,
            "pause_scheduler": self.pause_scheduler,
            "resume_scheduler": self.resume_scheduler,
            "is_scheduler_paused": self.is_scheduler_paused,
            "get_weight_version": lambda: self.weight_version,
            "set_weight_version": self.set_weight_version,
            "execute_dummy_batch": lambda: None,
            "collective_rpc": self.executor.collective_rpc,
            "compute_weight_checksums": lambda: self.executor.collective_rpc(
                "compute_weight_checksums"
            ),
            "release_kv_cache_memory": self.release_kv_cache_memory,
            "profile": self.executor.profile,
        }

    def pause_scheduler(self, mode: str = "abort", clear_cache: bool = True) -> Any:
        if mode not in ("abort", "wait", "keep"):
            raise ValueError(f"Invalid pause mode: {mode}")
        if mode == "abort":
            self.abort_in_flight()
        self.sched.pause_state = PauseState.PAUSED_ALL if mode == "keep" else PauseState.PAUSED_NEW

        def finish() -> None:  # vLLM's _finish_pause
            self.executor.collective_rpc("synchronize_device")
            if clear_cache:
                self.sched.reset_prefix_cache(reset_running_requests=True)

        if not self.sched.has_work():
            return finish()
        return Pending(finish)

    def resume_scheduler(self) -> None:
        self.sched.pause_state = PauseState.UNPAUSED

    def is_scheduler_paused(self) -> bool:
        return self.sched.pause_state != PauseState.UNPAUSED

    def sleep(self, level: int = 1, mode: str = "abort") -> Any:
        """Pause (clearing the caches from level 1), then the executor sleeps."""
        paused = self.pause_scheduler(mode=mode, clear_cache=level >= 1)
        if level < 1:
            return paused

        def fall_asleep() -> None:
            if isinstance(paused, Pending):
                paused.complete()
            self.executor.sleep(level)

        return Pending(fall_asleep) if isinstance(paused, Pending) else fall_asleep()

    def wake_up(self, tags: list[str] | None = None) -> bool:
        """Whether everything is resident again; then the scheduler resumes."""
        if tags is not None and "scheduling" in tags:
            tags = [t for t in tags if t != "scheduling"]
        if tags is None or tags:
            self.executor.wake_up(tags)
        fully_awake = not self.executor.is_sleeping
        if fully_awake:
            self.resume_scheduler()
        return fully_awake

    def release_kv_cache_memory(self) -> None:
        if not (self.is_scheduler_paused() and not self.sched.live):
            raise RuntimeError("release_kv_cache_memory() requires a completed pause first")
        if self.executor.is_sleeping:
            raise RuntimeError(
                "release_kv_cache_memory() requires all executor memory to be resident"
            )
        self.sched.reset_prefix_cache(reset_running_requests=True)
        self.executor.discard(("kv_cache",))

    def reset_prefix_cache(
        self, reset_running_requests: bool = False, reset_connector: bool = False
    ) -> bool:
        return self.sched.reset_prefix_cache(reset_running_requests)

    def set_weight_version(self, weight_version: str) -> None:
        self.weight_version = weight_version
