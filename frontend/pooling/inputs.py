"""A pooling request's inputs -> one token id list per engine request.

The completion form (``input``: a text, texts, token ids, lists of token ids)
and the chat form (``messages``, or conversations given as ``input``) go
through the shared renderer with vLLM's pooling rules: truncation keeps the
start of a prompt unless asked otherwise, ``truncate_prompt_tokens: -1``
keeps the whole context, chat adds no special tokens and no generation
prompt by default, ``padding: "max_length"`` pads to the context.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from frontend.errors import ApiError, from_validation, schema_error
from frontend.pooling.model import PoolingModel
from frontend.pooling.schemas import InputRequest
from frontend.render import check_template_override, template_kwargs
from frontend.state import AppState
from protocol.errors import ValidationError

NO_PROMPT = "You must pass at least one prompt"


@dataclass
class Inputs:
    """What the request asks to pool: text/token prompts or conversations."""

    prompts: list[str | list[int]] | None = None
    conversations: list[Any] | None = None

    def __len__(self) -> int:
        return len(self.prompts if self.prompts is not None else self.conversations or [])


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("role"), str)


def _is_conversation(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(_is_message(m) for m in value)


def split_prompts(value: Any, field: str = "input") -> list[str | list[int]]:
    """str | list[str] | list[int] | list[list[int]] -> one entry per prompt."""
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise schema_error("Input should be a valid string or list", f"body.{field}")
    if not value:
        raise ApiError(NO_PROMPT)
    if all(_is_token(t) for t in value):
        return [value]
    if all(isinstance(p, str) for p in value):
        return list(value)
    if all(isinstance(p, list) and all(_is_token(t) for t in p) for p in value):
        return list(value)
    first_bad = next(i for i, t in enumerate(value) if not _is_token(t))
    raise schema_error(
        f"{field} must be a string, a list of strings, a list of token ids "
        "(>= 0) or a list of lists of token ids (>= 0)",
        f"body.{field}.{first_bad}",
    )


def read_inputs(req: InputRequest, *, embeddings: bool) -> Inputs:
    """vLLM's union of request forms: completion (``input``) or one conversation
    (``messages``); embeddings also take conversations as ``input`` and
    batches of conversations."""
    messages = req.messages
    if (
        messages is None
        and embeddings
        and (
            _is_conversation(req.input)
            or (
                isinstance(req.input, list)
                and req.input
                and all(_is_conversation(c) for c in req.input)
            )
        )
    ):
        messages = req.input
    if messages is not None:
        if not isinstance(messages, list):
            raise schema_error("Input should be a valid list", "body.messages")
        if embeddings and messages and all(isinstance(c, list) for c in messages):
            if not all(c for c in messages):
                raise schema_error(
                    "List should have at least 1 item after validation", "body.messages"
                )
            return Inputs(conversations=list(messages))
        return Inputs(conversations=[messages])
    if req.input is None:
        raise schema_error("Field required", "body.input")
    return Inputs(prompts=split_prompts(req.input))


def check_chat_options(req: InputRequest) -> None:
    """ChatRequestOptionsMixin's model validator."""
    if req.continue_final_message and req.add_generation_prompt:
        raise from_validation(
            ValidationError(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
            )
        )


def check_mm_kwargs(mm_processor_kwargs: Any, media_io_kwargs: Any = None) -> None:
    """vLLM's validate_request_mm_kwargs, without --trust-request-mm-kwargs."""
    for name, value, kind in (
        ("mm_processor_kwargs", mm_processor_kwargs, "multimodal preprocessing"),
        ("media_io_kwargs", media_io_kwargs, "multimodal media loading"),
    ):
        if value:
            raise from_validation(
                ValidationError(
                    f"Per-request {name} are disabled by default because they can change "
                    f"{kind} resource usage. Start the server with --trust-request-mm-kwargs "
                    "only when clients are trusted.",
                    parameter=name,
                )
            )


def check_truncation(truncate: int | None, max_model_len: int) -> None:
    """The field's ``ge=-1``, then ``_validate_request`` (vLLM's pooling message)."""
    if truncate is None:
        return
    if truncate < -1:
        raise schema_error(
            "Input should be greater than or equal to -1", "body.truncate_prompt_tokens"
        )
    if truncate > max_model_len:
        raise ApiError(
            "truncate_prompt_tokens value is greater than max_model_len. "
            "Please request a smaller truncation size."
        )


async def render(
    state: AppState, model: PoolingModel, req: InputRequest, inputs: Inputs
) -> list[list[int]]:
    """Every input's token ids, validated (lengths, vocabulary) like vLLM's."""
    renderer = state.renderer
    if inputs.conversations is not None:
        check_template_override(req.chat_template, req.chat_template_kwargs)
        kwargs = template_kwargs(req.chat_template_kwargs)
        token_lists = []
        for messages in inputs.conversations:
            rendered = await renderer.render_chat(
                renderer.parse_messages(messages),
                add_generation_prompt=req.add_generation_prompt,
                continue_final_message=req.continue_final_message,
                kwargs=kwargs,
                add_special_tokens=bool(req.add_special_tokens),
                truncate=req.truncate_prompt_tokens,
                truncation_side=req.truncation_side,
                max_output_tokens=0,
            )
            token_lists.append(rendered.token_ids)
    else:
        rendered_prompts = await renderer.render_prompts(
            inputs.prompts or [],
            add_special_tokens=req.add_special_tokens is not False,
            truncate=req.truncate_prompt_tokens,
            truncation_side=req.truncation_side,
            max_output_tokens=0,
        )
        token_lists = [ids for ids, _ in rendered_prompts]
    if req.padding == "max_length":
        token_lists = [pad(ids, model, renderer.max_model_len) for ids in token_lists]
    return token_lists


def pad(ids: list[int], model: PoolingModel, length: int) -> list[int]:
    """TokenizeParams._token_padding: pad to the context with the pad token."""
    if len(ids) >= length:
        return ids
    if model.pad_token_id is None:
        raise ApiError("Cannot pad tokens: the tokenizer has no pad token")
    return ids + [model.pad_token_id] * (length - len(ids))
