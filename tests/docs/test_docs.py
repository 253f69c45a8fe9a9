"""Every example of README.md and docs/ works as printed: specs load, Python runs, shell
commands run (each block a test: test_the_block_works_as_printed[PAGE:LINE]), and every
command a page names, run or not, exists. What the reference pages list is what the code
has: every setting, spec key and exit code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.core import Command
from commands import commands, jobcenter_problems, make_problems, make_targets
from doc_blocks import DOCS, REPO, Block, inline_code, pages, read_blocks
from page_runs import PageRuns

from jobcenter import cli
from jobcenter.cli import options
from jobcenter.model import spec


def test_the_block_works_as_printed(doc_block: Block, page_runs: PageRuns) -> None:
    page_runs.run(doc_block)


def test_every_block_is_run_or_skipped_with_a_reason() -> None:
    """read_blocks refuses a block of a kind the tier cannot run unless it is skipped with
    its reason, and an unreadable test comment; here it reads every page."""
    blocks = [block for page in pages() for block in read_blocks(page)]
    assert sum(block.runs for block in blocks) > 20  # the tier found the examples
    assert all(block.skip_reason.strip() for block in blocks if not block.runs)


def test_every_command_the_docs_show_exists() -> None:
    """Every `jobcenter` command in a block (run or skipped) or in the prose's code spans
    names commands and options the CLI has; every `make` target is the Makefile's."""
    targets = make_targets(REPO / "Makefile")
    problems = []
    for page in pages():
        texts = [(b.line, b.text) for b in read_blocks(page) if b.language in ("sh", "")]
        texts += inline_code(page)
        for line, text in texts:
            where = f"{page.relative_to(REPO)}:{line}"
            for args in commands(text, "jobcenter"):
                problems += [f"{where}: {p}" for p in jobcenter_problems(args)]
            for args in commands(text, "make"):
                problems += [f"{where}: {p}" for p in make_problems(args, targets)]
    assert problems == []


def _variables_jobcenter_reads() -> set[str]:
    names: set[str] = set()
    for module in (REPO / "jobcenter").rglob("*.py"):
        names |= set(re.findall(r"\bJOBCENTER_[A-Z][A-Z_]*[A-Z]\b", module.read_text()))

    def walk(command: Command) -> None:
        for param in command.params:
            envvars = param.envvar if isinstance(param.envvar, list | tuple) else [param.envvar]
            names.update(e for e in envvars if e)
        for sub in getattr(command, "commands", {}).values():
            walk(sub)

    walk(cli.main)
    return names


def test_the_settings_reference_lists_every_variable_jobcenter_reads() -> None:
    listed = set(re.findall(r"`(JOBCENTER_[A-Z_]+)`", (DOCS / "reference/settings.md").read_text()))
    assert sorted(_variables_jobcenter_reads() - listed) == []
    assert sorted(listed - _variables_jobcenter_reads()) == []


def test_the_spec_reference_lists_every_key_the_loader_takes() -> None:
    text = (DOCS / "reference/spec.md").read_text()
    job_keys = set(re.findall(r"^\| `(\w+)`", text.split("## Task keys")[0], re.MULTILINE))
    task_table = text.split("## Task keys")[1].split("## Limits")[0]
    task_keys = set(
        re.findall(r"`(\w+)`", "".join(re.findall(r"^\| ([^|]+)\|", task_table, re.MULTILINE)))
    )
    assert job_keys == set(spec._JOB_KEYS)
    assert task_keys == set(spec._TASK_KEYS)


def test_the_exit_codes_reference_lists_every_code_the_cli_uses() -> None:
    codes = {
        value
        for name, value in vars(options).items()
        if name.startswith("EXIT_") and isinstance(value, int)
    }
    listed = {
        int(c)
        for c in re.findall(
            r"^\| (\d+) \|", (DOCS / "reference/exit-codes.md").read_text(), re.MULTILINE
        )
    }
    assert codes and codes <= listed


@pytest.mark.parametrize("marker", ["skip:", "save as", "background until"])
def test_a_test_comment_without_its_argument_is_refused(tmp_path: Path, marker: str) -> None:
    page = tmp_path / "page.md"
    page.write_text(f"<!-- test: {marker} -->\n```sh\ntrue\n```\n")
    with pytest.raises(ValueError, match="cannot read the test comment"):
        read_blocks(page)
