"""The browser tier: the dashboard driven in headless Chromium, as a person uses it.

Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them when it runs as
root on Debian) and selenium (the test extra), which is pointed at /usr/bin/chromedriver
and downloads nothing. Without them every test here is skipped, and the skip reason says so.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_harness import CHROMEDRIVER, CHROMIUM, CHROMIUM_FLAGS, TOKEN, URL, missing_browser
from harness import PROCESS_START_SECONDS, REPO_ROOT, Cli
from helpers import read_until
from integration.integration_harness import Scratch, Workers, worker_pool

from jobcenter import Client

SCREENSHOTS = REPO_ROOT / "build" / "screenshots"


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    """Headless Chromium with a fresh profile, driven through Debian's chromedriver."""
    reason = missing_browser()
    if reason:
        pytest.skip(f"browser tier skipped: {reason}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture
def workers(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[Workers]:
    with worker_pool(redis_url, namespace, tmp_path) as pool:
        yield pool


@pytest.fixture
def client(redis_url: str, namespace: str) -> Client:
    return Client.from_url(redis_url, namespace)


@pytest.fixture
def scratch(client: Client, namespace: str) -> Scratch:
    return Scratch(client.store.redis, namespace)


@pytest.fixture
def dashboard_url(redis_url: str, namespace: str, tmp_path: Path) -> Iterator[str]:
    """`jobcenter dashboard --port 0 --token ...` in its own process; its URL."""
    cli = Cli(redis_url, namespace, tmp_path)
    proc = cli.start("dashboard", "--port", "0", "--token", TOKEN)
    assert proc.stdout is not None
    yield read_until(proc.stdout, URL, PROCESS_START_SECONDS).group(1)
    proc.terminate()
    proc.wait(PROCESS_START_SECONDS)
    cli.close()


@pytest.fixture
def screenshots(request: pytest.FixtureRequest) -> Path:
    """build/screenshots/<test>/ (build/ is ignored by git): kept after the run, emptied
    when the test runs again."""
    folder = SCREENSHOTS / re.sub(r"[^\w.-]+", "-", request.node.name)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder
