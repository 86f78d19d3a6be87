"""Request models of the public API (pydantic v2), exactly as API.md fixes them.

Every request model is strict (a JSON string is not an integer, ``true`` is not ``1``) and
forbids unknown fields, so a typo is a 400 naming the field instead of a silent default.
The response shapes live in ``gateway/responses.py``; both feed the OpenAPI document.

Integers follow JSON, not Python: ``5.0`` is the integer 5 (as JSON Schema's ``integer``
says); ``5.5``, ``"5"`` and ``true`` are not integers. Every rule a model enforces is also
in its JSON Schema (the OpenAPI document), so a schema-valid body is never a 400.

Limits: names of queues, groups and consumers ``[A-Za-z0-9._-]{1,128}`` other than ``.``
and ``..``; lanes, envs and
sets ``[a-z0-9-]{0,63}``; a produce batch holds 1..``MAX_BATCH_MESSAGES`` messages; a poll
asks for 1..1000 messages (default 100) and waits 0..30000 ms (default 0); ack/nack carry
at most ``MAX_IDS`` ids; a nack delay is 0..``MAX_NACK_DELAY_MS``.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from vpq.codec import system_headers
from vpq.codec.message_id import MAX_OFFSET, MAX_PP, check_message_id
from vpq.metadata import queue_config

NAME_PATTERN = (
    r"^(?:[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}|\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,126}|\.\.[A-Za-z0-9._-]{1,126})$"
)
"""``[A-Za-z0-9._-]{1,128}`` except ``.`` and ``..``: those are path segments every HTTP
client and router resolves away, so such a queue, group or consumer could be created with
``%2E%2E`` but never consumed (and would turn internal node URLs into other paths)."""
ISOLATION_PATTERN = r"^[a-z0-9-]{0,63}$"
NAME_RE = re.compile(NAME_PATTERN)
NAME_RULE = "[A-Za-z0-9._-]{1,128}, not '.' or '..'"

MAX_BATCH_MESSAGES = 10_000
MAX_IDS = 10_000
MAX_ID_LENGTH = 256
MAX_POLL_MESSAGES = 1000
DEFAULT_POLL_MESSAGES = 100
MAX_WAIT_MS = 30_000
MAX_NACK_DELAY_MS = 24 * 3600 * 1000
MAX_VIRTUAL_PARTITIONS_HARD = 1 << 16
# the stored configuration's own bounds (metadata/queue_config.py), so the gateway rejects
# exactly what the registry would
MAX_VISIBILITY_TIMEOUT_MS = queue_config.MAX_VISIBILITY_TIMEOUT_MS
MAX_MESSAGE_BYTES_HARD = queue_config.MAX_MESSAGE_BYTES
MAX_RETENTION_MS = queue_config.MAX_RETENTION_MS
MAX_DELIVERIES = queue_config.MAX_DELIVERIES

BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


def _integral_float(value: Any) -> Any:
    """A JSON number without a fraction (``5.0``) as the int it is; anything else unchanged
    (the strict int check then rejects it)."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


JSON_INT = BeforeValidator(_integral_float)
"""Makes an ``int`` field an integer as JSON Schema means it: ``5`` or ``5.0``, never a
string or a boolean. It comes *after* the bounds in ``Annotated[int, Field(ge, le),
JSON_INT]`` so the schema shows them as ``minimum``/``maximum``."""

MaxDeliveries = Annotated[int, Field(ge=1, le=MAX_DELIVERIES), JSON_INT]
VisibilityTimeoutMs = Annotated[int, Field(ge=1, le=MAX_VISIBILITY_TIMEOUT_MS), JSON_INT]
MaxMessageBytes = Annotated[int, Field(ge=1, le=MAX_MESSAGE_BYTES_HARD), JSON_INT]
DedupWindowMs = Annotated[int, Field(ge=0, le=queue_config.MAX_DEDUP_WINDOW_MS), JSON_INT]
PollMessages = Annotated[int, Field(ge=1, le=MAX_POLL_MESSAGES), JSON_INT]
WaitMs = Annotated[int, Field(ge=0, le=MAX_WAIT_MS), JSON_INT]
DelayMs = Annotated[int, Field(ge=0, le=MAX_NACK_DELAY_MS), JSON_INT]
MAX_MESSAGE_DELAY_MS = system_headers.MAX_DELAY_MS
MAX_DELIVER_AT_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
MessageDelayMs = Annotated[int, Field(ge=0, le=MAX_MESSAGE_DELAY_MS), JSON_INT]
DeliverAtMs = Annotated[int, Field(ge=0, le=MAX_DELIVER_AT_MS), JSON_INT]
Priority = Annotated[int, Field(ge=0, le=system_headers.MAX_PRIORITY), JSON_INT]
DEDUP_ID_PATTERN = r"^[\x20-\x7e]{1,128}$"
DedupId = Annotated[str, Field(pattern=DEDUP_ID_PATTERN)]
HEADER_NAME_PATTERN = r"^(?:[^:][\s\S]*)?$"
HeaderName = Annotated[str, Field(pattern=HEADER_NAME_PATTERN)]
"""A producer's header name: anything not beginning with ``:`` (reserved for the
platform's own attributes, ``codec.system_headers``)."""

