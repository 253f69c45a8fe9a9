"""The Redis schema is named once (jobcenter/storage/schema.py): every script's documented
return codes are the table's, and no script spells a task field, a return code or a job
field the table does not name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_lua_source import LUA_DIR, STRING, _code

from jobcenter.errors import StaleToken, UnknownJob, WrongState
from jobcenter.storage import schema
from jobcenter.storage.lua import ALL_SCRIPTS
from jobcenter.storage.schema import ITEM_CODES, RETURN_CODES, JobField, TaskField

SCRIPTS = sorted(ALL_SCRIPTS)
# A task field's prefix as a Lua literal: 's:' in 's:' .. i
FIELD_LITERAL = re.compile(r"^['\"]([a-z]{1,2}):['\"]$")
# A script returning a number instead of a named code: `return {-4}`, `code = -2`
NUMERIC_CODE = re.compile(r"return \{\s*-?\d|\bcode = -?\d")
# Job-hash reads and writes: HGET/HSET/HMGET/... J, 'field', ...
JOB_HASH_CALL = re.compile(r"redis\.call\('(H[A-Z]+)', J, ([^)]*)\)")
FIELD_LISTS = {"HGET", "HMGET", "HDEL", "HEXISTS"}


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


def test_a_value_is_shared_only_by_codes_of_different_scripts() -> None:
    for codes in (RETURN_CODES, ITEM_CODES):
        names = [c.name for c in codes]
        assert len(names) == len(set(names))
        for a in codes:
            for b in codes:
                if a is not b and a.value == b.value:
                    assert not a.scripts & b.scripts, f"{a.name} and {b.name} share a script"


def test_the_exception_table_agrees_with_the_schema() -> None:
    assert StaleToken.code == schema.code("STALE_TOKEN")
    assert WrongState.code == schema.code("WRONG_STATE")
    assert UnknownJob.code == schema.code("JOB_GONE")


@pytest.mark.parametrize("path", sorted(LUA_DIR.glob("*.lua")), ids=lambda p: p.stem)
def test_no_script_spells_a_task_field_prefix(path: Path) -> None:
    prefixes = {f.value for f in TaskField}
    literals = [s for s in STRING.findall(_code(path)) if FIELD_LITERAL.match(s)]
    assert not [s for s in literals if s[1:-1] in prefixes], f"{path.name}: use the TF_ names"


@pytest.mark.parametrize("path", sorted(LUA_DIR.glob("*.lua")), ids=lambda p: p.stem)
def test_no_script_returns_a_numeric_code(path: Path) -> None:
    assert not NUMERIC_CODE.search(_code(path)), f"{path.name}: use the schema's code names"


@pytest.mark.parametrize("path", sorted(LUA_DIR.glob("*.lua")), ids=lambda p: p.stem)
def test_every_job_hash_field_a_script_reads_is_in_the_schema(path: Path) -> None:
    named = set()
    for command, args in JOB_HASH_CALL.findall(_code(path)):
        literals = [s[1:-1] for s in STRING.findall(args)]
        # reads name only fields; a write's first literal is a field (its values come after)
        named.update(literals if command in FIELD_LISTS else literals[:1])
    unknown = named - {f.value for f in JobField}
    assert not unknown, f"{path.name}: job fields missing from schema.JobField: {unknown}"


def test_the_lua_prelude_names_every_field_and_code() -> None:
    prelude = schema.lua_prelude()
    for field in TaskField:
        assert f"local {field.lua_name} = '{field.value}'" in prelude
    for code in (*RETURN_CODES, *ITEM_CODES):
        assert f"local {code.name} = {code.value}\n" in prelude
