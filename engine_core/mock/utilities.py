"""The UTILITY methods a frontend may call, with vLLM 0.32's semantics.

A method returns its value, or a ``Pending`` whose ``complete()`` gives the
value once the engine is idle (pause "wait" replies after draining).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine_core.mock.scheduler import PauseState, Scheduler


class Pending:
    """A utility result that is ready once the engine is idle (pause "wait")."""

    def __init__(self, complete: Callable[[], Any]) -> None:
        self.complete = complete


class Utilities:
    def __init__(self, sched: Scheduler, abort_in_flight: Callable[[], None]) -> None:
        self.sched = sched
        self.abort_in_flight = abort_in_flight  # engine-built ABORT outputs for all
        self.weight_version = "default"
        self.asleep: set[str] = set()  # executor memory tags put to sleep
        self.methods: dict[str, Callable[..., Any]] = {
            "get_supported_tasks": lambda: ("generate",),
            "is_sleeping": lambda: self.is_scheduler_paused() or bool(self.asleep),
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
        }

    def pause_scheduler(self, mode: str = "abort", clear_cache: bool = True) -> Any:
        if mode not in ("abort", "wait", "keep"):
            raise ValueError(f"Invalid pause mode: {mode}")
        if mode == "abort":
            self.abort_in_flight()
        self.sched.pause_state = PauseState.PAUSED_ALL if mode == "keep" else PauseState.PAUSED_NEW

        def finish() -> None:
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
        paused = self.pause_scheduler(mode=mode, clear_cache=level >= 1)
        if level < 1:
            return paused

        def fall_asleep() -> None:
            if isinstance(paused, Pending):
                paused.complete()
            self.asleep = {"weights", "kv_cache"}

        return Pending(fall_asleep) if isinstance(paused, Pending) else fall_asleep()

    def wake_up(self, tags: list[str] | None = None) -> bool:
        if tags is not None:
            tags = [t for t in tags if t != "scheduling"]
        if tags is None:
            self.asleep.clear()
        else:
            self.asleep.difference_update(tags)
        if not self.asleep:
            self.resume_scheduler()
        return not self.asleep

    def reset_prefix_cache(
        self, reset_running_requests: bool = False, reset_connector: bool = False
    ) -> bool:
        return self.sched.reset_prefix_cache(reset_running_requests)

    def set_weight_version(self, weight_version: str) -> None:
        self.weight_version = weight_version
