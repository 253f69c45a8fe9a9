"""The task-order rules (jobcenter.model.ordering) on small DAGs whose answer is known."""

from __future__ import annotations

import pytest

from jobcenter.errors import SpecError
from jobcenter.model.ordering import (
    DEFAULT_ESTIMATE,
    bottom_levels,
    dense_ranks,
    descendant_counts,
    estimates,
    learned_fields,
    task_ranks,
)
from jobcenter.model.spec import parse_spec
from jobcenter.storage.keyspace.layout import Layout


def ranks_of(spec: dict, learned: dict | None = None) -> list[int] | None:
    parsed = parse_spec(spec)
    return task_ranks(parsed, Layout(spec).children, learned or {})


def chains(order: str, estimate: dict[str, float] | None = None) -> dict:
    """A short chain a1 listed first, then a longer chain b1 -> b2 -> b3."""
    est = estimate or {}
    tasks = [
        {"id": "a1", "task": "t.a"},
        {"id": "b1", "task": "t.b"},
        {"id": "b2", "task": "t.b", "depends_on": ["b1"]},
        {"id": "b3", "task": "t.b", "depends_on": ["b2"]},
    ]
    for t in tasks:
        if t["id"] in est:
            t["estimate"] = est[t["id"]]
    return {"name": "j", "order": order, "tasks": tasks}


def test_critical_path_puts_the_head_of_the_longest_chain_first() -> None:
    assert ranks_of(chains("critical_path")) == [2, 0, 1, 3]  # a1, b3 tie: spec order


def test_critical_path_weighs_estimates_not_task_counts() -> None:
    # a1 alone takes longer than the whole b chain
    assert ranks_of(chains("critical_path", {"a1": 10, "b1": 1, "b2": 1, "b3": 1})) == [0, 1, 2, 3]


def test_fifo_has_no_ranks_and_downstream_counts_descendants() -> None:
    assert ranks_of(chains("fifo")) is None
    assert ranks_of(chains("downstream")) == [2, 0, 1, 3]  # a1 and b3 tie: spec order


def test_the_default_rule_is_critical_path() -> None:
    spec = chains("critical_path")
    del spec["order"]
    assert parse_spec(spec).order == "critical_path"
    assert ranks_of(spec) == [2, 0, 1, 3]  # a1, b3 tie: spec order


def test_descendants_are_counted_once_through_a_diamond() -> None:
    # 0 -> 1, 0 -> 2, 1 -> 3, 2 -> 3: 0 has three descendants, not four paths
    children = [[1, 2], [3], [3], []]
    assert descendant_counts(children) == [3, 1, 1, 0]
    assert bottom_levels(children, [1.0, 5.0, 1.0, 2.0]) == [8.0, 7.0, 3.0, 2.0]


def test_equal_weights_keep_spec_order() -> None:
    assert dense_ranks([1.0, 2.0, 1.0, 2.0]) == [2, 0, 3, 1]


def test_estimates_prefer_the_spec_then_task_id_then_task_name_then_the_mean() -> None:
    spec = parse_spec(
        {
            "name": "nightly",
            "tasks": [
                {"id": "given", "task": "t.x", "estimate": 4},
                {"id": "by-id", "task": "t.x"},
                {"id": "by-name", "task": "t.named"},
                {"id": "unknown", "task": "t.other"},
            ],
        }
    )
    learned = {"j\tnightly\tby-id": 2000.0, "t\tt.x": 9000.0, "t\tt.named": 3000.0}
    assert estimates(spec, learned) == [4.0, 2.0, 3.0, 3.0]  # unknown: the mean of 4, 2, 3
    assert learned_fields(spec)[:2] == ["j\tnightly\tby-id", "t\tt.x"]
    bare = parse_spec({"name": "n", "tasks": [{"id": "a", "task": "t.a"}]})
    assert estimates(bare, {}) == [DEFAULT_ESTIMATE]


def test_learned_fields_are_read_only_for_critical_path() -> None:
    assert learned_fields(parse_spec(chains("downstream"))) == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"order": "longest"}, "'order' must be one of fifo, downstream, critical_path"),
        ({"order": ["fifo"]}, "'order' must be one of"),
        ({"tasks": [{"id": "a", "task": "t.a", "estimate": -1}]}, "task 'a': 'estimate' must be"),
        (
            {"tasks": [{"id": "a", "task": "t.a", "estimate": "5 s"}]},
            "'estimate' must be a duration",
        ),
        ({"tasks": [{"id": "a", "task": "t.a", "estimat": 5}]}, "did you mean 'estimate'"),
    ],
)
def test_bad_order_or_estimate_is_refused_naming_it(change: dict, message: str) -> None:
    spec = {"name": "j", "tasks": [{"id": "a", "task": "t.a"}], **change}
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        parse_spec(spec)


def test_order_and_estimate_round_trip_and_old_specs_keep_their_digest() -> None:
    spec = parse_spec(chains("fifo", {"a1": 2.5}))
    assert parse_spec(spec.to_dict()) == spec
    assert spec.to_dict()["order"] == "fifo"
    plain = parse_spec({"name": "j", "tasks": [{"id": "a", "task": "t.a"}]})
    assert plain.to_dict() == {"name": "j", "tasks": [{"id": "a", "task": "t.a"}]}


def test_a_lone_task_needs_no_learned_estimate() -> None:
    """Its rank is 0 whatever it is estimated at: its submit reads nothing first."""
    lone = parse_spec({"name": "n", "tasks": [{"id": "a", "task": "t.a"}]})
    assert learned_fields(lone) == []
    assert ranks_of({"name": "n", "tasks": [{"id": "a", "task": "t.a"}]}) == [0]
