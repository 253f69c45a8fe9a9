"""The dashboard over HTTP, served by a real uvicorn, against the real test Redis and real
worker processes: every page, the job page's JSON, every action and its refusals."""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml
from dashboard_harness import TOKEN, Dashboard, every_route
from helpers import wait_until
from integration_harness import EXAMPLES, JOB_SECONDS, Workers
from webhook_server import ALLOW_ENV, allowing, webhook_server

from jobcenter import Client
from jobcenter.model.spec import spec_from_any
from jobcenter.runtime.segments import assign
from jobcenter.storage import views
from jobcenter.storage.keyspace.keys import LEADER_SEGMENT

PAGES = ["/jobs", "/workers", "/queues", "/dead-letters", "/schedules", "/recovery"]
ACTIONS = [
    "/jobs/{job}/cancel",
    "/jobs/{job}/retry",
    "/jobs/{job}/tasks/t1/clear?downstream=1",
    "/jobs/{job}/tasks/t1/mark?state=succeeded",
    "/jobs/{job}/pause",
    "/queues/default/pause",
    "/jobs/bulk/retry?state=failed",
    "/jobs/{job}/signal/approve",
    "/dead-letters/{job}/t1/requeue",
    "/schedules/{schedule}/pause",
    "/schedules/{schedule}/resume",
    "/schedules/{schedule}/run",
]


@pytest.fixture
def dashboard(client: Client) -> Iterator[Dashboard]:
    d = Dashboard(client)
    yield d
    d.close()


@pytest.fixture
def readonly(client: Client) -> Iterator[Dashboard]:
    d = Dashboard(client, token=None)
    yield d
    d.close()


def one_task(name: str = "job", task: str = "tasks_for_tests.record", **extra: Any) -> dict:
    args = extra.pop("args", {})
    spec = {"name": name, "tasks": [{"id": "t1", "task": task, "kwargs": args}]}
    return {**spec, **extra}


def rows(html: str, attr: str = "data-job") -> list[str]:
    return re.findall(rf'<tr {attr}="([^"]+)"', html)


def poll_json(dashboard: Dashboard, path: str, until: Callable[[Any], Any]) -> Any:
    """GET `path` until its JSON satisfies `until`; that JSON."""
    last: list[Any] = []

    def check() -> bool:
        last[:] = [dashboard.json(path)]
        return bool(until(last[0]))

    wait_until(check, timeout=JOB_SECONDS, message=f"{path} never got there: {last}")
    return last[0]


def seed000_fail() -> dict:
    return yaml.safe_load((EXAMPLES / "seed000_fail.yaml").read_text())


# -- pages --------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", PAGES)
def test_every_page_answers_with_html_that_cannot_run_foreign_scripts(
    dashboard: Dashboard, path: str
) -> None:
    reply = dashboard.get(path)

    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("text/html")
    assert "script-src 'self'" in reply.headers["content-security-policy"]
    assert 'id="token"' in reply.text  # actions are allowed: the token box is there


def test_a_request_for_another_host_is_refused_on_every_route_and_acts_on_nothing(
    dashboard: Dashboard, client: Client
) -> None:
    # A page of another site that points its own name at 127.0.0.1 (DNS rebinding) reaches
    # the dashboard with that name as the Host: it must read nothing, and change nothing.
    job_id = client.submit(one_task("to-guard"))  # no worker: it stays running
    schedule_id = client.schedule(one_task("hourly"), every="PT1H")
    port = dashboard.url.rpartition(":")[2]
    routes = every_route(dashboard.server.config.app, job_id, schedule_id)
    assert ("GET", "/metrics") in routes and ("GET", f"/api/jobs/{job_id}/live") in routes

    for method, path in routes:
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example"):
            headers = {"Host": host, "X-Jobcenter-Token": TOKEN, "Accept": "application/json"}
            refused = dashboard.http.request(method, path, headers=headers)
            assert refused.status_code == 400, (method, path, host, refused.status_code)
            assert job_id not in refused.text
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost"):
            if method == "GET":
                answered = dashboard.http.get(path, headers={"Host": host})
                assert answered.status_code in (200, 204, 307), (path, host, answered.text)

    assert client.state(job_id) == "running"  # not cancelled
    assert client.schedules()[0]["state"] == "active"  # not paused


