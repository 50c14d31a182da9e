"""The pooling routes' request bodies (vLLM 0.32's field names and defaults).

vLLM's pydantic models are unions (completion-style ``input`` or chat
``messages``; several pairs of score field names); here each route decodes one
struct whose union-typed fields the handler sorts out (``inputs.py``), so the
errors keep vLLM's status, type and ``param``. Unknown fields are ignored, as
vLLM ignores them (``return_documents`` on /rerank, for instance).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

EncodingFormat = Literal["float", "base64", "bytes", "bytes_only"]
EmbedDType = Literal["float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"]
Endianness = Literal["native", "big", "little"]


class PoolingBase(msgspec.Struct, kw_only=True):
    """PoolingBasicRequestMixin."""

    model: str | None = None
    user: str | None = None
    truncate_prompt_tokens: int | None = None
    padding: Literal["max_length", "do_not_pad"] | None = None
    truncation_side: Literal["left", "right"] | None = None
    request_id: str | None = None
    priority: int = 0
    mm_processor_kwargs: dict[str, Any] | None = None
    cache_salt: str | None = None


class InputRequest(PoolingBase, kw_only=True):
    """``input`` (text, tokens, batches) or chat ``messages``: the shape every
    encode route shares, with ChatRequestOptionsMixin. ``add_special_tokens``
    None: True for ``input``, False for chat."""

    input: Any = None
    messages: Any = None
    add_special_tokens: bool | None = None
    use_activation: bool | None = None
    add_generation_prompt: bool = False
    continue_final_message: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    media_io_kwargs: dict[str, Any] | None = None
    # Removed names vLLM refuses before anything else (reject_removed_pooling_parameters).
    normalize: Any = msgspec.UNSET
    task: Any = None  # /pooling's task; "score"/"encode" are refused on every route


class ClassificationRequest(InputRequest, kw_only=True):
    pass


class EmbeddingRequest(InputRequest, kw_only=True):
    encoding_format: EncodingFormat = "float"
    embed_dtype: EmbedDType = "float32"
    endianness: Endianness = "native"
    dimensions: int | None = None


class PoolingRequest(EmbeddingRequest, kw_only=True):
    data: Any = None  # IOProcessorRequest (plugins; not served)


class CohereEmbedRequest(msgspec.Struct, kw_only=True):
    model: str | None = None
    input_type: str | None = None
    texts: list[str] | None = None
    images: list[str] | None = None
    inputs: list[Any] | None = None
    output_dimension: int | None = None
    embedding_types: list[Literal["float", "binary", "ubinary", "base64"]] | None = None
    truncate: Literal["NONE", "START", "END"] = "END"
    max_tokens: int | None = None
    priority: int = 0


class ScoringBase(PoolingBase, kw_only=True):
    """ScoringRequestMixin."""

    use_activation: bool | None = None
    max_tokens_per_query: int = 0
    max_tokens_per_doc: int = 0
    instruction: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class ScoreRequest(ScoringBase, kw_only=True):
    """One of the pairs of names vLLM's union accepts, in its order."""

    queries: Any = msgspec.UNSET
    documents: Any = msgspec.UNSET
    items: Any = msgspec.UNSET
    data_1: Any = msgspec.UNSET
    data_2: Any = msgspec.UNSET
    text_1: Any = msgspec.UNSET
    text_2: Any = msgspec.UNSET


class RerankRequest(ScoringBase, kw_only=True):
    query: Any = msgspec.UNSET
    documents: Any = msgspec.UNSET
    top_n: int = 0
