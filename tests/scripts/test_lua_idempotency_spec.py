"""An idempotency key stands for one spec: the same spec again returns the first job, a
different spec under the key is an error that names both, and nothing is written."""

from __future__ import annotations

from typing import Any

import pytest
from lua_helpers import submit, untouched

import jobcenter.storage.jobs.submit
import jobcenter.storage.store
from jobcenter.errors import IdempotencyConflict
from jobcenter.model.spec import parse_spec
from jobcenter.storage.store import Store

SPEC: dict[str, Any] = {
    "name": "nightly",
    "idempotency_key": "etl-2026-11-22",
    "tasks": [{"id": "x", "task": "t.x", "args": [1], "kwargs": {"day": "22", "hour": 2}}],
}


def with_task(**changes: Any) -> dict[str, Any]:
    return {**SPEC, "tasks": [{**SPEC["tasks"][0], **changes}]}


@pytest.mark.parametrize("split", ["inline", "leader"])
@pytest.mark.parametrize(
    "other",
    [
        with_task(args=[2]),
        with_task(kwargs={"day": "23", "hour": 2}),
        with_task(retries=1),
        {**SPEC, "name": "nightly-v2"},
        {**SPEC, "tasks": [*SPEC["tasks"], {"id": "y", "task": "t.y"}]},
    ],
    ids=["args", "kwargs", "retries", "name", "one-more-task"],
)
def test_a_key_resubmitted_with_a_different_spec_is_refused_naming_the_key_and_job(
    store: Store, monkeypatch: pytest.MonkeyPatch, split: str, other: dict[str, Any]
) -> None:
    if split == "leader":
        monkeypatch.setattr(jobcenter.storage.jobs.submit, "INLINE_SPLIT_MAX", 0)
    job_id = submit(store, SPEC)

    with untouched(store), pytest.raises(IdempotencyConflict) as raised:
        store.submit(parse_spec(other))

    assert "'etl-2026-11-22'" in str(raised.value) and job_id in str(raised.value)
    assert "different spec" in str(raised.value)


def test_the_same_spec_with_its_maps_in_another_order_returns_the_first_job(
    store: Store,
) -> None:
    job_id = submit(store, SPEC)
    reordered = with_task(kwargs={"hour": 2, "day": "22"})

    with untouched(store):
        assert store.submit(parse_spec(reordered)) == (job_id, False)


def test_a_key_stored_without_a_digest_still_returns_its_job(store: Store) -> None:
    """Keys written before digests were kept hold the job id alone: they match any spec."""
    job_id = submit(store, SPEC)
    idem = store.keys.idempotency(store.keys.job_shard(job_id), "etl-2026-11-22")
    store.redis.set(idem, job_id, keepttl=True)

    with untouched(store):
        assert store.submit(parse_spec(with_task(args=[2]))) == (job_id, False)
