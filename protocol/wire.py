"""Frames between the frontend's input ROUTER / output PULL and the engine.

Frontend -> engine (input socket): ``[type byte, msgpack payload, *aux]``
(the engine identity frame is added by the ROUTER caller). Engine -> frontend
(output socket): ``[msgpack EngineCoreOutputs, *aux]`` or the single raw frame
``b"ENGINE_CORE_DEAD"``. Layouts are vLLM 0.32.0's positional msgspec structs;
decoders accept shorter arrays (trailing defaults) and ignore extra elements.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from typing import Annotated, Any, cast

import msgspec

from protocol.arrays import NDArray, ext_hook
from protocol.errors import ProtocolError, UtilityCallError, ValidationError
from protocol.lora import LoRARequest
from protocol.lora import check as check_lora
from protocol.pooling import PoolingParams
from protocol.pooling import check as check_pooling
from protocol.sampling import ModelLimits, SamplingParams, check

ENGINE_CORE_DEAD = b"ENGINE_CORE_DEAD"


class RequestType(bytes, enum.Enum):
    ADD = b"\x00"
    ABORT = b"\x01"
    START_DP_WAVE = b"\x02"
    UTILITY = b"\x03"


class FinishReason(enum.IntEnum):
    STOP = 0
    LENGTH = 1
    ABORT = 2
    ERROR = 3
    REPETITION = 4

    def __str__(self) -> str:
        return self.name.lower()


FINISH_REASON_NAMES = ("stop", "length", "abort", "error", "repetition")


class EngineCoreRequest(msgspec.Struct, array_like=True, gc=False):
    """An ADD payload. The first 9 elements are required by the engine."""

    request_id: str
    prompt_token_ids: list[int] | None
    mm_features: Any
    sampling_params: SamplingParams | None
    pooling_params: PoolingParams | None
    arrival_time: float
    lora_request: LoRARequest | None
    cache_salt: str | None
    data_parallel_rank: int | None
    prompt_embeds: Any = None
    prompt_is_token_ids: Any = None
    client_index: int = 0
    current_wave: int = 0
    priority: int = 0
    trace_headers: dict[str, str] | None = None
    resumable: bool = False
    external_req_id: str | None = None
    # Structured outputs with a reasoning parser: True starts the grammar at
    # the first output token, False/None lets the engine's own reasoning
    # parser hold it back until the reasoning ends (None: it checks the prompt).
    reasoning_ended: bool | None = None
    # {"chat_template_kwargs": {...}} for the engine's reasoning parser.
    reasoning_parser_kwargs: dict[str, Any] | None = None
    # (vLLM's P/D clean-up ADD for a request refused before it ran; never sent here)
    abort_immediately: bool = False
    # A conversation's stable id (the engine tags its KV-cache events with it).
    session_id: str | None = None


class LogprobsLists(msgspec.Struct, array_like=True, gc=False):
    """Sample logprobs: ``[positions, k+1]`` ids and logprobs; column 0 is sampled."""

    token_ids: NDArray
    logprobs: NDArray
    ranks: NDArray
    cu_num_generated_tokens: list[int] | None = None


class LogprobsTensors(msgspec.Struct, array_like=True, gc=False):
    """Prompt logprobs: row i is about prompt token i+1."""

    token_ids: NDArray
    logprobs: NDArray
    ranks: NDArray
    cu_num_generated_tokens: Any = None
    cu_num_generated_tokens_tensor: Any = None


class EngineCoreOutput(msgspec.Struct, array_like=True, gc=False):
    request_id: str
    new_token_ids: list[int]
    new_logprobs: LogprobsLists | None = None
    new_prompt_logprobs_tensors: LogprobsTensors | None = None
    pooling_output: NDArray | None = None
    finish_reason: int | None = None
    stop_reason: int | str | None = None
    events: Any = None
    kv_transfer_params: Any = None
    ec_transfer_params: Any = None
    trace_headers: Any = None
    prefill_stats: dict[str, int] | None = None
    routed_experts: Any = None
    num_nans_in_logits: int = 0
    mm_cache_miss_hashes: Any = None
    new_sampling_mask: Any = None
    spec_decode_metrics: Any = None
    prompt_token_id_logprobs: Any = None


class UtilityOutput(msgspec.Struct, array_like=True, gc=False):
    """``result`` is ``[type_info, value]`` on success, nil on failure."""

    call_id: int
    failure_message: str | None = None
    result: Any = None


class EngineCoreOutputs(msgspec.Struct, array_like=True, gc=False):
    engine_index: int = 0
    outputs: list[EngineCoreOutput] = []
    scheduler_stats: dict[str, Any] | None = None
    timestamp: float = 0.0
    utility_output: UtilityOutput | None = None
    finished_requests: list[str] | None = None
    wave_complete: int | None = None
    start_wave: int | None = None
    weight_version: str | None = None


class StepOutputs(EngineCoreOutputs):
    """EngineCoreOutputs as the frontend's hot path reads it.

    ``scheduler_stats`` (a ~500-byte map on every step unless the engine runs
    with --disable-log-stats) stays undecoded msgpack: only the metrics
    observer decodes it, the fields it reads, via
    :func:`decode_scheduler_stats`. Empty or ``b"\\xc0"`` (nil) means none.
    """

    # The same wire field, decoded lazily: msgspec reads it as Raw for this subclass.
    scheduler_stats: msgspec.Raw = msgspec.Raw()  # type: ignore[assignment]


_NIL = b"\xc0"


def has_scheduler_stats(outs: StepOutputs) -> bool:
    raw = outs.scheduler_stats
    return len(raw) > 1 or (len(raw) == 1 and bytes(raw) != _NIL)


class CacheStats(msgspec.Struct, gc=False):
    """One step's ``PrefixCacheStats`` (a dataclass: a map on the wire)."""

    queries: int = 0
    hits: int = 0
    hits_by_source: dict[str, int] = {}


