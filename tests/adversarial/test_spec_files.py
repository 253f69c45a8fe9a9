"""Property tests of spec files (load_spec_file): any bytes at all, malformed specs as YAML
and JSON, documents that are not mappings, deep nesting, repeated keys, alias bombs and
endless files. Each gives a SpecError naming the file and the problem."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st
from spec_strategies import FILES, Broken, broken_specs, file_garbage

from jobcenter.errors import SpecError
from jobcenter.model import spec as spec_module
from jobcenter.model.spec import SPEC_MAX_DEPTH, load_spec_file

SUFFIXES = st.sampled_from([".yaml", ".json"])


def write(tmp: Path, suffix: str, content: bytes | str) -> Path:
    path = tmp / f"spec{suffix}"
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


def refusal(path: Path) -> str:
    """The SpecError message for a spec file (failing if it loads), which names the file."""
    with pytest.raises(SpecError) as info:
        load_spec_file(path)
    message = str(info.value)
    assert message.startswith(f"spec file {str(path)!r}"), message
    assert len(message) <= 600, message
    return message


def dump(data: Any, suffix: str) -> str:
    if suffix == ".json":
        return json.dumps(data)
    return yaml.safe_dump(data, allow_unicode=True)


@FILES
@given(st.binary(max_size=200) | st.text(max_size=100).map(str.encode), SUFFIXES)
def test_any_bytes_load_or_give_a_spec_error(
    tmp_path_factory: pytest.TempPathFactory, content: bytes, suffix: str
) -> None:
    path = write(tmp_path_factory.mktemp("spec"), suffix, content)
    try:
        load_spec_file(path)
    except SpecError as exc:
        assert str(exc).startswith(f"spec file {str(path)!r}")


@FILES
@given(st.text(min_size=1, max_size=50), st.sampled_from(["latin-1", "utf-16", "utf-32"]))
def test_text_in_another_encoding_is_refused_as_not_utf8(
    tmp_path_factory: pytest.TempPathFactory, text: str, encoding: str
) -> None:
    content = f"name: {text}\n".encode(encoding, errors="replace")
    try:
        content.decode("utf-8")
    except UnicodeDecodeError:
        path = write(tmp_path_factory.mktemp("spec"), ".yaml", content)
        assert " is not UTF-8 text: " in refusal(path)
    else:
        assume(False)  # plain ASCII in latin-1 is UTF-8 too


@FILES
@given(broken_specs(file_garbage), SUFFIXES)
def test_a_broken_spec_file_is_refused_naming_the_field(
    tmp_path_factory: pytest.TempPathFactory, broken: Broken, suffix: str
) -> None:
    if broken.unknown and suffix == ".yaml":
        # PyYAML writes a few keys it reads back as others: a NEL (U+0085) in a quoted key
        # folds into a space, so the file holds another key than the one drawn
        assume(broken.field in yaml.safe_load(dump({broken.field: None}, suffix)))
    path = write(tmp_path_factory.mktemp("spec"), suffix, dump(broken.spec, suffix))
    try:
        load_spec_file(path)
    except SpecError as exc:
        # garbage nested too deep is refused as such, at its line and column
        named = broken.named_by(str(exc)) or " nests deeper than " in str(exc)
        assert named, f"{broken.field!r} not named in: {exc}"
    else:
        assert not broken.unknown


@FILES
@given(file_garbage.filter(lambda v: not isinstance(v, dict)), SUFFIXES)
def test_a_document_that_is_not_a_mapping_is_refused(
    tmp_path_factory: pytest.TempPathFactory, data: Any, suffix: str
) -> None:
    path = write(tmp_path_factory.mktemp("spec"), suffix, dump(data, suffix))
    message = refusal(path)
    if data is None:
        assert message.endswith(" is empty")
    elif " nests deeper than " not in message:
        assert " must hold a mapping at the top level, got " in message


@pytest.mark.parametrize("depth", [SPEC_MAX_DEPTH + 1, 1_000, 100_000])
@pytest.mark.parametrize(
    ("suffix", "opening", "closing"),
    [(".yaml", "[", "]"), (".yaml", "{a: ", "}"), (".json", "[", "]"), (".json", '{"a": ', "}")],
)
def test_deep_nesting_is_refused(
    tmp_path: Path, depth: int, suffix: str, opening: str, closing: str
) -> None:
    """libyaml's composer recursed in C: 100,000 levels crashed the process (SIGSEGV), and
    json's recursion error escaped. YAML is refused past the limit, at its place; JSON, which
    has no such hook, past what it can parse (shallower, the spec checks refuse it)."""
    text = '{"name": "j", "tasks": [{"id": "a", "task": "t", "args": ' + opening * depth
    message = refusal(write(tmp_path, suffix, text + "1" + closing * depth + "}]}"))
    if suffix == ".yaml":
        # The spec, its task list and the task hold 3 levels: the place is the args' level
        # past the limit, whatever limit the installed libyaml has of its own.
        column = len(text) - len(opening) * (depth - (SPEC_MAX_DEPTH - 3)) + 1
        assert message.endswith(
            f" nests deeper than {SPEC_MAX_DEPTH} levels (line 1, column {column})"
        ), message
    elif depth == 100_000:
        assert message.endswith(f" nests deeper than {SPEC_MAX_DEPTH} levels")


def test_nesting_a_valid_spec_can_hold_is_accepted(tmp_path: Path) -> None:
    args = "[" * (SPEC_MAX_DEPTH - 3) + "1" + "]" * (SPEC_MAX_DEPTH - 3)
    for suffix in (".yaml", ".json"):
        text = '{"name": "j", "tasks": [{"id": "a", "task": "t", "args": ' + args + "}]}"
        assert load_spec_file(write(tmp_path, suffix, text)).tasks[0].args


@pytest.mark.parametrize(
    ("suffix", "text", "problem"),
    [
        (".yaml", "name: a\nname: b\ntasks: [{id: a, task: t}]\n", "found the key 'name' twice"),
        (
            ".yaml",
            "name: j\ntasks:\n  - id: a\n    task: t\n    retries: 3\n    retries: 0\n",
            "found the key 'retries' twice (line 6, column 5)",
        ),
        (".json", '{"name": "a", "name": "b", "tasks": []}', "repeats the key 'name'"),
        (
            ".json",
            '{"name": "j", "tasks": [{"id": "a", "task": "t", "retries": 3, "retries": 0}]}',
            "repeats the key 'retries' in one object",
        ),
    ],
)
def test_a_repeated_key_is_refused(tmp_path: Path, suffix: str, text: str, problem: str) -> None:
    """PyYAML and json keep the last value without a word: the first `retries` was lost."""
    assert problem in refusal(write(tmp_path, suffix, text))


def test_yaml_merge_keys_may_still_override_what_they_merge(tmp_path: Path) -> None:
    text = """
