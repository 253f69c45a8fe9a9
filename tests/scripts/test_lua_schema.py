"""The Redis schema is named once (jobcenter/storage/keyspace/schema.py): every script's documented
return codes are the table's; no script spells a task field, a return code, a job, payload
or schedule field as a literal (it uses the generated names), nor a name the table lacks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_lua_source import LUA_DIR, STRING, _code

from jobcenter.errors import NewerRelease, StaleToken, UnknownJob, WrongState
from jobcenter.storage.keyspace import schema
from jobcenter.storage.keyspace.schema import (
    ITEM_CODES,
    LUA_TABLES,
    RETURN_CODES,
    JobField,
    PayloadKey,
    ScheduleField,
    TaskField,
)
from jobcenter.storage.lua import ALL_SCRIPTS

SCRIPTS = sorted(ALL_SCRIPTS)
# A task field's prefix as a Lua literal: 's:' in 's:' .. i
FIELD_LITERAL = re.compile(r"^['\"]([a-z]{1,2}):['\"]$")
# A script returning a number instead of a named code: `return {-4}`, `code = -2`
NUMERIC_CODE = re.compile(r"return \{\s*-?\d|\bcode = -?\d")
# A field named through a generated table: JOB_FIELD.STATE, PAYLOAD_KEY.TASK
TABLE_FIELD = re.compile(r"\b(" + "|".join(LUA_TABLES) + r")\.([A-Za-z_]\w*)")


def _header(name: str) -> str:
    text = (LUA_DIR / f"{name}.lua").read_text()
    return text[: text.index("]]")]


def _documented(header: str, section: str, stop: str | None = None) -> set[int]:
    """The codes a header lists after `section` ("Returns": as {code, ...}; "Codes": bare)."""
    if section not in header:
        return set()
    text = header[header.index(section) :]
    if stop and stop in text:
        text = text[: text.index(stop)]
    pattern = r"\{(-?\d+)" if section == "Returns" else r"(?:^|\|)\s*(-?\d+)\b"
    return {int(v) for v in re.findall(pattern, text.replace("Codes:", "|"))}


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_header_lists_exactly_the_codes_the_table_gives_it(name: str) -> None:
    table = {c.value for c in RETURN_CODES if name in c.scripts}
    assert _documented(_header(name), "Returns", stop="Codes:") == table, name


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_per_item_code_a_header_lists_is_in_the_table(name: str) -> None:
    table = {c.value for c in ITEM_CODES if name in c.scripts}
    assert _documented(_header(name), "Codes:") == table, name


def test_no_value_has_two_names() -> None:
    """A caller reads a code without knowing which script sent it: each value means one thing
    everywhere. ITEM_X is X said of one item of a batch, so it has X's value."""
    names: dict[int, set[str]] = {}
    for c in (*RETURN_CODES, *ITEM_CODES):
        names.setdefault(c.value, set()).add(c.name.removeprefix("ITEM_"))
    shared = {value: meant for value, meant in names.items() if len(meant) > 1}
    assert not shared, f"values with two names: {shared}"
    values: dict[str, set[int]] = {}
    for c in (*RETURN_CODES, *ITEM_CODES):
        values.setdefault(c.name.removeprefix("ITEM_"), set()).add(c.value)
    assert not {name for name, v in values.items() if len(v) > 1}, "a name with two values"
    all_names = [c.name for c in (*RETURN_CODES, *ITEM_CODES)]
    assert len(all_names) == len(set(all_names))


def test_the_exception_table_agrees_with_the_schema() -> None:
    assert StaleToken.code == schema.code("STALE_TOKEN")
    assert WrongState.code == schema.code("WRONG_STATE")
    assert UnknownJob.code == schema.code("JOB_GONE")
    assert NewerRelease.code == schema.code("NEWER_PROTOCOL")


@pytest.mark.parametrize("path", sorted(LUA_DIR.glob("*.lua")), ids=lambda p: p.stem)
def test_no_script_spells_a_task_field_prefix(path: Path) -> None:
    prefixes = {f.value for f in TaskField}
    literals = [s for s in STRING.findall(_code(path)) if FIELD_LITERAL.match(s)]
    assert not [s for s in literals if s[1:-1] in prefixes], f"{path.name}: use the TF_ names"


@pytest.mark.parametrize("path", sorted(LUA_DIR.glob("*.lua")), ids=lambda p: p.stem)
def test_no_script_returns_a_numeric_code(path: Path) -> None:
    assert not NUMERIC_CODE.search(_code(path)), f"{path.name}: use the schema's code names"


@pytest.mark.parametrize("path", sorted(LUA_DIR.glob("*.lua")), ids=lambda p: p.stem)
def test_every_field_name_a_script_uses_is_in_the_schema(path: Path) -> None:
    """An unknown JF./PK./SF. name would be nil in Lua: a field silently never written."""
    used = set(TABLE_FIELD.findall(_code(path)))
    unknown = {f"{t}.{n}" for t, n in used if n not in LUA_TABLES[t].__members__}
    assert not unknown, f"{path.name}: fields missing from the schema: {unknown}"


# Words no script writes as literals: the job hash's fields and the payload keys (JF., PK.
# names), and in the schedule scripts the schedule hash's fields (SF.). Single-letter payload
# keys are left out: 't' or 'a' as a literal is too often something else.
JOB_WORDS = {f.value for f in JobField} | {k.value for k in PayloadKey if len(k.value) > 1}
SCHEDULE_WORDS = {f.value for f in ScheduleField}


@pytest.mark.parametrize("path", sorted(LUA_DIR.glob("*.lua")), ids=lambda p: p.stem)
def test_no_script_spells_a_job_payload_or_schedule_field(path: Path) -> None:
    words = SCHEDULE_WORDS if path.stem.startswith("schedule_") else JOB_WORDS
    literals = {s[1:-1] for s in STRING.findall(_code(path))}
    assert not literals & words, f"{path.name}: use the JF./PK./SF. names for {literals & words}"


def test_the_lua_prelude_names_every_field_and_code() -> None:
    prelude = schema.lua_prelude()
    for field in TaskField:
        assert f"local {field.lua_name} = '{field.value}'" in prelude
    for table, fields in LUA_TABLES.items():
        entries = [f"{f.name} = '{f.value}'" for f in fields]
        assert f"local {table} = {{{', '.join(entries)}}}\n" in prelude
    for code in (*RETURN_CODES, *ITEM_CODES):
        assert f"local {code.name} = {code.value}\n" in prelude
