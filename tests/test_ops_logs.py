"""stderr logging: one line per event, journald-aware, --log-format json, no keys."""

from __future__ import annotations

import json
import logging
import os
import re

import pytest

from frontend.ops import logs

TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")


@pytest.fixture
def log_file(tmp_path):
    path = tmp_path / "stderr.log"
    stream = open(path, "w+")
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    yield path, stream
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in saved[0]:
        root.addHandler(h)
    root.setLevel(saved[1])
    stream.close()


def _journal_stream_of(stream) -> str:
    st = os.fstat(stream.fileno())
    return f"{st.st_dev}:{st.st_ino}"


def _emit(secret: str = "") -> None:
    log = logging.getLogger("frontend.test")
    log.info("plain event")
    log.warning("with a key %s inside", secret or "-")
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        log.exception("it failed")


def test_text_format_one_line_per_event_with_timestamps(log_file):
    path, stream = log_file
    logs.setup("info", "text", stream=stream, environ={})
    _emit()
    stream.flush()
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    assert all(TIMESTAMP.match(line) for line in lines)
    assert lines[0].endswith("INFO frontend.test: plain event")
    assert "Traceback" in lines[2] and "\\n" in lines[2] and "ValueError: boom" in lines[2]


def test_under_journald_no_timestamp_and_priorities(log_file):
    path, stream = log_file
    env = {"JOURNAL_STREAM": _journal_stream_of(stream), "INVOCATION_ID": "abc"}
    assert logs.under_journald(stream, env)
    logs.setup("info", "text", stream=stream, environ=env)
    _emit()
    stream.flush()
    lines = path.read_text().splitlines()
    assert len(lines) == 3
    assert lines[0] == "<6>INFO frontend.test: plain event"
    assert lines[1].startswith("<4>WARNING ")
    assert lines[2].startswith("<3>ERROR frontend.test: it failed\\nTraceback")
    assert not any(TIMESTAMP.search(line) for line in lines)


def test_journal_stream_of_another_file_keeps_timestamps(log_file):
    """stderr redirected elsewhere (StandardError=file:...) while JOURNAL_STREAM is
    inherited: the journal does not stamp these lines, so we do."""
    path, stream = log_file
    env = {"JOURNAL_STREAM": "1:2", "INVOCATION_ID": "abc"}
    assert not logs.under_journald(stream, env)
    assert not logs.under_journald(stream, {"INVOCATION_ID": "abc"})
    assert not logs.under_journald(stream, {"JOURNAL_STREAM": "junk"})
    logs.setup("info", "text", stream=stream, environ=env)
    logging.getLogger("x").info("hello")
    stream.flush()
    assert TIMESTAMP.match(path.read_text())


def test_json_format(log_file):
    path, stream = log_file
    logs.setup("debug", "json", stream=stream, environ={})
    _emit()
    stream.flush()
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(events) == 3
    assert events[0]["level"] == "INFO" and events[0]["logger"] == "frontend.test"
    assert events[0]["msg"] == "plain event"
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00$", events[0]["ts"])
    assert events[2]["level"] == "ERROR" and "ValueError: boom" in events[2]["exc"]


def test_json_under_journald_has_no_ts(log_file):
    path, stream = log_file
    logs.setup("info", "json", stream=stream,
               environ={"JOURNAL_STREAM": _journal_stream_of(stream)})
    logging.getLogger("x").info("hello")
    stream.flush()
    assert json.loads(path.read_text()) == {"level": "INFO", "logger": "x", "msg": "hello"}


def test_api_keys_are_masked_whatever_logs_them(log_file):
    path, stream = log_file
    secret = "sk-very-secret-123"
    logs.setup("info", "text", stream=stream, secrets=[secret], environ={})
    _emit(secret)
    logging.getLogger("x").error("header was Bearer %s", secret)
    stream.flush()
    text = path.read_text()
    assert secret not in text and text.count("***") == 2


def test_unknown_format_is_refused(log_file):
    with pytest.raises(ValueError):
        logs.setup("info", "xml", stream=log_file[1], environ={})


def test_frontend_process_json_logs(start_ops_stack):
    stack = start_ops_stack("--log-format", "json")
    stack.frontend.stop()
    lines = [line for line in stack.frontend.log().splitlines() if line.strip()]
    events = [json.loads(line) for line in lines]  # every line is one JSON event
    messages = [e["msg"] for e in events]
    assert any(m.startswith("serving on http://") for m in messages)
    assert messages[-1] == "stopped"
    assert all(set(e) >= {"ts", "level", "logger", "msg"} for e in events)


@pytest.mark.parametrize("fmt,journald", [("text", False), ("text", True), ("json", False),
                                          ("json", True)])
def test_fast_lines_read_as_the_loggers_own(log_file, fmt, journald):
    """The access log's lines (logs.FastLines) are what the logger would have
    written: same layout in each format, keys masked, written once per loop
    iteration."""
    import asyncio

    path, stream = log_file
    environ = {"JOURNAL_STREAM": _journal_stream_of(stream)} if journald else {}
    logs.setup("info", fmt, stream=stream, environ=environ, secrets=["sekret"])
    logging.getLogger("frontend.access").info("via logging sekret", extra={"fields": {"a": 1}})
    write = logs.fast_lines("frontend.access")
    assert write is not None

    async def go():
        write("fast sekret", {"a": 1})
        write("fast again", {"a": 2})
        await asyncio.sleep(0)

    asyncio.run(go())
    stream.flush()
    slow, fast, again = path.read_text().splitlines()
    strip = (lambda line: re.sub(r"^\S+ \S+ ", "", line)) if not journald else (lambda x: x)
    if fmt == "json":
        slow_event, fast_event = json.loads(slow), json.loads(fast)
        assert ("ts" in slow_event) == ("ts" in fast_event) == (not journald)
        slow_event.pop("ts", None), fast_event.pop("ts", None)
        assert fast_event == {**slow_event, "msg": "fast ***"}
        assert json.loads(again)["a"] == 2
    else:
        assert bool(TIMESTAMP.match(fast)) == bool(TIMESTAMP.match(slow)) == (not journald)
        assert strip(fast) == strip(slow).replace("via logging", "fast")
        assert fast.endswith("fast ***")


def test_fast_lines_step_aside_when_the_level_hides_them(log_file):
    _, stream = log_file
    logs.setup("warning", "text", stream=stream, environ={})
    assert logs.fast_lines("frontend.access") is None
