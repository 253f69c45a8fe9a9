"""What a worker stores as a task's result: msgpack, nothing for None, and a clear error
(never a retry, never a cut value) for what cannot be stored."""

from __future__ import annotations

import pytest

from jobcenter.model import codec
from jobcenter.runtime.execution.outcome import ResultRefused, pack_result
from jobcenter.storage.store import NO_RESULT


def test_a_result_is_packed_and_none_stores_nothing() -> None:
    assert codec.unpack(pack_result("t", {"rows": [1, 2]}, 1_000)) == {"rows": [1, 2]}
    assert pack_result("t", None, 1_000) == NO_RESULT == b""


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ({1, 2}, "TypeError: task 'etl.load' returned a set that cannot be stored"),
        ([object()], "TypeError: task 'etl.load' returned a list that cannot be stored"),
        ("x" * 2_000, "ResultTooLarge: task 'etl.load' returned a result of more than 1000 bytes"),
        (b"x" * 999, "ResultTooLarge"),  # 999 bytes pack to 1,001: the packed size counts
    ],
    ids=["set", "object-in-list", "too-long-str", "packed-over-the-limit"],
)
def test_a_result_that_cannot_be_stored_is_refused_naming_why(value: object, error: str) -> None:
    with pytest.raises(ResultRefused, match=error.replace("(", r"\(")):
        pack_result("etl.load", value, 1_000)
