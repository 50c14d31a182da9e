"""What vLLM's Messages handler finds out about the model once, here on first
use: whether the chat template wants a single leading system message, which
``reasoning_effort`` ``thinking: {"type": "disabled"}`` maps to, and whether
the model is gpt-oss (Harmony), which this server does not serve.
"""

from __future__ import annotations

import json
import logging
import pathlib
from typing import Any

import jinja2
import jinja2.ext
import jinja2.sandbox

from frontend.anthropic.errors import harmony_refused
from frontend.openai import chat
from frontend.openai.chat_request import ChatCompletionRequest
from frontend.state import AppState

log = logging.getLogger("frontend.anthropic")

EFFORTS = ("low", "medium", "high", "xhigh", "max")
MERGE_WARNING = (
    "The chat template requires system-first ordering, so inline system messages in "
    "/v1/messages requests (e.g. Claude Code's per-turn reminders) are merged into the "
    "leading system prompt. Each new one changes the prompt prefix, so the rest of the "
    "conversation misses the prefix cache. Pass a --chat-template that accepts "
    "non-leading system messages to avoid this."
)


def template_needs_system_first(template: str | None) -> bool:
    """vLLM's ``_detect_merge_inline_system``: render [system, user, system,
    user] in a bare sandbox (no ``raise_exception``, so a template's guard
    fails too); a template error, or no template, means merge."""
    if not template:
        return True
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    messages = [{"role": role, "content": "t"} for role in ("system", "user", "system", "user")]
    try:
        env.from_string(template).render(messages=messages, add_generation_prompt=False)
    except jinja2.TemplateError:
        return True
    return False


class Probes:
    """The model facts the Messages routes need, each found once."""

    def __init__(self, state: AppState) -> None:
        self.state = state
        self._merge: bool | None = None
        self._harmony: bool | None = None
        self._disabled_effort: str | None = None

    @property
    def merge_inline_system(self) -> bool:
        if self._merge is None:
            model = self.state.model
            # A tokenizer that renders itself (mistral) has no template to probe.
            template = model.chat_template if model.render_chat is None else None
            self._merge = template_needs_system_first(template)
            if self._merge:
                log.warning(MERGE_WARNING)
        return self._merge

    @property
    def harmony(self) -> bool:
        """gpt-oss: hf config ``model_type == "gpt_oss"`` (vLLM's test)."""
        if self._harmony is None:
            self._harmony = model_type(self.state.model.directory) == "gpt_oss"
        return self._harmony

    def refuse_harmony(self) -> None:
        if self.harmony:
            raise harmony_refused()

    async def disabled_thinking_effort(self) -> str:
        """vLLM's "auto" ``--anthropic-disabled-thinking-effort``: "none",
        unless the template fails with it or renders it as one of the real
        efforts (it ignores "none"), then "low"."""
        given = self.state.config.anthropic_disabled_thinking_effort
        if given != "auto":  # --anthropic-disabled-thinking-effort
            return given
        if self._disabled_effort is None:
            none = await self._render_probe("none")
            effort = "none"
            if none is None:
                effort = "low"
            else:
                for other in EFFORTS:
                    if await self._render_probe(other) == none:
                        effort = "low"
                        break
            self._disabled_effort = effort
            log.info("Anthropic thinking.type=disabled maps to reasoning_effort=%r", effort)
        return self._disabled_effort

    async def _render_probe(self, effort: str) -> tuple[list[int], str] | None:
        req = ChatCompletionRequest(
            messages=[{"role": "user", "content": "Hi"}], reasoning_effort=effort
        )
        try:
            prepared = await chat.prepare(self.state, req, engine_checks=False)
        except Exception:  # (vLLM: any failure to render)
            log.debug("Rendering reasoning_effort=%r failed", effort, exc_info=True)
            return None
        return prepared.prompt_ids, prepared.rendered.text


def model_type(directory: str) -> Any:
    if not directory:
        return None
    try:
        config = json.loads((pathlib.Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config.get("model_type") if isinstance(config, dict) else None
