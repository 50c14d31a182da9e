"""vLLM 0.32's ``SamplingParams`` as it travels in an ADD, and its validation.

The engine decodes this map in its input thread *outside* any error handler and
runs ``SamplingParams.__post_init__`` there: a value that fails
``_verify_args`` kills the input thread and the engine silently stops reading.
So every rule is mirrored here and :func:`encode_add` refuses to encode a
request that has not passed :func:`check`. Messages match vLLM's text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgspec

from protocol.errors import ValidationError
from protocol.structured import StructuredOutputsParams
from protocol.structured import check as check_structured

# vLLM 0.32 constants (vllm/sampling_params.py, vllm/envs.py).
SAMPLING_EPS = 1e-5
MIN_TEMPERATURE = 1e-2
MAX_N_SEQUENCES = 16384
MAX_LOGPROB_TOKEN_IDS = 128
MAX_NUM_BAD_WORDS = 128
# validate_thinking_token_budget's text (the engine runs it while decoding).
THINKING_BUDGET_MESSAGE = (
    "`thinking_token_budget` must be a non-negative integer or -1 for unlimited."
)


class OutputKind:
    """``RequestOutputKind``; only the frontend reads it, the engine stores it."""

    CUMULATIVE = 0
    DELTA = 1
    FINAL_ONLY = 2


class RepetitionDetection(msgspec.Struct, omit_defaults=True):
    max_pattern_size: int = 0
    min_pattern_size: int = 0
    min_count: int = 0


class SamplingParams(msgspec.Struct, omit_defaults=True, kw_only=True):
    """The wire map. Field names and defaults are vLLM's; defaults are omitted.

    Private vLLM fields (``_eos_token_id`` ...) are ordinary keys on the wire;
    msgspec renames them since Python attributes cannot start with ``_`` here.
    """

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    watermarking: bool | None = None
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    stop: list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    max_tokens: int | None = 16
    min_tokens: int = 0
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: list[int] | None = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    output_kind: int = OutputKind.CUMULATIVE
    stream_interval: int | None = None
    eos_token_id: int | None = msgspec.field(default=None, name="_eos_token_id")
    all_stop_token_ids: list[int] = msgspec.field(default_factory=list, name="_all_stop_token_ids")
    structured_outputs: StructuredOutputsParams | None = None
    logit_bias: dict[int, float] | None = None
    allowed_token_ids: list[int] | None = None
    extra_args: dict[str, Any] | None = None
    bad_words: list[str] | None = None
    bad_words_token_ids: list[list[int]] | None = msgspec.field(
        default=None, name="_bad_words_token_ids"
    )
    skip_reading_prefix_cache: bool | None = None
    # A reasoning model's thinking budget (the engine enforces it only when it
    # was started with a reasoning config).
    thinking_token_budget: int | None = None
    repetition_detection: RepetitionDetection | None = None
    # Leave out the first N prompt tokens of the routed-experts data the engine
    # returns (--enable-return-routed-experts).
    routed_experts_prompt_start: int = 0


@dataclass(frozen=True)
class ModelLimits:
    """What the frontend knows about the served model to validate against."""

    vocab_size: int
    max_model_len: int
    max_logprobs: int = 20  # vLLM's --max-logprobs default; -1 = vocab size
    max_n: int = MAX_N_SEQUENCES
    # Frontend clients the engine was told of (its output sockets): a request
    # naming another client_index kills the engine's output thread.
    num_clients: int = 1


def normalize(p: SamplingParams) -> None:
    """Apply ``SamplingParams.__post_init__``'s normalisation (before checks)."""
    if 0 < p.temperature < MIN_TEMPERATURE:
        p.temperature = MIN_TEMPERATURE
    if p.seed == -1:
        p.seed = None
    if p.stop_token_ids is not None:
        p.stop_token_ids = list(dict.fromkeys(p.stop_token_ids))
    if p.bad_words is not None:
        p.bad_words = list(dict.fromkeys(p.bad_words))
    if p.logit_bias:
        p.logit_bias = {k: min(100.0, max(-100.0, v)) for k, v in p.logit_bias.items()}
    if p.thinking_token_budget == -1:  # unlimited
        p.thinking_token_budget = None


