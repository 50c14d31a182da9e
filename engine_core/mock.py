"""A protocol-faithful mock of a headless vLLM 0.32 EngineCore.

It speaks exactly what ``vllm serve MODEL --headless --data-parallel-address H
--data-parallel-rpc-port P`` speaks (see /work/shared/docs/engine-protocol.md):
the HELLO/INIT/READY handshake, the ready response, ADD/ABORT/UTILITY on a
DEALER, and on a PUSH one ``EngineCoreOutputs`` per step with stats, events,
prefill stats (with a real prefix cache's hit counts), logprobs in aux frames
when large, and ``ENGINE_CORE_DEAD``. Scheduling is FIFO continuous batching
of up to ``--max-num-seqs`` requests; like vLLM, finished or aborted requests
cost one more, empty step (a stats-only message when stats are on).

It also reproduces the real engine's failure modes, so tests can prove a
frontend never triggers them:

* input the real input thread cannot decode or validate (unknown type byte,
  undecodable ADD, a SamplingParams ``_verify_args`` rejects, a malformed
  UTILITY, ``handle_fault_tolerance``) *poisons the input thread*: the mock
  never reads input again but stays up and connected;
* what passes decoding but breaks the busy loop (a duplicate live id, a
  prompt that is empty, out of vocabulary or not shorter than max_model_len,
  out-of-vocabulary ``allowed_token_ids``/``logit_bias``/bad words, a pooling
  request) sends ``ENGINE_CORE_DEAD`` and exits 1. The real engine is known to
  die on some of these and suspected to on the rest; the mock is strict.

Generated tokens are a deterministic function of the prompt, ``--seed`` and
the request's sampling (greedy: the prompt alone; ``seed`` set: also the seed;
sampling without a seed: also the request id, so n>1 children differ).
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

Logprobs: the sampled token has rank 1 when greedy, rank 1-3 when sampling
(so it may be missing from a small top-k); values are negative and fall by
0.5 per rank.

An optional REP control socket (``--control-addr``; client:
``engine_core.mock_control.MockControl``) reports counters and injects
faults: crash, silent exit, stall, error_next, abort_all, configure.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import math
import os
import signal
import sys
import time
import uuid
import zlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import msgspec
import zmq

from protocol import handshake
from protocol.arrays import make_array
from protocol.errors import ValidationError
from protocol.sampling import SAMPLING_EPS, SamplingParams, check, normalize
from protocol.wire import (
    ENGINE_CORE_DEAD,
    FINISH_REASON_NAMES,
    EngineCoreOutput,
    EngineCoreOutputs,
    EngineCoreRequest,
    FinishReason,
    LogprobsLists,
    LogprobsTensors,
    RequestType,
    decode_abort,
    decode_add,
    decode_utility,
    encode_outputs,
    utility_reply,
)

logger = logging.getLogger("engine_core.mock")

VLLM_VERSION = "0.32.0"
ENGINE_INDEX = 0
IDENTITY = handshake.engine_identity(ENGINE_INDEX)
HANDSHAKE_TIMEOUT_MINS = 5
BLOCK_SIZE = 16
IDLE_POLL_MS = 50  # how quickly an idle mock notices signals and stall ends
STOP_TOKEN_POSITION = 3  # 0-based output index of the stop-token rule
FINISHED_IDS_REMEMBERED = 1 << 18  # for the aborts_after_finish counter

# Input type bytes the real engine knows; any other byte kills its input thread.
_EXECUTOR_FAILED = b"\x04"
_WAKEUP = b"\x05"
_KNOWN_TYPES = {t.value for t in RequestType} | {_EXECUTOR_FAILED, _WAKEUP}

# Salts that keep the independent deterministic streams apart.
_MASK = (1 << 64) - 1
_EOS_SALT = 0x5EED_E05
_LOGPROB_SALT = 0x5EED_109
_PROMPT_SALT = 0x5EED_9E0
_TABLE_SALT = 0x5EED_7AB


def _mix(x: int) -> int:
    """splitmix64's finaliser: a cheap, well-spread 64-bit hash of an int."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


class EngineDead(Exception):
    """The busy loop died: the mock sends ENGINE_CORE_DEAD and exits 1."""


class InputPoisoned(Exception):
    """The input thread died: the mock stops reading input, silently."""


class StartupError(Exception):
    """The engine failed before it was ready (handshake)."""


class SilentExit(Exception):
    """Die like SIGKILL: no more output of any kind."""


# ------------------------------------------------------------------- model facts

@dataclass(frozen=True)
class ModelFacts:
    vocab_size: int
    token_limit: int  # natural tokens are drawn from [0, token_limit)
    eos_token_id: int
    special_ids: frozenset[int]  # added/special tokens: never generated naturally


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _as_ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [value] if isinstance(value, int) else [v for v in value if isinstance(v, int)]


def load_model_facts(model_dir: Path | None, vocab_size: int, eos_token_id: int) -> ModelFacts:
    """Vocabulary size and special ids from a Hugging Face model directory."""
    if model_dir is None:
        return ModelFacts(vocab_size, vocab_size, eos_token_id, frozenset({eos_token_id}))
    config = _read_json(model_dir / "config.json")
    vocab_size = config.get("vocab_size") or config.get("text_config", {}).get(
        "vocab_size") or vocab_size
    tok_config = _read_json(model_dir / "tokenizer_config.json")
    tokenizer = _read_json(model_dir / "tokenizer.json")
    added = {int(i): t.get("content") for i, t in
             tok_config.get("added_tokens_decoder", {}).items()}
    added.update({t["id"]: t.get("content") for t in tokenizer.get("added_tokens", ())})
    # Ids a padded embedding has but the tokenizer cannot decode are never produced.
    token_limit = vocab_size
    if vocab := tokenizer.get("model", {}).get("vocab"):
        token_limit = min(vocab_size, max(len(vocab), max(added, default=-1) + 1))
    gen_eos = _as_ids(_read_json(model_dir / "generation_config.json").get("eos_token_id"))
    eos_name = tok_config.get("eos_token")
    if isinstance(eos_name, dict):
        eos_name = eos_name.get("content")
    by_name = {name: i for i, name in added.items()}
    eos_candidates = [by_name.get(eos_name), *_as_ids(config.get("eos_token_id")), *gen_eos]
    eos = next((i for i in eos_candidates if i is not None), eos_token_id)
    special = set(added) | set(gen_eos) | {eos}
    special |= set(_as_ids(config.get("bos_token_id"))) | set(_as_ids(config.get("pad_token_id")))
    return ModelFacts(vocab_size, token_limit, eos, frozenset(special))


