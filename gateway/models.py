"""Request models of the public API (pydantic v2), exactly as API.md fixes them.

Every request model is strict (a JSON string is not an integer, ``true`` is not ``1``) and
forbids unknown fields, so a typo is a 400 naming the field instead of a silent default.
The response shapes live in ``gateway/responses.py``; both feed the OpenAPI document.

Limits: names of queues, groups and consumers ``[A-Za-z0-9._-]{1,128}``; lanes, envs and
sets ``[a-z0-9-]{0,63}``; a produce batch holds 1..``MAX_BATCH_MESSAGES`` messages; a poll
asks for 1..1000 messages (default 100) and waits 0..30000 ms (default 0); ack/nack carry
at most ``MAX_IDS`` ids; a nack delay is 0..``MAX_NACK_DELAY_MS``.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

NAME_PATTERN = r"^[A-Za-z0-9._-]{1,128}$"
ISOLATION_PATTERN = r"^[a-z0-9-]{0,63}$"
NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")

MAX_BATCH_MESSAGES = 10_000
MAX_IDS = 10_000
MAX_ID_LENGTH = 256
MAX_POLL_MESSAGES = 1000
DEFAULT_POLL_MESSAGES = 100
MAX_WAIT_MS = 30_000
MAX_NACK_DELAY_MS = 24 * 3600 * 1000
MAX_VIRTUAL_PARTITIONS_HARD = 1 << 16
MAX_VISIBILITY_TIMEOUT_MS = 12 * 3600 * 1000
MAX_MESSAGE_BYTES_HARD = 64 * 1024 * 1024

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
    retention_ms the log's retention; -1 = forever)."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={"examples": [{"virtual_partitions": 32, "ordering": "key", "max_deliveries": 5}]},
    )

    virtual_partitions: int | None = Field(
        None, ge=1, le=MAX_VIRTUAL_PARTITIONS_HARD, description="power of two, default 16; may only grow"
    )
    ordering: Literal["key", "none"] | None = Field(None, description="per-key order (default) or none")
    max_deliveries: int | None = Field(None, ge=1, le=1000, description="default 5; then dead-lettered")
    visibility_timeout_ms: int | None = Field(
        None, ge=1, le=MAX_VISIBILITY_TIMEOUT_MS, description="redeliver when not acked within this, default 30000"
    )
    retention_ms: int | None = Field(None, ge=-1, description="keep messages this long; -1 = forever")
    max_message_bytes: int | None = Field(
        None, ge=1, le=MAX_MESSAGE_BYTES_HARD, description="largest message (key + value + headers), default 1 MiB"
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


class ProduceMessage(BaseModel):
    """One message of a produce request: ``value`` (any JSON) or ``value_b64`` (bytes as
    standard base64), exactly one of the two."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {"key": "order-42", "value": {"any": "json"}, "headers": {"h": "v"}, "lane": "feat-a", "env": "test", "set": ""}
            ]
        },
    )

    key: str | None = Field(None, description="routing key: same key, same virtual partition; null = spread")
    value: Any = Field(None, description="any JSON value (exclusive with value_b64)")
    value_b64: str | None = Field(None, description="bytes, standard base64 (exclusive with value)")
    headers: dict[str, str] = Field(default_factory=dict, description="string headers")
    lane: str | None = _isolation_field("lane")
    env: str | None = _isolation_field("env")
    set_: str | None = Field(
        None, alias="set", pattern=ISOLATION_PATTERN, description="set; absent: from the X-Set header, else the default"
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
        return self

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

    max_messages: int = Field(DEFAULT_POLL_MESSAGES, ge=1, le=MAX_POLL_MESSAGES)
    wait_ms: int = Field(0, ge=0, le=MAX_WAIT_MS, description="long poll: wait up to this for a first message")


class AckRequest(BaseModel):
    """``POST .../consumers/{consumer_id}/ack``."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"examples": [{"ids": ["0-3-1234"]}]})

    ids: list[str] = Field(..., max_length=MAX_IDS, description="ids of delivered messages")

    @field_validator("ids")
    @classmethod
    def _ids(cls, v: list[str]) -> list[str]:
        return _check_ids(v)


class NackRequest(BaseModel):
    """``POST .../consumers/{consumer_id}/nack``: deliver again after ``delay_ms``."""

    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"ids": ["0-3-1234"], "delay_ms": 0}]}
    )

    ids: list[str] = Field(..., max_length=MAX_IDS, description="ids of delivered messages")
    delay_ms: int = Field(0, ge=0, le=MAX_NACK_DELAY_MS)

    @field_validator("ids")
    @classmethod
    def _ids(cls, v: list[str]) -> list[str]:
        return _check_ids(v)


def _check_ids(ids: list[str]) -> list[str]:
    for i, one in enumerate(ids):
        if not 1 <= len(one) <= MAX_ID_LENGTH:
            raise ValueError(f"ids[{i}] must be 1..{MAX_ID_LENGTH} characters")
    return ids