def check(p: SamplingParams, limits: ModelLimits | None = None) -> None:
    """Raise :class:`ValidationError` for anything vLLM 0.32 would reject.

    Mirrors ``_verify_args``, ``_verify_greedy_sampling`` and (given ``limits``)
    the model-dependent ``SamplingParams.verify`` checks vLLM's frontend runs.
    """
    _check_args(p, limits.max_n if limits else MAX_N_SEQUENCES)
    if limits is not None:
        _check_against_model(p, limits)


def _check_args(p: SamplingParams, max_n: int) -> None:
    # Type rules of _verify_args get vLLM's text. bool is refused too: the
    # engine's msgspec decoder rejects it for an int field (vLLM's constructor
    # does not).
    if type(p.n) is not int:
        raise ValidationError(f"n must be an int, but is of type {type(p.n)}")
    if p.n < 1:
        raise ValidationError(f"n must be at least 1, got {p.n}.")
    if p.n > max_n:
        raise ValidationError(
            f"n must be at most {max_n}, got {p.n}. To increase this limit, "
            "set the VLLM_MAX_N_SEQUENCES environment variable."
        )
    if p.extra_args:
        _check_extra_args(p.extra_args)
    if not -2.0 <= p.presence_penalty <= 2.0:
        raise ValidationError(f"presence_penalty must be in [-2, 2], got {p.presence_penalty}.")
    if not -2.0 <= p.frequency_penalty <= 2.0:
        raise ValidationError(f"frequency_penalty must be in [-2, 2], got {p.frequency_penalty}.")
    if not math.isfinite(p.repetition_penalty):
        raise ValidationError(
            f"repetition_penalty must be a finite number, got {p.repetition_penalty}."
        )
    if p.repetition_penalty <= 0.0:
        raise ValidationError(
            f"repetition_penalty must be greater than zero, got {p.repetition_penalty}."
        )
    if not math.isfinite(p.temperature):
        raise ValidationError(
            f"temperature must be a finite number, got {p.temperature}.",
            parameter="temperature",
            value=p.temperature,
        )
    if p.temperature < 0.0:
        raise ValidationError(
            f"temperature must be non-negative, got {p.temperature}.",
            parameter="temperature",
            value=p.temperature,
        )
    if p.temperature > 2.0:
        raise ValidationError(
            f"temperature must be in [0, 2], got {p.temperature}.",
            parameter="temperature",
            value=p.temperature,
        )
    if not 0.0 < p.top_p <= 1.0:
        raise ValidationError(
            f"top_p must be in (0, 1], got {p.top_p}.", parameter="top_p", value=p.top_p
        )
    if p.top_k < -1:
        raise ValidationError(f"top_k must be 0 (disable), or at least 1, got {p.top_k}.")
    if type(p.top_k) is not int:
        raise ValidationError(f"top_k must be an integer, got {type(p.top_k).__name__}")
    if not 0.0 <= p.min_p <= 1.0:
        raise ValidationError(f"min_p must be in [0, 1], got {p.min_p}.")
    if p.max_tokens is not None and p.max_tokens < 1:
        raise ValidationError(
            f"max_tokens must be at least 1, got {p.max_tokens}.",
            parameter="max_tokens",
            value=p.max_tokens,
        )
    if p.min_tokens < 0:
        raise ValidationError(f"min_tokens must be greater than or equal to 0, got {p.min_tokens}.")
    if p.max_tokens is not None and p.min_tokens > p.max_tokens:
        raise ValidationError(
            f"min_tokens must be less than or equal to max_tokens={p.max_tokens}, "
            f"got {p.min_tokens}."
        )
    if p.stream_interval is not None and p.stream_interval < 1:
        raise ValidationError(
            f"stream_interval must be at least 1, got {p.stream_interval}.",
            parameter="stream_interval",
            value=p.stream_interval,
        )
    if p.logprobs is not None and p.logprobs != -1 and p.logprobs < 0:
        raise ValidationError(
            f"logprobs must be non-negative or -1, got {p.logprobs}.",
            parameter="logprobs",
            value=p.logprobs,
        )
    if p.prompt_logprobs is not None and p.prompt_logprobs != -1 and p.prompt_logprobs < 0:
        raise ValidationError(
            f"prompt_logprobs must be non-negative or -1, got {p.prompt_logprobs}.",
            parameter="prompt_logprobs",
            value=p.prompt_logprobs,
        )
    if p.stop_token_ids and not all(type(t) is int for t in p.stop_token_ids):
        raise ValidationError(f"stop_token_ids must contain only integers, got {p.stop_token_ids}.")
    if p.stop and any(not s for s in p.stop):
        raise ValidationError("stop cannot contain an empty string.")
    if p.stop and not p.detokenize:
        raise ValidationError(
            "stop strings are only supported when detokenize is True. "
            "Set detokenize=True to use stop."
        )
    if p.bad_words and any(not w for w in p.bad_words):
        raise ValidationError(
            f"bad_words cannot contain an empty string. Got bad_words={p.bad_words}"
        )
    if p.output_kind not in (0, 1, 2):
        raise ValidationError(f"output_kind must be 0, 1 or 2, got {p.output_kind}.")
    if p.repetition_detection is not None:
        _check_repetition_detection(p.repetition_detection)
    if p.thinking_token_budget is not None and (
        type(p.thinking_token_budget) is not int or p.thinking_token_budget < 0
    ):
        raise ValidationError(
            THINKING_BUDGET_MESSAGE,
            parameter="thinking_token_budget",
            value=p.thinking_token_budget,
        )
    if type(p.routed_experts_prompt_start) is not int or p.routed_experts_prompt_start < 0:
        raise ValidationError(
            f"routed_experts_prompt_start must be a non-negative integer, got "
            f"{p.routed_experts_prompt_start!r}.",
            parameter="routed_experts_prompt_start",
            value=p.routed_experts_prompt_start,
        )
    if p.structured_outputs is not None:
        check_structured(p.structured_outputs)
    # __post_init__ raises temperatures in (0, MIN_TEMPERATURE) to
    # MIN_TEMPERATURE before this test, so only 0 is greedy.
    if p.temperature < SAMPLING_EPS and not 0.0 < p.temperature < MIN_TEMPERATURE and p.n > 1:
        raise ValidationError(f"n must be 1 when using greedy sampling, got {p.n}.")