# ----------------------------------------------------------------------- requests

TABLE_BITS = 16
TABLE_MASK = (1 << TABLE_BITS) - 1


def token_table(facts: ModelFacts, seed: int) -> list[int]:
    """2**16 pseudo-random natural tokens (no special ids) that requests walk.

    A request reads it at ``offset + i * stride`` (odd stride: a full cycle),
    which makes the common token a list lookup instead of a hash.
    """
    if not set(range(facts.token_limit)) - facts.special_ids:
        raise ValueError("the vocabulary has no ordinary (non-special) token")
    table: list[int] = []
    x = _mix(seed ^ _TABLE_SALT)
    while len(table) <= TABLE_MASK:
        x = _mix(x)
        token = x % facts.token_limit
        if token not in facts.special_ids:
            table.append(token)
    return table


class Request:
    """A live request and everything its deterministic generator needs."""

    __slots__ = (
        "id", "client_index", "prompt", "prompt_len", "params", "greedy", "key",
        "offset", "stride", "max_tokens", "min_tokens", "limit", "eos_id", "stop_ids",
        "avoid", "extra_avoid", "eos_choices", "forced_stop", "allowed", "pattern",
        "repetition", "out_ids", "logprobs", "prompt_logprobs", "plain", "skip_cache",
        "cache_salt", "events", "num_out", "first", "cached", "block_hashes",
    )

    def __init__(self, req: EngineCoreRequest, params: SamplingParams,
                 facts: ModelFacts, seed: int, log_stats: bool) -> None:
        self.id = req.request_id
        self.client_index = req.client_index
        self.prompt = req.prompt_token_ids or []
        self.prompt_len = len(self.prompt)
        self.params = params
        self.greedy = params.temperature < SAMPLING_EPS
        self.key = self._stream_key(params, seed)
        self.offset = self.key & TABLE_MASK
        self.stride = (self.key >> TABLE_BITS) & TABLE_MASK | 1
        self.max_tokens = params.max_tokens
        self.min_tokens = params.min_tokens
        self.limit = self.max_tokens  # capped by max_model_len when admitted
        self.eos_id = params.eos_token_id
        self.stop_ids = frozenset(params.stop_token_ids or ())
        self.allowed = list(dict.fromkeys(params.allowed_token_ids)) \
            if params.allowed_token_ids else None
        self.avoid = facts.special_ids | self.stop_ids | set(params.all_stop_token_ids) \
            | ({self.eos_id} if self.eos_id is not None else set())
        self.extra_avoid = self.avoid - facts.special_ids
        self.eos_choices = self._eos_choices(facts)
        self.forced_stop = self._forced_stop(facts)
        rep = params.repetition_detection
        if rep is not None and rep.max_pattern_size > 0 and rep.min_count >= 2:
            self.repetition = (max(1, rep.min_pattern_size), rep.max_pattern_size,
                               rep.min_count)
            self.pattern = self.repetition[0]
            self.out_ids: list[int] | None = []
        else:
            self.repetition = None
            self.pattern = 0
            self.out_ids = None
        vocab = facts.vocab_size
        self.logprobs = None if params.logprobs is None else \
            (vocab if params.logprobs == -1 else params.logprobs)
        self.prompt_logprobs = None if params.prompt_logprobs is None else \
            (vocab if params.prompt_logprobs == -1 else params.prompt_logprobs)
        # Plain requests take the fast path: table tokens, only a length stop.
        self.plain = not (self.logprobs is not None or self.forced_stop or self.pattern
                          or self.allowed or self.extra_avoid)
        # vLLM's __post_init__ turns prompt logprobs into "skip reading the cache".
        self.skip_cache = bool(params.skip_reading_prefix_cache) \
            or params.prompt_logprobs is not None
        self.cache_salt = req.cache_salt
        self.events: list[dict] | None = \
            [{"type": 1, "timestamp": time.monotonic()}] if log_stats else None
        self.num_out = 0
        self.first = True
        self.cached = 0
        self.block_hashes: list[int] = []

    def _stream_key(self, params: SamplingParams, seed: int) -> int:
        if self.greedy:
            basis = 1
        elif params.seed is not None:
            basis = _mix(2 + (params.seed << 2))
        else:  # unseeded sampling: reproducible per request id only
            basis = _mix(3 + (zlib.crc32(self.id.encode()) << 2))
        return _mix(hash(tuple(self.prompt)) & _MASK ^ basis ^ _mix(seed))

    def _eos_choices(self, facts: ModelFacts) -> tuple[int, ...]:
        choices = [] if self.eos_id is None else [self.eos_id]
        choices += sorted(t for t in self.stop_ids if t in facts.special_ids
                          and t not in choices)
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


def _repeats(ids: list[int], min_size: int, max_size: int, count: int) -> bool:
    """Whether the tail of ``ids`` is ``count`` copies of a pattern (vLLM's rule)."""
    for size in range(min_size, max_size + 1):
        span = size * count
        if span > len(ids):
            return False
        if ids[-span:] == ids[-size:] * count:
            return True
    return False


