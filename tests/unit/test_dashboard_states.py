"""Every task state has its colour on the dashboard: a badge class and a DAG colour."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from jobcenter.model.states import TaskState

STATIC = resources.files("jobcenter.web").joinpath("static")


@pytest.mark.parametrize("state", [s.value for s in TaskState])
def test_each_task_state_has_a_colour_a_badge_and_an_urgency(state: str) -> None:
    css = STATIC.joinpath("app.css").read_text()
    js = STATIC.joinpath("job.js").read_text()
    assert f"--{state}:" in css
    assert re.search(rf"\.state-{state}[ ,]", css)
    urgency = js[js.index("const URGENCY = [") : js.index("];", js.index("const URGENCY = ["))]
    assert f'"{state}"' in urgency


def test_skipped_counts_as_a_finished_task_on_the_job_page() -> None:
    js = STATIC.joinpath("job.js").read_text()
    done = js[js.index("const TASK_DONE") :].split("\n", 1)[0]
    assert '"skipped"' in done
