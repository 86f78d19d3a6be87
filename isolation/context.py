"""Isolation contexts: (env, set, lane), their validation and how a message gets one.

- ``env``: strict isolation (test/dev/stage/prod...), default ``"prod"``; an empty
  env given anywhere means the default ``"prod"``.
- ``set``: regional cell, default ``""`` (the default set).
- ``lane``: swimlane, default ``""`` (the backbone).

All three must match ``[a-z0-9-]{0,63}`` (no case folding: ``Feat-A`` is an
error, not ``feat-a``). Bad values raise ``IsolationError`` naming the field and
where it came from.

Precedence (``resolve``): a message's own ``lane``/``env``/``set`` field wins when
present (not None), even when it is ``""`` (an explicit backbone/default set);
otherwise the request headers ``X-Lane``/``X-Env``/``X-Set`` (names
case-insensitive, values stripped of surrounding whitespace); otherwise the
defaults.

Token form (for Redis keys/fields): ``"env/set/lane"``, e.g. ``"prod//"``,
``"test/eu-1/feat-a"``; ``/`` cannot occur in a name so it is unambiguous.

Pure logic: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

NAME_RE = re.compile(r"[a-z0-9-]{0,63}")
DEFAULT_ENV = "prod"
FIELDS = ("env", "set", "lane")
HEADER_OF_FIELD = {"env": "X-Env", "set": "X-Set", "lane": "X-Lane"}
_FIELD_OF_HEADER = {h.lower(): f for f, h in HEADER_OF_FIELD.items()}


class IsolationError(ValueError):
    """An invalid isolation field. ``field`` is ``env``, ``set`` or ``lane``;
    ``source`` says where the value came from (e.g. ``"message"``, ``"header X-Lane"``)."""

    def __init__(self, field: str, value: object, source: str = "", reason: str = "") -> None:
        self.field = field
        self.value = value
        self.source = source
        where = f" (from {source})" if source else ""
        why = reason or "must match [a-z0-9-]{0,63}"
        super().__init__(f"invalid {field} {value!r}{where}: {why}")


def check_name(field: str, value: object, source: str = "") -> str:
    """Return ``value`` when it is a valid isolation name, else IsolationError."""
    if not isinstance(value, str):
        raise IsolationError(field, value, source, "must be a string")
    if not NAME_RE.fullmatch(value):
        raise IsolationError(field, value, source)
    return value


@dataclass(frozen=True, slots=True, order=True)
class IsolationContext:
    """A validated, hashable, ordered (env, set, lane). ``env=""`` becomes ``"prod"``."""

    env: str = DEFAULT_ENV
    set: str = ""
    lane: str = ""
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_name("env", self.env)
        check_name("set", self.set)
        check_name("lane", self.lane)
        if self.env == "":
            object.__setattr__(self, "env", DEFAULT_ENV)
        object.__setattr__(self, "_hash", hash((self.env, self.set, self.lane)))

    def __hash__(self) -> int:  # kept: contexts are dict keys on every delivery path
        return self._hash

    def __reduce__(self) -> tuple[type[IsolationContext], tuple[str, str, str]]:
        # rebuilt (so hashed) in the receiving process: string hashes differ per process
        return (IsolationContext, (self.env, self.set, self.lane))

    @property
    def is_backbone(self) -> bool:
        return self.lane == ""

    @property
    def is_default_set(self) -> bool:
        return self.set == ""

    def token(self) -> str:
        """``"env/set/lane"``: a compact, unambiguous string form."""
        return f"{self.env}/{self.set}/{self.lane}"

    @classmethod
    def from_token(cls, token: str) -> IsolationContext:
        """Inverse of ``token``; IsolationError on a malformed token."""
        if not isinstance(token, str):
            raise IsolationError("env", token, "token", "a context token must be a string 'env/set/lane'")
        parts = token.split("/")
        if len(parts) != 3:
            raise IsolationError("env", token, "token", "a context token must be 'env/set/lane'")
        return cls(*parts)

    def to_dict(self) -> dict[str, str]:
        return {"env": self.env, "set": self.set, "lane": self.lane}


@dataclass(frozen=True, slots=True)
class PartialContext:
    """Isolation fields that may each be absent (None), before defaults apply."""

    env: str | None = None
    set: str | None = None
    lane: str | None = None


def parse_isolation_headers(headers: Mapping[str, str]) -> PartialContext:
    """``X-Env``/``X-Set``/``X-Lane`` (any case) from request headers; others are ignored.

    Values are stripped of surrounding whitespace and validated. Works with plain
    dicts and with multi-dicts (aiohttp's ``CIMultiDictProxy``): the same header
    given twice with different values is an IsolationError.
    """
    found: dict[str, str] = {}
    items = headers.items()
    for name, raw in items:
        fld = _FIELD_OF_HEADER.get(name.lower()) if isinstance(name, str) else None
        if fld is None:
            continue
        source = f"header {HEADER_OF_FIELD[fld]}"
        if not isinstance(raw, str):
            raise IsolationError(fld, raw, source, "must be a string")
        value = check_name(fld, raw.strip(), source)
        if fld in found and found[fld] != value:
            raise IsolationError(fld, raw, source, f"given twice with different values ({found[fld]!r})")
        found[fld] = value
    return PartialContext(**found)


def _partial_from_fields(fields: Mapping[str, Any] | PartialContext, source: str) -> PartialContext:
    if isinstance(fields, PartialContext):
        return fields
    values: dict[str, str | None] = {}
    for fld in FIELDS:
        v = fields.get(fld)
        values[fld] = None if v is None else check_name(fld, v, source)
    return PartialContext(**values)


def resolve(
    message_fields: Mapping[str, Any] | PartialContext,
    request_headers: Mapping[str, str] | PartialContext | None = None,
) -> IsolationContext:
    """The context of a message: its own fields (present = not None) win, then the
    request's isolation headers, then the defaults (prod, default set, backbone).

    ``message_fields`` may be the whole message mapping (other keys are ignored).
    ``request_headers`` may be raw headers or an already parsed ``PartialContext``
    (parse once per request, resolve per message).
    """
    own = _partial_from_fields(message_fields, "message")
    if request_headers is None:
        hdr = PartialContext()
    elif isinstance(request_headers, PartialContext):
        hdr = request_headers
    else:
        hdr = parse_isolation_headers(request_headers)
    env = own.env if own.env is not None else hdr.env
    set_ = own.set if own.set is not None else hdr.set
    lane = own.lane if own.lane is not None else hdr.lane
    return IsolationContext(env or DEFAULT_ENV, set_ or "", lane or "")
