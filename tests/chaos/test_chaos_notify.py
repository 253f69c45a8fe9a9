"""A worker killed -9 in the middle of delivering a notification: the delivery's lease runs
out and another worker delivers it (at least once); `status` shows the lost attempt and the
one that got through."""

from __future__ import annotations

from chaos_harness import Cluster
from helpers import wait_until
from webhook_server import ALLOW_ENV, HANG, allowing, webhook_server

from jobcenter import Client

SECRET = "chaos-webhook-secret"
# The first worker must still be waiting for the endpoint when it is killed: an attempt
# times out after this, and the delivery's lease is three of these.
TIMEOUT_SECONDS = 3.0
DELIVERED_WITHIN_SECONDS = 3 * TIMEOUT_SECONDS + 30.0  # the lease, then a loaded CI machine


def test_a_worker_killed_mid_delivery_leaves_the_notification_to_another_that_sends_it(
    cluster: Cluster, client: Client
) -> None:
    env = {
        **ALLOW_ENV,
        "JOBCENTER_WEBHOOK_SECRET": SECRET,
        "JOBCENTER_NOTIFY_TIMEOUT_SECONDS": str(TIMEOUT_SECONDS),
    }
    with webhook_server([HANG, 200]) as server:
        first = cluster.start(env=env)
        first_handler = cluster.handler_of(first)
        job_id = allowing(client).submit(
            {
                "name": "told-despite-a-crash",
                "notify": {"on": ["succeeded"], "webhook": server.url},
                "tasks": [{"id": "a", "task": "chaos.step"}],
            }
        )
        wait_until(server.count, DELIVERED_WITHIN_SECONDS)  # the first worker is mid-delivery
        cluster.power_off(first)
        second = cluster.start(env=env)

        def delivered() -> bool:
            webhook = client.status(job_id)["notifications"]["deliveries"]["webhook"]
            return webhook["state"] == "delivered"

        wait_until(delivered, DELIVERED_WITHIN_SECONDS)

    assert client.state(job_id) == "succeeded"
    assert server.count() == 2 and all(r.signed_by(SECRET) for r in server.received)
    assert [r.json()["job_id"] for r in server.received] == [job_id, job_id]
    attempts = client.status(job_id)["notifications"]["attempts"]
    assert [(a["attempt"], a["outcome"], a["handler"]) for a in attempts] == [
        (1, "lost", first_handler),
        (2, "delivered", cluster.handler_of(second)),
    ]
