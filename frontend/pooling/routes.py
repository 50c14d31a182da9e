"""Which pooling routes a model gets: those vLLM 0.32 registers for its tasks
(``register_pooling_api_routers``), each with a counter of the engine
requests a body asks for (admission control counts them as choices)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import msgspec

from frontend.openai.routes import Route
from frontend.pooling import classify, embed, schemas
from frontend.pooling.model import PoolingModel
from frontend.pooling.score import Scorer
from frontend.state import AppState

log = logging.getLogger("frontend.pooling")


def pooling_routes(state: AppState, model: PoolingModel) -> list[Route]:
    def bind(handler) -> Callable:
        return functools.partial(handler, state, model)

    routes: list[tuple] = []
    if model.pooling_task is not None:
        routes.append(
            (
                "POST",
                "/pooling",
                bind(classify.create_pooling),
                _count("input"),
                schemas.PoolingRequest,
            )
        )
    if model.pooling_task == "classify":
        routes.append(
            (
                "POST",
                "/classify",
                bind(classify.create_classify),
                _count("input"),
                schemas.ClassificationRequest,
            )
        )
    if model.pooling_task == "embed":
        routes += [
            (
                "POST",
                "/v1/embeddings",
                bind(embed.create_embedding),
                _count("input"),
                schemas.EmbeddingRequest,
            ),
            (
                "POST",
                "/v2/embed",
                bind(embed.create_cohere_embedding),
                _count("texts", "inputs"),
                schemas.CohereEmbedRequest,
            ),
        ]
    if model.scoring and model.score_type not in ("bi-encoder", "cross-encoder"):
        log.warning(
            "%s scoring (late interaction) is not implemented: no /score or /rerank",
            model.score_type,
        )
    elif model.scoring:
        scorer = Scorer(state, model)
        both = model.score_type == "bi-encoder"  # queries are engine requests too
        score_count = _count_pairs(
            ("queries", "data_1", "text_1"), ("documents", "items", "data_2", "text_2"), both
        )
        rerank_count = _count_pairs(("query",), ("documents",), both)
        for path in ("/score", "/v1/score"):
            routes.append(("POST", path, scorer.score, score_count, schemas.ScoreRequest))
        for path in ("/rerank", "/v1/rerank", "/v2/rerank"):
            routes.append(("POST", path, scorer.rerank, rerank_count, schemas.RerankRequest))
    return [Route(*spec) for spec in routes]


_skeleton = msgspec.json.Decoder(dict[str, msgspec.Raw])
_items = msgspec.json.Decoder(list[msgspec.Raw])


def _length(raw: msgspec.Raw | None) -> int:
    """Entries of a list field (1 for anything else), without decoding them."""
    if raw is None or not bytes(raw).lstrip().startswith(b"["):
        return 1
    try:
        items = _items.decode(raw)
    except msgspec.DecodeError:
        return 1
    if not items or not bytes(items[0]).lstrip().startswith((b'"', b"[")):
        return 1  # a list of token ids is one input
    return len(items)


def _fields(body: bytes) -> dict[str, Any]:
    try:
        return _skeleton.decode(body)
    except msgspec.DecodeError:
        return {}


def _count(*names: str) -> Callable[[bytes], int]:
    def count(body: bytes) -> int:
        fields = _fields(body)
        return max((_length(fields.get(n)) for n in names if n in fields), default=1)

    return count


def _count_pairs(
    firsts: tuple[str, ...], seconds: tuple[str, ...], both: bool
) -> Callable[[bytes], int]:
    def count(body: bytes) -> int:
        fields = _fields(body)
        n_second = max((_length(fields[n]) for n in seconds if n in fields), default=1)
        n_first = max((_length(fields[n]) for n in firsts if n in fields), default=1)
        return n_first + n_second if both else n_second

    return count
