"""Pure graph code over task ids: validation, topological order, children.

Everything here is iterative: a job may hold a 100,000-task chain, far past Python's
recursion limit.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence

from jobcenter.errors import SpecError


def _unique(deps: Sequence[str] | str) -> Iterable[str]:
    """A task's deps without repeats, in the order given (a bare string is one dep)."""
    if isinstance(deps, str):
        return (deps,)
    return dict.fromkeys(deps) if len(deps) > 1 else deps


def check_dag(task_ids: Sequence[str], deps: Mapping[str, Sequence[str]]) -> list[str]:
    """Validate the graph and return its tasks in topological order.

    `deps` maps a task id to the ids it depends on (a missing entry: no deps). Raises
    SpecError for duplicate ids, unknown or self dependencies, and cycles, naming the
    cycle path. The order is stable: among ready tasks the earliest in `task_ids` comes
    first, so an input already in topological order comes back unchanged.
    """
    n = len(task_ids)
    index = dict(zip(task_ids, range(n), strict=True))
    if len(index) != n:
        seen: set[str] = set()
        for task_id in task_ids:
            if task_id in seen:
                raise SpecError(f"duplicate task id {task_id!r}")
            seen.add(task_id)
    if not index.keys() >= deps.keys():
        extra = next(task_id for task_id in deps if task_id not in index)
        raise SpecError(f"dependencies given for unknown task {extra!r}")

    # Specs are nearly always written parents first; then the input order is the answer.
    in_order = True
    for task_id, task_deps in deps.items():
        i = index[task_id]
        for dep in (task_deps,) if isinstance(task_deps, str) else task_deps:
            j = index.get(dep)
            if j is None:
                raise SpecError(f"task {task_id!r} depends on unknown task {dep!r}")
            if j >= i:
                if j == i:
                    raise SpecError(f"task {task_id!r} depends on itself")
                in_order = False
    if in_order:
        return list(task_ids)

    # Kahn's algorithm with a min-heap of input positions: ties go to the earliest task.
    waiting = [0] * n
    children: list[list[int]] = [[] for _ in range(n)]
    for task_id, task_deps in deps.items():
        i = index[task_id]
        for dep in _unique(task_deps):
            waiting[i] += 1
            children[index[dep]].append(i)
    ready = [i for i in range(n) if not waiting[i]]  # ascending, so already a heap
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for child in children[i]:
            waiting[child] -= 1
            if not waiting[child]:
                heapq.heappush(ready, child)
    if len(order) < n:
        cycle = _find_cycle(task_ids, deps, index, waiting)
        raise SpecError("cycle: " + " -> ".join(task_ids[i] for i in cycle))
    return [task_ids[i] for i in order]


def _find_cycle(
    task_ids: Sequence[str],
    deps: Mapping[str, Sequence[str]],
    index: Mapping[str, int],
    waiting: list[int],
) -> list[int]:
    """One cycle among the tasks Kahn could not order, as a closed path in run order.

    Every unordered task still waits on an unordered parent, so walking from one to such
    a parent must revisit a task; the revisited stretch is a cycle. The path is rotated to
    start at its earliest task and reads upstream -> downstream: `a -> b` means b needs a.
    """
    node = next(i for i, count in enumerate(waiting) if count)
    seen: dict[int, int] = {}
    walk: list[int] = []
    while node not in seen:
        seen[node] = len(walk)
        walk.append(node)
        parents = (index[dep] for dep in _unique(deps[task_ids[node]]))
        node = next(j for j in parents if waiting[j])
    cycle = walk[seen[node] :]
    cycle.reverse()  # the walk went child -> parent
    first = cycle.index(min(cycle))
    cycle = cycle[first:] + cycle[:first]
    return [*cycle, cycle[0]]


def children_of(task_ids: Sequence[str], deps: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """Each task's direct children (the tasks that depend on it), in input order."""
    children: dict[str, list[str]] = {task_id: [] for task_id in task_ids}
    for task_id in task_ids:
        task_deps = deps.get(task_id)
        if not task_deps:
            continue
        for dep in _unique(task_deps):
            siblings = children.get(dep)
            if siblings is None:
                raise SpecError(f"task {task_id!r} depends on unknown task {dep!r}")
            siblings.append(task_id)
    return children
