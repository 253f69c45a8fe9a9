"""The task panel shows the log of a failed task's attempts in headless Chromium: the
latest by default, an earlier one chosen from the list, its output shown as text (a task
printing HTML does not put HTML in the page)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from browser_harness import PAGE_SECONDS, click_node, job_badge, open_job, shot, wait
from integration.integration_harness import JOB_SECONDS, Workers

from jobcenter import Client

LABEL = "<b id=injected>x</b>"  # printed by the task: must show as text


def test_an_on_call_person_reads_each_attempt_of_a_failed_tasks_log_in_the_panel(
    browser: Any, dashboard_url: str, client: Client, workers: Workers, screenshots: Path
) -> None:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    workers.start()
    job_id = client.submit({"name": "noisy", "tasks": [
        {"id": "load", "task": "tasks_for_tests.prints", "args": [300, "fail", LABEL],
         "retries": 1, "retry_backoff": 0},
    ]})  # fmt: skip
    assert client.wait(job_id, JOB_SECONDS)["state"] == "failed"
    open_job(browser, dashboard_url, job_id)
    wait(browser, lambda d: job_badge(d) == "failed", PAGE_SECONDS)
    click_node(browser, "load")

    def log_text(driver: Any) -> str:
        try:
            found = driver.find_elements(By.ID, "task-log")
            return found[0].text if found else ""
        except StaleElementReferenceException:  # the panel was drawn again meanwhile
            return ""

    def choose(driver: Any, attempt: str) -> bool:
        try:
            Select(driver.find_element(By.ID, "task-log-attempt")).select_by_visible_text(attempt)
            return True
        except StaleElementReferenceException:
            return False

    latest = wait(
        browser, lambda d: "attempt 2 failed" in log_text(d) and log_text(d), PAGE_SECONDS
    )
    shot(browser, screenshots, "task-log-latest")
    wait(browser, lambda d: choose(d, "attempt 1"), PAGE_SECONDS)
    first = wait(browser, lambda d: "attempt 1 failed" in log_text(d) and log_text(d), PAGE_SECONDS)
    shot(browser, screenshots, "task-log-attempt-1")

    for shown, n in [(latest, 2), (first, 1)]:
        lines = shown.splitlines()
        assert f"stderr line {LABEL}" in lines
        assert sum(line.startswith("line ") and LABEL in line for line in lines) == 3
        assert lines[-1].startswith(f"[jobcenter] attempt {n} failed on worker ")
        assert lines[-1].endswith("RuntimeError: failed after printing 3 lines")
    assert browser.find_elements(By.ID, "injected") == []  # text, never HTML