def _check_extra_args(extra_args: dict[str, Any]) -> None:
    # msgpack (and so the engine) only carries signed/unsigned 64-bit integers.
    pending: list[Any] = [extra_args]
    visited: set[int] = set()  # a self-referencing container must not loop forever
    while pending:
        value = pending.pop()
        if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
            raise ValidationError(
                "extra_args integers must be between -2**63 and 2**64 - 1.", parameter="extra_args"
            )
        if isinstance(value, (dict, list, tuple)):
            if id(value) in visited:
                continue
            visited.add(id(value))
        if isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, (list, tuple)):
            pending.extend(value)


def _check_repetition_detection(r: RepetitionDetection) -> None:
    if r.max_pattern_size < 0 or r.min_pattern_size < 0 or r.min_pattern_size > r.max_pattern_size:
        raise ValidationError(
            "max_pattern_size, min_pattern_size must be >=0, with min_pattern_size "
            "<= max_pattern_size. Set both to 0 to disable repetitive pattern detection."
        )
    if r.max_pattern_size > 0 and r.min_count < 2:
        raise ValidationError(
            "min_count must be >= 2 to detect repetitive patterns in engine output. "
            "If you do not wish to detect repetitive patterns, set max_pattern_size to 0."
        )


def _out_of_vocab(ids, vocab_size: int) -> list[int]:
    return [t for t in ids if t < 0 or t >= vocab_size]


def _check_against_model(p: SamplingParams, limits: ModelLimits) -> None:
    vocab = limits.vocab_size
    max_logprobs = vocab if limits.max_logprobs == -1 else limits.max_logprobs
    if p.logprobs:
        wanted = vocab if p.logprobs == -1 else p.logprobs
        if wanted > max_logprobs:
            raise ValidationError(
                f"Requested sample logprobs of {wanted}, which is greater than max "
                f"allowed: {max_logprobs}",
                parameter="logprobs",
                value=wanted,
            )
    if p.logprob_token_ids is not None:
        n = len(p.logprob_token_ids)
        if n > MAX_LOGPROB_TOKEN_IDS:
            raise ValidationError(
                f"Requested logprob_token_ids of length {n}, which is greater than max "
                f"allowed: {MAX_LOGPROB_TOKEN_IDS}",
                parameter="logprob_token_ids",
                value=n,
            )
        if bad := _out_of_vocab(p.logprob_token_ids, vocab):
            raise ValidationError(
                f"token_id(s) {bad} in logprob_token_ids contain out-of-vocab token ids. "
                f"Vocabulary size: {vocab}",
                parameter="logprob_token_ids",
                value=bad,
            )
        if p.logprobs is not None and p.logprobs != n:
            raise ValidationError(
                "When both logprobs and logprob_token_ids are set, logprobs must equal "
                f"len(logprob_token_ids). Got logprobs={p.logprobs}, "
                f"len(logprob_token_ids)={n}.",
                parameter="logprob_token_ids",
                value=n,
            )
    if p.prompt_logprobs:
        wanted = vocab if p.prompt_logprobs == -1 else p.prompt_logprobs
        if wanted > max_logprobs:
            raise ValidationError(
                f"Requested prompt logprobs of {wanted}, which is greater than max "
                f"allowed: {max_logprobs}",
                parameter="prompt_logprobs",
                value=wanted,
            )
    if p.logit_bias and (bad := _out_of_vocab(p.logit_bias, vocab)):
        raise ValidationError(
            f"token_id(s) {bad} in logit_bias contain out-of-vocab token ids. "
            f"Vocabulary size: {vocab}",
            parameter="logit_bias",
            value=bad,
        )
    if p.stop_token_ids and (bad := _out_of_vocab(p.stop_token_ids, vocab)):
        raise ValidationError(
            f"token_id(s) {bad} in stop_token_ids contain out-of-vocab token ids. "
            f"Vocabulary size: {vocab}",
            parameter="stop_token_ids",
            value=bad,
        )
    if p.allowed_token_ids is not None:
        if not p.allowed_token_ids:
            raise ValidationError(
                "allowed_token_ids is not None and empty!",
                parameter="allowed_token_ids",
                value=p.allowed_token_ids,
            )
        if bad := _out_of_vocab(p.allowed_token_ids, vocab):
            raise ValidationError(
                "allowed_token_ids contains out-of-vocab token id!",
                parameter="allowed_token_ids",
                value=bad,
            )
    if p.bad_words_token_ids:
        if len(p.bad_words_token_ids) > MAX_NUM_BAD_WORDS:
            raise ValidationError(
                "Too many bad words after tokenization: "
                f"{len(p.bad_words_token_ids)}. The max number is "
                f"{MAX_NUM_BAD_WORDS}.",
                parameter="bad_words",
                value=p.bad_words,
            )
        flat = [t for ids in p.bad_words_token_ids for t in ids]
        if bad := _out_of_vocab(flat, vocab):
            raise ValidationError(
                f"The model vocabulary size is {vocab}, but the following tokens were "
                f"specified as bad: {bad}. All token id values should be integers "
                f"satisfying: 0 <= token_id <= {vocab - 1}.",
                parameter="bad_words",
                value=p.bad_words,
            )
    if p.eos_token_id is not None and not 0 <= p.eos_token_id < vocab:
        raise ValidationError(f"_eos_token_id {p.eos_token_id} is out of vocabulary")
    if bad := _out_of_vocab(p.all_stop_token_ids, vocab):
        raise ValidationError(f"_all_stop_token_ids {bad} are out of vocabulary")


def apply_generation_config(
    p: SamplingParams, *, eos_token_id: int | None, generation_eos_ids: list[int] | None
) -> None:
    """Fill the EOS fields the engine needs (``update_from_generation_config``).

    The engine stops on EOS only if told: ``_eos_token_id`` (unless
    ``ignore_eos``) and the generation-config EOS ids as ``stop_token_ids``;
    ``_all_stop_token_ids`` is what ``min_tokens`` masks.
    """
    all_stop = dict.fromkeys(p.stop_token_ids or ())
    if not p.ignore_eos:
        p.eos_token_id = eos_token_id
    if eos_token_id is not None:
        all_stop[eos_token_id] = None
    extra = [t for t in (generation_eos_ids or ()) if t != eos_token_id]
    if extra:
        all_stop.update(dict.fromkeys(extra))
        if not p.ignore_eos:
            # vLLM builds a set here; keep a deterministic order instead.
            p.stop_token_ids = list(dict.fromkeys([*extra, *(p.stop_token_ids or ())]))
    p.all_stop_token_ids = list(all_stop)
