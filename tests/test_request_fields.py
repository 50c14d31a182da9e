"""No request field vLLM 0.32 accepts is dropped without a word (issue 24).

Derived from vLLM's own pydantic request models (and, for
``/inference/v1/generate``'s ``sampling_params``, its SamplingParams): every
field vLLM declares is a field of our request struct for that route, so a
field a later vLLM adds shows up here as a failure. A field we declare is
either implemented as vLLM implements it (the parity modules compare those
answers with vLLM's server: tests/test_parity_completions.py,
tests/test_chat_parity.py, tests/test_pooling_parity.py) or refused with a
400 that names it: ``REFUSED`` lists those, and each is sent to a frontend to
see the refusal.
"""

from __future__ import annotations

import importlib

import msgspec
import pytest

from frontend.openai.chat import ChatCompletionRequest
from frontend.openai.completions import CompletionRequest
from frontend.openai.generate import GenerateRequest, GenerateSamplingParams
from frontend.pooling import schemas
from tests.support.http_client import post
from tests.support.requirements import require_vllm

# vLLM's model (module, class) -> our struct for the same body.
ROUTES = {
    ("vllm.entrypoints.openai.completion.protocol", "CompletionRequest"): CompletionRequest,
    ("vllm.entrypoints.openai.chat_completion.protocol", "ChatCompletionRequest"):
        ChatCompletionRequest,
    ("vllm.entrypoints.scale_out.token_in_token_out.protocol", "GenerateRequest"):
        GenerateRequest,
    ("vllm.entrypoints.pooling.embed.protocol", "EmbeddingCompletionRequest"):
        schemas.EmbeddingRequest,
    ("vllm.entrypoints.pooling.embed.protocol", "EmbeddingChatRequest"):
        schemas.EmbeddingRequest,
    ("vllm.entrypoints.pooling.embed.protocol", "CohereEmbedRequest"):
        schemas.CohereEmbedRequest,
    ("vllm.entrypoints.pooling.classify.protocol", "ClassificationCompletionRequest"):
        schemas.ClassificationRequest,
    ("vllm.entrypoints.pooling.classify.protocol", "ClassificationChatRequest"):
        schemas.ClassificationRequest,
    ("vllm.entrypoints.pooling.pooling.protocol", "PoolingCompletionRequest"):
        schemas.PoolingRequest,
    ("vllm.entrypoints.pooling.pooling.protocol", "PoolingChatRequest"): schemas.PoolingRequest,
    ("vllm.entrypoints.pooling.scoring.protocol", "RerankRequest"): schemas.RerankRequest,
}

# Generation routes' fields we refuse, each with a body that sets it (a route
# of a generation model, so a mock stack serves it).
REFUSED = {
    ("/v1/completions", "prompt_embeds"):
        {"model": "tiny", "prompt_embeds": "AAAA", "max_tokens": 2},
    ("/v1/completions", "suffix"): {"model": "tiny", "prompt": "a", "suffix": "b"},
    ("/v1/chat/completions", "functions"):
        {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
         "functions": [{"name": "f"}]},
    ("/inference/v1/generate", "prompt_logprob_token_ids"):
        {"token_ids": [1, 2], "sampling_params": {"prompt_logprob_token_ids": [[1]]}},
    ("/inference/v1/generate", "prompt_logprob_start"):
        {"token_ids": [1, 2], "sampling_params": {"prompt_logprob_start": 0}},
    ("/inference/v1/generate", "trace_decode_token_ids"):
        {"token_ids": [1, 2], "sampling_params": {"trace_decode_token_ids": [1]}},
    ("/inference/v1/generate", "features"): {"token_ids": [1, 2], "sampling_params": {},
                                             "features": {"mm_hashes": {}}},
    ("/inference/v1/generate", "content_parts"):
        {"token_ids": [1, 2], "sampling_params": {},
         "content_parts": [{"type": "image_url", "url": "http://example.com/a.png"}]},
}


def our_fields(struct: type) -> set[str]:
    return {f.encode_name for f in msgspec.structs.fields(struct)}


def vllm_fields(module: str, name: str) -> set[str]:
    model = getattr(importlib.import_module(module), name)
    return {field.alias or field_name for field_name, field in model.model_fields.items()}


@pytest.fixture(scope="module")
def vllm_sampling_params_fields() -> set[str]:
    require_vllm()
    from vllm.sampling_params import SamplingParams

    return {f for f in SamplingParams.__struct_fields__ if not f.startswith("_")}


@pytest.mark.parametrize("route", list(ROUTES), ids=[name for _, name in ROUTES])
def test_every_field_of_vllms_request_model_is_ours(route):
    require_vllm()
    missing = vllm_fields(*route) - our_fields(ROUTES[route])
    assert not missing, f"vLLM's {route[1]} fields this frontend would drop: {sorted(missing)}"


def test_every_sampling_param_of_generate_is_ours(vllm_sampling_params_fields):
    missing = vllm_sampling_params_fields - our_fields(GenerateSamplingParams)
    assert not missing, f"vLLM's SamplingParams fields generate would drop: {sorted(missing)}"


@pytest.fixture(scope="module")
def mock_frontend(tiny_model_dir, tmp_path_factory):
    from harness.frontend import launch_mock_stack

    stack = launch_mock_stack(tiny_model_dir, tmp_path_factory.mktemp("fields"))
    yield stack.frontend
    stack.stop()


@pytest.mark.parametrize("case", list(REFUSED), ids=[f"{p}:{f}" for p, f in REFUSED])
def test_a_refused_field_is_named_in_a_400(case, mock_frontend):
    path, field_name = case
    reply = post(mock_frontend.url, path, REFUSED[case])
    assert reply.status == 400, reply.body
    error = reply.json["error"]
    assert field_name in (error["param"] or "") or field_name in error["message"], error
