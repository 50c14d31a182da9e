"""Logging to stderr: one line per event, journald-aware, optionally JSON.

* ``text`` (default): ``2025-01-01 12:00:00,000 INFO frontend: message``.
  Under journald (``$JOURNAL_STREAM`` names our stderr, as systemd sets it
  for ``StandardError=journal``) the timestamp is dropped, since the journal
  stamps every line itself, and a ``<N>`` syslog priority prefix is added so
  ``journalctl -p warning`` works (journald strips it, ``SyslogLevelPrefix=``).
  ``$INVOCATION_ID`` alone is not enough: it is set for every systemd service,
  also one whose stderr goes to a file, where timestamps are wanted.
* ``json``: one JSON object per line: ``ts`` (RFC 3339 UTC; left out under
  journald), ``level``, ``logger``, ``msg``, ``exc`` for tracebacks, and the
  structured fields a record carries (``extra={"fields": {...}}``: the access log's).

Tracebacks never split an event over several lines: in text mode their line
breaks are written as ``\\n``. Configured API keys are replaced by ``***`` in
every line, whatever logged them.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import sys
import time
from collections.abc import Iterable, Mapping
from typing import IO

import msgspec

_json = msgspec.json.Encoder()

# logging level -> syslog priority (sd-daemon(3) prefixes).
_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


def under_journald(stream: IO | None = None, environ: Mapping[str, str] | None = None) -> bool:
    """True when ``stream`` (stderr) is the journal stream systemd handed us."""
    env = os.environ if environ is None else environ
    value = env.get("JOURNAL_STREAM")
    if not value:
        return False
    stream = sys.stderr if stream is None else stream
    try:
        dev, ino = (int(x) for x in value.split(":", 1))
        st = os.fstat(stream.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def _priority(levelno: int) -> int:
    for level, prio in _PRIORITY.items():  # descending levels
        if levelno >= level:
            return prio
    return 7


class _Redactor:
    def __init__(self, secrets: Iterable[str]) -> None:
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for s in self.secrets:
            if s in text:
                text = text.replace(s, "***")
        return text


class TextFormatter(logging.Formatter):
    def __init__(self, journald: bool, redact: _Redactor) -> None:
        fmt = "%(levelname)s %(name)s: %(message)s"
        super().__init__(fmt if journald else "%(asctime)s " + fmt)
        self.journald = journald
        self.redact = redact

    def format(self, record: logging.LogRecord) -> str:
        line = self.redact(super().format(record)).replace("\r", "").replace("\n", "\\n")
        if self.journald:
            line = f"<{_priority(record.levelno)}>{line}"
        return line


class JsonFormatter(logging.Formatter):
    def __init__(self, journald: bool, redact: _Redactor) -> None:
        super().__init__()
        self.journald = journald
        self.redact = redact

    def format(self, record: logging.LogRecord) -> str:
        event: dict = {}
        if not self.journald:
            event["ts"] = datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            )
        event["level"] = record.levelname
        event["logger"] = record.name
        event["msg"] = self.redact(record.getMessage())
        fields = getattr(record, "fields", None)  # structured facts (the access log's)
        if isinstance(fields, dict):
            event.update(fields)
        if record.exc_info:
            event["exc"] = self.redact(self.formatException(record.exc_info))
        elif record.stack_info:
            event["exc"] = self.redact(self.formatStack(record.stack_info))
        return _json.encode(event).decode()


def setup(
    level: str = "info",
    fmt: str = "text",
    *,
    stream: IO | None = None,
    secrets: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> logging.Handler:
    """Replace the root logger's handlers with one stderr handler."""
    stream = sys.stderr if stream is None else stream
    journald = under_journald(stream, environ)
    redact = _Redactor(secrets)
    handler = logging.StreamHandler(stream)
    if fmt == "json":
        handler.setFormatter(JsonFormatter(journald, redact))
    elif fmt == "text":
        handler.setFormatter(TextFormatter(journald, redact))
    else:
        raise ValueError(f"unknown log format {fmt!r} (text or json)")
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    logging.captureWarnings(True)
    return handler


class FastLines:
    """INFO lines of one logger written without logging's per-record work (a
    LogRecord, its formatting, a write and a flush: ~9 us each), for a log of
    one line per request: formatted as the handler's formatter formats them
    and written together once per event-loop iteration."""

    def __init__(self, name: str, handler: logging.StreamHandler) -> None:
        self.name = name
        self.stream = handler.stream
        formatter = handler.formatter
        assert isinstance(formatter, (TextFormatter, JsonFormatter))
        self.json = isinstance(formatter, JsonFormatter)
        self.journald = formatter.journald
        self.redact = formatter.redact
        self.prefix = f"INFO {name}: "
        self._pending: list[str] = []
        self._second = -1
        self._stamp = ""

    def __call__(self, message: str, fields: dict | None) -> None:
        """``fields``: the record's, which only the JSON format writes."""
        now = time.time()
        message = self.redact(message)
        if self.json:
            event: dict = {}
            if not self.journald:
                event["ts"] = datetime.datetime.fromtimestamp(now, datetime.UTC).isoformat(
                    timespec="milliseconds"
                )
            event.update(level="INFO", logger=self.name, msg=message, **(fields or {}))
            line = _json.encode(event).decode()
        elif self.journald:
            line = f"<6>{self.prefix}{message}"
        else:
            second = int(now)
            if second != self._second:  # logging's asctime, local time
                self._second = second
                self._stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
            line = f"{self._stamp},{int(now % 1 * 1000):03d} {self.prefix}{message}"
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append(line)

    def _flush(self) -> None:
        lines, self._pending = self._pending, []
        try:
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # stderr gone: as logging, carry on
            pass


def fast_lines(name: str) -> FastLines | None:
    """A :class:`FastLines` for ``name`` when INFO of it goes only to the handler
    :func:`setup` installed; None otherwise (use the logger)."""
    logger = logging.getLogger(name)
    root = logging.getLogger()
    if not logger.isEnabledFor(logging.INFO) or logger.handlers or len(root.handlers) != 1:
        return None
    handler = root.handlers[0]
    if not isinstance(handler, logging.StreamHandler) or not isinstance(
        handler.formatter, (TextFormatter, JsonFormatter)
    ):
        return None
    return FastLines(name, handler)
