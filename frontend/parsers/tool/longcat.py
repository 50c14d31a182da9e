"""``longcat``: LongCat-Flash tool calls, hermes' format in its own tags.

::

    text<longcat_tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </longcat_tool_call>

vLLM's ``LongcatFlashToolParser`` is its hermes parser with the tags
swapped; so is this one (:mod:`frontend.parsers.tool.hermes`).
"""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.tool.hermes import HermesToolParser


class LongcatFlashToolParser(HermesToolParser):
    structural_tag_model: ClassVar[str | None] = "longcat"
    start_tag: ClassVar[str] = "<longcat_tool_call>"
    end_tag: ClassVar[str] = "</longcat_tool_call>"
