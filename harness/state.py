"""The application state the routes get, in process, with no engine behind it:
for benchmarks of the output path and for tests that drive the fan-out table
or a route's view directly."""

from __future__ import annotations

from frontend.fanout import Table
from frontend.render import Renderer
from frontend.state import AppState, ServingConfig
from protocol.handshake import ReadyResponse

SCHEDULER_STATS = {  # the shape the engine sends on every step
    "num_running_reqs": 256, "num_waiting_reqs": 0, "num_skipped_waiting_reqs": 0,
    "num_kv_fetch_reqs_by_stage": {}, "step_counter": 0, "current_wave": 0,
    "kv_cache_usage": 0.25, "iteration_details": None,
    "prefix_cache_stats": {"reset": False, "requests": 0, "queries": 0, "hits": 0,
                           "preempted_requests": 0, "preempted_queries": 0,
                           "preempted_hits": 0, "hits_by_source": {}},
    "connector_prefix_cache_stats": None, "kv_cache_eviction_events": [],
    "spec_decoding_stats": None, "kv_connector_stats": None, "ec_connector_stats": None,
    "waiting_lora_adapters": {}, "running_lora_adapters": {}, "cudagraph_stats": None,
    "perf_stats": None,
}


class NullEngine:
    """An engine link that sends nothing."""

    alive = True
    death_reason = None
    num_aborts_sent = 0

    data_parallel_size = 1

    def __init__(self) -> None:
        self.rejected: dict[str, int] = {}

    def send_add(self, frame: list[bytes], rank: int, on_failed=None) -> None:
        pass

    def abort(self, rank: int, ids: list[str]) -> bool:
        return True

    def routable_ranks(self) -> list[int]:
        return [0]

    def reject(self, reason: str, detail: str = "") -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    async def call_utility(self, method: str, *args, timeout: float = 10.0):
        return None


def make_state(model, max_model_len: int = 4096, observer=None) -> AppState:
    """The application state the routes get, around a table with no engine."""
    engine = NullEngine()
    table = Table(engine, model, lambda: state.model_limits(), observer=observer)
    state = AppState(model, ServingConfig(), engine, table, Renderer(model))
    state.engine_attached(ReadyResponse(max_model_len=max_model_len, vllm_version="0.32.0"))
    return state
