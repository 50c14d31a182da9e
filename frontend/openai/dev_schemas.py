"""The JSON bodies of the development and profiling routes, as /openapi.json
describes them (vLLM's pydantic models and ``Body(embed=True)`` fields). The
handlers read the bodies the way FastAPI does (``fastapi_params.py``), so
that their errors are vLLM's; these structs are their description."""

from __future__ import annotations

from typing import Any, Literal

import msgspec


class CollectiveRpcRequest(msgspec.Struct, kw_only=True):
    """A worker method and its arguments (strings: the method parses them)."""

    method: str
    args: list[str] = []
    kwargs: dict[str, Any] = {}
    timeout: float | None = None


class RlAbortRequest(msgspec.Struct, kw_only=True):
    """External request ids; none or empty: every request in flight."""

    request_ids: list[str] | None = None


class InitWeightTransferRequest(msgspec.Struct, kw_only=True):
    init_info: dict[str, Any]


class UpdateWeightsRequest(msgspec.Struct, kw_only=True):
    update_info: dict[str, Any] | list[dict[str, Any]]


class FinishWeightUpdateRequest(msgspec.Struct, kw_only=True):
    weight_version: str | None = None


class UpdateWeightVersionRequest(msgspec.Struct, kw_only=True):
    new_version: str


class WeightCheckerRequest(msgspec.Struct, kw_only=True):
    action: Literal["checksum", "reset", "compare"]
    baseline: dict[str, str] | None = None


class StartProfileRequest(msgspec.Struct, kw_only=True):
    profile_prefix: str | None = None
    delay_iterations: int | None = None
    max_iterations: int | None = None
