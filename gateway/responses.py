"""Response shapes of the public API (pydantic v2), as API.md fixes them.

They document the answers (OpenAPI) and state what the ``Backend`` must return; the
gateway passes the backend's dicts through without re-validating them on the hot path
(the tests validate the in-memory backend's answers against these models). Every model
allows extra fields, so nodes may add figures without breaking clients.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

_OPEN = ConfigDict(extra="allow")


class ErrorBody(BaseModel):
    """The error object. Other keys are details, e.g. ``index`` (first bad message of a
    batch), ``field`` (path of the bad field), ``retry_after`` (seconds, on 429/503)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={"examples": [{"code": "invalid_message", "message": "messages[3].value_b64: not valid base64", "index": 3}]},
    )

    code: str = Field(..., description="stable machine-readable code, e.g. queue_not_found")
    message: str = Field(..., description="human-readable explanation")


class ErrorResponse(BaseModel):
    """Every 4xx/5xx answer: ``{"error": {"code", "message", ...}}``."""

    model_config = _OPEN

    error: ErrorBody


class QueueTraffic(BaseModel):
    """Traffic figures of a queue (totals since creation and recent rates)."""

    model_config = _OPEN

    messages_total: int = 0
    bytes_total: int = 0
    messages_per_s: float = 0.0
    bytes_per_s: float = 0.0
    by_virtual_partition: list[int] = Field(
        default_factory=list, description="messages produced through this gateway per virtual partition (index = vp)"
    )


class QueueInfo(BaseModel):
    """A queue: its config, where each virtual partition lives and its traffic."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "name": "orders",
                    "virtual_partitions": 4,
                    "ordering": "key",
                    "max_deliveries": 5,
                    "visibility_timeout_ms": 30000,
                    "retention_ms": 604800000,
                    "max_message_bytes": 1048576,
                    "dedup_window_ms": 300000,
                    "epoch": 7,
                    "placement": [0, 1, 0, 1],
                    "traffic": {"messages_total": 120, "bytes_total": 4096, "messages_per_s": 2.5, "bytes_per_s": 80.0},
                }
            ]
        },
    )

    name: str
    virtual_partitions: int
    ordering: Literal["key", "none"]
    max_deliveries: int
    visibility_timeout_ms: int
    retention_ms: int
    max_message_bytes: int
    dedup_window_ms: int = Field(300_000, description="dedup_id window in ms (0: no deduplication)")
    epoch: int = Field(..., description="map epoch the placement belongs to")
    placement: list[int] = Field(..., description="physical partition of vp 0, vp 1, ...")
    traffic: QueueTraffic
    groups: list[str] | None = Field(
        None, description="names of its consumer groups (in the answer of GET /v1/queues/{queue}, not in the list)"
    )


class QueueList(BaseModel):
    """``GET /v1/queues``: the queues visible to the caller, by name."""

    model_config = _OPEN

    queues: list[QueueInfo]


class ProduceResult(BaseModel):
    """Where one message was durably stored."""

    model_config = _OPEN

    id: str = Field(..., description="opaque, unique within the queue")
    partition: int = Field(..., description="physical partition")
    offset: int
    virtual_partition: int


class ProduceResponse(BaseModel):
    """Results in request order, answered once every message is durable."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={"examples": [{"results": [{"id": "3-1234", "partition": 3, "offset": 1234, "virtual_partition": 7}]}]},
    )

    results: list[ProduceResult]


class JoinResponse(BaseModel):
    model_config = ConfigDict(
        extra="allow", json_schema_extra={"examples": [{"consumer_id": "c-5f2a", "session_timeout_ms": 10000}]}
    )

    consumer_id: str
    session_timeout_ms: int


class DeliveredMessage(BaseModel):
    """A delivered message: ``value`` when it was produced as JSON, ``value_b64`` when bytes."""

    model_config = _OPEN

    id: str
    queue: str
    key: str | None
    value: Any = Field(None, description="present when produced as JSON")
    value_b64: str | None = Field(None, description="present when produced as bytes")
    headers: dict[str, str]
    lane: str
    env: str
    set_: str = Field(..., alias="set")
    partition: int
    offset: int
    virtual_partition: int
    timestamp_ms: int
    delivery_count: int


class PollResponse(BaseModel):
    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "messages": [
                        {
                            "id": "3-1234",
                            "queue": "orders",
                            "key": "order-42",
                            "value": {"any": "json"},
                            "headers": {"h": "v"},
                            "lane": "",
                            "env": "prod",
                            "set": "",
                            "partition": 3,
                            "offset": 1234,
                            "virtual_partition": 7,
                            "timestamp_ms": 1700000000000,
                            "delivery_count": 1,
                        }
                    ]
                }
            ]
        },
    )

    messages: list[DeliveredMessage]


class AckResponse(BaseModel):
    model_config = _OPEN

    acked: int


class RedriveResponse(BaseModel):
    model_config = _OPEN

    redriven: int


class NackResponse(BaseModel):
    model_config = _OPEN

    nacked: int


class GroupMember(BaseModel):
    model_config = _OPEN

    consumer_id: str
    lane: str
    env: str
    set_: str = Field(..., alias="set")
    virtual_partitions: list[int] = Field(..., description="assigned virtual partitions")
    in_flight: int = Field(..., description="delivered, not yet acked")


class GroupLag(BaseModel):
    """Messages not yet acked by the group: total, split by lane, env, set and virtual
    partition, and the age of the oldest one."""

    model_config = _OPEN

    total: int
    by_lane: dict[str, int]
    by_env: dict[str, int]
    by_set: dict[str, int]
    by_virtual_partition: dict[str, int] = Field(
        default_factory=dict, description="by virtual partition (its number as the key) under the queue's current V"
    )
    oldest_unacked_age_ms: int | None = Field(
        None, description="age of the oldest message not yet acked nor dead-lettered; null when there is none"
    )


