"""``--reasoning-parser cohere_command3`` / ``cohere_command4`` (Cohere Command A).

vLLM's reasoning parser classes tell where reasoning ends
(``<|START_THINKING|>`` ... ``<|END_THINKING|>``); its ``CohereCommandParser``
parses the output with ``cohere_melody`` (see :mod:`frontend.parsers.melody`).
"""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.melody import CohereOutputParser, check_tokenizer_markers
from frontend.parsers.reasoning.base import ReasoningParser
from frontend.parsers.tokenizer import ParserTokenizer


class BaseCohereCommandReasoningParser(ReasoningParser):
    output_parser = CohereOutputParser
    cohere_structural_tags = True
    keeps_special_tokens = True
    melody_preset: ClassVar[str]

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        check_tokenizer_markers(tokenizer)


class CohereCommand3ReasoningParser(BaseCohereCommandReasoningParser):
    melody_preset = "cmd3"


class CohereCommand4ReasoningParser(BaseCohereCommandReasoningParser):
    melody_preset = "cmd4"
