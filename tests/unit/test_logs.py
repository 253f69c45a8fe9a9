"""--log-format json: one object a line with the job center's fields."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from jobcenter.runtime import logs
from jobcenter.runtime.context import TaskContext, set_current

KEYS = {"time", "level", "logger", "worker", "job", "task", "attempt", "event"}


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger whose lines go to a buffer through the JSON formatter."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JsonFormatter(worker="handler-1"))
    logger = logging.getLogger("test_logs")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    yield logger, out
    logger.removeHandler(handler)


def lines(out: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_every_line_is_one_object_with_the_same_keys(captured) -> None:
    logger, out = captured

    logger.warning("worker %s stopping", "handler-1")

    [entry] = lines(out)
    assert set(entry) == KEYS
    assert entry["level"] == "warning" and entry["logger"] == "test_logs"
    assert entry["event"] == "worker handler-1 stopping"
    assert entry["worker"] == "handler-1"
    assert (entry["job"], entry["task"], entry["attempt"]) == (None, None, None)
    assert entry["time"].endswith("+00:00")


def test_a_line_logged_inside_a_task_names_its_job_task_and_attempt(captured) -> None:
    logger, out = captured
    set_current(TaskContext("J1", "extract", 2, "handler-1"))
    try:
        logger.info("fetching")
    finally:
        set_current(None)
    logger.info("after")

    inside, after = lines(out)
    assert (inside["job"], inside["task"], inside["attempt"]) == ("J1", "extract", 2)
    assert after["job"] is None


def test_fields_passed_as_extra_win_and_exceptions_are_kept(captured) -> None:
    logger, out = captured
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("step failed", extra={"job": "J2", "task": "load", "attempt": 1})

    [entry] = lines(out)
    assert (entry["job"], entry["task"], entry["attempt"]) == ("J2", "load", 1)
    assert "ValueError: boom" in entry["exception"]


def test_an_unknown_format_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="log format must be one of text, json, got 'xml'"):
        logs.configure("xml")
