"""A spec's `notify:` section: checked whole at parse time, with messages naming the bad
value; kept through to_dict, the builder and the spec digest."""

from __future__ import annotations

from typing import Any

import pytest

from jobcenter import Job, SpecError
from jobcenter.model.notify import Channel, Notify, parse_notify
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
