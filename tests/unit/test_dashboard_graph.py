"""What the job page draws: every task up to a size, then groups that stay a DAG."""

from __future__ import annotations

from jobcenter.web.graph import levels, picture, shape


def layered(depth: int, width: int) -> tuple[list[str], list[tuple[int, int]]]:
    """`depth` levels of `width` tasks named t<n>; each task depends on two of the level above."""
    ids = [f"t{n}" for n in range(depth * width)]
    edges = []
    for level in range(1, depth):
        for k in range(width):
            child = level * width + k
            edges += [
                ((level - 1) * width + k, child),
                ((level - 1) * width + (k + 1) % width, child),
            ]
    return ids, edges


def test_shape_replaces_numbers_so_a_family_of_tasks_shares_one():
    assert shape("shard-0042") == shape("shard-1999") == "shard-#"
    assert shape("l05-t042") == "l#-t#"
    assert shape("extract") == "extract"


def test_levels_are_the_longest_path_from_a_root():
    # 0 -> 1 -> 2 and 0 -> 2: task 2 is on level 2, not 1
    assert levels(4, [(0, 1), (1, 2), (0, 2)]) == [0, 1, 2, 0]


def test_a_small_dag_is_drawn_task_by_task_with_its_edges():
    drawn = picture(["a", "b", "c"], [(0, 1), (0, 2)])

    assert drawn.grouping == "tasks"
    assert [n.label for n in drawn.nodes] == ["a", "b", "c"]
    assert sorted(drawn.edges) == [(0, 1, 1), (0, 2, 1)]
    assert drawn.node_of == [0, 1, 2]


def test_a_large_fan_out_becomes_three_groups_named_after_its_tasks():
    work = [f"work-{i:04d}" for i in range(1_998)]
    ids = ["split", *work, "merge"]
    edges = [(0, i) for i in range(1, 1_999)] + [(i, 1_999) for i in range(1, 1_999)]

    drawn = picture(ids, edges)

    assert drawn.grouping == "level and id shape"
    assert [(n.label, len(n.members)) for n in drawn.nodes] == [
        ("split", 1), ("work-#", 1_998), ("merge", 1)
    ]  # fmt: skip
    assert sorted(drawn.edges) == [(0, 1, 1_998), (1, 2, 1_998)]
    assert drawn.node_of[0] == 0 and drawn.node_of[1_000] == 1 and drawn.node_of[-1] == 2


def test_ids_without_a_common_shape_are_grouped_by_level():
    _, edges = layered(depth=20, width=100)
    ids = [f"{chr(97 + n % 26)}{chr(97 + n // 26 % 26)}{chr(97 + n // 676)}" for n in range(2_000)]

    drawn = picture(ids, edges)

    assert drawn.grouping == "level"
    assert [len(n.members) for n in drawn.nodes] == [100] * 20
    assert sorted(drawn.edges) == [(k, k + 1, 200) for k in range(19)]


def test_a_deep_chain_is_grouped_in_bands_of_levels_and_stays_a_dag():
    ids = [f"{n:x}z{n * 7 % 13}" for n in range(2_000)]  # no shared shape per level either
    edges = [(n, n + 1) for n in range(1_999)]

    drawn = picture(ids, edges, groups_max=150)

    assert drawn.grouping == "level bands"
    assert len(drawn.nodes) <= 150
    assert sum(len(n.members) for n in drawn.nodes) == 2_000
    assert all(drawn.nodes[a].level < drawn.nodes[b].level for a, b, _ in drawn.edges)


def test_a_group_of_one_task_shows_the_task_id():
    ids, edges = layered(depth=3, width=100)
    ids.append("lonely")

    drawn = picture(ids, edges)

    assert drawn.nodes[-1].label == "lonely" and drawn.nodes[-1].members == [300]


def test_a_job_whose_edges_were_freed_is_grouped_by_shape_alone():
    drawn = picture([f"part-{i}" for i in range(500)], [])

    assert [(n.label, n.level) for n in drawn.nodes] == [("part-#", 0)]
