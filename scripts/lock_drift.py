"""Which installed packages moved from the lock: run by `make test-latest` in its venv of the
newest versions, so a red suite there comes with the names of the releases that may be why.

    python scripts/lock_drift.py constraints.txt
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path


def canonical(name: str) -> str:
    """A distribution's name as the registries compare them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_versions(lock: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in lock.read_text().splitlines():
        if match := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;]+)", line):
            pins[canonical(match[1])] = match[2]
    return pins


def installed_versions() -> dict[str, str]:
    return {canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}


def main() -> int:
    lock = Path(sys.argv[1] if len(sys.argv) > 1 else "constraints.txt")
    pinned, installed = locked_versions(lock), installed_versions()
    moved = [
        f"  {name}: {pinned[name]} -> {installed[name]}"
        for name in sorted(pinned.keys() & installed.keys())
        if pinned[name] != installed[name]
    ]
    added = [
        f"  {name} {installed[name]}"
        for name in sorted(installed.keys() - pinned.keys())
        if name not in ("jobcenter", "pip")
    ]
    if moved:
        print(f"moved from {lock} ({len(moved)}):", *moved, sep="\n")
    if added:
        print(f"not in {lock} ({len(added)}):", *added, sep="\n")
    if not moved and not added:
        print(f"nothing moved from {lock}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
