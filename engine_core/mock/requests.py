"""A live request and the deterministic "model" that writes its tokens.

Generated tokens are a deterministic function of the prompt, ``--seed``, the
LoRA adapter's name if any, and the request's sampling (greedy: the prompt
alone; ``seed`` set: also the seed; sampling without a seed: also the request
id, so n>1 children differ).
Natural tokens are never added/special tokens nor any of the request's stop
ids. Requests finish only by these documented rules:

* length: ``max_tokens`` reached, or prompt + output reach max_model_len;
* EOS: with ``--eos-rate P`` an output token is, with deterministic rate P,
  an EOS-like id: the request's ``_eos_token_id`` or a special id among its
  ``stop_token_ids`` (gen-config EOS); without those (``ignore_eos``) the
  model's EOS, which then does not stop the request;
* stop tokens: the first non-special id of ``stop_token_ids`` is emitted as
  output token number ``max(min_tokens, STOP_TOKEN_POSITION) + 1``;
* repetition: with ``repetition_detection`` the output repeats a pattern of
  ``max(1, min_pattern_size)`` tokens, so vLLM's check fires;
* ``min_tokens`` delays all but length; ``allowed_token_ids`` restricts every
  emitted id; penalties, ``logit_bias``, top-p/k are accepted and ignored.

A scripted request (see scripts.py) emits its script instead, under the same
stop rules.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from typing import cast

from engine_core.mock.facts import ModelFacts
from protocol.sampling import SAMPLING_EPS, SamplingParams
from protocol.wire import EngineCoreOutput, EngineCoreRequest, FinishReason

STOP_TOKEN_POSITION = 3  # 0-based output index of the stop-token rule
TABLE_BITS = 16
TABLE_MASK = (1 << TABLE_BITS) - 1

# Salts that keep the independent deterministic streams apart.
MASK = (1 << 64) - 1
_EOS_SALT = 0x5EED_E05
_TABLE_SALT = 0x5EED_7AB
_LORA_SALT = 0x5EED_10AA


def mix(x: int) -> int:
    """splitmix64's finaliser: a cheap, well-spread 64-bit hash of an int."""
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


@dataclass
class Settings:
    """What the control channel may change at run time."""

    step_time: float
    tokens_per_step: int
    eos_rate: float


