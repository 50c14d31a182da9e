"""Tools, tool_choice, reasoning and structured outputs of a chat request.

The chat route's one bridge into :mod:`frontend.parsers` (output parsing)
and :mod:`frontend.structured` (grammar constraints): the route calls only
this module for them. vLLM 0.32's semantics (``chat_completion/protocol.py``,
``online_renderer.py``, ``parser/abstract_parser.py``), in the order vLLM
applies them:

1. request checks: :func:`check_tool_usage` (its ``check_tool_usage`` model
   validator), then field validation of ``tools`` (:func:`normalize_tools`,
   which also gives the tools as vLLM dumps them for the chat template); the
   structured-output checks (:func:`check_structured_outputs_count`,
   :func:`check_response_format`, :func:`parse_constraints`) are
   :mod:`frontend.structured`'s, named here for the route;
2. after rendering, :func:`plan` runs vLLM's ``adjust_request`` for the
   configured parsers (a forced tool call becomes a JSON schema or a
   structural tag, special tokens may stay in the text) and works out what the
   engine request carries (``reasoning_ended``, ``reasoning_parser_kwargs``);
3. per choice, :class:`ChatTooling` parses the output into reasoning, content
   and tool calls: whole (:meth:`ChatTooling.message`) or per engine output
   while streaming (:meth:`ChatTooling.stream_parser`, the fan-out table's
   per-choice hook).

Without ``--tool-call-parser``/``--reasoning-parser`` there is nothing to
parse and the chat route takes its plain path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from frontend.errors import ApiError, invalid, schema_error
from frontend.parsers import (
    ChatParsers,
    OutputParser,
    ParsedDelta,
    first_call_only,
    message_parts,
    named_tool,
    stream_finish_reason,
)
from frontend.parsers.types import tool_function
from frontend.structured import (
    Constraints,
    check_response_format,
    check_structured_outputs_count,
)
from frontend.structured import parse as parse_constraints
from frontend.structured.tool_choice import adjust_chat_request

if TYPE_CHECKING:
    from frontend.choices import Choice, Delta

# The route's names for what it uses from structured/ and parsers/.
__all__ = [
    "ChatTooling",
    "Constraints",
    "StreamParser",
    "check_named_tool_choice",
    "check_response_format",
    "check_structured_outputs_count",
    "check_tool_usage",
    "install_stream_parsers",
    "normalize_tools",
    "parse_constraints",
    "parser_template_kwargs",
    "plan",
    "stream_finish_reason",
    "tool_parsing_unavailable",
]

CORRECT_USAGE = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'


# ---------------------------------------------------------------------------- 1. checks


def check_tool_usage(tools: Any, tool_choice: Any, *, tool_choice_set: bool) -> Any:
    """vLLM's ``check_tool_usage`` model validator; returns the tool_choice in
    effect ("auto" when tools come without one, else "none")."""
    if tools == []:
        raise invalid(
            "`tools` must not be an empty array. Either provide at least one "
            "tool or omit the field entirely.",
            "tools",
        )
    if not tool_choice_set:
        tool_choice = "auto" if tools else "none"
    if tool_choice is None or tool_choice == "none":
        return tool_choice
    if tools is None:
        raise invalid("When using `tool_choice`, `tools` must be set.", "tool_choice")
    if tool_choice not in ("auto", "required") and not isinstance(tool_choice, dict):
        raise invalid(
            f"Invalid value for `tool_choice`: {tool_choice}! Only named tools, "
            '"none", "auto" or "required" are supported.',
            "tool_choice",
        )
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        if not isinstance(function, dict):
            raise invalid(
                f"Invalid value for `function`: `{function}` in `tool_choice`! {CORRECT_USAGE}",
                "tool_choice.function",
            )
        if "name" not in function:
            raise invalid(
                f"Expected field `name` in `function` in `tool_choice`! {CORRECT_USAGE}",
                "tool_choice.function.name",
            )
        name = function["name"]
        if not isinstance(name, str) or not name:
            raise invalid(
                f"Invalid `name` in `function`: `{name}` in `tool_choice`! {CORRECT_USAGE}",
                "tool_choice.function.name",
            )
        if not any(tool_function(tool).get("name") == name for tool in _as_list(tools)):
            raise invalid(
                "The tool specified in `tool_choice` does not match any of the specified `tools`",
                "tool_choice",
            )
    return tool_choice


def _as_list(value: Any) -> list:
    return value if isinstance(value, list) else []


# Field types of vLLM's FunctionDefinition (name required).
_FUNCTION_FIELDS = (
    ("name", str, "string"),
    ("description", str, "string"),
    ("parameters", dict, "dictionary"),
    ("strict", bool, "boolean"),
    ("defer_loading", bool, "boolean"),
)


def normalize_tools(tools: Any) -> list[dict] | None:
    """Field validation of ``tools`` (vLLM's ``ChatCompletionToolsParam``), and
    the tools as vLLM passes them to the chat template: ``{"type": "function",
    "function": {"name", "description", "parameters"}}``, ``strict`` and
    ``defer_loading`` only where set (a tool-level ``defer_loading`` moves into
    the function, and stays)."""
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise schema_error("Input should be a valid list", "body.tools")
    normalized = []
    for i, tool in enumerate(tools):
        where = f"body.tools.{i}"
        if not isinstance(tool, dict):
            raise schema_error(
                "Input should be a valid dictionary or object to extract fields from", where
            )
        if tool.get("type", "function") != "function":
            raise schema_error("Input should be 'function'", f"{where}.type")
        function = tool.get("function")
        if function is None and "function" not in tool:
            raise schema_error("Field required", f"{where}.function")
        if not isinstance(function, dict):
            raise schema_error(
                "Input should be a valid dictionary or object to extract fields from",
                f"{where}.function",
            )
        dumped: dict[str, Any] = {}
        for name, kind, label in _FUNCTION_FIELDS:
            value = function.get(name)
            if name == "name" and "name" not in function:
                raise schema_error("Field required", f"{where}.function.name")
            if value is not None and not isinstance(value, kind):
                raise schema_error(f"Input should be a valid {label}", f"{where}.function.{name}")
            dumped[name] = value
        tool_defer = tool.get("defer_loading")
        if tool_defer is not None and not isinstance(tool_defer, bool):
            raise schema_error("Input should be a valid boolean", f"{where}.defer_loading")
        if dumped["defer_loading"] is None:
            dumped["defer_loading"] = tool_defer
        for name in ("strict", "defer_loading"):
            if dumped[name] is None:
                del dumped[name]
        tool_dump: dict[str, Any] = {"type": "function", "function": dumped}
        if tool_defer is not None:
            tool_dump["defer_loading"] = tool_defer
        normalized.append(tool_dump)
    return normalized


def check_named_tool_choice(tool_choice: Any) -> None:
    """Field validation of a named ``tool_choice`` (the validator checked the rest)."""
    if isinstance(tool_choice, dict) and tool_choice.get("type", "function") != "function":
        raise schema_error("Input should be 'function'", "body.tool_choice.type")


def tool_parsing_unavailable(parsers: ChatParsers | None, tool_choice: Any) -> None:
    """vLLM's answer to a tool choice that needs a tool parser it does not have."""
    if (parsers is not None and parsers.tool_parser is not None) or tool_choice in (None, "none"):
        return
    if tool_choice == "auto":
        raise ApiError(
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
        )
    name = named_tool(tool_choice)
    desc = f'function "{name}"' if isinstance(tool_choice, dict) else f'"{tool_choice}"'
    raise ApiError(f"tool_choice={desc} requires --tool-call-parser to be set")


def parser_template_kwargs(
    user_kwargs: dict | None,
    *,
    add_generation_prompt: bool,
    continue_final_message: bool,
    documents: Any,
    reasoning_effort: str | None,
    defaults: dict | None = None,
) -> dict:
    """The chat template kwargs vLLM gives its parsers (and the engine's
    reasoning parser): the server's defaults, the client's, then the request's
    own template arguments (None and "auto" values dropped)."""
    extra: dict[str, Any] = {
        "add_generation_prompt": add_generation_prompt,
        "continue_final_message": continue_final_message,
        "documents": documents,
        "reasoning_effort": reasoning_effort,
    }
    if reasoning_effort is not None and "enable_thinking" not in (user_kwargs or {}):
        extra["enable_thinking"] = reasoning_effort != "none"
    return {
        **(defaults or {}),
        **(user_kwargs or {}),
        **{k: v for k, v in extra.items() if v is not None and not _is_auto(v)},
    }


def _is_auto(value: Any) -> bool:
    return isinstance(value, str) and value == "auto"


# ---------------------------------------------------------------------------- 2. the plan


@dataclass
class ChatTooling:
    """What one chat request does with tools, reasoning and structured outputs."""

    parsers: ChatParsers | None
    tools: list[dict] | None
    tool_choice: Any
    parallel_tool_calls: bool | None
    include_reasoning: bool
    template_kwargs: dict
    prompt_token_ids: list[int]
    # The grammar constraint fields after adjust_request.
    constraints: Constraints
    # False: decode with special tokens kept (the parser needs its markers).
    skip_special_tokens: bool | None = None
    # False: no spaces between special tokens (a parser's multi-token markers).
    spaces_between_special_tokens: bool | None = None
    reasoning_ended: bool | None = None
    reasoning_parser_kwargs: dict | None = None

    @property
    def parsing(self) -> bool:
        """Whether the output goes through a parser (vLLM: a parser is configured)."""
        return self.parsers is not None

    @property
    def reasoning_details(self) -> bool:
        """vLLM reports completion_tokens_details.reasoning_tokens with a reasoning parser."""
        return self.parsers is not None and self.parsers.reasoning_parser is not None

    @property
    def hide_metadata(self) -> bool:
        """``include_reasoning=false`` with a parser: no logprobs or token ids,
        which would show the reasoning."""
        return self.parsers is not None and not self.include_reasoning

    def new_parser(self) -> OutputParser:
        assert self.parsers is not None
        return self.parsers.new(
            tools=self.tools,
            tool_choice=self.tool_choice,
            include_reasoning=self.include_reasoning,
            chat_template_kwargs=self.template_kwargs,
            prompt_token_ids=self.prompt_token_ids,
        )

    # ------------------------------------------------------------ whole outputs
    def message(
        self, text: str, token_ids: list[int], finish_reason: str | None
    ) -> tuple[dict, str, int]:
        """A finished choice's message fields (after ``role``), its finish_reason
        and its reasoning token count."""
        parser = self.new_parser()
        assert self.parsers is not None  # (new_parser's own check)
        parsed = parser.parse(text)
        parts = message_parts(
            parsed,
            tool_choice=self.tool_choice,
            has_tool_parser=self.parsers.tool_parser is not None,
            has_tools=bool(self.tools),
            finish_reason=finish_reason,
            parallel_tool_calls=self.parallel_tool_calls,
        )
        fields: dict[str, Any] = {
            "content": parts.content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
        }
        if parts.tool_calls:
            fields["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in parts.tool_calls
            ]
        fields["reasoning"] = parts.reasoning
        return fields, parts.finish_reason, parser.count_reasoning_tokens(token_ids)

    # ------------------------------------------------------------ streaming
    def stream_parser(self) -> StreamParser:
        return StreamParser(self.new_parser(), self.parallel_tool_calls is False)


class StreamParser:
    """One streamed choice's parser, the fan-out table's per-choice hook: it is
    called with each delta as the table queues it (one engine output, or the
    steps ``stream_interval`` held together) and returns the parsed delta."""

    __slots__ = ("parser", "first_call_only")

    def __init__(self, parser: OutputParser, first_only: bool) -> None:
        self.parser = parser
        self.first_call_only = first_only

    def __call__(self, delta: Delta) -> ParsedDelta | None:
        parsed = self.parser.feed(
            delta.text, delta.token_ids, finished=delta.finish_reason is not None
        )
        if parsed is not None and self.first_call_only:
            parsed = first_call_only(parsed)
        return parsed

    @property
    def tools_streamed(self) -> bool:
        return self.parser.tools_streamed

    def count_reasoning_tokens(self, token_ids: list[int]) -> int:
        return self.parser.count_reasoning_tokens(token_ids)


def plan(
    parsers: ChatParsers | None,
    *,
    tools: list[dict] | None,
    tool_choice: Any,
    parallel_tool_calls: bool | None,
    include_reasoning: bool,
    response_format: Any,
    structured_outputs: Any,
    constraints: Constraints,
    template_kwargs: dict,
    prompt_token_ids: list[int],
) -> ChatTooling:
    """vLLM's ``adjust_request`` and the engine request's reasoning fields."""
    tooling = ChatTooling(
        parsers,
        tools,
        tool_choice,
        parallel_tool_calls,
        include_reasoning,
        template_kwargs,
        prompt_token_ids,
        constraints,
    )
    if parsers is not None:
        tool = parsers.tool_parser
        if tool is not None and (parsers.reasoning_parser is not None or tool_choice != "none"):
            try:  # what vLLM's adjust_request refuses, a 400 before generation
                tool.check_request(template_kwargs)
            except ValueError as e:
                raise ApiError(str(e), 400) from None
        (
            tooling.constraints,
            tooling.skip_special_tokens,
            tooling.spaces_between_special_tokens,
        ) = adjust_chat_request(
            parsers.tool_parser,
            parsers.reasoning_parser,
            tools=tools,
            tool_choice=tool_choice,
            parallel_tool_calls=parallel_tool_calls,
            response_format=response_format,
            structured_outputs=structured_outputs,
            constraints=constraints,
            strict_level=parsers.tool_strict_level,
            token_suffix=parsers.tool_tag_suffix,
            architecture=parsers.architecture,
        )
    # vLLM's resolve_reasoning_ended and reasoning_parser_kwargs.
    if parsers is not None and parsers.reasoning_parser is not None:
        tooling.reasoning_ended = parsers.reasoning_ended(
            prompt_token_ids,
            include_reasoning=include_reasoning,
            chat_template_kwargs=template_kwargs,
        )
        tooling.reasoning_parser_kwargs = {"chat_template_kwargs": template_kwargs}
    elif not include_reasoning:
        tooling.reasoning_ended = True
    return tooling


def install_stream_parsers(
    tooling: ChatTooling, choices: list[Choice]
) -> list[StreamParser] | None:
    """One parser per streamed choice, as the table's hook; None without parsers."""
    if not tooling.parsing:
        return None
    hooks = [tooling.stream_parser() for _ in choices]
    for choice, hook in zip(choices, hooks):
        choice.parser = hook
    return hooks
