"""A finished job's tasks and history, packed or not: the packed record's format, and the
one read model every reader of task fields and history goes through (status, history,
export, the dashboard, dead letters, retry).

Once a job is finished and its cascades are done, a leader packs its tasks hash and history
list into one string, `JobKeys.packed` (`encode`; compact.lua swaps it in and sets the job
field `packed`): msgpack maps one after another, each a part of tasks or of history entries
stored column by column (`_column`). `JobRecords` reads either form and answers as the hash
and the list would, so a reader never knows which it met, and never reads half of each while
compact.lua or restore.lua swaps them (the job's `swaps` count, checked after a read).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgpack

from jobcenter.errors import JobcenterError
from jobcenter.model import codec

from .keys import JobKeys
from .schema import (
    INTEGER_FIELDS,
    INTEGER_HISTORY_COLUMNS,
    PACKED_FORMAT,
    HistoryColumn,
    JobField,
    PackedKey,
    PayloadKey,
    TaskField,
)

HISTORY_PAGE = 1_000  # history entries per LRANGE: each read of a long history stays short
TASKS_PART = 1_000  # tasks per part of a record: a reader expands one part at a time
HISTORY_PART = 5_000  # history entries per part
INTEGER_COLUMNS = frozenset(
    [f.value[:-1] for f in INTEGER_FIELDS] + [c.value for c in INTEGER_HISTORY_COLUMNS]
)
TASKS_CHUNK = 5_000  # task fields per HMGET: a 100,000-task job is read in short calls
SCAN_PAGE = 1_000  # HSCAN page when reading one field of every task
# A record an earlier jobcenter wrote kept a succeeded job's payloads as two columns: the
# task names and the arguments (absent when a task had none), without what a run needs.
# `decode` makes each back into a payload of the name and arguments (no PayloadKey.ID: how
# `clear` tells such a record, which cannot run again, from a whole one).
NAME_COLUMN = "p.t"
ARGS_COLUMN = "p.a"
TASK_KEY = PayloadKey.TASK.value

T = TypeVar("T")


class UnknownPackedFormat(ValueError):
    """A packed record written by a newer jobcenter than this one."""


@dataclass(frozen=True)
class PackedJob:
    """A packed record, expanded: the tasks hash and the history list as they were."""

    fields: dict[str, bytes] = field(default_factory=dict)  # "<prefix><index>" -> value
    history: list[bytes] = field(default_factory=list)


def _column(name: str, values: Sequence[bytes | None]) -> Any:
    """A column in the smallest of three forms, or None when every value is absent:
    {b: base, v: [value - base]} for an integer column (times, counters: INTEGER_FIELDS);
    {d: [distinct values], x: [index]} when few values repeat (states, handlers);
    else the values themselves. Absent values are nil in each form. A single value (a
    one-task job's) is kept as itself: no form is smaller, and a leader packs many such."""
    if len(values) == 1:
        return None if values[0] is None else list(values)
    present = [v for v in values if v is not None]
    if not present:
        return None
    if name in INTEGER_COLUMNS and all(v.isdigit() for v in present):
        numbers = [None if v is None else int(v) for v in values]
        base = min(n for n in numbers if n is not None)
        return {
            PackedKey.BASE.value: base,
            PackedKey.VALUES.value: [None if n is None else n - base for n in numbers],
        }
    distinct = list(dict.fromkeys(present))
    if len(distinct) * 2 <= len(present):
        index = {v: i for i, v in enumerate(distinct)}
        return {
            PackedKey.DICT.value: distinct,
            PackedKey.INDEXES.value: [None if v is None else index[v] for v in values],
        }
    return list(values)


def _part(kind: PackedKey, count: int, columns: dict[str, Any], **extra: int) -> bytes:
    body = {name: col for name, col in columns.items() if col is not None}
    part: dict[str, Any] = {PackedKey.KIND.value: kind.value, PackedKey.COUNT.value: count}
    part.update(extra)
    part[PackedKey.COLUMNS.value] = body
    return bytes(msgpack.packb(part, use_bin_type=True))


def encode(fields: Mapping[str, bytes], history: Sequence[bytes], tasks: int) -> bytes:
    """The packed record of a job of `tasks` tasks: its tasks hash `fields` ("s:3" -> value)
    and its `history` entries, every field kept, whatever the job ended as: `restore` makes
    the hash again as it was, for a retry or a `clear` (a succeeded job's too)."""
    by_prefix: dict[str, dict[int, bytes]] = {}
    for name, value in fields.items():
        prefix, _, index = name.partition(":")
        if index.isdigit():
            by_prefix.setdefault(prefix, {})[int(index)] = value
    # every task written, whatever `tasks` says (a map's instances are counted into it)
    tasks = max([tasks] + [max(values) + 1 for values in by_prefix.values()])
    out = []
    for first in range(0, tasks, TASKS_PART):
        count = min(TASKS_PART, tasks - first)
        columns = {
            prefix: _column(prefix, [values.get(i) for i in range(first, first + count)])
            for prefix, values in sorted(by_prefix.items())
        }
        out.append(_part(PackedKey.TASKS, count, columns, **{PackedKey.FIRST.value: first}))
    names = [c.value for c in HistoryColumn]
    for first in range(0, len(history), HISTORY_PART):
        rows = [e.split(b"\t", len(names) - 1) for e in history[first : first + HISTORY_PART]]
        columns = {
            name: _column(name, [row[k] or None if k < len(row) else None for row in rows])
            for k, name in enumerate(names)
        }
        out.append(_part(PackedKey.HISTORY, len(rows), columns))
    return b"".join(out)


def _payload(name: bytes, args: bytes | None) -> bytes:
    """A payload of a task's name and arguments, from NAME_COLUMN and ARGS_COLUMN (a record
    of an older release)."""
    shown: Any = codec.unpack(args) if args is not None else {}
    return codec.pack({TASK_KEY: name.decode(), **shown}, what="payload")


def _expand(column: Any, count: int) -> list[Any]:
    """A column in one of the three forms of `mp_column` -> its values (None: absent)."""
    if isinstance(column, list):
        return column
    if PackedKey.BASE in column:
        base = column[PackedKey.BASE]
        return [None if v is None else base + v for v in column[PackedKey.VALUES]]
    values = column[PackedKey.DICT]
    return [None if x is None else values[x] for x in column[PackedKey.INDEXES]]


def _stored(value: Any) -> bytes:
    """The bytes Redis held: integers were packed as numbers."""
    return value if isinstance(value, bytes) else str(value).encode()


def decode(raw: bytes | None) -> PackedJob:
    """Expand a packed record (None, an empty record: no tasks, no history)."""
    packed = PackedJob()
    if not raw:
        return packed
    for part in _parts(raw):
        kind, count = part[PackedKey.KIND], part[PackedKey.COUNT]
        columns = {name: _expand(col, count) for name, col in part[PackedKey.COLUMNS].items()}
        if kind == PackedKey.TASKS:
            first = part[PackedKey.FIRST]
            names, args = columns.pop(NAME_COLUMN, None), columns.pop(ARGS_COLUMN, None)
            for k, task_name in enumerate(names or ()):
                if task_name is not None:
                    shown = args[k] if args is not None else None
                    packed.fields[TaskField.PAYLOAD.of(first + k)] = _payload(task_name, shown)
            for name, values in columns.items():
                for k, value in enumerate(values):
                    if value is not None:
                        packed.fields[f"{name}:{first + k}"] = _stored(value)
        else:
            names = [c.value for c in HistoryColumn]
            empty = [None] * count
            rows = zip(*(columns.get(name, empty) for name in names), strict=True)
            for row in rows:
                line = "\t".join("" if v is None else _stored(v).decode() for v in row)
                packed.history.append(line.encode())
    return packed


def _parts(raw: bytes) -> Iterable[dict[str, Any]]:
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False, max_buffer_size=len(raw) + 1)
    unpacker.feed(raw)
    yield from unpacker