def test_text_from_a_job_is_escaped_in_every_page(dashboard: Dashboard, client: Client) -> None:
    job_id = client.submit(one_task("<script>alert(1)</script>"))

    pages = [dashboard.get(p).text for p in ("/jobs", f"/jobs/{job_id}")]

    for html in pages:
        assert "<script>alert(1)</script>" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_home_leads_to_the_jobs_and_unknown_pages_are_404(dashboard: Dashboard) -> None:
    assert dashboard.get("/", follow_redirects=False).headers["location"] == "/jobs"
    assert dashboard.get("/jobs/01NOSUCHJOB").status_code == 404
    assert "no job 01NOSUCHJOB" in dashboard.get("/jobs/01NOSUCHJOB").text
    assert dashboard.get("/api/jobs/01NOSUCHJOB/live").json()["error"] == "no job 01NOSUCHJOB"
    assert dashboard.get("/schedules/nope").status_code == 404


def test_jobs_are_listed_newest_first_in_pages_without_gaps_or_repeats(
    dashboard: Dashboard, client: Client
) -> None:
    ids = [client.submit(one_task(f"single-{i}")) for i in range(3)]
    ids += client.submit_many([one_task(f"batch-{i}") for i in range(5)])  # one millisecond
    created = {j["id"]: j["created_at"] for j in client.list(limit=100)}
    expected = sorted(ids, key=lambda j: (created[j], j), reverse=True)

    seen: list[str] = []
    path: str | None = "/jobs?size=3"
    pages = 0
    while path:
        html = dashboard.get(path).text
        seen += rows(html)
        pages += 1
        found = re.search(r'id="older" href="([^"]+)"', html)
        path = found.group(1).replace("&amp;", "&") if found else None

    assert seen == expected
    assert pages >= 3


def test_jobs_filter_by_state_owner_schedule_and_name(dashboard: Dashboard, client: Client) -> None:
    etl = client.submit(one_task("nightly-etl", owner="alice"))
    report = client.submit(one_task("weekly-report", owner="bob"))
    fired, _ = client.store.submit(spec_from_any(one_task("fired")), schedule_id="sched-1")
    client.cancel(report)

    def listed(query: str) -> set[str]:
        reply = dashboard.get(f"/jobs?{query}")
        assert reply.status_code == 200, reply.text
        return set(rows(reply.text))

    assert listed("") == {etl, report, fired}
    assert listed("state=cancelled") == {report}
    assert listed("owner=alice") == {etl}
    assert listed("schedule=sched-1") == {fired}
    assert listed("name=ETL") == {etl}  # a part of the name, any case
    assert listed("owner=alice&state=cancelled") == set()
    assert dashboard.get("/jobs?state=bogus").status_code == 400


def test_a_state_filter_walks_its_own_index_not_every_job(client: Client) -> None:
    old = client.submit(one_task("old"))
    client.cancel(old)
    client.submit_many([one_task(f"new-{i}") for i in range(views.JOBS_EXAMINED_MAX + 100)])

    page = views.jobs_page(client.store, views.JobFilter(state="cancelled"))
    narrowed = views.jobs_page(client.store, views.JobFilter(state="cancelled", name="new"))

    assert [j.id for j in page.jobs] == [old] and page.examined == 1 and page.older is None
    assert narrowed.jobs == [] and narrowed.examined == 1


# -- the job page ---------------------------------------------------------------------------------


def test_the_job_page_shows_seed000_failure_with_its_cascade_and_why(
    dashboard: Dashboard, client: Client, workers: Workers
) -> None:
    workers.start()
    spec = seed000_fail()
    job_id = client.submit(spec)
    client.wait(job_id, JOB_SECONDS)

    page = dashboard.get(f"/jobs/{job_id}")
    graph: Any = dashboard.json(f"/api/jobs/{job_id}/graph")
    t4: Any = dashboard.json(f"/api/jobs/{job_id}/tasks/3")
    t7: Any = dashboard.json(f"/api/jobs/{job_id}/tasks/6")

    assert page.status_code == 200 and "seed000-fail" in page.text
    assert graph["ids"] == [t["id"] for t in spec["tasks"]]
    states = dict(zip(graph["ids"], graph["states"], strict=True))
    assert states["t4"] == "failed"
    assert states["t7"] == states["t9"] == "upstream_failed"
    assert {states[t] for t in ("t1", "t2", "t3", "t5", "t6", "t8")} == {"succeeded"}
    picture = graph["picture"]
    assert picture["grouping"] == "tasks"
    drawn = {(graph["ids"][a], graph["ids"][b]) for a, b, _ in picture["edges"]}
    assert drawn == {(dep, t["id"]) for t in spec["tasks"] for dep in t.get("depends_on", [])}
    assert t4["id"] == "t4" and t4["state"] == "failed" and t4["task"] == "jobcenter.demo.fail"
    assert "RuntimeError: step 4 failed on purpose" in t4["error"]
    assert "Traceback" in t4["error"]
    assert t4["handler"] and t4["started_at"] <= t4["finished_at"]
    assert [(a["attempt"], a["state"]) for a in t4["history"]] == [(1, "failed")]
    assert t7["state"] == "upstream_failed" and "t4" in t7["error"] and t7["history"] == []
    assert dashboard.get(f"/api/jobs/{job_id}/tasks/9").status_code == 404


