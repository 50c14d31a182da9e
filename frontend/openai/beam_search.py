"""``use_beam_search`` on /v1/completions and /v1/chat/completions, as vLLM 0.32 does it.

vLLM searches in its frontend (``vllm/entrypoints/generate/beam_search/``),
over ordinary engine requests; so does this module, through the fan-out table:

* each step sends one engine request per live beam (the whole sequence as the
  prompt, ``max_tokens=1``, ``logprobs=2 * n``, the request's temperature,
  nothing else), all at once, and waits for all of them; every one is a
  choice of a table group, so a client that leaves aborts it;
* each beam's candidates are the entries of its step's logprob dict, the
  sampled token first (``frontend.text.make_position``); the tokenizer's EOS
  among them (unless ``ignore_eos``) completes a sequence at once, however low
  it ranks; the ``n`` best other candidates by cumulative logprob go on;
* after ``max_tokens`` steps (no early stopping) the completed sequences and
  the live beams are ranked by ``cumulative_logprob / len ** length_penalty``,
  where ``len`` counts the prompt too (minus a final EOS), and the best ``n``
  are returned, each with its own step dicts as its logprobs.

Ties: vLLM ranks candidates with numpy's unstable ``argsort``/``argpartition``
(whose order among exactly equal float64 values depends on the CPU's SIMD
sort); candidates with equal values keep their candidate order here. The
final ranking is a stable sort in both.

The result becomes an already finished table group of :class:`BeamChoice`,
which the endpoint's own view renders: a chat stream is the whole result sent
at once, after the search, as vLLM sends it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web

from frontend.choices import Choice, Delta, Group
from frontend.errors import ApiError, from_validation, invalid
from frontend.ids import random_hex
from frontend.openai.request_fields import SamplingRequest
from frontend.openai.sampling import finalize, get_max_tokens
from frontend.state import AppState
from frontend.text import Position
from protocol.errors import ValidationError
from protocol.lora import LoRARequest
from protocol.sampling import MAX_N_SEQUENCES, OutputKind, SamplingParams, check


def check_not_streaming(req: SamplingRequest) -> None:
    """/v1/completions refuses a beam search stream (chat pseudo-streams it)."""
    if req.use_beam_search and req.stream:
        raise ApiError("Streaming is not currently supported with beam search")


@dataclass(frozen=True)
class BeamParams:
    """vLLM's BeamSearchParams: the request fields a search uses."""

    width: int
    ignore_eos: bool
    temperature: float
    length_penalty: float
    include_stop_str_in_output: bool
    skip_special_tokens: bool

    @classmethod
    def from_request(cls, req: SamplingRequest, defaults: dict[str, Any]) -> BeamParams:
        width = req.n if req.n is not None else 1
        if width < 1:
            raise invalid(f"beam_width must be at least 1, got {width}.")
        if width > MAX_N_SEQUENCES:
            raise invalid(
                f"beam_width must be at most {MAX_N_SEQUENCES}, got {width}. To "
                "increase this limit, set the VLLM_MAX_N_SEQUENCES environment "
                "variable."
            )
        temperature = req.temperature
        if temperature is None:
            temperature = defaults.get("temperature", 1.0)
        return cls(
            width,
            bool(req.ignore_eos),
            temperature,
            req.length_penalty,
            bool(req.include_stop_str_in_output),
            bool(req.skip_special_tokens),
        )


class Beam:
    __slots__ = ("tokens", "cumulative_logprob", "logprobs", "finish_reason", "stop_reason")

    def __init__(
        self,
        tokens: list[int],
        cumulative_logprob: float,
        logprobs: list[Position],
        finish_reason: str | None = None,
        stop_reason: int | None = None,
    ) -> None:
        self.tokens = tokens
        self.cumulative_logprob = cumulative_logprob
        self.logprobs = logprobs
        self.finish_reason = finish_reason
        self.stop_reason = stop_reason


