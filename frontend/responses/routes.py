"""The Responses API's routes."""

from __future__ import annotations

from frontend.openai.route import Route
from frontend.state import AppState


def responses_routes(state: AppState) -> list[Route]:
    return []