class GroupInfo(BaseModel):
    model_config = _OPEN

    queue: str
    group: str
    members: list[GroupMember]
    lag: GroupLag
    expired: int = Field(
        0, description="messages the group never got: older than the queue's retention_ms when their turn came"
    )


class NodeInfo(BaseModel):
    model_config = _OPEN

    id: str
    address: str


class DiskInfo(BaseModel):
    model_config = _OPEN

    free_bytes: int
    total_bytes: int


class WriteNodeInfo(NodeInfo):
    reachable: bool = Field(True, description="whether it answered the partition listing just now")
    disk: DiskInfo | None = Field(None, description="free and total bytes of its data directory, when it said")


class UncleanElection(BaseModel):
    """A truncation event: an out-of-sync replica was made leader by an operator."""

    model_config = _OPEN

    epoch: int = Field(..., description="the leader epoch the election started")
    node: str = Field(..., description="the write node elected")
    previous_leader: str | None = Field(None, description="the failed leader it replaced")
    previous_epoch: int
    high_watermark: int = Field(..., description="the last high watermark the failed leader reported (-1: none)")
    new_leader_end: int = Field(..., description="end offset of the elected copy")
    lost_offsets: int = Field(
        ..., description="acknowledged offsets the cluster may have lost: high_watermark - new_leader_end, at least 0"
    )
    time_ms: int
    truncated: dict[str, int] = Field(
        default_factory=dict, description="offsets each replica cut from its log to follow the new history"
    )


class PhysicalPartitionInfo(BaseModel):
    model_config = _OPEN

    id: int
    owner: str | None = Field(..., description="id of the write node holding it, null while unowned")
    end_offset: int
    bytes: int
    leader: str | None = Field(None, description="write node leading it (the owner when not replicated)")
    replicas: list[str] = Field(default_factory=list, description="write nodes holding a copy, the home node first")
    in_sync_replicas: list[str] = Field(
        default_factory=list, description="replicas that have fsynced every acknowledged message"
    )
    leader_epoch: int = Field(0, description="leader epoch (0 when not replicated)")
    last_unclean_election: UncleanElection | None = Field(
        None, description="the last operator-forced election of an out-of-sync replica (absent when none)"
    )


class ElectLeaderResponse(BaseModel):
    model_config = _OPEN

    id: int = Field(..., description="the physical partition")
    leader: str
    leader_epoch: int
    in_sync_replicas: list[str]
    unclean: bool = Field(..., description="true when the node was out of sync (a truncation event)")
    truncation: UncleanElection | None = Field(None, description="the truncation event of an unclean election")


class ClusterInfo(BaseModel):
    model_config = _OPEN

    write_nodes: list[WriteNodeInfo]
    read_nodes: list[NodeInfo]
    physical_partitions: list[PhysicalPartitionInfo]
    epoch: int = Field(..., description="current map epoch")


class MapQueue(BaseModel):
    model_config = _OPEN

    virtual_partitions: int
    placement: list[int] = Field(..., description="physical partition of vp 0, vp 1, ...")


class CurrentMap(BaseModel):
    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={"examples": [{"epoch": 7, "queues": {"orders": {"virtual_partitions": 4, "placement": [0, 1, 0, 1]}}}]},
    )

    epoch: int
    queues: dict[str, MapQueue]


class MapMove(BaseModel):
    model_config = _OPEN

    queue: str
    vp: int = Field(..., description="virtual partition (under the queue's V at that epoch)")
    from_pp: int
    to_pp: int


class MapSplit(BaseModel):
    model_config = _OPEN

    queue: str
    from_vps: int
    to_vps: int


class MapQueueChange(BaseModel):
    model_config = _OPEN

    queue: str
    change: Literal["created", "grown", "deleted"]
    virtual_partitions: int


class MapEpoch(BaseModel):
    """One published map epoch and what changed in it."""

    model_config = _OPEN

    epoch: int
    time_ms: int = Field(..., description="when it was published (Unix ms, metadata store's clock)")
    kind: str = Field(..., description="queues (queue admin), remap (the remap job) or update")
    stage: str | None = Field(None, description="a remap's epochs: split, fence, final or recovery")
    queues: list[MapQueueChange] = Field(default_factory=list, description="queues created, grown or deleted")
    moves: list[MapMove] = Field(default_factory=list, description="virtual partitions moved (at most 500 listed)")
    moves_total: int = Field(0, description="virtual partitions moved, all counted")
    splits: list[MapSplit] = Field(default_factory=list)
    imbalance_before: float | None = Field(
        None, description="the remap's combined max/mean load of the physical partitions before it; null otherwise"
    )
    imbalance_after: float | None = Field(None, description="the same, as the remap planned it after")
    rolled_back: int = Field(0, description="moves the remap gave up (the vps stayed where they were)")
    fenced: int = Field(0, description="virtual partitions a remap's fence epoch fenced for moving")


class MapHistory(BaseModel):
    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "epochs": [
                        {"epoch": 9, "time_ms": 1764072000000, "kind": "remap", "stage": "final",
                         "queues": [], "moves": [{"queue": "orders", "vp": 3, "from_pp": 0, "to_pp": 2}],
                         "moves_total": 1, "splits": [], "imbalance_before": 1.62, "imbalance_after": 1.05,
                         "rolled_back": 0, "fenced": 0},
                    ]
                }
            ]
        },
    )

    epochs: list[MapEpoch] = Field(..., description="the latest map epochs, newest first")


class Health(BaseModel):
    """``/healthz`` and ``/readyz`` answer when all is well."""

    model_config = _OPEN

    status: Literal["ok", "ready"]