name: j
tasks:
  - &base {id: a, task: t, retries: 3}
  - <<: *base
    id: b
    retries: 5
"""
    tasks = load_spec_file(write(tmp_path, ".yaml", text)).tasks
    assert [(t.id, t.retries) for t in tasks] == [("a", 3), ("b", 5)]


def test_a_yaml_alias_bomb_is_refused_without_expanding_it(tmp_path: Path) -> None:
    """A dozen lines of YAML whose args expand to a gigabyte (a kilobyte string, then six
    levels of ten aliases each): refused while walking, before anything that size is built."""
    lines = ["name: j", "tasks:", "  - id: a", "    task: t", "    args:"]
    lines.append("      - &x0 " + "x" * 1024)
    lines += [f"      - &x{i} [{', '.join([f'*x{i - 1}'] * 10)}]" for i in range(1, 7)]
    path = write(tmp_path, ".yaml", "\n".join(lines))
    tracemalloc.start()
    try:
        message = refusal(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "args and kwargs take more than 524288 bytes packed" in message
    assert peak < 10 * 1024 * 1024, f"{peak} bytes allocated to refuse it"


def test_an_endless_file_is_refused_at_the_size_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spec_module, "MAX_SPEC_FILE_BYTES", 1024 * 1024)
    message = refusal(Path("/dev/zero"))
    assert message.endswith(" is larger than 1048576 bytes (the limit)")


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    for suffix in (".yaml", ".json"):
        text = '{"name": "j", "tasks": [{"id": "a", "task": "t"}]}'
        assert load_spec_file(write(tmp_path, suffix, "\ufeff" + text)).name == "j"


def test_a_control_character_is_refused_with_its_offset(tmp_path: Path) -> None:
    message = refusal(write(tmp_path, ".yaml", "name: j\x07\n"))
    assert message.endswith(
        "is not valid YAML: character #x0007 at offset 7: " + "control characters are not allowed"
    )
