"""The lock (constraints.txt) pins every dependency pyproject.toml names, at a version its
range allows: `make` installs from it, so a dependency added without `make lock` would be
installed at whatever the registry serves that day."""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from lock_drift import canonical, locked_versions  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def declared_requirements() -> list[Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lines = [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]
    return [Requirement(line) for line in lines]


def test_the_lock_pins_every_declared_dependency_within_its_range() -> None:
    pins = locked_versions(REPO / "constraints.txt")
    for requirement in declared_requirements():
        if requirement.marker and not requirement.marker.evaluate():
            continue
        name = canonical(requirement.name)
        assert name in pins, f"{requirement.name} is not in constraints.txt: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside {requirement}: run `make lock`"
        )


def test_the_lock_pins_exact_versions_only() -> None:
    lines = (REPO / "constraints.txt").read_text().splitlines()
    requirements = [line for line in lines if line and not line.startswith((" ", "#"))]
    assert requirements and all(re.fullmatch(r"[A-Za-z0-9._-]+==\S+", r) for r in requirements)