PowerOfTwo = Annotated[
    int,
    Field(ge=1, le=MAX_VIRTUAL_PARTITIONS_HARD),
    JSON_INT,
    WithJsonSchema({"type": "integer", "enum": [1 << i for i in range(MAX_VIRTUAL_PARTITIONS_HARD.bit_length())]}),
]
"""A power of two up to ``MAX_VIRTUAL_PARTITIONS_HARD`` (the power-of-two rule is the
field's validator; the schema lists the values)."""

RetentionMs = Annotated[
    int,
    Field(ge=-1, le=MAX_RETENTION_MS),
    JSON_INT,
    WithJsonSchema({"anyOf": [{"const": -1}, {"type": "integer", "minimum": 1, "maximum": MAX_RETENTION_MS}]}),
]
"""-1 (forever) or 1..``MAX_RETENTION_MS`` (ten years) milliseconds (0 is the field's
validator's job)."""


def _no_default(schema: dict[str, Any]) -> None:
    """Drop the ``default`` from a field's JSON Schema (its Python default is "absent")."""
    schema.pop("default", None)


def decimal_at_most(limit: int) -> str:
    """A regex (no anchors) matching exactly the canonical decimals 0..``limit``: no sign,
    no leading zeros."""
    digits = str(limit)
    width = len(digits)
    alternatives = ["0"]
    if width > 1:
        alternatives.append(f"[1-9][0-9]{{0,{width - 2}}}")  # fewer digits than limit
    for i, d in enumerate(digits):  # same width: equal up to i, smaller digit at i
        low = 1 if i == 0 else 0
        if int(d) > low:
            rest = width - i - 1
            alternatives.append(digits[:i] + f"[{low}-{int(d) - 1}]" + (f"[0-9]{{{rest}}}" if rest else ""))
    if limit > 0:
        alternatives.append(digits)
    return "(?:" + "|".join(alternatives) + ")"


MESSAGE_ID_PATTERN = f"^{decimal_at_most(MAX_PP)}-{decimal_at_most(MAX_OFFSET)}$"
"""The JSON Schema of a message id as the read nodes decode it today
(``codec/message_id.py``: ``<partition>-<offset>``, canonical decimals in range).
Clients still treat ids as opaque; the pattern documents what the server accepts."""


def _message_id(value: str) -> str:
    return check_message_id(value)  # MessageIdError (a ValueError) names what is wrong


MessageId = Annotated[
    str,
    Field(min_length=1, max_length=MAX_ID_LENGTH, json_schema_extra={"pattern": MESSAGE_ID_PATTERN}),
    AfterValidator(_message_id),
]
"""A message id as returned by produce and poll; anything else is a 400 at the gateway."""


def is_valid_name(name: str) -> bool:
    """True for a valid queue, group or consumer name."""
    return NAME_RE.fullmatch(name) is not None


def _isolation_field(what: str) -> Any:
    return Field(
        None,
        pattern=ISOLATION_PATTERN,
        description=f"{what}; absent: from the X-{what.capitalize()} header, else the default",
    )


