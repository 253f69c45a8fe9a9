"""Loads the Lua transitions: each file gets the generated state constants and the shared
preludes prepended. Calls go out as EVALSHA; a server that answers NOSCRIPT (restarted,
flushed) gets the script loaded again and the call repeated."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from functools import cache
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError, RedisError

from ..schema import lua_prelude

# Scripts that run in the context of one job (_job.lua, then _data.lua: results, inputs,
# run-time fan-out); the others see only _common.lua.
JOB_SCRIPTS = frozenset(
    {
        "submit",
        "start",
        "complete",
        "fail",
        "give_back",
        "gate_wait",
        "heartbeat",
        "expire",
        "publish_tasks",
        "queue_roots",
        "continue",
        "finalize",
        "cancel",
        "release",
        "repair",
        "resubmit",
        "revive",
        "delete",
        "compact",
        "restore",
    }
)
SHARD_SCRIPTS = frozenset(
    {
        "claim",
        "singleton",
        "schedule_add",
        "schedule_save",
        "schedule_remove",
        "notify_claim",
        "notify_attempt",
        "notify_done",
        "pool_set",
        "rate_set",
        "reconcile_slots",
        "shard_lease",
        "hashtables",
    }
)
ALL_SCRIPTS = JOB_SCRIPTS | SHARD_SCRIPTS
# Scripts besides the job scripts that take or give back pool and limit slots (_slots.lua).
SLOT_SCRIPTS = frozenset({"claim", "pool_set", "rate_set", "reconcile_slots"})


def _read(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.lua").read_text()


@cache
def source(name: str) -> str:
    """The full text sent to Redis for script `name`."""
    if name not in ALL_SCRIPTS:
        raise KeyError(f"no Lua script named {name!r}")
    body = [_read("_common")]
    if name in JOB_SCRIPTS or name in SLOT_SCRIPTS:
        body.append(_read("_slots"))
    if name in JOB_SCRIPTS:
        body += [_read("_job"), _read("_data")]
    body.append(_read(name))
    prelude = lua_prelude()
    text = _inline_constants(prelude, "\n".join(body))
    return "\n".join([_constants_used(prelude, text), text])


# The prelude's constants: scalars (`local TF_STATE = 's:'`, `local OK = 0`) and tables of
# them (`local JF = {STATE = 'state', ...}`).
_SCALAR = re.compile(r"^local (\w+) = ('[^'\\]*'|-?\d+)$", re.M)
_TABLE = re.compile(r"^local (\w+) = \{((?:\w+ = '[^'\\]*'(?:, )?)+)\}$", re.M)
_ENTRY = re.compile(r"(\w+) = ('[^'\\]*')")
# Comments and string literals (left as they are), or a name, maybe with a field.
_TOKEN = re.compile(
    r"""(--\[\[.*?\]\]|--[^\n]*|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")"""
    r"|(?<![\w.:])([A-Za-z_]\w*)(?:\.(\w+))?(\s*=(?!=))?",
    re.S,
)
# Names a script declares: locals, functions (`function T.f` names none: it sets a field)
# and their parameters, loop variables.
_DECLARED = re.compile(
    r"\blocal\s+(?!function\b)(?P<locals>\w+(?:\s*,\s*\w+)*)"
    r"|\bfunction\s*(?P<function>[\w.:]*)\s*\((?P<params>[^)]*)\)"
    r"|\bfor\s+(?P<loop>\w+(?:\s*,\s*\w+)*)\s+(?:in\b|=)"
)


def _declared(code: str) -> set[str]:
    names: set[str] = set()
    for m in _DECLARED.finditer(code):
        function = m["function"] if _WORD.fullmatch(m["function"] or "") else ""
        names.update(_WORD.findall(" ".join(filter(None, [*m.group(1, 3, 4), function]))))
    return names


