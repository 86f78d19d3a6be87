"""Client-side error types, mapped from the gateway's error JSON.

Every failed call raises a :class:`VpqClientError` (or a subclass). The gateway answers
errors as ``{"error": {"code": "...", "message": "...", ...}}``; ``code`` and ``message``
become attributes, the other keys of the error object become ``details`` (for example
``details["index"]``, the first bad message of a rejected produce batch).

``retryable`` is true for 429, 502, 503, 504 and 507 (a write node short of disk: nothing
was appended) answers, for connection failures and for timeouts: the request may succeed if
sent again. Every other 4xx/5xx is final; the client
never retries it. ``retry_after`` holds the server's ``Retry-After`` in seconds, when given (the header, or
the ``retry_after`` detail of the error JSON when the header is missing).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

RETRYABLE_STATUSES: frozenset[int] = frozenset({429, 502, 503, 504, 507})


class VpqClientError(Exception):
    """A request to the gateway failed.

    ``status`` is the HTTP status, or ``None`` when no answer was received.
    """

    def __init__(
        self,
        status: int | None,
        code: str,
        message: str,
        details: Mapping[str, Any] | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        self.retryable = retryable
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f"HTTP {self.status}" if self.status is not None else "no answer"
        return f"{self.message} ({self.code}, {where})"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, "
            f"message={self.message!r}, details={self.details!r}, retryable={self.retryable!r})"
        )


class BadRequestError(VpqClientError):
    """400: malformed or invalid request (nothing was changed)."""


class UnauthorizedError(VpqClientError):
    """401: missing or invalid token."""


class ForbiddenError(VpqClientError):
    """403: the token lacks the scope for this queue."""


class NotFoundError(VpqClientError):
    """404: unknown queue, group or consumer."""


class ConflictError(VpqClientError):
    """409: the request conflicts with the current state (e.g. shrinking virtual partitions)."""


class PayloadTooLargeError(VpqClientError):
    """413: a message or the request is too large."""


class UnsupportedMediaTypeError(VpqClientError):
    """415: wrong content type."""


class RateLimitedError(VpqClientError):
    """429: overloaded; retry after ``retry_after`` seconds."""


class ServerError(VpqClientError):
    """5xx: the server failed (502/503/504 are retryable, others are bugs)."""


class UnavailableError(ServerError):
    """503: temporarily unavailable (overloaded, node failover, stale map); retryable."""


class InsufficientStorageError(ServerError):
    """507: a write node is short of disk; nothing was appended. Retryable after
    ``retry_after`` seconds (produce resumes by itself once space returns)."""


class GatewayConnectionError(VpqClientError):
    """No answer: the gateway could not be reached or dropped the connection. Retryable."""


class GatewayTimeoutError(GatewayConnectionError):
    """No answer within the client timeout. Retryable (the request may have been applied)."""


class ClientClosedError(VpqClientError):
    """The client, producer or consumer was used after it was closed."""

    def __init__(self, message: str = "closed") -> None:
        super().__init__(None, "closed", message)


_BY_STATUS: dict[int, type[VpqClientError]] = {
    400: BadRequestError,
    401: UnauthorizedError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: PayloadTooLargeError,
    415: UnsupportedMediaTypeError,
    429: RateLimitedError,
    503: UnavailableError,
    507: InsufficientStorageError,
}


def error_class_for(status: int) -> type[VpqClientError]:
    """The exception class raised for an HTTP error status."""
    cls = _BY_STATUS.get(status)
    if cls is not None:
        return cls
    return ServerError if status >= 500 else VpqClientError


def error_from_response(status: int, body: bytes, retry_after: float | None = None) -> VpqClientError:
    """Build the exception for an error answer. Pure: no I/O.

    Accepts the documented error JSON; anything else (an HTML page from a proxy, an
    empty body) still yields an error with code ``http_<status>`` and a short message.
    """
    code = f"http_{status}"
    message = ""
    details: dict[str, Any] = {}
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        err = parsed["error"]
        code = str(err.get("code") or code)
        message = str(err.get("message") or "")
        details = {k: v for k, v in err.items() if k not in ("code", "message")}
    if retry_after is None and isinstance(details.get("retry_after"), (int, float)) and not isinstance(
        details.get("retry_after"), bool
    ):
        retry_after = max(0.0, float(details["retry_after"]))
    if not message:
        text = body.decode("utf-8", "replace").strip()
        message = text[:200] if text and parsed is None else f"HTTP {status}"
    return error_class_for(status)(
        status, code, message, details, retryable=status in RETRYABLE_STATUSES, retry_after=retry_after
    )
