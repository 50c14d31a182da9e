"""POST /score, /v1/score, /rerank, /v1/rerank, /v2/rerank.

vLLM 0.32's ``pooling/scoring/``. Queries and documents pair up 1:1, 1:N or
N:N. A cross-encoder (a one-label classifier) scores each pair as one engine
request: ``tokenizer(query, document)`` with the pair's ``token_type_ids``
(sent as ``compressed_token_type_ids``), or query + document for models
without a separator. A bi-encoder (an embedding model) embeds every query and
document, one engine request each, and scores the cosine of each pair.
Rerank sorts by score (stable) and keeps ``top_n``; documents always come back.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import msgspec
from aiohttp import web

from frontend.chat_template import ChatTemplate, ChatTemplateError
from frontend.errors import ApiError, from_validation, schema_error
from frontend.openai.common import decode_body, request_id_for
from frontend.openai.validators import check_cache_salt
from frontend.pooling import params as pparams
from frontend.pooling import vectors
from frontend.pooling.common import json_response, served_model, usage
from frontend.pooling.inputs import check_mm_kwargs, check_truncation, pad
from frontend.pooling.model import PoolingModel
from frontend.pooling.pairs import PairTokenizer, compress_token_type_ids
from frontend.pooling.run import Batch, pool
from frontend.pooling.schemas import RerankRequest, ScoreRequest, ScoringBase
from frontend.render import OFFLOAD_CHARS
from frontend.state import AppState
from protocol.pooling import PoolingParams

# ScoreRequest's union members, in vLLM's order: (first field, second field).
SCORE_FIELDS = (
    ("queries", "documents"),
    ("queries", "items"),
    ("data_1", "data_2"),
    ("text_1", "text_2"),
)
# Tokenizer classes whose model_input_names leave out token_type_ids.
NO_TOKEN_TYPES = (
    "Llama",
    "Qwen2",
    "GPT2",
    "Roberta",
    "XLMRoberta",
    "Gemma",
    "Bart",
    "T5",
    "Bloom",
    "GPTNeoX",
    "CodeGen",
    "Whisper",
    "Mistral",
)


class Scorer:
    """The score and rerank endpoints of one model."""

    def __init__(self, state: AppState, model: PoolingModel) -> None:
        self.state = state
        self.model = model
        self.pairs = PairTokenizer(state.model)
        self.token_types = _returns_token_types(state.model.tokenizer_config)

    async def score(self, request: web.Request) -> web.StreamResponse:
        req = await decode_body(request, ScoreRequest)
        first, second = _score_pair(req)
        rid, response_model, num_tokens, scores = await self._run(request, req, first, second)
        data = [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)]
        return json_response(
            self.state,
            {
                "id": rid,
                "object": "list",
                "created": int(time.time()),
                "model": response_model,
                "data": data,
                "usage": usage(num_tokens),
            },
        )

    async def rerank(self, request: web.Request) -> web.StreamResponse:
        req = await decode_body(request, RerankRequest)
        for name in ("query", "documents"):
            if getattr(req, name) is msgspec.UNSET:
                raise schema_error("Field required", f"body.{name}")
        if not isinstance(req.query, (str, dict)):
            raise schema_error("Input should be a valid string", "body.query")
        if req.top_n < 0:
            raise schema_error("Input should be greater than or equal to 0", "body.top_n")
        rid, response_model, num_tokens, scores = await self._run(
            request, req, req.query, req.documents
        )
        documents = req.documents if isinstance(req.documents, list) else [req.documents]
        ranked: list[dict[str, Any]] = [
            {
                "index": i,
                "document": (
                    {"text": doc, "multi_modal": None}
                    if isinstance(doc, str)
                    else {"text": None, "multi_modal": doc.get("content", [])}
                ),
                "relevance_score": s,
            }
            for i, (doc, s) in enumerate(zip(documents, scores))
        ]
        ranked.sort(key=lambda r: r["relevance_score"], reverse=True)
        top_n = req.top_n if req.top_n > 0 else len(scores)
        if top_n < len(documents):
            ranked = ranked[:top_n]
        return json_response(
            self.state,
            {
                "id": rid,
                "model": response_model,
                "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens},
                "results": ranked,
            },
        )

    # ------------------------------------------------------------ shared
    async def _run(
        self, request: web.Request, req: ScoringBase, first: Any, second: Any
    ) -> tuple[str, str, int, list[float]]:
        """(response id, model, prompt tokens, one score per pair)."""
        state, model = self.state, self.model
        check_cache_salt(req.cache_salt)
        check_mm_kwargs(req.mm_processor_kwargs)
        served, response_model = served_model(state, req.model)
        check_truncation(req.truncate_prompt_tokens, state.max_model_len)
        queries, documents = self._texts(first, second)
        for name in ("max_tokens_per_query", "max_tokens_per_doc"):
            value = getattr(req, name)
            if value < 0:
                raise ApiError(f"{name} must be a non-negative integer")
            if value >= state.max_model_len:
                raise ApiError(
                    f"{name} ({value}) must be less than max_model_len ({state.max_model_len})."
                )
        arrival = time.monotonic()
        rid = "score-" + request_id_for(request, req.request_id)
        if model.score_type == "bi-encoder":
            token_lists, params = await self._bi_encoder_inputs(req, queries, documents)
        else:
            token_lists, params = await self._cross_encoder_inputs(req, queries, documents)
        results = await pool(
            state,
            request,
            Batch(rid, token_lists, params, served, req.priority, req.cache_salt, arrival),
        )
        num_tokens = sum(len(ids) for ids in token_lists)
        if model.score_type == "bi-encoder":
            embeddings = [r.values for r in results]
            firsts, seconds = embeddings[: len(queries)], embeddings[len(queries) :]
            if len(firsts) == 1:
                firsts = firsts * len(seconds)
            scores = [vectors.cosine(a, b) for a, b in zip(firsts, seconds)]
        else:
            scores = [r.values[0] if r.values else 0.0 for r in results]
        return rid, response_model, num_tokens, scores

    def _texts(self, first: Any, second: Any) -> tuple[list[str], list[str]]:
        """vLLM's validate_score_input: lists of texts, paired 1:1, 1:N or N:N."""
        firsts = first if isinstance(first, list) else [first]
        seconds = second if isinstance(second, list) else [second]
        for item in (*firsts, *seconds):
            if not isinstance(item, str):
                raise ApiError(f"MultiModalParam is not supported for {self.model.architecture}")
        if len(firsts) > 1 and len(firsts) != len(seconds):
            raise ApiError("Input lengths must be either 1:1, 1:N or N:N")
        if not firsts:
            raise ApiError("At least one text element must be given")
        if not seconds:
            raise ApiError("At least one text_pair element must be given")
        return firsts, seconds

    def _limit(self, texts: list[str], max_tokens: int) -> list[str]:
        if max_tokens <= 0:
            return texts
        return [self.pairs.truncate_text(t, max_tokens) for t in texts]

    async def _bi_encoder_inputs(
        self, req: ScoringBase, queries: list[str], documents: list[str]
    ) -> tuple[list, list]:
        """Every query, then every document: one embedding request each."""
        texts = self._limit(queries, req.max_tokens_per_query) + self._limit(
            documents, req.max_tokens_per_doc
        )
        renderer = self.state.renderer
        rendered = await renderer.render_prompts(
            texts,
            add_special_tokens=True,
            truncate=req.truncate_prompt_tokens,
            truncation_side=req.truncation_side,
            max_output_tokens=0,
        )
        token_lists = [ids for ids, _ in rendered]
        if req.padding == "max_length":
            token_lists = [pad(ids, self.model, renderer.max_model_len) for ids in token_lists]
        params = pparams.resolve(
            PoolingParams(task="embed", use_activation=req.use_activation),
            self.model,
            self.state.model.name,
        )
        return token_lists, [params] * len(token_lists)

    async def _cross_encoder_inputs(
        self, req: ScoringBase, queries: list[str], documents: list[str]
    ) -> tuple[list, list]:
        """One classified pair per document (the query repeated for 1:N);
        long texts are tokenized in a worker thread."""
        if len(queries) == 1:
            queries = queries * len(documents)
        size = sum(map(len, queries)) + sum(map(len, documents))
        if size < OFFLOAD_CHARS:
            return self._pairs(req, queries, documents)
        return await asyncio.get_running_loop().run_in_executor(
            None, self._pairs, req, queries, documents
        )

    def _pairs(
        self, req: ScoringBase, queries: list[str], documents: list[str]
    ) -> tuple[list, list]:
        base = pparams.resolve(
            PoolingParams(task="classify", use_activation=req.use_activation),
            self.model,
            self.state.model.name,
        )
        token_lists, params = [], []
        for query, document in zip(queries, documents):
            ids, types = self._encode_pair(req, query, document)
            token_lists.append(ids)
            if types:
                extra = {"compressed_token_type_ids": compress_token_type_ids(types)}
                params.append(msgspec.structs.replace(base, extra_kwargs=extra))
            else:
                params.append(base)
        return token_lists, params

    def _encode_pair(
        self, req: ScoringBase, query: str, document: str
    ) -> tuple[list[int], list[int]]:
        """get_score_prompt, then TokenizeParams.apply_post_tokenization."""
        max_model_len = self.state.max_model_len
        if req.max_tokens_per_query > 0:
            query = self.pairs.truncate_text(query, req.max_tokens_per_query)
        if req.max_tokens_per_doc > 0:
            document = self.pairs.truncate_text(document, req.max_tokens_per_doc)
        truncate, side = req.truncate_prompt_tokens, req.truncation_side
        keep = max_model_len if truncate == -1 else truncate
        # get_encode_kwargs: with an explicit side the tokenizer does not truncate.
        max_length = (
            None
            if (side is not None and truncate is not None)
            else (keep if keep is not None else max_model_len + 1)
        )
        if self.model.score_template:
            ids, types = self.pairs.encode(
                self._score_prompt(req, query, document), None, max_length=max_length
            )
        elif self.model.use_sep_token:
            strategy = "longest_first"
            if req.max_tokens_per_doc > 0:
                query_len = len(self.state.model.encode(query, add_special_tokens=False))
                limit = query_len + req.max_tokens_per_doc + self.pairs.num_special_pair
                max_length = limit if max_length is None else min(limit, max_length)
                strategy = "only_second"
            ids, types = self.pairs.encode(
                query, document, max_length=max_length, strategy=strategy
            )
        else:  # an LLM as reranker: the two texts back to back
            ids, types = self.pairs.encode(query + document, None, max_length=max_length)
        if not self.token_types:
            types = []
        if keep is not None and keep < len(ids):
            cut = slice(-keep, None) if side == "left" else slice(0, keep)
            ids, types = ids[cut], types[cut] if types else types
        if req.padding == "max_length" and len(ids) < max_model_len:
            fill = max_model_len - len(ids)
            ids = pad(ids, self.model, max_model_len)
            types = types + [types[-1] if types else 0] * fill if types else types
        self.state.renderer.check_tokens(ids)
        return ids, types

    def _score_prompt(self, req: ScoringBase, query: str, document: str) -> str:
        """The score template applied to the pair (vLLM: safe_apply_chat_template
        with a "query" and a "document" message, no generation prompt)."""
        # (score_template: the model has a chat template)
        template = cast(ChatTemplate, self.state.renderer.template)
        try:
            return template.render(
                [{"role": "query", "content": query}, {"role": "document", "content": document}],
                add_generation_prompt=False,
                kwargs=_template_kwargs(req),
            )
        except ChatTemplateError as e:
            raise from_validation(e) from None


