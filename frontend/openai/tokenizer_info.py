"""GET /tokenizer_info (``--enable-tokenizer-info-endpoint``), as vLLM 0.32 answers it.

vLLM returns ``dict(tokenizer.init_kwargs)`` without the vocab and merges file
paths, AddedTokens as their text, then ``tokenizer_class`` (the tokenizer's
Python class) and ``chat_template`` (the ``--chat-template`` text, if given).
There is no transformers tokenizer here, so :func:`init_kwargs` rebuilds what
transformers 5 puts in ``init_kwargs`` for a fast tokenizer from the model's
``tokenizer_config.json``: the config minus the keys it consumes, the
truncation side vLLM passes, where the files came from, the added tokens.
``tokenizer_class`` is the name vLLM's wrappers give the class transformers 5
picks for the config's ``tokenizer_class`` (``TokenizerPoolCached<class>``:
its thread pool around its cached tokenizer); the class itself is guessed
from the config's name (the README lists this among the differences).
"""

from __future__ import annotations

import os
from typing import Any

from aiohttp import web

from frontend.model import ModelInfo
from frontend.state import AppState

# transformers 5's PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES.
SPECIAL_TOKENS: tuple[str, ...] = ("bos_token", "eos_token", "unk_token", "sep_token")
SPECIAL_TOKENS += ("pad_token", "cls_token", "mask_token")
_TRUE = ("1", "on", "yes", "true")


def _text(value: Any) -> Any:
    """vLLM's _make_json_serializable: an AddedToken (here its dict) is its text."""
    if isinstance(value, dict):
        if value.get("__type") == "AddedToken" or "content" in value and "special" in value:
            return value.get("content")
        return {k: _text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_text(v) for v in value]
    return value


def tokenizer_class(model: ModelInfo) -> str:
    """vLLM's class name: ``TokenizerPoolCached`` + what AutoTokenizer builds
    (transformers 5 dropped the ``Fast`` classes; PreTrainedTokenizerFast is
    TokenizersBackend)."""
    if model.tokenizer_mode == "mistral":
        return "MistralTokenizer"
    name = str(model.tokenizer_config.get("tokenizer_class") or "TokenizersBackend")
    name = name.removesuffix("Fast")
    if name in ("PreTrainedTokenizer", ""):
        name = "TokenizersBackend"
    return f"TokenizerPoolCached{name}"


def init_kwargs(model: ModelInfo, tokenizer_name: str, *, generation: bool) -> dict[str, Any]:
    """transformers 5's ``init_kwargs`` of the model's fast tokenizer (vLLM's
    ``get_tokenizer`` adds the truncation side: left to generate, right to pool)."""
    if model.tokenizer_mode == "mistral":
        return {}  # vLLM's MistralTokenizer has no init_kwargs
    kwargs = dict(model.tokenizer_config)
    for consumed in ("tokenizer_class", "init_inputs", "add_bos_token", "add_eos_token"):
        kwargs.pop(consumed, None)
    if model.chat_template and "chat_template" not in kwargs:  # chat_template.jinja
        kwargs["chat_template"] = model.chat_template
    kwargs["truncation_side"] = "left" if generation else "right"
    if "additional_special_tokens" in kwargs and not kwargs.get("extra_special_tokens"):
        kwargs["extra_special_tokens"] = kwargs.pop("additional_special_tokens")
    specific = {
        key: kwargs.pop(key)
        for key in list(kwargs)
        if key not in SPECIAL_TOKENS and key.endswith("_token") and isinstance(kwargs[key], str)
    }
    if isinstance(kwargs.get("extra_special_tokens"), dict):
        specific.update(kwargs.pop("extra_special_tokens"))
    if specific:
        kwargs["model_specific_special_tokens"] = specific
    local = os.path.exists(tokenizer_name)
    kwargs["name_or_path"] = tokenizer_name if local else model.directory
    kwargs["is_local"] = True  # a Hub id is read from its local snapshot
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in _TRUE
    kwargs["local_files_only"] = offline
    decoder = kwargs.get("added_tokens_decoder")
    kwargs["added_tokens_decoder"] = (
        {str(k): _text(v) for k, v in decoder.items()}
        if isinstance(decoder, dict)
        else {str(i): text for i, text in sorted(model.added_token_ids.items())}
    )
    kwargs["backend"] = "tokenizers"
    return {k: _text(v) for k, v in kwargs.items()}


def tokenizer_info(
    model: ModelInfo, tokenizer_name: str, *, generation: bool, chat_template_given: bool
) -> dict[str, Any]:
    # (vLLM's answer lists the class first)
    info = {"tokenizer_class": tokenizer_class(model)}
    info.update(init_kwargs(model, tokenizer_name, generation=generation))
    info.pop("vocab_file", None)
    info.pop("merges_file", None)
    if chat_template_given and model.chat_template:
        info["chat_template"] = model.chat_template
    return info


def route_handler(generation: bool):
    """The handler of GET /tokenizer_info for a generating (or pooling) model."""

    async def get_tokenizer_info(state: AppState, request: web.Request) -> web.Response:
        config = state.operational
        info = tokenizer_info(
            state.model,
            config.tokenizer_name or state.model.path,
            generation=generation,
            chat_template_given=config.chat_template_given,
        )
        return web.Response(body=state.json(info), content_type="application/json")

    return get_tokenizer_info
