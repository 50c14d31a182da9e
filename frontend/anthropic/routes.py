"""The Messages API's routes. /v1/messages is a generation route (a choice
counter: admission, the drain gate, load tracking); count_tokens renders
only, as chat's render route."""

from __future__ import annotations

from frontend.anthropic.messages import MessagesApi, count_choices
from frontend.anthropic.schemas import CountTokensRequest, MessagesRequest
from frontend.openai.route import Route
from frontend.state import AppState


def anthropic_routes(state: AppState) -> list[Route]:
    api = MessagesApi(state)
    return [
        Route("POST", "/v1/messages", api.create_messages, count_choices, MessagesRequest),
        Route("POST", "/v1/messages/count_tokens", api.count_tokens, body=CountTokensRequest),
    ]
