"""The fan-out table: every client request's engine requests, keyed by engine id.

One HTTP request becomes a ``Group`` of ``len(prompts) * n`` ``Choice``s; choice
``(request_id, index)`` is one engine request whose id is derived from both.
The engine reader calls :meth:`Table.on_outputs` once per engine message: each
output is routed to its choice, detokenized and stop-checked right there (work
per engine step, not per client), and every touched group is woken once.

Under data parallel every group goes to one engine rank, chosen by the router
(``routing.py``) when it is submitted; aborts go to the rank that owns the
request, and a rank that is lost fails only its own groups.

Invariants (tests check the table is empty after every request):
* an entry exists only while its engine request may still produce output;
* an entry leaves the table when the engine finishes it, when we abort it
  (client gone, stop string, failed sibling, slow consumer) or when its
  engine rank is lost; aborts go only to engine requests that have not
  finished;
* the router's in-flight count of a rank is the number of its entries.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, cast

from frontend.choices import Choice, Delta, Group
from frontend.errors import ApiError, engine_failure, internal_error
from frontend.ids import random_hex
from frontend.routing import Router
from frontend.text import IncrementalDetokenizer, LogprobsState, Position, TokenTexts
from protocol import wire
from protocol.sampling import ModelLimits, SamplingParams

if TYPE_CHECKING:
    from frontend.model import ModelInfo
    from protocol.pooling import PoolingParams

log = logging.getLogger("frontend.fanout")

FINISH_STOP = wire.FinishReason.STOP
FINISH_ABORT = wire.FinishReason.ABORT
FINISH_ERROR = wire.FinishReason.ERROR
FINISH_NAMES = wire.FINISH_REASON_NAMES
RECENTLY_GONE_MAX = 8192


class Engine(Protocol):
    """What the table needs of the engine link."""

    def send_add(
        self, frames: list[bytes], rank: int, on_failed: Callable[[str], None] | None = None
    ) -> None: ...  # queued: a send refused later calls on_failed

    def abort(self, rank: int, request_ids: Sequence[str]) -> bool: ...

    def routable_ranks(self) -> list[int]: ...

    def reject(self, reason: str, detail: str = "") -> None: ...  # count a dropped output


class TableObserver(Protocol):
    """Told about every request's life, once per engine step at most (metrics):
    ``on_step`` before the step's outputs are routed, ``on_choice_finished``
    while they are (an engine ERROR included)."""

    def on_submit(self, group: Group) -> None: ...

    def on_step(self, outs: wire.StepOutputs) -> None: ...

    def on_choice_finished(self, choice: Choice) -> None: ...

    def on_slow_consumer(self, group: Group) -> None: ...

    def on_release(self, group: Group) -> None: ...


class Table:
    """All live engine requests of this frontend."""

    def __init__(
        self,
        engine: Engine,
        model: ModelInfo,
        limits: Callable[[], ModelLimits],
        router: Router | None = None,
        observer: TableObserver | None = None,
        client_index: int = 0,
        num_clients: int = 1,
    ) -> None:
        self.engine = engine
        self.model = model
        self._limits = limits
        self.router = router or Router()
        # This frontend process among several (--api-server-count): the engine
        # replies on its output socket, and its engine ids carry its index so
        # that no two processes ever send the engine the same id.
        self.client_index = client_index
        self.num_clients = num_clients
        self._id_tag = f"w{client_index}" if num_clients > 1 else ""
        self.entries: dict[str, Choice] = {}
        self.token_texts = TokenTexts(model)
        # Engine ids this process aborted or saw finish recently: a late output
        # for one of them is expected and must not trigger another ABORT.
        self._recently_gone: dict[str, None] = {}
        self.observer = observer

    def __len__(self) -> int:
        return len(self.entries)

    # ------------------------------------------------------------ submit
    def new_engine_id(self, request_id: str, prompt_index: int, sample: int) -> str:
        # vLLM's shape: "<sample>_<request id>-<prompt>-<random>"; random part
        # keeps ids unique even when clients reuse request ids.
        while True:
            eid = f"{sample}_{request_id}-{prompt_index}-{self._id_tag}{random_hex(4)}"
            if eid not in self.entries:
                return eid

    def add_choice(
        self,
        group: Group,
        *,
        index: int,
        prompt_index: int,
        prompt_token_ids: list[int],
        params: SamplingParams,
    ) -> Choice:
        """Create (not yet send) one choice of ``group``."""
        detok = IncrementalDetokenizer(
            self.model,
            prompt_token_ids,
            skip_special_tokens=params.skip_special_tokens,
            spaces_between_special_tokens=params.spaces_between_special_tokens,
            stop=params.stop,
            min_tokens=params.min_tokens,
            include_stop_str_in_output=params.include_stop_str_in_output,
        )
        logprobs = None
        # vLLM's SamplingParams.num_logprobs: logprob_token_ids alone also asks
        # for sample logprobs (one per listed id).
        num_logprobs = params.logprobs
        if num_logprobs is None and params.logprob_token_ids:
            num_logprobs = len(params.logprob_token_ids)
        if num_logprobs is not None or params.prompt_logprobs is not None:
            logprobs = LogprobsState(self.token_texts, num_logprobs, params.prompt_logprobs)
        choice = Choice(
            group,
            index,
            prompt_index,
            self.new_engine_id(group.request_id, prompt_index, index),
            prompt_token_ids,
            params,
            detok,
            logprobs,
        )
        # Its one-token steps may take the table's lean path (on_outputs).
        choice.lean = (
            detok.plain
            and logprobs is None
            and (not group.stream or (params.stream_interval or 1) <= 1)
        )
        group.choices.append(choice)
        return choice

    def submit(
        self,
        group: Group,
        *,
        priority: int = 0,
        cache_salt: str | None = None,
        reasoning_ended: bool | None = None,
        reasoning_parser_kwargs: dict | None = None,
    ) -> None:
        """Validate and encode every engine request first; only then send any,
        all to the one rank the router picks.

        A batch with one bad prompt is rejected as a whole, before the engine
        sees anything (it would die on some invalid requests).
        """
        limits = self._limits()
        arrival = time.time()
        mm_features, mm_frames = wire.split_features(group.mm_features)
        frames = [
            wire.encode_add(
                wire.EngineCoreRequest(
                    c.engine_id,
                    c.prompt_token_ids,
                    mm_features,
                    # sampling or pooling params (a pooling choice has no detokenizer):
                    *cast(
                        "tuple[SamplingParams | None, PoolingParams | None]",
                        (c.params, None) if c.detok is not None else (None, c.params),
                    ),
                    arrival,
                    group.lora,
                    cache_salt,
                    None,
                    client_index=self.client_index,
                    priority=priority,
                    trace_headers=group.trace_headers,
                    external_req_id=group.request_id,
                    session_id=group.session_id,
                    reasoning_ended=reasoning_ended,
                    reasoning_parser_kwargs=reasoning_parser_kwargs,
                ),
                limits,
            )
            + mm_frames
            for c in group.choices
        ]
        candidates = self.engine.routable_ranks()
        if not candidates:
            group.error = engine_failure("no engine rank is attached")
            raise group.error
        prompts = list({id(c.prompt_token_ids): c.prompt_token_ids for c in group.choices}.values())
        rank = self.router.pick(prompts, candidates)
        self.router.remember(rank, prompts)
        for choice in group.choices:
            choice.engine_index = rank
            self._enter(choice)
        group.num_unfinished += len(group.choices)

        def failed(reason: str) -> None:
            self._fail_group(group, engine_failure(reason))

        for frame in frames:
            try:
                self.engine.send_add(frame, rank, failed)
            except Exception as e:
                self._fail_group(group, engine_failure(str(e)))
                raise cast(ApiError, group.error) from e  # (set by _fail_group)
        if self.observer:
            self.observer.on_submit(group)

    def _enter(self, choice: Choice) -> None:
        self.entries[choice.engine_id] = choice
        self.router.started(choice.engine_index)

    def _drop(self, choice: Choice) -> bool:
        """Take an entry out of the table; False if it was gone already."""
        if self.entries.pop(choice.engine_id, None) is None:
            return False
        self.router.finished(choice.engine_index)
        return True

    def in_flight(self, rank: int) -> int:
        return self.router.ranks[rank].in_flight

    # ------------------------------------------------------------ outputs
    def on_outputs(self, batch: list[wire.StepOutputs]) -> None:
        """Route the engine messages read in one wake-up; then wake or write to
        each affected client once."""
        touched: dict[int, Group] = {}
        entries = self.entries
        observer = self.observer
        several_ranks = len(self.router.ranks) > 1  # (one rank: the link checked the index)
        for outs in batch:
            if observer:
                observer.on_step(outs)
            weight_version = outs.weight_version
            rank = outs.engine_index
            for out in outs.outputs:
                choice = entries.get(out.request_id)
                if choice is None:
                    self._on_unknown_output(out, rank)
                    continue
                if several_ranks and choice.engine_index != rank:  # not its engine
                    self.engine.reject("wrong_rank", f"rank {rank}: {out.request_id[:80]}")
                    continue
                group = choice.group
                new_ids = out.new_token_ids
                if (
                    choice.lean
                    and len(new_ids) == 1
                    and out.finish_reason is None
                    and not out.prefill_stats
                    # (vLLM's engine names its weights in every message: a change
                    # marks where the new version starts, which _apply notes)
                    and (choice.weight_version == weight_version or weight_version is None)
                    and choice.parser is None
                ):
                    # The common step, what _apply (and _stream_step) do for it
                    # without their checks: one token's text, kept for the
                    # response or, streaming, due at once, in a delta of its
                    # own or added to the one still waiting for the client (a
                    # lean choice's deltas are all due, hence queued, and
                    # carry no logprobs).
                    # (lean: a generating choice; no cast(): a call per token)
                    detok: IncrementalDetokenizer = choice.detok  # type: ignore[assignment]
                    if not group.stream:
                        detok.append_one(new_ids[0])
                    elif (delta := choice.open_delta) is None:
                        delta = choice.open_delta = Delta(
                            choice, detok.step_text(new_ids[0]), new_ids, None, None, None
                        )
                        delta.queued = True
                        group.pending.append(delta)
                    else:
                        delta.merge(detok.step_text(new_ids[0]), new_ids, None, None, None)
                else:
                    self._apply(choice, out, weight_version)
                if group.stream or group.done:  # non-streaming handlers wait for the end
                    touched[id(group)] = group
            if len(outs.scheduler_stats) > 1:
                self.router.on_stats(outs.engine_index, outs.scheduler_stats)
        for group in touched.values():
            sink = group.sink
            # (a finished group's last deltas go out with its closing events,
            # written by its handler)
            # (not group.done, spelled out: a property call per token)
            if sink is not None and group.pending and group.num_unfinished and group.error is None:
                try:
                    # Straight to the client's socket, unless it lags.
                    unsent, queued = sink(group.take())
                except Exception:  # a formatting bug must not stop the engine reader
                    log.exception("streaming %s failed", group.request_id)
                    self._fail_group(group, internal_error())
                    continue
                if unsent > group.max_pending:
                    self._fail_slow_consumer(group)
                    continue
                if not queued:  # (a sink cannot finish its group)
                    continue
            group.wake()

    def _apply(
        self, choice: Choice, out: wire.EngineCoreOutput, weight_version: str | None
    ) -> None:
        group = choice.group
        finish = out.finish_reason
        if finish == FINISH_ERROR:  # the engine has freed it: never abort it
            self._finish(choice, finish, None)
            self._fail_group(group, internal_error())
            return
        if out.prefill_stats:  # the first output of a request
            stats = out.prefill_stats
            choice.num_cached_tokens = stats.get("num_cached_tokens", 0)
            choice.num_cache_creation_tokens = stats.get("num_cache_creation_tokens")
            if group.first_prefill is None:
                group.first_prefill = (choice.num_cached_tokens, choice.num_cache_creation_tokens)
        if choice.detok is None:  # pooling (detok None): one output, with the tensor
            choice.pooled = out.pooling_output
            if finish is not None:
                self._finish(choice, finish, out.stop_reason)
            return
        new_ids = out.new_token_ids
        stop_reason = out.stop_reason
        num_prev = len(choice.detok.token_ids)
        matched = choice.detok.update(new_ids, finish == FINISH_STOP)
        if matched is not None:
            new_ids = new_ids[: len(choice.detok.token_ids) - num_prev]
            choice.num_dropped = len(out.new_token_ids) - len(new_ids)
            if finish is None:  # the engine knows no stop strings
                self._abort(choice.engine_index, [choice.engine_id])
            finish, stop_reason = FINISH_STOP, matched
        if weight_version != choice.weight_version and new_ids and weight_version is not None:
            choice.weight_version = weight_version
            choice.weight_starts.append(
                (weight_version, len(choice.detok.token_ids) - len(new_ids))
            )
        new_positions: list[Position] | None = None
        if choice.logprobs is not None:
            new_positions = self._apply_logprobs(choice.logprobs, out, len(new_ids))
        finished = finish is not None
        if finish is not None:  # (finished)
            if not group.stream:  # (streams never carry them, as vLLM's)
                group.transfer_params[choice.prompt_index] = (
                    out.kv_transfer_params,
                    out.ec_transfer_params,
                )
            self._finish(choice, finish, stop_reason)
        if group.stream:
            text = choice.detok.next_text(finished)
            if text or new_ids or finished:
                try:
                    self._stream_step(
                        choice,
                        text,
                        new_ids,
                        new_positions,
                        finished,
                        stop_reason if finished else None,
                    )
                except Exception:  # a parser bug must not stop the engine reader
                    log.exception("streaming %s failed", group.request_id)
                    self._fail_group(group, internal_error())

    def _finish(self, choice: Choice, finish: int, stop_reason: int | str | None) -> None:
        choice.finished = True
        choice.finish_reason = FINISH_NAMES[finish]
        choice.stop_reason = stop_reason
        self._drop(choice)
        choice.group.num_unfinished -= 1
        if self.observer:
            self.observer.on_choice_finished(choice)

    @staticmethod
    def _stream_step(
        choice: Choice,
        text: str,
        new_ids: list[int],
        new_positions: list[Position] | None,
        finished: bool,
        stop_reason: int | str | None,
    ) -> None:
        """Merge a step into the choice's open delta, or start one, and queue it
        for the client when it is due. With ``stream_interval`` (vLLM's output
        processor) a delta is due at once for the first tokens, then every
        ``interval`` tokens, and at the finish: steps in between are held in a
        delta of their own, so chunks end only where the rule allows, however
        far the client lags."""
        group = choice.group
        # (a streamed step: a generating choice, with its detokenizer and SamplingParams)
        # (no cast(): a call per step)
        detok: IncrementalDetokenizer = choice.detok  # type: ignore[assignment]
        params: SamplingParams = choice.params  # type: ignore[assignment]
        num_tokens = len(detok.token_ids)
        interval = params.stream_interval or 1
        due = (
            interval <= 1
            or finished
            or not choice.sent_tokens
            or num_tokens - choice.sent_tokens >= interval
        )
        delta = choice.open_delta
        parser = choice.parser
        if (
            delta is not None
            and (delta.logprobs is None) == (new_positions is None)
            and (not delta.queued if parser is not None else due or not delta.queued)
        ):
            delta.merge(text, new_ids, new_positions, choice.finish_reason, stop_reason)
        else:
            if delta is not None and not delta.queued:  # cannot merge: let it go as it is
                delta.queued = True
                if parser is not None:
                    delta.close()
                    delta.parsed = parser(delta)
                group.pending.append(delta)
            delta = choice.open_delta = Delta(
                choice, text, new_ids, new_positions, choice.finish_reason, stop_reason
            )
        if due:
            choice.sent_tokens = num_tokens
            if not delta.queued:
                delta.queued = True
                if parser is not None:
                    delta.close()
                    delta.parsed = parser(delta)
                group.pending.append(delta)

    @staticmethod
    def _apply_logprobs(
        state: LogprobsState, out: wire.EngineCoreOutput, num_tokens: int
    ) -> list[Position] | None:
        if out.new_prompt_logprobs_tensors is not None and state.prompt is not None:
            t = out.new_prompt_logprobs_tensors
            state.add_prompt(t.token_ids.rows(), t.logprobs.rows(), t.ranks.flat())
        if out.new_logprobs is None or state.num_logprobs is None:
            return None
        lp = out.new_logprobs
        # Tokens past a matched stop string are dropped with their logprobs.
        return state.add_sample(
            lp.token_ids.rows()[:num_tokens],
            lp.logprobs.rows()[:num_tokens],
            lp.ranks.flat()[:num_tokens],
        )

    def _on_unknown_output(self, out: wire.EngineCoreOutput, rank: int) -> None:
        """A request this process does not track: aborted here, or left over by a
        previous frontend process before a re-attach. Stop the latter. Outputs
        the engine queued while no frontend ran arrive before the re-attach
        completes, when an abort cannot be sent yet: the request's next output
        asks again (marking it gone now would ignore that one)."""
        rid = out.request_id
        if rid in self._recently_gone:  # aborted here: its last outputs were on their way
            return
        self.engine.reject("unknown_request", f"rank {rank}: {rid[:80]!r}")
        if out.finish_reason is None:
            self._abort(rank, [rid])

    def _abort(self, rank: int, ids: list[str]) -> None:
        """ABORT engine requests of ``rank``; late outputs for them are expected.
        (Outputs of a rank being re-attached arrive before it is: their ids are
        not noted, so the next output of each is aborted once it is.)"""
        if not self.engine.abort(rank, ids):
            return
        gone = self._recently_gone
        for rid in ids:
            gone[rid] = None
        while len(gone) > RECENTLY_GONE_MAX:
            del gone[next(iter(gone))]

    def _drop_unfinished(self, group: Group) -> None:
        """Take the group's unfinished entries out and ABORT them in the engine
        (a group's choices all run on one rank)."""
        unfinished = [c.engine_id for c in group.choices if not c.finished and self._drop(c)]
        if unfinished:
            self._abort(group.choices[0].engine_index, unfinished)

    # ------------------------------------------------------------ teardown
    def release(self, group: Group) -> None:
        """Handler exit (normal, error or disconnect): nothing may stay behind."""
        if group.released:
            return
        group.released = True
        self._drop_unfinished(group)
        group.num_unfinished = 0
        if self.observer:
            self.observer.on_release(group)
        # Break the group <-> choice cycle now, so that a request's memory goes
        # at once instead of waiting for a (deliberately rare) full collection.
        for c in group.choices:
            c.group = None  # type: ignore[assignment]  # (released: nothing reads it now)

    def _fail_slow_consumer(self, group: Group) -> None:
        group.drop_unsent = True
        self._fail_group(
            group,
            ApiError(
                "the client is not reading its stream; request aborted",
                503,
                "ServiceUnavailableError",
            ),
        )
        if self.observer:
            self.observer.on_slow_consumer(group)

    def _fail_group(self, group: Group, error: ApiError) -> None:
        """Fail a group and abort its other engine requests (a sibling failed)."""
        if group.error is None:
            group.error = error
        self._drop_unfinished(group)
        for c in group.choices:
            c.finished = True
        group.num_unfinished = 0
        group.wake()

    def fail_rank(self, rank: int, reason: str) -> None:
        """Engine rank ``rank`` is lost (dead or stalled): its groups end with an
        error now; their engine requests are aborted if the rank can still hear
        it (a stalled rank that resumes then frees them)."""
        groups = {id(c.group): c.group for c in self.entries.values() if c.engine_index == rank}
        for group in groups.values():
            self._fail_group(group, engine_failure(reason))
        self.router.forget(rank)

    def abort_choices(self, choices: Sequence[Choice]) -> None:
        """End ``choices`` as the engine ends the requests it aborts (vLLM's
        abort by external id: /abort_requests): each gets a last output with
        finish reason "abort" and no tokens, so its stream ends with its final
        chunk and a waiting response has it; the engine gets an ABORT. The
        observer is not told (vLLM's output processor records nothing for the
        requests it aborts itself)."""
        by_rank: dict[int, list[Choice]] = {}
        for c in choices:
            by_rank.setdefault(c.engine_index, []).append(c)
        observer, self.observer = self.observer, None
        try:
            for rank, ranked in by_rank.items():
                self._abort(rank, [c.engine_id for c in ranked])
                outputs = [
                    wire.EngineCoreOutput(c.engine_id, [], finish_reason=FINISH_ABORT)
                    for c in ranked
                ]
                self.on_outputs(
                    [
                        wire.StepOutputs(
                            engine_index=rank, outputs=outputs, timestamp=time.monotonic()
                        )
                    ]
                )
        finally:
            self.observer = observer

    def abort_all(self, reason: str) -> None:
        """Shutdown without draining: every group in flight fails, and every
        unfinished engine request is aborted."""
        groups = {id(c.group): c.group for c in self.entries.values()}
        for group in groups.values():
            self._fail_group(group, engine_failure(reason))
