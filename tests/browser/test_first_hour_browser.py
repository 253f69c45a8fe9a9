"""The dashboard a newcomer meets, in headless Chromium: the tour the README gives (a worker,
the demo job submitted from the CLI, its DAG, a failed task's panel, a schedule run now),
every box of a DAG on screen at first load whatever the window, the zoom controls, a map's
instances appearing live, a large group's box and bar, the jobs list keeping itself up to
date, and pages that wait out a Redis outage. Screenshots go to build/screenshots/<test>/
(each path printed; `pytest -s` shows them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from browser_harness import (
    DAG_LAYOUT,
    NODE_STATES,
    PAGE_SECONDS,
    TOKEN,
    URL,
    click_node,
    enter_token,
    job_badge,
    open_job,
    shot,
    wait,
    window,
)
from harness import PROCESS_START_SECONDS, Cli
from helpers import read_until, wait_until
from integration.integration_harness import EXAMPLES, JOB_SECONDS, Scratch, Workers

from jobcenter import Client
from jobcenter.storage.server.embedded import RedisServer

SMALL, MEDIUM, LARGE = (1024, 768), (1400, 1000), (1920, 1080)  # common window sizes


def spec_of(example: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load((EXAMPLES / example).read_text())
    return spec


def chain(n: int) -> dict[str, Any]:
    """n tasks one after another: a picture n boxes wide."""
    tasks = [{"id": f"step-{i:02d}", "task": "x.never"} for i in range(n)]
    for before, task in zip(tasks, tasks[1:], strict=False):
        task["depends_on"] = [before["id"]]
    return {"name": f"chain-{n}", "tasks": tasks}


def fan(n: int) -> dict[str, Any]:
    """A root, n tasks after it, one task after all of those: a picture n boxes tall."""
    middle = [
        {"id": f"shard-{i:02d}", "task": "x.never", "depends_on": ["split"]} for i in range(n)
    ]
    merge = {"id": "merge", "task": "x.never", "depends_on": [t["id"] for t in middle]}
    return {"name": f"fan-{n}", "tasks": [{"id": "split", "task": "x.never"}, *middle, merge]}


def layers(depth: int, width: int) -> dict[str, Any]:
    """`depth` levels of `width` tasks, each after two of the level above: drawn in groups."""
    tasks: list[dict[str, Any]] = []
    for level in range(depth):
        for k in range(width):
            task: dict[str, Any] = {"id": f"l{level:02d}-{k:03d}", "task": "x.never"}
            if level:
                task["depends_on"] = [
                    f"l{level - 1:02d}-{k:03d}",
                    f"l{level - 1:02d}-{(k + 1) % width:03d}",
                ]
            tasks.append(task)
    return {"name": f"layers-{depth}x{width}", "tasks": tasks}


def click(driver: Any, element_id: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.ID, element_id).click()


def text_of(driver: Any, element_id: str) -> str:
    return str(driver.execute_script(f"return document.getElementById('{element_id}').textContent"))


# -- the tour -------------------------------------------------------------------------------------


def test_the_tour_a_worker_the_demo_job_its_dag_a_failed_task_and_a_schedule(
    browser: Any,
    dashboard_url: str,
    redis_url: str,
    namespace: str,
    tmp_path: Path,
    workers: Workers,
    screenshots: Path,
) -> None:
    from selenium.webdriver.common.by import By

    cli = Cli(redis_url, namespace, tmp_path)
    window(browser, SMALL)
    browser.get(f"{dashboard_url}jobs")  # the jobs list, open before anything was submitted
    browser.execute_script("window.sameDocument = true")
    workers.start()  # jobcenter worker jobcenter.demo (and the suite's tasks)
    submitted = cli("submit", str(EXAMPLES / "seed000.yaml"))
    job_id = submitted.stdout.strip()

    def listed_as(state: str) -> bool:
        rows = browser.find_elements(By.CSS_SELECTOR, f'#jobs tr[data-job="{job_id}"] .badge')
        return bool(rows) and rows[0].text == state

    wait(browser, lambda _: listed_as("succeeded"), message="the list never showed it succeed")
    shot(browser, screenshots, "tour-1-jobs-list")
    list_stayed = browser.execute_script("return window.sameDocument")
    browser.find_element(By.LINK_TEXT, job_id).click()
    wait(browser, lambda d: d.execute_script("return window.jobcenterPage?.ready"), PAGE_SECONDS)
    at_small = browser.execute_script(DAG_LAYOUT)
    shot(browser, screenshots, "tour-2-demo-job-1024x768")
    window(browser, LARGE)
    open_job(browser, dashboard_url, job_id)
    at_large = browser.execute_script(DAG_LAYOUT)
    shot(browser, screenshots, "tour-3-demo-job-1920x1080")

    failing = cli("submit", str(EXAMPLES / "seed000_fail.yaml")).stdout.strip()
    window(browser, SMALL)
    open_job(browser, dashboard_url, failing)
    wait(browser, lambda d: job_badge(d) == "failed", message="the failure example never failed")
    click_node(browser, "t4")
    error = wait(browser, lambda d: d.find_element(By.ID, "task-error").text, PAGE_SECONDS)
    with_panel = browser.execute_script(DAG_LAYOUT)
    shot(browser, screenshots, "tour-4-failed-task-panel")

    schedule_id = cli("schedule", "add", str(EXAMPLES / "seed000.yaml"), "--every", "1h",
                      "--name", "hourly-demo").stdout.strip()  # fmt: skip
    browser.get(f"{dashboard_url}schedules")
    browser.find_element(By.LINK_TEXT, "hourly-demo").click()
    enter_token(browser)
    browser.find_element(By.CSS_SELECTOR, "button.run-now").click()
    ran = wait(browser, lambda d: "submitted" in (n := d.find_element(By.ID, "notice").text) and n)
    run_id = ran.split("job ")[1].split()[0]
    wait(browser, lambda d: d.find_elements(By.LINK_TEXT, run_id), message="no fire listed the run")
    shot(browser, screenshots, "tour-5-schedule-run-now")

    assert submitted.code == 0 and list_stayed is True  # the list followed the job by itself
    for seen in (at_small, at_large, with_panel):
        assert (seen["boxes"], seen["hidden"], seen["overflowing"]) == (9, [], [])
    assert "RuntimeError: step 4 failed on purpose" in error
    assert browser.current_url == f"{dashboard_url}schedules/{schedule_id}"
    assert Client.from_url(redis_url, namespace).wait(run_id, JOB_SECONDS)["state"] == "succeeded"
    assert sorted(p.name for p in screenshots.iterdir()) == [
        "tour-1-jobs-list.png", "tour-2-demo-job-1024x768.png", "tour-3-demo-job-1920x1080.png",
        "tour-4-failed-task-panel.png", "tour-5-schedule-run-now.png",
    ]  # fmt: skip


# -- the DAG on screen -------------------------------------------------------------------------


def test_every_box_of_a_dag_is_on_screen_at_first_load_at_common_window_sizes(
    browser: Any, dashboard_url: str, client: Client, screenshots: Path
) -> None:
    jobs = {  # no worker: each job stays as submitted
        "seed-000": client.submit(spec_of("seed000.yaml")),
        "a chain of 50": client.submit(chain(50)),
        "a fan-out of 48": client.submit(fan(48)),
        "2,000 tasks in groups": client.submit(layers(20, 100)),
    }
    seen = {}
    for size in (SMALL, MEDIUM, LARGE):
        window(browser, size)
        for label, job_id in jobs.items():
            open_job(browser, dashboard_url, job_id)
            seen[size, label] = browser.execute_script(DAG_LAYOUT)
            shot(browser, screenshots, f"{label.replace(' ', '-')}-{size[0]}x{size[1]}")

    assert {k: len(v["hidden"]) for k, v in seen.items() if v["hidden"]} == {}
    assert {k: v["overflowing"] for k, v in seen.items() if v["overflowing"]} == {}
    assert {v["boxes"] for (_, label), v in seen.items() if label != "2,000 tasks in groups"} == {
        9,
        50,
    }


def test_fit_shows_the_whole_dag_again_after_zooming_and_1_1_shows_its_actual_size(
    browser: Any, dashboard_url: str, client: Client
) -> None:
    window(browser, SMALL)
    open_job(browser, dashboard_url, client.submit(chain(50)))
    fitted = browser.execute_script(DAG_LAYOUT)
    click(browser, "dag-actual")
    actual = browser.execute_script(DAG_LAYOUT)
    for _ in range(3):
        click(browser, "dag-zoom-in")
    zoomed = browser.execute_script(DAG_LAYOUT)
    click(browser, "dag-fit")
    refitted = browser.execute_script(DAG_LAYOUT)

    assert fitted["hidden"] == [] and fitted["scale"] < 1  # shrunk to show it all
    assert actual["scale"] == pytest.approx(1) and "step-00" not in actual["hidden"]
    assert len(actual["hidden"]) > 40  # at its own size, a few boxes from its start
    assert zoomed["scale"] > actual["scale"]
    assert refitted["hidden"] == [] and refitted["scale"] == pytest.approx(fitted["scale"])


# -- what the page shows as a job runs ---------------------------------------------------------


def test_a_maps_instances_appear_live_with_edges_from_their_source_and_in_the_task_count(
    browser: Any, dashboard_url: str, client: Client, workers: Workers
) -> None:
    job_id = client.submit(spec_of("etl.yaml"))
    window(browser, SMALL)
    open_job(browser, dashboard_url, job_id)  # before any worker: transform not expanded yet
    before = (text_of(browser, "job-tasks"), browser.execute_script(DAG_LAYOUT)["boxes"])
    workers.start()
    wait(browser, lambda d: job_badge(d) == "succeeded", message="the ETL job never succeeded")
    wait(browser, lambda d: d.execute_script(DAG_LAYOUT)["boxes"] == 9, PAGE_SECONDS)
    after = browser.execute_script(DAG_LAYOUT)
    arrows = browser.execute_script("return document.querySelectorAll('path.edge').length")

    assert before == ("4", 4)
    assert text_of(browser, "job-tasks") == "9"  # the header counts the instances too
    assert (after["hidden"], after["overflowing"]) == ([], [])
    assert arrows == 4 + 5 + 5  # the spec's four, source -> each instance -> the mapped task
    assert browser.execute_script("return window.sameDocument") is True


COUNTS = """
return Object.fromEntries([...document.querySelectorAll('#counts > span')]
  .map(s => [s.dataset.state, parseInt(s.textContent)]));
