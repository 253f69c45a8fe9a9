"""What the browser tier needs besides its fixtures: where Chromium and its driver are, the
flags it runs with, why the tier would skip, and the steps its tests take in a page."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from integration.integration_harness import JOB_SECONDS

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1400,900",
]  # fmt: skip
TOKEN = "browser-token-42"
URL = re.compile(r"jobcenter dashboard on (http://127\.0\.0\.1:\d+/)")


def missing_browser() -> str | None:
    """Why the tier cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not Path(path).is_file():
            return f"no {path} (apt-get install chromium chromium-driver; .ci/run does as root)"
    return None


PAGE_SECONDS = 15.0  # a page that has not drawn by then is broken, not slow

NODE_STATES = """
return Object.fromEntries([...document.querySelectorAll('g.node[data-task]')]
  .map(g => [g.dataset.task, g.dataset.state]));
"""


def wait(driver: Any, condition: Any, timeout: float = JOB_SECONDS, message: str = "") -> Any:
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # A page that redraws itself (the lists refresh on their own) may replace an element
    # between a condition's find and its read: that poll is not an answer, the next one is.
    return WebDriverWait(
        driver, timeout, poll_frequency=0.05, ignored_exceptions=[StaleElementReferenceException]
    ).until(condition, message)


def open_job(driver: Any, url: str, job_id: str) -> None:
    driver.get(f"{url}jobs/{job_id}")
    wait(driver, lambda d: d.execute_script("return window.jobcenterPage?.ready"), PAGE_SECONDS)
    driver.execute_script("window.sameDocument = true")  # gone if the page ever reloads


def job_badge(driver: Any) -> str:
    return str(driver.execute_script("return document.getElementById('job-state').textContent"))


def shot(driver: Any, folder: Path, name: str) -> Path:
    path = folder / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"\n[browser] screenshot: {path}")
    return path


def click_node(driver: Any, task_id: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, f'g.node[data-task="{task_id}"]').click()


def enter_token(driver: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.find_element(By.ID, "token").send_keys(TOKEN, Keys.TAB)


# Where each drawn box is against the picture's view and the window, and each text of a box
# against its box: what a person sees of the DAG without zooming or scrolling.
DAG_LAYOUT = """
const view = document.getElementById('dag-svg').getBoundingClientRect();
const win = {left: 0, top: 0, right: innerWidth, bottom: innerHeight};
const inside = (r, o) => r.left >= o.left - 0.5 && r.top >= o.top - 0.5
  && r.right <= o.right + 0.5 && r.bottom <= o.bottom + 0.5;
const out = {boxes: 0, hidden: [], overflowing: []};
for (const g of document.querySelectorAll('g.node')) {
  const box = g.querySelector('rect.box').getBoundingClientRect();
  const name = g.dataset.task || g.dataset.group;
  out.boxes += 1;
  if (!inside(box, view) || !inside(box, win)) out.hidden.push(name);
  for (const t of g.querySelectorAll('text')) {
    const over = t.textContent && !inside(t.getBoundingClientRect(), box);
    if (over) out.overflowing.push(t.textContent);
  }
}
out.scale = document.getElementById('dag-svg').getScreenCTM().a;
return out;
"""


def window(driver: Any, size: tuple[int, int]) -> None:
    """Make the browser window `size` (width, height), as a person's would be."""
    driver.set_window_size(*size)
