"""``qwen3_coder`` (also ``qwen3_xml``): Qwen3-Coder / Qwen3.5 XML tool calls.

::

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Argument values are converted to the types of the tool's parameter schema.
"""

from __future__ import annotations

from frontend.parsers.engine.parser import EngineParser
from frontend.parsers.engine.qwen3 import Qwen3Parser
from frontend.parsers.tool.engine_based import EngineToolParser


class Qwen3CoderToolParser(EngineToolParser):
    structural_tag_model = "qwen_3_coder"
    supports_required_and_named = False

    def _make_engine(self, chat_template_kwargs: dict | None) -> EngineParser:
        return Qwen3Parser(self.tokenizer, self.tools, self.tool_choice, chat_template_kwargs)
