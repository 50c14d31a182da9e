"""``step3p5``: Step-3.5/3.7, the Qwen3 grammar with reasoning always on
(``enable_thinking`` ignored) and its trailing whitespace stripped."""

from __future__ import annotations

from frontend.parsers.grammar.qwen3 import STEP3P5
from frontend.parsers.reasoning.qwen3 import Qwen3ReasoningParser


class Step3p5ReasoningParser(Qwen3ReasoningParser):
    variant = STEP3P5
