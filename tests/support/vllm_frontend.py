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
