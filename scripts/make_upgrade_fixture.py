"""Write tests/fixtures/upgrade_v1.json: the Redis keys of a namespace that the release
before schema versions (PREVIOUS_RELEASE, version 1) left with jobs half way, for
tests/integration/test_upgrade.py to finish with the current code.

The previous release's package is taken from git (`git archive`), so this needs the repo's
history; the test itself does not (a CI clone may be shallow), which is why the dump is
vendored. Run from the repo: `.venv/bin/python scripts/make_upgrade_fixture.py`.

What the old code does, playing client and worker through its own Store (no task runs):
  half-run      the example DAG: its roots t1, t2, t3 succeeded; t4, t5, t6 queued; the rest
                waiting
  done-before   one task, succeeded: a finished job the old release kept unpacked
  failed-before one task the old worker failed for good (it succeeds when the job is
                retried by the current code)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import redis

from jobcenter.storage.server.embedded import RedisServer

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "upgrade_v1.json"
PREVIOUS_RELEASE = "cf59a69"  # the last commit before the per-state job indexes
NAMESPACE = "fixture"

OLD_CODE = r"""
import sys
from jobcenter.client import Client

client = Client.from_url(sys.argv[1], sys.argv[2])
store = client.store
record = "tasks_for_tests.record"
deps = {"t4": ["t1", "t2"], "t5": ["t2"], "t6": ["t2"], "t7": ["t1", "t4"],
        "t8": ["t5", "t6"], "t9": ["t4", "t6"]}
tasks = [{"id": f"t{i}", "task": record, "args": [f"t{i}"], "depends_on": deps.get(f"t{i}", [])}
         for i in range(1, 10)]
half = client.submit({"name": "half-run", "owner": "upgrade", "tasks": tasks})
done = client.submit({"name": "done-before", "tasks": [{"id": "a", "task": record, "args": ["a"]}]})
failed = client.submit({"name": "failed-before", "tasks": [
    {"id": "x", "task": "tasks_for_tests.fail_times", "args": [0, "x"]}]})
started = store.claim("old-worker", ["default"], max_tasks=100, max_leader=0).tasks
assert len(started) == 5, started
for t in started:
    if t.job_id == failed:
        store.fail("old-worker", t.job_id, t.index, t.attempt, "failed in the old release", -1)
    else:
        store.complete("old-worker", [(t.job_id, t.index, t.attempt)])
import jobcenter
print(half, done, failed, jobcenter.__file__)
"""


def _text(value: bytes) -> str:
    return value.decode("latin-1")  # every byte, as the JSON string's code points


def dump(r: redis.Redis, namespace: str) -> list[dict[str, object]]:
    """Every key of the namespace: name, type, content, TTL (ms, -1 for none)."""
    out: list[dict[str, object]] = []
    for key in sorted(r.scan_iter(match=f"jc:{namespace}:*", count=1000)):
        kind = r.type(key).decode()
        value: object
        if kind == "hash":
            value = {_text(k): _text(v) for k, v in sorted(r.hgetall(key).items())}
        elif kind == "list":
            value = [_text(v) for v in r.lrange(key, 0, -1)]
        elif kind == "zset":
            value = [[_text(m), s] for m, s in r.zrange(key, 0, -1, withscores=True)]
        elif kind == "string":
            value = _text(r.get(key) or b"")
        else:
            raise ValueError(f"{key!r}: a {kind} the fixture does not handle")
        out.append({"key": _text(key), "type": kind, "value": value, "ttl_ms": r.pttl(key)})
    return out


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="jobcenter-fixture-") as tmp:
        old = Path(tmp) / "old"
        old.mkdir()
        archive = subprocess.run(
            ["git", "archive", PREVIOUS_RELEASE, "jobcenter"], cwd=ROOT, check=True,
            capture_output=True,
        ).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive, check=True)
        server = RedisServer(str(Path(tmp) / "redis")).start()
        try:
            ran = subprocess.run(
                [sys.executable, "-c", OLD_CODE, server.url, NAMESPACE],
                env={"PYTHONPATH": str(old), "PATH": "/usr/bin:/bin"},
                cwd=old,  # not the repo: `-c` puts the working directory first on sys.path
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            half, done, failed, where = ran.stdout.split()
            assert where.startswith(str(old)), f"ran jobcenter from {where}, not {old}"
            keys = dump(redis.Redis.from_url(server.url), NAMESPACE)
        finally:
            server.stop()
    FIXTURE.write_text(
        json.dumps(
            {
                "release": PREVIOUS_RELEASE,
                "namespace": NAMESPACE,
                "jobs": {"half-run": half, "done-before": done, "failed-before": failed},
                "keys": keys,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {FIXTURE} ({len(keys)} keys)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
