"""model.dag.topological_order: the one Kahn walk that spec validation, `retry` and the
dashboard's levels share."""

from jobcenter.model.dag import topological_order
from jobcenter.web.graph import levels


def test_parents_come_first_and_ties_go_to_the_lowest_index() -> None:
    children = {3: [1], 0: [2], 1: [2]}
    assert topological_order(range(4), children) == [0, 3, 1, 2]


def test_tasks_on_or_below_a_cycle_are_left_out() -> None:
    children = {0: [1], 1: [2], 2: [1, 3]}
    assert topological_order(range(5), children) == [0, 4]


def test_nodes_need_not_be_contiguous() -> None:
    assert topological_order([7, 2, 5], {7: [2], 5: [7]}) == [5, 7, 2]


def test_levels_are_the_longest_path_from_a_root() -> None:
    assert levels(4, [(0, 1), (1, 2), (0, 2), (3, 2)]) == [0, 1, 2, 0]
