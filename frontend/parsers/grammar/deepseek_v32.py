"""The DeepSeek-V3.2 output grammar: DSML tool calls.

::

    <｜DSML｜function_calls>
    <｜DSML｜invoke name="get_weather">
    <｜DSML｜parameter name="city" string="true">杭州</｜DSML｜parameter>
    <｜DSML｜parameter name="days" string="false">5</｜DSML｜parameter>
    </｜DSML｜invoke>
    </｜DSML｜function_calls>

``string="true"`` values are strings, others JSON (the text when it is not
JSON); arguments a tool does not have that wrap its arguments (one
``arguments`` or ``input`` key) are unwrapped.  Text after the calls is
dropped.  No reasoning markers.  vLLM 0.32's ``vllm/parser/deepseek_v32.py``
(and the DSML helpers of its ``deepseek_v4.py``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import re

from frontend.parsers.arguments import find_tool_properties
from frontend.parsers.grammar.machine import Ev, Grammar, State
from frontend.parsers.grammar.parser import GrammarParser
from frontend.parsers.tokenizer import ParserTokenizer

_DSML = "｜DSML｜"
FUNC_START = f"<{_DSML}function_calls>"
FUNC_END = f"</{_DSML}function_calls>"
INVOKE_PREFIX = f'<{_DSML}invoke name="'
INVOKE_END = f"</{_DSML}invoke>"
PARAM_START = f"<{_DSML}parameter"
PARAM_CLOSE = f"</{_DSML}parameter>"


def param_patterns(param_start: str, param_close: str) -> tuple[re.Pattern, re.Pattern]:
    """A DSML dialect's complete and trailing-partial parameter regexes (the
    string attribute is optional: models sometimes omit it)."""
    start, close = re.escape(param_start), re.escape(param_close)
    head = rf'{start}\s+name="([^"]+)"(?:\s+string="([^"]*)")?\s*>'
    return (
        re.compile(rf"{head}(.*?)(?:{close}|(?={start}\s+name=))", re.DOTALL),
        re.compile(rf"{head}(.*)$", re.DOTALL),
    )


PARAM_RES = param_patterns(PARAM_START, PARAM_CLOSE)


def dsml_arguments(
    raw: str, partial: bool, param_res: tuple[re.Pattern, re.Pattern] = PARAM_RES
) -> str:
    """The parameters as a JSON object's text."""
    param_re, partial_param_re = param_res
    params: dict[str, object] = {}
    last_end = 0
    for m in param_re.finditer(raw):
        name, is_str, value = m.group(1), m.group(2), m.group(3)
        if is_str == "true":
            params[name] = value
        else:
            try:
                params[name] = json.loads(value)
            except ValueError:
                params[name] = value
        last_end = m.end()
    if partial:
        pm = partial_param_re.search(raw, last_end)
        if pm:
            name, is_str, value = pm.group(1), pm.group(2), pm.group(3)
            if is_str == "true":
                params[name] = value
            else:
                with contextlib.suppress(ValueError):
                    params[name] = json.loads(value)
    return json.dumps(params, ensure_ascii=False)


def unwrap_wrapper_args(args_json: str, tools: list[dict] | None, name: str | None) -> str:
    """``{"arguments": {...}}`` (or ``input``) -> ``{...}`` when the tool has
    no such parameter and the inner keys are its parameters."""
    if not tools or not name:
        return args_json
    try:
        args = json.loads(args_json)
    except ValueError:
        return args_json
    if not isinstance(args, dict):
        return args_json
    properties = find_tool_properties(tools, name)
    if not properties:
        return args_json
    allowed = set(properties)
    for wrapper in ("arguments", "input"):
        if set(args) != {wrapper} or wrapper in allowed:
            continue
        inner = args[wrapper]
        if isinstance(inner, str):
            try:
                inner = json.loads(inner)
            except ValueError:
                return args_json
        if isinstance(inner, dict) and set(inner).issubset(allowed):
            return json.dumps(inner, ensure_ascii=False)
    return args_json


@functools.cache
def deepseek_v32_grammar() -> Grammar:
    S = State
    return Grammar(
        name="deepseek_v32",
        terminals={
            "TOOL_START": FUNC_START,
            "TOOL_END": FUNC_END,
            "INVOKE_PREFIX": INVOKE_PREFIX,
            "INVOKE_NAME_END": '">',
            "INVOKE_END": INVOKE_END,
            "PARAM_START": PARAM_START,
            "PARAM_CLOSE": PARAM_CLOSE,
        },
        id_terminals={"TOOL_START": FUNC_START, "TOOL_END": FUNC_END},
        transitions={
            (S.CONTENT, "TOOL_START"): (S.TOOL_PREAMBLE, ()),
            (S.TOOL_PREAMBLE, "INVOKE_PREFIX"): (S.TOOL_NAME, (Ev.TOOL_START,)),
            (S.CONTENT, "INVOKE_PREFIX"): (S.TOOL_NAME, (Ev.TOOL_START,)),
            (S.TOOL_NAME, "INVOKE_NAME_END"): (S.TOOL_ARGS, ()),
            (S.TOOL_ARGS, "INVOKE_END"): (S.TOOL_BETWEEN, (Ev.TOOL_END,)),
            (S.TOOL_ARGS, "TOOL_END"): (S.TOOL_BETWEEN, (Ev.TOOL_END,)),
            (S.TOOL_BETWEEN, "INVOKE_PREFIX"): (S.TOOL_NAME, (Ev.TOOL_START,)),
            # A tool call ends the turn: text after the block is dropped.
            (S.TOOL_BETWEEN, "TOOL_END"): (S.TOOL_BETWEEN, ()),
            (S.TOOL_BETWEEN, "TOOL_START"): (S.TOOL_PREAMBLE, ()),
        },
        initial_state=S.CONTENT,
        wait_for_reasoning=False,
        arg_converter=dsml_arguments,
        # Only a piece with a ">" can change the converted arguments.
        arg_structural_chars=frozenset(">"),
        args_json=False,
        strip_content_ws_with_tools=False,
        content_events={S.CONTENT: Ev.TEXT, S.TOOL_NAME: Ev.TOOL_NAME, S.TOOL_ARGS: Ev.ARGS},
    )


class DsmlArgumentsParser(GrammarParser):
    """A DSML grammar's parser: arguments from the grammar's converter, a
    wrapper object around them unwrapped (DeepSeek V3.2, V4)."""

    def _convert_args(self, raw: str, partial: bool) -> str:
        result = super()._convert_args(raw, partial)
        if not self._tools:
            return result
        name = next((s.name for s in self._slots if s.args == raw), None)
        return unwrap_wrapper_args(result, self._tools, name)


class DeepSeekV32Parser(DsmlArgumentsParser):
    def __init__(
        self,
        tokenizer: ParserTokenizer,
        tools: list[dict] | None = None,
        tool_choice: object = None,
    ) -> None:
        super().__init__(deepseek_v32_grammar(), tokenizer, tools, tool_choice)
