"""The Messages API's routes."""

from __future__ import annotations

from frontend.openai.route import Route
from frontend.state import AppState


def anthropic_routes(state: AppState) -> list[Route]:
    return []
