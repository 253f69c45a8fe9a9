"""The repository explains and checks itself: ARCHITECTURE.md names what the code has, the
documents point inside the repository for their contract, and CI runs the linters as well as
the tests, with the command `make lint` runs."""

from __future__ import annotations

import inspect
import shutil
import subprocess
from dataclasses import fields
from pathlib import Path

import pytest

from jobcenter.model.states import JobState, TaskState
from jobcenter.storage.keyspace.keys import JobKeys, Keys

REPO = Path(__file__).resolve().parents[2]
# Where the README and the code used to send readers for their contract: outside the repo.
OUTSIDE_REFERENCES = ("../shared", "shared/DESIGN", "DESIGN.md", "DESIGN section")
# The documents and code this test holds to that. (jobcenter/ joins once its docstrings
# point to ARCHITECTURE.md.)
CHECKED = [
    "README.md",
    "ARCHITECTURE.md",
    "CHANGELOG.md",
    "Makefile",
    "pyproject.toml",
    ".ci/run",
]
CHECKED_FOLDERS = ["jobcenter", "deploy", "scripts", "tests", "examples", "docs"]


def architecture() -> str:
    return (REPO / "ARCHITECTURE.md").read_text()


def test_architecture_names_every_task_and_job_state() -> None:
    text = architecture()
    missing = [s.value for s in [*TaskState, *JobState] if f"`{s.value}`" not in text]
    assert not missing, f"ARCHITECTURE.md does not name the states {missing}"


def test_architecture_names_every_lua_transition() -> None:
    scripts = sorted(p.stem for p in REPO.glob("jobcenter/**/lua/*.lua") if p.stem[0] != "_")
    assert len(scripts) > 20, scripts
    text = architecture()
    missing = [name for name in scripts if f"`{name}`" not in text]
    assert not missing, f"ARCHITECTURE.md does not name the scripts {missing}"


def test_architecture_names_every_key_family() -> None:
    """Each method of Keys that forms a key, and each key of a job, has its row."""
    key_methods = [
        name
        for name, method in inspect.getmembers(Keys, inspect.isfunction)
        if not name.startswith("_")
        and inspect.signature(method).return_annotation == "str"
        and name != "new_job_id"  # an id, not a key
    ]
    assert len(key_methods) > 20, key_methods
    method_names = set(key_methods)
    job_keys = [f"job().{f.name}" for f in fields(JobKeys) if f.name not in method_names]
    text = architecture()
    missing = [name for name in [*key_methods, *job_keys] if f"`{name}`" not in text]
    assert not missing, f"ARCHITECTURE.md has no row for the keys {missing}"


def test_no_document_points_outside_the_repository_for_its_contract() -> None:
    files = [REPO / name for name in CHECKED]
    for folder in CHECKED_FOLDERS:
        files += [
            p
            for p in (REPO / folder).rglob("*")
            if p.is_file() and "__pycache__" not in str(p) and "_build" not in p.parts
        ]
    me = Path(__file__).resolve()
    found = [
        f"{path.relative_to(REPO)}: {needle}"
        for path in files
        if path.resolve() != me
        for needle in OUTSIDE_REFERENCES
        if needle in path.read_text(errors="replace")
    ]
    assert not found, found


def test_ci_runs_make_lint_then_make_test() -> None:
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    commands = [line.strip() for line in ci if line.strip().startswith("make ")]
    assert commands == ["make lint", "make test"]


def test_make_lint_runs_ruff_check_ruff_format_check_and_mypy_on_the_package() -> None:
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    dry_run = subprocess.run(
        ["make", "-n", "lint"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    for command in (
        "ruff check jobcenter tests scripts",
        "ruff format --check jobcenter tests scripts",
        "mypy jobcenter",
    ):
        assert command in dry_run, f"`make lint` does not run `{command}`:\n{dry_run}"
