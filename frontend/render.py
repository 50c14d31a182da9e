"""Every prompt -> token ids path, with vLLM's length and vocabulary checks.

Text prompts, token prompts and chat conversations (rendered with the model's
chat template, compiled once here) all go through one truncating encoder and
one set of checks, for the generation routes and ``/tokenize`` alike. Long
prompts are rendered and tokenized in a worker thread (``tokenizers`` and
Jinja release the loop), so a 100k-character prompt never stalls the streams.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from frontend import chat_template
from frontend.errors import ApiError, from_validation, schema_error
from protocol.errors import ValidationError

if TYPE_CHECKING:
    from frontend.model import ModelInfo

log = logging.getLogger("frontend.render")

OFFLOAD_CHARS = 8192  # prompt characters above which rendering leaves the event loop
REQUEST_TEMPLATES_KEPT = 16  # compiled request templates (--trust-request-chat-template)
UNTRUSTED_TEMPLATE = (
    "Chat template is passed with request, but --trust-request-chat-template "
    "is not set. Refused request with untrusted chat template."
)

T = TypeVar("T")


@dataclass
class RenderedChat:
    conversation: list[dict[str, Any]]
    text: str
    token_ids: list[int]


class Renderer:
    def __init__(self, model: ModelInfo, content_format: str = "auto") -> None:
        self.model = model
        self.max_model_len = 0  # set when an engine is attached (it reports it)
        # Where truncation cuts without an explicit side: vLLM loads the
        # tokenizer with "left" for generative models, "right" for pooling ones.
        self.truncation_side = "left"
        # --chat-template-content-format: "auto" is the format read from the template.
        self.content_format = content_format
        # Every id the tokenizer makes is in the vocabulary: its prompts skip the scan.
        self._tokenizer_in_vocab = (
            model.max_token_id is not None and model.max_token_id < model.vocab_size
        )
        self.template = chat_template.build(model)
        self._request_templates: dict[str, chat_template.ChatTemplate] = {}
        if self.template is None:
            log.warning(
                "the model has no chat template: /v1/chat/completions will answer "
                "400 (start the frontend with --chat-template FILE to serve chat)"
            )
        else:
            detected = self.template.content_format
            self._set_format(self.template)
            log.info(
                "chat template: %d characters, %s content format%s",
                len(self.template.source),
                self.template.content_format,
                "" if detected == self.template.content_format else f" (detected: {detected})",
            )

    def _set_format(self, template: chat_template.ChatTemplate) -> None:
        if self.content_format != "auto":
            template.content_format = self.content_format

    def template_for(self, source: str | None) -> chat_template.ChatTemplate | None:
        """The template a (trusted) request brings, compiled once; None: the server's."""
        if source is None:
            return None
        template = self._request_templates.get(source)
        if template is None:
            template = chat_template.ChatTemplate(
                source, chat_template.special_tokens_of(self.model)
            )
            self._set_format(template)
            if len(self._request_templates) >= REQUEST_TEMPLATES_KEPT:
                del self._request_templates[next(iter(self._request_templates))]
            self._request_templates[source] = template
        return template

    # ------------------------------------------------------------ completion prompts
    async def render_prompts(
        self,
        prompts: Sequence[str | list[int]],
        *,
        add_special_tokens: bool = True,
        truncate: int | None = None,
        truncation_side: str | None = None,
        detokenize: bool = False,
        max_output_tokens: int = 1,
    ) -> list[tuple[list[int], str | None]]:
        """``[(token_ids, prompt text)]``, all validated, as vLLM's renderer does it.

        The text of a token prompt is None, or with ``detokenize`` (echo) its
        decoding, taken before truncation as vLLM does. ``truncate``
        (``truncate_prompt_tokens``, -1: the context less one, the whole
        context for pooling, ``max_output_tokens=0``) keeps that many tokens
        (see :meth:`encode`).
        """
        self._check_truncate(truncate)
        keep = (
            None
            if truncate is None
            else (self.max_model_len - min(max_output_tokens, 1) if truncate == -1 else truncate)
        )
        texts = [
            self._check_text_length(p, truncate, truncation_side)
            for p in prompts
            if isinstance(p, str)
        ]
        encoded = iter(
            await self._off_loop(
                sum(map(len, texts)),
                lambda: [
                    self._limit(self.encode(t, add_special_tokens, keep, truncation_side))
                    for t in texts
                ],
            )
            if texts
            else ()
        )
        rendered: list[tuple[list[int], str | None]] = []
        for prompt in prompts:
            text: str | None
            if isinstance(prompt, str):
                ids, text = next(encoded), prompt
            else:
                text = self.model.decode(prompt) if detokenize else None
                ids = _slice(prompt, keep, truncation_side or self.truncation_side)
            self.check_tokens(ids, tokenized=isinstance(prompt, str))
            rendered.append((ids, text))
        return rendered

    # ------------------------------------------------------------ chat
    def parse_messages(
        self, messages: Any, template: chat_template.ChatTemplate | None = None
    ) -> list[dict[str, Any]]:
        """OpenAI messages -> the conversation the template sees, or a 400."""
        try:
            return (template or self._chat_template()).parse_messages(messages, self.model.name)
        except chat_template.MessageShapeError as e:
            raise schema_error(e.message, e.parameter) from None
        except chat_template.ChatTemplateError as e:
            raise from_validation(e) from None

    async def render_chat(
        self,
        conversation: list[dict[str, Any]],
        *,
        add_generation_prompt: bool,
        continue_final_message: bool,
        kwargs: dict[str, Any],
        add_special_tokens: bool = False,
        check_length: bool = True,
        truncate: int | None = None,
        truncation_side: str | None = None,
        max_output_tokens: int = 0,
        template: chat_template.ChatTemplate | None = None,
    ) -> RenderedChat:
        """A parsed conversation -> (prompt text, prompt token ids), validated like
        vLLM (``check_length=False``: /tokenize, which has no length limit);
        ``template``: a request's own (default: the server's)."""
        template = template or self._chat_template()
        self._check_truncate(truncate)
        keep = truncate
        if truncate == -1:
            keep = self.max_model_len if max_output_tokens == 0 else self.max_model_len - 1

        def work() -> tuple[str, list[int]]:
            if self.model.render_chat is not None:  # the tokenizer renders (mistral)
                return self._render_ids(
                    conversation,
                    add_generation_prompt,
                    continue_final_message,
                    kwargs,
                    keep,
                    truncation_side,
                )
            text = template.render(
                conversation,
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message,
                kwargs=kwargs,
            )
            if not check_length:
                return text, self.encode(text, add_special_tokens, keep, truncation_side)
            source = self._check_text_length(text, truncate, truncation_side)
            return text, self._limit(self.encode(source, add_special_tokens, keep, truncation_side))

        try:
            text, ids = await self._off_loop(_chars(conversation), work)
        except ValidationError as e:  # ChatTemplateError included
            raise from_validation(e) from None
        if check_length:  # (ids a --tokenizer-mode mistral renderer made are scanned)
            self.check_tokens(ids, tokenized=self.model.render_chat is None)
        return RenderedChat(conversation, text, ids)

    def _render_ids(
        self,
        conversation: list[dict[str, Any]],
        add_generation_prompt: bool,
        continue_final_message: bool,
        kwargs: dict[str, Any],
        keep: int | None,
        side: str | None,
    ) -> tuple[str, list[int]]:
        """A prompt the tokenizer renders to ids itself (vLLM's MistralRenderer):
        truncated and checked like a rendered text; its text is its decoding."""
        try:
            ids = self.model.render_chat(
                conversation,
                tools=kwargs.get("tools"),
                add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message,
                reasoning_effort=kwargs.get("reasoning_effort"),
            )
        except ValueError as e:  # mistral_common refused it: vLLM's 400
            raise ValidationError(str(e)) from None
        ids = self._limit(_slice(ids, keep, side))
        return self.model.decode(ids), ids

    def _chat_template(self) -> chat_template.ChatTemplate:
        if self.template is None:
            raise from_validation(
                chat_template.ChatTemplateError(chat_template.NO_TEMPLATE_MESSAGE)
            )
        return self.template

    # ------------------------------------------------------------ tokens
    def encode(
        self, text: str, add_special_tokens: bool, keep: int | None = None, side: str | None = None
    ) -> list[int]:
        """Tokenize, truncated like vLLM when ``keep`` is set.

        Without an explicit side vLLM lets the tokenizer truncate (on its
        ``truncation_side``, special tokens kept); with one it slices the full
        token list.
        """
        model = self.model
        if keep is None:
            return model.encode(text, add_special_tokens)
        if keep == 0:
            return []
        if side is not None:
            return _slice(model.encode(text, add_special_tokens), keep, side)
        tokenizer = model.tokenizer
        encoding = tokenizer.encode(text, add_special_tokens=False)
        processor = tokenizer.post_processor
        num_special = (
            processor.num_special_tokens_to_add(False)
            if add_special_tokens and processor is not None
            else 0
        )
        text_tokens = max(keep - num_special, 0)
        if len(encoding.ids) > text_tokens:
            encoding.truncate(text_tokens, direction=self.truncation_side)
        if add_special_tokens:
            encoding = tokenizer.post_process(encoding, None, True)
        return _slice(encoding.ids, keep, self.truncation_side)

    async def encode_for_tokenize(self, text: str, add_special_tokens: bool) -> list[int]:
        """``/tokenize``'s text form: no length limit."""
        return await self._off_loop(len(text), lambda: self.model.encode(text, add_special_tokens))

    def check_tokens(self, ids: list[int], tokenized: bool = False) -> None:
        """Empty, over-long and out-of-vocabulary prompts never reach the engine
        (``tokenized``: ids this model's tokenizer made from a text)."""
        n = len(ids)
        if n == 0:
            raise ApiError("The decoder prompt cannot be empty")
        if n > self.max_model_len:
            # A text prompt was cut at max_model_len + 1 tokens, hence vLLM's
            # "at least" (also said of a token prompt of exactly that length).
            at_least = "at least " if n == self.max_model_len + 1 else ""
            raise from_validation(
                ValidationError(
                    f"This model's maximum context length is {self.max_model_len} tokens. "
                    f"However, your prompt contains {at_least}{n} input tokens, which exceeds "
                    "this limit even without any output tokens. Please reduce the length of "
                    "the input prompt.",
                    parameter="input_tokens",
                    value=n,
                )
            )
        if not (tokenized and self._tokenizer_in_vocab):
            self.check_vocab(ids)

    def check_vocab(self, ids: list[int]) -> None:
        """vLLM's ``validate_token_ids`` (no parameter: a plain BadRequestError)."""
        if not ids:
            return
        lo, hi = min(ids), max(ids)
        if lo < 0:
            raise ApiError(f"Token id {lo} is out of vocabulary")
        if hi >= self.model.vocab_size:
            raise ApiError(f"Token id {hi} is out of vocabulary")

    def _limit(self, ids: list[int]) -> list[int]:
        """vLLM's tokenizer call stops at ``max_model_len + 1`` tokens (only the
        "at least" of the error message shows it)."""
        return ids[: self.max_model_len + 1]

    # ------------------------------------------------------------ checks
    def _check_truncate(self, truncate: int | None) -> None:
        if truncate is not None and truncate > self.max_model_len:
            raise from_validation(
                ValidationError(
                    f"truncate_prompt_tokens={truncate} cannot be greater than max_model_len "
                    f"= {self.max_model_len}. Please request a smaller truncation size.",
                    parameter="truncate_prompt_tokens",
                    value=truncate,
                )
            )

    def _check_text_length(self, text: str, truncate: int | None, side: str | None) -> str:
        """The text to tokenize: a cheap bound first, as no token is longer than
        ``max_chars_per_token`` characters (vLLM's ``_text_len_check``). Over it,
        a request without truncation gets a 400, one with an explicit
        truncation side has its text cut to the bound."""
        max_chars = self.max_model_len * self.model.max_chars_per_token
        if len(text) <= max_chars:
            return text
        if truncate is None:
            raise from_validation(
                ValidationError(
                    f"This model's maximum context length is {self.max_model_len} tokens. "
                    f"However, your prompt contains {len(text)} characters (more than "
                    f"{max_chars} characters, which is the upper bound for "
                    f"{self.max_model_len} input tokens). Please reduce the length of the "
                    "input prompt.",
                    parameter="input_text",
                    value=len(text),
                )
            )
        if side is None:
            return text  # the tokenizer truncates
        return text[-max_chars:] if side == "left" else text[:max_chars]

    @staticmethod
    async def _off_loop(size: int, work: Callable[[], T]) -> T:
        if size < OFFLOAD_CHARS:
            return work()
        return await asyncio.get_running_loop().run_in_executor(None, work)