def test_live_states_and_progress_follow_a_running_job(
    dashboard: Dashboard, client: Client, workers: Workers, scratch: Any
) -> None:
    workers.start()
    spec = {
        "name": "live",
        "tasks": [
            {
                "id": "slow",
                "task": "tasks_for_tests.report_then_block",
                "kwargs": {"message": "halfway there", "gate": "slow"},
            },
            {"id": "after", "task": "tasks_for_tests.record", "depends_on": ["slow"]},
        ],
    }
    job_id = client.submit(spec)
    live = f"/api/jobs/{job_id}/live"

    running = poll_json(dashboard, live, lambda s: s["states"][0] == "running")
    detail = poll_json(dashboard, f"/api/jobs/{job_id}/tasks/0", lambda t: t["progress"])
    scratch.open_gate("slow")
    done = poll_json(dashboard, live, lambda s: s["state"] == "succeeded")

    assert running["state"] == "running" and running["states"][1] == "waiting"
    assert detail["progress"] == "halfway there" and detail["handler"]
    assert done["states"] == ["succeeded", "succeeded"] and done["finished_at"]


def test_the_job_page_shows_each_notification_delivery_as_it_goes(
    dashboard: Dashboard, client: Client, workers: Workers, scratch: Any
) -> None:
    notify_env = {  # two quick attempts, then the delivery is given up
        **ALLOW_ENV,
        "JOBCENTER_NOTIFY_BACKOFF_SECONDS": "0.1",
        "JOBCENTER_NOTIFY_TIMEOUT_SECONDS": "0.5",
        "JOBCENTER_NOTIFY_ATTEMPTS": "2",
    }
    workers.start(env=notify_env)
    quiet = client.submit(one_task(name="quiet"))
    with webhook_server([500]) as server:
        spec = one_task(task="tasks_for_tests.block", args={"gate": "n"})
        told = {**spec, "notify": {"on": ["succeeded", "late"], "webhook": server.url}}
        job_id = allowing(client).submit(told)
        before = dashboard.get(f"/jobs/{job_id}").text
        scratch.open_gate("n")
        client.wait(job_id, JOB_SECONDS)

        def given_up() -> Any:
            found = dashboard.json(f"/api/jobs/{job_id}/notifications")["notifications"]  # type: ignore[index]
            return found if found["deliveries"]["webhook"]["state"] == "failed" else None

        shown = wait_until(given_up, JOB_SECONDS, message="the webhook was never given up")
    after = dashboard.get(f"/jobs/{job_id}").text
    fragment = dashboard.get(f"/jobs/{job_id}/notifications")
    client.wait(quiet, JOB_SECONDS)

    row = re.compile(r'<tr data-channel="webhook" data-state="(\w+)">(.*?)</tr>', re.S)
    waiting = row.search(before)
    assert waiting is not None and waiting.group(1) == "none"
    assert "when the job ends" in waiting.group(2) and 'data-settled="yes"' in before
    late = re.search(r'<tr data-channel="webhook:late" data-state="none">(.*?)</tr>', before, re.S)
    assert late is not None and "when the job is past its sla" in late.group(1)
    delivery = shown["deliveries"]["webhook"]
    assert (delivery["attempts"], delivery["error"]) == (2, "HTTP 500")
    failed = row.search(after)
    assert failed is not None and failed.group(1) == "failed"
    cells = re.findall(r"<td[^>]*>(.*?)</td>", failed.group(2), re.S)
    assert cells[0] == "webhook" and "badge state-failed" in cells[1]
    assert cells[2:4] == ["2", "HTTP 500"]
    assert cells[4].startswith("failed 20")
    origin = server.url.removesuffix("/hooks/jobcenter")  # its path may be a credential
    assert f'webhook <span class="mono">{origin}</span>' in after and server.url not in after
    assert shown["webhook"] == origin
    assert fragment.status_code == 200 and row.search(fragment.text).group(1) == "failed"  # type: ignore[union-attr]
    assert 'id="notifications"' not in dashboard.get(f"/jobs/{quiet}").text
    assert dashboard.json(f"/api/jobs/{quiet}/notifications") == {"notifications": None}
    assert dashboard.get(f"/jobs/{quiet}/notifications").status_code == 204


