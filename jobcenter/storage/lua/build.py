"""The text of each Lua transition: its file with the generated state constants and the
shared preludes it uses prepended (script sets, constants inlined, unused functions shaken
out). Scripts (__init__.py) sends it as EVALSHA; library.py makes a Functions library of it."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections import Counter
from functools import cache
from importlib import resources

from ..keyspace.schema import lua_prelude

# Scripts that run in the context of one job (_job.lua: its keys and fields; _cascade.lua:
# queueing, history, the frontier, its end; _data.lua: results, inputs, run-time fan-out);
# the others see only _common.lua.
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
        "lost",
        "resubmit",
        "revive",
        "clear",
        "mark",
        "delete",
        "compact",
        "restore",
        "pause_job",
        "resume_job",
        "mark_late",
        "signal",
        "await_due",
        "await_settle",
        "spawned",
        "archived",
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
        "queue_pause",
        "reconcile_slots",
        "shard_lease",
        "hashtables",
        "save_logs",
        "await_register",
        "archive_status",
    }
)
ALL_SCRIPTS = JOB_SCRIPTS | SHARD_SCRIPTS
# Job scripts that put ended tasks back to run again, or count a task's parents afresh
# (_reset.lua).
RESET_SCRIPTS = frozenset({"revive", "clear", "mark", "repair"})
# Scripts besides the job scripts that take or give back pool and limit slots (_slots.lua).
SLOT_SCRIPTS = frozenset({"claim", "pool_set", "rate_set", "reconcile_slots"})


def _read(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.lua").read_text()


def preludes(name: str) -> list[str]:
    """The prelude files script `name` gets, in the order they are prepended."""
    if name not in ALL_SCRIPTS:
        raise KeyError(f"no Lua script named {name!r}")
    parts = ["_common"]
    if name in JOB_SCRIPTS or name in SLOT_SCRIPTS:
        parts.append("_slots")
    if name in JOB_SCRIPTS:
        parts += ["_job", "_cascade", "_data", "_await"]
    if name in RESET_SCRIPTS:
        parts.append("_reset")
    return parts


@cache
def source(name: str) -> str:
    """The full text sent to Redis for script `name`."""
    prelude = lua_prelude()
    inlined = {part: _inline_constants(prelude, _read(part)) for part in preludes(name)}
    text = _shake(inlined, _inline_constants(prelude, _read(name)))
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


# Top-level function definitions of a prelude, which the loader drops when nothing kept
# names them: `local function f(`, `function TBL.f(`, and `function f(` or `f = function(`
# assigning a local declared earlier without a value (`local f, g`).
_DEFINITION = re.compile(
    r"^(?:local function (?P<local>\w+)|function (?P<field>\w+\.\w+)"
    r"|function (?P<assigned>\w+)|(?P<assigned_value>\w+) = function)\s*\("
)
_FUNCTION_AT_COLUMN_0 = re.compile(r"^(?:local\s+)?function\b|^[\w.]+\s*=\s*function\b")
_FORWARD_DECLARATION = re.compile(r"^local (\w+(?:\s*,\s*\w+)*)\s*$")
_END = re.compile(r"^end\s*$")
# What opens and closes a block or a bracket (`while` and `for` open with their `do`).
_NESTING = re.compile(r"\b(?:(function|if|do|repeat)|(end|until))\b|([({\[])|([)}\]])")
# A name, or a table's field (`TBL.f`, `TBL:f`); not a field of a field, but `a..b` is a name.
_NAME = re.compile(r"(?<![\w:])(?<![^.]\.)([A-Za-z_]\w*)(?:\s*[.:]\s*([A-Za-z_]\w*))?")
# `local a, b` declares names: no use of them.
_LOCAL_NAMES = re.compile(r"\blocal\s+(?!function\b)\w+(?:\s*,\s*\w+)*")


@dataclasses.dataclass(frozen=True)
class _Chunk:
    """Consecutive lines of a prelude: one function definition the loader may drop (`name`,
    its comment lines above included), or code it keeps."""

    text: str
    name: str | None = None


def _code_lines(text: str) -> list[str]:
    """The text's lines without comments and with every string literal empty."""

    def blank(match: re.Match[str]) -> str:
        if match[1] is None:
            return match.group()
        return "\n" * match[1].count("\n") if match[1].startswith("--") else "''"

    return _TOKEN.sub(blank, text).split("\n")


def _nesting(line: str) -> int:
    """How many more blocks and brackets the line opens than it closes."""
    depth = 0
    for match in _NESTING.finditer(line):
        depth += 1 if match[1] or match[3] else -1
    return depth