class Request:
    """A live request and everything its deterministic generator needs."""

    __slots__ = (
        "id",
        "client_index",
        "prompt",
        "prompt_len",
        "params",
        "greedy",
        "key",
        "offset",
        "stride",
        "max_tokens",
        "min_tokens",
        "limit",
        "eos_id",
        "stop_ids",
        "avoid",
        "extra_avoid",
        "eos_choices",
        "forced_stop",
        "allowed",
        "pattern",
        "repetition",
        "out_ids",
        "logprobs",
        "prompt_logprobs",
        "plain",
        "skip_cache",
        "cache_salt",
        "events",
        "num_out",
        "first",
        "cached",
        "block_hashes",
        "script",
        "script_pos",
        "script_eos",
        "masked_early",
        "pooling",
    )

    def __init__(
        self,
        req: EngineCoreRequest,
        params: SamplingParams,
        facts: ModelFacts,
        seed: int,
        log_stats: bool,
        script: tuple[list[int], bool] | None = None,
    ) -> None:
        self.id = req.request_id
        self.client_index = req.client_index
        self.prompt = req.prompt_token_ids or []
        self.prompt_len = len(self.prompt)
        self.params = params
        self.pooling = req.pooling_params  # a pooling request: one output, the tensor
        self.greedy = params.temperature < SAMPLING_EPS
        lora = req.lora_request
        self.key = self._stream_key(params, seed) ^ (
            mix(_LORA_SALT ^ zlib.crc32(lora.lora_name.encode())) if lora else 0
        )
        self.offset = self.key & TABLE_MASK
        self.stride = (self.key >> TABLE_BITS) & TABLE_MASK | 1
        # The engine drops a request without max_tokens before it gets here.
        assert params.max_tokens is not None
        self.max_tokens = params.max_tokens
        self.min_tokens = params.min_tokens
        self.limit = self.max_tokens  # capped by max_model_len when admitted
        self.eos_id = params.eos_token_id
        self.stop_ids = frozenset(params.stop_token_ids or ())
        self.allowed = (
            list(dict.fromkeys(params.allowed_token_ids)) if params.allowed_token_ids else None
        )
        self.avoid = (
            facts.special_ids
            | self.stop_ids
            | set(params.all_stop_token_ids)
            | ({self.eos_id} if self.eos_id is not None else set())
        )
        self.extra_avoid = self.avoid - facts.special_ids
        self.eos_choices = self._eos_choices(facts)
        self.forced_stop = None if script else self._forced_stop(facts)
        rep = params.repetition_detection
        if rep is not None and rep.max_pattern_size > 0 and rep.min_count >= 2:
            self.repetition: tuple[int, int, int] | None = (
                max(1, rep.min_pattern_size),
                rep.max_pattern_size,
                rep.min_count,
            )
            self.pattern = self.repetition[0]
            self.out_ids: list[int] | None = []
        else:
            self.repetition = None
            self.pattern = 0
            self.out_ids = None
        vocab = facts.vocab_size
        self.logprobs = (
            None
            if params.logprobs is None
            else (vocab if params.logprobs == -1 else params.logprobs)
        )
        self.prompt_logprobs = (
            None
            if params.prompt_logprobs is None
            else (vocab if params.prompt_logprobs == -1 else params.prompt_logprobs)
        )
        # Scripted output: the ids, how far it got, whether EOS follows them.
        self.script: list[int] | None
        self.script_eos: bool
        self.script, self.script_eos = script or (None, False)
        self.script_pos = 0
        # What vLLM's min-tokens mask keeps the model from sampling early.
        self.masked_early: frozenset[int] = frozenset()
        if script:
            self.masked_early = (
                self.stop_ids
                | set(params.all_stop_token_ids)
                | ({self.eos_id} if self.eos_id is not None else set())
            )
        # Plain requests take the fast path: table tokens, only a length stop.
        self.plain = not (
            self.logprobs is not None
            or self.forced_stop
            or self.pattern
            or self.allowed
            or self.extra_avoid
            or script
            or self.pooling
        )
        # vLLM's __post_init__ turns prompt logprobs into "skip reading the cache".
        self.skip_cache = (
            bool(params.skip_reading_prefix_cache) or params.prompt_logprobs is not None
        )
        # vLLM's block hashes include the adapter (name and path) too.
        self.cache_salt = (
            req.cache_salt if lora is None else (req.cache_salt, lora.lora_name, lora.lora_path)
        )
        self.events: list[dict] | None = (
            [{"type": 1, "timestamp": time.monotonic()}] if log_stats else None
        )
        self.num_out = 0
        self.first = True
        self.cached = 0
        self.block_hashes: list[int] = []

    def _stream_key(self, params: SamplingParams, seed: int) -> int:
        if self.greedy:
            basis = 1
        elif params.seed is not None:
            basis = mix(2 + (params.seed << 2))
        else:  # unseeded sampling: reproducible per request id only
            basis = mix(3 + (zlib.crc32(self.id.encode()) << 2))
        return mix(hash(tuple(self.prompt)) & MASK ^ basis ^ mix(seed))

    def _eos_choices(self, facts: ModelFacts) -> tuple[int, ...]:
        choices = [] if self.eos_id is None else [self.eos_id]
        choices += sorted(t for t in self.stop_ids if t in facts.special_ids and t not in choices)
        if not choices:  # ignore_eos: the model still says EOS, it just doesn't stop
            choices = [facts.eos_token_id]
        if self.allowed is not None:
            choices = [t for t in choices if t in self.allowed]
        return tuple(choices)

    def _forced_stop(self, facts: ModelFacts) -> tuple[int, int] | None:
        for t in self.params.stop_token_ids or ():
            if t not in facts.special_ids and (self.allowed is None or t in self.allowed):
                return max(self.min_tokens, STOP_TOKEN_POSITION), t
        return None


def token_table(facts: ModelFacts, seed: int) -> list[int]:
    """2**16 pseudo-random natural tokens (no special ids) that requests walk.

    A request reads it at ``offset + i * stride`` (odd stride: a full cycle),
    which makes the common token a list lookup instead of a hash.
    """
    if not set(range(facts.token_limit)) - facts.special_ids:
        raise ValueError("the vocabulary has no ordinary (non-special) token")
    table: list[int] = []
    x = mix(seed ^ _TABLE_SALT)
    while len(table) <= TABLE_MASK:
        x = mix(x)
        token = x % facts.token_limit
        if token not in facts.special_ids:
            table.append(token)
    return table


