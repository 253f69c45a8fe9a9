"""A spec's `notify:` section: checked whole at parse time, with messages naming the bad
value; kept through to_dict, the builder and the spec digest."""

from __future__ import annotations

from typing import Any

import pytest

from jobcenter import Job, SpecError
from jobcenter.model.notify import Channel, NoticeKind, Notify, parse_delivery, parse_notify
from jobcenter.model.spec import parse_spec, spec_digest

TASKS = [{"id": "a", "task": "t.a"}]


def test_a_notify_section_is_parsed_with_its_channels() -> None:
    notify = parse_notify(
        {"on": ["failed", "succeeded"], "webhook": "https://h.test/x", "hook": True}
    )
    assert notify == Notify(("failed", "succeeded"), "https://h.test/x", True)
    assert notify.channels == (Channel.WEBHOOK, Channel.HOOK)
    assert parse_notify({"on": "cancelled", "hook": True}).on == ("cancelled",)


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"on": ["done"], "hook": True}, "'on' has 'done', not a final job state"),
        ({"on": ["running"], "hook": True}, "'on' has 'running'"),
        ({"on": None, "hook": True}, "'on' must list"),
        ({"hook": True}, "'on' must list"),
        ({"on": ["failed"], "webhook": "mailto:a@b.test"}, "'webhook' must be an http"),
        ({"on": ["failed"], "webhook": "http://h.test:99999/"}, "'webhook' must be an http"),
        ({"on": ["failed"], "webhook": "http://h.test/a b"}, "'webhook' must be an http"),
        ({"on": ["failed"], "webhook": "http://h.test/" + "x" * 2000}, "at most 2000"),
        ({"on": ["failed"], "webhook": 42}, "'webhook' must be an http"),
        ({"on": ["failed"], "hook": 1}, "'hook' must be true or false"),
        ({"on": ["failed"], "hook": False}, "says whom to tell"),
        ({"on": ["failed"], "hoook": True}, "unknown key 'hoook'"),
        ("failed", "must be a mapping"),
    ],
)
def test_a_bad_notify_value_is_refused_naming_it(raw: Any, named: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({"name": "j", "notify": raw, "tasks": TASKS})
    assert str(caught.value).startswith("job: 'notify': ")
    assert named in str(caught.value)


def test_notify_round_trips_through_to_dict_and_counts_in_the_digest() -> None:
    raw = {"name": "j", "notify": {"on": ["failed"], "webhook": "http://h.test/"}, "tasks": TASKS}
    spec = parse_spec(raw)
    assert spec.to_dict()["notify"] == {"on": ["failed"], "webhook": "http://h.test/"}
    assert parse_spec(spec.to_dict()) == spec
    other = parse_spec({**raw, "notify": {"on": ["succeeded"], "webhook": "http://h.test/"}})
    assert spec_digest(other) != spec_digest(spec)
    assert "notify" not in parse_spec({"name": "j", "tasks": TASKS}).to_dict()


def test_the_builder_takes_a_notify_section() -> None:
    job = Job("built", notify={"on": ["failed"], "hook": True})
    job.task("a", "t.a")
    assert job.build().notify == Notify(("failed",), None, True)


def test_notify_on_takes_the_events_too_and_names_them_when_wrong() -> None:
    notify = parse_notify({"on": ["late", "task_failed", "failed"], "hook": True})
    assert notify.on == ("late", "task_failed", "failed")
    with pytest.raises(SpecError) as bad:
        parse_notify({"on": ["slow"], "hook": True})
    assert "'on' has 'slow', not a final job state nor an event" in str(bad.value)
    assert "late, task_failed" in str(bad.value)


def test_a_delivery_name_says_its_channel_kind_and_task() -> None:
    assert parse_delivery("webhook") == (Channel.WEBHOOK, NoticeKind.FINISHED, None)
    assert parse_delivery("hook:late") == (Channel.HOOK, NoticeKind.LATE, None)
    assert parse_delivery("webhook:task_failed:7") == (Channel.WEBHOOK, NoticeKind.TASK_FAILED, 7)
