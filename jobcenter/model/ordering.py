"""The order a job's ready tasks are claimed in, within one priority: pure code, no Redis.

Each rule gives every task a weight; the heaviest ready task is claimed first. The weights
become dense ranks (0 = first), which the queue entry carries after the job's sequence
number (jobcenter/storage/lua/_job.lua queue_member): priority first, then the job's submit order,
then the rank. So the rank only reorders tasks inside one job; an older job's tasks of the
same priority are never behind a newer job's, and no job starves.

  fifo           spec order (every rank 0: the entries sort by task index)
  downstream     number of descendants (Airflow's default weight rule); no durations
  critical_path  longest path of estimated seconds from the task to the job's end (its
                 "bottom level"): the classic list-scheduling rule, measured best by
                 `make bench BENCH_ARGS=--only=order`
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from jobcenter.model.spec import CRITICAL_PATH, DOWNSTREAM, FIFO, JobSpec

# Seconds assumed for a task nothing is known about, when none of the job's tasks has an
# estimate either (else their mean): with all tasks equal, critical_path is the longest
# remaining chain by task count.
DEFAULT_ESTIMATE = 1.0
# Exact descendant counts cost a bitset per task (n^2 bits at worst); past this many tasks
# `downstream` counts paths instead (1 + the children's counts), exact on trees.
DOWNSTREAM_EXACT_MAX = 20_000
# Path counts grow exponentially on diamonds; capped, they still order.
PATH_COUNT_MAX = 2**53

# Learned estimates (one hash per shard, updated by complete.lua): a field per job name and
# task id, and one per task name, holding a moving average of succeeded run times in ms.
LEARNED_BY_TASK_ID = "j\t{job}\t{task_id}"
LEARNED_BY_TASK_NAME = "t\t{task}"


def learned_fields(spec: JobSpec) -> list[str]:
    """The learned-estimate fields ranking the spec reads: for each task without an
    `estimate`, its (job name, task id) field and its task-name field; none unless the
    rule is critical_path (and the job has more than one task: a lone task's rank is 0
    whatever its estimate)."""
    if spec.order != CRITICAL_PATH or len(spec.tasks) < 2:
        return []
    fields: list[str] = []
    for t in spec.tasks:
        if t.estimate is None:
            fields.append(LEARNED_BY_TASK_ID.format(job=spec.name, task_id=t.id))
            fields.append(LEARNED_BY_TASK_NAME.format(task=t.task))
    return fields


def estimates(spec: JobSpec, learned: Mapping[str, float]) -> list[float]:
    """Seconds per task: the spec's `estimate`, else learned for this job name and task id,
    else learned for the task name, else the mean of the job's known ones, else the default.
    `learned` maps learned_fields() to milliseconds (absent: never learned)."""
    out: list[float | None] = []
    for t in spec.tasks:
        value = t.estimate
        if value is None:
            by_id = learned.get(LEARNED_BY_TASK_ID.format(job=spec.name, task_id=t.id))
            by_name = learned.get(LEARNED_BY_TASK_NAME.format(task=t.task))
            ms = by_id if by_id is not None else by_name
            value = None if ms is None else ms / 1000
        out.append(value)
    known = [v for v in out if v is not None]
    default = sum(known) / len(known) if known else DEFAULT_ESTIMATE
    return [default if v is None else v for v in out]


def task_ranks(
    spec: JobSpec, children: Sequence[Sequence[int]], learned: Mapping[str, float]
) -> list[int] | None:
    """Each task's rank under the spec's `order` rule; None for fifo (spec order).
    `children` are the tasks' children by index (layout.Layout.children)."""
    if spec.order == FIFO:
        return None
    if len(children) == 1:  # a lone task is first whatever it weighs (one-task jobs: many)
        return [0]
    if spec.order == DOWNSTREAM:
        return dense_ranks(descendant_counts(children))
    return dense_ranks(bottom_levels(children, estimates(spec, learned)))


def dense_ranks(weights: Sequence[float]) -> list[int]:
    """0 for the heaviest task, 1 for the next...; equal weights keep spec order."""
    ranks = [0] * len(weights)
    for rank, i in enumerate(sorted(range(len(weights)), key=lambda i: (-weights[i], i))):
        ranks[i] = rank
    return ranks


def reverse_topological(children: Sequence[Sequence[int]]) -> list[int]:
    """Task indexes, every task after all of its children (the graph is a checked DAG)."""
    parents_left = [0] * len(children)
    for kids in children:
        for c in kids:
            parents_left[c] += 1
    order = [i for i, count in enumerate(parents_left) if count == 0]
    for i in order:  # grows while walked: Kahn's algorithm, iteratively
        for c in children[i]:
            parents_left[c] -= 1
            if parents_left[c] == 0:
                order.append(c)
    order.reverse()
    return order


def bottom_levels(children: Sequence[Sequence[int]], durations: Sequence[float]) -> list[float]:
    """The longest path of durations from each task (itself included) to the job's end."""
    level = [0.0] * len(children)
    for i in reverse_topological(children):
        level[i] = durations[i] + max((level[c] for c in children[i]), default=0.0)
    return level


def descendant_counts(children: Sequence[Sequence[int]]) -> list[int]:
    """How many tasks depend on each task, directly or not (path counts on big jobs)."""
    order = reverse_topological(children)
    count = [0] * len(children)
    if len(children) > DOWNSTREAM_EXACT_MAX:
        for i in order:
            count[i] = min(PATH_COUNT_MAX, sum(1 + count[c] for c in children[i]))
        return count
    reach = [0] * len(children)  # bitset of each task's descendants
    for i in order:
        bits = 0
        for c in children[i]:
            bits |= reach[c] | (1 << c)
        reach[i] = bits
        count[i] = bits.bit_count()
    return count
