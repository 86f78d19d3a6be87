"""What the gateway needs from the platform: the ``Backend`` protocol.

The gateway validates every request (names, limits, JSON shape, isolation fields, auth)
before it calls the backend, so a backend receives well-formed input only. The backend
owns everything that needs state: whether a queue exists, per-queue limits
(``max_message_bytes``), durability, delivery.

Rules for every method:

* Errors are raised as ``common.errors`` types and reach the client unchanged (status,
  code, message, details). Unknown queue: ``NotFound("queue_not_found", ...)``; unknown
  group: ``NotFound("group_not_found", ...)``; unknown consumer (never joined, left or
  timed out): ``NotFound("consumer_not_found", ...)``. Temporary trouble (node failover,
  stale map, Redis away): ``Unavailable(..., retry_after=s)``; too much load:
  ``Overloaded(..., retry_after=s)`` (429, or ``status=503``). Any other exception is a
  bug and becomes a 500.
* A method that raises has changed nothing (a produce batch is all or nothing).
* Returned dicts follow the models of ``gateway/responses.py`` (named per method below);
  extra keys are allowed and passed through. Values must be JSON-serialisable by orjson.
* Methods are called concurrently from many requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from vpq.common.poll_body import PolledBody
from vpq.isolation.context import IsolationContext
from vpq.produce_path.outgoing import OutgoingBatch, ProduceResults


class ResolvedMessage(NamedTuple):
    """One validated message of a produce batch, its isolation context resolved (the
    message's own fields, else the request's X-Env/X-Set/X-Lane headers, else the
    defaults prod/""/""). Built by the models' path of the produce handler, which hands the
    backend their columns (``produce_path.outgoing.OutgoingBatch.from_messages``).

    ``value`` holds the bytes to store: the compact JSON encoding (UTF-8) of the JSON value
    when ``value_is_json``, else the raw bytes decoded from ``value_b64``. A poll must give
    the message back as ``"value": <that JSON>`` or ``"value_b64": <base64 of the bytes>``
    accordingly.
    """

    key: str | None
    value: bytes
    value_is_json: bool
    headers: dict[str, str]
    context: IsolationContext


@dataclass(frozen=True, slots=True)
class JoinSpec:
    """A validated join request. ``consumer_id`` None: the backend picks a unique one.
    ``context`` resolved like a message's (body fields, else headers, else defaults)."""

    consumer_id: str | None
    context: IsolationContext = field(default_factory=IsolationContext)
    start: Literal["earliest", "latest"] = "earliest"


