"""What a spec file's YAML means: every duration key takes every duration form, and only
`true` and `false` are booleans (YAML 1.2): `on`, `off`, `yes`, `no` stay text, as keys and
as values, for every key a spec knows (taken from the spec's own key sets, so a new key is
covered as soon as it exists)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobcenter.errors import SpecError
from jobcenter.model import documents
from jobcenter.model.notify import NOTIFY_KEYS
from jobcenter.model.spec import (
    _JOB_KEYS,
    _TASK_KEYS,
    MAX_SPEC_FILE_BYTES,
    SPEC_MAX_DEPTH,
    JobSpec,
    load_spec_file,
)

FORMS = "(seconds, or 90s, 15m, 3d, PT1H)"
JOB_DURATIONS = ["retention"]
TASK_DURATIONS = ["timeout", "retry_backoff", "retry_backoff_max", "estimate"]
# YAML 1.1's booleans besides true/false, in the cases it knew them
WORDS = ["on", "off", "yes", "no", "On", "OFF", "Yes", "NO"]


def spec_text(job: dict[str, str] | None = None, task: dict[str, str] | None = None) -> str:
    """A valid spec's YAML with some of its lines replaced (values written as YAML text)."""
    job_lines = {"name": "j", **(job or {})}
    task_lines = {"id": "a", "task": "t.a", **(task or {})}
    text = "".join(f"{key}: {value}\n" for key, value in job_lines.items() if key != "tasks")
    if "tasks" in job_lines:
        return text + f"tasks: {job_lines['tasks']}\n"
    first, *rest = task_lines.items()
    text += f"tasks:\n  - {first[0]}: {first[1]}\n"
    return text + "".join(f"    {key}: {value}\n" for key, value in rest)


def load(tmp_path: Path, text: str) -> JobSpec:
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return load_spec_file(path)


def raw(tmp_path: Path, text: str) -> Any:
    """The plain data the spec loader reads from `text`, before any spec check."""
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return documents.load(path, "spec", max_bytes=MAX_SPEC_FILE_BYTES, max_depth=SPEC_MAX_DEPTH)


# -- durations ---------------------------------------------------------------------------------


# ("90" quoted: seconds written as text; a bare 90 is a YAML number, read as ever)
@pytest.mark.parametrize("written", ['"90"', "90s", "1m30s", "1.5m", "PT1M30S", "pt90s"])
@pytest.mark.parametrize("key", JOB_DURATIONS + TASK_DURATIONS)
def test_every_duration_key_takes_every_form(tmp_path: Path, key: str, written: str) -> None:
    where = {"job": {key: written}} if key in JOB_DURATIONS else {"task": {key: written}}

    spec = load(tmp_path, spec_text(**where))

    owner = spec if key in JOB_DURATIONS else spec.tasks[0]
    assert getattr(owner, key) == 90.0


@pytest.mark.parametrize("key", JOB_DURATIONS + TASK_DURATIONS)
def test_a_duration_key_in_no_form_is_refused_with_the_one_message(
    tmp_path: Path, key: str
) -> None:
    where = {"job": {key: "90 s"}} if key in JOB_DURATIONS else {"task": {key: "90 s"}}

    with pytest.raises(SpecError) as err:
        load(tmp_path, spec_text(**where))

    place = "job" if key in JOB_DURATIONS else "task 'a'"
    assert str(err.value).endswith(f": {place}: {key!r} must be a duration {FORMS}, got '90 s'")


# -- booleans: only true and false -------------------------------------------------------------


def placed(key: str, value: str) -> str:
    """A spec with `key: value` where that key belongs (the job, its task, its notify)."""
    if key in NOTIFY_KEYS:
        keys = {"on": "[failed]", "webhook": '"https://ops.example.com/hook"', key: value}
        inner = ", ".join(f"{k}: {v}" for k, v in keys.items())
        return spec_text(job={"notify": "{" + inner + "}"})
    if key in _JOB_KEYS:
        return spec_text(job={key: value})
    assert key in _TASK_KEYS
    return spec_text(task={key: value})


def value_at(data: Any, key: str) -> Any:
    if key in NOTIFY_KEYS:
        return data["notify"][key]
    return data[key] if key in _JOB_KEYS else data["tasks"][0][key]


EVERY_KEY = sorted(_JOB_KEYS | _TASK_KEYS | NOTIFY_KEYS)


@pytest.mark.parametrize("word", WORDS)
@pytest.mark.parametrize("key", EVERY_KEY)
def test_on_off_yes_no_stay_text_as_the_value_of_every_key(
    tmp_path: Path, key: str, word: str
) -> None:
    text = placed(key, word)

    assert value_at(raw(tmp_path, text), key) == word
    try:
        spec = load(tmp_path, text)
    except SpecError as exc:  # a key that takes no text refuses it as text, not as a bool
        problem = str(exc).split(": ", 1)[1]  # after the file's name
        assert not any(bool_word in problem for bool_word in ("True", "False", "bool")), problem
    else:  # a key that takes text keeps it
        assert word in str(value_at(spec.to_dict(), key))


PLACES = {"job": _JOB_KEYS, "task": _TASK_KEYS, "notify": NOTIFY_KEYS}


@pytest.mark.parametrize(
    ("place", "word"),
    [(place, word) for place, known in PLACES.items() for word in WORDS if word not in known],
)
def test_on_off_yes_no_stay_text_as_unknown_keys(tmp_path: Path, place: str, word: str) -> None:
    entry = {word: "1"}
    text = {
        "job": spec_text(job=entry),
        "task": spec_text(task=entry),
        "notify": spec_text(job={"notify": "{on: [failed], hook: true, " + word + ": 1}"}),
    }[place]

    with pytest.raises(SpecError) as err:
        load(tmp_path, text)

    assert f"unknown key {word!r}" in str(err.value)  # not: unknown key True


def test_notify_on_is_a_key(tmp_path: Path) -> None:
    spec = load(tmp_path, spec_text(job={"notify": "{on: [failed, cancelled], hook: true}"}))

    assert spec.notify is not None and spec.notify.on == ("failed", "cancelled")


def test_a_kwargs_key_or_value_on_off_yes_no_stays_text_and_true_false_stay_booleans(
    tmp_path: Path,
) -> None:
    kwargs = "{yes: no, on: Off, flag: true, other: FALSE, third: True}"

    spec = load(tmp_path, spec_text(task={"kwargs": kwargs}))

    assert spec.tasks[0].kwargs == {
        "yes": "no", "on": "Off", "flag": True, "other": False, "third": True,
    }  # fmt: skip


@pytest.mark.parametrize(("written", "hook"), [("true", True), ("True", True), ("TRUE", True),
                                               ("false", False), ("False", False)])  # fmt: skip
def test_true_and_false_are_still_booleans_where_one_is_meant(
    tmp_path: Path, written: str, hook: bool
) -> None:
    notify = '{on: [failed], webhook: "https://ops.example.com/hook", hook: ' + written + "}"

    spec = load(tmp_path, spec_text(job={"notify": notify}))

    assert spec.notify is not None and spec.notify.hook is hook


@pytest.mark.parametrize("word", WORDS)
def test_on_off_yes_no_are_no_booleans_where_one_is_meant(tmp_path: Path, word: str) -> None:
    notify = '{on: [failed], webhook: "https://ops.example.com/hook", hook: ' + word + "}"

    with pytest.raises(SpecError) as err:
        load(tmp_path, spec_text(job={"notify": notify}))

    assert str(err.value).endswith(f"'hook' must be true or false, got {word!r}")
