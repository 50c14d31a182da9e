"""The Responses API's routes (vLLM 0.32's ``responses/api_router.py``)."""

from __future__ import annotations

from frontend.openai.counting import choice_counter
from frontend.openai.route import Route
from frontend.responses.handlers import ResponsesApi
from frontend.responses.request import ResponsesRequest
from frontend.state import AppState

# Admission control: a response is one engine request.
count_choices = choice_counter(lambda counts: 1)


def responses_routes(state: AppState) -> list[Route]:
    api = ResponsesApi(state)
    return [
        Route("POST", "/v1/responses", api.create, count_choices, ResponsesRequest),
        Route("GET", "/v1/responses/{response_id}", api.retrieve),
        Route("POST", "/v1/responses/{response_id}/cancel", api.cancel),
    ]
