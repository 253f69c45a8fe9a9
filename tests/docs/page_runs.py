"""A page of the docs, run as a reader runs it: its blocks in order, in a folder of its own
with a copy of examples/, its shell blocks in bash, its Python blocks in one namespace, its
long-running commands in the background until the page ends.

A page that starts `jobcenter up` uses that server, found the way a reader's commands find
it; any other page gets a namespace of its own on the suite's Redis (JOBCENTER_REDIS_URL).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
import yaml
from doc_blocks import REPO, Block, read_blocks

from jobcenter.model.spec import load_spec_file

# Deadlines that catch a hang on a loaded 2-core CI machine, never bounds a test asserts.
COMMAND_SECONDS = 120.0  # one shell block
BACKGROUND_START_SECONDS = 60.0  # a background command shows its line within this
STOP_SECONDS = 15.0  # a background command stops on SIGTERM within this, or is killed
POLL_SECONDS = 0.05
# A block that is only part of a spec (a `notify:` section) is loaded completed with these.
COMPLETION = {"name": "name: docs\n", "tasks": "tasks: [{id: a, task: myapp.tasks.a}]\n"}
DEMO_STEP_SECONDS = "0.05"  # the demo's tasks sleep this long a step: the docs only wait


class PageRun:
    """The state one page's blocks share: folder, environment, namespace, processes."""

    def __init__(self, blocks: list[Block], folder: Path, redis_url: str) -> None:
        self.blocks = blocks
        self.folder = folder
        self.done: set[int] = set()  # lines of the blocks run so far
        self.failed: Block | None = None
        self.background: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.python: dict[str, Any] = {"__name__": "__docs__"}
        shutil.copytree(REPO / "examples", folder / "examples")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("JOBCENTER_")}
        self.env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), self.env["PATH"]])
        self.env["XDG_STATE_HOME"] = str(folder / ".state")  # `up` records its server here
        self.env["JOBCENTER_DEMO_STEP_SECONDS"] = DEMO_STEP_SECONDS
        self.env["PYTHONUNBUFFERED"] = "1"
        if not any(b.background_until and b.text.startswith("jobcenter up") for b in blocks):
            self.env["JOBCENTER_REDIS_URL"] = redis_url
            self.env["JOBCENTER_NAMESPACE"] = "docs" + uuid.uuid4().hex[:10]

    # -- running blocks -------------------------------------------------------------------

    def run(self, block: Block) -> None:
        """Run `block`, once every block before it on the page has run."""
        for earlier in self.blocks:
            if earlier.line >= block.line:
                break
            if earlier.line not in self.done:
                self._run_one(earlier)
        self._run_one(block)

    def _run_one(self, block: Block) -> None:
        if self.failed is not None:
            raise AssertionError(f"an earlier block of the page failed: {self.failed.id}")
        try:
            {"yaml": self._spec, "json": self._spec, "python": self._python, "sh": self._sh}[
                block.language
            ](block)
        except BaseException:
            self.failed = block
            raise
        self.done.add(block.line)

    def _save(self, block: Block) -> Path:
        path = self.folder / (block.save_as or f"block-{block.line}.{block.language}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.text)
        return path

    def _spec(self, block: Block) -> None:
        """A spec: the loader takes it (a part of a spec, once completed)."""
        path = self._save(block)
        if block.language == "yaml" and block.save_as is None:
            top_keys = set(yaml.safe_load(block.text) or {})
            added = "".join(text for key, text in COMPLETION.items() if key not in top_keys)
            path.write_text(block.text + added)
        load_spec_file(path)  # raises SpecError naming what is wrong

    def _python(self, block: Block) -> None:
        code = compile(block.text, f"{block.id}", "exec")
        if block.save_as:
            self._save(block)
            return
        before = set(self.python)
        with self._as_the_reader():
            exec(code, self.python)
            for name in sorted(set(self.python) - before):
                if name.startswith("test_") and callable(self.python[name]):
                    self.python[name]()  # a test the page shows is a test that passes

    def _sh(self, block: Block) -> None:
        if block.save_as:
            self._save(block)
            return
        log = self.folder / f"block-{block.line}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                ["bash", "-e", "-o", "pipefail", "-c", block.text],
                cwd=self.folder,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped as one
            )
        if block.background_until:
            self.background.append((process, log))
            self._wait_for_line(process, log, block.background_until)
            return
        try:
            code = process.wait(COMMAND_SECONDS)
        except subprocess.TimeoutExpired:
            _stop(process)
            raise AssertionError(
                f"{block.id} still ran after {COMMAND_SECONDS:g} s:\n{log.read_text()}"
            ) from None
        finally:
            _stop(process)  # what it left in the background
        assert code == 0, f"{block.id} exited {code}:\n{log.read_text()}"

    def _wait_for_line(self, process: subprocess.Popen[bytes], log: Path, text: str) -> None:
        deadline = time.monotonic() + BACKGROUND_START_SECONDS
        while text not in log.read_text(errors="replace"):
            if process.poll() is not None:
                raise AssertionError(f"exited {process.returncode}:\n{log.read_text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} within {BACKGROUND_START_SECONDS:g} s:\n"
                                     f"{log.read_text()}")  # fmt: skip
            time.sleep(POLL_SECONDS)  # a process's output, polled until its deadline

    @contextmanager
    def _as_the_reader(self) -> Iterator[None]:
        """This process with the page's folder, environment and import path, for a while."""
        saved_env, saved_cwd = dict(os.environ), os.getcwd()
        os.environ.clear()
        os.environ.update(self.env)
        os.chdir(self.folder)
        sys.path.insert(0, str(self.folder))
        try:
            yield
        finally:
            sys.path.remove(str(self.folder))
            os.chdir(saved_cwd)
            os.environ.clear()
            os.environ.update(saved_env)

    # -- the end of the page --------------------------------------------------------------

    def close(self) -> None:
        """Stop the page's background commands, the last started first (a server after the
        workers that use it)."""
        for process, _ in reversed(self.background):
            _stop(process)
        self.background.clear()
        self.python.clear()


class PageRuns:
    """One page runs at a time: the next page's first block ends the one before."""

    def __init__(self, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> None:
        self.redis_url = redis_url
        self.tmp_path_factory = tmp_path_factory
        self.current: PageRun | None = None
        self.page: Path | None = None

    def run(self, block: Block) -> None:
        if self.page != block.page:
            self.close()
            blocks = [b for b in read_blocks(REPO / block.page) if b.runs]
            folder = self.tmp_path_factory.mktemp(block.page.stem)
            self.current, self.page = PageRun(blocks, folder, self.redis_url), block.page
        assert self.current is not None
        try:
            self.current.run(block)
        finally:
            if block.line == self.current.blocks[-1].line:
                self.close()

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
        self.current = self.page = None


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process's group (bash and what it started), SIGKILL if it lingers."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with suppress(subprocess.TimeoutExpired):
        process.wait(STOP_SECONDS)
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
