"""Settings checked where they enter, URLs fit for a log line, and a dependency floor that
matches the features the code uses."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path

import pytest

from jobcenter.config import BOUNDS, Settings, env_name, redacted_url

REPO_ROOT = Path(__file__).resolve().parents[2]
# rq features the code uses (rq_runner.py), and the rq release that introduced each.
RQ_FEATURES = {
    "Queue.enqueue(unique=True) raising rq.exceptions.DuplicateJobError": (2, 8),
}


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:s3cret@db.example:6380/2", "redis://:***@db.example:6380/2"),
        ("rediss://jobs:s3cret@db.example/0", "rediss://jobs:***@db.example/0"),
        ("redis://jobs@db.example:6379/0", "redis://jobs@db.example:6379/0"),
    ],
)
def test_a_url_in_a_log_line_never_shows_its_password(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


@pytest.mark.parametrize("namespace", ["", "a:b", "{ns}", "with space", "-lead"])
def test_a_namespace_that_would_break_key_names_is_refused(namespace: str) -> None:
    with pytest.raises(ValueError, match="the namespace must be 1-128 letters"):
        Settings(namespace=namespace)


@pytest.mark.parametrize("raw", ["0", "-1", "2.5", "two"])
def test_a_shard_count_from_the_environment_must_be_a_whole_number_from_1(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv("JOBCENTER_SHARDS", raw)
    with pytest.raises(ValueError, match="JOBCENTER_SHARDS"):
        Settings.from_env()


# Every numeric setting, read off Settings itself: one added later is covered at once.
NUMERIC_SETTINGS = [f.name for f in dataclasses.fields(Settings) if f.type in ("int", "float")]
# What must never pass: not a number at all, beyond any float, too small to be meant, below 0,
# and a few digits too many.
OUT_OF_BOUNDS = ["nan", "NaN", "inf", "-inf", "1e-9", "-1", "1e12", "10000000000000"]


def test_every_numeric_setting_has_bounds() -> None:
    assert len(NUMERIC_SETTINGS) >= 13
    assert sorted(BOUNDS) == sorted(NUMERIC_SETTINGS)


@pytest.mark.parametrize("setting", NUMERIC_SETTINGS)
@pytest.mark.parametrize("raw", OUT_OF_BOUNDS)
def test_a_numeric_setting_out_of_its_bounds_is_refused_naming_its_variable_and_value(
    monkeypatch: pytest.MonkeyPatch, setting: str, raw: str
) -> None:
    whole = BOUNDS[setting].whole
    monkeypatch.setenv(env_name(setting), raw)
    with pytest.raises(ValueError) as refused:
        Settings.from_env()
    message = str(refused.value)
    assert env_name(setting) in message
    if whole and not raw.lstrip("-").isdigit():
        assert f"must be a whole number, got {raw!r}" in message
    elif setting.endswith("_seconds") and f"got {raw!r}" in message:
        assert "must be a duration" in message, message  # the duration parser refused it
    else:
        assert f"got {float(raw)!r}" in message or f"got {int(raw)!r}" in message
        low, high = BOUNDS[setting].low, BOUNDS[setting].high
        assert "from" in message and "to" in message, message  # it names the bounds
        assert f"{low:g}" in message or str(int(low)) in message
        assert str(int(high)) in message


@pytest.mark.parametrize("setting", NUMERIC_SETTINGS)
def test_a_numeric_setting_given_in_python_is_checked_the_same(setting: str) -> None:
    for value in (float("nan"), float("inf"), 1e-9, -1, True, "5"):
        with pytest.raises(ValueError, match=env_name(setting)):
            Settings(**{setting: value})


@pytest.mark.parametrize("setting", NUMERIC_SETTINGS)
def test_each_bound_of_a_numeric_setting_is_itself_accepted(
    monkeypatch: pytest.MonkeyPatch, setting: str
) -> None:
    bounds = BOUNDS[setting]
    for value in (bounds.low, bounds.high):
        text = str(int(value)) if bounds.whole else repr(float(value))
        monkeypatch.setenv(env_name(setting), text)
        assert getattr(Settings.from_env(), setting) == value


def test_the_rq_floor_is_the_release_that_brought_the_features_the_code_uses() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    (requirement,) = [d for d in project["dependencies"] if re.match(r"rq\b", d)]
    match = re.fullmatch(r"rq>=(\d+)\.(\d+)(?:\.\d+)?", requirement.replace(" ", ""))
    assert match, f"rq is required as {requirement!r}: expected a plain floor, rq>=X.Y"
    floor = (int(match[1]), int(match[2]))
    needed = max(RQ_FEATURES.values())
    assert floor >= needed, f"rq>={floor[0]}.{floor[1]} lacks {RQ_FEATURES}"
    source = (REPO_ROOT / "jobcenter" / "runtime" / "rq_runner.py").read_text()
    assert "unique=True" in source and "DuplicateJobError" in source
