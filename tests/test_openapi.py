"""GET /openapi.json: a valid OpenAPI 3.1 document, generated from the request
structs, that covers every route; Schemathesis loads it and can generate a
request for every operation."""

from __future__ import annotations

from types import SimpleNamespace

import msgspec
import pytest

from frontend.anthropic import schemas as anthropic
from frontend.anthropic.routes import anthropic_routes
from frontend.openai import chat, completions, generate, misc, openapi, scale_out
from frontend.openai.routes import openai_routes, operational_routes
from frontend.responses.request import ResponsesRequest
from frontend.responses.routes import responses_routes
from frontend.state import OperationalConfig
from tests.support.http_client import get

STRUCTS = {s.__name__: s for s in (completions.CompletionRequest, chat.ChatCompletionRequest,
                                   generate.GenerateRequest, misc.TokenizeRequest,
                                   misc.DetokenizeRequest, scale_out.AbortRequests,
                                   ResponsesRequest, anthropic.MessagesRequest,
                                   anthropic.CountTokensRequest)}


@pytest.fixture(scope="module")
def mock_url(tiny_model_dir, tmp_path_factory):
    from harness.frontend import launch_mock_stack

    stack = launch_mock_stack(tiny_model_dir, tmp_path_factory.mktemp("openapi"))
    yield stack.url
    stack.stop()


# POST routes whose body is not one struct (vLLM's have no request body schema either).
BODILESS = {"/ping", "/invocations", "/v1/responses/{response_id}/cancel"}


def every_route() -> set[tuple[str, str]]:
    """The route table of a frontend with debug endpoints, plus the operational
    routes every frontend has (/ping, /invocations, /load) and the server's own."""
    state = SimpleNamespace(config=SimpleNamespace(enable_debug_endpoints=True,
                                                   runtime_lora_updating=False),
                            operational=OperationalConfig())
    table = {(r.method.lower(), r.path) for r in openai_routes(state)}
    table |= {(r.method.lower(), r.path) for r in responses_routes(state)}
    table |= {(r.method.lower(), r.path) for r in operational_routes(state, [], True)}
    table |= {(r.method.lower(), r.path) for r in anthropic_routes(state)}
    return table | {("get", "/metrics"), ("get", "/openapi.json")}


def test_the_document_covers_every_route(mock_url):
    reply = get(mock_url, "/openapi.json")
    assert reply.status == 200 and reply.headers["Content-Type"].startswith("application/json")
    doc = reply.json
    assert doc["openapi"] == "3.1.0"
    served = {(method, path) for path, ops in doc["paths"].items() for method in ops}
    assert served == every_route()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert "200" in op["responses"], (method, path)
            if method == "post" and path not in BODILESS:
                ref = op["requestBody"]["content"]["application/json"]["schema"]["$ref"]
                assert ref.rsplit("/", 1)[1] in STRUCTS, ref
                assert op["responses"]["400"]["content"]["application/json"]["schema"] == {
                    "$ref": "#/components/schemas/ErrorResponse"}
    assert get(mock_url, "/openapi.json").body == reply.body  # built once


def test_schemathesis_loads_it_and_generates_every_operation(mock_url):
    import schemathesis
    from hypothesis import HealthCheck, given, settings

    schema = schemathesis.openapi.from_dict(get(mock_url, "/openapi.json").json)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {(op.method.lower(), op.path) for op in operations} == every_route()
    for op in operations:
        seen = []

        @settings(max_examples=5, database=None, deadline=None,
                  suppress_health_check=list(HealthCheck))
        @given(op.as_strategy())
        def draw(case):
            seen.append(case)

        draw()
        assert seen, op.path
        if op.method.lower() == "post" and op.path not in BODILESS:
            assert all(isinstance(case.body, dict) for case in seen), op.path


def test_request_schemas_are_the_structs():
    state = SimpleNamespace(config=SimpleNamespace(enable_debug_endpoints=False,
                                                   runtime_lora_updating=True))
    doc = openapi.describe([*openai_routes(state), *responses_routes(state),
                            *anthropic_routes(state)])
    components = doc["components"]["schemas"]
    for name, struct in STRUCTS.items():
        generated = msgspec.json.schema_components([struct], ref_template=openapi.REF)[1][name]
        assert set(components[name]["properties"]) == set(generated["properties"]), name
    assert set(components["GenerateRequest"]["required"]) == {"sampling_params", "token_ids"}
    assert "messages" in components["ChatCompletionRequest"]["required"]
    assert "prompt" in components["CompletionRequest"]["required"]


@pytest.mark.parametrize("struct, field", sorted(openapi.FIELD_SHAPES))
def test_field_shapes_describe_any_fields(struct, field):
    """A shape is given only where the struct says nothing (typed Any): a stale
    entry for a field that got a real type shows up here."""
    generated = msgspec.json.schema_components([STRUCTS[struct]])[1][struct]
    schema = {k: v for k, v in generated["properties"][field].items() if k != "default"}
    assert schema == {}, (struct, field, schema)