class BeamLogprobs:
    """What a view reads of a choice's logprobs: one dict per output token."""

    __slots__ = ("sample", "prompt")

    def __init__(self, sample: list[Position]) -> None:
        self.sample = sample
        self.prompt = None  # beam search computes no prompt logprobs


class BeamChoice:
    """One returned beam, shaped like a finished table choice for the views."""

    __slots__ = (
        "index",
        "prompt_index",
        "prompt_token_ids",
        "text",
        "token_ids",
        "logprobs",
        "finish_reason",
        "stop_reason",
        "cumulative_logprob",
        "open_delta",
    )

    def __init__(
        self, index: int, prompt_index: int, prompt_token_ids: list[int], text: str, beam: Beam
    ) -> None:
        self.index = index
        self.prompt_index = prompt_index
        self.prompt_token_ids = prompt_token_ids
        self.text = text
        self.token_ids = beam.tokens[len(prompt_token_ids) :]
        self.logprobs = BeamLogprobs(beam.logprobs)
        self.finish_reason = beam.finish_reason or "length"
        self.stop_reason = beam.stop_reason
        self.cumulative_logprob = beam.cumulative_logprob
        self.open_delta = None


# ---------------------------------------------------------------------------- serving


async def serve(
    state: AppState,
    request: web.Request,
    req: SamplingRequest,
    request_id: str,
    prompts: list[list[int]],
    requested_max_tokens: int | None,
    lora: LoRARequest | None,
    make_view: Callable[[Group], Any],
) -> web.StreamResponse:
    """Search every prompt (concurrently), then answer with the endpoint's view."""
    model = state.model
    params = BeamParams.from_request(req, model.default_sampling)
    step = step_params(state, params)
    max_model_len = state.max_model_len
    max_tokens = [
        get_max_tokens(
            max_model_len,
            requested_max_tokens,
            len(ids),
            model.default_sampling,
            model.override_max_tokens,
        )
        for ids in prompts
    ]
    searches = [
        search(state, request_id, ids, params, step, limit, lora, req.cache_salt)
        for ids, limit in zip(prompts, max_tokens)
    ]
    if len(searches) == 1:
        results = [await searches[0]]
    else:
        try:
            async with asyncio.TaskGroup() as tasks:  # one failure cancels the others
                running = [tasks.create_task(s) for s in searches]
        except BaseExceptionGroup as group_error:
            raise group_error.exceptions[0] from None
        results = [t.result() for t in running]
    group = Group(request_id, stream=bool(req.stream))
    # The views read BeamChoices as finished choices (the same attributes).
    beam_choices = cast("list[BeamChoice]", group.choices)
    for p_idx, (ids, beams) in enumerate(zip(prompts, results)):
        for j, beam in enumerate(beams):
            beam_choices.append(
                BeamChoice(
                    p_idx * params.width + j, p_idx, ids, beam_text(state, beam, ids, params), beam
                )
            )
    view = make_view(group)
    if group.stream:
        group.pending = [
            Delta(
                cast(Choice, c),
                c.text,
                c.token_ids,
                c.logprobs.sample,
                c.finish_reason,
                c.stop_reason,
            )
            for c in cast("list[BeamChoice]", group.choices)
        ]
        return await view.stream(request)
    return web.Response(body=state.json(view.full_response()), content_type="application/json")


def step_params(state: AppState, params: BeamParams) -> SamplingParams:
    """The engine request of one beam and step (vLLM's, with its EOS fields)."""
    sp = finalize(
        SamplingParams(
            logprobs=2 * params.width,
            max_tokens=1,
            temperature=params.temperature,
            watermarking=False,
            detokenize=False,
            output_kind=OutputKind.FINAL_ONLY,
        ),
        state.model,
    )
    try:  # e.g. 2 * n over --max-logprobs: refused before any engine request
        check(sp, state.model_limits())
    except ValidationError as e:
        raise from_validation(e) from e
    return sp