def template_kwargs(
    user_kwargs: dict[str, Any] | None,
    *,
    documents: Any = None,
    reasoning_effort: str | None = None,
    defaults: dict[str, Any] | None = None,
) -> dict:
    """vLLM's merge: the server's --default-chat-template-kwargs, then the
    client's chat_template_kwargs (None/"auto" values dropped), then the
    request's own template arguments."""
    merged = dict(defaults or {})
    merged.update({k: v for k, v in (user_kwargs or {}).items() if v is not None and v != "auto"})
    merged.pop("chat_template", None)  # (a template, not one of its arguments)
    if documents is not None:
        merged["documents"] = documents
    if reasoning_effort is not None:
        merged["reasoning_effort"] = reasoning_effort
        if "enable_thinking" not in (user_kwargs or {}):
            merged["enable_thinking"] = reasoning_effort != "none"
    return merged


def check_template_override(
    chat_template: str | None, user_kwargs: dict[str, Any] | None, trusted: bool = False
) -> None:
    """A template sent in the request is refused, as vLLM does without
    ``--trust-request-chat-template``."""
    if trusted:
        return
    if chat_template is not None or (user_kwargs and user_kwargs.get("chat_template") is not None):
        raise ApiError(UNTRUSTED_TEMPLATE)


def request_template(
    chat_template: str | None, user_kwargs: dict[str, Any] | None, server_template: bool
) -> str | None:
    """The template a trusted request renders with (vLLM's precedence): its
    ``chat_template``, then the server's --chat-template, then its
    ``chat_template_kwargs.chat_template``; None: the server's own."""
    if chat_template is not None:
        return chat_template
    if server_template:
        return None
    return (user_kwargs or {}).get("chat_template")


def _slice(ids: list[int], keep: int | None, side: str | None) -> list[int]:
    """vLLM's ``_token_truncation``: keep ``keep`` tokens, from the left unless
    the request asks for ``right``."""
    if keep is None or keep >= len(ids):
        return ids
    if keep == 0:
        return []
    return ids[:keep] if side == "right" else ids[-keep:]


def _chars(conversation: list[dict[str, Any]]) -> int:
    total = 0
    for msg in conversation:
        content = msg.get("content")
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    return total