def fan_out(n: int) -> dict:
    work = [f"work-{i:04d}" for i in range(n - 2)]
    tasks = [{"id": "split", "task": "tasks_for_tests.record"}]
    tasks += [{"id": w, "task": "tasks_for_tests.record", "depends_on": ["split"]} for w in work]
    tasks += [{"id": "merge", "task": "tasks_for_tests.record", "depends_on": work}]
    return {"name": f"fan-out-{n}", "tasks": tasks}


def test_a_2000_task_job_is_drawn_as_a_few_groups(dashboard: Dashboard, client: Client) -> None:
    job_id = client.submit(fan_out(2_000))  # no worker: it stays unsplit, read from its spec

    graph: Any = dashboard.json(f"/api/jobs/{job_id}/graph")
    live: Any = dashboard.json(f"/api/jobs/{job_id}/live")
    task: Any = dashboard.json(f"/api/jobs/{job_id}/tasks/1")

    picture = graph["picture"]
    assert picture["grouping"] == "level and id shape"
    assert [(n["label"], len(n["members"])) for n in picture["nodes"]] == [
        ("split", 1),
        ("work-#", 1_998),
        ("merge", 1),
    ]
    assert sorted(picture["edges"]) == [[0, 1, 1_998], [1, 2, 1_998]]
    assert len(picture["node_of"]) == len(graph["ids"]) == len(live["states"]) == 2_000
    assert set(live["states"]) == {"waiting"}
    assert (task["id"], task["task"], task["state"]) == (
        "work-0000",
        "tasks_for_tests.record",
        "waiting",
    )


# -- workers and queues ---------------------------------------------------------------------------


def test_the_workers_page_shows_heartbeats_busy_slots_and_gone_workers(
    dashboard: Dashboard, client: Client, workers: Workers, scratch: Any
) -> None:
    worker = workers.start("--node", "db-1", "--queues", "default,extra", concurrency=2)
    handler = workers.handler_of(worker)
    client.store.redis.zadd(client.store.keys.workers(), {"ghost-handler": 1_000})
    job_id = client.submit(one_task(task="tasks_for_tests.block", args={"gate": "w"}))
    wait_until(lambda: client.status(job_id)["tasks"]["t1"]["state"] == "running")

    html = dashboard.get("/workers").text
    view = views.workers(client.store)
    scratch.open_gate("w")

    mine = next(w for w in view.workers if w.handler == handler)
    assert (mine.alive, mine.busy, mine.slots, mine.node) == (True, 1, 2, "db-1")
    assert mine.queues == ["node:db-1", "default", "extra"]  # its node's queue first
    ghost = next(w for w in view.workers if w.handler == "ghost-handler")
    assert not ghost.alive
    row = re.search(rf'<tr data-handler="{handler}" class="alive">(.*?)</tr>', html, re.S)
    assert row is not None and "1 / 2" in row.group(1) and "db-1" in row.group(1)
    assert '<tr data-handler="ghost-handler" class="gone">' in html


def segment_owners(view: views.WorkersView) -> dict[tuple[str, int], set[str]]:
    return {(s.segment, s.shard): {lease.handler for lease in s.owners} for s in view.segments}