class SpecDecodingStats(msgspec.Struct, gc=False):
    num_spec_tokens: int = 0
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_accepted_tokens_per_pos: list[int] = []


class PerfStats(msgspec.Struct, gc=False):
    num_flops_per_gpu: int | float = 0
    num_read_bytes_per_gpu: int | float = 0
    num_write_bytes_per_gpu: int | float = 0


class KVCacheEvictionEvent(msgspec.Struct, gc=False):
    lifetime_seconds: float = 0.0
    idle_seconds: float = 0.0
    reuse_gaps_seconds: list[float] = []


class SchedulerStats(msgspec.Struct, gc=False):
    """The fields of vLLM's ``SchedulerStats`` map that metrics read; the
    decoder skips the others."""

    num_running_reqs: int = 0
    num_waiting_reqs: int = 0
    num_skipped_waiting_reqs: int = 0
    kv_cache_usage: float = 0.0
    prefix_cache_stats: CacheStats | None = None
    connector_prefix_cache_stats: CacheStats | None = None
    kv_cache_eviction_events: list[KVCacheEvictionEvent] = []
    spec_decoding_stats: SpecDecodingStats | None = None
    perf_stats: PerfStats | None = None


_scheduler_stats_decoder = msgspec.msgpack.Decoder(SchedulerStats | None)


def _map_items(*items: tuple[str, Any]) -> bytes:
    encode = msgspec.msgpack.encode
    return b"".join(encode(key) + encode(value) for key, value in items)


# Most engine steps count nothing: no prefix-cache or connector lookup, no
# sampled eviction, no drafts, no perf stats. In vLLM's field order the
# SchedulerStats map of such a step ends with these bytes: a byte comparison
# tells it (only gauges to read) without decoding ~500 bytes.
NOTHING_COUNTED = _map_items(
    (
        "prefix_cache_stats",
        {
            "reset": False,
            "requests": 0,
            "queries": 0,
            "hits": 0,
            "preempted_requests": 0,
            "preempted_queries": 0,
            "preempted_hits": 0,
            "hits_by_source": {},
        },
    ),
    ("connector_prefix_cache_stats", None),
    ("kv_cache_eviction_events", []),
    ("spec_decoding_stats", None),
    ("kv_connector_stats", None),
    ("ec_connector_stats", None),
    ("waiting_lora_adapters", {}),
    ("running_lora_adapters", {}),
    ("cudagraph_stats", None),
    ("perf_stats", None),
)


def decode_scheduler_stats(raw: msgspec.Raw) -> SchedulerStats | None:
    """The stats a :class:`StepOutputs` kept raw; raises ProtocolError."""
    if not len(raw):
        return None
    try:
        return _scheduler_stats_decoder.decode(raw)
    except msgspec.DecodeError as e:
        raise ProtocolError(f"undecodable scheduler stats: {e}") from e


class EngineDeadError(Exception):
    """The engine reported that its core loop died (``ENGINE_CORE_DEAD``)."""


# --------------------------------------------------------------------- frontend

_encoder = msgspec.msgpack.Encoder()
_outputs_decoder = msgspec.msgpack.Decoder(EngineCoreOutputs, ext_hook=ext_hook)
_step_decoder = msgspec.msgpack.Decoder(StepOutputs, ext_hook=ext_hook)


def check_prompt(
    prompt_token_ids: Sequence[int], limits: ModelLimits, *, pooling: bool = False
) -> None:
    """The prompt checks the engine does not do (a bad prompt crashes it):
    its length, then its ids (encode_add checks the ids in its verifying decode)."""
    check_prompt_length(prompt_token_ids, limits, pooling=pooling)
    check_vocab(prompt_token_ids, limits)


