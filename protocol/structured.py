"""vLLM 0.32's ``StructuredOutputsParams``: the grammar constraint inside an ADD.

On the wire it is a map inside ``SamplingParams.structured_outputs`` (vLLM's
class is a dataclass, which msgspec encodes as a map), private fields included:
``_backend`` names the engine's grammar backend. The engine builds its single
backend from the first constrained request's ``_backend`` and compiles every
later grammar with it; a request without ``_backend`` fails in the engine.

The engine's decoder runs ``__post_init__``, which refuses anything but exactly
one constraint; ours does the same at construction, so a struct that breaks
the rule cannot exist, and :func:`check` refuses the rest of what vLLM's
frontend would have refused before encoding (messages are vLLM's).
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.errors import ValidationError

# The constraint fields, in vLLM's order; exactly one is set.
CONSTRAINTS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")
# Grammar backends an engine can build (vllm/v1/structured_output/__init__.py).
ENGINE_BACKENDS = ("xgrammar", "guidance", "outlines", "lm-format-enforcer")


class StructuredOutputsParams(msgspec.Struct, omit_defaults=True, kw_only=True):
    json: str | dict[str, Any] | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    # Options. The xgrammar and guidance backends read the engine's
    # --structured-outputs-config instead; vLLM still carries them.
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    structural_tag: str | None = None
    backend: str | None = msgspec.field(default=None, name="_backend")
    backend_was_auto: bool = msgspec.field(default=False, name="_backend_was_auto")

    def __post_init__(self) -> None:
        count = sum(getattr(self, name) is not None for name in CONSTRAINTS)
        if count > 1:
            raise ValidationError(
                "You can only use one kind of structured outputs "
                f"constraint but multiple are specified: {self.as_dict()}"
            )
        if count < 1:
            raise ValidationError(
                "You must use one kind of structured outputs constraint "
                f"but none are specified: {self.as_dict()}"
            )

    @property
    def kind(self) -> str:
        """The name of the one constraint field that is set."""
        return next(name for name in CONSTRAINTS if getattr(self, name) is not None)

    def as_dict(self) -> dict[str, Any]:
        """Every field under its wire name (vLLM's messages show its ``__dict__``)."""
        return {f.encode_name: getattr(self, f.name) for f in msgspec.structs.fields(self)}


def check(p: StructuredOutputsParams) -> None:
    """Raise :class:`ValidationError` for a missing or unknown backend (the engine
    fails such a request) and for what :func:`check_content` refuses."""
    if p.backend not in ENGINE_BACKENDS:
        raise ValidationError(
            f"structured outputs need a grammar backend (_backend) out of "
            f"{', '.join(ENGINE_BACKENDS)}, got {p.backend!r}"
        )
    check_content(p)


def check_content(p: StructuredOutputsParams) -> None:
    """What vLLM's frontend refuses before it looks at the grammar itself (the
    plain checks of ``_validate_structured_outputs``), with its messages."""
    if isinstance(p.choice, list) and not p.choice:
        raise ValidationError(f"Choice '{p.choice}' cannot be an empty list")
    if isinstance(p.grammar, str) and not p.grammar.strip():
        raise ValidationError("structured_outputs.grammar cannot be an empty string")
    if isinstance(p.json, str) and not p.json.strip():
        raise ValidationError("structured_outputs.json cannot be an empty string")
    if p.json_object is False:
        raise ValidationError(
            "structured_outputs.json_object must be True if set; omit "
            "structured_outputs to disable structured outputs"
        )
    if p.regex and "\x00" in p.regex:
        raise ValidationError("structured_outputs.regex must not contain a NUL character ('\\x00')")
    if isinstance(p.structural_tag, str) and not p.structural_tag.strip():
        raise ValidationError("structured_outputs.structural_tag cannot be an empty string")