def test_the_workers_page_shows_the_shards_each_worker_owns_and_an_unowned_one(
    workers: Workers, redis_url: str, namespace: str
) -> None:
    shards = 3
    workers.settings = {"JOBCENTER_SHARDS": str(shards), "JOBCENTER_SEGMENT_LEASE_SECONDS": "2"}
    client = Client.from_url(redis_url, namespace, shards=shards)
    lone = workers.start("--queues", "default,lone", name="lone")
    other = workers.start("--queues", "default", name="other")
    lone.expect_exit.add(-signal.SIGKILL)
    both = [lone.handler, other.handler]
    expected = {
        (segment, shard): {h for h in members if shard in assign(shards, members, h)}
        for segment, members in [(LEADER_SEGMENT, both), ("default", both), ("lone", both[:1])]
        for shard in range(shards)
    }
    d = Dashboard(client)
    try:
        wait_until(
            lambda: segment_owners(views.workers(client.store)) == expected,
            timeout=JOB_SECONDS,
            message="the leases never matched the rule",
        )
        shared = d.get("/workers").text
        lone.kill9()  # its leases run out; nobody else serves its queue 'lone'
        wait_until(
            lambda: not any(segment_owners(views.workers(client.store))[("lone", s)]
                            for s in range(shards)),
            timeout=JOB_SECONDS,
            message="the killed worker's leases never ran out",
        )  # fmt: skip
        after = d.get("/workers").text
    finally:
        d.close()

    def owner_cell(html: str, segment: str, shard: int) -> str:
        found = re.search(
            rf'<tr data-segment="{segment}" data-shard="{shard}" class="(\w+)">(.*?)</tr>',
            html,
            re.S,
        )
        assert found is not None, (segment, shard)
        return f"{found.group(1)}: {re.findall(r'<td[^>]*>(.*?)</td>', found.group(2), re.S)[2]}"

    for (segment, shard), owners in expected.items():
        (owner,) = owners  # two workers, three shards: one owner a shard
        assert owner_cell(shared, segment, shard) == f"owned: {owner}"
    mine = sorted(
        s for (seg, s), owners in expected.items() if seg == "default" and lone.handler in owners
    )
    row = re.search(rf'<tr data-handler="{lone.handler}" class="alive">(.*?)</tr>', shared, re.S)
    assert row is not None and f"default: {', '.join(map(str, mine))}" in row.group(1)
    assert "lone: 0, 1, 2" in row.group(1)
    assert "0 of 9 unowned" in shared
    for shard in range(shards):
        cell = owner_cell(after, "lone", shard)
        assert cell.startswith("unowned: ") and "unowned</span>" in cell
        assert f'the lease of <span class="mono">{lone.handler}</span> ran out' in cell
    assert "3 of 9 unowned" in after


def test_the_queues_page_shows_depth_by_priority_and_retry_waits(
    dashboard: Dashboard, client: Client, workers: Workers
) -> None:
    for priority, count in ((5, 3), (0, 2)):
        for _ in range(count):
            client.submit(one_task(queue="prio", priority=priority))
    workers.start("--queues", "retryq")
    retrying_task = {"id": "t1", "task": "tasks_for_tests.retry_later", "retries": 3}
    client.submit({"name": "r", "queue": "retryq", "tasks": [{**retrying_task, "args": [600]}]})

    retrying = wait_until(
        lambda: (q := views.queues(client.store, ["retryq"]).queues[0]).retry_wait and q,
        message="the task never waited for its retry",
    )
    prio = views.queues(client.store, ["prio"]).queues[0]
    html = dashboard.get("/queues?queue=prio").text

    assert prio.ready == 5
    assert [(b.priority, b.ready) for b in prio.bands] == [(5, 3), (0, 2)]
    assert prio.head_wait is not None and prio.head_wait >= 0
    assert retrying.retry_wait == 1 and retrying.ready == 0
    assert retrying.next_retry_at is not None and retrying.next_retry_at > time.time() + 500
    row = re.search(r'<tr data-queue="prio">(.*?)</tr>', html, re.S)
    assert row is not None
    assert '<td class="num ready">5</td>' in row.group(1)
    assert "p5: 3" in row.group(1) and "p0: 2" in row.group(1)
    assert '<tr data-queue="retryq">' in html  # a queue a registered worker serves


# -- dead letters and the actions -----------------------------------------------------------------


def test_requeuing_a_dead_letter_from_the_dashboard_runs_the_job_again(
    dashboard: Dashboard, client: Client, workers: Workers
) -> None:
    workers.start()
    job_id = client.submit(seed000_fail())
    client.wait(job_id, JOB_SECONDS)

    listed = dashboard.get("/dead-letters").text
    reply = dashboard.act(f"/dead-letters/{job_id}/t4/requeue")
    wait_until(lambda: client.status(job_id)["tasks"]["t4"]["attempts"] == 2, timeout=JOB_SECONDS)
    final = client.wait(job_id, JOB_SECONDS)

    assert f'<tr data-job="{job_id}" data-task="t4">' in listed
    assert "RuntimeError: step 4 failed on purpose" in listed
    assert f'data-url="/dead-letters/{job_id}/t4/requeue"' in listed
    assert reply.status_code == 200, reply.text
    assert reply.json()["message"].startswith(f"job {job_id}: task t4 requeued")
    assert final["state"] == "failed"  # the demo's task 4 fails every time
    assert [h["attempt"] for h in client.history(job_id) if h["task"] == "t4"] == [1, 2]