def _definition_end(file: str, code: list[str], first: int, name: str) -> int:
    """The line of the `end` at column 0 that closes the definition starting at `first`
    (`first` itself for a one-line definition)."""
    depth = _nesting(code[first])
    last = first
    while depth > 0:
        last += 1
        if last == len(code):
            raise ValueError(f"{file}.lua line {first + 1}: {name} has no `end` at column 0")
        depth += _nesting(code[last])
        if code[last][:1].strip() or depth <= 0:  # a line at column 0, or the block closed
            if depth == 0 and _END.match(code[last]):
                break
            raise ValueError(
                f"{file}.lua line {first + 1}: {name} must end with `end` at column 0 "
                f"(line {last + 1} is not indented, or closes it)"
            )
    if depth < 0:
        raise ValueError(f"{file}.lua line {first + 1}: {name} closes more than it opens")
    return last


def _chunks(file: str, text: str, forward: set[str]) -> list[_Chunk]:
    """The prelude cut into its top-level function definitions and the code between them,
    from its layout: a definition starts at column 0, outside any block, and ends with `end`
    at column 0 (or on its own line). A prelude that breaks the layout is refused.
    `forward` gathers the locals declared without a value, which `function f(` may assign."""
    lines, code = text.split("\n"), _code_lines(text)
    chunks: list[_Chunk] = []
    depth = start = i = 0
    while i < len(lines):
        match = _DEFINITION.match(code[i]) if depth == 0 else None
        name = next(n for n in match.groups() if n) if match else ""
        if match and (match["local"] or match["field"] or name in forward):
            first = i  # with its comment lines
            while first > start and lines[first - 1].startswith("--") and not code[first - 1]:
                first -= 1
            last = _definition_end(file, code, i, name)
            if start < first:
                chunks.append(_Chunk("\n".join(lines[start:first])))
            chunks.append(_Chunk("\n".join(lines[first : last + 1]), name))
            start = i = last + 1
            continue
        if depth and _FUNCTION_AT_COLUMN_0.match(code[i]):
            raise ValueError(
                f"{file}.lua line {i + 1}: a function at column 0 inside a block; indent it"
            )
        if depth == 0 and (declared := _FORWARD_DECLARATION.match(code[i])):
            forward.update(_WORD.findall(declared[1]))
        depth += _nesting(code[i])
        if depth < 0:
            raise ValueError(f"{file}.lua line {i + 1}: closes a block nothing opened")
        i += 1
    if start < len(lines):
        chunks.append(_Chunk("\n".join(lines[start:])))
    return chunks


def _needs(text: str) -> set[str]:
    """The names and table fields (`TBL.f`) the code names; a table passed as a value
    (`TBL[k]`, `pairs(TBL)`, `TBL:f()` passing it as `self`) names itself, `TBL`."""
    code = _LOCAL_NAMES.sub("", "\n".join(_code_lines(text)))
    needs = set()
    for match in _NAME.finditer(code):
        table, field = match.groups()
        needs.add(f"{table}.{field}" if field else table)
        if field and code[match.end(1) : match.start(2)].strip() == ":":
            needs.add(table)
    return needs


def _shake(preludes: dict[str, str], script: str) -> str:
    """The preludes and the script, without the preludes' functions that nothing kept names:
    each EVALSHA runs the whole chunk again, building a closure for every function it
    defines (~30 us for all of them), while a script calls a few. A function named only by
    functions dropped goes too."""
    forward: set[str] = set()
    chunks = [c for file, text in preludes.items() for c in _chunks(file, text, forward)]
    chunks.append(_Chunk(script))
    definitions: dict[str, list[int]] = {}
    for k, chunk in enumerate(chunks):
        if chunk.name:
            definitions.setdefault(chunk.name, []).append(k)
    tables = {name.split(".")[0] for name in definitions if "." in name}
    kept: set[int] = set()
    pending = [k for k, chunk in enumerate(chunks) if not chunk.name]
    while pending:
        k = pending.pop()
        if k in kept:
            continue
        kept.add(k)
        for need in _needs(chunks[k].text):
            if need in definitions:
                pending += definitions[need]
            elif need in tables:  # used as a value: any of its functions may be called
                pending += [
                    d for n, ds in definitions.items() if n.startswith(need + ".") for d in ds
                ]
    return "\n".join(chunk.text for k, chunk in enumerate(chunks) if k in kept)


@cache
def sha(name: str) -> str:
    return hashlib.sha1(source(name).encode()).hexdigest()
