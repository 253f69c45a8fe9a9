"""The loader sends each script only the prelude functions it uses: every EVALSHA runs the
whole chunk again, building a closure for each function it defines."""

from __future__ import annotations

import re

import pytest
import redis

from jobcenter.storage.lua import ALL_SCRIPTS
from jobcenter.storage.lua import build as lua
from jobcenter.storage.lua.build import source

# A top-level function definition, as the preludes write them.
DEFINED = re.compile(r"^(?:local function (\w+)|function ([\w.]+)|(\w+) = function)\b", re.M)
COMMENT_OR_STRING = re.compile(
    r"--\[\[.*?\]\]|--[^\n]*|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"", re.S
)


def _defined(text: str) -> set[str]:
    return {next(filter(None, m.groups())) for m in DEFINED.finditer(text)}


def _unshaken(name: str) -> str:
    return "\n".join(lua._read(part) for part in [*lua.preludes(name), name])


def test_heartbeat_builds_none_of_the_functions_only_completions_and_failures_need() -> None:
    heartbeat = _defined(source("heartbeat"))
    assert {"load_job", "token_of", "lease_member", "OBS.emit"} <= heartbeat
    assert heartbeat.isdisjoint({"fail_task", "drain_frontier", "enqueue", "finalize_job"})
    assert "map_expand" not in heartbeat and "local map_ready, map_expand" in source("heartbeat")
    complete = _defined(source("complete"))
    needed = {"drain_frontier", "enqueue", "finalize_job", "map_expand", "SLOT.free_slots"}
    assert needed <= complete
    assert "fail_task" in _defined(source("fail"))


def test_a_function_named_only_by_dropped_functions_is_dropped_too() -> None:
    # msgpack_item is named only by msgpack_skip, which only map_expand names
    assert {"msgpack_item", "msgpack_skip", "map_expand"} <= _defined(source("complete"))
    assert _defined(source("heartbeat")).isdisjoint({"msgpack_item", "msgpack_skip", "be_uint"})


@pytest.mark.parametrize("name", sorted(ALL_SCRIPTS))
def test_no_kept_code_names_a_dropped_function(name: str) -> None:
    """Checked by a plainer reading than the loader's: any word of the kept code that is a
    dropped function's name (or TBL.f's field after its table) would be a call of nil."""
    text = source(name)
    code = COMMENT_OR_STRING.sub("''", text)
    code = re.sub(r"^local \w+(, \w+)*$", "", code, flags=re.M)  # declared, not named
    for dropped in _defined(_unshaken(name)) - _defined(text):
        table, _, field = dropped.rpartition(".")
        pattern = rf"\b{table}\s*[.:]\s*{field}\b" if table else rf"\b{field}\b"
        assert not re.search(pattern, code), f"{name} names {dropped}, which it dropped"


@pytest.fixture
def preludes(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Stand-in text for claim's files (_common, _slots, claim): a test sets them."""
    files = {"_common": "", "_slots": "", "claim": "return 1"}
    monkeypatch.setattr(lua, "_read", lambda name: files[name])
    return files


def _built() -> str:
    return source.__wrapped__("claim")  # type: ignore[attr-defined]  # not cached


def test_shaking_follows_calls_tables_and_forward_declared_locals(
    preludes: dict[str, str], redis_client: redis.Redis
) -> None:
    preludes["_common"] = (
        "local function leaf() return 1 end\n"
        "-- named by a dropped function only\n"
        "local function middle()\n"
        "  return leaf()\n"
        "end\n"
        "local function used(x) return x..'' end\n"
        "local T, D, M = {}, {}, {}\n"
        "function T.kept() return used(1) end\n"
        "function T.unused() return 2 end\n"
        "function D.a() return 3 end\n"  # D is indexed by a value: all of D stays
        "function D.b() return 4 end\n"
        "function M.get(self) return self.other() end\n"  # M:get passes M: all of M stays
        "function M.other() return 5 end\n"
        "local f, g\n"
    )
    preludes["_slots"] = (
        "function f(n) return n + 1 end\n"
        "g = function(n)\n"
        "  return n + 2\n"
        "end\n"
        "local function pong(n) return n end\n"
    )
    preludes["claim"] = "local k = 'a'\nreturn {T.kept(), f(1), D[k](), M:get()}\n"
    text = _built()
    assert _defined(text) == {"used", "T.kept", "D.a", "D.b", "M.get", "M.other", "f"}
    assert "named by a dropped function only" not in text  # its comment went with it
    assert "local f, g" in text
    assert redis_client.eval(text, 0) == [b"1", 2, 3, 5]


@pytest.mark.parametrize(
    ("prelude", "error"),
    [
        ("local function f()\n  return 1\n", "line 1: f has no `end` at column 0"),
        ("local function f()\n  return 1\n  end\n", "line 1: f must end with `end` at column 0"),
        ("local function f()\nreturn 1\nend\n", "line 1: f must end with `end` at column 0"),
        ("local function f()\n  if true then\nend\n", "line 1: f must end with `end` at column 0"),
        ("local T = {}\nfunction T.f() return 1 end end\n", "line 2: T.f closes more than it"),
        ("do\nlocal function f() return 1 end\nend\n", "line 2: a function at column 0 inside"),
        ("local x = 1\nend\n", "line 2: closes a block nothing opened"),
    ],
)
def test_a_prelude_that_breaks_the_layout_is_refused(
    preludes: dict[str, str], prelude: str, error: str
) -> None:
    preludes["_slots"] = prelude
    with pytest.raises(ValueError, match=re.escape(f"_slots.lua {error}")):
        _built()
