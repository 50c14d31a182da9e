"""What an engine counts for the control channel's ``stats`` command."""

from __future__ import annotations

from collections.abc import Iterable

from protocol.wire import FINISH_REASON_NAMES

FINISHED_IDS_REMEMBERED = 1 << 18  # for the aborts_after_finish counter


class Counters:
    """What the engine counts for the ``stats`` command."""

    def __init__(self) -> None:
        self.adds = 0
        self.adds_by_client: dict[int, int] = {}  # client_index -> ADDs
        self.steps = 0
        self.utility_calls = 0
        self.aborted = 0
        self.aborts_unknown = 0
        self.aborts_after_finish = 0
        self.finished = dict.fromkeys(FINISH_REASON_NAMES, 0)
        # Insertion-ordered and bounded: older ids count as unknown.
        self.finished_ids: dict[str, None] = {}

    def remember_finished(self, request_ids: Iterable[str]) -> None:
        ids = self.finished_ids
        for request_id in request_ids:
            ids[request_id] = None
        while len(ids) > FINISHED_IDS_REMEMBERED:
            del ids[next(iter(ids))]
