"""A script as a Redis Functions library (Redis 7 and later): the same code, with its
function definitions run once, when the library is loaded, rather than by every call.

An EVALSHA runs the whole chunk again on each call: the generated constants, the preludes'
tables and a closure for each of their functions (~90 for complete): 15 % of the commands'
Redis CPU on a chain hop. A library keeps the definitions at its top level and registers one
function whose body is the chunk's other code, in its order:

- a top-level `local` a definition names is declared once at the library's top level, where
  it stood, and assigned by the call (`local a, b = x, y` becomes `a, b = x, y`): each call
  starts it afresh, as the chunk's own local was;
- a table's functions (`function OBS.emit(...)`) live in a table of their own and reach the
  call's table through its metatable (set where the call's code builds the table), so a
  call builds no closure for them;
- KEYS and ARGV are the call's keys and arguments.

A script a library would change (a name declared twice at the top level, a table whose
functions have no table built at the top level) raises LibraryError; one the server's Lua
will not compile (a function seeing more than 60 outer locals, say) is refused at FUNCTION
LOAD. Either way the loader runs it with EVALSHA, as on a server without functions."""

from __future__ import annotations

import hashlib
import re
from functools import cache

from .build import _Chunk, _chunks, _code_lines, _needs, _nesting, source

# A top-level local statement: its names, and whether it assigns them.
_LOCAL = re.compile(r"^local\s+(?!function\b)(\w+(?:\s*,\s*\w+)*)\s*(=)?")
# A top-level assignment of a table (`OBS = {`, `local NEXT = {`), to find where a call
# builds a table with functions.
_ASSIGNED = re.compile(r"^(?:local\s+)?(\w+(?:\s*,\s*\w+)*)\s*=(?!=)")
_WORDS = re.compile(r"\w+")
_METHOD = re.compile(r"^function (\w+)\.(\w+)\s*\(")
_LOCAL_FUNCTION = re.compile(r"^local function ", re.M)


class LibraryError(ValueError):
    """The script cannot be written as a library (see the module's docstring)."""


@cache
def library(name: str) -> tuple[str, str]:
    """The library's function name and text for script `name`."""
    text = source(name)
    digest = hashlib.sha1(text.encode()).hexdigest()[:12]
    function = f"jobcenter_{name}_{digest}"
    return function, _library_text(function, text)


def _library_text(function: str, text: str) -> str:
    chunks = _chunks(function, text, set())
    definitions = [c for c in chunks if c.name]
    # names the definitions see: what the call's code must leave where they can see it
    seen: set[str] = set()
    for chunk in definitions:
        seen.update(n.split(".")[0] for n in _needs(chunk.text))
    tables = sorted({c.name.split(".")[0] for c in definitions if c.name and "." in c.name})
    built: set[str] = set()
    defined = {c.name for c in definitions if c.name and "." not in c.name}
    top = ["local KEYS, ARGV"]
    if tables:
        top.append("local METHODS = {" + ", ".join(f"{t} = {{}}" for t in tables) + "}")
        top.append(
            "local METATABLES = {"
            + ", ".join(f"{t} = {{__index = METHODS.{t}}}" for t in tables)
            + "}"
        )
    call: list[str] = []
    for chunk in chunks:
        if chunk.name:
            top.append(_as_top_level(chunk))
            continue
        hoisted, code = _call_code(chunk, seen, defined, tables, built)
        if hoisted:
            top.append("local " + ", ".join(hoisted))
        call.append(code)
    declared = [n for line in top if (m := _LOCAL.match(line)) for n in _WORDS.findall(m[1])]
    declared += [c.name for c in definitions if c.name and _LOCAL_FUNCTION.search(c.text)]
    twice = {n for n in declared if declared.count(n) > 1}
    if twice:  # the call would see only the last of them
        raise LibraryError(f"{twice.pop()} is declared twice at the top level")
    missing = set(tables) - built
    if missing:
        raise LibraryError(f"no top-level table is built for the functions of {missing.pop()}")
    body = "\n".join(call)
    return "\n".join(
        [
            f"#!lua name={function}",
            *top,
            f"redis.register_function('{function}', function(keys, args)",
            "KEYS, ARGV = keys, args",
            body,
            "end)",
            "",
        ]
    )


def _as_top_level(chunk: _Chunk) -> str:
    """A definition as the library defines it: a table's function goes to METHODS."""
    assert chunk.name
    if "." not in chunk.name:
        return chunk.text
    table, field = chunk.name.split(".")
    lines = chunk.text.split("\n")
    for k, line in enumerate(lines):
        method = _METHOD.match(line)
        if method:
            lines[k] = f"function METHODS.{table}.{field}" + line[method.end() - 1 :]
            return "\n".join(lines)
    raise LibraryError(f"cannot find the definition of {chunk.name}")


def _call_code(
    chunk: _Chunk, seen: set[str], defined: set[str], tables: list[str], built: set[str]
) -> tuple[list[str], str]:
    """The chunk's code as the call runs it, and the locals it declares that a definition
    sees (declared at the library's top level instead)."""
    lines = chunk.text.split("\n")
    code = _code_lines(chunk.text)
    hoisted: list[str] = []
    out: list[str] = []
    pending: list[str] = []  # tables with functions this statement builds
    depth = 0
    for line, bare in zip(lines, code, strict=True):
        if depth == 0:
            line = _statement(line, bare, seen, defined, hoisted)
            assigned = _ASSIGNED.match(bare)
            if assigned:
                pending += [n for n in _WORDS.findall(assigned[1]) if n in tables]
        depth += _nesting(bare)
        out.append(line)
        if depth == 0 and pending:  # the statement ended: its tables get their functions
            out += [f"setmetatable({t}, METATABLES.{t})" for t in pending]
            built.update(pending)
            pending = []
    return hoisted, "\n".join(out)


def _statement(line: str, bare: str, seen: set[str], defined: set[str], hoisted: list[str]) -> str:
    """A top-level statement's first line as the call runs it: a local a definition sees is
    assigned, not declared (a forward-declared function keeps its definition)."""
    match = _LOCAL.match(bare)
    if not match:
        return line
    names = _WORDS.findall(match[1])
    shared = [n for n in names if n in seen]
    if not shared:
        return line
    hoisted += shared
    own = [n for n in names if n not in seen]
    prefix = f"local {', '.join(own)}\n" if own else ""
    if match[2]:
        return prefix + ", ".join(names) + line[match.end(1) :]
    cleared = [n for n in shared if n not in defined]
    return prefix + (", ".join(cleared) + " = nil" if cleared else "")
