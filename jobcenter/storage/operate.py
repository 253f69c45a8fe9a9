"""Operating a job's tasks by hand: clear (put ended tasks back to run again, with those
below or above them) and mark (settle a task as succeeded, failed or skipped, and let the
DAG go on as if it had ended so). Both say who did it, and why, in the job's history."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from jobcenter.errors import NotFound, Refused, WrongState
from jobcenter.model import codec
from jobcenter.model.dag import topological_order
from jobcenter.model.states import JobState, TaskState

from .admin import RESET_STATES, REVIVE_ARGS_MAX, _downstream, _finish_cascade, _revive_call
from .keyspace.packed import PackedJob
from .keyspace.schema import PayloadKey, TaskField
from .store import Store

# What a task may be marked as, and the states it may be marked from.
MARK_OUTCOMES = (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.SKIPPED)
MARKABLE = {
    TaskState.WAITING,
    TaskState.QUEUED,
    TaskState.RETRY_WAIT,
    TaskState.AWAITING,
    TaskState.FAILED,
    TaskState.UPSTREAM_FAILED,
}
# A task in one of these has a queue entry, an attempt or a retry under way: clear waits.
UNDER_WAY = {TaskState.QUEUED, TaskState.RUNNING, TaskState.TIMED_OUT, TaskState.RETRY_WAIT}


@dataclass(frozen=True)
class Graph:
    """A job's tasks as clear and mark need them: states, names and edges (a map's instances
    are parents of their mapped task, which is a child of its source)."""

    states: dict[int, str]
    names: dict[int, str]
    children: dict[int, list[int]]
    parents: dict[int, list[int]]
    instances: dict[int, list[int]]  # an expanded mapped task -> its instances
    sources: dict[int, int]  # a mapped task -> its source

    def name(self, index: int) -> str:
        return self.names.get(index, str(index))

    def index(self, job_id: str, task_id: str) -> int:
        for index, name in self.names.items():
            if name == task_id:
                return index
        raise NotFound(f"job {job_id} has no task {task_id!r}")

    def ancestors(self, tasks: list[int]) -> set[int]:
        seen: set[int] = set()
        todo = [p for t in tasks for p in self.parents.get(t, ())]
        while todo:
            index = todo.pop()
            if index not in seen:
                seen.add(index)
                todo += self.parents.get(index, ())
        return seen


def _graph(store: Store, job_id: str) -> Graph:
    fields = store.task_fields(
        job_id, TaskField.ID, TaskField.STATE, TaskField.CHILDREN, TaskField.MAP_OF,
        TaskField.MAP_ARG,
    )  # fmt: skip
    children = {
        int(i): [int(c) for c in csv.split(",")] for i, csv in fields[TaskField.CHILDREN].items()
    }
    parents: dict[int, list[int]] = defaultdict(list)
    for parent, kids in children.items():
        for kid in kids:
            parents[kid].append(parent)
    instances: dict[int, list[int]] = defaultdict(list)
    for i, mapped in fields[TaskField.MAP_OF].items():
        instances[int(mapped)].append(int(i))
    sources = {int(i): int(arg.rpartition("=")[2]) for i, arg in fields[TaskField.MAP_ARG].items()}
    return Graph(
        states={int(i): s for i, s in fields[TaskField.STATE].items()},
        names={int(i): n for i, n in fields[TaskField.ID].items()},
        children=children,
        parents=dict(parents),
        instances=dict(instances),
        sources=sources,
    )


def _open(store: Store, job_id: str) -> None:
    """Refuse a job clear and mark cannot touch; unpack it if packed; finish its cascades
    (the states read next must not be changing under us)."""
    if _refuse_job(store, job_id) is not None:
        store.restore(job_id)
    _finish_cascade(store, job_id)


def _refuse_job(store: Store, job_id: str) -> PackedJob | None:
    """Refuse a job clear and mark cannot touch; its packed record, if it has one."""
    state = store.job_state(job_id)
    if state is None:
        raise NotFound.job(job_id, store.settings.namespace)
    if state == JobState.CANCELLED:
        raise Refused(f"job {job_id} was cancelled: its tasks cannot run again")
    packed = store.records(job_id).packed
    if packed is not None and not _whole(packed):
        raise Refused(
            f"job {job_id} succeeded and was compacted by an earlier jobcenter, which freed "
            "what its tasks need to run again (their inputs, limits and trigger rules): "
            "submit it again"
        )
    return packed


def _whole(packed: PackedJob) -> bool:
    """Whether a packed record keeps every task's whole payload: one an earlier jobcenter
    wrote for a succeeded job kept each task's name and arguments alone (no task id)."""
    payloads = [v for k, v in packed.fields.items() if k.startswith(TaskField.PAYLOAD.value)]
    if not payloads:
        return True
    payload = codec.unpack(payloads[0])
    return isinstance(payload, dict) and PayloadKey.ID.value in payload


