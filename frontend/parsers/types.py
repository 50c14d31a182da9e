"""What the parsers take and return: the request's tools, tool calls, and
streaming deltas in OpenAI's shape.

vLLM serializes its stream deltas with ``exclude_unset``: a field a parser
set explicitly, even to ``None``, is sent (``"content": null``), one it never
set is left out.  To give the same bytes, :class:`ParsedDelta` and
:class:`DeltaToolCall` keep that distinction with the :data:`UNSET` marker;
``to_dict()`` gives the JSON-ready shape in vLLM's field order.
"""

from __future__ import annotations

import secrets
import string
from dataclasses import dataclass, field
from typing import Any


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = _Unset()
"""A field that was never set: left out of the JSON (unlike ``None``)."""


def tool_function(tool: Any) -> dict[str, Any]:
    """The ``function`` object of a request's tool (or named tool_choice); {} if none."""
    function = tool.get("function") if isinstance(tool, dict) else None
    return function if isinstance(function, dict) else {}


def named_tool(tool_choice: object) -> str | None:
    """The function name of a named ``tool_choice``, else None."""
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        if isinstance(function, dict):
            return function.get("name")
    return None


def make_tool_call_id() -> str:
    """vLLM's tool call id: ``chatcmpl-tool-`` and 16 random hex digits."""
    return f"chatcmpl-tool-{secrets.randbits(64):016x}"


_ALPHANUMERIC = string.ascii_letters + string.digits


def make_mistral_tool_call_id() -> str:
    """Mistral's tool call ids are 9 alphanumeric characters."""
    return "".join(secrets.choice(_ALPHANUMERIC) for _ in range(9))


@dataclass(slots=True)
class ToolCall:
    """One complete tool call.  ``id`` None: the caller assigns a fresh one."""

    name: str
    arguments: str  # JSON text
    id: str | None = None


@dataclass(slots=True)
class ExtractedToolCalls:
    """A tool parser's non-streaming result."""

    tools_called: bool
    tool_calls: list[ToolCall]
    content: str | None


@dataclass(slots=True)
class DeltaToolCall:
    """A piece of a streamed tool call: the first carries id, type and name."""

    index: int
    id: Any = UNSET
    type: Any = UNSET
    name: Any = UNSET
    arguments: Any = UNSET
    # False: the chunk has no "function" object at all.
    has_function: bool = True

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.id is not UNSET:
            out["id"] = self.id
        if self.type is not UNSET:
            out["type"] = self.type
        out["index"] = self.index
        if self.has_function:
            function: dict[str, Any] = {}
            if self.name is not UNSET:
                function["name"] = self.name
            if self.arguments is not UNSET:
                function["arguments"] = self.arguments
            out["function"] = function
        return out


@dataclass(slots=True)
class ParsedDelta:
    """One streamed message delta, parsed: content, reasoning, tool call pieces
    (what a parser makes of the fan-out table's raw :class:`frontend.choices.Delta`)."""

    content: Any = UNSET
    reasoning: Any = UNSET
    tool_calls: list[DeltaToolCall] = field(default_factory=list)
    # Cohere's grounding spans (vLLM's CohereDeltaMessage.citations), JSON-ready.
    citations: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def new_call(cls, index: int, name: str) -> ParsedDelta:
        """The delta that opens tool call ``index``: a new id, the type, the name."""
        return cls(
            tool_calls=[DeltaToolCall(index, id=make_tool_call_id(), type="function", name=name)]
        )

    @property
    def text(self) -> str:
        """The content as a string ("" when unset or None)."""
        return self.content or ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, as vLLM's ``DeltaMessage.model_dump(exclude_unset=True)``.

        ``role`` is the serving layer's business and is not included.
        """
        out: dict[str, Any] = {}
        if self.content is not UNSET:
            out["content"] = self.content
        if self.reasoning is not UNSET:
            out["reasoning"] = self.reasoning
        if self.tool_calls:
            out["tool_calls"] = [tc.to_dict() for tc in self.tool_calls]
        if self.citations:
            out["citations"] = self.citations
        return out