class QueueConfigRequest(BaseModel):
    """``PUT /v1/queues/{queue}``. Absent (or null) fields keep their current value on an
    update and take the platform default on a create (virtual_partitions 16, ordering
    ``key``, max_deliveries 5, visibility_timeout_ms 30000, max_message_bytes 1 MiB,
    retention_ms the log's retention; -1 = forever, dedup_window_ms 300000; 0 = off)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"virtual_partitions": 32, "ordering": "key", "max_deliveries": 5}]},
    )

    virtual_partitions: PowerOfTwo | None = Field(None, description="power of two, default 16; may only grow")
    ordering: Literal["key", "none"] | None = Field(None, description="per-key order (default) or none")
    max_deliveries: MaxDeliveries | None = Field(None, description="default 5; then dead-lettered")
    visibility_timeout_ms: VisibilityTimeoutMs | None = Field(
        None, description="redeliver when not acked within this, default 30000"
    )
    retention_ms: RetentionMs | None = Field(None, description="keep messages this long (at most ten years); -1 = forever")
    max_message_bytes: MaxMessageBytes | None = Field(
        None, description="largest message (key + value + headers), default 1 MiB"
    )
    dedup_window_ms: DedupWindowMs | None = Field(
        None, description="a retried message with a dedup_id stored this recently is not stored again; default 300000, 0 = off"
    )

    @field_validator("virtual_partitions")
    @classmethod
    def _power_of_two(cls, v: int | None) -> int | None:
        if v is not None and v & (v - 1):
            raise ValueError("virtual_partitions must be a power of two")
        return v

    @field_validator("retention_ms")
    @classmethod
    def _retention(cls, v: int | None) -> int | None:
        if v == 0:
            raise ValueError("retention_ms must be -1 (forever) or positive")
        return v

    def given(self) -> dict[str, Any]:
        """The fields the request set (non-null), for ``Backend.put_queue``."""
        return self.model_dump(exclude_none=True)


def due_time(delay_ms: int | None, deliver_at_ms: int | None, now_ms: int) -> int | None:
    """The due time a message stores (Unix ms): ``now_ms + delay_ms`` or ``deliver_at_ms``;
    None when it is due at once (no delay, a zero delay, or a time already past). A
    ``deliver_at_ms`` more than ``MAX_MESSAGE_DELAY_MS`` after ``now_ms`` is a ValueError
    (the bound depends on the clock, so no schema can state it)."""
    if delay_ms:
        return now_ms + delay_ms
    if deliver_at_ms is None or deliver_at_ms <= now_ms:
        return None
    if deliver_at_ms - now_ms > MAX_MESSAGE_DELAY_MS:
        raise ValueError(f"deliver_at_ms is more than 7 days ({MAX_MESSAGE_DELAY_MS} ms) away")
    return deliver_at_ms


class ProduceMessage(BaseModel):
    """One message of a produce request: ``value`` (any JSON) or ``value_b64`` (bytes as
    standard base64), exactly one of the two."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {"key": "order-42", "value": {"any": "json"}, "headers": {"h": "v"}, "lane": "feat-a", "env": "test", "set": ""}
            ],
            "oneOf": [{"required": ["value"]}, {"required": ["value_b64"]}],
            "not": {"required": ["delay_ms", "deliver_at_ms"]},
        },
    )

    key: str | None = Field(None, description="routing key: same key, same virtual partition; null = spread")
    value: Any = Field(None, description="any JSON value (exclusive with value_b64)")
    value_b64: Annotated[str | None, WithJsonSchema({"type": "string", "pattern": BASE64_PATTERN})] = Field(
        None, description="bytes, standard base64 (exclusive with value; never null)", json_schema_extra=_no_default
    )
    headers: Annotated[
        dict[HeaderName, str],
        WithJsonSchema(
            {"type": "object", "additionalProperties": {"type": "string"}, "propertyNames": {"pattern": HEADER_NAME_PATTERN}}
        ),
    ] = Field(default_factory=dict, description="string headers; names beginning with ':' are reserved")
    lane: str | None = _isolation_field("lane")
    env: str | None = _isolation_field("env")
    set_: str | None = Field(
        None, alias="set", pattern=ISOLATION_PATTERN, description="set; absent: from the X-Set header, else the default"
    )
    delay_ms: MessageDelayMs | None = Field(
        None, description="no group receives the message before this many ms (exclusive with deliver_at_ms)"
    )
    deliver_at_ms: DeliverAtMs | None = Field(
        None,
        description="no group receives the message before this Unix time in ms, at most 7 days after the "
        "request (exclusive with delay_ms)",
    )
    priority: Priority = Field(0, description="0-9: among ready messages, higher first; never reorders one key")
    dedup_id: DedupId | None = Field(
        None, description="1-128 printable ASCII characters: within the queue's dedup_window_ms, stored once"
    )

    @field_validator("value_b64")
    @classmethod
    def _base64(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                base64.b64decode(v, validate=True)
            except (binascii.Error, ValueError) as exc:
                raise ValueError(f"not valid base64: {exc}") from None
        return v

    @model_validator(mode="after")
    def _one_value(self) -> ProduceMessage:
        has_value = "value" in self.model_fields_set
        has_b64 = "value_b64" in self.model_fields_set
        if has_value == has_b64:
            raise ValueError("give exactly one of 'value' (JSON) and 'value_b64' (base64 bytes)")
        if has_b64 and self.value_b64 is None:
            raise ValueError("value_b64 must be a base64 string, not null")
        if self.delay_ms is not None and self.deliver_at_ms is not None:
            raise ValueError("give at most one of 'delay_ms' and 'deliver_at_ms'")
        return self

    def deliver_at(self, now_ms: int) -> int | None:
        """The due time to store (Unix ms), None when the message is due at once; raises
        ValueError for a ``deliver_at_ms`` more than 7 days after ``now_ms``."""
        return due_time(self.delay_ms, self.deliver_at_ms, now_ms)

    @property
    def is_json(self) -> bool:
        """True when the value was given as JSON (``value``)."""
        return "value" in self.model_fields_set

    def payload(self) -> bytes:
        """The decoded bytes of ``value_b64`` (empty for a JSON value)."""
        return base64.b64decode(self.value_b64) if self.value_b64 is not None else b""


class ProduceRequest(BaseModel):
    """``POST /v1/queues/{queue}/messages``: all or nothing."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"messages": [{"key": "order-42", "value": {"any": "json"}}]}]},
    )

    messages: list[ProduceMessage] = Field(..., min_length=1, max_length=MAX_BATCH_MESSAGES)


class JoinRequest(BaseModel):
    """``POST /v1/queues/{queue}/groups/{group}/consumers``. Isolation fields absent from the
    body come from the X-Lane/X-Env/X-Set headers, else the defaults (prod, "", "")."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"lane": "feat-a", "start": "earliest"}]},
    )

    consumer_id: str | None = Field(None, pattern=NAME_PATTERN, description="chosen id; absent: the server picks one")
    lane: str | None = _isolation_field("lane")
    env: str | None = _isolation_field("env")
    set_: str | None = Field(
        None, alias="set", pattern=ISOLATION_PATTERN, description="set; absent: from the X-Set header, else the default"
    )
    start: Literal["earliest", "latest"] = Field(
        "earliest", description="where a new group starts; ignored when the group exists"
    )


