"""``--structured-outputs-config``: vLLM's ``StructuredOutputsConfig`` as a flag.

The backend (``backend``, vLLM's default ``auto``) is what this frontend
writes into each request's ``_backend``. The engine builds one backend from
the first constrained request it sees and uses it for every later one,
whatever their ``_backend`` says; vLLM's own server sends the same values, so
a shared engine behaves the same behind either. Whitespace options take
effect in the engine: give them to the engine's ``vllm serve --headless
--structured-outputs-config ...`` as well. So does the reasoning parser
(``reasoning_parser``, or ``--reasoning-parser``): the engine uses its own to
hold a grammar back until the reasoning has ended.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, fields
from typing import Any

from frontend.errors import lax_bool
from frontend.parsers.plugins import load_plugin
from frontend.parsers.registry import reasoning_parser_class

FLAG = "--structured-outputs-config"
BACKENDS = ("auto", "xgrammar", "guidance", "outlines", "lm-format-enforcer")
# outlines and lm-format-enforcer validate with their own libraries (outlines
# with torch); this frontend cannot check grammars for them.
SUPPORTED_BACKENDS = ("auto", "xgrammar", "guidance")


@dataclass(frozen=True)
class StructuredOutputsConfig:
    """vLLM's ``StructuredOutputsConfig`` (names, defaults and rules)."""

    backend: str = "auto"
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    reasoning_parser: str = ""
    reasoning_parser_plugin: str = ""
    enable_in_reasoning: bool = False

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(
                f"{FLAG}: backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}"
            )
        if self.backend not in SUPPORTED_BACKENDS:
            raise ValueError(
                f"{FLAG}: the {self.backend!r} backend is not supported by this "
                f"frontend (it validates grammars with llguidance); use one of "
                f"{', '.join(SUPPORTED_BACKENDS)}"
            )
        if self.disable_any_whitespace and self.backend not in ("xgrammar", "guidance"):
            raise ValueError(
                "disable_any_whitespace is only supported for xgrammar and guidance backends."
            )
        if self.disable_additional_properties and self.backend != "guidance":
            raise ValueError(
                "disable_additional_properties is only supported for the guidance backend."
            )
        if self.reasoning_parser:  # raises for an unknown name, as vLLM refuses to start
            reasoning_parser_class(self.reasoning_parser)


_CONFIG_FIELDS = {f.name: f.type for f in fields(StructuredOutputsConfig)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--structured-outputs-config JSON`` and vLLM's dotted form of each key
    (``--structured-outputs-config.backend guidance``); a dotted value is read
    as JSON if it parses, else as a string, as vLLM reads it."""
    group = parser.add_argument_group("structured outputs (vLLM's StructuredOutputsConfig)")
    group.add_argument(
        FLAG,
        dest="structured_outputs_config",
        type=json_object,
        default={},
        metavar="JSON",
        help='e.g. \'{"backend": "guidance"}\'; backend: auto (default: '
        "xgrammar, else guidance, as vLLM), xgrammar or guidance",
    )
    for name in _CONFIG_FIELDS:
        group.add_argument(
            f"{FLAG}.{name}",
            f"--structured_outputs_config.{name}",
            dest=f"structured_outputs_config.{name}",
            type=_cli_value,
            default=argparse.SUPPRESS,
            help=argparse.SUPPRESS,
        )


def config_from_args(args: argparse.Namespace) -> StructuredOutputsConfig:
    """The config from parsed arguments; the dotted keys override the JSON ones.
    Raises ValueError with a message for the command line."""
    values = dict(args.structured_outputs_config)
    for name in _CONFIG_FIELDS:
        dotted = getattr(args, f"structured_outputs_config.{name}", None)
        if dotted is not None:
            values[name] = dotted
    return make_config(values)


def make_config(values: dict[str, Any]) -> StructuredOutputsConfig:
    unknown = set(values) - set(_CONFIG_FIELDS)
    if unknown:
        raise ValueError(
            f"{FLAG}: unknown key(s) {', '.join(sorted(unknown))}; known: "
            f"{', '.join(_CONFIG_FIELDS)}"
        )
    converted = {}
    for name, value in values.items():
        if _CONFIG_FIELDS[name] == "bool":
            value = lax_bool(value)
            if value is None:
                raise ValueError(f"{FLAG}: {name} must be a boolean, got {values[name]!r}")
        elif not isinstance(value, str):
            raise ValueError(f"{FLAG}: {name} must be a string, got {value!r}")
        converted[name] = value
    # vLLM imports the plugin before it checks the reasoning parser's name.
    load_plugin(converted.get("reasoning_parser_plugin"), f"{FLAG}.reasoning_parser_plugin")
    return StructuredOutputsConfig(**converted)


def json_object(text: str) -> dict:
    """An argparse type: a flag's JSON object (``--structured-outputs-config``,
    ``--override-generation-config``)."""
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _cli_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