RESERVED_TEMPLATE_KWARGS = {"chat_template", "tools", "tokenize"}


def _template_kwargs(req: ScoringBase) -> dict[str, Any]:
    """chat_template_kwargs with ``instruction`` folded in (theirs win)."""
    kwargs = dict(req.chat_template_kwargs or {})
    if req.instruction is not None:
        kwargs.setdefault("instruction", req.instruction)
    reserved = RESERVED_TEMPLATE_KWARGS & kwargs.keys()
    if reserved:
        raise ApiError(
            "chat_template_kwargs contains reserved keys that conflict with fixed "
            f"scorer arguments: {reserved}"
        )
    return kwargs


def _score_pair(req: ScoreRequest) -> tuple[Any, Any]:
    """The first of vLLM's field pairs the body has both fields of."""
    for first, second in SCORE_FIELDS:
        a, b = getattr(req, first), getattr(req, second)
        if a is not msgspec.UNSET and b is not msgspec.UNSET:
            return a, b
    missing = "queries" if req.queries is msgspec.UNSET else "documents"
    raise schema_error("Field required", f"body.{missing}")


def _returns_token_types(tokenizer_config: dict[str, Any]) -> bool:
    """Whether transformers' tokenizer returns token_type_ids (model_input_names)."""
    names = tokenizer_config.get("model_input_names")
    if isinstance(names, list):
        return "token_type_ids" in names
    cls = str(tokenizer_config.get("tokenizer_class") or "")
    return not cls.removesuffix("Fast").removesuffix("Tokenizer").endswith(NO_TOKEN_TYPES)
