"""``deepseek_v31``: DeepSeek-V3.1 tool calls.

::

    text<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{"city": "Paris"}
    <｜tool▁call▁end｜><｜tool▁calls▁end｜>          (one line)

vLLM's ``DeepSeekV31ToolParser``: :mod:`frontend.parsers.tool.deepseek_v3`
with the name before the separator and the arguments after it, unfenced.
"""

from __future__ import annotations

import re
from typing import ClassVar

from frontend.parsers.tool.deepseek_v3 import DeepSeekV3ToolParser
from frontend.parsers.types import ToolCall, make_tool_call_id


class DeepSeekV31ToolParser(DeepSeekV3ToolParser):
    structural_tag_model: ClassVar[str | None] = "deepseek_v3_1"
    label: ClassVar[str] = "DeepSeek-V3.1 Tool parser could not locate tool call start/end tokens"
    call_re: ClassVar[re.Pattern[str]] = re.compile(
        r"<｜tool▁call▁begin｜>(?P<function_name>.*?)<｜tool▁sep｜>"
        r"(?P<function_arguments>.*?)<｜tool▁call▁end｜>"
    )
    portion_re: ClassVar[re.Pattern[str]] = re.compile(
        r"(?P<function_name>.*)<｜tool▁sep｜>(?P<function_arguments>.*)"
    )
    name_re: ClassVar[re.Pattern[str]] = re.compile(r"(?P<function_name>.*)<｜tool▁sep｜>")

    def _call(self, match: tuple[str, ...]) -> ToolCall:
        name, arguments = match
        return ToolCall(name, arguments, make_tool_call_id())
