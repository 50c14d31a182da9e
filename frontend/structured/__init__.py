"""Structured outputs: the grammar constraints the engine enforces, checked here.

vLLM 0.32's ``response_format``/``structured_outputs`` semantics, for
/v1/completions and /v1/chat/completions alike, and the constraints vLLM puts
on forced tool calls. Modules, each one job:

* :mod:`~frontend.structured.config`: ``--structured-outputs-config``;
* :mod:`~frontend.structured.request`: what a request may say (vLLM's model
  validators and field validation) -> :class:`Constraints`;
* :mod:`~frontend.structured.resolve`: :class:`Constraints` -> the engine's
  StructuredOutputsParams, validated, with its backend;
* :mod:`~frontend.structured.rules`: vLLM's backend-independent rules;
* :mod:`~frontend.structured.guidance`: guidance's verdicts (exact, llguidance);
* :mod:`~frontend.structured.xgrammar_compat`: xgrammar's verdicts, predicted
  (xgrammar needs torch);
* :mod:`~frontend.structured.structural_tag`: structural tags, validated and
  built;
* :mod:`~frontend.structured.tool_schema`: the JSON schemas that force a tool
  call;
* :mod:`~frontend.structured.tool_choice`: vLLM's ``adjust_request`` (what the
  configured parsers change in a chat request's constraint);
* :mod:`~frontend.structured.cohere_tags`: the Cohere Command parsers' tags.

The names below are what the routes and the command line use. This package
reads the parsers' names and traits (:mod:`frontend.parsers`); it never
imports the routes (``frontend.openai``) or the application state.
"""

from frontend.structured.config import (
    FLAG,
    StructuredOutputsConfig,
    add_arguments,
    config_from_args,
    make_config,
)
from frontend.structured.request import (
    Constraints,
    check_response_format,
    check_structured_outputs_count,
    parse,
)
from frontend.structured.resolve import resolve

__all__ = [
    "FLAG",
    "Constraints",
    "StructuredOutputsConfig",
    "add_arguments",
    "check_response_format",
    "check_structured_outputs_count",
    "config_from_args",
    "make_config",
    "parse",
    "resolve",
]
