"""Which message isolation contexts feed which consumer context, for one group.

The routing rule (``isolation.routing``) maps a message's context to the
context of the live consumers that receive it, or to None (nobody can yet). A
group has few distinct message contexts, so the delivery state keeps the
inverse, ``sources(consumer_ctx)`` = the message contexts routed there, and
rebuilds it whenever the set of live consumer contexts changes. Routing is thus
decided at delivery time without touching any message.

Pure logic: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from vpq.isolation.context import IsolationContext

_UNKNOWN = object()
"""``route_of``'s marker of a context not routed yet (None is a route: nobody takes it)"""

RouteFn = Callable[[IsolationContext], IsolationContext | None]
RouterFactory = Callable[[frozenset[IsolationContext]], RouteFn]
"""Builds the routing function for a set of live consumer contexts."""


class RoutingTable:
    """``route_of(message ctx)`` and its inverse ``sources(consumer ctx)``."""

    __slots__ = ("_factory", "_route", "_route_of", "_sources")

    def __init__(self, router_factory: RouterFactory) -> None:
        self._factory = router_factory
        self._route: RouteFn = router_factory(frozenset())
        self._route_of: dict[IsolationContext, IsolationContext | None] = {}
        self._sources: dict[IsolationContext, list[IsolationContext]] = {}

    def rebuild(self, live: Iterable[IsolationContext], message_contexts: Iterable[IsolationContext]) -> None:
        """New live consumer contexts: re-route every known message context."""
        self._route = self._factory(frozenset(live))
        self._route_of = {}
        self._sources = {}
        for ctx in message_contexts:
            self.add(ctx)

    def add(self, message_ctx: IsolationContext) -> None:
        """Route a message context (no-op when already routed)."""
        if message_ctx in self._route_of:
            return
        target = self._route(message_ctx)
        self._route_of[message_ctx] = target
        if target is not None:
            self._sources.setdefault(target, []).append(message_ctx)

    def route_of(self, message_ctx: IsolationContext) -> IsolationContext | None:
        """Where messages of ``message_ctx`` go now (routing it if new)."""
        target = self._route_of.get(message_ctx, _UNKNOWN)
        if target is _UNKNOWN:
            self.add(message_ctx)
            target = self._route_of[message_ctx]
        return target  # type: ignore[return-value]

    def sources(self, consumer_ctx: IsolationContext) -> list[IsolationContext]:
        """The message contexts whose messages consumers of ``consumer_ctx`` receive."""
        return self._sources.get(consumer_ctx, [])
