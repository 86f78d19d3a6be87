"""LeaseKeeper: keeps a node's registration and leases alive in the background.

Contract:

- ``start()`` registers the node (when built with a ``NodeRegistry``) and starts
  a task that renews every ``ttl_ms * renew_fraction`` (default a third of the
  TTL): the node registration (registering again if it had expired) and every
  held lease, all leases in one round trip.
- A lease is LOST when its renewal is refused (someone else holds it now), or
  when no renewal has succeeded for ``ttl_ms`` measured from the start of the
  last successful attempt (Redis unreachable: the lease may have expired and
  been handed over, so the keeper assumes it has). A lost lease is dropped from
  the held set and reported to ``on_lost(resource, token)`` once; the node must
  stop acting on it at once (fencing tokens reject whatever it still sends).
- ``stop()`` cancels the task, then (by default) releases the held leases and
  deregisters the node so others can take over without waiting for the TTL.

One keeper per node process; all methods run on its event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from vpq.metadata.aio import cancel_and_wait
from vpq.metadata.errors import MetadataUnavailable
from vpq.metadata.leases import LeaseManager, NodeRegistry

log = logging.getLogger(__name__)

LostCallback = Callable[[str, int], Awaitable[None]]


class LeaseKeeper:
    def __init__(
        self,
        leases: LeaseManager,
        node_id: str,
        ttl_ms: int,
        *,
        on_lost: LostCallback | None = None,
        nodes: NodeRegistry | None = None,
        role: str | None = None,
        address: str = "",
        meta: Mapping[str, Any] | None = None,
        renew_fraction: float = 1 / 3,
    ) -> None:
        if nodes is not None and not role:
            raise ValueError("a node registration needs a role")
        if not 0 < renew_fraction < 1:
            raise ValueError("renew_fraction must be in (0, 1)")
        self._leases = leases
        self._nodes = nodes
        self.node_id = node_id
        self.ttl_ms = ttl_ms
        self._role = role
        self._address = address
        self._meta = dict(meta or {})
        self._on_lost = on_lost
        self._interval_s = ttl_ms * renew_fraction / 1000.0
        self._held: dict[str, int] = {}
        self._last_ok: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    # lifecycle
    async def start(self) -> None:
        if self._task is not None:
            return
        if self._nodes is not None:
            assert self._role is not None
            await self._nodes.register_node(self.node_id, self._role, self._address, self.ttl_ms, self._meta)
        self._task = asyncio.create_task(self._run(), name=f"vpq-lease-keeper-{self.node_id}")

    async def stop(self, release: bool = True) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
        if not release:
            return
        for resource, token in list(self._held.items()):
            with contextlib.suppress(MetadataUnavailable, OSError):
                await self._leases.release(resource, self.node_id, token)
        self._held.clear()
        self._last_ok.clear()
        if self._nodes is not None and self._role is not None:
            with contextlib.suppress(MetadataUnavailable, OSError):
                await self._nodes.deregister_node(self.node_id, self._role)

    # leases
    async def acquire(self, resource: str) -> int | None:
        """Try to take ``resource``; its fencing token (then kept alive) or None."""
        started = time.monotonic()
        token = await self._leases.acquire(resource, self.node_id, self.ttl_ms)
        if token is not None:
            self._held[resource] = token
            self._last_ok[resource] = started
        return token

    async def release(self, resource: str) -> bool:
        """Stop holding ``resource`` and give it up in Redis."""
        token = self._held.pop(resource, None)
        self._last_ok.pop(resource, None)
        if token is None:
            return False
        return await self._leases.release(resource, self.node_id, token)

    def token(self, resource: str) -> int | None:
        """The token under which ``resource`` is held, None when not held."""
        return self._held.get(resource)

    def held(self) -> dict[str, int]:
        return dict(self._held)

    async def renew_now(self) -> None:
        """One renewal round (the background task calls this; tests may too)."""
        started = time.monotonic()
        if self._nodes is not None and self._role is not None:
            if not await self._nodes.renew_node(self.node_id, self._role, self.ttl_ms):
                await self._nodes.register_node(self.node_id, self._role, self._address, self.ttl_ms, self._meta)
        snapshot = dict(self._held)
        results = await self._leases.renew_many(self.node_id, snapshot, self.ttl_ms)
        for resource, ok in results.items():
            if self._held.get(resource) != snapshot[resource]:
                continue  # released or re-acquired meanwhile
            if ok:
                self._last_ok[resource] = started
            else:
                await self._lose(resource, "renewal refused")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.renew_now()
            except asyncio.CancelledError:
                raise
            except (MetadataUnavailable, OSError) as exc:
                log.warning("lease renewal failed: %s", exc)
                now = time.monotonic()
                for resource in list(self._held):
                    if now - self._last_ok.get(resource, now) >= self.ttl_ms / 1000.0:
                        await self._lose(resource, "Redis unreachable for a whole TTL")

    async def _lose(self, resource: str, why: str) -> None:
        token = self._held.pop(resource, None)
        self._last_ok.pop(resource, None)
        if token is None:
            return
        log.warning("lost lease %s (token %d): %s", resource, token, why)
        if self._on_lost is not None:
            try:
                await self._on_lost(resource, token)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("on_lost callback failed for %s", resource)
