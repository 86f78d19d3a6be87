"""Locust: HTTP produce load on the vpq gateway, over lanes and envs.

Each user sends produce requests back to back: ``--vpq-batch`` messages of
``--vpq-message-bytes`` to a random one of ``--vpq-queues`` queues, with a random lane
(``--vpq-lanes``) and env (``--vpq-envs``) as ``X-Lane``/``X-Env`` headers. The queues
are created (PUT, idempotent) when the test starts. A 200 means the batch is durable.

    .venv/bin/locust -f load/locustfile_produce.py --headless -u 20 -r 5 -t 30s \\
        --host http://127.0.0.1:8080 --vpq-queues 10 --vpq-batch 10
"""

from __future__ import annotations

import random
import urllib.request
from typing import Any

from locust import FastHttpUser, events, task

from vpq.load.locust_args import options_from
from vpq.load.locust_common import LoadOptions, produce_request


@events.test_start.add_listener
def create_queues(environment: Any, **_: Any) -> None:
    """PUT every queue once (200 or 201) before the users start."""
    options = options_from(environment.parsed_options)
    host = environment.host
    if not host:
        return
    for name in options.queue_names():
        req = urllib.request.Request(f"{host.rstrip('/')}/v1/queues/{name}", data=b"{}", method="PUT",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()


class ProduceUser(FastHttpUser):
    """Sends produce requests back to back (closed loop per user)."""

    def on_start(self) -> None:
        self.options: LoadOptions = options_from(self.environment.parsed_options)
        self.rng = random.Random()

    @task
    def produce(self) -> None:
        queue, body, headers = produce_request(self.options, self.rng)
        self.client.post(f"/v1/queues/{queue}/messages", data=body, headers=headers, name="produce")
