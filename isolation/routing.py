"""The routing rule: which live consumer context of a group receives a message.

``route(msg, live, set_fallback)`` decides, for a message with context
``(env, set, lane)`` and the contexts of a group's live consumers:

1. **env is strict**: only contexts of the message's env are candidates.
2. **set first**: the message's set is *eligible* when some live context of
   ``(env, set)`` can take it, i.e. has the message's lane or the backbone lane
   ``""``. The message's own set is chosen when eligible; otherwise, when
   ``set_fallback`` (a per-queue option) and the message's set is not already the
   default set, the default set ``""`` is chosen when eligible.
3. **then lane, within the chosen set**: the message's lane when a consumer of
   ``(env, set, lane)`` is live, else the backbone ``(env, set, "")``.
4. ``None`` when nothing qualifies: the message waits until a consumer joins.

So a message never reaches another env, a lane-``a`` consumer only ever gets
lane-``a`` messages, a backbone consumer gets backbone messages plus those of
lanes without a live consumer (in its set), and a default-set consumer gets
default-set messages plus (with fallback) those of sets without an eligible
consumer. A consumer of set ``s`` that only runs lane ``b`` does not make ``s``
eligible for lane-``a`` messages, which then fall back to the default set.

``Router`` precomputes the live contexts so the hot path is a cached dict lookup.

Pure logic: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from vpq.isolation.context import IsolationContext

_CACHE_LIMIT = 65536


def _choose(
    msg: IsolationContext, lanes_by_env_set: dict[tuple[str, str], frozenset[str]], set_fallback: bool
) -> IsolationContext | None:
    def lane_in(set_name: str) -> str | None:
        lanes = lanes_by_env_set.get((msg.env, set_name))
        if not lanes:
            return None
        if msg.lane in lanes:
            return msg.lane
        if "" in lanes:
            return ""
        return None

    lane = lane_in(msg.set)
    if lane is not None:
        return IsolationContext(msg.env, msg.set, lane)
    if set_fallback and msg.set != "":
        lane = lane_in("")
        if lane is not None:
            return IsolationContext(msg.env, "", lane)
    return None


def _index(live: Iterable[IsolationContext]) -> dict[tuple[str, str], frozenset[str]]:
    acc: dict[tuple[str, str], set[str]] = {}
    for c in live:
        if not isinstance(c, IsolationContext):
            raise TypeError(f"live contexts must be IsolationContext, got {type(c).__name__}")
        acc.setdefault((c.env, c.set), set()).add(c.lane)
    return {k: frozenset(v) for k, v in acc.items()}


def route(
    message_ctx: IsolationContext, live_consumer_contexts: Collection[IsolationContext], set_fallback: bool = True
) -> IsolationContext | None:
    """The live consumer context that receives a message of ``message_ctx``, or None
    (nobody can receive it yet). See the module docstring for the rule."""
    return _choose(message_ctx, _index(live_consumer_contexts), set_fallback)


class Router:
    """The routing rule for one fixed set of live contexts, with a per-message-context cache.

    Build a new ``Router`` when the group's membership changes; ``route`` is then a
    dict lookup after the first call for each message context.
    """

    __slots__ = ("_live", "_index", "_set_fallback", "_cache")

    def __init__(self, live_contexts: Iterable[IsolationContext], set_fallback: bool = True) -> None:
        self._live = frozenset(live_contexts)
        self._index = _index(self._live)
        self._set_fallback = set_fallback
        self._cache: dict[IsolationContext, IsolationContext | None] = {}

    @property
    def live(self) -> frozenset[IsolationContext]:
        return self._live

    @property
    def set_fallback(self) -> bool:
        return self._set_fallback

    def route(self, message_ctx: IsolationContext) -> IsolationContext | None:
        """Same answer as ``route(message_ctx, self.live, self.set_fallback)``."""
        try:
            return self._cache[message_ctx]
        except KeyError:
            pass
        target = _choose(message_ctx, self._index, self._set_fallback)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[message_ctx] = target
        return target

    def table(self, message_contexts: Iterable[IsolationContext]) -> dict[IsolationContext, IsolationContext | None]:
        """``{message context: receiving context or None}`` for each given message context."""
        return {m: self.route(m) for m in message_contexts}

    def receives(self, consumer_ctx: IsolationContext, message_ctx: IsolationContext) -> bool:
        """True when a consumer of ``consumer_ctx`` is where ``message_ctx`` goes."""
        return self.route(message_ctx) == consumer_ctx
