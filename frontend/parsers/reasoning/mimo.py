"""``mimo``: Xiaomi MiMo, the Qwen3 grammar (parameter values verbatim)."""

from __future__ import annotations

from frontend.parsers.grammar.qwen3 import MIMO
from frontend.parsers.reasoning.qwen3 import Qwen3ReasoningParser


class MiMoReasoningParser(Qwen3ReasoningParser):
    variant = MIMO
