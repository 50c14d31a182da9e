"""vLLM's request logger (``--enable-log-requests``, ``--max-log-len``,
``--enable-log-outputs``): its lines, on the ``frontend.requests`` logger.

* INFO ``Received request <id>: params: SamplingParams(...), lora_request: ...``
  once per engine request id a route gives (``cmpl-<id>-<prompt>``,
  ``chatcmpl-<id>``, ``generate-tokens-<id>``); DEBUG adds the prompt and its
  token ids (cut to ``--max-log-len``);
* with ``--enable-log-outputs``: INFO ``Generated response <id>: output: ...,
  finish_reason: ...`` for chat (each choice; a stream also each delta, as
  ``--enable-log-deltas`` has it, and ``(streaming complete)`` at its end) and
  non-streaming generate -- as vLLM, never for completions.
"""

from __future__ import annotations

import logging
from typing import Any

from protocol.sampling import SamplingParams

log = logging.getLogger("frontend.requests")


class RequestLogger:
    def __init__(
        self, *, max_log_len: int | None, log_outputs: bool = False, log_deltas: bool = True
    ) -> None:
        self.max_log_len = max_log_len
        self.log_outputs = log_outputs
        self.log_deltas = log_outputs and log_deltas
        if not log.isEnabledFor(logging.INFO):
            log.warning(
                "`--enable-log-requests` is set but the minimum log level is higher than "
                "INFO. No request information will be logged."
            )
        elif not log.isEnabledFor(logging.DEBUG):
            log.info(
                "`--enable-log-requests` is set but the minimum log level is higher than "
                "DEBUG. Only limited information will be logged to minimize overhead. To "
                "view more details, set `--log-level DEBUG`."
            )

    def _cut(self, value: Any) -> Any:
        if value is None or self.max_log_len is None:
            return value
        return value[: self.max_log_len]

    def inputs(
        self,
        request_id: str,
        prompt: str | None,
        prompt_token_ids: list[int] | None,
        params: SamplingParams | None,
        n: int,
        lora: Any,
    ) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "Request %s details: prompt: %r, prompt_token_ids: %s, prompt_embeds shape: %s.",
                request_id,
                self._cut(prompt),
                self._cut(prompt_token_ids),
                None,
            )
        log.info(
            "Received request %s: params: %s, lora_request: %s.",
            request_id,
            None if params is None else params_repr(params, n),
            lora,
        )

    def outputs(
        self,
        request_id: str,
        output: str,
        finish_reason: str | None,
        *,
        delta: bool = False,
        streaming: bool = False,
    ) -> None:
        suffix = " (streaming delta)" if delta else " (streaming complete)" if streaming else ""
        log.info(
            "Generated response %s%s: output: %r, finish_reason: %s",
            request_id,
            suffix,
            self._cut(output),
            finish_reason,
        )


def params_repr(p: SamplingParams, n: int) -> str:
    """vLLM's ``SamplingParams.__repr__`` (``n`` the request's, before its fan-out)."""
    return (
        f"SamplingParams(n={n}, presence_penalty={p.presence_penalty}, "
        f"frequency_penalty={p.frequency_penalty}, "
        f"repetition_penalty={p.repetition_penalty}, temperature={p.temperature}, "
        f"watermarking={p.watermarking}, top_p={p.top_p}, top_k={p.top_k}, min_p={p.min_p}, "
        f"seed={p.seed}, stop={p.stop or []}, stop_token_ids={p.stop_token_ids or []}, "
        f"bad_words={p.bad_words or []}, thinking_token_budget={p.thinking_token_budget}, "
        f"include_stop_str_in_output={p.include_stop_str_in_output}, "
        f"ignore_eos={p.ignore_eos}, max_tokens={p.max_tokens}, min_tokens={p.min_tokens}, "
        f"logprobs={p.logprobs}, prompt_logprobs={p.prompt_logprobs}, "
        f"skip_special_tokens={p.skip_special_tokens}, "
        f"spaces_between_special_tokens={p.spaces_between_special_tokens}, "
        f"structured_outputs={p.structured_outputs}, extra_args={p.extra_args})"
    )
