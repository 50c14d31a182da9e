"""FIFO continuous batching over the deterministic model, one step at a time.

Up to ``max_num_seqs`` requests run; the rest wait in arrival order. Like vLLM,
finished or aborted requests cost one more, empty step (``unflushed``), and
each step reports a ``SchedulerStats`` map with the real field names.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from engine_core.mock.errors import EngineDead
from engine_core.mock.facts import ModelFacts
from engine_core.mock.logprobs import prompt_logprobs, sample_logprobs
from engine_core.mock.pooling import MockPooler
from engine_core.mock.prefix_cache import PrefixCache
from engine_core.mock.requests import Request, Settings, TokenModel
from protocol.wire import EngineCoreOutput, FinishReason


class PauseState:
    UNPAUSED = 0
    PAUSED_NEW = 1  # "abort"/"wait": running requests go on, new ones wait
    PAUSED_ALL = 2  # "keep": nothing is scheduled


class Scheduler:
    def __init__(
        self,
        facts: ModelFacts,
        settings: Settings,
        *,
        max_model_len: int,
        max_num_seqs: int,
        block_size: int,
        num_blocks: int,
        seed: int,
        pooler: MockPooler | None = None,
    ) -> None:
        self.facts = facts
        self.pooler = pooler
        self.settings = settings
        self.max_model_len = max_model_len
        self.max_num_seqs = max_num_seqs
        self.model = TokenModel(facts, settings, seed)
        self.cache = PrefixCache(block_size, num_blocks)
        self.kv_tokens = block_size * num_blocks
        self.live: dict[str, Request] = {}
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.erroring: list[Request] = []  # scheduler-built ERROR at the next step
        self.pause_state = PauseState.UNPAUSED
        # Requests finished since the last step: like vLLM's finished_req_ids they
        # keep the engine busy for one more (empty, stats-only) step.
        self.unflushed = False
        self.tokens_in_use = 0  # prompt + output tokens of running requests (KV usage)

    # --- queue state

    def add(self, request: Request, *, error: bool = False) -> None:
        if request.id in self.live:
            raise EngineDead(f"AssertionError: duplicate request id {request.id!r}")
        self.live[request.id] = request
        (self.erroring if error else self.waiting).append(request)

    def has_work(self) -> bool:
        """vLLM's ``has_work``: pausing hides queued (and, for "keep", all) requests."""
        if self.unflushed:
            return True
        if self.pause_state == PauseState.PAUSED_ALL:
            return False
        if self.running or self.erroring:
            return True
        return bool(self.waiting) and self.pause_state == PauseState.UNPAUSED

    def remove(self, ids: set[str]) -> list[Request]:
        """Drop live requests (aborts); returns those that were live."""
        gone = [self.live.pop(i) for i in ids if i in self.live]
        if gone:
            self.unflushed = True
            self.running = self._without(self.running, ids)
            self.waiting = deque(r for r in self.waiting if r.id not in ids)
            self.erroring = [r for r in self.erroring if r.id not in ids]
        return gone

    def remove_all(self) -> list[Request]:
        gone = list(self.live.values())
        self.unflushed = bool(gone) or self.unflushed
        self.live.clear()
        self.running.clear()
        self.waiting.clear()
        self.erroring.clear()
        self.tokens_in_use = 0
        return gone

    def _without(self, running: list[Request], ids: set[str]) -> list[Request]:
        kept = []
        for r in running:
            if r.id in ids:
                self.tokens_in_use -= r.prompt_len + r.num_out
            else:
                kept.append(r)
        return kept

    def reset_prefix_cache(self, reset_running_requests: bool = False) -> bool:
        # vLLM refuses while running requests hold cache blocks.
        if self.running and not reset_running_requests:
            return False
        self.cache.reset()
        return True

    # --- one step

    def step(
        self,
    ) -> tuple[
        dict[int, list[EngineCoreOutput]], dict[int, list[bytes]], list[tuple[Request, int]]
    ]:
        """Admit, generate, and build this step's outputs, grouped by client.

        Returns the outputs, each client's aux frames (large arrays; element 0
        is the payload slot) and the requests that finished, with the reason.
        """
        self.unflushed = False
        by_client: dict[int, list[EngineCoreOutput]] = {}
        aux: dict[int, list[bytes]] = {}
        finished: list[tuple[Request, int]] = []
        if self.pause_state == PauseState.PAUSED_ALL:  # only a flush step gets here
            return by_client, aux, finished
        if self.pause_state == PauseState.UNPAUSED:
            self._admit(time.monotonic())
        fast = self.settings.eos_rate <= 0
        advance_plain = self.model.advance_plain
        produced = 0
        for r in self.running:
            outs = by_client.get(r.client_index)
            if outs is None:
                outs = by_client[r.client_index] = []
                aux[r.client_index] = [b""]
            if fast and r.plain and not r.first:
                out = advance_plain(r)
            else:
                out = self._advance(r, aux[r.client_index])
            outs.append(out)
            produced += len(out.new_token_ids)
            if out.finish_reason is not None:
                finished.append((r, out.finish_reason))
                if r.pooling is None:
                    out.kv_transfer_params = kv_transfer_result(r)
        self.tokens_in_use += produced
        for r in self.erroring:
            by_client.setdefault(r.client_index, []).append(
                EngineCoreOutput(
                    r.id, [], finish_reason=FinishReason.ERROR, events=self._take_events(r)
                )
            )
            finished.append((r, FinishReason.ERROR))
        self.erroring = []
        if finished:
            self.unflushed = True
            for r, _ in finished:
                del self.live[r.id]
            self.running = self._without(self.running, {r.id for r, _ in finished})
        return by_client, aux, finished

    def _admit(self, now: float) -> None:
        while self.waiting and len(self.running) < self.max_num_seqs:
            r = self.waiting.popleft()
            self._check_runnable(r)
            r.limit = min(r.max_tokens, self.max_model_len - r.prompt_len)
            self.cache.lookup(r)
            if r.events is not None:
                r.events.append({"type": 2, "timestamp": now})
            self.running.append(r)
            self.tokens_in_use += r.prompt_len

    def _check_runnable(self, r: Request) -> None:
        """What crashes the real model runner (the frontend must prevent it)."""
        n = r.prompt_len
        if n == 0:
            raise EngineDead(f"request {r.id}: empty prompt")
        if n > self.max_model_len or (n == self.max_model_len and r.pooling is None):
            raise EngineDead(
                f"ValueError: could not broadcast input array from shape ({n},) into "
                f"shape ({self.max_model_len},) (request {r.id})"
            )
        p = r.params
        ids = [
            *r.prompt,
            *(p.allowed_token_ids or ()),
            *(p.logit_bias or ()),
            *(t for word in p.bad_words_token_ids or () for t in word),
        ]
        if min(ids) < 0 or max(ids) >= self.facts.vocab_size:
            raise EngineDead(f"IndexError: index out of range in self (request {r.id})")

    def _advance(self, r: Request, aux: list[bytes]) -> EngineCoreOutput:
        """Any request: stop rules, logprobs, and what the first output carries."""
        tokens: list[int]
        if r.pooling is not None:  # pooled at once: no tokens, the tensor, STOP
            assert self.pooler is not None  # the engine takes pooling requests only with one
            tokens = []
            out = EngineCoreOutput(
                r.id,
                tokens,
                finish_reason=FinishReason.STOP,
                pooling_output=self.pooler.output(r.prompt, r.pooling, aux),
            )
        else:
            tokens, finish, stop_reason = self.model.advance(r)
            out = EngineCoreOutput(r.id, tokens, finish_reason=finish, stop_reason=stop_reason)
        vocab = self.facts.vocab_size
        if r.logprobs is not None:
            out.new_logprobs = sample_logprobs(r, tokens, vocab, aux)
        if r.first:
            r.first = False
            out.prefill_stats = self.cache.prefill_stats(r)
            if r.prompt_logprobs is not None:
                out.new_prompt_logprobs_tensors = prompt_logprobs(r, vocab, aux)
            out.events = self._take_events(r)
            self.cache.store(r)
        return out

    @staticmethod
    def _take_events(r: Request) -> list[dict] | None:
        events, r.events = r.events, None  # no preemption: nothing after the first
        return events

    # --- stats

    def stats(self) -> dict[str, Any]:
        """A ``SchedulerStats`` map with the real field names and order."""
        return {
            "num_running_reqs": len(self.running),
            "num_waiting_reqs": len(self.waiting) + len(self.erroring),
            "num_skipped_waiting_reqs": 0,
            "num_kv_fetch_reqs_by_stage": {},
            "step_counter": 0,  # only MoE DP engines count steps
            "current_wave": 0,
            "kv_cache_usage": min(1.0, self.tokens_in_use / self.kv_tokens),
            "iteration_details": None,
            "prefix_cache_stats": self.cache.take_stats(),
            "connector_prefix_cache_stats": None,
            "kv_cache_eviction_events": [],
            "spec_decoding_stats": None,
            "kv_connector_stats": None,
            "ec_connector_stats": None,
            "waiting_lora_adapters": {},
            "running_lora_adapters": {},
            "cudagraph_stats": None,
            "perf_stats": None,
        }


def kv_transfer_result(r: Request) -> dict | None:
    """What a prefill node's KV connector (NIXL's) returns when a request that
    asked for a remote decode finishes: where the decode node pulls its KV
    cache from. The mock's stand-in for a P/D deployment (--kv-transfer-config)."""
    extra = r.params.extra_args or {}
    asked = extra.get("kv_transfer_params")
    if not isinstance(asked, dict) or not asked.get("do_remote_decode"):
        return None
    blocks = (r.prompt_len + 15) // 16
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": list(range(blocks)),
        "remote_engine_id": "mock-prefill-engine",
        "remote_host": "127.0.0.1",
        "remote_port": 5600,
        "tp_size": 1,
    }
