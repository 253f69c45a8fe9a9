"""What the browser tier needs besides its fixtures: where Chromium and its driver are, the
flags it runs with, and why the tier would skip."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

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