def check_prompt_length(
    prompt_token_ids: Sequence[int], limits: ModelLimits, *, pooling: bool = False
) -> None:
    """vLLM's messages: the renderer's for a prompt longer than the context,
    the input processor's for an empty one or one that leaves no room for output
    (a pooling request generates nothing: it may fill the context)."""
    n = len(prompt_token_ids)
    if n == 0:
        raise ValidationError("The decoder prompt cannot be empty")
    max_len = limits.max_model_len
    if n > max_len:
        raise ValidationError(
            f"This model's maximum context length is {max_len} tokens. "
            f"However, your prompt contains {n} input tokens, which exceeds this limit "
            "even without any output tokens. Please reduce the length of the input "
            "prompt.",
            parameter="input_tokens",
            value=n,
        )
    if n == max_len and not pooling:
        raise ValidationError(
            f"The decoder prompt (length {n}) plus the number of requested output "
            f"tokens (at least 1) is longer than the maximum model length of {max_len}. "
            "Make sure that `max_model_len` is no smaller than the number of text "
            "tokens (prompt + requested output tokens)."
        )


def check_vocab(prompt_token_ids: Sequence[int], limits: ModelLimits) -> None:
    """``validate_token_ids``'s message: the lowest negative id, else the highest."""
    lowest, highest = min(prompt_token_ids), max(prompt_token_ids)
    if lowest < 0:
        raise ValidationError(f"Token id {lowest} is out of vocabulary")
    if highest >= limits.vocab_size:
        raise ValidationError(f"Token id {highest} is out of vocabulary")


def encode_add(request: EngineCoreRequest, limits: ModelLimits) -> list[bytes]:
    """``[ADD, payload]``, after every check that protects the engine.

    Raises ValidationError instead of producing bytes the engine would die on.
    """
    params = request.sampling_params
    pooling = request.pooling_params
    if (params is None) == (pooling is None):
        raise ValidationError(
            "an engine request has either sampling_params (generation) or pooling_params (pooling)"
        )
    if params is not None and params.max_tokens is None:
        raise ValidationError("max_tokens must be set before sending to the engine")
    if not 0 <= request.client_index < limits.num_clients:
        raise ValidationError(
            f"client_index must name one of the engine's {limits.num_clients} output sockets"
        )
    prompt = request.prompt_token_ids or ()
    try:
        check_prompt_length(prompt, limits, pooling=pooling is not None)
        if pooling is not None:
            check_pooling(pooling)
        else:
            check(cast(SamplingParams, params), limits)  # exactly one of the two is set
        if request.lora_request is not None:
            check_lora(request.lora_request)
    except TypeError as e:  # a value of the wrong type, e.g. a str temperature
        raise ValidationError(f"invalid request: {e}") from None
    try:
        payload = _encoder.encode(request)
        # The engine decodes ADD with msgspec's type checks outside any error
        # handler: a field of the wrong type (True for an int, 1.0 for a token
        # id) kills its input thread. Decode once with the same field types,
        # the prompt's ids checked against the vocabulary in the same pass.
        _checking_decoder(limits.vocab_size).decode(payload)
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.MsgspecError) as e:
        refused = e
    else:
        return [RequestType.ADD.value, payload]
    if isinstance(refused, msgspec.ValidationError) and _PROMPT_ID_AT in str(refused):
        try:
            check_vocab(prompt, limits)  # vLLM's message for an id out of vocabulary
        except TypeError:
            pass  # not all ints: the decoder's message says where
    raise ValidationError(f"request cannot be sent to the engine: {refused}")


_PROMPT_ID_AT = "`$[1]["  # how msgspec's errors name an element of prompt_token_ids


@functools.lru_cache(maxsize=8)
def _checking_decoder(vocab_size: int) -> msgspec.msgpack.Decoder:
    """The engine's ADD decoder, but with every prompt id in ``[0, vocab_size)``."""
    token_id = Annotated[int, msgspec.Meta(ge=0, lt=vocab_size)]
    fields: list[Any] = []
    for f in msgspec.structs.fields(EngineCoreRequest):
        kind = list[token_id] | None if f.name == "prompt_token_ids" else f.type
        fields.append((f.name, kind) if f.required else (f.name, kind, f.default))
    checked = msgspec.defstruct("CheckedEngineCoreRequest", fields, array_like=True, gc=False)
    return msgspec.msgpack.Decoder(checked, ext_hook=ext_hook)


