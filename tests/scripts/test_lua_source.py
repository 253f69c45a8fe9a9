"""Static checks of the Lua sources: one list of state names, no key literal, a header each."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest
import redis

from jobcenter.model.states import JobState, TaskState, lua_constants
from jobcenter.storage.keyspace.schema import JobField, TaskField
from jobcenter.storage.lua import ALL_SCRIPTS, JOB_SCRIPTS, SHARD_SCRIPTS, source

LUA_DIR = Path(str(resources.files("jobcenter.storage.lua")))
LUA_FILES = sorted(LUA_DIR.glob("*.lua"))
PRELUDES = {"_common", "_slots", "_job", "_cascade", "_data", "_reset", "_await"}

STATE_NAME = re.compile(r"\b([TJ]_[A-Z][A-Z_]*)\b")
CONSTANT = re.compile(r"^local ([TJ]_[A-Z_]+) = '([a-z_]+)'$")
# Lua string literals: '...' or "..." (with escapes); long brackets [[...]] are comments here.
STRING = re.compile(r"""'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*\"""")
# redis.call / redis.pcall whose first argument after the command is a string literal.
LITERAL_KEY_CALL = re.compile(r"""redis\.p?call\(\s*(['"])\w+\1\s*,\s*['"]""")


def _code(path: Path) -> str:
    """The file without comments (block --[[ ]] and line --), string literals kept."""
    text = re.sub(r"--\[(=*)\[.*?\]\1\]", "", path.read_text(), flags=re.S)
    lines = []
    for line in text.splitlines():
        out, quote, k = [], "", 0
        while k < len(line):
            ch = line[k]
            if quote:
                if ch == "\\":
                    out.append(line[k : k + 2])
                    k += 2
                    continue
                if ch == quote:
                    quote = ""
            elif ch in "'\"":
                quote = ch
            elif line.startswith("--", k):
                break
            out.append(ch)
            k += 1
        lines.append("".join(out))
    return "\n".join(lines)


JOB_STATES_LINE = re.compile(r"^local JOB_STATES = \{(.*)\}$")


def _constants() -> dict[str, str]:
    lines = [line for line in lua_constants().splitlines() if not JOB_STATES_LINE.match(line)]
    pairs = [CONSTANT.match(line) for line in lines]
    assert all(pairs), "lua_constants() emitted a line that is not a state constant"
    return {m.group(1): m.group(2) for m in pairs if m}


def test_lua_job_states_list_the_per_state_index_keys_in_python_order() -> None:
    """Store._context passes the per-state job indexes in JobState order; _job.lua maps
    them through JOB_STATES, which must be that order."""
    (match,) = filter(None, map(JOB_STATES_LINE.match, lua_constants().splitlines()))
    assert match.group(1).split(", ") == [f"J_{s.name}" for s in JobState]