def _repeats(ids: list[int], min_size: int, max_size: int, count: int) -> bool:
    """Whether the tail of ``ids`` is ``count`` copies of a pattern (vLLM's rule)."""
    for size in range(min_size, max_size + 1):
        span = size * count
        if span > len(ids):
            return False
        if ids[-span:] == ids[-size:] * count:
            return True
    return False


class TokenModel:
    """Writes each running request's next tokens, by the rules above."""

    def __init__(self, facts: ModelFacts, settings: Settings, seed: int) -> None:
        self.settings = settings
        self.table = token_table(facts, seed)

    def advance_plain(self, r: Request) -> EngineCoreOutput:
        """The hot path: table tokens, and only the length limit can stop them."""
        n, k = r.num_out, self.settings.tokens_per_step
        if k == 1:  # (a running request is always below its limit)
            tokens = [self.table[(r.offset + n * r.stride) & TABLE_MASK]]
        else:
            k = min(k, r.limit - n)
            table, index, stride = self.table, r.offset + n * r.stride, r.stride
            tokens = [table[(index + j * stride) & TABLE_MASK] for j in range(k)]
        r.num_out = n = n + k
        if n < r.limit:
            return EngineCoreOutput(r.id, tokens)
        return EngineCoreOutput(r.id, tokens, finish_reason=FinishReason.LENGTH)

    def advance(self, r: Request) -> tuple[list[int], int | None, int | str | None]:
        """Any request: this step's tokens, finish reason and stop reason."""
        tokens: list[int] = []
        finish = stop_reason = None
        for _ in range(self.settings.tokens_per_step):
            token = self._next_token(r)
            tokens.append(token)
            r.num_out += 1
            if r.out_ids is not None:
                r.out_ids.append(token)
            finish, stop_reason = self._check_stop(r, token)
            if finish is not None:
                break
        return tokens, finish, stop_reason

    def _next_token(self, r: Request) -> int:
        i = r.num_out
        if r.script is not None:
            return self._scripted_token(r, i)
        if r.forced_stop is not None and r.forced_stop[0] == i:
            return r.forced_stop[1]
        rate = self.settings.eos_rate
        if rate > 0 and i >= r.min_tokens and r.eos_choices:
            x = mix(r.key ^ _EOS_SALT ^ i)
            if x < rate * 2.0**64:
                return r.eos_choices[(x >> 7) % len(r.eos_choices)]
        return self._natural_token(r, i % r.pattern if r.pattern else i)

    def _scripted_token(self, r: Request, i: int) -> int:
        """The script's next id, then EOS (if it ends so), then natural tokens."""
        script, early = r.script, i < r.min_tokens
        assert script is not None  # _next_token's test
        while r.script_pos < len(script):
            token = script[r.script_pos]
            r.script_pos += 1
            if not (early and token in r.masked_early):
                return token
        if r.script_eos and not early and r.eos_choices:
            r.script_eos = False  # once: with ignore_eos it does not stop the request
            return r.eos_choices[0]
        return self._natural_token(r, i)

    def _natural_token(self, r: Request, i: int) -> int:
        if r.allowed:
            x = mix(r.key + i)
            for _ in range(16):  # rejection: stop ids are a tiny minority
                token = r.allowed[x % len(r.allowed)]
                if token not in r.avoid:
                    return token
                x = mix(x)
            return token  # (nearly) every allowed id stops the request
        index = r.offset + i * r.stride
        token = self.table[index & TABLE_MASK]
        while token in r.extra_avoid:  # the table has plenty of other ids
            index += 1
            token = self.table[index & TABLE_MASK]
        return token

    @staticmethod
    def _check_stop(r: Request, token: int) -> tuple[int | None, int | str | None]:
        """vLLM's ``check_stop``, in its order."""
        if token == r.eos_id:
            return FinishReason.STOP, None
        if token in r.stop_ids:
            return FinishReason.STOP, token
        if r.num_out >= r.limit:
            return FinishReason.LENGTH, None
        if (
            r.repetition is not None
            and r.num_out >= r.min_tokens
            and _repeats(cast("list[int]", r.out_ids), *r.repetition)  # kept with repetition
        ):
            return FinishReason.REPETITION, "repetition_detected"
        return None, None
