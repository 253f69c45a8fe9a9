"""POST /api/v1/jobs/bulk/<action>: the CLI's bulk actions over HTTP, behind an operate
token; an owner-bound token acts on its owner's jobs only."""

from __future__ import annotations

from typing import Any

from api_harness import ApiServer, Workers
from test_jobs import problem


def failing(name: str, customer: str, owner: str | None = None) -> dict[str, Any]:
    task = {"id": "a", "task": "jobcenter.demo.fail", "args": [1]}
    spec: dict[str, Any] = {"name": name, "tags": {"customer": customer}, "tasks": [task]}
    return {**spec, "owner": owner} if owner else spec


def test_bulk_retry_by_tag_with_a_dry_run_and_a_limit(api: ApiServer, workers: Workers) -> None:
    token = api.token("operate")
    acme = [api.submit(token, failing(f"acme-{i}", "acme")) for i in range(3)]
    zed = api.submit(token, failing("zed", "zed"))
    workers.start()
    for job_id in [*acme, zed]:
        assert api.wait_finished(token, job_id) == "failed"
    body = {"tag": "customer=acme"}

    dry = api.call("POST", "/jobs/bulk/retry", token, json={**body, "dry_run": True}).json()
    after_dry = {api.state(token, j) for j in acme}
    first = api.call("POST", "/jobs/bulk/retry", token, json={**body, "limit": 2}).json()

    assert (dry["count"], dry["dry_run"], {j["id"] for j in dry["jobs"]}) == (3, True, set(acme))
    assert after_dry == {"failed"}  # a dry run changes nothing
    assert (first["count"], first["more"]) == (2, True)
    assert [j["id"] for j in first["jobs"]] == acme[:0:-1]  # the newest two
    assert api.state(token, acme[0]) == "failed"  # past the limit: left for the next call
    second = api.call("POST", "/jobs/bulk/retry", token, json=body).json()
    assert acme[0] in {j["id"] for j in second["jobs"]}
    assert api.state(token, zed) == "failed"


def test_bulk_needs_operate_a_filter_and_keeps_an_owner_token_to_its_jobs(
    api: ApiServer, workers: Workers
) -> None:
    operate = api.token("operate")
    alice = api.token("operate", owner="alice")
    mine = api.submit(alice, failing("mine", "acme"))
    theirs = api.submit(operate, failing("theirs", "acme", owner="bob"))

    read_only = api.call(
        "POST", "/jobs/bulk/cancel", api.token("read"), json={"tag": "customer=acme"}
    )
    no_filter = api.call("POST", "/jobs/bulk/cancel", operate, json={})
    bad_tag = api.call("POST", "/jobs/bulk/cancel", operate, json={"tag": "customer"})
    cancelled = api.call("POST", "/jobs/bulk/cancel", alice, json={"tag": "customer=acme"})

    assert read_only.status_code == 403
    assert "needs a filter" in problem(no_filter, 422)["detail"]
    assert "key=value" in problem(bad_tag, 422)["detail"]
    assert [j["id"] for j in cancelled.json()["jobs"]] == [mine]
    assert api.state(operate, mine) == "cancelled" and api.state(operate, theirs) != "cancelled"
