"""`jobcenter submit` under malformed input, against the real test Redis: exit 2, a message
naming the problem, and nothing written to Redis (the namespace's keys compared before and
after). In-process (click's runner) for the generated cases; as a real process where the
old failure was a crash of the process itself."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import assume, given
from hypothesis import strategies as st
from integration_harness import CLI_TIMEOUT_SECONDS, subprocess_env
from lua_helpers import assert_same, snapshot
from spec_strategies import CLI, Broken, broken_specs, file_garbage

from jobcenter.cli import EXIT_BAD_INPUT, main
from jobcenter.config import Settings
from jobcenter.errors import SpecError
from jobcenter.model.spec import load_spec_file
from jobcenter.storage.store import Store


@pytest.fixture
def store(redis_url: str, namespace: str) -> Iterator[Store]:
    store = Store.from_settings(Settings(redis_url=redis_url, namespace=namespace))
    yield store
    store.redis.close()


def submit_refused(store: Store, path: Path) -> str:
    """Run `jobcenter submit PATH` in-process; it must exit 2 with an error on stderr and
    leave the namespace as it was. Returns the error line."""
    before = snapshot(store)
    url, namespace = store.settings.redis_url, store.settings.namespace
    result = CliRunner().invoke(
        main, ["submit", str(path), "--redis-url", url, "--namespace", namespace]
    )
    assert result.exit_code == EXIT_BAD_INPUT, (result.output, result.exception)
    assert result.stderr.startswith(f"error: spec file {str(path)!r}"), result.stderr
    assert_same(before, snapshot(store))
    return result.stderr.strip()


@CLI
@given(broken_specs(file_garbage), st.sampled_from([".yaml", ".json"]))
def test_submit_refuses_a_broken_spec_with_exit_2_and_writes_nothing(
    store: Store, tmp_path_factory: pytest.TempPathFactory, broken: Broken, suffix: str
) -> None:
    path = tmp_path_factory.mktemp("spec") / f"job{suffix}"
    text = json.dumps(broken.spec) if suffix == ".json" else yaml.safe_dump(broken.spec)
    path.write_text(text)
    try:
        load_spec_file(path)
    except SpecError:
        message = submit_refused(store, path)
        assert broken.named_by(message) or " nests deeper than " in message, message
    else:
        assume(False)  # the garbage happened to be valid where it was put


@CLI
@given(st.binary(max_size=100), file_garbage.filter(lambda v: not isinstance(v, dict)))
def test_submit_refuses_bytes_and_documents_that_are_no_spec(
    store: Store, tmp_path_factory: pytest.TempPathFactory, content: bytes, document: object
) -> None:
    folder = tmp_path_factory.mktemp("spec")
    (folder / "raw.yaml").write_bytes(content)
    (folder / "doc.json").write_text(json.dumps(document))
    submit_refused(store, folder / "raw.yaml")
    submit_refused(store, folder / "doc.json")


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("deep.yaml", b"name: j\ntasks: " + b"[" * 100_000 + b"]" * 100_000, "nests deeper"),
        ("deep.json", b'{"name": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nests deeper"),
        ("binary.yaml", bytes(range(256)) * 4, "is not UTF-8 text: invalid start byte at byte"),
        ("latin1.yaml", "name: café\n".encode("latin-1"), "is not UTF-8 text"),
        ("nul.json", b'{"name": "j\x00"}', "is not valid JSON: Invalid control character"),
    ],
)
def test_submit_as_a_process_exits_2_on_input_that_used_to_crash_it(
    store: Store, tmp_path: Path, name: str, content: bytes, problem: str
) -> None:
    """A real `jobcenter submit` process: 100,000 levels of YAML killed it with SIGSEGV."""
    path = tmp_path / name
    path.write_bytes(content)
    before = snapshot(store)
    done = subprocess.run(
        [sys.executable, "-m", "jobcenter", "submit", str(path)],
        env=subprocess_env(store.settings.redis_url, store.settings.namespace),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_SECONDS,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == EXIT_BAD_INPUT, done
    assert done.stderr.startswith(f"error: spec file {str(path)!r}"), done.stderr
    assert problem in done.stderr and "Traceback" not in done.stderr
    assert_same(before, snapshot(store))
