"""Locust: consumer groups on the vpq gateway, with a configurable work time per message.

Each user is one consumer: it joins group ``--vpq-group`` of one of the
``--vpq-queues`` queues (round-robin) with a lane/env context (every combination of
``--vpq-lanes`` x ``--vpq-envs``, round-robin), then long-polls (``--vpq-max-messages``,
``--vpq-wait-ms``), "works" ``--vpq-work-ms`` per message, acks the batch, and leaves
when the test stops. Run it with the produce file to have traffic:

    .venv/bin/locust -f load/locustfile_produce.py,load/locustfile_consume.py --headless \\
        -u 40 -r 10 -t 30s --host http://127.0.0.1:8080 --vpq-work-ms 10
"""

from __future__ import annotations

import itertools
from typing import Any

import gevent
import orjson
from locust import FastHttpUser, task

from vpq.load.locust_args import options_from
from vpq.load.locust_common import LoadOptions

_numbers = itertools.count()


class ConsumeUser(FastHttpUser):
    """One consumer-group member: poll, work, ack."""

    def on_start(self) -> None:
        self.options: LoadOptions = options_from(self.environment.parsed_options)
        number = next(_numbers)
        self.queue = self.options.queue_names()[number % self.options.queues]
        lane, env = self.options.context(number)
        self.base = f"/v1/queues/{self.queue}/groups/{self.options.group}/consumers"
        self.consumer_id: str | None = None
        with self.client.put(f"/v1/queues/{self.queue}", data=b"{}", headers={"Content-Type": "application/json"},
                             name="create queue", catch_response=True) as resp:
            if resp.status_code in (200, 201):
                resp.success()
        body = orjson.dumps({"lane": lane, "env": env})
        with self.client.post(self.base, data=body, headers={"Content-Type": "application/json"}, name="join",
                              catch_response=True) as resp:
            if resp.status_code == 200 or resp.status_code == 201:
                self.consumer_id = orjson.loads(resp.content)["consumer_id"]
            else:
                resp.failure(f"join answered {resp.status_code}")

    @task
    def poll_work_ack(self) -> None:
        if self.consumer_id is None:
            self.on_start()
            return
        body = orjson.dumps({"max_messages": self.options.max_messages, "wait_ms": self.options.wait_ms})
        resp = self.client.post(f"{self.base}/{self.consumer_id}/poll", data=body,
                                headers={"Content-Type": "application/json"}, name="poll")
        if resp.status_code == 404:
            self.consumer_id = None  # the session timed out: join again
            return
        if resp.status_code != 200:
            return
        messages: list[dict[str, Any]] = orjson.loads(resp.content).get("messages", [])
        if not messages:
            return
        gevent.sleep(len(messages) * self.options.work_ms / 1000.0)
        ack = orjson.dumps({"ids": [m["id"] for m in messages]})
        self.client.post(f"{self.base}/{self.consumer_id}/ack", data=ack, headers={"Content-Type": "application/json"},
                         name="ack")

    def on_stop(self) -> None:
        if self.consumer_id is not None:
            self.client.delete(f"{self.base}/{self.consumer_id}", name="leave")
            self.consumer_id = None
