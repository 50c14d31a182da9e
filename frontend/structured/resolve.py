"""A request's constraint -> the engine's StructuredOutputsParams, with its backend.

Runs where vLLM builds SamplingParams (after the model-dependent sampling
checks): :func:`resolve` merges ``response_format`` over
``structured_outputs``, validates the constraint and picks the grammar
backend, like vLLM's ``SamplingParams._validate_structured_outputs``.

It can take a few milliseconds for a large schema (cached after the first
time); the llguidance calls drop the GIL, so a handler may run it in a worker
thread.
"""

from __future__ import annotations

from frontend.errors import from_validation
from frontend.structured.config import StructuredOutputsConfig
from frontend.structured.guidance import guidance_error, guidance_unsupported_json_features
from frontend.structured.request import Constraints, check_nesting, make_params
from frontend.structured.rules import choice_as_grammar, parse_json_spec
from frontend.structured.xgrammar_compat import xgrammar_error
from protocol.errors import ValidationError
from protocol.structured import StructuredOutputsParams, check_content


def resolve(
    constraints: Constraints, config: StructuredOutputsConfig
) -> StructuredOutputsParams | None:
    """The request's StructuredOutputsParams for the engine, validated, with its
    backend; ``None`` without a constraint. Raises ApiError (400) as vLLM does."""
    if constraints.override is None:
        if constraints.structured_outputs is None:
            return None
        values = dict(constraints.structured_outputs)
    else:
        values = {**(constraints.structured_outputs or {}), **constraints.override}
    params = make_params(values)
    try:
        _validate(params, config.backend)
    except ValidationError as e:
        raise from_validation(e) from None
    return params


def _validate(p: StructuredOutputsParams, backend: str) -> None:
    """vLLM's ``_validate_structured_outputs``: plain checks, then the grammar
    check of the configured backend; ``auto`` takes xgrammar if it would accept
    the constraint, else guidance (outlines for a schema guidance cannot do)."""
    check_content(p)
    check_nesting(p.json)
    check_nesting(p.structural_tag, structural_tag=True)
    kind, spec = p.kind, getattr(p, p.kind)
    if backend == "guidance":
        _raise_if(guidance_error(kind, spec))
        p.backend = "guidance"
        return
    # vLLM skips the xgrammar check of an empty (falsy) constraint: {} or "".
    problem = xgrammar_error(kind, spec) if spec else None
    p.backend_was_auto = backend == "auto"
    if backend == "xgrammar" or problem is None:
        _raise_if(problem)
        p.backend = "xgrammar"
        if p.choice:  # the xgrammar backend compiles no choice list: vLLM sends EBNF
            p.grammar, p.choice = choice_as_grammar(p.choice), None
    elif kind == "json" and _guidance_cannot(spec):
        # vLLM validates with outlines here (not mirrored: this frontend has no
        # outlines); an engine already on xgrammar compiles it with that.
        p.backend = "outlines"
    else:
        _raise_if(guidance_error(kind, spec))
        p.backend = "guidance"


def _guidance_cannot(spec: str | dict) -> bool:
    try:
        schema = parse_json_spec(spec)
    except ValueError:
        raise ValidationError("Invalid JSON grammar specification.") from None
    return guidance_unsupported_json_features(schema)


def _raise_if(message: str | None) -> None:
    if message is not None:
        raise ValidationError(message)