def beam_text(state: AppState, beam: Beam, prompt: list[int], params: BeamParams) -> str:
    generated = beam.tokens[len(prompt) :]
    if generated and generated[-1] == state.model.eos_token_id and not params.ignore_eos:
        generated = generated[:-1]  # an included EOS is not part of the text
    return state.model.decode(generated, skip_special_tokens=params.skip_special_tokens)


# ---------------------------------------------------------------------------- search


async def search(
    state: AppState,
    request_id: str,
    prompt: list[int],
    params: BeamParams,
    step: SamplingParams,
    max_tokens: int,
    lora: LoRARequest | None,
    cache_salt: str | None,
) -> list[Beam]:
    """The ``params.width`` best sequences for one prompt, best first."""
    eos = state.model.eos_token_id
    stop_at_eos = not params.ignore_eos
    beams = [Beam(list(prompt), 0, [])]
    completed: list[Beam] = []
    for _ in range(max_tokens):
        positions = await run_step(state, request_id, beams, step, lora, cache_salt)
        if positions is None:  # the engine aborted a step: what there is, is the answer
            for beam in beams:
                beam.finish_reason = "abort"
            break
        candidates: list[tuple[float, int, Beam, Position]] = []
        for beam, position in zip(beams, positions):
            for token, (logprob, _, _) in position.items():
                cumulative = beam.cumulative_logprob + logprob
                if token == eos and stop_at_eos:
                    tokens = (
                        beam.tokens + [eos] if params.include_stop_str_in_output else beam.tokens
                    )
                    completed.append(
                        Beam(tokens, cumulative, beam.logprobs + [position], "stop", eos)
                    )
                else:
                    candidates.append((cumulative, token, beam, position))
        best = sorted(candidates, key=_by_logprob, reverse=True)[: params.width]
        beams = [
            Beam(beam.tokens + [token], cumulative, beam.logprobs + [position])
            for cumulative, token, beam, position in best
        ]
        if not beams:
            break
    completed.extend(beams)
    completed.sort(key=lambda b: score(b, eos, params.length_penalty), reverse=True)
    return completed[: params.width]


def _by_logprob(candidate: tuple[float, int, Beam, Position]) -> float:
    return candidate[0]


def score(beam: Beam, eos: int | None, length_penalty: float) -> float:
    """vLLM's get_beam_search_score: the prompt counts in the length."""
    length = len(beam.tokens)
    if beam.tokens[-1] == eos:
        length -= 1
    return beam.cumulative_logprob / (max(length, 1) ** length_penalty)


async def run_step(
    state: AppState,
    request_id: str,
    beams: list[Beam],
    step: SamplingParams,
    lora: LoRARequest | None,
    cache_salt: str | None,
) -> list[Position] | None:
    """One engine request per beam, concurrently; each beam's logprob dict, or
    None if the engine aborted any of them. Whatever happens (error, client
    gone), every request of the step is finished or aborted when this returns."""
    table = state.table
    group = Group(f"{request_id}-{random_hex(8)}", stream=False)
    group.lora = lora
    for i, beam in enumerate(beams):
        # Each beam is a prompt of its own (n=1 in metrics, as each is in vLLM).
        table.add_choice(group, index=i, prompt_index=i, prompt_token_ids=beam.tokens, params=step)
    try:
        try:
            table.submit(group, cache_salt=cache_salt)
        except ValidationError as e:
            raise from_validation(e) from e
        await group.wait_done()
        if group.error is not None:
            raise group.error
        if any(c.finish_reason == "abort" for c in group.choices):
            return None
        # The dicts as vLLM's frontend builds them without a tokenizer: token
        # texts are each id decoded alone (no repair of split characters).
        single = table.token_texts.single
        return [
            {
                token: (logprob, rank, single(token))
                for token, (logprob, rank, _) in (
                    c.logprobs.sample[0] if c.logprobs and c.logprobs.sample else {}
                ).items()
            }
            for c in group.choices
        ]
    finally:
        table.release(group)
