"""Scoped tokens: each scope is refused what it may not do (and changes nothing), an
owner-bound token sees only its owner's jobs (another's is a 404 by id, in the list and in
the event stream), Redis keeps only a token's hash, and the dashboard's actions take the
same tokens."""

from __future__ import annotations

from typing import Any

import pytest
from api_harness import ApiServer
from harness import Cli

from jobcenter import Client

SPEC = {"name": "one", "tasks": [{"id": "a", "task": "jobcenter.demo.step", "args": [1]}]}
# (method, path, body, the scope it needs): a call of each kind the API has
CALLS: list[tuple[str, str, Any, str]] = [
    ("GET", "/jobs", None, "read"),
    ("GET", "/jobs/{job}", None, "read"),
    ("GET", "/jobs/{job}/events", None, "read"),
    ("GET", "/pools", None, "read"),
    ("POST", "/jobs", SPEC, "submit"),
    ("POST", "/jobs/{job}/cancel", None, "operate"),
    ("POST", "/worker/claim", {"tasks": ["nothing.here"]}, "work"),
    ("POST", "/tokens", {"scope": "read"}, "admin"),
    ("PUT", "/pools/gpu", {"slots": 2}, "admin"),
    ("GET", "/tokens", None, "admin"),
]
INCLUDES = {
    "read": {"read"},
    "submit": {"read", "submit"},
    "operate": {"read", "submit", "operate"},
    "work": {"work"},
    "admin": {"read", "submit", "operate", "work", "admin"},
}


@pytest.mark.parametrize("scope", list(INCLUDES))
def test_each_scope_is_refused_what_it_may_not_do_and_nothing_changes(
    api: ApiServer, client: Client, scope: str
) -> None:
    token = api.token(scope)
    for method, path, body, needed in CALLS:
        job_id = client.submit(SPEC)
        before = (client.list(), client.pools())
        reply = api.call(method, path.format(job=job_id), token, json=body)
        if needed in INCLUDES[scope]:
            assert reply.status_code < 300, (scope, method, path, reply.text)
        else:
            assert reply.status_code == 403, (scope, method, path, reply.text)
            assert f"needs the {needed} scope" in reply.json()["detail"]
            assert (client.list(), client.pools()) == before


def test_an_owner_bound_token_cannot_see_another_owners_job(api: ApiServer) -> None:
    alice = api.token("operate", owner="alice")
    bob = api.token("operate", owner="bob")
    hers = api.submit(alice, SPEC)
    his = api.submit(bob, SPEC)

    listed = api.call("GET", "/jobs", alice).json()["jobs"]
    asked = api.call("GET", "/jobs", alice, params={"owner": "bob"}).json()["jobs"]
    stream = api.call("GET", f"/jobs/{his}/events", alice, headers={"Accept": "text/event-stream"})
    hidden = {
        path: api.call(method, path, alice).status_code
        for method, path in [
            ("GET", f"/jobs/{his}"),
            ("GET", f"/jobs/{his}/history"),
            ("GET", f"/jobs/{his}/events"),
            ("GET", f"/jobs/{his}/tasks/a/result"),
            ("POST", f"/jobs/{his}/cancel"),
            ("POST", f"/jobs/{his}/retry"),
            ("DELETE", f"/jobs/{his}"),
        ]
    }
    as_bob = api.call("POST", "/jobs", alice, json={**SPEC, "owner": "bob"})

    assert [job["id"] for job in listed] == [hers] and asked == []
    assert api.call("GET", f"/jobs/{hers}", alice).json()["owner"] == "alice"
    assert stream.status_code == 404 and stream.json()["detail"].startswith(f"no job {his}")
    assert set(hidden.values()) == {404}, hidden
    assert as_bob.status_code == 422 and "as owner 'alice' only" in as_bob.json()["detail"]
    assert api.state(bob, his) == "running"  # alice's cancel changed nothing


def test_redis_keeps_only_a_tokens_hash_and_a_revoked_token_is_refused(
    api: ApiServer, redis_url: str, namespace: str, tmp_path: Any
) -> None:
    cli = Cli(redis_url, namespace, tmp_path)
    made = cli("token", "create", "--scope", "read", "--owner", "carol", "--name", "ci")
    token = made.stdout.strip()
    listed = cli("token", "list", "--json").json()
    stored = b"".join(
        api.client.store.redis.hvals(api.client.store.keys.api_tokens())
        + api.client.store.redis.hkeys(api.client.store.keys.api_tokens())
    )
    before = api.call("GET", "/jobs", token)
    revoked = cli("token", "revoke", listed[0]["id"])
    after = api.call("GET", "/jobs", token)
    bound_admin = cli("token", "create", "--scope", "admin", "--owner", "carol")

    assert made.code == 0 and token.startswith("jct_") and "shown this once" in made.stderr
    assert [(t["scope"], t["owner"], t["name"]) for t in listed] == [("read", "carol", "ci")]
    assert token.encode() not in stored and token.split("_")[2].encode() not in stored
    assert before.status_code == 200 and revoked.code == 0
    assert after.status_code == 401
    assert bound_admin.code == 2 and "acts for every owner" in bound_admin.stderr


def test_the_dashboards_actions_take_an_operate_token_and_its_owner(
    api: ApiServer, client: Client
) -> None:
    job_id = client.submit({**SPEC, "owner": "bob"})
    other = client.submit({**SPEC, "owner": "alice"})

    def act(path: str, token: str | None) -> int:
        headers = {"Accept": "application/json"}
        if token:
            headers["X-Jobcenter-Token"] = token
        return api.http.post(f"{api.url}{path}", headers=headers).status_code

    page = api.http.get(f"{api.url}/jobs/{job_id}").text
    codes = {
        "none": act(f"/jobs/{job_id}/cancel", None),
        "read": act(f"/jobs/{job_id}/cancel", api.token("read")),
        "bob's on alice's job": act(f"/jobs/{other}/cancel", api.token("operate", "bob")),
        "bob's on a schedule": act("/schedules/x/pause", api.token("operate", "bob")),
        "bob's": act(f"/jobs/{job_id}/cancel", api.token("operate", "bob")),
    }

    assert 'data-actions="on"' in page and 'id="token"' in page
    assert codes == {
        "none": 401,
        "read": 403,
        "bob's on alice's job": 404,
        "bob's on a schedule": 403,
        "bob's": 200,
    }
    assert client.state(job_id) == "cancelled" and client.state(other) == "running"