def _refuse_maps_again(job_id: str, graph: Graph, again: set[int]) -> None:
    """A map is expanded once: refused when its source is to run again."""
    for mapped in sorted(set(graph.instances) & again):
        source = graph.sources.get(mapped)
        if source in again:
            raise Refused(
                f"job {job_id}: task {graph.name(mapped)} was expanded from a map of task "
                f"{graph.name(source)}, which would run again; a map is not expanded twice: "
                f"clear {graph.name(mapped)} itself (all its instances), or submit the job again"
            )


def clear(
    store: Store,
    job_id: str,
    task_ids: list[str],
    *,
    downstream: bool = False,
    upstream: bool = False,
    by: str,
    reason: str = "",
) -> tuple[int, list[str]]:
    """Put the named tasks (whatever they ended as) back to run again, with every task below
    them (`downstream`) and above them (`upstream`) that ended; the rest of the job keeps
    its state and results. A mapped task is cleared with all its instances; an instance
    alone re-runs that one. Refused, with nothing written, while a task to clear is queued,
    running or waiting for a retry. Returns how many tasks were cleared and the ids of those
    asked for, parents first (a task below whose trigger rule still fails or skips on its
    parents is left as it ended)."""
    if not task_ids:
        raise ValueError("name at least one task to clear")
    if _refuse_job(store, job_id) is not None:  # finished: checked before it is unpacked
        _to_clear(job_id, _graph(store, job_id), task_ids, downstream, upstream)
    _open(store, job_id)
    graph = _graph(store, job_id)  # after the cascades _open finished
    named, todo = _to_clear(job_id, graph, task_ids, downstream, upstream)
    cleared = 0
    chunk: list[tuple[int, list[int]]] = []
    size = 0
    for index in todo:
        chunk.append((index, graph.parents.get(index, [])))
        size += 2 + len(chunk[-1][1])
        if size >= REVIVE_ARGS_MAX or index == todo[-1]:
            in_chunk = [i for i, _ in chunk if i in named]
            cleared += _clear_call(store, job_id, (by, reason), in_chunk, chunk)
            chunk, size = [], 0
    return cleared, [graph.name(index) for index in todo]


def _to_clear(
    job_id: str, graph: Graph, task_ids: list[str], downstream: bool, upstream: bool
) -> tuple[list[int], list[int]]:
    """The named tasks' indexes and those to clear, parents first; refused (WrongState,
    NotFound) when clear cannot put them back as the graph stands."""
    named = [graph.index(job_id, task_id) for task_id in task_ids]
    chosen = set(named)
    for index in named:  # a mapped task runs again through all its instances
        chosen.update(graph.instances.get(index, ()))
    if downstream:
        chosen |= _downstream(sorted(chosen), graph.children)
    if upstream:
        chosen |= graph.ancestors(named)
    _refuse_maps_again(job_id, graph, chosen)
    for index in sorted(chosen):
        state = graph.states.get(index)
        if state in UNDER_WAY:
            raise Refused(
                f"job {job_id}: task {graph.name(index)} is {state}: clear once it has ended"
                + ("" if index in named else " (it is among the tasks to clear)")
            )
        if index in named and state == TaskState.WAITING:
            raise Refused(f"job {job_id}: task {graph.name(index)} is waiting: it has not run")
    todo = [
        index
        for index in topological_order(graph.states, graph.children)
        if index in chosen and graph.states[index] in RESET_STATES
    ]
    _refuse_starving_children(job_id, graph, todo, chosen)
    return named, todo