def test_lua_state_constants_are_exactly_the_python_states() -> None:
    expected = {f"T_{s.name}": s.value for s in TaskState}
    expected |= {f"J_{s.name}": s.value for s in JobState}
    assert _constants() == expected


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.name)
def test_every_state_name_a_script_uses_is_defined_in_states_py(path: Path) -> None:
    used = set(STATE_NAME.findall(_code(path)))
    assert used <= _constants().keys(), f"{path.name} uses undefined {used - _constants().keys()}"


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.name)
def test_no_script_writes_a_state_as_a_string_literal(path: Path) -> None:
    """A task's state field ('s:' .. i) and the job's state are set from the constants only."""
    states = {s.value for s in TaskState} | {s.value for s in JobState}
    for number, line in enumerate(_code(path).splitlines(), 1):
        if "'s:'" in line or "'state'" in line:
            literals = {lit[1:-1] for lit in STRING.findall(line)}
            assert not literals & states, f"{path.name}:{number}: state literal in {line.strip()}"


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.name)
def test_no_script_contains_a_key_literal(path: Path) -> None:
    code = _code(path)
    for literal in STRING.findall(code):
        assert "jc:" not in literal and "{" not in literal and "}" not in literal, (
            f"{path.name}: string literal {literal} looks like a key name"
        )
    match = LITERAL_KEY_CALL.search(code)
    assert match is None, f"{path.name}: redis.call with a literal key: {match and match.group()}"


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.name)
def test_no_script_scans_the_keyspace_or_uses_non_portable_libraries(path: Path) -> None:
    code = _code(path)
    for command in ("KEYS", "SCAN", "FLUSHDB", "FLUSHALL"):
        assert not re.search(rf"""redis\.p?call\(\s*['"]{command}['"]""", code, re.I), command
    for library in ("cjson", "struct", "bit"):
        assert not re.search(rf"\b{library}\.", code), f"{path.name} uses {library}"
    if re.search(r"\bcmsgpack\b", code):  # only where a Lua without it gets the plain list
        assert path.name == "_data.lua", f"{path.name} uses cmsgpack"
        assert "rawget(_G, 'cmsgpack')" in code, "cmsgpack used without its fallback"


def test_every_lua_file_is_a_registered_script_or_a_prelude() -> None:
    assert {p.stem for p in LUA_FILES} == ALL_SCRIPTS | PRELUDES


LUA_FILE_LINES_MAX = 400  # a file a newcomer reads whole; a longer prelude splits by concern


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.name)
def test_no_lua_file_is_longer_than_a_newcomer_reads(path: Path) -> None:
    lines = path.read_text().count("\n")
    assert lines <= LUA_FILE_LINES_MAX, f"{path.name} has {lines} lines: split it"


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.name)
def test_every_script_starts_with_a_header_naming_it(path: Path) -> None:
    text = path.read_text()
    assert text.startswith(f"--[[ {path.stem}:"), f"{path.name} has no header"
    header = text[: text.index("]]")]
    if path.stem not in PRELUDES:
        assert "KEYS" in header and "Returns" in header, path.name
        # a job script's ARGV starts with the job context, which _job.lua's header lists
        assert "ARGV" in header or "the job context (_job.lua)" in header, path.name


def test_every_script_compiles_on_the_server(redis_client: redis.Redis) -> None:
    for name in sorted(ALL_SCRIPTS):
        redis_client.script_load(source(name))


@pytest.mark.parametrize("name", sorted(ALL_SCRIPTS))
def test_job_scripts_and_only_they_get_the_job_context(name: str) -> None:
    """A job script (submit among them) reads the job context of _job.lua and says so in
    its header; a shard script (claim, singleton) names its own KEYS from KEYS[1]."""
    header = _read_header(name)
    if name in JOB_SCRIPTS:
        assert "local JOB_ID = ARGV[1]" in source(name), name
        assert "the job context (_job.lua)" in header, name
    else:
        assert "local JOB_ID" not in source(name), name
        assert "KEYS[1]" in header and "ARGV[1]" in header, name


# _job.lua helpers that write to a queue or may finalize the job (which puts the job's
# idempotency key on retention): a script must check its keys before the first of them.
KEYED_WRITES = re.compile(
    r"\b(enqueue|task_finished|finalize_job|fail_task|fail_one|release_one|drain_frontier)\("
)
QUEUES_CHECK = "if not queues_passed() then return {KEYS_MISSING} end"


@pytest.mark.parametrize("name", sorted(JOB_SCRIPTS))
def test_job_scripts_that_queue_or_finalize_check_their_queue_and_idempotency_keys_first(
    name: str,
) -> None:
    code = _code(LUA_DIR / f"{name}.lua")
    write = KEYED_WRITES.search(code)
    if write is None and not re.search(r"\b(QUEUES|IDEM)\b", code):
        return  # start, heartbeat, publish_tasks, resubmit: no queue, no finalize
    check = code.find("queues_passed()")
    assert check >= 0, f"{name} writes through the job context without queues_passed()"
    assert write is None or check < write.start(), f"{name}: {write and write.group()} first"
    assert QUEUES_CHECK in code or name == "submit", name
    assert "-5" in _read_header(name), f"{name}'s header does not list -5"


