"""Pure helpers for the locust files (no locust import, so they are testable anywhere):
options, queue names, isolation contexts and produce request bodies.

Produce requests carry ``batch`` messages of ``message_bytes`` each (the benchmark's
self-describing payloads as JSON string values, keys from ``keys`` key names) to one of
``queues`` queues, with a lane and an env sent as ``X-Lane`` / ``X-Env`` headers.
Consumers each get one (lane, env) context, round-robin over the configured ones.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import orjson

from vpq.load.payload import make_payload


def parse_list(text: str) -> list[str]:
    """``"a,b"`` -> ``["a", "b"]``; an empty item is kept (the backbone lane is ``""``);
    an empty text is ``[""]``."""
    return [item.strip() for item in text.split(",")]


@dataclass(frozen=True)
class LoadOptions:
    queues: int = 10
    queue_prefix: str = "load"
    batch: int = 10
    message_bytes: int = 1024
    keys: int = 1000
    lanes: tuple[str, ...] = ("", "lane-a", "lane-b")
    envs: tuple[str, ...] = ("prod", "test")
    group: str = "load"
    work_ms: float = 10.0
    max_messages: int = 50
    wait_ms: int = 1000

    def __post_init__(self) -> None:
        if self.queues < 1 or self.batch < 1 or self.keys < 1 or self.max_messages < 1:
            raise ValueError("queues, batch, keys and max_messages must be >= 1")
        if not self.lanes or not self.envs:
            raise ValueError("at least one lane and one env")
        if self.work_ms < 0 or self.wait_ms < 0:
            raise ValueError("work_ms and wait_ms must be >= 0")

    def queue_names(self) -> list[str]:
        return [f"{self.queue_prefix}-{i}" for i in range(self.queues)]

    def context(self, index: int) -> tuple[str, str]:
        """The (lane, env) of consumer number ``index``: every combination, round-robin."""
        combos = [(lane, env) for env in self.envs for lane in self.lanes]
        return combos[index % len(combos)]


def produce_request(options: LoadOptions, rng: random.Random) -> tuple[str, bytes, dict[str, str]]:
    """One produce request: (queue, JSON body, headers) with a random queue, lane, env
    and keys, ``options.batch`` messages."""
    queue = f"{options.queue_prefix}-{rng.randrange(options.queues)}"
    messages = []
    for _ in range(options.batch):
        key = f"k{rng.randrange(options.keys)}"
        value = make_payload(key, rng.randrange(1 << 30), size=options.message_bytes).decode("ascii")
        messages.append({"key": key, "value": value})
    headers = {
        "Content-Type": "application/json",
        "X-Lane": rng.choice(options.lanes),
        "X-Env": rng.choice(options.envs),
    }
    return queue, orjson.dumps({"messages": messages}), headers
