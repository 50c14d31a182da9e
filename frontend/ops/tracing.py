"""Request tracing (``--otlp-traces-endpoint``), as vLLM 0.32 does it.

One OpenTelemetry span per finished engine request, made when its last output
is routed: name ``llm_request``, kind SERVER, from the request's arrival to
now, with vLLM's ``gen_ai.*`` attributes (``do_tracing`` in
``vllm/v1/engine/output_processor.py``). Its parent is the W3C trace context
the client sent (``traceparent``/``tracestate``, which
``frontend/openai/common.py`` also puts into ``EngineCoreRequest.trace_headers``
for the engine). Spans leave from the SDK's batch processor thread through
the OTLP exporter: gRPC by default, HTTP with
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``.

OpenTelemetry (the ``tracing`` extra) is imported only when tracing is on;
off, nothing of it is loaded and no span work is done.
"""

from __future__ import annotations

import atexit
import logging
import os
import time
from typing import TYPE_CHECKING, Any, cast

from frontend.ops.counting import generated_tokens

if TYPE_CHECKING:
    from frontend.choices import Choice
    from frontend.ops.counting import RequestStats

log = logging.getLogger("frontend.tracing")

SPAN_NAME = "llm_request"
# The instrumentation scope and resource attributes vLLM's API server uses.
TRACER_NAME = "vllm.tracing.otel"
INSTRUMENTING_MODULE = "vllm.llm_engine"
PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"


def _span_exporter(endpoint: str):
    protocol = os.environ.get(PROTOCOL_ENV, "grpc")
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter(endpoint=endpoint, insecure=True)
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpSpanExporter,
        )

        return HttpSpanExporter(endpoint=endpoint)
    raise ValueError(f"Unsupported OTLP protocol '{protocol}' is configured")


class RequestTracer:
    """Exports one span per finished engine request (``StatsRecorder.tracer``)."""

    def __init__(self, endpoint: str) -> None:
        """Raises ValueError when OpenTelemetry is missing or the protocol unknown."""
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace import SpanKind
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )
        except ImportError as e:
            raise ValueError(
                "OpenTelemetry is not available. Unable to configure "
                "'otlp_traces_endpoint'. Ensure OpenTelemetry packages are installed "
                f"(pip install 'vllm-frontend[tracing]'). Original error:\n{e}"
            ) from None
        exporter = _span_exporter(endpoint)
        self.provider = TracerProvider(
            resource=Resource.create(
                {
                    "vllm.instrumenting_module_name": INSTRUMENTING_MODULE,
                    "vllm.process_id": str(os.getpid()),
                }
            )
        )
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        atexit.register(self.provider.shutdown)  # exports what is still queued
        self.tracer = self.provider.get_tracer(TRACER_NAME)
        self.kind = SpanKind.SERVER
        self.propagator = TraceContextTextMapPropagator()

    def finished(self, choice: Choice, rec: RequestStats, now: float) -> None:
        """``now``: time.monotonic() when the finishing output was taken up."""
        group = choice.group
        params = choice.params
        attributes: dict[str, Any] = {
            "gen_ai.latency.time_to_first_token": rec.ttft,
            "gen_ai.latency.e2e": now - rec.arrival,
        }
        if rec.scheduled_ts:  # the engine's events (its log stats) came
            attributes["gen_ai.latency.time_in_queue"] = rec.scheduled_ts - rec.queued_ts
        attributes["gen_ai.usage.prompt_tokens"] = len(choice.prompt_token_ids)
        attributes["gen_ai.usage.completion_tokens"] = generated_tokens(choice)
        if rec.scheduled_ts:
            attributes["gen_ai.latency.time_in_model_prefill"] = rec.first_ts - rec.scheduled_ts
        last = cast(float, rec.last_ts)  # (its finishing output was an output)
        attributes["gen_ai.latency.time_in_model_decode"] = last - rec.first_ts
        if rec.scheduled_ts:
            attributes["gen_ai.latency.time_in_model_inference"] = last - rec.scheduled_ts
        attributes["gen_ai.request.id"] = group.request_id
        # Only the truthy ones, as vLLM (so no temperature 0).
        for key, value in (
            ("gen_ai.request.top_p", params.top_p),
            ("gen_ai.request.max_tokens", params.max_tokens),
            ("gen_ai.request.temperature", params.temperature),
            ("gen_ai.request.n", params.n),
        ):
            if value:
                attributes[key] = value
        headers = group.trace_headers
        context = self.propagator.extract(headers) if headers else None
        start_ns = time.time_ns() - int((time.monotonic() - rec.arrival) * 1e9)
        span = self.tracer.start_span(
            SPAN_NAME, context=context, kind=self.kind, start_time=start_ns
        )
        span.set_attributes(attributes)
        span.end()