# ---------------------------------------------------------------------- scheduler

class PauseState:
    UNPAUSED = 0
    PAUSED_NEW = 1  # "abort"/"wait": running requests go on, new ones wait
    PAUSED_ALL = 2  # "keep": nothing is scheduled


@dataclass
class Settings:
    """What the control channel may change at run time."""

    step_time: float
    tokens_per_step: int
    eos_rate: float


class Scheduler:
    """FIFO continuous batching over deterministic "model" output."""

    def __init__(self, facts: ModelFacts, settings: Settings, *, max_model_len: int,
                 max_num_seqs: int, num_blocks: int, seed: int, log_stats: bool) -> None:
        self.facts = facts
        self.settings = settings
        self.max_model_len = max_model_len
        self.max_num_seqs = max_num_seqs
        self.num_blocks = num_blocks
        self.seed = seed
        self.log_stats = log_stats
        self.table = token_table(facts, seed)
        self.live: dict[str, Request] = {}
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.erroring: list[Request] = []  # scheduler-built ERROR at the next step
        self.pause_state = PauseState.UNPAUSED
        # Requests finished since the last step: like vLLM's finished_req_ids they
        # keep the engine busy for one more (empty, stats-only) step.
        self.unflushed = False
        self.tokens_in_use = 0  # prompt + output tokens of running requests (KV usage)
        self.prefix_cache: dict[int, None] = {}  # block hashes, least recent first
        self.cache_stats = self._empty_cache_stats()

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
        self.prefix_cache.clear()
        self.cache_stats["reset"] = True
        return True

    # --- one step

    def step(self) -> tuple[dict[int, list[EngineCoreOutput]], dict[int, list[bytes]],
                            list[tuple[Request, int]]]:
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
        produced = 0
        for r in self.running:
            outs = by_client.get(r.client_index)
            if outs is None:
                outs = by_client[r.client_index] = []
                aux[r.client_index] = [b""]
            if fast and r.plain and not r.first:
                out = self._advance_plain(r)
            else:
                out = self._advance(r, aux[r.client_index])
            outs.append(out)
            produced += len(out.new_token_ids)
            if out.finish_reason is not None:
                finished.append((r, out.finish_reason))
        self.tokens_in_use += produced
        for r in self.erroring:
            by_client.setdefault(r.client_index, []).append(EngineCoreOutput(
                r.id, [], finish_reason=FinishReason.ERROR, events=self._take_events(r)))
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
            self._lookup_prefix(r)
            if r.events is not None:
                r.events.append({"type": 2, "timestamp": now})
            self.running.append(r)
            self.tokens_in_use += r.prompt_len

    def _check_runnable(self, r: Request) -> None:
        """What crashes the real model runner (the frontend must prevent it)."""
        n = r.prompt_len
        if n == 0:
            raise EngineDead(f"request {r.id}: empty prompt")
        if n >= self.max_model_len:
            raise EngineDead(
                f"ValueError: could not broadcast input array from shape ({n},) into "
                f"shape ({self.max_model_len},) (request {r.id})")
        p = r.params
        ids = [*r.prompt, *(p.allowed_token_ids or ()), *(p.logit_bias or ()),
               *(t for word in p.bad_words_token_ids or () for t in word)]
        if min(ids) < 0 or max(ids) >= self.facts.vocab_size:
            raise EngineDead(f"IndexError: index out of range in self (request {r.id})")

    def _lookup_prefix(self, r: Request) -> None:
        """Count cached full prompt blocks, as vLLM's prefix cache would."""
        h = hash(r.cache_salt)
        hashes = r.block_hashes
        for start in range(0, r.prompt_len - BLOCK_SIZE + 1, BLOCK_SIZE):
            h = hash((h, *r.prompt[start:start + BLOCK_SIZE]))
            hashes.append(h)
        if r.skip_cache:
            return
        # At least one prompt token is always computed.
        usable = hashes[:(r.prompt_len - 1) // BLOCK_SIZE]
        hits = next((i for i, h in enumerate(usable) if h not in self.prefix_cache),
                    len(usable))
        r.cached = hits * BLOCK_SIZE
        stats = self.cache_stats
        stats["requests"] += 1
        stats["queries"] += r.prompt_len
        stats["hits"] += r.cached

    def _store_prefix(self, r: Request) -> None:
        cache = self.prefix_cache
        for h in r.block_hashes:
            cache.pop(h, None)  # re-insert: most recently used last
            cache[h] = None
        while len(cache) > self.num_blocks:
            del cache[next(iter(cache))]
        r.block_hashes = []

    def _advance_plain(self, r: Request) -> EngineCoreOutput:
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

    def _advance(self, r: Request, aux: list[bytes]) -> EngineCoreOutput:
        """Any request: stop rules, logprobs, and what the first output carries."""
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
        out = EngineCoreOutput(r.id, tokens, finish_reason=finish, stop_reason=stop_reason)
        if r.logprobs is not None:
            out.new_logprobs = self._sample_logprobs(r, tokens, aux)
        if r.first:
            r.first = False
            out.prefill_stats = self._prefill_stats(r)
            if r.prompt_logprobs is not None:
                out.new_prompt_logprobs_tensors = self._prompt_logprobs(r, aux)
            out.events = self._take_events(r)
            self._store_prefix(r)
        return out

    @staticmethod
    def _take_events(r: Request) -> list[dict] | None:
        events, r.events = r.events, None  # no preemption: nothing after the first
        return events

    def _next_token(self, r: Request) -> int:
        i = r.num_out
        if r.forced_stop is not None and r.forced_stop[0] == i:
            return r.forced_stop[1]
        rate = self.settings.eos_rate
        if rate > 0 and i >= r.min_tokens and r.eos_choices:
            x = _mix(r.key ^ _EOS_SALT ^ i)
            if x < rate * 2.0**64:
                return r.eos_choices[(x >> 7) % len(r.eos_choices)]
        return self._natural_token(r, i % r.pattern if r.pattern else i)

    def _natural_token(self, r: Request, i: int) -> int:
        if r.allowed:
            x = _mix(r.key + i)
            for _ in range(16):  # rejection: stop ids are a tiny minority
                token = r.allowed[x % len(r.allowed)]
                if token not in r.avoid:
                    return token
                x = _mix(x)
            return token  # (nearly) every allowed id stops the request
        index = r.offset + i * r.stride
        token = self.table[index & TABLE_MASK]
        while token in r.extra_avoid:  # the table has plenty of other ids
            index += 1
            token = self.table[index & TABLE_MASK]
        return token

    def _check_stop(self, r: Request, token: int) -> tuple[int | None, int | str | None]:
        """vLLM's ``check_stop``, in its order."""
        if token == r.eos_id:
            return FinishReason.STOP, None
        if token in r.stop_ids:
            return FinishReason.STOP, token
        if r.num_out >= r.limit:
            return FinishReason.LENGTH, None
        if r.repetition is not None and r.num_out >= r.min_tokens \
                and _repeats(r.out_ids, *r.repetition):
            return FinishReason.REPETITION, "repetition_detected"
        return None, None

    def _prefill_stats(self, r: Request) -> dict[str, int]:
        n = r.prompt_len
        return {
            "num_prompt_tokens": n,
            "num_computed_tokens": n - r.cached,
            "num_cached_tokens": r.cached,
            "num_local_cached_tokens": r.cached,
            "num_external_cached_tokens": 0,
            # Full prompt blocks this request wrote to the prefix cache.
            "num_cache_creation_tokens": max(0, n // BLOCK_SIZE * BLOCK_SIZE - r.cached),
        }

    # --- logprobs

    def _logprob_row(self, token: int, rank: int, width: int, x: int,
                     ids: list[int], lps: list[float]) -> None:
        """Append one row: the token, then the top ``width`` ids, best first.

        The token sits at 1-based ``rank`` among distinct ids (so it is not in
        the row when rank > width); values fall by 0.5 per rank.
        """
        vocab = self.facts.vocab_size
        best = -0.05 - (x & 0xFF) / 1024.0
        ids.append(token)
        lps.append(best - 0.5 * (rank - 1))
        other = 1
        for j in range(width):
            if j == rank - 1:
                ids.append(token)
            else:
                ids.append((token + other) % vocab)
                other += 1
            lps.append(best - 0.5 * j)

    def _sample_logprobs(self, r: Request, tokens: list[int], aux: list[bytes]) -> LogprobsLists:
        width = r.logprobs
        ids: list[int] = []
        lps: list[float] = []
        ranks: list[int] = []
        first = r.num_out - len(tokens)
        for p, token in enumerate(tokens):
            x = _mix(r.key ^ _LOGPROB_SALT ^ (first + p))
            rank = 1 if r.greedy else 1 + (x >> 40) % 3
            self._logprob_row(token, rank, width, x, ids, lps)
            ranks.append(rank)
        shape = [len(tokens), width + 1]
        # numpy on the wire: int32 ids, float32 logprobs, int64 ranks (a count).
        return LogprobsLists(make_array(ids, shape, "i", aux), make_array(lps, shape, "f", aux),
                             make_array(ranks, [len(tokens)], "q", aux))

    def _prompt_logprobs(self, r: Request, aux: list[bytes]) -> LogprobsTensors:
        width = r.prompt_logprobs
        ids: list[int] = []
        lps: list[float] = []
        ranks: list[int] = []
        for i, token in enumerate(r.prompt[1:]):
            x = _mix(r.key ^ _PROMPT_SALT ^ i)
            rank = 1 + (x >> 40) % 4
            self._logprob_row(token, rank, width, x, ids, lps)
            ranks.append(rank)
        rows = r.prompt_len - 1
        shape = [rows, width + 1]
        # torch on the wire; ranks share the int32 buffer type of the ids.
        return LogprobsTensors(
            make_array(ids, shape, "i", aux, torch_names=True),
            make_array(lps, shape, "f", aux, torch_names=True),
            make_array(ranks, [rows], "i", aux, torch_names=True))

    # --- stats

    @staticmethod
    def _empty_cache_stats() -> dict[str, Any]:
        return {"reset": False, "requests": 0, "queries": 0, "hits": 0,
                "preempted_requests": 0, "preempted_queries": 0, "preempted_hits": 0,
                "hits_by_source": {}}

    def stats(self) -> dict[str, Any]:
        """A ``SchedulerStats`` map with the real field names and order."""
        cache_stats, self.cache_stats = self.cache_stats, self._empty_cache_stats()
        return {
            "num_running_reqs": len(self.running),
            "num_waiting_reqs": len(self.waiting) + len(self.erroring),
            "num_skipped_waiting_reqs": 0,
            "num_kv_fetch_reqs_by_stage": {},
            "step_counter": 0,  # only DP engines count steps
            "current_wave": 0,
            "kv_cache_usage": min(1.0, self.tokens_in_use / (self.num_blocks * BLOCK_SIZE)),
            "iteration_details": None,
            "prefix_cache_stats": cache_stats,
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


# ------------------------------------------------------------------------ engine

class Counters:
    """What the control channel's ``stats`` reports."""

    def __init__(self) -> None:
        self.adds = 0
        self.steps = 0
        self.utility_calls = 0
        self.aborted = 0
        self.aborts_unknown = 0
        self.aborts_after_finish = 0
        self.finished = dict.fromkeys(FINISH_REASON_NAMES, 0)
        # Insertion-ordered and bounded: older ids count as unknown.
        self.finished_ids: dict[str, None] = {}

    def remember_finished(self, request_ids) -> None:
        ids = self.finished_ids
        for request_id in request_ids:
            ids[request_id] = None
        while len(ids) > FINISHED_IDS_REMEMBERED:
            del ids[next(iter(ids))]


class _Pending:
    """A utility result that is ready once the engine is idle (pause "wait")."""

    def __init__(self, complete: Callable[[], Any]) -> None:
        self.complete = complete


def _socket(ctx: zmq.Context, kind: int, addr: str, *, identity: bytes | None = None,
            linger: int | None = None) -> zmq.Socket:
    """A connecting socket with vLLM's options (unlimited HWMs)."""
    sock = ctx.socket(kind)
    if kind in (zmq.DEALER, zmq.PULL, zmq.ROUTER):
        sock.setsockopt(zmq.RCVHWM, 0)
    if kind in (zmq.DEALER, zmq.PUSH, zmq.ROUTER):
        sock.setsockopt(zmq.SNDHWM, 0)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity)
    if linger is not None:
        sock.setsockopt(zmq.LINGER, linger)
    if addr.startswith("tcp://["):
        sock.setsockopt(zmq.IPV6, 1)
    sock.connect(addr)
    return sock


class MockEngine:
    def __init__(self, args: argparse.Namespace, facts: ModelFacts) -> None:
        self.args = args
        self.facts = facts
        self.log_stats = not args.disable_log_stats
        self.settings = Settings(args.step_time, args.tokens_per_step, args.eos_rate)
        self.num_blocks = max(1, -(-args.max_num_seqs * args.max_model_len // BLOCK_SIZE))
        self.sched = Scheduler(facts, self.settings, max_model_len=args.max_model_len,
                               max_num_seqs=args.max_num_seqs, num_blocks=self.num_blocks,
                               seed=args.seed, log_stats=self.log_stats)
        self.counters = Counters()
        self.ctx = zmq.Context()
        self.control: zmq.Socket | None = None
        self.inputs: list[zmq.Socket] = []
        self.outputs: list[zmq.Socket] = []
        self.input_alive = True
        self.output_alive = True
        self.shutdown_requested: str | bool = False  # or the signal's name
        self.stalled_until = 0.0
        self.next_step_at = 0.0
        self.error_next = 0
        self.weight_version = "default"
        self.asleep: set[str] = set()  # executor memory tags put to sleep
        self.pending: list[tuple[int, int, str, _Pending]] = []
        self.utilities: dict[str, Callable[..., Any]] = {
            "get_supported_tasks": lambda: ("generate",),
            "is_sleeping": lambda: self.is_scheduler_paused() or bool(self.asleep),
            "sleep": self.sleep,
            "wake_up": self.wake_up,
            "has_work": self.sched.has_work,
            "reset_prefix_cache": self.reset_prefix_cache,
            "reset_mm_cache": lambda: None,
            "reset_encoder_cache": lambda: None,
            "pause_scheduler": self.pause_scheduler,
            "resume_scheduler": self.resume_scheduler,
            "is_scheduler_paused": self.is_scheduler_paused,
            "get_weight_version": lambda: self.weight_version,
            "set_weight_version": self.set_weight_version,
            "list_loras": lambda: [],
            "execute_dummy_batch": lambda: None,
        }

    # --- lifecycle

    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        try:
            if self.args.control_addr:
                self.control = self.ctx.socket(zmq.REP)
                self.control.setsockopt(zmq.LINGER, 0)
                self.control.bind(self.args.control_addr)
            self._startup()
        except (StartupError, zmq.ZMQError, msgspec.DecodeError) as e:
            logger.error("EngineCore failed to start: %s", e)
            self._close(0)
            return 1
        try:
            self._busy_loop()
        except SilentExit:
            self._close(0)  # the control reply still gets out
            os.kill(os.getpid(), signal.SIGKILL)
        except EngineDead as e:
            logger.error("EngineCore encountered a fatal error: %s", e)
            self._send_engine_dead()
            return 1
        except Exception:  # like vLLM: anything escaping the busy loop is fatal
            logger.exception("EngineCore encountered a fatal error.")
            self._send_engine_dead()
            return 1
        self._close(4000)
        return 0

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.shutdown_requested = signal.Signals(signum).name

    def _startup(self) -> None:
        """HELLO, INIT, ready response on every input socket, then READY."""
        shake = _socket(self.ctx, zmq.DEALER, self.args.frontend_addr, identity=IDENTITY)
        try:
            addresses = self._handshake(shake)
        except BaseException:
            shake.close(linger=0)
            raise
        shake.close(linger=5000)  # READY must get out
        logger.info("EngineCore ready: inputs=%s outputs=%s", addresses.inputs,
                    addresses.outputs)

    def _handshake(self, shake: zmq.Socket) -> handshake.EngineAddresses:
        shake.send(handshake.encode_status("HELLO", local=False, headless=True))
        deadline = time.monotonic() + self.args.handshake_timeout
        while not shake.poll(IDLE_POLL_MS):
            if self.shutdown_requested:
                raise StartupError("shutdown requested during the handshake")
            if time.monotonic() > deadline:
                raise StartupError(
                    "Did not receive response from front-end process within "
                    f"{self.args.handshake_timeout / 60:g} minutes")
        addresses = self._decode_init(shake.recv()).addresses
        self.inputs = [_socket(self.ctx, zmq.DEALER, a, identity=IDENTITY)
                       for a in addresses.inputs]
        self.outputs = [_socket(self.ctx, zmq.PUSH, a, linger=4000)
                        for a in addresses.outputs]
        # The first input message registers the DEALER with the frontend's ROUTER.
        ready = handshake.encode_ready_response(self._ready_response())
        for sock in self.inputs:
            sock.send(ready)
        shake.send(handshake.encode_status("READY", local=False, headless=True))
        return addresses

    @staticmethod
    def _decode_init(payload: bytes) -> handshake.HandshakeInit:
        # vLLM decodes INIT into a dataclass whose parallel_config has no default.
        raw = msgspec.msgpack.decode(payload)
        if not isinstance(raw, dict) or "parallel_config" not in raw:
            raise StartupError("Object missing required field `parallel_config`")
        return handshake.decode_init(payload)

    def _ready_response(self) -> handshake.ReadyResponse:
        a = self.args
        return handshake.ReadyResponse(
            max_model_len=a.max_model_len, num_gpu_blocks=self.num_blocks,
            block_size=BLOCK_SIZE, dp_stats_address=None, dtype="float32",
            vllm_version=VLLM_VERSION, world_size=1, data_parallel_size=1,
            tensor_parallel_size=1, pipeline_parallel_size=1,
            decode_context_parallel_size=1, data_parallel_rank=ENGINE_INDEX,
            max_num_seqs=a.max_num_seqs,
            max_num_batched_tokens=max(a.max_model_len, 2048),
            instance_id=f"mock-{uuid.uuid4().hex[:12]}", supports_lora=False,
            max_loras=0, kv_cache_size_tokens=self.num_blocks * BLOCK_SIZE,
            kv_cache_max_concurrency=self.num_blocks * BLOCK_SIZE / a.max_model_len,
            effective_attention_block_size=BLOCK_SIZE)

    def _close(self, output_linger_ms: int) -> None:
        """Close everything; outputs (and a last control reply) may still drain."""
        for sock in self.inputs:
            sock.close(linger=0)
        for sock in self.outputs:
            sock.close(linger=output_linger_ms)
        if self.control is not None:
            self.control.close(linger=1000)
        self.ctx.term()

    def _send_engine_dead(self) -> None:
        if self.output_alive:
            for sock in self.outputs:
                sock.send(ENGINE_CORE_DEAD)
        self._close(4000)

    # --- the loop

    def _busy_loop(self) -> None:
        poller = zmq.Poller()
        for sock in self.inputs:
            poller.register(sock, zmq.POLLIN)
        if self.control is not None:
            poller.register(self.control, zmq.POLLIN)
        while not self.shutdown_requested:
            if self._stalled():
                continue
            ready = dict(poller.poll(self._poll_timeout_ms()))
            if self.control in ready:
                self._serve_control()
            for sock in self.inputs:
                if sock in ready:
                    self._drain_input(sock, poller)
            if self.sched.has_work() and not self._stalled() and self._step_due():
                self._step()
            self._complete_pending()
        self._shutdown()

    def _stalled(self) -> bool:
        """While stalled only the control channel is served."""
        wait = self.stalled_until - time.monotonic()
        if wait <= 0:
            return False
        if self.control.poll(int(min(wait * 1000, IDLE_POLL_MS))):
            self._serve_control()
        return True

    def _poll_timeout_ms(self) -> int:
        if not self.sched.has_work():
            return IDLE_POLL_MS
        wait = self.next_step_at - time.monotonic() if self.settings.step_time > 0 else 0
        return max(0, min(IDLE_POLL_MS, math.ceil(wait * 1000)))

    def _step_due(self) -> bool:
        """With --step-time, steps end step_time apart (the "model" runs meanwhile)."""
        step_time = self.settings.step_time
        if step_time <= 0:
            return True
        now = time.monotonic()
        if self.next_step_at < now - step_time:  # idle until now: a step starts
            self.next_step_at = now + step_time
        if now < self.next_step_at:
            return False
        self.next_step_at += step_time
        return True

    def _drain_input(self, sock: zmq.Socket, poller: zmq.Poller) -> None:
        while self.input_alive and time.monotonic() >= self.stalled_until:
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                self._handle_input(frames)
            except InputPoisoned as e:
                logger.error("EngineCore input thread died (no more input is read): %s", e)
                self.input_alive = False
                for s in self.inputs:
                    poller.unregister(s)

    def _step(self) -> None:
        by_client, aux, finished = self.sched.step()
        self.counters.steps += 1
        for _, reason in finished:
            self.counters.finished[FINISH_REASON_NAMES[reason]] += 1
        self.counters.remember_finished(r.id for r, _ in finished)
        stats = self.sched.stats() if self.log_stats else None
        if stats is not None and not by_client:
            by_client[0] = []  # an empty step still reports stats
        timestamp = time.monotonic()
        for client, outs in by_client.items():
            self._send(client, EngineCoreOutputs(
                outputs=outs, scheduler_stats=stats, timestamp=timestamp,
                weight_version=self.weight_version), aux.get(client))
            stats = None  # stats go to one client only

    def _send(self, client_index: int, outs: EngineCoreOutputs,
              aux: list[bytes] | None = None) -> None:
        if not self.output_alive:
            return
        if not 0 <= client_index < len(self.outputs):
            # vLLM's output thread dies on the IndexError and never sends again.
            logger.error("EngineCore output thread died: IndexError: client_index %d "
                         "with %d output socket(s)", client_index, len(self.outputs))
            self.output_alive = False
            return
        self.outputs[client_index].send_multipart(encode_outputs(outs, aux))

    def _finish_outside_step(self, requests: list[tuple[int, str]],
                             reason: FinishReason) -> None:
        """Terminal outputs the engine builds itself (abort, preprocessing error):
        no tokens, and ``finished_requests`` set. ``requests``: (client, id)."""
        by_client: dict[int, list[str]] = {}
        for client, request_id in requests:
            by_client.setdefault(client, []).append(request_id)
        for client, ids in by_client.items():
            self._send(client, EngineCoreOutputs(
                outputs=[EngineCoreOutput(i, [], finish_reason=reason) for i in ids],
                finished_requests=ids, timestamp=time.monotonic()))
        self.counters.finished[FINISH_REASON_NAMES[reason]] += len(requests)
        self.counters.remember_finished(request_id for _, request_id in requests)

    def _abort_in_flight(self) -> None:
        """Engine-initiated abort of everything (pause, shutdown, abort_all)."""
        aborted = self.sched.remove_all()
        self._finish_outside_step([(r.client_index, r.id) for r in aborted],
                                  FinishReason.ABORT)

    def _shutdown(self) -> None:
        """SIGTERM/SIGINT with --shutdown-timeout 0: abort in-flight requests, exit."""
        logger.info("[shutdown] EngineCore: trigger received signal=%s",
                    self.shutdown_requested)
        if self.sched.live:
            logger.info("[shutdown] EngineCore: aborting in-flight requests count=%d",
                        len(self.sched.live))
        self._abort_in_flight()
        if self.sched.has_work():
            self._step()  # the last, empty step: vLLM exits once it has no work

    # --- input

    def _handle_input(self, frames: list[bytes]) -> None:
        type_frame, *data = frames
        if type_frame not in _KNOWN_TYPES:
            raise InputPoisoned(f"ValueError: {type_frame!r} is not a valid "
                                "EngineCoreRequestType")
        if not data:
            raise InputPoisoned("IndexError: no payload frame")
        if type_frame == RequestType.ADD.value:
            self._on_add(data[0])
        elif type_frame == RequestType.UTILITY.value:
            self._on_utility(data[0])
        elif type_frame == RequestType.ABORT.value:
            self._on_abort(data[0])
        else:
            self._on_other(type_frame, data[0])

    def _on_add(self, payload: bytes) -> None:
        try:
            req = decode_add(payload)
            params = req.sampling_params
            if params is not None:
                normalize(params)
                check(params)  # SamplingParams.__post_init__ runs at decode time
        except (msgspec.DecodeError, ValidationError) as e:
            raise InputPoisoned(f"undecodable or invalid ADD: {e}") from e
        self.counters.adds += 1
        if params is None and req.pooling_params is not None:
            raise EngineDead("ValueError: Unsupported task: this model only generates")
        if params is None or params.max_tokens is None or req.prompt_token_ids is None:
            # preprocess_add_request fails: a request-scoped ERROR, not a crash.
            logger.error("Unexpected error pre-processing request %s", req.request_id)
            self._finish_outside_step([(req.client_index, req.request_id)],
                                      FinishReason.ERROR)
            return
        request = Request(req, params, self.facts, self.args.seed, self.log_stats)
        error = self.error_next > 0
        self.error_next -= error
        self.sched.add(request, error=error)

    def _on_abort(self, payload: bytes) -> None:
        try:
            ids = set(decode_abort(payload))
        except msgspec.ValidationError as e:
            raise EngineDead(f"TypeError: bad ABORT payload: {e}") from e
        except msgspec.DecodeError as e:
            raise InputPoisoned(f"undecodable ABORT: {e}") from e
        gone = self.sched.remove(ids)
        self.counters.aborted += len(gone)
        self.counters.remember_finished(r.id for r in gone)
        unknown = ids - {r.id for r in gone}
        after_finish = sum(1 for i in unknown if i in self.counters.finished_ids)
        self.counters.aborts_after_finish += after_finish
        self.counters.aborts_unknown += len(unknown) - after_finish

    def _on_other(self, type_frame: bytes, payload: bytes) -> None:
        try:
            msgspec.msgpack.decode(payload)
        except msgspec.DecodeError as e:
            raise InputPoisoned(f"undecodable payload: {e}") from e
        if type_frame == _EXECUTOR_FAILED:
            raise EngineDead("RuntimeError: Executor failed.")
        if type_frame == RequestType.START_DP_WAVE.value:
            logger.error("Unrecognized input request type encountered: %s",
                         RequestType.START_DP_WAVE)

    # --- utilities

    def _on_utility(self, payload: bytes) -> None:
        try:
            client_index, call_id, method, args = decode_utility(payload)
        except msgspec.DecodeError as e:
            raise InputPoisoned(f"malformed UTILITY payload: {e}") from e
        if method == "handle_fault_tolerance":
            raise InputPoisoned("AttributeError: 'EngineCoreProc' object has no attribute "
                                "'ft_sentinel'")
        self.counters.utility_calls += 1
        value, failure = None, None
        try:
            value = self._call_utility(method, args)
        except Exception as e:  # noqa: BLE001 - reported to the caller, like vLLM
            logger.warning("Invocation of %s method failed: %s", method, e)
            failure = f"Call to {method} method failed: {e}"
        if isinstance(value, _Pending):
            self.pending.append((client_index, call_id, method, value))
            return
        self._reply(client_index, call_id, value, failure)

    def _call_utility(self, method: str, args: list) -> Any:
        func = self.utilities.get(method)
        if func is None:
            raise AttributeError(f"'EngineCoreProc' object has no attribute '{method}'")
        if len(args) > len(inspect.signature(func).parameters):
            raise AssertionError()  # vLLM's bare assert: an empty message
        return func(*args)

    def _reply(self, client_index: int, call_id: int, value: Any,
               failure: str | None) -> None:
        self._send(client_index, utility_reply(call_id, value, failure,
                                               timestamp=time.monotonic()))

    def _complete_pending(self) -> None:
        """Answer deferred calls (pause "wait") once the engine has drained."""
        if not self.pending or self.sched.has_work():
            return
        pending, self.pending = self.pending, []
        for client_index, call_id, method, p in pending:
            try:
                self._reply(client_index, call_id, p.complete(), None)
            except Exception as e:  # noqa: BLE001
                self._reply(client_index, call_id, None,
                            f"Call to {method} method failed: {e}")

    def pause_scheduler(self, mode: str = "abort", clear_cache: bool = True) -> Any:
        if mode not in ("abort", "wait", "keep"):
            raise ValueError(f"Invalid pause mode: {mode}")
        if mode == "abort":
            self._abort_in_flight()
        self.sched.pause_state = PauseState.PAUSED_ALL if mode == "keep" \
            else PauseState.PAUSED_NEW

        def finish() -> None:
            if clear_cache:
                self.sched.reset_prefix_cache(reset_running_requests=True)

        if not self.sched.has_work():
            return finish()
        return _Pending(finish)

    def resume_scheduler(self) -> None:
        self.sched.pause_state = PauseState.UNPAUSED

    def is_scheduler_paused(self) -> bool:
        return self.sched.pause_state != PauseState.UNPAUSED

    def sleep(self, level: int = 1, mode: str = "abort") -> Any:
        paused = self.pause_scheduler(mode=mode, clear_cache=level >= 1)
        if level < 1:
            return paused

        def fall_asleep() -> None:
            if isinstance(paused, _Pending):
                paused.complete()
            self.asleep = {"weights", "kv_cache"}

        return _Pending(fall_asleep) if isinstance(paused, _Pending) else fall_asleep()

    def wake_up(self, tags: list[str] | None = None) -> bool:
        if tags is not None:
            tags = [t for t in tags if t != "scheduling"]
        if tags is None:
            self.asleep.clear()
        else:
            self.asleep.difference_update(tags)
        if not self.asleep:
            self.resume_scheduler()
        return not self.asleep

    def reset_prefix_cache(self, reset_running_requests: bool = False,
                           reset_connector: bool = False) -> bool:
        return self.sched.reset_prefix_cache(reset_running_requests)

    def set_weight_version(self, weight_version: str) -> None:
        self.weight_version = weight_version

    # --- control channel

    def _serve_control(self) -> None:
        try:
            reply = self._control(msgspec.msgpack.decode(self.control.recv()))
        except (EngineDead, SilentExit):  # acknowledge, then die
            self.control.send(msgspec.msgpack.encode({"ok": True}))
            raise
        except Exception as e:  # noqa: BLE001 - a bad command must not kill the mock
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        self.control.send(msgspec.msgpack.encode(reply))

    def _control(self, cmd: dict) -> dict:
        name = cmd.get("cmd") if isinstance(cmd, dict) else None
        if name == "stats":
            return {"ok": True, **self._stats()}
        if name == "crash":
            raise EngineDead("crash requested on the control channel")
        if name == "exit":
            raise SilentExit
        if name == "stall":
            seconds = cmd.get("seconds")
            self.stalled_until = math.inf if seconds is None else time.monotonic() + seconds
            return {"ok": True}
        if name == "configure":
            return {"ok": True, **self._configure(cmd)}
        if name == "error_next":
            self.error_next = int(cmd.get("count", 1))
            return {"ok": True}
        if name == "abort_all":
            count = len(self.sched.live)
            self._abort_in_flight()
            return {"ok": True, "aborted": count}
        raise ValueError(f"unknown control command {name!r}")

    def _configure(self, cmd: dict) -> dict:
        s = self.settings
        if "step_time" in cmd:
            s.step_time = max(0.0, float(cmd["step_time"]))
        if "tokens_per_step" in cmd:
            s.tokens_per_step = max(1, int(cmd["tokens_per_step"]))
        if "eos_rate" in cmd:
            s.eos_rate = min(1.0, max(0.0, float(cmd["eos_rate"])))
        return {"step_time": s.step_time, "tokens_per_step": s.tokens_per_step,
                "eos_rate": s.eos_rate}

    def _stats(self) -> dict:
        c, sched = self.counters, self.sched
        return {
            "running": len(sched.running),
            "waiting": len(sched.waiting) + len(sched.erroring),
            "finished": {"total": sum(c.finished.values()), **c.finished},
            "aborted": c.aborted,
            "aborts_unknown": c.aborts_unknown,
            "aborts_after_finish": c.aborts_after_finish,
            "adds": c.adds,
            "steps": c.steps,
            "utility_calls": c.utility_calls,
            "input_alive": self.input_alive,
            "paused": self.is_scheduler_paused(),
        }


# --------------------------------------------------------------------------- CLI

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="engine-core --mock",
        description="A protocol-faithful mock of a headless vLLM 0.32 EngineCore.")
    p.add_argument("--frontend-addr", required=True,
                   help="the frontend's handshake ROUTER, e.g. tcp://127.0.0.1:13345")
    p.add_argument("--model", type=Path, help="model directory: vocab size, special ids")
    p.add_argument("--vocab-size", type=int, default=1200, help="without --model")
    p.add_argument("--eos-token-id", type=int, default=2, help="without --model")
    p.add_argument("--max-model-len", type=int, default=1024)
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--step-time", type=float, default=0.0, help="seconds per step")
    p.add_argument("--tokens-per-step", type=int, default=1)
    p.add_argument("--eos-rate", type=float, default=0.0)
    p.add_argument("--disable-log-stats", action="store_true")
    p.add_argument("--control-addr", help="bind a REP control socket here")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--handshake-timeout", type=float, default=HANDSHAKE_TIMEOUT_MINS * 60,
                   help="seconds to wait for INIT after HELLO (vLLM: 5 minutes)")
    args = p.parse_args(argv)
    if args.max_model_len < 2 or args.max_num_seqs < 1 or args.tokens_per_step < 1:
        p.error("--max-model-len must be >= 2, --max-num-seqs and --tokens-per-step >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(levelname)s %(asctime)s [mock-engine] %(message)s")
    facts = load_model_facts(args.model, args.vocab_size, args.eos_token_id)
    logger.info("mock EngineCore: vocab=%d eos=%d max_model_len=%d max_num_seqs=%d",
                facts.vocab_size, facts.eos_token_id, args.max_model_len, args.max_num_seqs)
    return MockEngine(args, facts).run()


if __name__ == "__main__":
    sys.exit(main())
