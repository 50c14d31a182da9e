"""``seed_oss``: ByteDance Seed-OSS, the Qwen3 grammar under ``<seed:think>`` /
``<seed:tool_call>`` tokens (turns: ``<seed:bos>``/``<seed:eos>``)."""

from __future__ import annotations

from frontend.parsers.grammar.qwen3 import SEED_OSS
from frontend.parsers.reasoning.qwen3 import Qwen3ReasoningParser


class SeedOssReasoningParser(Qwen3ReasoningParser):
    variant = SEED_OSS
