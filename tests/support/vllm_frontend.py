"""vLLM's own Python API server, as the reference for parity tests.

``vllm_frontend`` (session): a second headless real engine (the
``start_real_engine`` factory, same model args as ``real_stack``'s) and the
unmodified ``vllm serve`` API server attached to it
(``harness.vllm_server.VllmFrontend``), so that every parity test can send one
request to our frontend and the same request to vLLM's.

Start-up takes a while on a CPU host (~20 s warm, minutes on a cold 2-core
box), so the processes are launched when the fixture is set up and waited for
on first use of ``url``: set up before ``frontend``/``real_stack`` (list it
first in a test's arguments) and both stacks start at the same time. The API
server logs to a file (``log_path``); its whole process group is killed at the
end of the session.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from harness.vllm_server import VllmFrontend
from tests.support.vllm_parsers import VllmMultiServer, on_scripted_mock, parser_flags

# vLLM's server with the flag sets of the tests that need more than its
# defaults, all on one engine (tests/support/vllm_multi_server.py): the agent
# APIs with a tool-call and a reasoning parser; the frontend flags of issue 24.
AGENT_FLAGS = parser_flags("hermes", "qwen3")
FRONTEND_FLAGS = [
    "--response-role", "bot", "--return-tokens-as-token-ids",
    "--enable-prompt-tokens-details", "--exclude-tools-when-tool-choice-none",
    "--default-chat-template-kwargs", '{"enable_thinking": false, "flavour": "mint"}',
    "--trust-request-chat-template", "--trust-request-mm-kwargs",
    "--chat-template-content-format", "string", "--root-path", "/api",
]
OPENAI_CONTENT_FLAGS = ["--chat-template-content-format", "openai"]
FLAG_SETS = {"agents": AGENT_FLAGS, "frontend-flags": FRONTEND_FLAGS,
             "openai-content": OPENAI_CONTENT_FLAGS}
# (the Responses API's store is off unless this is set)
FLAGGED_ENV = {"VLLM_ENABLE_RESPONSES_API_STORE": "1"}


@pytest.fixture(scope="session")
def vllm_frontend(start_real_engine, tiny_model_dir, tmp_path_factory) -> Iterator[VllmFrontend]:
    """vLLM's own API server on its own real engine (``.url``), for the session."""
    engine = start_real_engine()
    server = VllmFrontend(engine, tiny_model_dir,
                          tmp_path_factory.mktemp("vllm-frontend") / "vllm-serve.log")
    try:
        yield server
    finally:
        server.stop()
        engine.stop()


@pytest.fixture(scope="session")
def vllm_flagged(start_real_engine, tiny_model_dir, tmp_path_factory) -> Iterator[VllmMultiServer]:
    """vLLM's own API server with each of ``FLAG_SETS`` (``.url(name)``), on a
    real engine of its own; launched at set-up, waited for on first use."""
    engine = start_real_engine()
    port = int(engine.handshake_addr.rsplit(":", 1)[1])
    server = VllmMultiServer(tiny_model_dir, port, FLAG_SETS,
                             tmp_path_factory.mktemp("vllm-flagged") / "vllm.log",
                             "--enable-scale-out", env=FLAGGED_ENV, watch=[engine])
    try:
        yield server
    finally:
        server.stop()
        engine.stop()


# The agent APIs' tool-use modules script this mock's output. Its steps are
# unpaced (a non-streamed answer does not depend on them) but for vLLM's
# streams: those modules pace them, slower where vLLM's server merged a
# stream's steps, then set this back.
AGENT_MOCK_STEP_TIME = "0"


@pytest.fixture(scope="session")
def vllm_agents_on_mock(tiny_model_dir, tmp_path_factory):
    """vLLM's own API server with ``AGENT_FLAGS`` on a scripted mock engine:
    (the server, the mock's control), for the session."""
    with on_scripted_mock(tiny_model_dir, {"agents": AGENT_FLAGS},
                          tmp_path_factory.mktemp("vllm-agents-mock"),
                          AGENT_MOCK_STEP_TIME) as pair:
        yield pair