def _inline_constants(prelude: str, body: str) -> str:
    """The body with each of the prelude's constants written as its value: a literal costs
    nothing per call, while a local captured by a function makes every call build that
    closure's upvalue (found by a walk of all the captured locals, ~200 here). The source
    files keep the names (schema.py is where each value is spelled)."""
    values = {m[1]: m[2] for m in _SCALAR.finditer(prelude)}
    tables = {m[1]: dict(_ENTRY.findall(m[2])) for m in _TABLE.finditer(prelude)}
    code = _TOKEN.sub(lambda m: "''" if m[1] else m.group(), body)  # no comment, no string
    shadowed = _declared(code) & (values.keys() | tables.keys())
    if shadowed:
        raise ValueError(f"Lua declares a local named like the constant {shadowed.pop()}")

    def literal(match: re.Match[str]) -> str:
        kept, name, field, assigned = match.groups()
        if kept or name not in values and name not in tables:
            return match.group()
        if assigned:
            raise ValueError(f"Lua assigns to the constant {name}")
        if name in tables:
            if field not in tables[name]:
                return match.group()
            return tables[name][field]
        value = values[name]
        return (f"({value})" if value.startswith("-") else value) + (f".{field}" if field else "")

    return _TOKEN.sub(literal, body)


_CONSTANT = re.compile(r"local (\w+) = ")
_WORD = re.compile(r"\w+")


def _constants_used(prelude: str, body: str) -> str:
    """The prelude without the constants that neither the body nor another kept constant
    names: Lua allows a script 200 locals, and the generated names alone take over 100."""
    lines = prelude.splitlines()
    code = _TOKEN.sub(lambda m: "''" if m[1] else m.group(), body)  # names in comments: no use
    uses = Counter(_WORD.findall(code + "\n" + prelude))
    dropped: set[int] = set()
    changed = True
    while changed:
        changed = False
        for i, line in enumerate(lines):
            match = _CONSTANT.match(line)
            if i in dropped or not match or uses[match.group(1)] > 1:
                continue
            dropped.add(i)  # named only where it is defined
            uses.subtract(_WORD.findall(line))
            changed = True
    return "\n".join(line for i, line in enumerate(lines) if i not in dropped) + "\n"


@cache
def sha(name: str) -> str:
    return hashlib.sha1(source(name).encode()).hexdigest()


class Scripts:
    """Runs the scripts on one Redis client: `run` for one call, `batch` for a pipeline."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis

    def load(self, name: str) -> None:
        self.redis.script_load(source(name))

    def run(self, name: str, keys: list[str], args: list[Any]) -> Any:
        """Run script `name` now and return its reply."""
        try:
            return self.redis.evalsha(sha(name), len(keys), *keys, *args)
        except NoScriptError:
            self.load(name)
            return self.redis.evalsha(sha(name), len(keys), *keys, *args)

    def batch(self) -> Batch:
        return Batch(self)


class Batch:
    """Script calls sent in one pipeline (one round trip), replies in call order."""

    def __init__(self, scripts: Scripts) -> None:
        self.scripts = scripts
        self.calls: list[tuple[str, list[str], list[Any]]] = []

    def add(self, name: str, keys: list[str], args: list[Any]) -> None:
        self.calls.append((name, keys, args))

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send the calls; their replies in order. A call Redis refused (out of memory,
        read-only, ...) raises its error, or with `raise_on_error` off stands in its place,
        so the caller can keep what the other calls did."""
        if not self.calls:
            return []
        pipe = self.scripts.redis.pipeline(transaction=False)
        for name, keys, args in self.calls:
            pipe.execute_command("EVALSHA", sha(name), len(keys), *keys, *args)
        replies = pipe.execute(raise_on_error=False)
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):  # that call did not run: load, run it again
                try:
                    replies[i] = reply = self.scripts.run(*self.calls[i])
                except RedisError as exc:
                    replies[i] = reply = exc
            if raise_on_error and isinstance(reply, Exception):
                raise reply
        return replies
