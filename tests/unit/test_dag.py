"""dag: validation messages, cycle paths, stable topological order, children."""

from __future__ import annotations

import pytest

from jobcenter.errors import SpecError
from jobcenter.model.dag import check_dag, children_of

# Seed 000: roots 1, 2, 3; 2 releases 4, 5, 6; 4 releases 7; 6 releases 8 and 9.
SEED_IDS = [f"t{i}" for i in range(1, 10)]
SEED_DEPS = {
    "t4": ["t1", "t2"],
    "t5": ["t2"],
    "t6": ["t2"],
    "t7": ["t1", "t4"],
    "t8": ["t5", "t6"],
    "t9": ["t4", "t6"],
}


def test_seed000_order_is_the_input_order() -> None:
    assert check_dag(SEED_IDS, SEED_DEPS) == SEED_IDS


def test_order_puts_parents_first_and_breaks_ties_by_input_order() -> None:
    ids = ["load", "report", "extract", "clean"]
    deps = {"load": ["extract"], "report": ["load", "clean"]}
    assert check_dag(ids, deps) == ["extract", "load", "clean", "report"]


def test_tasks_without_deps_keep_their_order() -> None:
    assert check_dag(["c", "a", "b"], {}) == ["c", "a", "b"]


def test_a_reversed_100k_chain_is_ordered_without_recursion() -> None:
    n = 100_000
    ids = [f"t{i}" for i in range(n)]
    deps = {f"t{i}": [f"t{i + 1}"] for i in range(n - 1)}  # t0 needs t1 needs t2 ...
    assert check_dag(ids, deps) == ids[::-1]


def test_repeated_deps_count_once() -> None:
    assert check_dag(["b", "a"], {"b": ["a", "a"]}) == ["a", "b"]


def test_a_string_dep_is_one_dep_not_characters() -> None:
    assert check_dag(["ab", "c"], {"c": "ab"}) == ["ab", "c"]


def test_unknown_dependency_is_named() -> None:
    with pytest.raises(SpecError, match=r"^task 'load' depends on unknown task 'extrct'$"):
        check_dag(["extract", "load"], {"load": ["extrct"]})


def test_self_dependency_is_named() -> None:
    with pytest.raises(SpecError, match=r"^task 'x' depends on itself$"):
        check_dag(["x"], {"x": ["x"]})


def test_duplicate_task_id_is_named() -> None:
    with pytest.raises(SpecError, match=r"^duplicate task id 'a'$"):
        check_dag(["a", "b", "a"], {})


def test_deps_for_a_task_not_in_the_list_are_refused() -> None:
    with pytest.raises(SpecError, match=r"unknown task 'ghost'"):
        check_dag(["a"], {"ghost": ["a"]})


def test_two_cycle_path() -> None:
    with pytest.raises(SpecError, match=r"^cycle: a -> b -> a$"):
        check_dag(["a", "b"], {"a": ["b"], "b": ["a"]})


def test_three_cycle_path_reads_upstream_to_downstream() -> None:
    # b needs a, c needs b, a needs c: a runs before b, b before c, c before a.
    with pytest.raises(SpecError, match=r"^cycle: a -> b -> c -> a$"):
        check_dag(["a", "b", "c"], {"b": ["a"], "c": ["b"], "a": ["c"]})


def test_cycle_path_leaves_out_tasks_that_only_hang_off_it() -> None:
    ids = ["root", "a", "b", "c", "leaf"]
    deps = {"a": ["root", "c"], "b": ["a"], "c": ["b"], "leaf": ["c"]}
    with pytest.raises(SpecError, match=r"^cycle: a -> b -> c -> a$"):
        check_dag(ids, deps)


def test_cycle_reachable_only_after_a_long_prefix() -> None:
    # t0 needs t1 needs t2 ... needs t99999, which forms a 2-cycle with t99998.
    n = 100_000
    ids = [f"t{i}" for i in range(n)]
    deps = {f"t{i}": [f"t{i + 1}"] for i in range(n - 1)}
    deps[f"t{n - 1}"] = [f"t{n - 2}"]
    with pytest.raises(SpecError, match=r"^cycle: t99998 -> t99999 -> t99998$"):
        check_dag(ids, deps)


def test_children_in_input_order() -> None:
    children = children_of(SEED_IDS, SEED_DEPS)
    assert children["t1"] == ["t4", "t7"]
    assert children["t2"] == ["t4", "t5", "t6"]
    assert children["t6"] == ["t8", "t9"]
    assert children["t3"] == []
    assert children["t9"] == []


def test_children_of_refuses_unknown_deps() -> None:
    with pytest.raises(SpecError, match="unknown task 'nope'"):
        children_of(["a"], {"a": ["nope"]})
