"""Property-based fuzzing of every endpoint from the OpenAPI document (schemathesis): no
answer is a 5xx, and each one keeps to the document (its status codes, content types and
schemas), for requests valid and not. The document is docs/openapi.json, which
test_openapi.py holds equal to the one the server serves. The runs are bounded (a few
examples an endpoint), so the tier stays short; a Python worker runs beside, so claims and
reports meet real work."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
import schemathesis
from api_harness import ApiServer, Workers
from harness import REPO_ROOT
from hypothesis import HealthCheck, settings
from schemathesis import checks

EXAMPLES_PER_ENDPOINT = 12
# A claim's long poll is capped this short here: a generated `wait` of a minute would only
# make the run long.
CLAIM_WAIT_MAX = 0.2
ANSWERS: Counter[str] = Counter()  # "<operation> <status>": the run's counts, printed at its end
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
]


@pytest.fixture(scope="module")
def fuzzed(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """One server for the whole run, with jobs to find and a worker running them."""
    namespace = "fuzz" + uuid.uuid4().hex[:8]
    server = ApiServer(redis_url, namespace, claim_wait_max=CLAIM_WAIT_MAX)
    pool = Workers(redis_url, namespace, tmp_path_factory.mktemp("fuzz"))
    pool.start(concurrency=2)
    admin = server.token("admin")
    for n in range(3):
        spec = {"name": f"fuzz-{n}", "tasks": [{"id": "a", "task": "jobcenter.demo.step"}]}
        server.submit(admin, spec)
    server.admin = admin  # type: ignore[attr-defined]
    yield server
    by_status = Counter(key.rsplit(" ", 1)[1] for key in ANSWERS.elements())
    print(
        f"\nfuzzing: {sum(ANSWERS.values())} requests, by status {dict(sorted(by_status.items()))}"
    )
    problems = pool.close()
    server.close()
    assert not problems, problems


schema = schemathesis.openapi.from_path(REPO_ROOT / "docs" / "openapi.json")


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_ENDPOINT,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_endpoint_answers_a_5xx_or_outside_its_document(
    case: schemathesis.Case, fuzzed: ApiServer
) -> None:
    headers = {"Authorization": f"Bearer {fuzzed.admin}"}  # type: ignore[attr-defined]
    response = case.call_and_validate(base_url=fuzzed.base, headers=headers, checks=CHECKS)
    ANSWERS[f"{case.operation.label} {response.status_code}"] += 1
