"""The docs tier: every code block of README.md and docs/ is run or checked (doc_blocks.py
says how a page marks a block). Each runnable block is a test of its own, named by its page
and line; the blocks of one page run in order and share what the page set up
(page_runs.py). `make test-docs` runs this tier alone."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from doc_blocks import Block, pages, read_blocks  # noqa: E402
from page_runs import PageRuns  # noqa: E402

from jobcenter.storage.server.embedded import RedisServer  # noqa: E402


def runnable_blocks() -> list[Block]:
    return [block for page in pages() for block in read_blocks(page) if block.runs]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "doc_block" in metafunc.fixturenames:
        blocks = runnable_blocks()
        metafunc.parametrize("doc_block", blocks, ids=[b.id for b in blocks])


@pytest.fixture(scope="session")
def page_runs(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PageRuns]:
    runs = PageRuns(redis_server.url, tmp_path_factory)
    yield runs
    runs.close()
