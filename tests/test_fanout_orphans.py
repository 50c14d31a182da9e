"""Outputs of requests this frontend does not track: a restarted frontend
aborts what its predecessor left running in the engine. In process: the
shipped Table around an engine link that records aborts."""

from __future__ import annotations

import pytest

from frontend.fanout import Table
from frontend.model import load_model_info
from harness.state import NullEngine
from protocol import wire


class RecordingEngine(NullEngine):
    def __init__(self, alive: bool) -> None:
        super().__init__()
        self.alive = alive
        self.aborted: list[str] = []

    def abort(self, rank: int, ids: list[str]) -> bool:
        if self.alive:  # EngineClient refuses aborts while no engine is attached
            self.aborted.extend(ids)
        return self.alive


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    return load_model_info(str(tiny_model_dir), served_names=["tiny"])


def output(request_id: str, finish: str | None = None) -> wire.StepOutputs:
    out = wire.EngineCoreOutput(request_id, [7], finish_reason=finish)
    return wire.decode_step(wire.encode_outputs(wire.EngineCoreOutputs(outputs=[out])))


def test_orphan_outputs_before_the_reattach_are_aborted_after_it(model):
    """The engine queues outputs while no frontend runs; the new one reads them
    before its re-attach completes, when no abort can be sent. The orphans'
    next outputs must still be aborted (they used to be remembered as gone
    and ignored: the orphans ran to their end)."""
    engine = RecordingEngine(alive=False)
    table = Table(engine, model, lambda: None)
    table.on_outputs([output("orphan-1"), output("orphan-2")])
    assert engine.aborted == []
    engine.alive = True  # re-attached
    table.on_outputs([output("orphan-1"), output("orphan-2"), output("orphan-2")])
    assert engine.aborted == ["orphan-1", "orphan-2"]  # once each


def test_finished_orphans_are_not_aborted(model):
    engine = RecordingEngine(alive=True)
    table = Table(engine, model, lambda: None)
    table.on_outputs([output("done", finish=wire.FinishReason.LENGTH)])
    assert engine.aborted == []