def test_submit_is_a_job_script() -> None:
    """submit.lua splits a small job itself, so it runs in the job's context."""
    assert "submit" in JOB_SCRIPTS and "submit" not in SHARD_SCRIPTS
    assert JOB_SCRIPTS.isdisjoint(SHARD_SCRIPTS) and JOB_SCRIPTS | SHARD_SCRIPTS == ALL_SCRIPTS


def _read_header(name: str) -> str:
    text = (LUA_DIR / f"{name}.lua").read_text()
    return text[: text.index("]]")]


def test_the_prelude_keeps_the_constants_a_script_names_and_drops_the_rest() -> None:
    from jobcenter.storage.lua.build import _constants_used

    prelude = "local A = 'a'\nlocal B = 'b'\nLIST = {A}\nlocal C = {B}\nlocal D = 1\n"
    kept = _constants_used(prelude, "return C")
    assert kept.splitlines() == ["local A = 'a'", "local B = 'b'", "LIST = {A}", "local C = {B}"]


# A hash command (its arguments, up to the closing parenthesis) and a task field's prefix
# joined to an index: where a script names a stored field, which must be the prelude's
# constant (JOB_FIELD.<NAME>, TF_<NAME>), generated from the schema, never a literal.
HASH_CALL = re.compile(
    r"redis\.p?call\(\s*'(HGET|HMGET|HSET|HSETNX|HINCRBY|HINCRBYFLOAT|HEXISTS|HDEL)'\s*,"
)
TASK_FIELD_JOIN = re.compile(r"""(['"])([a-z]+:)\1\s*\.\.""")


def _call_arguments(code: str, start: int) -> str:
    depth, k = 1, start
    while k < len(code) and depth:
        depth += {"(": 1, ")": -1}.get(code[k], 0)
        k += 1
    return code[start : k - 1]


def _stored_field(text: str) -> bool:
    prefix, colon, index = text.partition(":")
    is_task_field = bool(colon) and f"{prefix}:" in {f.value for f in TaskField}
    return text in {f.value for f in JobField} or (is_task_field and (index.isdigit() or not index))


def literal_hash_fields(code: str) -> list[str]:
    """The stored fields `code` (comments stripped) spells as literals."""
    found = []
    for call in HASH_CALL.finditer(code):
        for literal in STRING.findall(_call_arguments(code, call.end())):
            if _stored_field(literal[1:-1]):
                found.append(f"{call.group(1)} {literal}")
    found += [f"{m.group(0)} (TF_*)" for m in TASK_FIELD_JOIN.finditer(code)
              if _stored_field(m.group(2))]  # fmt: skip
    return found


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda p: p.name)
def test_lua_names_stored_fields_by_the_generated_constants(path: Path) -> None:
    assert literal_hash_fields(_code(path)) == []


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("redis.call('HGET', JOB, 'state')", ["HGET 'state'"]),
        ("redis.call('HMGET', JOB, JOB_FIELD.STATE,\n  'nfailed')", ["HMGET 'nfailed'"]),
        ("redis.call('HSET', TASKS, 's:' .. i, T_QUEUED)", ["HSET 's:'", "'s:' .. (TF_*)"]),
        ("local f = 'e:' .. i", ["'e:' .. (TF_*)"]),
        ("redis.call('HGET', JOB, JOB_FIELD.STATE)", []),
        ("redis.call('HGET', KEYS[1], 'unrelated')", []),
        ("return attempt .. ':' .. owner", []),
    ],
)
def test_a_literal_stored_field_in_lua_is_found(code: str, expected: list[str]) -> None:
    assert literal_hash_fields(code) == expected
