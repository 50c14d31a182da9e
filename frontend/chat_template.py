"""Chat messages -> prompt text, rendered the way Hugging Face transformers does it.

vLLM 0.32 renders chat prompts with ``tokenizer.apply_chat_template`` (transformers'
``render_jinja_template``) after parsing the OpenAI messages into a "conversation"
(``vllm/renderers/chat_utils.py``). This module reproduces both steps without
transformers:

* the Jinja environment: ``ImmutableSandboxedEnvironment`` with ``trim_blocks``,
  ``lstrip_blocks``, the ``loopcontrols`` extension and a ``{% generation %}`` tag,
  a ``tojson`` filter with Hugging Face's semantics (no HTML escaping,
  ``ensure_ascii=False``, ``indent``/``separators``/``sort_keys``), and the
  ``raise_exception`` and ``strftime_now`` globals;
* the template variables: the tokenizer's named special tokens (``bos_token``,
  ``eos_token``, ... from tokenizer_config.json), ``messages``,
  ``add_generation_prompt``, ``tools``, ``documents`` and ``chat_template_kwargs``;
* ``continue_final_message`` with transformers' tag trick (the final message is
  left open so the model continues it);
* vLLM's message parsing: string content or text parts, joined with ``"\\n"``
  for templates that print ``message['content']`` ("string" content format) or
  kept as ``[{"type": "text", "text": ...}]`` for templates that loop over the
  content ("openai" format, detected from the template's AST like vLLM does);
  ``developer`` messages become ``system`` ones for templates that do not know
  the role; assistant ``tool_calls`` arguments are parsed into objects.

Every template problem (syntax error, ``raise_exception``, undefined access,
sandbox violation) becomes :class:`ChatTemplateError`, which the routes answer
with a 400 like vLLM.
"""

from __future__ import annotations

import json
import logging
import pathlib
from datetime import datetime
from typing import TYPE_CHECKING, Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.sandbox

from frontend.chat_content_format import detect_content_format
from protocol.errors import ValidationError

if TYPE_CHECKING:
    from frontend.model import ModelInfo

log = logging.getLogger("frontend.chat_template")

# vLLM's message (ChatTemplateResolutionError) plus how to fix it here.
NO_TEMPLATE_MESSAGE = (
    "As of transformers v4.44, default chat template is no longer allowed, so you must "
    "provide a chat template if the tokenizer does not define one. This model has no "
    "chat template (no chat_template.jinja, no chat_template in tokenizer_config.json): "
    "start the frontend with --chat-template FILE."
)

# transformers' named special tokens (PreTrainedTokenizerBase.SPECIAL_TOKENS_ATTRIBUTES).
_NAMED_SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
# apply_chat_template parameters that never reach the template (tokenize=False).
_TOKENIZATION_KWARGS = frozenset(
    {
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "tokenizer_kwargs",
        "return_assistant_tokens_mask",
        "conversation",
        "chat_template",
        "continue_final_message",
        "add_generation_prompt",
    }
)
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "

# vLLM's content-part types (chat_utils.MM_PARSER_MAP): text-like ones and media.
_TEXT_PARTS = {
    "text": "text",
    "input_text": "text",
    "output_text": "text",
    "refusal": "refusal",
    "thinking": "thinking",
}
_SKIP_NONE_PARTS = ("text", "refusal")
_MEDIA_PARTS = (
    "image_url",
    "input_image",
    "image_embeds",
    "image_pil",
    "audio_url",
    "input_audio",
    "audio_embeds",
    "video_url",
    "video_embeds",
    "prompt_embeds",
)
_ALL_PART_TYPES = sorted({*_TEXT_PARTS, *_MEDIA_PARTS, "tool_reference"})
# Keys of the OpenAI content-part shapes; anything else rides along in "openai" format.
_KNOWN_PART_KEYS = frozenset(
    {
        "audio_embeds",
        "audio_url",
        "closed",
        "data",
        "file",
        "image_embeds",
        "image_pil",
        "image_url",
        "input_audio",
        "name",
        "prompt_cache_breakpoint",
        "refusal",
        "text",
        "thinking",
        "type",
        "uuid",
        "video_embeds",
        "video_url",
    }
)
_BILLING_HEADER = "x-anthropic-billing-header"


class ChatTemplateError(ValidationError):
    """A request the template (or the message parser) cannot render: HTTP 400.

    ``str()`` is vLLM's ``"<message> (parameter=<p>, value=<v>)"``.
    """

    def __init__(self, message: str, param: str | None = None, value: Any = None) -> None:
        super().__init__(message, parameter=param, value=value)


class MessageShapeError(ChatTemplateError):
    """A message that does not fit the request schema (vLLM: a pydantic error)."""


