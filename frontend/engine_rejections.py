"""What the engine side sent that was dropped before it changed anything.

The engine link has no authentication (vLLM's engine speaks plain ZMQ): any
process that reaches the frontend's engine ports can send frames there. Every
message is checked before it touches a rank, a request or a counter; one that
fails is counted here by reason (``vllm_frontend_engine_messages_rejected_total``)
and logged, at most one line per reason every ``LOG_EVERY_S`` seconds, so that
a flood cannot fill a disk.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger("frontend.engine")

LOG_EVERY_S = 10.0

# Every reason, in /metrics order (each has a series from the start).
REASONS = (
    "malformed",  # frames that do not decode (any of the three sockets)
    "unknown_rank",  # an identity or engine_index outside the configured ranks
    "bad_handshake",  # a handshake message that is neither HELLO nor READY
    "unexpected_registration",  # input-socket traffic without a handshake just completed
    "bad_registration",  # an empty, malformed or unsupported ready response
    "rank_not_attached",  # outputs or stats from a rank that is not attached
    "unknown_request",  # an output for a request this process does not track
    "wrong_rank",  # an output for a request another rank owns
    "unexpected_utility",  # a utility reply no call of this rank waits for
    "wrong_peer",  # a re-attach probe answered from another address
    "false_engine_dead",  # ENGINE_CORE_DEAD while every rank still answers
    "live_rank_hello",  # HELLO for a rank whose engine still answers
)


class Rejections:
    """Counts by reason, and the rate-limited log."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._logged_at: dict[str, float] = {}
        self._unlogged: dict[str, int] = {}

    def __call__(self, reason: str, detail: str = "", count: int = 1) -> None:
        assert reason in REASONS, reason
        self.counts[reason] = self.counts.get(reason, 0) + count
        now = time.monotonic()
        if now - self._logged_at.get(reason, -LOG_EVERY_S) < LOG_EVERY_S:
            self._unlogged[reason] = self._unlogged.get(reason, 0) + 1
            return
        self._logged_at[reason] = now
        more = self._unlogged.pop(reason, 0)
        log.warning(
            "dropped a message from the engine side (%s)%s%s",
            reason,
            f": {detail}" if detail else "",
            f" (and {more} more since the last such line)" if more else "",
        )
