"""The OpenAPI document: the one checked into docs/ is the one the server serves, its
interactive page loads everything from the server itself, and nothing but the health
endpoint (and the documentation) answers without a token."""

from __future__ import annotations

import json
import re

from api_harness import ApiServer
from harness import REPO_ROOT

from jobcenter.api.app import openapi_document

DOCUMENT = REPO_ROOT / "docs" / "openapi.json"


def test_the_document_in_docs_is_the_one_the_server_serves(api: ApiServer) -> None:
    served = api.call("GET", "/openapi.json")

    assert served.status_code == 200
    assert json.loads(DOCUMENT.read_text()) == served.json() == openapi_document(), (
        "docs/openapi.json is stale: run `make openapi`"
    )


def test_the_interactive_page_loads_only_files_of_the_server(api: ApiServer) -> None:
    page = api.call("GET", "/docs")
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)

    assert page.status_code == 200 and "swagger-ui" in page.text
    assert len(assets) == 3 and not any("//" in a for a in assets), assets
    for asset in assets:
        assert api.call("GET", f"/{asset}").status_code == 200, asset
    script = api.call("GET", "/docs/assets/docs.js").text
    assert "openapi.json" in script
    # the dashboard's content policy allows no inline script, and the page has none
    assert "<script>" not in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]


def test_without_a_token_only_the_health_endpoint_answers(api: ApiServer) -> None:
    document = openapi_document()
    refused = []
    for path, operations in document["paths"].items():
        concrete = re.sub(r"\{[^}]+\}", "x", path)
        for method in operations:
            reply = api.call(method.upper(), concrete, json={})
            if path == "/health":
                assert reply.status_code == 200, reply.text
                continue
            assert reply.status_code == 401, (method, path, reply.status_code, reply.text)
            assert reply.headers["content-type"] == "application/problem+json"
            assert reply.headers["www-authenticate"].startswith("Bearer")
            refused.append(f"{method} {path}")
    bad = api.call("GET", "/jobs", headers={"Authorization": "Bearer jct_not_a_token"})

    assert len(refused) > 25, refused
    assert bad.status_code == 401 and "not known" in bad.json()["detail"]
