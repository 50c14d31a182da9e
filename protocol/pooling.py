"""vLLM 0.32's ``PoolingParams`` as it travels in an ADD, and its checks.

A pooling request (embeddings, classification, scores) is an ordinary
``EngineCoreRequest`` whose ``pooling_params`` is set instead of
``sampling_params``; the engine answers with one ``EngineCoreOutput`` whose
``pooling_output`` is a tensor. The struct is positional (``array_like``) and
omits trailing defaults, exactly as vLLM encodes it.

The engine decodes this struct in its input thread, outside any error handler,
and runs ``PoolingParams.__post_init__`` there: a removed task name or an
``output_kind`` other than FINAL_ONLY kills the input thread. It does not run
``verify`` (the API server does), so the values must arrive resolved: the task
set, ``use_activation`` and ``skip_reading_prefix_cache`` filled in.
:func:`check` refuses what the engine would die on.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from protocol.errors import ValidationError
from protocol.sampling import OutputKind

# vllm/tasks.py: POOLING_TASKS; score/encode were removed (the engine refuses them).
POOLING_TASKS = (
    "embed",
    "classify",
    "token_embed",
    "token_classify",
    "plugin",
    "embed&token_classify",
)
REMOVED_TASKS = {
    "score": "`score` task was removed; use `classify` instead.",
    "encode": "`encode` task was removed; use `token_embed` or `token_classify` instead.",
}


class LateInteractionParams(msgspec.Struct, array_like=True, omit_defaults=True):
    mode: str
    query_key: str
    query_uses: int | None = None


class PoolingParams(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    """The wire struct, field for field (order, names, defaults) vLLM's."""

    use_activation: bool | None = None
    dimensions: int | None = None
    step_tag_id: int | None = None
    returned_token_ids: list[int] | None = None
    task: str | None = None
    requires_token_ids: bool = False
    skip_reading_prefix_cache: bool | None = None
    late_interaction_params: LateInteractionParams | None = None
    # {"compressed_token_type_ids": n} for cross-encoders with token types.
    extra_kwargs: dict[str, Any] | None = None
    output_kind: int = OutputKind.FINAL_ONLY

    # A pooling request samples nothing; metrics and tracing read these of
    # every engine request alike (vLLM records max_tokens None for pooling).
    n: ClassVar[int] = 1
    max_tokens: ClassVar[None] = None
    temperature: ClassVar[None] = None
    top_p: ClassVar[None] = None


def check(params: PoolingParams) -> None:
    """What the engine's decoder would die on (``__post_init__``)."""
    task = params.task
    if isinstance(task, str) and task in REMOVED_TASKS:
        raise ValidationError(REMOVED_TASKS[task], parameter="task")
    if task not in POOLING_TASKS:
        raise ValidationError(
            f"pooling task {task!r} is not one of {POOLING_TASKS}", parameter="task"
        )
    if params.output_kind != OutputKind.FINAL_ONLY:
        raise ValidationError(
            f"For pooling output_kind has to be FINAL_ONLY, got {params.output_kind!r}"
        )
    if params.dimensions is not None and params.dimensions < 1:
        raise ValidationError(
            f"dimensions must be at least 1, got {params.dimensions}", parameter="dimensions"
        )
