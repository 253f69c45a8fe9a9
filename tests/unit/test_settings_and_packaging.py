"""Settings checked where they enter, URLs fit for a log line, and a dependency floor that
matches the features the code uses."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from jobcenter.config import Settings, redacted_url

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
