"""Removing what the CLI manages, over HTTP: a token, a schedule, a pool and a rate limit
each answer 204 with no body, are gone after, and a second removal is a 404."""

from __future__ import annotations

from typing import Any

from api_harness import ApiServer

SPEC = {"name": "one", "tasks": [{"id": "a", "task": "jobcenter.demo.step", "args": [1]}]}


def test_each_removal_answers_204_without_a_body_and_the_thing_is_gone(api: ApiServer) -> None:
    admin = api.token("admin")
    made = api.call("POST", "/tokens", admin, json={"scope": "read", "name": "spare"}).json()
    schedule = {"spec": SPEC, "every": "PT1H", "name": "hourly"}
    made_too: list[tuple[str, str, Any]] = [
        ("POST", "/schedules", schedule),
        ("PUT", "/pools/gpu", {"slots": 2}),
        ("PUT", "/rates/queue:default", {"rate": "10/1s"}),
    ]
    for method, path, body in made_too:
        reply = api.call(method, path, admin, json=body)
        assert reply.status_code < 300, (path, reply.text)
    removals = [
        (f"/tokens/{made['id']}", "/tokens", made["id"]),
        ("/schedules/hourly", "/schedules", "hourly"),
        ("/pools/gpu", "/pools", "gpu"),
        ("/rates/queue:default", "/rates", "queue:default"),
    ]
    for path, listing, what in removals:
        assert what in api.call("GET", listing, admin).text, path
        reply = api.call("DELETE", path, admin)
        assert (reply.status_code, reply.content) == (204, b""), (path, reply.text)
        assert what not in api.call("GET", listing, admin).text, path
        assert api.call("DELETE", path, admin).status_code == 404, path
