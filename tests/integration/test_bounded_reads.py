"""Reads that serve a person stay bounded: `submit --wait` follows a large job through its
counters and the attempts that ended since its last look, never by reading every task again.
Checked with MONITOR on a real server while real workers run the job."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from harness import Cli
from helpers import CommandLog, wait_until
from integration_harness import Scratch, Workers

from jobcenter.storage.keyspace.keys import Keys
from jobcenter.storage.keyspace.packed import SCAN_PAGE

TASKS = 1_200  # more than a submit splits itself: a leader splits it, as a large job is
FOLLOWER_READS = 15  # reads of the job hash outside scripts: the follower has polled a while
LINE = re.compile(r"^  \[(\d+)/(\d+)\] (\S+) (\S+)$")


@pytest.mark.parametrize(("as_json", "full_reads"), [(False, 0), (True, 1)])
def test_submit_wait_follows_a_large_job_without_reading_all_its_tasks_each_poll(
    cli: Cli,
    workers: Workers,
    scratch: Scratch,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
    as_json: bool,
    full_reads: int,
) -> None:
    tasks = [{"id": f"t{i}", "task": "tasks_for_tests.record"} for i in range(TASKS - 1)]
    tasks.append({"id": "gated", "task": "tasks_for_tests.block", "kwargs": {"gate": "end"}})
    spec = tmp_path / "large.json"
    spec.write_text(json.dumps({"name": "large", "tasks": tasks}))
    workers.start()
    keys = Keys(namespace)

    with CommandLog(redis_url) as log:
        proc = cli.start("submit", str(spec), "--wait", *(["--json"] if as_json else []))
        if as_json:  # the id is printed only at the end: the job is the namespace's only one
            job_id = wait_until(lambda: workers.redis.zrange(keys.jobs(0), 0, 0), 30)[0].decode()
        else:
            assert proc.stdout is not None
            job_id = proc.stdout.readline().split()[1]
        job_key = keys.job(job_id).job
        reads = {"HGETALL", "HMGET", "HGET"}
        wait_until(
            lambda: log.count(reads, job_key) >= FOLLOWER_READS,
            timeout=30,
            message="the follower never polled the job",
        )
        scratch.open_gate("end")
        result = cli.finish(proc)

    assert result.code == 0, result.stdout + result.stderr
    tasks_key = keys.job(job_id).tasks
    compaction_page = ("COUNT", str(SCAN_PAGE))  # a worker's leader packing the finished job
    whole_reads = [  # HGETALL, or the first page of an HSCAN of every field, by the follower
        c
        for c in log.commands
        if c.key == tasks_key and not c.in_script
        if c.name == "HGETALL" or (c.name == "HSCAN" and c.args[1] == "0" and "MATCH" not in c.args)
        if c.args[2:4] != compaction_page
    ]
    # --json's last read finds the job compacted when the leader was quicker: it reads the
    # packed record then (a follower without --json reads a poll's changed tasks from it too)
    packed_reads = [
        c
        for c in log.commands
        if c.key == keys.job(job_id).packed and c.name == "GET" and not c.in_script
    ]
    assert len(whole_reads) == full_reads or (as_json and not whole_reads and packed_reads)
    if as_json:
        assert result.json()["state"] == "succeeded"
        assert len(result.json()["tasks"]) == TASKS
        return
    lines = result.stdout.splitlines()
    assert lines[-1] == f"job {job_id} succeeded"
    shown = [LINE.match(line) for line in lines[:-1]]
    assert all(shown), lines[:-1]
    assert sorted(m.group(3) for m in shown if m) == sorted(t["id"] for t in tasks)
    assert [int(m.group(1)) for m in shown if m] == list(range(1, TASKS + 1))
