"""trigger_rule in specs and the builder: each of the six names parses and round-trips, the
default is left out of to_dict (old digests stay), an unknown name is refused naming the
rule and the task, and the layout stores a rule only where it can act."""

from __future__ import annotations

from typing import Any

import pytest

from jobcenter import Job
from jobcenter.errors import SpecError
from jobcenter.model.spec import parse_spec, spec_digest
from jobcenter.model.trigger_rules import TriggerRule
from jobcenter.storage.keyspace.layout import Layout
from jobcenter.storage.keyspace.schema import TaskField


def _spec(rule: Any) -> dict[str, Any]:
    return {
        "name": "j",
        "tasks": [
            {"id": "a", "task": "app.a"},
            {"id": "b", "task": "app.b", "depends_on": ["a"], "trigger_rule": rule},
        ],
    }


@pytest.mark.parametrize("rule", [r.value for r in TriggerRule])
def test_each_rule_parses_and_round_trips(rule: str) -> None:
    spec = parse_spec(_spec(rule))
    assert spec.tasks[1].trigger_rule == rule
    assert parse_spec(spec.to_dict()) == spec


def test_the_default_is_left_out_so_digests_of_older_specs_stay() -> None:
    plain = {"name": "j", "tasks": [{"id": "a", "task": "app.a"}]}
    explicit = {"name": "j", "tasks": [{"id": "a", "task": "app.a", "trigger_rule": "all_success"}]}
    assert "trigger_rule" not in parse_spec(explicit).to_dict()["tasks"][0]
    assert spec_digest(parse_spec(explicit)) == spec_digest(parse_spec(plain))


@pytest.mark.parametrize("bad", ["al_done", "ALL_DONE", "", 3, ["all_done"]])
def test_an_unknown_rule_is_refused_naming_the_rule_and_the_task(bad: Any) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(_spec(bad))
    message = str(caught.value)
    assert message.startswith("task 'b': unknown trigger_rule ")
    assert repr(bad) in message
    assert "all_success, all_done, all_failed, one_success, one_failed, none_failed" in message


def test_the_builder_takes_a_rule() -> None:
    job = Job("j")
    a = job.task("a", "app.a")
    job.task("b", "app.b", depends_on=[a], trigger_rule="one_failed")
    assert job.build() == parse_spec(_spec("one_failed"))


def test_a_rule_is_stored_only_on_a_task_with_parents() -> None:
    spec = {
        "name": "j",
        "tasks": [
            {"id": "a", "task": "app.a", "trigger_rule": "all_done"},  # a root: no effect
            {"id": "b", "task": "app.b", "depends_on": ["a"], "trigger_rule": "all_done"},
            {"id": "c", "task": "app.c", "depends_on": ["a", "b"]},
        ],
    }
    layout = Layout(parse_spec(spec).to_dict())
    fields = dict(zip(*[iter(layout.pairs(0, 3))] * 2, strict=True))
    assert TaskField.TRIGGER_RULE.of(0) not in fields
    assert fields[TaskField.TRIGGER_RULE.of(1)] == "all_done"
    assert fields[TaskField.PARENTS.of(1)] == 1
    assert TaskField.TRIGGER_RULE.of(2) not in fields
    assert layout.has_trigger_rules()
    spec["tasks"][1]["trigger_rule"] = "all_success"
    assert not Layout(parse_spec(spec).to_dict()).has_trigger_rules()


def test_a_mapped_task_takes_only_the_default_rule() -> None:
    """Its parents become its instances at run time, which a rule's counts do not follow."""
    spec = {
        "name": "j",
        "tasks": [
            {"id": "src", "task": "app.src"},
            {"id": "m", "task": "app.m", "map": {"x": "src"}, "trigger_rule": "all_done"},
        ],
    }
    with pytest.raises(SpecError, match="task 'm': a mapped task runs by all_success"):
        parse_spec(spec)