class PollRequest(BaseModel):
    """``POST .../consumers/{consumer_id}/poll``; also the consumer's heartbeat."""

    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"max_messages": 100, "wait_ms": 5000}]}
    )

    max_messages: PollMessages = Field(
        DEFAULT_POLL_MESSAGES,
        description="at most this many messages: fewer when fewer are ready, and only a fair share "
        "(ready / members) when every member of the group already holds work and the backlog is short",
    )
    wait_ms: WaitMs = Field(0, description="long poll: wait up to this for a first message")
    ack: list[MessageId] = Field(
        default_factory=list,
        max_length=MAX_IDS,
        description="ids of messages delivered to this consumer to acknowledge first, as ``ack`` would (what "
        "they free may be delivered by this very poll); saves a consumer the separate ack request",
    )


class AckRequest(BaseModel):
    """``POST .../consumers/{consumer_id}/ack``."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{"ids": ["0-3-1234"]}]})

    ids: list[MessageId] = Field(..., max_length=MAX_IDS, description="ids of delivered messages")


class NackRequest(BaseModel):
    """``POST .../consumers/{consumer_id}/nack``: deliver again after ``delay_ms``."""

    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"ids": ["0-3-1234"], "delay_ms": 0}]}
    )

    ids: list[MessageId] = Field(..., max_length=MAX_IDS, description="ids of delivered messages")
    delay_ms: DelayMs = Field(0)


MAX_REDRIVE_MESSAGES = 1_000_000


class RedriveRequest(BaseModel):
    """``POST .../groups/{group}/dlq/redrive``: the group's dead letters delivered to it again."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{"max_messages": 100}]})

    max_messages: Annotated[int, Field(ge=1, le=MAX_REDRIVE_MESSAGES), JSON_INT] | None = Field(
        None, description="redrive at most this many (the oldest first); absent: all of them"
    )


class ElectLeaderRequest(BaseModel):
    """``POST /v1/cluster/partitions/{pp}/leader``: an operator's leader election."""

    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"node": "w1", "unclean": True}]}
    )

    node: str = Field(..., min_length=1, max_length=200, description="id of the write node to elect")
    unclean: bool = Field(
        False,
        description="elect it even when it is out of the in-sync set: acknowledged messages it lacks are lost "
        "(reported as a truncation event)",
    )