def test_cancel_and_retry_from_the_dashboard(
    dashboard: Dashboard, client: Client, workers: Workers
) -> None:
    workers.start()
    blocked = client.submit(one_task(task="tasks_for_tests.block", args={"gate": "never"}))
    wait_until(lambda: client.status(blocked)["tasks"]["t1"]["state"] == "running")
    flaky = client.submit(
        one_task(task="tasks_for_tests.fail_times", args={"times": 1, "counter": "flaky"})
    )
    client.wait(flaky, JOB_SECONDS)

    cancelled = dashboard.act(f"/jobs/{blocked}/cancel")
    again = dashboard.act(f"/jobs/{blocked}/cancel")
    retried = dashboard.act(f"/jobs/{flaky}/retry")
    final = client.wait(flaky, JOB_SECONDS)

    assert cancelled.json() == {"ok": True, "message": f"job {blocked} cancelled"}
    assert client.state(blocked) == "cancelled"
    assert again.status_code == 409 and "cancelled already" in again.json()["error"]
    assert retried.json() == {"ok": True, "message": f"job {flaky}: 1 tasks to run again"}
    assert final["state"] == "succeeded" and final["tasks"]["t1"]["attempts"] == 2


def test_clear_and_mark_from_a_task_panel(
    dashboard: Dashboard, client: Client, workers: Workers
) -> None:
    workers.start()
    job_id = client.submit(
        {
            "name": "panel",
            "tasks": [
                {"id": "t1", "task": "tasks_for_tests.fatal"},
                {
                    "id": "t2",
                    "task": "tasks_for_tests.record",
                    "depends_on": ["t1"],
                    "inputs": {"label": "t1"},
                },
            ],
        }  # fmt: skip
    )
    assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"

    cleared = dashboard.act(f"/jobs/{job_id}/tasks/t1/clear?reason=again")
    assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"  # fatal again
    bad = dashboard.act(f"/jobs/{job_id}/tasks/t1/mark?state=succeeded&result=%7Bx")
    marked = dashboard.act(f"/jobs/{job_id}/tasks/t1/mark?state=succeeded&result=%22ok%22")
    status = client.wait(job_id, JOB_SECONDS)

    assert cleared.json()["message"] == f"job {job_id}: 1 tasks to run again (t1)"
    assert bad.status_code == 400 and "the result must be JSON" in bad.json()["error"]
    assert marked.status_code == 200, marked.text
    assert status["state"] == "succeeded" and client.result(job_id, "t2") == "ok"
    people = [(h["task"], h["handler"], h["error"]) for h in client.history(job_id)]
    assert ("t1", "dashboard", "cleared by dashboard: again") in people
    assert ("t1", "dashboard", "marked succeeded by dashboard") in people
    page = dashboard.get(f"/jobs/{job_id}").text
    assert "job.js" in page  # the panel's buttons are drawn by it (browser tier: clicked)


def test_pause_a_queue_and_a_job_from_the_dashboard_and_find_jobs_by_tag(
    dashboard: Dashboard, client: Client, workers: Workers
) -> None:
    paused = dashboard.act("/queues/default/pause")
    acme = client.submit(one_task("acme-report", tags={"customer": "acme"}))
    other = client.submit(one_task("zed-report", tags={"customer": "zed"}))
    held = dashboard.act(f"/jobs/{acme}/pause")
    queues_html = dashboard.get("/queues").text
    job_html = dashboard.get(f"/jobs/{acme}").text
    tagged = rows(dashboard.get("/jobs?tag=customer=acme").text)

    assert paused.json()["message"] == "queue default paused"
    assert 'data-url="/queues/default/resume"' in queues_html
    assert held.json()["message"] == f"job {acme} paused"
    assert 'id="job-paused"' in job_html and f'data-url="/jobs/{acme}/resume"' in job_html
    assert "customer=acme" in job_html
    assert tagged == [acme]
    assert dashboard.get("/jobs?tag=customer").status_code == 400

    workers.start()
    assert dashboard.act("/queues/default/resume").json()["message"] == "queue default resumed"
    assert client.wait(other, JOB_SECONDS)["state"] == "succeeded"
    assert client.status(acme)["tasks"]["t1"]["state"] == "queued"  # met and parked
    assert dashboard.act(f"/jobs/{acme}/resume").json()["message"] == f"job {acme} resumed"
    assert client.wait(acme, JOB_SECONDS)["state"] == "succeeded"


