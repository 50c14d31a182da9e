"""POST /classify and POST /pooling.

``/classify`` (vLLM's ``pooling/classify/``): task ``classify``, each input's
class probabilities and the label of the largest (``id2label``). ``/pooling``
(``pooling/pooling/``): the pooler's raw output for the model's pooling task
(a task the model has but does not pool with, or one it lacks, is refused
with vLLM's messages), in the embeddings' encodings.
"""

from __future__ import annotations

import time
from typing import cast

from aiohttp import web

from frontend.errors import ApiError, from_validation, schema_error
from frontend.openai.common import decode_body, request_id_for
from frontend.pooling import params as pparams
from frontend.pooling.common import json_response, list_response, served_model, usage
from frontend.pooling.embed import checked_inputs
from frontend.pooling.inputs import check_truncation, render
from frontend.pooling.model import POOLING_TASKS, PoolingModel
from frontend.pooling.run import Batch, pool
from frontend.pooling.schemas import ClassificationRequest, PoolingRequest
from frontend.state import AppState
from protocol.errors import ValidationError
from protocol.pooling import PoolingParams

NO_PLUGIN = (
    "No IOProcessor plugin installed. Please refer to the documentation and to "
    "the 'prithvi_geospatial_mae_io_processor' offline inference example for "
    "more details."
)


async def create_classify(
    state: AppState, model: PoolingModel, request: web.Request
) -> web.StreamResponse:
    req = await decode_body(request, ClassificationRequest)
    inputs = checked_inputs(req, embeddings=False)
    served, response_model = served_model(state, req.model)
    check_truncation(req.truncate_prompt_tokens, state.max_model_len)
    arrival = time.monotonic()
    token_lists = await render(state, model, req, inputs)
    params = pparams.resolve(
        PoolingParams(task="classify", use_activation=req.use_activation), model, state.model.name
    )
    rid = "classify-" + request_id_for(request, req.request_id)
    results = await pool(
        state,
        request,
        Batch(
            rid,
            token_lists,
            [params] * len(token_lists),
            served,
            req.priority,
            req.cache_salt,
            arrival,
        ),
    )
    data = []
    for i, r in enumerate(results):
        probs = r.values
        best = max(range(len(probs)), key=probs.__getitem__) if probs else 0
        data.append(
            {
                "index": i,
                "label": model.id2label.get(best),
                "probs": probs,
                "num_classes": len(probs),
            }
        )
    return json_response(
        state,
        {
            "id": rid,
            "object": "list",
            "created": int(time.time()),
            "model": response_model,
            "data": data,
            "usage": usage(sum(r.num_prompt_tokens for r in results)),
        },
    )


async def create_pooling(
    state: AppState, model: PoolingModel, request: web.Request
) -> web.StreamResponse:
    req = await decode_body(request, PoolingRequest)
    task = pooling_task(req, model)  # before anything else, as vLLM's get_io_processor
    inputs = checked_inputs(req, embeddings=False)
    served, response_model = served_model(state, req.model)
    check_truncation(req.truncate_prompt_tokens, state.max_model_len)
    arrival = time.monotonic()
    token_lists = await render(state, model, req, inputs)
    params = pparams.resolve(
        PoolingParams(task=task, use_activation=req.use_activation), model, state.model.name
    )
    rid = "pooling-" + request_id_for(request, req.request_id)
    results = await pool(
        state,
        request,
        Batch(
            rid,
            token_lists,
            [params] * len(token_lists),
            served,
            req.priority,
            req.cache_salt,
            arrival,
        ),
    )
    return list_response(
        state,
        request_id=rid,
        model=response_model,
        results=results,
        item_object="pooling",
        item_key="data",
        encoding_format=req.encoding_format,
        embed_dtype=req.embed_dtype,
        endianness=req.endianness,
    )


def pooling_task(req: PoolingRequest, model: PoolingModel) -> str:
    """vLLM's ServingPooling._verify_pooling_task."""
    pparams.reject_removed(req.normalize, req.task)
    task = req.task
    if task is not None and task not in POOLING_TASKS:
        raise schema_error(f"Input should be {' or '.join(map(repr, POOLING_TASKS))}", "body.task")
    if req.dimensions is not None:
        raise from_validation(
            ValidationError("dimensions is currently not supported", parameter="dimensions")
        )
    if req.data is not None and req.input is None and req.messages is None:
        task = "plugin"  # an IOProcessorRequest
    task = task or model.pooling_task
    if task == "plugin":
        raise from_validation(ValidationError(NO_PLUGIN, parameter="task"))
    if task != model.pooling_task:
        if task not in model.tasks:
            raise from_validation(
                ValidationError(
                    f"Unsupported task: {task!r} Supported tasks: {model.tasks}", parameter="task"
                )
            )
        raise from_validation(
            ValidationError(
                f"Try switching the model's pooling_task via --pooler-config.task {task}.",
                parameter="task",
            )
        )
    if task == "embed&token_classify":
        raise ApiError(
            "The 'embed&token_classify' pooling task is only available through an "
            "IO processor plugin. Send a plugin request with a 'data' field, or "
            "select a concrete task with --pooler-config.task."
        )
    return cast(str, task)  # (== model.pooling_task, which /pooling is served for)