@runtime_checkable
class Backend(Protocol):
    """The platform as the gateway sees it. See the module docstring for the rules."""

    async def start(self) -> None:
        """Connect and start background work. Called once before serving when the gateway
        manages the backend's lifecycle (``create_app(..., manage_backend=True)``)."""
        ...

    async def stop(self) -> None:
        """Stop background work and close connections; idempotent."""
        ...

    async def ready(self) -> bool:
        """True once the platform can serve (every node joined, map loaded). Must not raise:
        answer False when a dependency is unreachable."""
        ...

    async def put_queue(self, name: str, config: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Create or update queue ``name``. ``config`` holds only the fields the request gave,
        validated: ``virtual_partitions`` (power of two within the platform maximum),
        ``ordering`` ("key"|"none"), ``max_deliveries`` (>=1), ``visibility_timeout_ms``
        (>=1), ``retention_ms`` (-1 or >=1), ``max_message_bytes`` (>=1), ``dedup_window_ms``
        (0 to 3600000). On create, missing
        fields take the platform defaults; on update they keep their value. Shrinking
        ``virtual_partitions`` is ``Conflict("virtual_partitions_shrink", ...)``.
        Answers ``(QueueInfo dict, created)``."""
        ...

    async def get_queue(self, name: str) -> dict[str, Any]:
        """The queue as a ``QueueInfo`` dict (config, placement of each vp, traffic).
        NotFound("queue_not_found") when unknown."""
        ...

    async def list_queues(self) -> list[dict[str, Any]]:
        """Every queue (``QueueInfo`` dicts, dead-letter queues included), sorted by name."""
        ...

    async def delete_queue(self, name: str) -> None:
        """Delete the queue, its groups and their state; its messages become unreachable.
        NotFound("queue_not_found") when unknown."""
        ...

    async def produce(self, queue: str, batch: OutgoingBatch) -> ProduceResults | list[dict[str, Any]]:
        """Append the messages of ``batch`` (columns, ``produce_path.outgoing``; 1 to 10,000
        messages) durably, all or nothing, and answer where each went, in request order,
        only once every message is on disk: a ``ProduceResults`` or one ``ProduceResult``
        dict (``id``, ``partition``, ``offset``, ``virtual_partition``) per message.
        Before appending anything: NotFound("queue_not_found") for an unknown queue;
        ``PayloadTooLarge("message_too_large", ..., index=i)`` naming the first message whose
        size (``OutgoingBatch.sizes``: key + value + header names and values) exceeds the
        queue's ``max_message_bytes``."""
        ...

    async def join(self, queue: str, group: str, spec: JoinSpec) -> dict[str, Any]:
        """Add a consumer to ``group`` of ``queue`` (creating the group on first join, starting
        at ``spec.start``). Joining again with the id of a live member refreshes it and keeps
        its in-flight messages. Answers ``JoinResponse``: ``{"consumer_id",
        "session_timeout_ms"}``. NotFound("queue_not_found") when the queue is unknown."""
        ...

    async def poll(
        self, queue: str, group: str, consumer_id: str, max_messages: int, wait_ms: int, ack: Sequence[str] = ()
    ) -> list[dict[str, Any]] | PolledBody:
        """Acknowledge ``ack`` (as ``ack`` does; how many: ``PolledBody.acked``), heartbeat,
        then deliver up to ``max_messages`` (1..1000) ``DeliveredMessage`` dicts,
        waiting up to ``wait_ms`` (0..30000) for the first one; an empty list when none came.
        Or, already encoded, a ``PolledBody``: the whole answer ``{"messages": [...]}`` as
        JSON bytes and its message count, sent to the client as it is.
        NotFound for an unknown queue, group or consumer."""
        ...

    async def ack(self, queue: str, group: str, consumer_id: str, ids: list[str]) -> int:
        """Acknowledge messages delivered to this consumer; answers how many were in flight
        and are now acked (unknown or already acked ids count 0). NotFound as for poll."""
        ...

    async def nack(self, queue: str, group: str, consumer_id: str, ids: list[str], delay_ms: int) -> int:
        """Give messages back for redelivery after ``delay_ms`` (0..86,400,000); answers how
        many were in flight for this consumer. NotFound as for poll."""
        ...

    async def leave(self, queue: str, group: str, consumer_id: str) -> None:
        """Remove the consumer; its unacked messages become deliverable to others at once.
        NotFound as for poll."""
        ...

    async def group_info(self, queue: str, group: str) -> dict[str, Any]:
        """``GroupInfo``: members (consumer_id, lane, env, set, virtual_partitions, in_flight)
        and lag (total, by_lane, by_env, by_set). NotFound for unknown queue or group."""
        ...

    async def delete_group(self, queue: str, group: str) -> None:
        """Delete the group: its record, members, delivery and ack state. A later join
        starts a new group. NotFound for an unknown queue or group."""
        ...

    async def redrive(self, queue: str, group: str, max_messages: int | None) -> int:
        """Deliver messages of the group's dead-letter queue to that group only, again
        (at most ``max_messages``; None: all), each with ``delivery_count`` 1 and header
        ``x-redriven-from``; they leave the dead-letter queue. Answers how many.
        NotFound for an unknown queue or group."""
        ...

    async def cluster(self) -> dict[str, Any]:
        """``ClusterInfo``: write nodes, read nodes, physical partitions (id, owner,
        end_offset, bytes) and the current map epoch."""
        ...

    async def elect_leader(self, pp: str, node: str, unclean: bool) -> dict[str, Any]:
        """``ElectLeaderResponse``: make write node ``node`` the leader of the replicated
        physical partition ``pp`` (its path segment) whose leader failed; an out-of-sync
        node only with ``unclean`` (a truncation event). NotFound for an unknown
        partition or node, Conflict when refused (``gateway.cluster_elect``)."""
        ...

    async def current_map(self) -> dict[str, Any]:
        """``CurrentMap``: ``{"epoch": n, "queues": {name: {"virtual_partitions": V,
        "placement": [pp of vp 0, ...]}}}``."""
        ...

    async def map_history(self, limit: int) -> list[dict[str, Any]]:
        """The latest ``limit`` (1..1000) map epochs, newest first, as ``MapEpoch`` dicts
        (``metadata.map_history``): epoch, time, what changed, a remap's moves, splits and
        imbalance."""
        ...

    async def metrics_text(self) -> str:
        """Node-side metrics in Prometheus text format, appended to ``GET /metrics``; "" when
        there are none. Metric names must not clash with the gateway's ``vpq_gateway_*``."""
        ...
