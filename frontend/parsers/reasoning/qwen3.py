"""``qwen3``: Qwen3 reasoning, on the Qwen3 grammar.

Reasoning is on from the first token unless ``enable_thinking=False`` (a chat
template kwarg); ``</think>`` or a ``<tool_call>`` ends it.
"""

from __future__ import annotations

from frontend.parsers.engine.parser import EngineParser
from frontend.parsers.engine.qwen3 import Qwen3Parser
from frontend.parsers.reasoning.engine_based import EngineReasoningParser


class Qwen3ReasoningParser(EngineReasoningParser):

    def _make_engine(self) -> EngineParser:
        return Qwen3Parser(self.tokenizer, chat_template_kwargs=self._kwargs)