def test_retry_the_failed_jobs_of_a_filtered_list_from_the_dashboard(
    dashboard: Dashboard, client: Client, workers: Workers
) -> None:
    workers.start()

    def failing_once(name: str, customer: str) -> str:
        args = {"times": 1, "counter": name}
        spec = one_task(name, task="tasks_for_tests.fail_times", args=args)
        return client.submit({**spec, "tags": {"customer": customer}})

    acme = [failing_once(f"acme-{i}", "acme") for i in range(2)]
    zed = failing_once("zed", "zed")
    for job_id in [*acme, zed]:
        assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"

    listed = dashboard.get("/jobs?tag=customer=acme&state=failed").text
    unfiltered = dashboard.act("/jobs/bulk/retry")
    retried = dashboard.act("/jobs/bulk/retry?tag=customer%3Dacme&state=failed")

    assert 'id="bulk-retry"' in listed
    assert unfiltered.status_code == 400 and "filter the list first" in unfiltered.json()["error"]
    assert retried.json()["message"] == "2 failed job(s) retried"
    assert {client.wait(j, JOB_SECONDS)["state"] for j in acme} == {"succeeded"}
    assert client.state(zed) == "failed"


def test_a_form_post_with_the_token_field_acts_and_redirects(
    dashboard: Dashboard, client: Client
) -> None:
    job_id = client.submit(one_task())

    reply = dashboard.http.post(f"/jobs/{job_id}/cancel", data={"token": TOKEN})

    assert reply.status_code == 303
    assert reply.headers["location"].startswith(f"/jobs/{job_id}?notice=job%20")
    assert client.state(job_id) == "cancelled"


def test_schedules_show_next_fire_and_pause_and_resume(
    dashboard: Dashboard, client: Client
) -> None:
    schedule_id = client.schedule(one_task("hourly-job"), every="PT1H", name="hourly")

    listed = dashboard.get("/schedules").text
    paused = dashboard.act(f"/schedules/{schedule_id}/pause")
    while_paused = dashboard.get("/schedules").text
    resumed = dashboard.act(f"/schedules/{schedule_id}/resume")
    shown = dashboard.get(f"/schedules/{schedule_id}")

    assert f'<tr data-schedule="{schedule_id}">' in listed and "hourly-job" in listed
    assert "in 59 min" in listed or "in 1 h" in listed  # the next fire
    assert paused.json()["message"] == f"schedule {schedule_id} paused"
    assert f'data-url="/schedules/{schedule_id}/resume"' in while_paused
    assert resumed.json()["message"] == f"schedule {schedule_id} resumed"
    assert client.schedules()[0]["state"] == "active"
    assert shown.status_code == 200 and "Recent fires" in shown.text


@pytest.mark.parametrize("action", ACTIONS)
def test_actions_are_refused_without_the_right_token_and_change_nothing(
    dashboard: Dashboard, readonly: Dashboard, client: Client, action: str
) -> None:
    job_id = client.submit(one_task())
    schedule_id = client.schedule(one_task(), every="PT1H")
    path = action.format(job=job_id, schedule=schedule_id)
    before = (client.status(job_id), client.schedules(), client.paused())

    no_token = dashboard.act(path, token=None)
    wrong = dashboard.act(path, token=TOKEN + "x")
    empty_form = dashboard.http.post(path, data={"token": ""})
    cross_site = dashboard.act(path, headers={"Origin": "http://evil.example"})
    as_get = dashboard.get(path)
    read_only = readonly.act(path, token=TOKEN)

    assert (no_token.status_code, wrong.status_code, empty_form.status_code) == (401, 401, 401)
    assert "needs the dashboard's token" in wrong.json()["error"]
    assert cross_site.status_code == 403 and "another site" in cross_site.json()["error"]
    assert as_get.status_code == 405
    assert read_only.status_code == 403 and "read-only" in read_only.json()["error"]
    assert (client.status(job_id), client.schedules(), client.paused()) == before


