"""Version skew in a rolling upgrade: workers of two releases on one Redis.

The previous releases (RELEASES: a tag, or the commit it names where a clone has no tags)
are taken from git (`git archive`) into a temp dir, and their workers run that code
(PYTHONPATH) beside workers of this code. ARCHITECTURE.md, Version skew, says what holds:

- work of a protocol both releases speak runs on either, across releases (a child released
  by one worker's completion claimed by the other), with every pool limit held and nothing
  lost: the first test, with each previous release;
- what a newer release writes (an entry or a job of a higher protocol) is left where it is
  by this one: never popped, run, counted against a limit nor queued again by recovery, and
  said once. Releases before protocols (the first in RELEASES) cannot know this, so the
  second test makes the newer release's writes by hand, in the form the protocol fixes
  (schema.PROTOCOL_MARK), and runs this code's worker beside them.

A release is added to RELEASES when it is tagged (README, Releases)."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import REPO_ROOT, TESTS_DIR, Cli
from integration_harness import JOB_SECONDS, Scratch, Workers
from test_limits import peak

from jobcenter import Client
from jobcenter.storage import limits
from jobcenter.storage.keyspace import schema
from jobcenter.storage.keyspace.schema import JobField

# Each release this one must run beside: its tag, and the commit the tag names (a CI clone
# may have the history but no tags).
RELEASES = {"v0.1.0": "0c8b738"}
SPAN = "tasks_for_tests.span"
PAUSE = 0.05  # long enough that attempts of different workers overlap
NEWER = schema.PROTOCOL + 1
NEWER_SAID = "holds tasks of a newer jobcenter release (protocol"


def _git(*args: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(REPO_ROOT), *args], check=True, capture_output=True, timeout=60
    ).stdout


def _commit_of(tag: str, commit: str) -> str:
    """The release's commit: its tag's, else the commit recorded for it."""
    for ref in (tag, commit):
        try:
            return _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").decode().strip()
        except subprocess.CalledProcessError:
            continue
    pytest.fail(
        f"release {tag} ({commit}) is not in this clone: fetch the history and the tags "
        "(git fetch --tags --unshallow)"
    )


@pytest.fixture(scope="module", params=sorted(RELEASES))
def previous_release(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    """A previous release's package, from git, in a dir of its own: (its tag, the dir)."""
    tag = request.param
    commit = _commit_of(tag, RELEASES[tag])
    where = tmp_path_factory.mktemp(f"release-{tag}")
    with tarfile.open(fileobj=io.BytesIO(_git("archive", commit, "jobcenter"))) as archive:
        archive.extractall(where, filter="data")
    yield tag, where


def _running_code(path: Path) -> dict[str, str]:
    """A worker's environment that runs the package in `path`, not this one."""
    return {"PYTHONPATH": os.pathsep.join([str(path), str(TESTS_DIR)])}


def test_workers_of_the_previous_release_and_this_one_share_the_work_within_the_pools(
    previous_release: tuple[str, Path], client: Client, workers: Workers, scratch: Scratch, cli: Cli
) -> None:
    tag, old_code = previous_release
    assert cli("pool", "set", "gpu", "2").code == 0
    old = workers.start(name="old", concurrency=4, env=_running_code(old_code))
    new = workers.start(name="new", concurrency=4)
    pooled = [
        {"id": f"g{i}", "task": SPAN, "kwargs": {"pause": PAUSE, "group": "gpu"}, "pool": "gpu"}
        for i in range(16)
    ]
    plain = [{"id": f"p{i}", "task": SPAN, "kwargs": {"pause": PAUSE}} for i in range(8)]
    # a child of each plain task: released by whichever worker completes its parent
    after = [
        {"id": f"c{i}", "task": SPAN, "kwargs": {"pause": PAUSE}, "depends_on": [f"p{i}"]}
        for i in range(8)
    ]
    job_id = client.submit({"name": "skewed", "tasks": pooled + plain + after})

    assert client.wait(job_id, JOB_SECONDS)["state"] == "succeeded"

    runs = scratch.runs()
    code_of = {r["worker"]: r["code"] for r in runs}
    assert code_of.get("old") == str(old_code / "jobcenter"), f"{tag} ran no task: {code_of}"
    assert code_of.get("new") == str(REPO_ROOT / "jobcenter"), f"this code ran none: {code_of}"
    assert {r["worker"] for r in runs if r["group"] == "gpu"} == {"old", "new"}
    assert peak(runs, key=lambda r: r["group"])["gpu"] == 2  # never more, on either release
    assert len([r for r in runs if r["event"] == "start"]) == 32  # each task once: none lost
    assert limits.reconcile(client.store, correct=False) == limits.SlotCheck(0, 0)
    assert client.store.redis.zcard(client.store.keys.queue(0, "default")) == 0
    assert NEWER_SAID not in old.log() + new.log()


def _as_newer_release(client: Client, job_id: str) -> list[tuple[bytes, float]]:
    """Make the job one a newer release wrote, as that release's scripts would: its
    protocol in its hash, its queue entries marked with it (same scores: same places)."""
    r, keys = client.store.redis, client.store.keys
    queue = keys.queue(keys.job_shard(job_id), "default")
    mark = f"{schema.PROTOCOL_MARK}{NEWER}".encode()
    marked = []
    for member, score in r.zrange(queue, 0, -1, withscores=True):
        if f"|{job_id}|".encode() in member:
            r.zrem(queue, member)
            r.zadd(queue, {member + mark: score})
            marked.append((member + mark, score))
    r.hset(keys.job(job_id).job, JobField.PROTOCOL, NEWER)
    return marked


def _entries_of(client: Client, job_id: str) -> list[tuple[bytes, float]]:
    queue = client.store.keys.queue(0, "default")
    members = client.store.redis.zrange(queue, 0, -1, withscores=True)
    return [(m, s) for m, s in members if f"|{job_id}|".encode() in m]


def test_a_worker_leaves_a_newer_releases_work_in_its_queue_and_says_so_once(
    client: Client, workers: Workers, scratch: Scratch, cli: Cli
) -> None:
    assert cli("pool", "set", "gpu", "2").code == 0
    gpu = [
        {"id": f"g{i}", "task": SPAN, "pool": "gpu", "kwargs": {"group": "newer"}} for i in range(4)
    ]
    newer = client.submit({"name": "newer", "tasks": gpu})  # heads the queue
    marked = _as_newer_release(client, newer)
    mine = client.submit({"name": "mine", "tasks": [{"id": "a", "task": SPAN}]})

    worker = workers.start(concurrency=4)
    assert client.wait(mine, JOB_SECONDS)["state"] == "succeeded"  # the work behind it ran
    # more claims pass over the newer work (a later job, and recovery's pass), said once
    again = client.submit({"name": "again", "tasks": [{"id": "a", "task": SPAN}]})
    assert client.wait(again, JOB_SECONDS)["state"] == "succeeded"
    assert cli("recover", "--once").code == 0

    assert _entries_of(client, newer) == marked  # the same entries, in the same places
    status = client.status(newer)
    assert {t["state"] for t in status["tasks"].values()} == {"queued"}
    assert [r for r in scratch.runs() if r.get("group") == "newer"] == []  # none ran here
    assert limits.pools(client.store)[0].used == 0  # no slot taken for them
    said = [line for line in worker.log().splitlines() if NEWER_SAID in line]
    assert len(said) == 1, worker.log()
    assert f"queue 'default' {NEWER_SAID} {NEWER}; this worker speaks {schema.PROTOCOL})" in said[0]
