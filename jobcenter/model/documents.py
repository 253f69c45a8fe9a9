"""YAML and JSON files from people, read into plain data within bounds.

The text is read in pieces up to a size limit (`submit /dev/zero` must not eat memory),
containers nested past a depth limit are refused while parsing (libyaml's composer
recurses in C, so a deep enough document crashed the process), and a key repeated in one
mapping is an error (both parsers would keep the last value without a word, so a second
`retries:` would silently win). Only `true` and `false` are booleans, as in YAML 1.2:
YAML 1.1 also reads `on`, `off`, `yes` and `no` so, and `notify: {on: [failed]}` would
get the key True. Every problem raises SpecError naming the file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import Composer, ComposerError
from yaml.constructor import SafeConstructor
from yaml.events import MappingStartEvent, SequenceStartEvent
from yaml.nodes import MappingNode, ScalarNode
from yaml.resolver import Resolver

from jobcenter.errors import SpecError

READ_PIECE_BYTES = 1 << 20  # read(n) sets n bytes aside up front: the limit is read in pieces
KEY_SHOWN_CHARS = 40  # a repeated key is named, cut to this


def load(path: Path, where: str, *, max_bytes: int, max_depth: int) -> object:
    """The plain data in `path`: JSON if it ends with .json, else YAML (safe: plain data
    only). `where` names the file in errors ("spec file '...'")."""
    text = _read_text(path, where, max_bytes)
    try:
        if path.suffix.lower() == ".json":
            return _parse_json(text, where)
        return _parse_yaml(text, where, max_depth)
    except _TooDeep as exc:
        at = f" ({_position(exc.mark)})" if exc.mark else ""
        raise SpecError(f"{where} nests deeper than {max_depth} levels{at}") from None


def _read_text(path: Path, where: str, max_bytes: int) -> str:
    raw = bytearray()
    try:
        with path.open("rb") as file:
            while len(raw) <= max_bytes and (piece := file.read(READ_PIECE_BYTES)):
                raw += piece
    except FileNotFoundError:
        raise SpecError(f"{where} not found") from None
    except OSError as exc:
        raise SpecError(f"{where} cannot be read: {exc.strerror}") from None
    if len(raw) > max_bytes:
        raise SpecError(f"{where} is larger than {max_bytes} bytes (the limit)")
    try:
        return raw.decode("utf-8-sig")  # an editor's byte order mark is no error
    except UnicodeDecodeError as exc:
        raise SpecError(f"{where} is not UTF-8 text: {exc.reason} at byte {exc.start}") from None


class _TooDeep(Exception):
    """A document nests containers deeper than the limit."""

    def __init__(self, mark: yaml.Mark | None = None) -> None:
        super().__init__()
        self.mark = mark


class _RepeatedKey(Exception):
    """A JSON object holds the same key twice."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _RepeatedKey(key)
            seen.add(key)
    return obj


def _parse_json(text: str, where: str) -> object:
    try:
        return json.loads(text, object_pairs_hook=_json_object)
    except json.JSONDecodeError as exc:
        raise SpecError(
            f"{where} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except _RepeatedKey as exc:
        raise SpecError(f"{where} repeats the key {_key(exc.key)} in one object") from None
    except RecursionError:  # json recurses per level, with no depth hook: far deeper, caught
        raise _TooDeep() from None


def _parse_yaml(text: str, where: str, max_depth: int) -> object:
    try:
        try:
            return _compose(_Loader, text, max_depth)
        except yaml.YAMLError as exc:
            if not _refused_as_too_deep(exc):
                raise
            # libyaml looks up to 1,024 characters ahead and refuses a flow nested deeper
            # than its own limit (PyYAML 6.0.4's wheels) before our composer sees the level
            # past ours. The pure-Python parser has no such limit, so our depth check decides
            # and names its own place, whichever PyYAML is installed.
            return _compose(_PythonLoader, text, max_depth)
    except yaml.YAMLError as exc:
        raise SpecError(f"{where} is not valid YAML: {_yaml_problem(exc)}") from None


def _compose(loader_class: type[_BoundedComposer], text: str, max_depth: int) -> object:
    loader: Any = loader_class(text, max_depth)  # type: ignore[call-arg]
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _refused_as_too_deep(exc: yaml.YAMLError) -> bool:
    """Whether the parser refused the text for nesting past a limit of its own."""
    return "nesting depth" in str(getattr(exc, "problem", "") or "")


def _key(key: str) -> str:
    return repr(key if len(key) <= KEY_SHOWN_CHARS else key[:KEY_SHOWN_CHARS] + "...")


class _BoundedComposer(Composer):
    """YAML's composer (nodes from parser events), refusing containers nested deeper than
    `max_depth` and a key repeated in one mapping."""

    max_depth: int
    _depth = 0
    check_event: Callable[..., bool]  # from the parser it is mixed with
    peek_event: Callable[[], Any]

    def compose_node(self, parent: Any, index: Any) -> Any:
        opens = self.check_event(SequenceStartEvent, MappingStartEvent)  # exact classes
        if opens:
            self._depth += 1
            if self._depth > self.max_depth:
                raise _TooDeep(self.peek_event().start_mark)
        try:
            return super().compose_node(parent, index)
        finally:
            if opens:
                self._depth -= 1

    def compose_mapping_node(self, anchor: Any) -> MappingNode:
        node: MappingNode = super().compose_mapping_node(anchor)
        seen: set[tuple[str, str]] = set()
        for key, _ in node.value:
            if isinstance(key, ScalarNode) and key.tag != _MERGE_TAG:
                if (key.tag, key.value) in seen:
                    raise ComposerError(
                        "while reading a mapping",
                        node.start_mark,
                        f"found the key {_key(key.value)} twice",
                        key.start_mark,
                    )
                seen.add((key.tag, key.value))
        return node


_MERGE_TAG = "tag:yaml.org,2002:merge"  # `<<: *defaults` may repeat keys on purpose


class _PythonEventParser(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser):
    """PyYAML's own parser (events), in Python: slower than libyaml's, with no depth limit."""

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)


# libyaml's parser (events) when PyYAML was built with it: faster
_EventParser: type = yaml.cyaml.CParser if yaml.__with_libyaml__ else _PythonEventParser  # type: ignore[attr-defined]


_BOOL_TAG = "tag:yaml.org,2002:bool"


class BooleanResolver(Resolver):
    """YAML's implicit types with YAML 1.2's booleans: only true and false (any case), so
    `on`, `off`, `yes`, `no` stay text as keys and as values."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
        for first, resolvers in Resolver.yaml_implicit_resolvers.items()
    }


BooleanResolver.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def _bounded_loader(event_parser: type) -> type[_BoundedComposer]:
    """Safe YAML (plain data only) through the bounded composer, on `event_parser`."""

    class Loader(_BoundedComposer, event_parser, SafeConstructor, BooleanResolver):  # type: ignore[misc]
        def __init__(self, stream: str, max_depth: int) -> None:
            event_parser.__init__(self, stream)  # type: ignore[misc]
            _BoundedComposer.__init__(self)
            SafeConstructor.__init__(self)
            BooleanResolver.__init__(self)
            self.max_depth = max_depth

    return Loader


_Loader = _bounded_loader(_EventParser)
_PythonLoader = _bounded_loader(_PythonEventParser)


def _position(mark: yaml.Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """The YAML error as one line: what went wrong and where (1-based line and column)."""
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow
        return f"character #x{exc.character:04x} at offset {exc.position}: {exc.reason}"
    problem = getattr(exc, "problem", None) or str(exc)
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    if mark is None:
        return str(problem)
    return f"{problem} ({_position(mark)})"
