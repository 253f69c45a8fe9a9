"""The README's YAML blocks are specs the spec loader takes, exactly as printed: a newcomer
copying one gets a job, not an error. A block that is part of a spec (a `notify:` section)
is loaded with a name and a task added."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobcenter.model.spec import load_spec_file

README = Path(__file__).resolve().parents[2] / "README.md"
YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)
# What a block that is only part of a spec is completed with.
COMPLETION = {"name": "name: readme\n", "tasks": "tasks: [{id: a, task: myapp.tasks.a}]\n"}


def readme_blocks() -> list[tuple[int, str]]:
    """Each ```yaml block of the README, with the line it starts on."""
    text = README.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in YAML_BLOCK.finditer(text)]


BLOCKS = readme_blocks()


@pytest.mark.parametrize(("line", "block"), BLOCKS, ids=[f"line {line}" for line, _ in BLOCKS])
def test_every_readme_yaml_block_loads_as_a_spec(tmp_path: Path, line: int, block: str) -> None:
    top_keys = set(re.findall(r"^(\w+):", block, re.MULTILINE))
    added = "".join(text for key, text in COMPLETION.items() if key not in top_keys)
    path = tmp_path / "readme.yaml"
    path.write_text(block + added)

    load_spec_file(path)  # raises SpecError naming what is wrong
