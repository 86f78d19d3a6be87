from __future__ import annotations

import orjson
import pytest

from vpq.sdk.errors import (
    BadRequestError,
    ConflictError,
    InsufficientStorageError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    ServerError,
    UnavailableError,
    VpqClientError,
    error_from_response,
)


def body(code: str, message: str, **extra: object) -> bytes:
    return orjson.dumps({"error": {"code": code, "message": message, **extra}})


@pytest.mark.parametrize(
    ("status", "cls", "retryable"),
    [
        (400, BadRequestError, False),
        (404, NotFoundError, False),
        (409, ConflictError, False),
        (413, PayloadTooLargeError, False),
        (429, RateLimitedError, True),
        (500, ServerError, False),
        (502, ServerError, True),
        (503, UnavailableError, True),
        (507, InsufficientStorageError, True),
    ],
)
def test_status_maps_to_class_and_retryability(status: int, cls: type, retryable: bool) -> None:
    err = error_from_response(status, body("some_code", "some message"))
    assert type(err) is cls
    assert err.status == status
    assert err.code == "some_code"
    assert err.message == "some message"
    assert err.retryable is retryable


def test_extra_fields_become_details_and_retry_after_is_kept() -> None:
    err = error_from_response(400, body("invalid_message", "bad value", index=3), retry_after=None)
    assert err.details == {"index": 3}
    err = error_from_response(503, body("overloaded", "busy"), retry_after=2.5)
    assert err.retry_after == 2.5
    assert "busy" in str(err) and "503" in str(err)
    from_detail = error_from_response(429, body("overloaded", "slow down", retry_after=1.5))
    assert from_detail.retry_after == 1.5 and from_detail.details == {"retry_after": 1.5}


def test_non_json_error_body_still_gives_a_usable_error() -> None:
    err = error_from_response(502, b"<html>Bad Gateway</html>")
    assert isinstance(err, ServerError)
    assert err.code == "http_502"
    assert "Bad Gateway" in err.message
    assert err.retryable
    empty = error_from_response(418, b"")
    assert type(empty) is VpqClientError
    assert empty.message == "HTTP 418"
    assert not empty.retryable
