"""``--tool-call-parser cohere_command3`` / ``cohere_command4`` (Cohere Command A).

vLLM's tool parser classes only name melody's preset; its
``CohereCommandParser`` parses the whole output with ``cohere_melody`` (see
:mod:`frontend.parsers.melody`).
"""

from __future__ import annotations

from typing import ClassVar

from frontend.parsers.melody import CohereOutputParser, check_tokenizer_markers
from frontend.parsers.tokenizer import ParserTokenizer
from frontend.parsers.tool.base import ToolParser


class BaseCohereCommandToolParser(ToolParser):
    output_parser = CohereOutputParser
    cohere_structural_tags = True
    keeps_special_tokens = "always"
    melody_preset: ClassVar[str]

    @classmethod
    def check_tokenizer(cls, tokenizer: ParserTokenizer) -> None:
        check_tokenizer_markers(tokenizer)


class CohereCommand3ToolParser(BaseCohereCommandToolParser):
    melody_preset = "cmd3"


class CohereCommand4ToolParser(BaseCohereCommandToolParser):
    melody_preset = "cmd4"
