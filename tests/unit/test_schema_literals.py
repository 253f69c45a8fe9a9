"""No module spells a stored field itself: a job hash's fields, a task's fields and a task
payload's keys are read and written through the names schema.py generates into Lua
(JobField, TaskField, PayloadKey), or through the typed records built on them
(storage/keyspace/records.py). A literal that slipped in is found where it reads or writes
Redis: a hash command's field, a raw reply's bytes key, a payload's key, a task field made
with an f-string. A word such as "state" in prose, a log line or a public dict's key is not
a field read, and is not looked at."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from jobcenter.storage.keyspace.schema import JobField, PayloadKey, TaskField

ROOT = Path(__file__).resolve().parents[2] / "jobcenter"
SCHEMA_MODULES = {ROOT / "storage" / "keyspace" / "schema.py"}
HASH_COMMANDS = {"hget", "hmget", "hset", "hsetnx", "hincrby", "hincrbyfloat", "hexists", "hdel"}
DICT_READS = {"get", "pop", "setdefault"}
JOB_FIELDS = {f.value for f in JobField}
TASK_PREFIXES = {f.value for f in TaskField}
# "id" is also the key of every task in a spec and of every job in the API: only its other
# keys are the payload's alone.
PAYLOAD_KEYS = {k.value for k in PayloadKey} - {PayloadKey.ID.value}
# The job fields no public dict (a spec, the API's and the CLI's views) has a key of the same
# name: a subscript with one of these reads a job hash. The others (state, name, queue, ...)
# are also public keys, so only a hash command or a bytes key tells they are read from Redis.
JOB_CODES = JOB_FIELDS - {
    "id", "name", "owner", "state", "spec", "priority", "queue", "queues", "created_at",
    "started_at", "finished_at", "updated_at", "schedule_id", "fire_time", "error", "webhook",
    "retention", "left", "stop", "leader", "written", "queued", "protocol", "rules", "tags",
    "timeout", "sla",
}  # fmt: skip


def _literal(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
        value = node.value
        return value.decode(errors="replace") if isinstance(value, bytes) else value
    return None


def _is_task_field(text: str) -> bool:
    prefix, colon, index = text.partition(":")
    return bool(colon) and f"{prefix}:" in TASK_PREFIXES and (index == "" or index.isdigit())


def _keys_read(node: ast.AST) -> list[ast.AST]:
    """The keys a subscript, a dict method or an `in` test looks up."""
    if isinstance(node, ast.Subscript):
        return [node.slice]
    is_method = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    if is_method and node.func.attr in DICT_READS and node.args:  # type: ignore[attr-defined]
        return [node.args[0]]  # type: ignore[attr-defined]
    if isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
        return [node.left]
    return []


def _hash_fields(node: ast.AST) -> tuple[str, list[ast.AST]] | None:
    """A hash command on a job hash (`<keys>.job`) or a tasks hash (`<keys>.tasks`): which,
    and its field arguments."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    if node.func.attr not in HASH_COMMANDS or not node.args:
        return None
    key = node.args[0]
    if isinstance(key, ast.Attribute) and key.attr in ("job", "tasks"):
        mapping = [
            k for kw in node.keywords if isinstance(kw.value, ast.Dict) for k in kw.value.keys
        ]
        return key.attr, [*node.args[1:], *(k for k in mapping if k is not None)]
    return None


def literal_fields(source: str) -> list[str]:
    """Where `source` spells a stored field itself: "line: the literal (what to use)"."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        hashed = _hash_fields(node)
        if hashed is not None:
            kind, fields = hashed
            for field in fields:
                text = _literal(field)
                if text is None:
                    continue
                if kind == "job" and text in JOB_FIELDS:
                    found.append(f"{field.lineno}: {text!r} (JobField)")
                if kind == "tasks" and _is_task_field(text):
                    found.append(f"{field.lineno}: {text!r} (TaskField.<name>.of(index))")
        for key in _keys_read(node):
            text = _literal(key)
            if text is None:
                continue
            assert isinstance(key, ast.Constant)
            raw = isinstance(key.value, bytes)
            if text in JOB_CODES or (raw and text in JOB_FIELDS):
                found.append(f"{key.lineno}: {key.value!r} (JobField, or a JobRecord)")
            elif text in PAYLOAD_KEYS:
                found.append(f"{key.lineno}: {key.value!r} (PayloadKey, or a TaskPayload)")
        if isinstance(node, ast.JoinedStr) and node.values:
            head = _literal(node.values[0])
            if head is not None and head in TASK_PREFIXES and len(node.values) > 1:
                found.append(f"{node.lineno}: f{head!r}... (TaskField.<name>.of(index))")
    return found


def _modules() -> list[Path]:
    return sorted(p for p in ROOT.rglob("*.py") if p not in SCHEMA_MODULES)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_no_stored_field_is_spelled_outside_the_schema(path: Path) -> None:
    assert literal_fields(path.read_text()) == []


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('redis.hget(jk.job, "state")', ["1: 'state' (JobField)"]),
        ('pipe.hmget(keys.job(j).job, JobField.STATE, "n")', ["1: 'n' (JobField)"]),
        ('redis.hset(jk.tasks, "s:3", "x")', ["1: 's:3' (TaskField.<name>.of(index))"]),
        ('raw.get(b"state")', ["1: b'state' (JobField, or a JobRecord)"]),
        ('int(job["nfailed"])', ["1: 'nfailed' (JobField, or a JobRecord)"]),
        ('payload["t"]', ["1: 't' (PayloadKey, or a TaskPayload)"]),
        ('payload.get("rb", 1.0)', ["1: 'rb' (PayloadKey, or a TaskPayload)"]),
        ('fields[f"s:{i}"]', ["1: f's:'... (TaskField.<name>.of(index))"]),
    ],
)
def test_a_literal_field_is_found(line: str, expected: list[str]) -> None:
    assert literal_fields(line) == expected


@pytest.mark.parametrize(
    "line",
    [
        'log.info("job %s state %s", job_id, state)',  # prose
        'view["state"]',  # a public dict's key
        'redis.hget(keys.worker_info(h), "queues")',  # another hash's field
        'spec["id"]',
        "redis.hget(jk.job, JobField.STATE)",
    ],
)
def test_an_ordinary_word_is_not_a_field(line: str) -> None:
    assert literal_fields(line) == []
