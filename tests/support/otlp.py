"""Local OTLP trace receivers (gRPC and HTTP/protobuf) that keep what they get.

Each gives ``spans()``: every span received so far, flattened with its
resource attributes and instrumentation scope name, attributes as plain
Python values.
"""

from __future__ import annotations

import threading
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class ReceivedSpan:
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    scope: str
    resource: dict[str, Any] = field(default_factory=dict)


def _value(v: AnyValue) -> Any:
    return getattr(v, v.WhichOneof("value"))


class _Collector:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[ReceivedSpan] = []

    def add(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        found = []
        for rs in request.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    found.append(ReceivedSpan(
                        s.name, s.kind, s.trace_id.hex(), s.span_id.hex(),
                        s.parent_span_id.hex(), s.start_time_unix_nano, s.end_time_unix_nano,
                        {a.key: _value(a.value) for a in s.attributes}, ss.scope.name,
                        resource))
        with self._lock:
            self._spans += found

    def spans(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self._spans)


class GrpcReceiver(_Collector):
    """An OTLP/gRPC TraceService on 127.0.0.1; ``endpoint`` is ``host:port``."""

    def __init__(self) -> None:
        super().__init__()
        collector = self

        class Service(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):  # noqa: N802 (gRPC's name)
                collector.add(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"127.0.0.1:{port}"
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=None)


class HttpReceiver(_Collector):
    """OTLP/HTTP (protobuf) on 127.0.0.1; ``endpoint`` is the full ``/v1/traces`` URL."""

    def __init__(self) -> None:
        super().__init__()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.add(trace_service_pb2.ExportTraceServiceRequest.FromString(body))
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
