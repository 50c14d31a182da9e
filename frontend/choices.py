"""What the fan-out table (``fanout.py``) holds: a client request (``Group``),
its engine requests (``Choice``), and what one engine step added to a streamed
choice (``Delta``). Plain state with the few rules that belong to it (merging a
step into a delta not yet sent, a group's wake-ups); the table does the routing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from frontend.errors import ApiError
    from frontend.parsers.types import ParsedDelta
    from frontend.text import IncrementalDetokenizer, LogprobsState, Position
    from protocol.arrays import NDArray
    from protocol.lora import LoRARequest
    from protocol.pooling import PoolingParams
    from protocol.sampling import SamplingParams


class Delta:
    """What one engine step added to one choice (streaming only)."""

    __slots__ = (
        "choice",
        "text",
        "token_ids",
        "logprobs",
        "finish_reason",
        "stop_reason",
        "queued",
        "_texts",
        "parsed",
    )
    # (left unset unless the choice has a parser; see __init__)
    parsed: ParsedDelta | None

    def __init__(
        self,
        choice: Choice,
        text: str,
        token_ids: list[int],
        logprobs: list[Position] | None,
        finish_reason: str | None,
        stop_reason: int | str | None,
    ) -> None:
        self.choice = choice
        self.text = text
        self.token_ids = token_ids
        self.logprobs = logprobs
        self.finish_reason = finish_reason
        self.stop_reason = stop_reason
        self.queued = False  # in its group's pending list (else held back)
        self._texts: list[str] | None = None  # pieces of merged steps, joined on take
        # ``parsed`` (left unset unless the choice has a parser): what the
        # choice's parser made of this delta when it was queued.

    def merge(
        self,
        text: str,
        token_ids: list[int],
        logprobs: list[Position] | None,
        finish_reason: str | None,
        stop_reason: int | str | None,
    ) -> None:
        """Add a later step of the same choice while this one still waits to
        be sent: when the engine runs ahead (several steps read in one
        wake-up, or steps that came before the handler started the stream)
        they go out as one chunk, as vLLM's output collector merges them;
        with ``stream_interval`` the steps in between are held here too."""
        if self._texts is None:
            self._texts = [self.text]
            # Copies: the first step's lists belong to the engine message.
            self.token_ids = list(self.token_ids)
            if self.logprobs is not None:
                self.logprobs = list(self.logprobs)
        self._texts.append(text)
        self.token_ids += token_ids
        if logprobs is not None:
            merged = cast("list[Position]", self.logprobs)  # (a choice's steps all have them)
            merged += logprobs
        self.finish_reason = finish_reason
        self.stop_reason = stop_reason

    def close(self) -> None:
        """No more merging: the client takes it now."""
        if self.choice.open_delta is self:
            self.choice.open_delta = None
        if self._texts is not None:
            self.text = "".join(self._texts)
            self._texts = None


class Choice:
    """One engine request: a (prompt, sample) pair of a client request, or a pooling input."""

    __slots__ = (
        "group",
        "index",
        "prompt_index",
        "engine_id",
        "engine_index",
        "prompt_token_ids",
        "params",
        "detok",
        "logprobs",
        "finish_reason",
        "stop_reason",
        "finished",
        "num_cached_tokens",
        "num_cache_creation_tokens",
        "num_dropped",
        "weight_version",
        "weight_starts",
        "sent_tokens",
        "open_delta",
        "parser",
        "lean",
        "pooled",
    )

    def __init__(
        self,
        group: Group,
        index: int,
        prompt_index: int,
        engine_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams | PoolingParams,
        detok: IncrementalDetokenizer | None,
        logprobs: LogprobsState | None,
    ) -> None:
        self.group = group
        self.index = index
        self.prompt_index = prompt_index
        self.engine_id = engine_id
        self.engine_index = 0  # the engine rank serving it (set on submit)
        self.prompt_token_ids = prompt_token_ids
        self.params = params
        self.detok = detok
        self.logprobs = logprobs
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None
        self.finished = False
        self.num_cached_tokens = 0  # the prefix cache's share of its prompt (prefill_stats)
        self.num_cache_creation_tokens: int | None = None
        # Tokens of the finishing step past a matched stop string (metrics count them).
        self.num_dropped = 0
        # Where each weight version took over: (version, first output position).
        self.weight_version: str | None = None
        self.weight_starts: list[tuple[str, int]] = []
        # Streaming: output tokens queued for the client so far (stream_interval).
        self.sent_tokens = 0
        # Its delta not taken by the client yet (queued or held): later steps
        # merge into it.
        self.open_delta: Delta | None = None
        # Streaming with a tool/reasoning parser (set by the handler): called
        # with each delta as it is queued, returns what goes in ``delta.parsed``.
        # A parsed delta is never merged with later steps: the parser sees
        # each engine output as vLLM's serving layer does.
        self.parser: Callable[[Delta], ParsedDelta | None] | None = None
        # Plain text, no logprobs, no parser (streamed: every step due): most
        # steps take the table's lean path (set by add_choice).
        self.lean = False
        self.pooled: NDArray | None = None  # a pooling input's result: the engine's tensor

    @property
    def token_ids(self) -> list[int]:
        return self.detok.token_ids if self.detok is not None else []

    def weight_spans(self) -> list[dict] | None:
        """``[{"version", "start", "end"}]``: which weights produced which positions."""
        starts = self.weight_starts
        if not starts:
            return None
        detok = cast("IncrementalDetokenizer", self.detok)  # (weights start on generated tokens)
        ends = [start for _, start in starts[1:]] + [len(detok.token_ids)]
        return [{"version": v, "start": s, "end": e} for (v, s), e in zip(starts, ends)]

    @property
    def text(self) -> str:
        return cast("IncrementalDetokenizer", self.detok).output_text  # (a generating choice)


class Group:
    """One client request: its choices, and what its handler is waiting for."""

    def __init__(
        self,
        request_id: str,
        stream: bool,
        max_pending: int = 1 << 20,
        arrival: float | None = None,
    ) -> None:
        self.request_id = request_id
        self.stream = stream
        self.choices: list[Choice] = []
        self.lora: LoRARequest | None = None  # the adapter every choice runs with
        self.created = time.time()
        # time.monotonic() when the request was taken up (before tokenization).
        self.arrival = time.monotonic() if arrival is None else arrival
        # W3C trace context headers for the engine (only with request tracing).
        self.trace_headers: dict[str, str] | None = None
        # The first prefill_stats any choice reported: (cached, cache creation) tokens.
        self.first_prefill: tuple[int, int | None] | None = None
        # The conversation the client names (body, X-Session-ID or vllm_xargs).
        self.session_id: str | None = None
        # A multimodal prompt's mm_features as vLLM's encoder framed them (the
        # msgpack list, then its tensors), sent with every choice's ADD.
        self.mm_features: list[bytes] | None = None
        # Non-streaming: each prompt's (kv_transfer_params, ec_transfer_params)
        # from its choice that finished last (vLLM's RequestOutput.add).
        self.transfer_params: dict[int, tuple[Any, Any]] = {}
        self.pending: list[Delta] = []
        self.max_pending = max_pending  # bytes of stream output a slow client may hold up
        self.num_unfinished = 0
        self.error: ApiError | None = None
        # Failed because the client does not read: what is queued for it is dropped.
        self.drop_unsent = False
        self.released = False
        # Set by a streaming handler: called with each step's deltas (but the
        # finishing step's, left to the handler), returns
        # (bytes not yet taken by the client, whether the handler must write).
        self.sink: Callable[[list[Delta]], tuple[int, bool]] | None = None
        self._woken = False
        self._waiter: asyncio.Future | None = None

    @property
    def done(self) -> bool:
        return self.num_unfinished == 0 or self.error is not None

    def wake(self) -> None:
        self._woken = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self) -> None:
        """Until woken (deltas, backlog, the end) since the last wait."""
        if not self._woken and not self.done:
            await self._sleep()
        self._woken = False

    async def wait_done(self) -> None:
        while not self.done:
            await self._sleep()

    async def _sleep(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def take(self) -> list[Delta]:
        pending, self.pending = self.pending, []
        for delta in pending:
            # (Delta.close, the common case inlined: a call per token)
            choice = delta.choice
            if choice.open_delta is delta:
                choice.open_delta = None
            if delta._texts is not None:
                delta.close()
        return pending