def _refuse_starving_children(
    job_id: str, graph: Graph, cleared: list[int], chosen: set[int]
) -> None:
    """A task below a cleared one, kept, that is queued or waits for a retry would start
    without the cleared task's result (it is gone until it runs again): refused. One that
    runs read its inputs already. A mapped child's instances read their inputs through it."""
    for index in cleared:
        kids = list(graph.children.get(index, ()))
        kids += [k for kid in kids for k in graph.instances.get(kid, ())]
        for kid in kids:
            state = graph.states.get(kid)
            if kid not in chosen and state in (TaskState.QUEUED, TaskState.RETRY_WAIT):
                raise Refused(
                    f"job {job_id}: task {graph.name(kid)}, below {graph.name(index)}, is "
                    f"{state} and would start without its result: clear it too "
                    "(--downstream) once it has started or ended"
                )


def _clear_call(
    store: Store,
    job_id: str,
    by: tuple[str, str],
    named: list[int],
    tasks: list[tuple[int, list[int]]],
) -> int:
    while True:
        done = store.clear(job_id, by, named, tasks)
        if done is not None:
            return done
        _finish_cascade(store, job_id)  # a task cleared by an earlier call ended meanwhile


def mark(
    store: Store,
    job_id: str,
    task_id: str,
    outcome: str,
    *,
    result: Any = None,
    by: str,
    reason: str = "",
) -> str:
    """Settle a task by hand: it ends `outcome` (succeeded, with `result` as its result;
    failed; skipped) and the job goes on as if it had ended so. From waiting, queued,
    retry_wait (its due retry never runs), awaiting (what it waited for no longer settles
    it), failed or upstream_failed; refused while an attempt runs and once it ended
    otherwise (clear it first). Returns the state it had."""
    if outcome not in MARK_OUTCOMES:
        raise ValueError(f"a task is marked succeeded, failed or skipped, not {outcome!r}")
    if result is not None and outcome != TaskState.SUCCEEDED:
        raise ValueError("only a task marked succeeded takes a result")
    packed = b"" if result is None else codec.pack(
        result, what="the result", max_bytes=store.settings.result_max_bytes
    )  # fmt: skip
    if store.job_state(job_id) is None:
        raise NotFound.job(job_id, store.settings.namespace)
    graph = _graph(store, job_id)  # read from either form: a refusal needs no restore
    index = graph.index(job_id, task_id)
    state = graph.states.get(index, "")
    if state in (TaskState.SUCCEEDED, TaskState.SKIPPED, TaskState.CANCELLED):
        raise WrongState(f"task {task_id} ended {state} already: clear it to run it again")
    _open(store, job_id)
    graph = _graph(store, job_id)  # after the cascades _open finished
    state = graph.states.get(index, "")
    resets: list[tuple[int, list[int]]] = []
    if state in MARKABLE and TaskState(state).terminal:  # what its end decided is decided again
        below = _downstream([index], graph.children)
        for kid in sorted(below):
            if graph.states.get(kid) in UNDER_WAY:
                raise Refused(
                    f"job {job_id}: task {graph.name(kid)}, downstream of {task_id}, is "
                    f"{graph.states[kid]}: mark once it has ended"
                )
        _refuse_maps_again(job_id, graph, below | {index})
        resets = [
            (kid, graph.parents.get(kid, []))
            for kid in topological_order(graph.states, graph.children)
            if kid in below and graph.states[kid] in RESET_STATES
        ]
    first, size = [], 0
    while resets and size < REVIVE_ARGS_MAX:
        first.append(resets.pop(0))
        size += 2 + len(first[-1][1])
    _mark_call(store, job_id, index, outcome, packed, (by, reason), first)
    for k in range(0, len(resets), REVIVE_ARGS_MAX // 8):  # the rest, as a retry resets them
        _revive_call(store, job_id, [], resets[k : k + REVIVE_ARGS_MAX // 8])
    return state


def _mark_call(
    store: Store,
    job_id: str,
    index: int,
    outcome: str,
    result: bytes,
    by: tuple[str, str],
    resets: list[tuple[int, list[int]]],
) -> None:
    """mark.lua says why a state may not be marked (WrongState)."""
    while store.mark(job_id, index, outcome, result, by, resets) is None:
        _finish_cascade(store, job_id)