"""
GROUP = """
const g = document.querySelector('g.node[data-group="item-#"]');
return {failed: Number(g.querySelectorAll('rect:not(.box)')[0].getAttribute('width')),
        title: g.querySelector('title').textContent};
"""  # the bar's segments are in the order of urgency: failed first


def test_a_large_groups_text_stays_in_its_box_and_one_failed_task_shows_in_its_bar(
    browser: Any,
    dashboard_url: str,
    client: Client,
    workers: Workers,
    scratch: Scratch,
    screenshots: Path,
) -> None:
    items: list[dict[str, Any]] = [{"id": "item-000", "task": "tasks_for_tests.fatal"}]
    items += [
        {"id": f"item-{k:03d}", "task": "tasks_for_tests.block", "args": ["g"]} for k in (1, 2, 3)
    ]
    items += [{"id": f"item-{k:03d}", "task": "tasks_for_tests.record"} for k in range(4, 500)]
    merge = {
        "id": "merge",
        "task": "tasks_for_tests.record",
        "depends_on": [t["id"] for t in items],
    }
    job_id = client.submit({"name": "five-hundred", "tasks": [*items, merge]})
    for _ in range(2):
        workers.start()
    window(browser, SMALL)
    open_job(browser, dashboard_url, job_id)
    settled = {"failed": 1, "upstream_failed": 1, "running": 3, "succeeded": 496}
    wait(browser, lambda d: d.execute_script(COUNTS) == settled, message="never settled")
    layout = browser.execute_script(DAG_LAYOUT)
    group = browser.execute_script(GROUP)
    shot(browser, screenshots, "500-task-group-one-failed")
    scratch.open_gate("g")

    assert layout["boxes"] == 2 and layout["hidden"] == []  # the group and merge
    assert layout["overflowing"] == []  # "1 failed · 3 running · 496 succeeded" is cut to fit
    assert group["failed"] >= 3  # 1 of 500 of a 154 px bar would be 0.3 px
    assert group["title"].endswith("1 failed · 3 running · 496 succeeded")  # the counts, whole
    assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"


def test_the_jobs_list_keeps_itself_up_to_date_without_a_reload(
    browser: Any, dashboard_url: str, client: Client, workers: Workers
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{dashboard_url}jobs")
    browser.execute_script("window.sameDocument = true")
    job_id = client.submit(spec_of("seed000.yaml"))  # no worker yet

    def badge(d: Any) -> str:
        found = d.find_elements(By.CSS_SELECTOR, f'#jobs tr[data-job="{job_id}"] .badge')
        return str(found[0].text) if found else ""

    first = wait(browser, badge, PAGE_SECONDS, "the new job never appeared in the list")
    workers.start()
    wait(browser, lambda d: badge(d) == "succeeded", message="the list never showed it succeed")

    assert first == "running"
    assert browser.execute_script("return window.sameDocument") is True


# -- Redis away and back --------------------------------------------------------------------------


@pytest.fixture
def dashboard_on_private_redis(
    private_redis: RedisServer, namespace: str, tmp_path: Path
) -> Iterator[str]:
    """`jobcenter dashboard` on a Redis of this test's own, which it stops and starts."""
    cli = Cli(private_redis.url, namespace, tmp_path)
    proc = cli.start("dashboard", "--port", "0", "--token", TOKEN)
    assert proc.stdout is not None
    yield read_until(proc.stdout, URL, PROCESS_START_SECONDS).group(1)
    proc.terminate()
    proc.wait(PROCESS_START_SECONDS)
    cli.close()


