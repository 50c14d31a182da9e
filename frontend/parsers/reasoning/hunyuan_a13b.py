"""``hunyuan_a13b``: Hunyuan-A13B's ``<think>\\n...\\n</think>\\n<answer>\\n...\\n</answer>``.

A complete output is split with regular expressions (no match: all
content).  A stream must come one token a step: a state machine (idle ->
think -> response -> idle) matches the markers by Hunyuan's own token ids,
holding back a partial marker's text and sending it when the match breaks.
Reasoning ends once the ``<answer>`` marker has matched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from frontend.parsers.text_so_far import TextSoFarReasoningParser
from frontend.parsers.types import ParsedDelta

_FULL_RE = re.compile(r"(?:<think>\n(.*?)\n</think>\n<answer>\n)?(.*?)\n</answer>", re.DOTALL)
_HALF_RE = re.compile(r"<think>\n(.*?)\n</think>\n<answer>\n(.*)", re.DOTALL)
RESPONSE_END = "\n</answer>"

# Hunyuan's token ids of the markers (and of their variants).
THINK_START_IDS = [14023, 771, 397]
THINK_START_IDS_FAST = [14023, 771, 1363]
RESPONSE_START_IDS = [198, 524, 27963, 397, 27, 9399, 397]
RESPONSE_START_IDS_FAST = [524, 27963, 397, 27, 9399, 397]
RESPONSE_END_IDS = [198, 524, 9399, 29]


class HunyuanA13BReasoningParser(TextSoFarReasoningParser):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.state = "idle"
        self.expected = THINK_START_IDS
        self.expected_side = THINK_START_IDS_FAST  # the start's second spelling
        self.index = 0
        self.token_buffer: list[int] = []
        self.text_buffer = ""

    def is_reasoning_end(self, token_ids: Sequence[int]) -> bool:
        return self.state == "response"

    def extract_content_ids(self, token_ids: list[int]) -> list[int]:
        return []

    def extract(self, text: str) -> tuple[str | None, str | None]:
        match = _FULL_RE.search(text)
        if match:
            return match.group(1) or None, match.group(2) or None
        match = _HALF_RE.search(text)
        if match:
            reasoning, content = match.group(1), match.group(2)
            if content.endswith(RESPONSE_END):
                content = content[: -len(RESPONSE_END)]
            return reasoning or None, content or None
        return None, text

    def _matches(self, token: int) -> bool:
        if self.state in ("idle", "think"):
            # Short-circuits as vLLM's: the side spelling may be shorter.
            return token == self.expected[self.index] or token == self.expected_side[self.index]
        return token == self.expected[self.index]

    def _complete(self, token: int) -> bool:
        if self.state in ("idle", "think"):
            side = self.expected_side
            if self.index - 1 < len(side) and token == side[self.index - 1]:
                return self.index == len(side)
        return self.index == len(self.expected)

    def extract_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> ParsedDelta | None:
        assert len(delta_ids) == 1, "hunyuan_a13b streams one token a step"
        token = delta_ids[0]
        if not self._matches(token):
            text = self.text_buffer + delta_text if self.token_buffer else delta_text
            self.index, self.token_buffer, self.text_buffer = 0, [], ""
            if self.state == "think":
                return ParsedDelta(reasoning=text, content=None)
            return ParsedDelta(reasoning=None, content=text)
        self.token_buffer.append(token)
        self.text_buffer += delta_text
        self.index += 1
        if self._complete(token):
            if self.state == "idle":
                self.state = "think"
                self.expected, self.expected_side = RESPONSE_START_IDS, RESPONSE_START_IDS_FAST
            elif self.state == "think":
                self.state = "response"
                self.expected = RESPONSE_END_IDS
            else:
                self.state = "idle"
                self.expected, self.expected_side = THINK_START_IDS, THINK_START_IDS_FAST
            self.index, self.token_buffer, self.text_buffer = 0, [], ""
        return None