def test_a_read_only_dashboard_shows_no_action_buttons(readonly: Dashboard, client: Client) -> None:
    job_id = client.submit(one_task())

    html = readonly.get(f"/jobs/{job_id}").text

    assert "read-only" in html and 'data-actions="off"' in html
    assert "cancel-job" not in html and 'id="token"' not in html


# -- recovery -------------------------------------------------------------------------------------


def test_the_recovery_page_shows_what_the_last_pass_repaired(
    redis_url: str, namespace: str, workers: Workers
) -> None:
    fast = {"JOBCENTER_RECOVERY_INTERVAL_SECONDS": "1", "JOBCENTER_LEASE_SECONDS": "1.5"}
    client = Client.from_url(redis_url, namespace, recovery_interval_seconds=1)
    job_id = client.submit(one_task(queue="orphan"))  # no worker serves it: it stays queued
    ready = client.store.keys.queue(0, "orphan")
    assert client.store.redis.zremrangebyrank(ready, 0, -1) == 1  # the lost message (rule 2)
    workers.start(env=fast)

    def repaired() -> views.RecoveryRound | None:
        rounds = views.recovery(client.store).rounds
        return next((r for r in rounds if r.report and r.report["requeued"]), None)

    d = Dashboard(client)

    def shown() -> tuple[views.RecoveryRound, str] | None:
        found = repaired()  # rq keeps a round's report for three (here 1 s) intervals
        html = d.get("/recovery").text if found else ""
        return (found, html) if found and f'<tr data-round="{found.round}">' in html else None

    try:
        found, html = wait_until(shown, timeout=JOB_SECONDS, message="no recovery report shown")
    finally:
        d.close()

    assert found.report is not None and found.report["requeued"] == 1 and found.repairs == 1
    assert client.store.redis.zcard(ready) == 1 and client.state(job_id) == "running"
    assert f'<tr data-round="{found.round}">' in html
    assert "requeued: 1" in html


def test_the_queues_page_shows_pools_and_rate_limits(dashboard: Dashboard, client: Client) -> None:
    client.set_pool("gpu", 2)
    client.set_rate("queue:emails", "10/1s")
    client.submit({"name": "p", "tasks": [{"id": "a", "task": "t.x", "pool": "gpu"}]})
    client.store.claim("h", ["default"], max_tasks=1, max_leader=0)  # holds a slot
    client.submit({"name": "w", "tasks": [{"id": "b", "task": "t.x", "pool": "licences"}]})
    client.store.claim("h", ["default"], max_tasks=1, max_leader=0)  # parks b: pool not set

    html = dashboard.get("/queues").text

    gpu = re.search(r'<tr data-pool="gpu">(.*?)</tr>', html, re.S)
    assert gpu is not None
    assert '<td class="num used">1</td>' in gpu.group(1)
    assert '<td class="num slots">2</td>' in gpu.group(1)
    licences = re.search(r'<tr data-pool="licences">(.*?)</tr>', html, re.S)
    assert licences is not None
    assert "not set" in licences.group(1) and '<td class="num waiting">1</td>' in licences.group(1)
    assert "at most 10 starts per 1.0 s" in html


def test_a_waiting_task_shows_what_it_waits_for_and_is_approved_from_the_dashboard(
    dashboard: Dashboard, client: Client
) -> None:
    job_id = client.submit({"name": "approval", "tasks": [
        {"id": "approve", "wait_for": {"signal": "approve"}},
        {"id": "ship", "task": "jobcenter.demo.step", "args": [0], "depends_on": "approve"},
    ]})  # fmt: skip
    task = dashboard.json(f"/api/jobs/{job_id}/tasks/0")
    assert isinstance(task, dict) and task["state"] == "awaiting"
    assert task["awaiting"]["kind"] == "signal" and task["awaiting"]["name"] == "approve"

    denied = dashboard.act(f"/jobs/{job_id}/signal/approve?payload=true", token=None)
    approved = dashboard.act(f"/jobs/{job_id}/signal/approve?payload=true")
    rejected = dashboard.act(f"/jobs/{job_id}/signal/approve?payload=false")

    assert denied.status_code in (401, 403)
    assert approved.json() == {
        "ok": True,
        "message": f"job {job_id}: signal approve released 1 task(s)",
    }
    assert rejected.status_code == 409 and "another payload" in rejected.json()["error"]
    assert client.result(job_id, "approve") is True