def test_pages_say_redis_is_away_and_carry_on_when_it_is_back(
    browser: Any,
    dashboard_on_private_redis: str,
    private_redis: RedisServer,
    namespace: str,
    screenshots: Path,
) -> None:
    from selenium.webdriver.common.by import By

    url = dashboard_on_private_redis
    client = Client.from_url(private_redis.url, namespace)
    job_id = client.submit(spec_of("seed000.yaml"))  # no worker: it waits
    window(browser, SMALL)
    open_job(browser, url, job_id)

    private_redis.stop()
    paused = wait(browser, lambda d: "cannot reach Redis" in (n := text_of(d, "dag-note")) and n)
    shot(browser, screenshots, "job-page-redis-away")
    browser.execute_script("window.open(arguments[0] + 'workers')", url)  # a page asked for now
    browser.switch_to.window(browser.window_handles[1])
    outage = wait(browser, lambda d: d.find_elements(By.ID, "outage"), PAGE_SECONDS)[0].text
    shot(browser, screenshots, "workers-page-redis-away")
    private_redis.restart()
    wait(browser, lambda d: d.find_elements(By.ID, "workers"), PAGE_SECONDS)  # it reloaded
    browser.switch_to.window(browser.window_handles[0])
    client.cancel(job_id)
    wait(browser, lambda d: job_badge(d) == "cancelled", message="the job page stayed stopped")
    states = set(browser.execute_script(NODE_STATES).values())

    assert f"cannot reach Redis at {private_redis.url}" in paused and "trying again" in paused
    assert outage.startswith(f"cannot reach Redis at {private_redis.url}")
    assert states == {"cancelled"} and text_of(browser, "dag-note") == ""
    assert browser.execute_script("return window.sameDocument") is True
    wait_until(lambda: client.state(job_id) == "cancelled", timeout=JOB_SECONDS)
