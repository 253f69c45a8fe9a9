"""Every table the CLI prints starts with a header line, and says its times are UTC (the
header and a 'Z' on each time); `history` says an attempt that failed and was retried in
those words."""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness import Cli
from integration_harness import JOB_SECONDS, Workers

from jobcenter import Client

TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{3})?Z?")


def test_every_table_has_a_header_and_utc_times(
    cli: Cli, client: Client, workers: Workers, tmp_path: Path
) -> None:
    workers.start()
    spec = {"name": "tables", "owner": "alice", "tasks": [
        {"id": "flaky", "task": "tasks_for_tests.fail_times", "args": [1, "flaky"],
         "retries": 1, "retry_backoff": 0.1},
        {"id": "dead", "task": "tasks_for_tests.fatal", "pool": "gpu"},
    ]}  # fmt: skip
    spec_file = tmp_path / "spec.json"
    spec_file.write_text(json.dumps(spec))
    for args in (("pool", "set", "gpu", "2"), ("rate", "set", "queue:default", "100/1s"),
                 ("schedule", "add", str(spec_file), "--every", "PT1H")):  # fmt: skip
        assert cli(*args).code == 0
    job_id = client.submit(spec)
    client.wait(job_id, JOB_SECONDS)

    tables = {
        ("list",): "JOB",
        ("history", job_id): "TASK",
        ("events", "--job", job_id): "TIME (UTC)",
        ("dlq", "list"): "JOB",
        ("pool", "list"): "POOL",
        ("rate", "list"): "TARGET",
        ("schedule", "list"): "SCHEDULE",
        ("status", job_id): "TASK",
    }
    for args, first in tables.items():
        result = cli(*args)
        assert result.code == 0, (args, result.stderr)
        lines = result.stdout.splitlines()
        header = next(line for line in lines if line.startswith(first))
        assert header == header.upper(), (args, header)
        body = lines[lines.index(header) + 1 :]
        assert body, (args, result.stdout)
        times = [m.group(0) for line in body for m in TIME.finditer(line)]
        if times:
            assert "(UTC)" in header, (args, header)
            assert all(t.endswith("Z") for t in times), (args, times)

    history = cli("history", job_id).stdout.splitlines()
    flaky = [line for line in history if line.startswith("flaky")]
    assert len(flaky) == 2, history
    assert " failed, retried " in flaky[0] and " succeeded " in flaky[1], history