# ---------------------------------------------------------------------------- Jinja


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` (assistant masks): renders its body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_body")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    @staticmethod
    def _body(caller: Any) -> str:
        return caller()


def _raise_exception(message: Any) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: Any = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson HTML-escapes and sorts keys; templates expect json.dumps.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def make_environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


# ---------------------------------------------------------------------------- special tokens


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]  # an AddedToken
    return None


def special_tokens_map(
    tok_config: dict[str, Any], fallback: dict[str, Any] | None = None
) -> dict[str, str]:
    """transformers' ``special_tokens_map``: named tokens plus model-specific ones."""
    tokens: dict[str, str] = {}
    sources = [fallback or {}, tok_config]
    for source in sources:
        for key in _NAMED_SPECIAL_TOKENS:
            text = _token_text(source.get(key))
            if text is not None:
                tokens[key] = text
    # Model-specific named tokens: extra_special_tokens as a dict, and other
    # "*_token" string entries (transformers v5 registers both).
    for key, value in tok_config.items():
        if key.endswith("_token") and key not in _NAMED_SPECIAL_TOKENS:
            text = _token_text(value)
            if text is not None:
                tokens[key] = text
    extra = tok_config.get("extra_special_tokens")
    if isinstance(extra, dict):
        for key, value in extra.items():
            text = _token_text(value)
            if text is not None:
                tokens[key] = text
    return tokens


# ---------------------------------------------------------------------------- messages


def _part_text(part: dict[str, Any], model_name: str) -> tuple[str, Any]:
    """(part type, its text) of a dict content part; raises for media and unknown types."""
    part_type = part.get("type")
    if isinstance(part_type, str) and part.get("uuid") is None:
        field = _TEXT_PARTS.get(part_type)
        if field is not None:
            return part_type, part.get(field)
        if part_type == "tool_reference":
            return part_type, part.get("name")
        if part_type in _MEDIA_PARTS:
            raise _unsupported_media(part_type, model_name)
        # vLLM's own message (its pydantic schema rejects these first, with param null)
        raise ChatTemplateError(
            f"Unsupported chat content part type: {part_type!r}. "
            f"Supported types: {', '.join(_ALL_PART_TYPES)}."
        )
    if part_type is None or part.get("uuid") is not None:
        for key in _MEDIA_PARTS:
            if key in part:
                raise _unsupported_media(key, model_name)
        if "tool_reference" in part:
            return "tool_reference", part.get("name")
        raise ChatTemplateError("Missing 'type' field in multimodal part.")
    raise ChatTemplateError("Invalid 'type' field in multimodal part.")


def _unsupported_media(part_type: str, model_name: str) -> ChatTemplateError:
    # vLLM's message, plus what to do about it.
    return ChatTemplateError(
        f"{model_name} is not a multimodal model: content parts of type {part_type!r} "
        "are not supported; message content must be a string or a list of text parts."
    )


def _strip_billing_header(parts: list[Any]) -> list[Any]:
    """vLLM drops Claude Code's per-request attribution line from system text."""
    out = []
    for part in parts:
        text: Any
        if isinstance(part, str):
            text = part
        elif isinstance(part, dict) and part.get("type") == "text":
            text = part.get("text")
        else:
            text = None
        if not (isinstance(text, str) and text.startswith(_BILLING_HEADER)):
            out.append(part)
            continue
        rest = text.partition("\n")[2]
        if rest:
            out.append(rest if isinstance(part, str) else {**part, "text": rest})
    return out


def _parse_message(
    message: Any, index: int, openai_format: bool, model_name: str
) -> dict[str, Any]:
    if not isinstance(message, dict):
        raise MessageShapeError("Input should be a valid dictionary", f"body.messages.{index}")
    role = message.get("role")
    if not isinstance(role, str):
        raise MessageShapeError(
            "Field required" if role is None else "Input should be a valid string",
            f"body.messages.{index}.role",
        )
    content = message.get("content")
    if content is None:
        parts: list[Any] = []
    elif isinstance(content, str):
        parts = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        parts = content
    else:
        raise MessageShapeError(
            "Input should be a valid string or a list of content parts",
            f"body.messages.{index}.content",
        )
    if role == "system":
        parts = _strip_billing_header(parts)

    items: list[Any] = []
    for part in parts:
        if isinstance(part, str):
            items.append({"type": "text", "text": part} if openai_format else part)
            continue
        if not isinstance(part, dict):
            raise MessageShapeError(
                "Input should be a valid dictionary", f"body.messages.{index}.content"
            )
        part_type, text = _part_text(part, model_name)
        if text is None and part_type in _SKIP_NONE_PARTS:
            continue
        if not isinstance(text, str):
            raise MessageShapeError(
                f"a {part_type!r} content part needs a string", f"body.messages.{index}.content"
            )
        if not openai_format:
            items.append(text)
        elif part_type == "tool_reference":
            items.append({"type": "tool_reference", "name": text})
        else:
            extra = {k: v for k, v in part.items() if k not in _KNOWN_PART_KEYS}
            items.append({"type": "text", "text": text, **extra})

    result: dict[str, Any] = {"role": role, "content": items if openai_format else "\n".join(items)}
    if role == "assistant":
        tool_calls = message.get("tool_calls")
        if tool_calls is not None and tool_calls != []:  # [] is dropped, like vLLM
            result["tool_calls"] = _tool_calls(tool_calls)
        reasoning = message.get("reasoning")
        if reasoning is None:
            reasoning = message.get("reasoning_content")
        if reasoning is not None:
            result["reasoning"] = reasoning
            result["reasoning_content"] = reasoning
    elif role == "tool":
        if "tool_call_id" in message:
            result["tool_call_id"] = message["tool_call_id"]
        if openai_format and isinstance(result["content"], list):
            if not any(isinstance(p, dict) and p.get("type") != "text" for p in result["content"]):
                texts = [p.get("text", "") for p in result["content"]]
                result["content"] = "\n".join(texts)
    if isinstance(message.get("name"), str):
        result["name"] = message["name"]
    if isinstance(message.get("task"), str):
        result["task"] = message["task"]
    if role == "developer":
        result["tools"] = message.get("tools")
    return result


def _tool_calls(tool_calls: Any) -> list[Any] | None:
    """Assistant tool_calls of earlier turns, arguments parsed to objects (as vLLM)."""
    if not isinstance(tool_calls, list):
        return tool_calls
    calls = []
    for item in tool_calls:
        if not isinstance(item, dict):
            raise ChatTemplateError("assistant tool_calls entries must be objects.", "tool_calls")
        function = item.get("function")
        if item.get("type", "function") != "function" or not isinstance(function, dict):
            raise ChatTemplateError(
                "chat completions only support assistant tool_calls of type 'function'.",
                "tool_calls",
            )
        arguments = function.get("arguments")
        parsed: Any = {}
        if arguments:
            parsed = arguments
            if isinstance(arguments, str):
                try:
                    parsed = json.loads(arguments)
                except json.JSONDecodeError:
                    parsed = {}
            if not isinstance(parsed, dict):
                parsed = {}
        function = _declared_first({**function, "arguments": parsed}, _FUNCTION_KEYS)
        calls.append(_declared_first({**item, "function": function}, _TOOL_CALL_KEYS))
    return calls


# The key order vLLM's templates see: its request model validates each tool
# call as OpenAI's ChatCompletionMessageToolCallParam (a TypedDict), which puts
# the declared keys first, in declaration order, and any other keys after them
# (a template's ``tojson`` of a call or its function shows the order).
_TOOL_CALL_KEYS = ("id", "function", "type")
_FUNCTION_KEYS = ("arguments", "name")


def _declared_first(value: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {**{k: value[k] for k in keys if k in value}, **value}


def _developer_to_system(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For templates without a developer role: system messages, merged at the front."""
    converted = []
    for msg in conversation:
        if msg["role"] == "developer":
            msg = {k: v for k, v in msg.items() if k != "tools"}
            msg["role"] = "system"
        converted.append(msg)
    system_texts: list[str] = []
    others = []
    merge = False
    for i, msg in enumerate(converted):
        if msg["role"] != "system":
            others.append(msg)
            continue
        if i > 0 or system_texts:
            merge = True
        content = msg.get("content", "")
        if isinstance(content, list):
            content = "\n".join(
                p["text"] if isinstance(p, dict) else p
                for p in content
                if isinstance(p, str) or (isinstance(p, dict) and "text" in p)
            )
        if content:
            system_texts.append(content)
    if not merge:
        return converted
    return [{"role": "system", "content": "\n\n".join(system_texts)}, *others]


# ---------------------------------------------------------------------------- template


class ChatTemplate:
    """One compiled chat template plus what it needs from the tokenizer config."""

    def __init__(self, source: str, special_tokens: dict[str, str]) -> None:
        self.source = source
        self.special_tokens = special_tokens
        env = make_environment()
        try:
            self._template: jinja2.Template | None = env.from_string(source)
            self._syntax_error: str | None = None
        except jinja2.TemplateError as e:  # reported on each request, like vLLM
            self._template = None
            self._syntax_error = str(e)
            log.error("the chat template does not compile: %s", e)
        self.content_format = detect_content_format(env, source)
        self.knows_developer_role = '"developer"' in source or "'developer'" in source

    def parse_messages(self, messages: Any, model_name: str) -> list[dict[str, Any]]:
        """OpenAI messages -> the conversation the template sees (vLLM's parsing)."""
        if not isinstance(messages, list):
            raise MessageShapeError("Input should be a valid list", "body.messages")
        openai_format = self.content_format == "openai"
        return [_parse_message(m, i, openai_format, model_name) for i, m in enumerate(messages)]

    def render(
        self,
        conversation: list[dict[str, Any]],
        *,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        kwargs: dict[str, Any] | None = None,
    ) -> str:
        """The prompt text (transformers' ``apply_chat_template(tokenize=False)``)."""
        try:
            return self._render(
                conversation, add_generation_prompt, continue_final_message, kwargs or {}
            )
        except ChatTemplateError:
            raise
        except jinja2.TemplateError as e:
            raise ChatTemplateError(str(e)) from e
        except RecursionError as e:
            raise ChatTemplateError(f"chat template recursion too deep: {e}") from e
        except Exception as e:  # TypeError, ValueError, ... from inside the template
            raise ChatTemplateError(_reason(e)) from e

    def _render(
        self,
        conversation: list[dict[str, Any]],
        add_generation_prompt: bool,
        continue_final_message: bool,
        kwargs: dict[str, Any],
    ) -> str:
        if self._template is None:
            raise ChatTemplateError(self._syntax_error or "invalid chat template")
        if any(m["role"] == "developer" for m in conversation) and not self.knows_developer_role:
            conversation = _developer_to_system(conversation)
        if not conversation:
            raise ChatTemplateError(
                "Cannot apply chat template to an empty conversation. Provide at least one message."
            )
        if continue_final_message and add_generation_prompt:
            raise ChatTemplateError(
                "continue_final_message and add_generation_prompt are not compatible. Use "
                "continue_final_message when you want the model to continue the final "
                "message, and add_generation_prompt when you want to add a header that will "
                "prompt it to start a new assistant message instead."
            )
        template_vars = dict(self.special_tokens)
        template_vars.update((k, v) for k, v in kwargs.items() if k not in _TOKENIZATION_KWARGS)
        if "messages" in template_vars:
            raise ChatTemplateError("chat_template_kwargs must not contain 'messages'")
        tools = template_vars.pop("tools", None)
        documents = template_vars.pop("documents", None)
        if documents is not None and not all(isinstance(d, dict) for d in documents):
            raise ChatTemplateError(
                "Documents should be a list of dicts with 'title' and 'text' keys!"
            )

        final_text = None
        if continue_final_message:
            conversation = list(conversation)
            last = dict(conversation[-1])
            conversation[-1] = last
            content = last.get("content")
            if content is None:
                raise ChatTemplateError(
                    "continue_final_message is set but the final message "
                    'has no "content" to continue!'
                )
            if "content" not in self.source:
                raise ChatTemplateError(
                    'continue_final_message is set to "content" but this '
                    "is not an accepted field in the chat_template"
                )
            if isinstance(content, list):
                blocks = [dict(b) if isinstance(b, dict) else b for b in content]
                for block in reversed(blocks):
                    if isinstance(block, dict) and "text" in block:
                        final_text = block["text"]
                        block["text"] = block["text"] + _CONTINUE_TAG
                        break
                else:
                    raise ChatTemplateError(
                        "continue_final_message is set but we could not "
                        "find any text to continue in the final message!"
                    )
                last["content"] = blocks
            else:
                final_text = content
                last["content"] = content + _CONTINUE_TAG

        rendered = self._template.render(
            messages=conversation,
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            **template_vars,
        )
        if final_text is not None:
            tag = _CONTINUE_TAG.strip()
            if final_text.strip() not in rendered or tag not in rendered:
                raise ChatTemplateError(
                    "continue_final_message is set but the final message does not appear in "
                    "the chat after applying the chat template! This can happen if the chat "
                    "template deletes portions of the final message. Please verify the chat "
                    "template and final message in your chat to ensure they are compatible."
                    f"Final message to continue: {final_text.strip()}\nRendered chat:\n"
                    f"{rendered}"
                )
            at = rendered.rindex(tag)
            if rendered[at : at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
                rendered = rendered[:at]
            else:
                rendered = rendered[:at].rstrip()
        return rendered


def _reason(exc: BaseException) -> str:
    """The most specific message in an exception chain (a Jinja error if there is one)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, jinja2.TemplateError):
            return str(current)
        current = current.__cause__ or current.__context__
    return str(exc)


def build(model: ModelInfo) -> ChatTemplate | None:
    """The model's compiled template (~50 ms), None if it has none."""
    if not model.chat_template:
        return None
    return ChatTemplate(model.chat_template, special_tokens_of(model))


def special_tokens_of(model: ModelInfo) -> dict[str, str]:
    """The special tokens a template sees (bos_token ...)."""
    try:
        text = (pathlib.Path(model.path) / "special_tokens_map.json").read_text(encoding="utf-8")
        fallback = json.loads(text)
    except (OSError, ValueError):  # (none, or unreadable)
        fallback = {}
    return special_tokens_map(model.tokenizer_config, fallback)
