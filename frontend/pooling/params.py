"""A request's PoolingParams, resolved as vLLM's API server resolves them.

The engine runs no ``PoolingParams.verify``: vLLM's server does, before it
sends (``_prepare_generators``), and so do we. Defaults come from the pooler
(``use_activation`` True for every task here: no ``--pooler-config`` reaches
the frontend), Matryoshka ``dimensions`` are checked against the model's
config, and parameters a task does not take are refused. Messages are vLLM's.
"""

from __future__ import annotations

import msgspec

from frontend.errors import ApiError, from_validation
from frontend.pooling.model import PoolingModel
from protocol.errors import ValidationError
from protocol.pooling import REMOVED_TASKS, PoolingParams

# PoolingParams.valid_parameters
VALID_PARAMETERS = {
    "embed": ["dimensions", "use_activation"],
    "classify": ["use_activation"],
    "token_embed": ["dimensions", "use_activation"],
    "token_classify": ["use_activation"],
}
ALL_PARAMETERS = ("dimensions", "use_activation")


def reject_removed(normalize: object, task: object) -> None:
    """vLLM's ``reject_removed_pooling_parameters`` (runs before any other check)."""
    if normalize is not msgspec.UNSET:  # present, even as null
        raise from_validation(
            ValidationError(
                "Parameter `normalize` was removed; use `use_activation` instead.",
                parameter="normalize",
            )
        )
    if isinstance(task, str) and task in REMOVED_TASKS:
        raise from_validation(ValidationError(REMOVED_TASKS[task], parameter="task"))


def resolve(params: PoolingParams, model: PoolingModel, served_name: str) -> PoolingParams:
    """``PoolingParams.verify``: defaults filled in, then checked (400s)."""
    task = params.task
    if task not in VALID_PARAMETERS:  # plugin tasks: the plugin checks
        return params
    if params.skip_reading_prefix_cache is None:
        params.skip_reading_prefix_cache = task in ("token_embed", "token_classify")
    if params.use_activation is None:
        params.use_activation = True
    if task in ("embed", "token_embed") and params.dimensions is not None:
        check_dimensions(params.dimensions, model, served_name)
    invalid = [
        k
        for k in ALL_PARAMETERS
        if k not in VALID_PARAMETERS[task] and getattr(params, k) is not None
    ]
    if invalid:
        raise ApiError(
            f"Task {task!r} only supports {VALID_PARAMETERS[task]} parameters, "
            f"does not support {invalid} parameters"
        )
    return params


def check_dimensions(dimensions: int, model: PoolingModel, served_name: str) -> None:
    size = model.embedding_size
    if not model.is_matryoshka:
        raise ApiError(
            f"Model {served_name!r} does not support Matryoshka embeddings; "
            f"dimensions must be unset (received dimensions={dimensions})."
        )
    if not 1 <= dimensions <= size:
        raise ApiError(
            f"Model {served_name!r} only supports dimensions in range "
            f"[1, {size}], got {dimensions}."
        )
    allowed = model.matryoshka_dimensions
    if allowed is not None and dimensions not in allowed:
        raise ApiError(
            f"Model {served_name!r} only supports Matryoshka dimensions "
            f"{allowed}, got {dimensions}."
        )
