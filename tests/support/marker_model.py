"""The tiny model's tokenizer with more parsers' marker tokens added.

The tiny model has the markers of the first parsers (``<tool_call>``,
``[TOOL_CALLS]``, ...).  Other families key on their own tokens
(DeepSeek's ``<｜tool▁calls▁begin｜>``, ...); a parser that looks up their
ids needs them in the vocabulary.  :func:`marker_tokenizer_dir` writes a
tokenizer-only copy of the tiny model with :data:`MARKERS` appended as added
tokens (never split), special or not as in the real models' tokenizers, so
vLLM's parsers and ours see the same ids.  Nothing is downloaded.
"""

from __future__ import annotations

from pathlib import Path

from tests.support import tool_cases_classic1
from tests.support import tool_cases_classic2
from tests.support import tool_cases_classic3
from tests.support import tool_cases_g1
from tests.support import tool_cases_g2
from tests.support import tool_cases_g3
from tests.support import tool_cases_g4
from tests.support import tool_cases_g6
from tests.support.parser_diff import tokenizer_dir

# (text, special) appended in this order after the tiny model's tokens.
MARKERS: list[tuple[str, bool]] = [
    # DeepSeek V3 / V3.1 (plain added tokens in their tokenizer_config).
    ("<｜tool▁calls▁begin｜>", False),
    ("<｜tool▁calls▁end｜>", False),
    ("<｜tool▁call▁begin｜>", False),
    ("<｜tool▁call▁end｜>", False),
    ("<｜tool▁sep｜>", False),
    # Kimi K2 (special tokens).
    ("<|tool_calls_section_begin|>", True),
    ("<|tool_calls_section_end|>", True),
    ("<|tool_call_begin|>", True),
    ("<|tool_call_end|>", True),
    ("<|tool_call_argument_begin|>", True),
    # MiniMax-M2.
    ("<minimax:tool_call>", False),
    ("</minimax:tool_call>", False),
    # InternLM2 (special tokens).
    ("<|action_start|>", True),
    ("<|action_end|>", True),
    ("<|plugin|>", True),
    # Llama 4 (special tokens).
    ("<|python_start|>", True),
    ("<|python_end|>", True),
    # Seed-OSS.
    ("<seed:think>", False),
    ("</seed:think>", False),
    ("<seed:tool_call>", False),
    ("</seed:tool_call>", False),
    ("<seed:bos>", True),
    ("<seed:eos>", True),
    # ERNIE 4.5.
    ("<response>", False),
    ("</response>", False),
    # GigaChat 3 (special tokens).
    ("<|message_sep|>", True),
    ("<|role_sep|>", True),
    ("<|function_call|>", True),
    # Jamba.
    ("<tool_calls>", False),
    ("</tool_calls>", False),
    # Step-3 (special tokens).
    ("<｜tool_calls_begin｜>", True),
    ("<｜tool_calls_end｜>", True),
    ("<｜tool_call_begin｜>", True),
    ("<｜tool_call_end｜>", True),
    ("<｜tool_sep｜>", True),
    # LongCat-Flash.
    ("<longcat_tool_call>", False),
    ("</longcat_tool_call>", False),
]

# Settings merged into the copy's tokenizer_config.json (hf: its response_template).
CONFIG: dict = {}



def marker_tokenizer_dir(tiny_model_dir: Path, out: Path) -> Path:
    """Write the tokenizer files of ``tiny_model_dir`` plus :data:`MARKERS` to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    return tokenizer_dir(tiny_model_dir, out, dict(MARKERS), CONFIG)


MARKERS += tool_cases_classic1.MARKERS
MARKERS += tool_cases_classic2.MARKERS
MARKERS += tool_cases_classic3.MARKERS
MARKERS += tool_cases_g3.MARKERS
MARKERS += tool_cases_g1.MARKERS
MARKERS += tool_cases_g2.MARKERS
MARKERS += tool_cases_g6.MARKERS
CONFIG.update(tool_cases_g6.CONFIG)
MARKERS += tool_cases_g4.MARKERS
