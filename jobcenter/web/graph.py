"""What the job page draws: the DAG itself, or, for a large job, groups of its tasks.

Up to GROUP_ABOVE tasks every task is a box. Above, tasks are grouped by *level* (the
longest path from a root, so every edge runs from a lower level to a higher one and the
groups stay a DAG) and by the *shape* of their id (digits replaced by '#': `shard-0042` and
`shard-1999` are both `shard-#`). A fan-out of 2,000 shards becomes three boxes. When that
still leaves more than GROUPS_MAX boxes (ids with no common shape), tasks are grouped by
level alone, and a very deep DAG by bands of consecutive levels. Pure code: no I/O.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from jobcenter.model.dag import topological_order

GROUP_ABOVE = 200  # tasks drawn one box each up to here; more boxes stop being readable
GROUPS_MAX = 150  # boxes drawn at most once tasks are grouped: dagre lays them out in ms

_DIGITS = re.compile(r"[0-9]+")


def shape(task_id: str) -> str:
    """A task id with its numbers replaced by '#': what tasks of one family share."""
    return _DIGITS.sub("#", task_id)


def levels(n: int, edges: list[tuple[int, int]]) -> list[int]:
    """Each task's longest distance from a root (Kahn's order); 0 for every task when the
    edges are unknown."""
    children: dict[int, list[int]] = defaultdict(list)
    for parent, child in edges:
        children[parent].append(child)
    level = [0] * n
    for i in topological_order(range(n), children):
        for child in children.get(i, ()):
            level[child] = max(level[child], level[i] + 1)
    return level


@dataclass
class Node:
    key: str
    label: str
    level: int
    members: list[int] = field(default_factory=list)  # task indexes


@dataclass
class Picture:
    grouping: str  # "tasks" | "level and id shape" | "level" | "level bands"
    nodes: list[Node]
    edges: list[tuple[int, int, int]]  # (node, node, how many task edges it stands for)
    node_of: list[int]  # the node of each task, by task index

    def to_dict(self) -> dict[str, object]:
        return {
            "grouping": self.grouping,
            "nodes": [
                {"key": n.key, "label": n.label, "level": n.level, "members": n.members}
                for n in self.nodes
            ],
            "edges": [list(e) for e in self.edges],
            "node_of": self.node_of,
        }


def picture(
    ids: list[str],
    edges: list[tuple[int, int]],
    *,
    group_above: int = GROUP_ABOVE,
    groups_max: int = GROUPS_MAX,
) -> Picture:
    """The boxes and arrows to draw for a job with task `ids` and `edges` (parent, child)."""
    level = levels(len(ids), edges)
    if len(ids) <= group_above:
        keys = [(str(i), task_id, level[i]) for i, task_id in enumerate(ids)]
        return _grouped("tasks", keys, edges)
    drawn = _groups(ids, edges, level, groups_max)
    for node in drawn.nodes:
        if len(node.members) == 1:  # a group of one is shown as its task
            node.label = ids[node.members[0]]
    return drawn


def _groups(
    ids: list[str], edges: list[tuple[int, int]], level: list[int], groups_max: int
) -> Picture:
    by_shape = [(f"{level[i]}|{shape(t)}", shape(t), level[i]) for i, t in enumerate(ids)]
    if len({k for k, _, _ in by_shape}) <= groups_max:
        return _grouped("level and id shape", by_shape, edges)
    depth = max(level) + 1
    if depth <= groups_max:
        keys = [(str(lv), f"level {lv}", lv) for lv in level]
        return _grouped("level", keys, edges)
    per_band = -(-depth // groups_max)  # ceiling division
    keys = []
    for lv in level:
        first = lv - lv % per_band
        keys.append((str(first), f"levels {first}-{first + per_band - 1}", first // per_band))
    return _grouped("level bands", keys, edges)


def _grouped(
    grouping: str, keys: list[tuple[str, str, int]], edges: list[tuple[int, int]]
) -> Picture:
    """One node per distinct key (in order of first appearance); edges counted per pair."""
    index: dict[str, int] = {}
    nodes: list[Node] = []
    node_of = []
    for task, (key, label, level) in enumerate(keys):
        if key not in index:
            index[key] = len(nodes)
            nodes.append(Node(key, label, level))
        nodes[index[key]].members.append(task)
        node_of.append(index[key])
    counted = Counter((node_of[p], node_of[c]) for p, c in edges if node_of[p] != node_of[c])
    return Picture(grouping, nodes, [(a, b, k) for (a, b), k in counted.items()], node_of)
