"""Change announcements: pub/sub for speed, a versioned log for correctness.

Every metadata change that others must notice (a new map epoch, a queue created,
updated or deleted, a group membership change) is announced atomically with the
change itself, inside the same Lua script (see ``ANNOUNCE_LUA``):

1. ``INCR p:events:version`` gives the announcement its version ``v``;
2. the JSON message (the event plus ``"version": v``) is pushed onto the capped
   list ``p:events:log`` (newest first, ``LOG_MAX`` entries);
3. it is published on the channel ``p:events``.

Messages look like ``{"type": "map", "epoch": 7, "version": 42}``,
``{"type": "queue", "name": "orders", "op": "update", "version": 43}``,
``{"type": "group", "queue": "orders", "group": "g", "generation": 3, ...}``.

``EventListener`` (start()/stop()) subscribes to the channel and ALSO polls the
version counter every ``poll_interval_ms``. Whenever the version moved past the
last delivered one without a matching pub/sub message (a message lost while
reconnecting, a dropped subscriber connection, Redis restarted), it reads the
missed messages back from the log and delivers them in order. When they are no
longer in the log, or the version went backwards (Redis lost data), it delivers
one ``{"type": "resync", "version": v}`` event instead: listeners must then
reload everything they cache. Callbacks run one at a time, in version order, on
the listener's task; an exception in a callback is logged and does not stop it.
The listener reconnects by itself after Redis restarts (exponential backoff).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError, RedisError, TimeoutError

from vpq.metadata.aio import cancel_and_wait
from vpq.metadata.errors import MetadataUnavailable
from vpq.metadata.keys import Keys

log = logging.getLogger(__name__)

LOG_MAX = 1000
"""Announcements kept in ``p:events:log`` for listeners that missed pub/sub."""

ANNOUNCE_LUA = """
local function vpq_announce(version_key, log_key, channel, event)
  local v = redis.call('INCR', version_key)
  event['version'] = v
  local msg = cjson.encode(event)
  redis.call('LPUSH', log_key, msg)
  redis.call('LTRIM', log_key, 0, %d)
  redis.call('PUBLISH', channel, msg)
  return v
end
""" % (LOG_MAX - 1)
"""Lua prelude defining ``vpq_announce(version_key, log_key, channel, event_table)``.
Scripts that announce prepend it and pass ``Keys.events_version()`` and
``Keys.events_log()`` among their KEYS and ``Keys.events()`` among their ARGV."""

_ANNOUNCE_SCRIPT = ANNOUNCE_LUA + """
return vpq_announce(KEYS[1], KEYS[2], ARGV[1], cjson.decode(ARGV[2]))
"""

EventCallback = Callable[[dict[str, Any]], Awaitable[None]]


class Announcer:
    """Announces an event from Python (when no Lua script does it already)."""

    def __init__(self, client: aioredis.Redis, keys: Keys) -> None:
        self._keys = keys
        self._script = client.register_script(_ANNOUNCE_SCRIPT)

    async def announce(self, event: dict[str, Any]) -> int:
        """Publish ``event`` (a JSON object with a ``type``); returns its version."""
        if not isinstance(event.get("type"), str):
            raise ValueError("an event needs a string 'type'")
        k = self._keys
        return int(
            await self._script(keys=[k.events_version(), k.events_log()], args=[k.events(), json.dumps(event)])
        )


class EventListener:
    """Delivers announcements to registered async callbacks; see the module docstring.

    ``use_pubsub=False`` relies on polling alone (useful where pub/sub is not
    available, and in tests of the fallback).
    """

    def __init__(
        self,
        client: aioredis.Redis,
        keys: Keys,
        poll_interval_ms: int = 1000,
        *,
        use_pubsub: bool = True,
        max_backoff_s: float = 2.0,
    ) -> None:
        if poll_interval_ms < 1:
            raise ValueError("poll_interval_ms must be >= 1")
        self._client = client
        self._keys = keys
        self._poll_s = poll_interval_ms / 1000.0
        self._use_pubsub = use_pubsub
        self._max_backoff_s = max_backoff_s
        self._callbacks: list[EventCallback] = []
        self._task: asyncio.Task[None] | None = None
        self._pubsub: Any = None
        self._version = 0

    @property
    def version(self) -> int:
        """Version of the last announcement delivered (or seen at start)."""
        return self._version

    def add_callback(self, callback: EventCallback) -> None:
        self._callbacks.append(callback)

    def remove_callback(self, callback: EventCallback) -> None:
        with contextlib.suppress(ValueError):
            self._callbacks.remove(callback)

    async def start(self) -> None:
        """Subscribe (when pub/sub is on), read the current version, start the task.
        Announcements made before start() are not delivered. Raises if Redis is down."""
        if self._task is not None:
            return
        await self._connect()
        self._version = await self._read_version()
        self._task = asyncio.create_task(self._run(), name="vpq-event-listener")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
        await self._disconnect()

    async def _connect(self) -> None:
        if self._use_pubsub and self._pubsub is None:
            pubsub = self._client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._keys.events())
            except BaseException:
                await pubsub.aclose()
                raise
            self._pubsub = pubsub

    async def _disconnect(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(Exception):
                await pubsub.aclose()

    async def _read_version(self) -> int:
        raw = await self._client.get(self._keys.events_version())
        return int(raw) if raw is not None else 0

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = 0.05
        while True:
            try:
                await self._connect()
                deadline = loop.time() + self._poll_s
                while (remaining := deadline - loop.time()) > 0:
                    if self._pubsub is None:
                        await asyncio.sleep(remaining)
                        break
                    msg = await self._pubsub.get_message(timeout=remaining)
                    if msg is not None and msg.get("type") == "message":
                        await self._on_message(msg["data"])
                await self._catch_up()
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except (ConnectionError, TimeoutError, OSError, RedisError, MetadataUnavailable) as exc:
                log.info("event listener lost Redis (%s); reconnecting in %.2fs", exc, backoff)
                await self._disconnect()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff_s)

    async def _on_message(self, data: str) -> None:
        try:
            event = json.loads(data)
            v = int(event["version"])
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring malformed announcement %r", data)
            return
        if v <= self._version:
            return
        if v == self._version + 1:
            self._version = v
            await self._deliver(event)
        else:
            await self._catch_up()

    async def _catch_up(self) -> None:
        """Deliver everything after the last delivered version from the log (read
        atomically with the version counter), or a resync event when it is gone."""
        estimate = await self._read_version()
        for _ in range(3):
            if estimate == self._version:
                return
            if estimate < self._version:
                self._version = estimate
                await self._deliver({"type": "resync", "version": estimate, "reason": "version went backwards"})
                return
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.get(self._keys.events_version())
                pipe.lrange(self._keys.events_log(), 0, estimate - self._version + 15)
                raw_version, raw = await pipe.execute()
            current = int(raw_version or 0)
            found: dict[int, dict[str, Any]] = {}
            for item in raw:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    ev = json.loads(item)
                    found[int(ev["version"])] = ev
            wanted = range(self._version + 1, current + 1)
            if current >= self._version and all(v in found for v in wanted):
                for v in wanted:
                    self._version = v
                    await self._deliver(found[v])
                return
            if current <= estimate:
                estimate = current
                break
            estimate = current  # more announcements raced in: read a longer slice
        self._version = estimate
        await self._deliver({"type": "resync", "version": estimate, "reason": "announcements missed"})

    async def _deliver(self, event: dict[str, Any]) -> None:
        for cb in list(self._callbacks):
            try:
                await cb(event)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("event callback %r failed on %r", cb, event)
