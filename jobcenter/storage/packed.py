"""A finished job's tasks and history, packed or not: the packed record's format, and the
one read model every reader of task fields and history goes through (status, history,
export, the dashboard, dead letters, retry).

Once a job is finished and its cascades are done, a leader packs its tasks hash and history
list into one string, `JobKeys.packed` (`encode`; compact.lua swaps it in and sets the job
field `packed`): msgpack maps one after another, each a part of tasks or of history entries
stored column by column (`_column`). `JobRecords` reads either form and answers as the hash
and the list would, so a reader never knows which it met.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from .keys import JobKeys
from .schema import (
    INTEGER_FIELDS,
    INTEGER_HISTORY_COLUMNS,
    PACKED_FORMAT,
    WORKING_FIELDS,
    HistoryColumn,
    JobField,
    PackedKey,
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
    else the values themselves. Absent values are nil in each form."""
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


def encode(
    fields: Mapping[str, bytes], history: Sequence[bytes], tasks: int, working: bool
) -> bytes:
    """The packed record of a job of `tasks` tasks: its tasks hash `fields` ("s:3" -> value)
    and its `history` entries. Without `working`, the working fields (WORKING_FIELDS, what
    only a job that may run again needs) are left out."""
    dropped = set() if working else {f.value for f in WORKING_FIELDS}
    by_prefix: dict[str, dict[int, bytes]] = {}
    for name, value in fields.items():
        prefix, _, index = name.partition(":")
        if f"{prefix}:" not in dropped and index.isdigit():
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


class JobRecords:
    """One job's task fields and history, read from the tasks hash and history list while
    the job lives, from its packed record once compacted."""

    def __init__(self, redis: Any, jk: JobKeys, packed: PackedJob | None) -> None:
        self.redis = redis
        self.jk = jk
        self.packed = packed

    @classmethod
    def read(cls, redis: Any, jk: JobKeys, marker: bytes | None = None) -> JobRecords:
        """The job's records; `marker` is its `packed` field when the caller read it already
        (b"" when absent)."""
        if marker is None:
            marker = redis.hget(jk.job, JobField.PACKED) or b""
        if not marker:
            return cls(redis, jk, None)
        if int(marker) > PACKED_FORMAT:
            raise UnknownPackedFormat(
                f"job record {jk.job} is packed in format {int(marker)}; this jobcenter reads "
                f"format {PACKED_FORMAT}: upgrade jobcenter"
            )
        return cls(redis, jk, decode(redis.get(jk.packed)))

    def _packed_meanwhile(self) -> PackedJob | None:
        """The record, when compaction swapped it in after this reader saw the job unpacked
        (its hash and list are gone then): a reader that read them retries from it."""
        if self.packed is None and self.redis.hexists(self.jk.job, JobField.PACKED):
            self.packed = decode(self.redis.get(self.jk.packed))
        return self.packed

    def values(self, names: Sequence[str]) -> list[bytes | None]:
        """HMGET of task fields ("s:3", ...), in bounded calls."""
        if self.packed is None:
            pipe = self.redis.pipeline(transaction=False)
            for start in range(0, len(names), TASKS_CHUNK):
                pipe.hmget(self.jk.tasks, list(names[start : start + TASKS_CHUNK]))
            read = [value for chunk in pipe.execute() for value in chunk]
            if self._packed_meanwhile() is None:
                return read
        assert self.packed is not None
        return [self.packed.fields.get(name) for name in names]

    def every_field(self, page: int = SCAN_PAGE) -> dict[str, bytes]:
        """Every task field (HSCAN in pages of `page`: a view over a few moments)."""
        if self.packed is None:
            cursor, out = self.redis.hscan(self.jk.tasks, 0, count=page)
            while cursor:
                cursor, more = self.redis.hscan(self.jk.tasks, cursor, count=page)
                out.update(more)
            if self._packed_meanwhile() is None:
                return {k.decode(): v for k, v in out.items()}
        assert self.packed is not None
        return dict(self.packed.fields)

    def field_of_every_task(self, prefix: TaskField) -> dict[str, str]:
        """task index -> value of one field, as text."""
        return {index: value.decode() for index, value in self.field_bytes(prefix).items()}

    def field_bytes(self, prefix: TaskField) -> dict[str, bytes]:
        """task index -> value of one field, as stored (HSCAN in pages)."""
        if self.packed is None:
            match = f"{prefix.value}*"
            scanned = self.redis.hscan_iter(self.jk.tasks, match=match, count=SCAN_PAGE)
            read = {k.decode().split(":", 1)[1]: v for k, v in scanned}
            if self._packed_meanwhile() is None:
                return read
        assert self.packed is not None
        n = len(prefix.value)
        return {
            k[n:]: v
            for k, v in self.packed.fields.items()
            if k.startswith(prefix.value) and k[n:].isdigit()
        }

    def history_length(self) -> int:
        if self.packed is None:
            length = int(self.redis.llen(self.jk.history))
            if self._packed_meanwhile() is None:
                return length
        assert self.packed is not None
        return len(self.packed.history)

    def history(self, first: int, last: int) -> list[bytes]:
        """LRANGE first..last of the history (negative positions count from the end)."""
        if self.packed is None:
            read = list(self.redis.lrange(self.jk.history, first, last))
            if self._packed_meanwhile() is None:
                return read
        assert self.packed is not None
        entries = self.packed.history
        length = len(entries)
        start = max(0, first + length if first < 0 else first)
        stop = last + length if last < 0 else last
        return entries[start : stop + 1]
