"""Request tracing (``--otlp-traces-endpoint``): vLLM's spans at a local OTLP receiver.

The frontend (on a mock engine, which sends vLLM's QUEUED/SCHEDULED events)
exports one ``llm_request`` span per engine request to a gRPC receiver (the
default protocol) or an HTTP/protobuf one, child of the client's W3C
``traceparent``, with the attributes vLLM 0.32's API server sets
(``vllm/v1/engine/output_processor.py`` ``do_tracing``). Off, OpenTelemetry is
not even imported, and the trace headers do not reach the engine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from frontend.choices import Group
from frontend.model import load_model_info
from frontend.openai.common import trace_headers
from frontend.openai.completions import CompletionRequest
from frontend.openai.sampling import build_sampling_params
from harness.frontend import SERVED_NAME
from harness.procs import BIN_DIR
from harness.state import make_state
from harness.waits import wait_for
from protocol import wire
from tests.support.http_client import post
from tests.support.otlp import GrpcReceiver, HttpReceiver

ROOT = Path(__file__).resolve().parent.parent
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
SPAN_KIND_SERVER = 2
# What vLLM sets on every span, and the request parameters it adds when truthy.
ALWAYS = {"gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e",
          "gen_ai.latency.time_in_queue", "gen_ai.usage.prompt_tokens",
          "gen_ai.usage.completion_tokens", "gen_ai.latency.time_in_model_prefill",
          "gen_ai.latency.time_in_model_decode", "gen_ai.latency.time_in_model_inference",
          "gen_ai.request.id"}
PARAMS = {"gen_ai.request.top_p", "gen_ai.request.max_tokens", "gen_ai.request.temperature",
          "gen_ai.request.n"}
# Spans leave in batches; a short delay keeps the test short.
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100"}


@pytest.fixture
def grpc_receiver():
    receiver = GrpcReceiver()
    yield receiver
    receiver.stop()


@pytest.fixture
def http_receiver():
    receiver = HttpReceiver()
    yield receiver
    receiver.stop()


def test_spans_at_an_otlp_grpc_receiver(start_ops_stack, grpc_receiver):
    stack = start_ops_stack("--otlp-traces-endpoint", grpc_receiver.endpoint,
                            env=FAST_EXPORT, engine_args=("--step-time", "0.005"))
    traced = post(stack.url, "/v1/completions", {
        "model": SERVED_NAME, "prompt": "trace me", "n": 2, "max_tokens": 5,
        "temperature": 0.7, "seed": 1, "ignore_eos": True},
        headers={"traceparent": TRACEPARENT, "tracestate": "vendor=1"})
    assert traced.status == 200, traced.body[:500]
    plain = post(stack.url, "/v1/chat/completions", {
        "model": SERVED_NAME, "max_tokens": 3, "temperature": 0, "ignore_eos": True,
        "messages": [{"role": "user", "content": "hi"}]})
    assert plain.status == 200, plain.body[:500]
    wait_for(lambda: len(grpc_receiver.spans()) >= 3, 15,
             message=lambda: f"spans: {grpc_receiver.spans()}\n{stack.frontend.log()[-2000:]}")
    spans = grpc_receiver.spans()
    assert len(spans) == 3
    children = [s for s in spans if s.trace_id == TRACE_ID]
    [root] = [s for s in spans if s.trace_id != TRACE_ID]
    assert len(children) == 2  # one per engine request (n=2)

    body = traced.json
    for span in spans:
        assert (span.name, span.kind, span.scope) == ("llm_request", SPAN_KIND_SERVER,
                                                      "vllm.tracing.otel")
        assert span.resource["vllm.instrumenting_module_name"] == "vllm.llm_engine"
        assert span.resource["vllm.process_id"] == str(stack.frontend.proc.pid)
        a = span.attributes
        assert 0 < a["gen_ai.latency.time_to_first_token"] <= a["gen_ai.latency.e2e"]
        assert a["gen_ai.latency.time_in_queue"] >= 0
        assert a["gen_ai.latency.time_in_model_prefill"] >= 0
        assert a["gen_ai.latency.time_in_model_decode"] > 0
        assert a["gen_ai.latency.time_in_model_inference"] == pytest.approx(
            a["gen_ai.latency.time_in_model_prefill"] + a["gen_ai.latency.time_in_model_decode"])
        # The span covers arrival to the last output.
        assert (span.end_ns - span.start_ns) / 1e9 == pytest.approx(
            a["gen_ai.latency.e2e"], abs=0.05)
    for span in children:
        a = span.attributes
        assert span.parent_span_id == PARENT_ID
        assert set(a) == ALWAYS | PARAMS
        assert a["gen_ai.request.id"] == body["id"]
        assert a["gen_ai.usage.prompt_tokens"] == body["usage"]["prompt_tokens"]
        assert a["gen_ai.usage.completion_tokens"] == 5
        assert (a["gen_ai.request.max_tokens"], a["gen_ai.request.n"],
                a["gen_ai.request.top_p"]) == (5, 1, 1.0)
        assert a["gen_ai.request.temperature"] == pytest.approx(0.7)
    # No traceparent: a root span of its own; temperature 0 is not set (vLLM
    # sets only truthy parameters).
    assert root.parent_span_id == ""
    assert set(root.attributes) == ALWAYS | PARAMS - {"gen_ai.request.temperature"}
    assert root.attributes["gen_ai.request.id"] == plain.json["id"]
    assert root.attributes["gen_ai.usage.completion_tokens"] == 3


def test_spans_over_otlp_http(start_ops_stack, http_receiver):
    stack = start_ops_stack(
        "--otlp-traces-endpoint", http_receiver.endpoint,
        env={**FAST_EXPORT, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"})
    reply = post(stack.url, "/inference/v1/generate", {
        "model": SERVED_NAME, "token_ids": [1, 468, 995],
        "sampling_params": {"temperature": 0, "max_tokens": 4}},
        headers={"traceparent": TRACEPARENT})
    assert reply.status == 200, reply.body[:500]
    wait_for(lambda: http_receiver.spans(), 15, message=stack.frontend.log)
    [span] = http_receiver.spans()
    assert (span.name, span.trace_id, span.parent_span_id) == ("llm_request", TRACE_ID,
                                                               PARENT_ID)
    assert span.attributes["gen_ai.usage.prompt_tokens"] == 3


def start_frontend(model: str, *args: str, env: dict[str, str] | None = None
                   ) -> subprocess.CompletedProcess:
    """A frontend start that must stop before it waits for any engine."""
    return subprocess.run(
        [str(BIN_DIR / "frontend"), "--engine-addr", "tcp://127.0.0.1:1", "--model", model,
         *args], capture_output=True, text=True, timeout=60, cwd=ROOT,
        env={**os.environ, **(env or {})})


def test_inconsistent_tracing_flags_stop_the_start():
    proc = start_frontend("/nonexistent", "--otlp-traces-endpoint", "127.0.0.1:4317",
                          "--disable-log-stats")
    assert proc.returncode == 2
    assert "--otlp-traces-endpoint needs the request stats" in proc.stderr


def test_unknown_otlp_protocol_stops_the_start(tiny_model_dir):
    proc = start_frontend(str(tiny_model_dir), "--otlp-traces-endpoint", "127.0.0.1:4317",
                          env={"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "carrier-pigeon"})
    assert proc.returncode == 2
    assert "Unsupported OTLP protocol 'carrier-pigeon' is configured" in proc.stderr


def test_tracing_off_imports_no_opentelemetry():
    """Everything the frontend process loads, without tracing: no OpenTelemetry."""
    code = ("import json, sys, frontend.cli, frontend.server, frontend.openai.routes\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('opentelemetry'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []


def test_trace_headers_go_to_the_engine(tiny_model_dir):
    """``EngineCoreRequest.trace_headers`` (element 14) carries the client's
    context when the group has it (tracing on), and nothing otherwise."""
    model = load_model_info(str(tiny_model_dir), served_names=["tiny"])
    sent: list[list[bytes]] = []
    state = make_state(model, 1024)
    state.table.engine.send_add = lambda frames, rank, on_failed=None: sent.append(frames)
    req = CompletionRequest(model="tiny", prompt="x", max_tokens=2)
    params = build_sampling_params(model, req.to_sampling_fields(), max_tokens=2,
                                   stream=False)
    headers = {"traceparent": TRACEPARENT, "tracestate": "a=b", "x-other": "no"}
    for context in (trace_headers(headers), None):
        group = Group("cmpl-t", stream=False)
        group.trace_headers = context
        state.table.add_choice(group, index=0, prompt_index=0, prompt_token_ids=[5, 6],
                               params=params)
        state.table.submit(group)
        state.table.release(group)
    traced, untraced = (wire.decode_add(frames[1]) for frames in sent)
    assert traced.trace_headers == {"traceparent": TRACEPARENT, "tracestate": "a=b"}
    assert untraced.trace_headers is None