Stamp = tuple[bytes | None, bytes | None]  # a job's STAMP_FIELDS as read
STAMP_FIELDS = (JobField.PACKED.value, JobField.SWAPS.value)  # which form, how many swaps
READ_TRIES = 20  # reads of a job packed or unpacked under each of them, before giving up


class RecordsKeptChanging(JobcenterError):
    """A job's records were swapped (compacted, restored) under every one of READ_TRIES reads."""


def read_stamp(redis: Any, jk: JobKeys) -> Stamp:
    """Which form the job's records are in (its `packed` marker, None when unpacked) and how
    often they were swapped: a read of either form that sees the same stamp after it read
    that form whole, since a swap changes the stamp in the step that swaps."""
    marker, swaps = redis.hmget(jk.job, STAMP_FIELDS)
    return marker or None, swaps


class JobRecords:
    """One job's task fields and history, read from the tasks hash and history list while
    the job lives, from its packed record once compacted. Every read is whole: compaction
    and restore (a retry) may swap the one form for the other under a reader, so a read of
    the hash is checked against the job's stamp afterwards, and one that a swap overtook is
    made again from the form the job is in now."""

    def __init__(self, redis: Any, jk: JobKeys) -> None:
        self.redis = redis
        self.jk = jk
        self.stamp: Stamp = (None, None)
        self.packed: PackedJob | None = None

    @classmethod
    def read(cls, redis: Any, jk: JobKeys, stamp: Stamp | None = None) -> JobRecords:
        """The job's records; `stamp` is its STAMP_FIELDS when the caller read them already.
        A packed record is read whole here (a restore that removes it meanwhile, or a
        compaction of the job restored meanwhile, changes the stamp: read again)."""
        records = cls(redis, jk)
        records._load(read_stamp(redis, jk) if stamp is None else (stamp[0] or None, stamp[1]))
        return records

    @classmethod
    def archived(cls, jk: JobKeys, raw: bytes) -> JobRecords:
        """The records of an archived job: its packed record as the archive keeps it (read
        whole already, so nothing of Redis is read; storage/archive/reader.py)."""
        records = cls(None, jk)
        records.stamp, records.packed = (b"archived", None), decode(raw)
        return records

    def _load(self, stamp: Stamp) -> None:
        for _ in range(READ_TRIES):
            marker = stamp[0]
            if marker is None:
                self.stamp, self.packed = stamp, None
                return
            if int(marker) > PACKED_FORMAT:
                raise UnknownPackedFormat(
                    f"job record {self.jk.job} is packed in format {int(marker)}; this "
                    f"jobcenter reads format {PACKED_FORMAT}: upgrade jobcenter"
                )
            raw = self.redis.get(self.jk.packed)
            now = read_stamp(self.redis, self.jk)
            if now == stamp:
                self.stamp, self.packed = stamp, decode(raw)
                return
            stamp = now
        raise RecordsKeptChanging(self._kept_changing())

    def _kept_changing(self) -> str:
        return f"job record {self.jk.job} was swapped under {READ_TRIES} reads in a row"

    def _whole(self, from_hash: Callable[[], T], from_record: Callable[[PackedJob], T]) -> T:
        """`from_hash` while the job is unpacked and no swap overtook the read, else
        `from_record` of the record the job has now."""
        for _ in range(READ_TRIES):
            if self.packed is not None:
                return from_record(self.packed)
            read = from_hash()
            now = read_stamp(self.redis, self.jk)
            if now == self.stamp:
                return read
            self._load(now)
        raise RecordsKeptChanging(self._kept_changing())

    def values(self, names: Sequence[str]) -> list[bytes | None]:
        """HMGET of task fields ("s:3", ...), in bounded calls."""

        def from_hash() -> list[bytes | None]:
            pipe = self.redis.pipeline(transaction=False)
            for start in range(0, len(names), TASKS_CHUNK):
                pipe.hmget(self.jk.tasks, list(names[start : start + TASKS_CHUNK]))
            return [value for chunk in pipe.execute() for value in chunk]

        return self._whole(from_hash, lambda p: [p.fields.get(name) for name in names])

    def every_field(self, page: int = SCAN_PAGE) -> dict[str, bytes]:
        """Every task field (HSCAN in pages of `page`: a view over a few moments)."""

        def from_hash() -> dict[str, bytes]:
            cursor, out = self.redis.hscan(self.jk.tasks, 0, count=page)
            while cursor:
                cursor, more = self.redis.hscan(self.jk.tasks, cursor, count=page)
                out.update(more)
            return {k.decode(): v for k, v in out.items()}

        return self._whole(from_hash, lambda p: dict(p.fields))

    def field_of_every_task(self, prefix: TaskField) -> dict[str, str]:
        """task index -> value of one field, as text."""
        return {index: value.decode() for index, value in self.field_bytes(prefix).items()}

    def field_bytes(self, prefix: TaskField) -> dict[str, bytes]:
        """task index -> value of one field, as stored (HSCAN in pages)."""
        n = len(prefix.value)

        def from_hash() -> dict[str, bytes]:
            match = f"{prefix.value}*"
            scanned = self.redis.hscan_iter(self.jk.tasks, match=match, count=SCAN_PAGE)
            return {k.decode()[n:]: v for k, v in scanned}

        def from_record(packed: PackedJob) -> dict[str, bytes]:
            return {
                k[n:]: v
                for k, v in packed.fields.items()
                if k.startswith(prefix.value) and k[n:].isdigit()
            }

        return self._whole(from_hash, from_record)

    def history_length(self) -> int:
        return self._whole(lambda: int(self.redis.llen(self.jk.history)), lambda p: len(p.history))

    def history(self, first: int, last: int) -> list[bytes]:
        """LRANGE first..last of the history (negative positions count from the end)."""

        def from_record(packed: PackedJob) -> list[bytes]:
            length = len(packed.history)
            start = max(0, first + length if first < 0 else first)
            stop = last + length if last < 0 else last
            return packed.history[start : stop + 1]

        return self._whole(
            lambda: list(self.redis.lrange(self.jk.history, first, last)), from_record
        )


def values_of_jobs(
    redis: Any, wanted: Sequence[tuple[JobKeys, Sequence[str]]]
) -> list[list[bytes | None]]:
    """The task fields `wanted` of several jobs (a few each), in one round trip while none
    of them is packed or being swapped; a job that is, through its JobRecords."""
    pipe = redis.pipeline(transaction=False)
    for jk, names in wanted:
        pipe.hmget(jk.job, STAMP_FIELDS)
        pipe.hmget(jk.tasks, list(names))
        pipe.hmget(jk.job, STAMP_FIELDS)
    replies = pipe.execute()
    out = []
    for k, (jk, names) in enumerate(wanted):
        before, values, after = replies[3 * k : 3 * k + 3]
        stamp: Stamp = (after[0] or None, after[1])
        if stamp[0] is None and (before[0] or None, before[1]) == stamp:
            out.append(values)
        else:
            out.append(JobRecords.read(redis, jk, stamp).values(names))
    return out
