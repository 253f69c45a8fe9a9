"""The dashboard in headless Chromium: the seed-000 failure run watched live in the DAG
picture, a requeue and a retry from the page, and the page of a 2,000-task job (its load
time is printed, never asserted)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from browser_harness import (
    NODE_STATES,
    PAGE_SECONDS,
    click_node,
    enter_token,
    job_badge,
    open_job,
    shot,
    wait,
)
from helpers import wait_until
from integration.integration_harness import EXAMPLES, JOB_SECONDS, Scratch, Workers
from webhook_server import ALLOW_ENV, allowing, webhook_server

from jobcenter import Client

STEP_SECONDS = "0.6"  # demo steps long enough for the picture to show each stage
LOADS = 3  # page loads measured per large job

TIMINGS = """
const at = (name) => performance.getEntriesByName(name)[0].startTime;
const nav = performance.getEntriesByType('navigation')[0];
return {html: nav.responseEnd, graph_read: at('jc-graph-read') - at('jc-graph-asked'),
        laid_out: at('jc-laid-out') - at('jc-graph-read'), drawn: at('jc-drawn'),
        boxes: window.jobcenterPage.boxes, tasks: window.jobcenterPage.tasks};
"""


def test_seed000_failure_shows_live_in_the_picture_and_a_requeue_reruns_it(
    browser: Any,
    dashboard_url: str,
    client: Client,
    workers: Workers,
    scratch: Scratch,
    screenshots: Path,
) -> None:
    from selenium.webdriver.common.by import By

    spec = yaml.safe_load((EXAMPLES / "seed000_fail.yaml").read_text())
    for t in spec["tasks"]:
        if t["id"] == "t4":  # fails like the demo's step 4, once the page has seen it run
            t.update(
                task="tasks_for_tests.block_then_fail", args=["t4", "step 4 failed on purpose"]
            )
    job_id = client.submit(spec)
    open_job(browser, dashboard_url, job_id)  # before any worker runs: nothing has happened
    at_load = browser.execute_script(NODE_STATES)
    for _ in range(2):  # not waiting for them: the watch below must begin before the run
        workers.start(env={"JOBCENTER_DEMO_STEP_SECONDS": STEP_SECONDS}, wait_ready=False)

    seen: dict[str, set[str]] = {}

    def watched(driver: Any) -> dict[str, str]:
        states: dict[str, str] = driver.execute_script(NODE_STATES)
        for task, state in states.items():
            seen.setdefault(task, set()).add(state)
        return states

    def cascaded(driver: Any) -> bool:
        states = watched(driver)
        done = (states["t4"], states["t7"], states["t9"]) == ("failed",) + ("upstream_failed",) * 2
        return done and job_badge(driver) == "failed"

    # t4 runs until the page has shown it running, so its descendants were seen waiting
    wait(browser, lambda d: watched(d)["t4"] == "running", message="t4 never showed running")
    scratch.open_gate("t4:1")
    wait(browser, cascaded, message="the picture never showed t4's failure and its cascade")
    failed_at = shot(browser, screenshots, "seed000-failed")
    final = browser.execute_script(NODE_STATES)
    click_node(browser, "t4")
    error = wait(browser, lambda d: d.find_element(By.ID, "task-error").text, PAGE_SECONDS)
    panel_at = shot(browser, screenshots, "seed000-t4-why")
    enter_token(browser)
    browser.find_element(By.ID, "requeue-task").click()
    # the re-run, too, fails only once the page has shown it running
    wait(browser, lambda d: watched(d)["t4"] == "running", message="the re-run never showed")
    scratch.open_gate("t4:2")
    wait(
        browser,
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "#task-attempts tbody tr")) == 2,
        message="the requeued attempt never showed",
    )
    wait(browser, lambda d: job_badge(d) == "failed")  # the demo's task 4 fails every time
    shot(browser, screenshots, "seed000-requeued")

    assert set(at_load.values()) <= {"queued", "waiting"}  # the run was watched from the start
    assert {"waiting", "upstream_failed"} <= seen["t7"] and {"waiting"} < seen["t9"]
    assert final == {
        "t1": "succeeded", "t2": "succeeded", "t3": "succeeded", "t4": "failed",
        "t5": "succeeded", "t6": "succeeded", "t7": "upstream_failed", "t8": "succeeded",
        "t9": "upstream_failed",
    }  # fmt: skip
    assert "RuntimeError: step 4 failed on purpose" in error and "Traceback" in error
    assert browser.execute_script("return window.sameDocument") is True  # live, no reload
    assert "requeued" in browser.find_element(By.ID, "notice").text
    assert [h["attempt"] for h in client.history(job_id) if h["task"] == "t4"] == [1, 2]
    assert failed_at.stat().st_size > 0 and panel_at.stat().st_size > 0


def test_retry_from_the_page_reruns_the_failed_part_until_the_job_succeeds(
    browser: Any, dashboard_url: str, client: Client, workers: Workers, screenshots: Path
) -> None:
    from selenium.webdriver.common.by import By

    spec = yaml.safe_load((EXAMPLES / "seed000_fail.yaml").read_text())
    for t in spec["tasks"]:
        if t["id"] == "t4":  # fails its first run only
            t.update(task="tasks_for_tests.fail_times", args=[1, "t4"])
    workers.start()
    job_id = client.submit(spec)
    client.wait(job_id, JOB_SECONDS)
    open_job(browser, dashboard_url, job_id)
    enter_token(browser)

    browser.find_element(By.ID, "retry-job").click()
    wait(browser, lambda d: job_badge(d) == "succeeded", message="the retried job never succeeded")
    states = browser.execute_script(NODE_STATES)
    shot(browser, screenshots, "seed000-retried")

    assert set(states.values()) == {"succeeded"} and len(states) == 9
    assert browser.execute_script("return window.sameDocument") is True


DELIVERY = """
const row = document.querySelector('#notifications tr[data-channel="webhook"]');
return row && [row.dataset.state, ...[...row.cells].map(c => c.textContent.trim())];
"""


def test_the_notifications_section_follows_a_delivery_without_a_reload(
    browser: Any, dashboard_url: str, client: Client, workers: Workers, scratch: Scratch
) -> None:
    workers.start(env={**ALLOW_ENV, "JOBCENTER_NOTIFY_BACKOFF_SECONDS": "0.1"})
    with webhook_server([500, 204]) as server:
        spec = {
            "name": "told",
            "notify": {"on": ["succeeded"], "webhook": server.url},
            "tasks": [{"id": "t", "task": "tasks_for_tests.block", "args": ["told"]}],
        }
        job_id = allowing(client).submit(spec)
        open_job(browser, dashboard_url, job_id)
        before = browser.execute_script(DELIVERY)
        scratch.open_gate("told")

        after = wait(
            browser,
            lambda d: (row := d.execute_script(DELIVERY)) and row[0] == "delivered" and row,
            message="the page never showed the webhook delivered",
        )

    assert before[0] == "none" and before[-1] == "when the job ends"
    assert after[1:5] == ["webhook", "delivered", "2", "-"]  # a delivery clears the error
    assert browser.execute_script("return window.sameDocument") is True


def fan_out(n: int, gate: str) -> dict:
    """A root that waits for a gate, n - 2 tasks after it, one task after all of those."""
    work = [f"work-{i:04d}" for i in range(n - 2)]
    tasks = [{"id": "split", "task": "tasks_for_tests.block", "args": [gate]}]
    tasks += [{"id": w, "task": "tasks_for_tests.record", "depends_on": ["split"]} for w in work]
    tasks += [{"id": "merge", "task": "tasks_for_tests.record", "depends_on": work}]
    return {"name": f"fan-out-{n}", "tasks": tasks}


def word(k: int) -> str:
    """A name of letters only, different for each k < 26**3: ids that share no shape."""
    return "".join("abcdefghijklmnopqrstuvwxyz"[k // 26**i % 26] for i in range(3))


def layers(depth: int, width: int, gate: str) -> dict:
    """A root waiting for a gate, then `depth` levels of `width` tasks, each after two of the
    level above."""
    names = [word(k) for k in range(depth * width)]
    tasks: list[dict[str, Any]] = [{"id": "start", "task": "tasks_for_tests.block", "args": [gate]}]
    for level in range(depth):
        for k in range(width):
            above = [names[(level - 1) * width + k], names[(level - 1) * width + (k + 1) % width]]
            tasks.append(
                {
                    "id": names[level * width + k],
                    "task": "tasks_for_tests.record",
                    "depends_on": above if level else ["start"],
                }
            )
    return {"name": f"layers-{depth}x{width}", "tasks": tasks}


def test_the_page_of_a_2000_task_job_draws_groups_and_its_load_time_is_printed(
    browser: Any,
    dashboard_url: str,
    client: Client,
    workers: Workers,
    scratch: Any,
    screenshots: Path,
) -> None:
    from selenium.webdriver.common.by import By

    workers.start()
    jobs = {
        "fan-out, split -> 1,998 -> merge": (client.submit(fan_out(2_000, "fan")), "split"),
        "20 levels of 100 unrelated ids": (client.submit(layers(20, 100, "deep")), "start"),
    }
    for job_id, root in jobs.values():  # split by the worker, its root running: being watched
        wait_until(
            lambda j=job_id, r=root: client.status(j)["tasks"][r]["state"] == "running",
            timeout=JOB_SECONDS,
        )

    results = {}
    for label, (job_id, _) in jobs.items():
        results[label] = loads = []
        for _ in range(LOADS):
            open_job(browser, dashboard_url, job_id)
            loads.append(browser.execute_script(TIMINGS))
            print(
                f"\n[browser] {label}: {loads[-1]['tasks']} tasks as {loads[-1]['boxes']} boxes; "
                f"page drawn {loads[-1]['drawn']:.0f} ms after navigation (HTML "
                f"{loads[-1]['html']:.0f} ms, graph JSON {loads[-1]['graph_read']:.0f} ms, "
                f"layout and SVG {loads[-1]['laid_out']:.0f} ms)"
            )
        shot(browser, screenshots, f"{loads[0]['tasks']}-tasks-{loads[0]['boxes']}-boxes")
    browser.find_elements(By.CSS_SELECTOR, "g.node[data-group]")[0].click()
    listed = wait(
        browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#panel-body li"), PAGE_SECONDS
    )
    shot(browser, screenshots, "2001-tasks-a-level-opened")
    scratch.open_gate("fan")
    scratch.open_gate("deep")

    fan, deep = results.values()
    assert {(x["tasks"], x["boxes"]) for x in fan} == {(2_000, 3)}
    assert {(x["tasks"], x["boxes"]) for x in deep} == {(2_001, 21)}
    assert len(listed) == 100  # the level's tasks, listed in the side panel
    for job_id, _ in jobs.values():
        assert client.wait(job_id, JOB_SECONDS * 2)["state"] == "succeeded"


def _typed(driver: Any, element_id: str, text: str) -> bool:
    """Type into a box of the task panel, which a live page may draw again meanwhile."""
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    try:
        box = driver.find_element(By.ID, element_id)
        box.clear()
        box.send_keys(text)
        return bool(box.get_attribute("value") == text)
    except WebDriverException:  # drawn again between the find and the keys: once more
        return False


def _clicked(driver: Any, element_id: str) -> bool:
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By

    try:
        driver.find_element(By.ID, element_id).click()
        return True
    except WebDriverException:
        return False


def test_a_failed_task_is_cleared_and_a_stuck_one_marked_succeeded_from_its_panel(
    browser: Any, dashboard_url: str, client: Client, workers: Workers, screenshots: Path
) -> None:
    from selenium.webdriver.common.by import By

    workers.start()
    job_id = client.submit(
        {
            "name": "stuck",
            "tasks": [
                {"id": "flaky", "task": "tasks_for_tests.fail_times", "args": [1, "flaky"]},
                {"id": "legacy", "task": "nobody.has_this"},
                {
                    "id": "after",
                    "task": "tasks_for_tests.record",
                    "depends_on": ["legacy"],
                    "inputs": {"label": "legacy"},
                },
            ],
        }  # fmt: skip
    )
    wait_until(lambda: client.status(job_id)["tasks"]["flaky"]["state"] == "failed", JOB_SECONDS)
    open_job(browser, dashboard_url, job_id)
    enter_token(browser)
    browser.execute_script("window.confirm = () => true")  # the buttons ask first
    click_node(browser, "flaky")
    wait(browser, lambda d: _clicked(d, "clear-task"), PAGE_SECONDS)
    wait(browser, lambda d: "1 tasks to run again (flaky)" in d.find_element(By.ID, "notice").text)
    wait_until(lambda: client.status(job_id)["tasks"]["flaky"]["state"] == "succeeded", JOB_SECONDS)
    click_node(browser, "legacy")
    wait(browser, lambda d: _typed(d, "operate-reason", "ran it by hand"), PAGE_SECONDS)
    wait(browser, lambda d: _typed(d, "operate-result", '"by hand"'), PAGE_SECONDS)
    browser.find_element(By.ID, "mark-succeeded").click()
    wait(browser, lambda d: job_badge(d) == "succeeded", message="the marked job never ended")
    shot(browser, screenshots, "cleared-and-marked")

    assert client.result(job_id, "after") == "by hand"
    history = client.history(job_id)
    by_hand = [(h["task"], h["error"]) for h in history if h["handler"] == "dashboard"]
    assert by_hand == [
        ("flaky", "cleared by dashboard"),
        ("legacy", "marked succeeded by dashboard: ran it by hand"),
    ]
