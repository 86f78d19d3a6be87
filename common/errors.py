"""The one error hierarchy of vpq, shared by the gateway and every node service.

An error has an HTTP ``status``, a machine-readable ``code`` (snake_case, stable: clients
branch on it), a human ``message`` and optional ``details`` (JSON-serialisable keyword
arguments, e.g. ``index=3`` for the first bad message of a produce batch, ``field=...``).

On the wire (public API and internal node HTTP alike) an error is::

    {"error": {"code": "...", "message": "...", ...details}}

with the status as the HTTP status. ``to_dict()`` builds that object and ``from_dict(data,
status)`` rebuilds the same exception type on the other side, so an error raised in a node
reaches the user unchanged through the gateway.

Retryable errors (``Overloaded``: 429 or 503, ``Unavailable``: 503) carry ``retry_after``
(seconds); it goes out both as the ``Retry-After`` header (see ``headers()``) and as the
``retry_after`` detail of the JSON.

Codes used across the project (subclasses give the default one):

=========================== ====== ==============================================
code                        status meaning
=========================== ====== ==============================================
invalid_request             400    the request body/parameters failed validation
invalid_message             400    one message of a produce batch is invalid (``index``)
malformed_json              400    the body is not JSON
invalid_name                400    a queue/group/consumer name in the path is invalid
invalid_header              400    an isolation header (X-Lane/X-Env/X-Set) is invalid
unauthorized                401    missing or invalid bearer token
forbidden                   403    the token lacks the scope
not_found                   404    unknown route
queue_not_found             404    unknown queue
group_not_found             404    unknown consumer group
consumer_not_found          404    unknown consumer
method_not_allowed          405    the route exists, not with this method
conflict                    409    conflicts with the current state
payload_too_large           413    the request body is too large
message_too_large           413    one message exceeds the queue's max_message_bytes
unsupported_media_type      415    a body that is not ``application/json``
overloaded                  429    slow down (or 503 when the whole service is saturated)
unavailable                 503    temporarily unavailable (failover, stale map, ...)
not_ready                   503    the platform has not finished starting
insufficient_storage        507    a write node is short of disk; nothing was appended
internal_error              500    a bug
=========================== ====== ==============================================
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar


class VpqError(Exception):
    """Base of every vpq error. ``VpqError(code, message, status, **details)``.

    Subclasses fix the status (``status`` may still be passed to override it, e.g.
    ``Overloaded(status=503)``) and give a default code, so ``NotFound("queue_not_found",
    "no queue 'q'")`` and ``BadRequest(message="...")`` both work.
    """

    default_status: ClassVar[int] = 500
    default_code: ClassVar[str] = "internal_error"
    retryable: ClassVar[bool] = False

    def __init__(
        self,
        code: str | None = None,
        message: str = "",
        status: int | None = None,
        **details: Any,
    ) -> None:
        self.code: str = code or self.default_code
        self.message: str = message or self.code.replace("_", " ")
        self.status: int = int(status) if status is not None else self.default_status
        if not 400 <= self.status <= 599:
            raise ValueError(f"an error status must be 4xx or 5xx, not {self.status}")
        for reserved in ("code", "message"):
            if reserved in details:
                raise ValueError(f"{reserved!r} cannot be a detail")
        self.details: dict[str, Any] = details
        super().__init__(self.message)

    def __str__(self) -> str:
        return f"{self.message} ({self.code}, HTTP {self.status})"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, "
            f"status={self.status!r}, details={self.details!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VpqError):
            return NotImplemented
        return (type(self), self.code, self.message, self.status, self.details) == (
            type(other),
            other.code,
            other.message,
            other.status,
            other.details,
        )

    __hash__ = Exception.__hash__

    def __reduce__(self) -> tuple[Any, ...]:
        # pickling (multiprocessing) keeps type, code, message, status and details
        return (_rebuild, (type(self), self.to_dict(), self.status))

    def to_dict(self) -> dict[str, Any]:
        """``{"error": {"code", "message", ...details}}``: the JSON body of the answer."""
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        body.update(self.details)
        return {"error": body}

    def headers(self) -> dict[str, str]:
        """Extra HTTP headers of the answer (``Retry-After``, ``WWW-Authenticate``)."""
        return {}

    @staticmethod
    def from_dict(data: Mapping[str, Any], status: int | None = None) -> VpqError:
        """Rebuild the error from ``to_dict()`` output and the HTTP status it came with.

        The class is chosen by status (and, for 503, by code: ``overloaded`` gives
        ``Overloaded``, anything else ``Unavailable``). Without a status, the class whose
        default code is ``code`` is used, else a plain 500 ``VpqError``. A body that is not
        the documented shape gives a ``VpqError`` with code ``http_<status>``.
        """
        err = data.get("error") if isinstance(data, Mapping) else None
        if not isinstance(err, Mapping):
            st = status or 500
            return _class_for(st, "")(f"http_{st}", f"HTTP {st}: unexpected error body", st)
        code = str(err.get("code") or "")
        message = str(err.get("message") or "")
        details = {str(k): v for k, v in err.items() if k not in ("code", "message")}
        if status is None:
            cls = _BY_CODE.get(code, VpqError)
            status = cls.default_status
        else:
            cls = _class_for(status, code)
        if issubclass(cls, (Overloaded, Unavailable)):
            retry_after = details.pop("retry_after", None)
            return cls(code or None, message, status, retry_after=retry_after, **details)
        return cls(code or f"http_{status}", message, status, **details)


class BadRequest(VpqError):
    """400: malformed or invalid input; nothing was changed."""

    default_status = 400
    default_code = "invalid_request"


class Unauthorized(VpqError):
    """401: no valid bearer token. Answers carry ``WWW-Authenticate: Bearer``."""

    default_status = 401
    default_code = "unauthorized"

    def headers(self) -> dict[str, str]:
        if self.code == "invalid_token":
            return {"WWW-Authenticate": 'Bearer realm="vpq", error="invalid_token"'}
        return {"WWW-Authenticate": 'Bearer realm="vpq"'}


class Forbidden(VpqError):
    """403: the token is valid but lacks the scope for this target."""

    default_status = 403
    default_code = "forbidden"


class NotFound(VpqError):
    """404: unknown route, queue, group or consumer."""

    default_status = 404
    default_code = "not_found"


class MethodNotAllowed(VpqError):
    """405: the path exists but not with this method (detail ``allowed``: list of methods)."""

    default_status = 405
    default_code = "method_not_allowed"

    def headers(self) -> dict[str, str]:
        allowed = self.details.get("allowed")
        if isinstance(allowed, list) and allowed:
            return {"Allow": ", ".join(str(m) for m in allowed)}
        return {}


class Conflict(VpqError):
    """409: the request conflicts with the current state (e.g. shrinking a queue)."""

    default_status = 409
    default_code = "conflict"


class PayloadTooLarge(VpqError):
    """413: the request, or one message of it, is too large."""

    default_status = 413
    default_code = "payload_too_large"


class UnsupportedMediaType(VpqError):
    """415: a request body that is not ``application/json``."""

    default_status = 415
    default_code = "unsupported_media_type"


class _RetryAfter(VpqError):
    """Retryable error with a ``retry_after`` delay in seconds (default 1)."""

    retryable = True
    default_retry_after: ClassVar[float] = 1.0

    def __init__(
        self,
        code: str | None = None,
        message: str = "",
        status: int | None = None,
        retry_after: float | None = None,
        **details: Any,
    ) -> None:
        ra = self.default_retry_after if retry_after is None else float(retry_after)
        if not math.isfinite(ra) or ra < 0:
            raise ValueError(f"retry_after must be a finite number >= 0, not {retry_after!r}")
        self.retry_after: float = ra
        super().__init__(code, message, status, retry_after=ra, **details)

    def headers(self) -> dict[str, str]:
        # HTTP wants whole seconds; never advertise 0 for a real delay
        secs = math.ceil(self.retry_after)
        return {"Retry-After": str(max(secs, 1) if self.retry_after > 0 else 0)}


class Overloaded(_RetryAfter):
    """429 (this client is going too fast) or 503 (the service is saturated); retryable."""

    default_status = 429
    default_code = "overloaded"

    def __init__(
        self,
        code: str | None = None,
        message: str = "",
        status: int | None = None,
        retry_after: float | None = None,
        **details: Any,
    ) -> None:
        if status is not None and int(status) not in (429, 503):
            raise ValueError(f"Overloaded is 429 or 503, not {status}")
        super().__init__(code, message, status, retry_after, **details)


class Unavailable(_RetryAfter):
    """503: temporarily unavailable (node failover, stale map, not ready); retryable."""

    default_status = 503
    default_code = "unavailable"


class InsufficientStorage(_RetryAfter):
    """507: a write node is short of disk (``write_nodes.disk_guard``); nothing was
    appended. ``retry_after`` says when to try again; the platform does not retry it
    itself."""

    default_status = 507
    default_code = "insufficient_storage"


class InternalError(VpqError):
    """500: a bug. The message given to clients never includes internals."""

    default_status = 500
    default_code = "internal_error"


_BY_STATUS: dict[int, type[VpqError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    429: Overloaded,
    500: InternalError,
    507: InsufficientStorage,
}

_BY_CODE: dict[str, type[VpqError]] = {
    cls.default_code: cls
    for cls in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        Conflict,
        PayloadTooLarge,
        UnsupportedMediaType,
        Overloaded,
        Unavailable,
        InsufficientStorage,
        InternalError,
    )
}


def _rebuild(cls: type[VpqError], data: dict[str, Any], status: int) -> VpqError:
    err = VpqError.from_dict(data, status)
    if type(err) is not cls:
        rebuilt = cls.__new__(cls)
        rebuilt.__dict__.update(err.__dict__)
        Exception.__init__(rebuilt, err.message)
        return rebuilt
    return err


def _class_for(status: int, code: str) -> type[VpqError]:
    if status == 503:
        return Overloaded if code == Overloaded.default_code else Unavailable
    return _BY_STATUS.get(status, VpqError)