def split_features(frames: Sequence[bytes] | None) -> tuple[msgspec.Raw | None, list[bytes]]:
    """A multimodal prompt's ``mm_features`` as vLLM's ``MsgpackEncoder`` framed
    them (engine_core/mm_processor.py) -> the msgpack list, embedded as is in
    an ADD payload, and the tensor frames that go after the payload (the list
    names them by index: 1, 2, ..., their places in the ADD's data frames)."""
    if not frames:
        return None, []
    return msgspec.Raw(frames[0]), list(frames[1:])


def encode_abort(request_ids: Sequence[str]) -> list[bytes]:
    return [RequestType.ABORT.value, _encoder.encode(list(request_ids))]


def encode_utility(
    call_id: int, method: str, args: Sequence[Any] = (), client_index: int = 0
) -> list[bytes]:
    if method == "handle_fault_tolerance":  # intercepted; kills the input thread
        raise ValidationError("handle_fault_tolerance must not be called as a utility")
    if not 0 <= call_id < 2**64:
        raise ValidationError("utility call ids are unsigned 64-bit integers")
    return [RequestType.UTILITY.value, _encoder.encode([client_index, call_id, method, list(args)])]


def is_engine_dead(frames: Sequence[Any]) -> bool:
    return (
        len(frames) == 1
        and len(frames[0]) == len(ENGINE_CORE_DEAD)
        and bytes(frames[0]) == ENGINE_CORE_DEAD
    )


def decode_outputs(frames: Sequence[Any]) -> EngineCoreOutputs:
    """One message from the output socket; raises EngineDeadError on the sentinel."""
    if is_engine_dead(frames):
        raise EngineDeadError("engine core reported ENGINE_CORE_DEAD")
    return _decode(_outputs_decoder, frames)


def decode_step(frames: Sequence[Any]) -> StepOutputs:
    """:func:`decode_outputs` for the frontend's reader, which has checked for
    the ENGINE_CORE_DEAD sentinel already: scheduler stats are left raw."""
    return _decode(_step_decoder, frames)


def _decode(decoder: msgspec.msgpack.Decoder, frames: Sequence[Any]):
    try:
        outs = decoder.decode(frames[0])
    except msgspec.DecodeError as e:
        raise ProtocolError(f"undecodable engine output: {e}") from e
    if len(frames) > 1:
        _resolve_aux_frames(outs, frames)
    return outs


def _resolve_aux_frames(outs: EngineCoreOutputs, frames: Sequence[Any]) -> None:
    """Replace frame indices in arrays by the frame bytes they point to."""
    for out in outs.outputs:
        for group in (out.new_logprobs, out.new_prompt_logprobs_tensors):
            if group is None:
                continue
            for arr in (group.token_ids, group.logprobs, group.ranks):
                if isinstance(arr.data, int):
                    arr.data = bytes(arr.buffer(frames))
        pooled = out.pooling_output
        if pooled is not None and isinstance(pooled.data, int):
            pooled.data = bytes(pooled.buffer(frames))


def utility_value(out: UtilityOutput) -> Any:
    """The returned value of a utility call; raises UtilityCallError (a
    ProtocolError) with the engine's message when the call failed."""
    if out.failure_message is not None:
        raise UtilityCallError(out.failure_message)
    if out.result is None:
        return None
    type_info, value = out.result
    if type_info is not None:
        raise ProtocolError("engine sent typed (pickled) utility results; refusing")
    return value


# ----------------------------------------------------------------- engine side
# Used by the mock engine and by tests; the frontend never calls these.

_request_decoder = msgspec.msgpack.Decoder(EngineCoreRequest, ext_hook=ext_hook)
_abort_decoder = msgspec.msgpack.Decoder(list[str] | str)
_utility_decoder = msgspec.msgpack.Decoder(tuple[int, int, str, list])


def decode_add(payload: bytes) -> EngineCoreRequest:
    return _request_decoder.decode(payload)


def decode_abort(payload: bytes) -> list[str]:
    ids = _abort_decoder.decode(payload)
    return [ids] if isinstance(ids, str) else ids


def decode_utility(payload: bytes) -> tuple[int, int, str, list]:
    """``(client_index, call_id, method, args)``."""
    return _utility_decoder.decode(payload)


def encode_outputs(outs: EngineCoreOutputs, aux: list[bytes] | None = None) -> list[bytes]:
    """``[payload, *aux]``; ``aux[0]`` is the payload slot (see arrays.make_array)."""
    payload = _encoder.encode(outs)
    return [payload, *(aux[1:] if aux else ())]


def utility_reply(
    call_id: int,
    value: Any = None,
    failure: str | None = None,
    engine_index: int = 0,
    timestamp: float = 0.0,
) -> EngineCoreOutputs:
    result = None if failure is not None else [None, value]
    return EngineCoreOutputs(
        engine_index=engine_index,
        timestamp=timestamp,
        utility_output=UtilityOutput(call_id, failure, result),
    )
