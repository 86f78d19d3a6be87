"""common/errors.py: one hierarchy, JSON both ways, retry hints."""

from __future__ import annotations

import pickle

import pytest

from vpq.common.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    InternalError,
    MethodNotAllowed,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
    VpqError,
)

SAMPLES: list[VpqError] = [
    BadRequest("invalid_message", "messages[3].value: bad", index=3, field="messages[3].value"),
    Unauthorized("invalid_token", "the bearer token is not valid"),
    Forbidden(message="no produce scope", scope="produce"),
    NotFound("queue_not_found", "no queue 'q'", queue="q"),
    MethodNotAllowed(allowed=["GET"]),
    Conflict("virtual_partitions_shrink", "may only grow"),
    PayloadTooLarge("message_too_large", "too big", index=0),
    UnsupportedMediaType(),
    Overloaded(message="slow down", retry_after=2.5),
    Overloaded(status=503, retry_after=1),
    Unavailable("stale_map", "map moved on", retry_after=0.2),
    InternalError(),
    VpqError("teapot", "short and stout", 418),
]


@pytest.mark.parametrize("err", SAMPLES, ids=lambda e: f"{type(e).__name__}-{e.status}")
def test_round_trip_through_json_keeps_type_and_fields(err: VpqError) -> None:
    body = err.to_dict()
    assert set(body) == {"error"}
    assert body["error"]["code"] == err.code and body["error"]["message"] == err.message
    back = VpqError.from_dict(body, err.status)
    assert type(back) is type(err)
    assert back == err
    assert back.retryable == err.retryable


@pytest.mark.parametrize("err", SAMPLES, ids=lambda e: f"{type(e).__name__}-{e.status}")
def test_pickle_round_trip(err: VpqError) -> None:
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and back == err


def test_statuses_and_default_codes() -> None:
    assert [c().status for c in (BadRequest, Unauthorized, Forbidden, NotFound, Conflict)] == [400, 401, 403, 404, 409]
    assert [c().status for c in (PayloadTooLarge, UnsupportedMediaType, Overloaded, Unavailable)] == [413, 415, 429, 503]
    assert NotFound().code == "not_found" and BadRequest().code == "invalid_request"
    assert Overloaded().retryable and Unavailable().retryable and not BadRequest().retryable


def test_details_are_in_the_body() -> None:
    err = BadRequest("invalid_message", "bad", index=3)
    assert err.to_dict() == {"error": {"code": "invalid_message", "message": "bad", "index": 3}}


def test_retry_after_header_and_detail() -> None:
    err = Overloaded(retry_after=2.1)
    assert err.headers() == {"Retry-After": "3"}
    assert err.to_dict()["error"]["retry_after"] == 2.1
    assert Unavailable().headers() == {"Retry-After": "1"}
    assert Unavailable(retry_after=0.01).headers() == {"Retry-After": "1"}
    assert Unavailable(retry_after=0).headers() == {"Retry-After": "0"}


def test_unauthorized_carries_www_authenticate() -> None:
    assert Unauthorized().headers()["WWW-Authenticate"].startswith("Bearer")
    assert 'error="invalid_token"' in Unauthorized("invalid_token").headers()["WWW-Authenticate"]


def test_503_maps_back_by_code() -> None:
    assert type(VpqError.from_dict(Overloaded(status=503).to_dict(), 503)) is Overloaded
    assert type(VpqError.from_dict({"error": {"code": "not_owner", "message": "x"}}, 503)) is Unavailable


def test_from_dict_without_status_uses_the_code() -> None:
    assert type(VpqError.from_dict(NotFound().to_dict())) is NotFound
    unknown = VpqError.from_dict({"error": {"code": "mystery", "message": "?"}})
    assert type(unknown) is VpqError and unknown.status == 500


def test_from_dict_of_a_foreign_body() -> None:
    err = VpqError.from_dict({"detail": "proxy said no"}, 502)
    assert err.status == 502 and err.code == "http_502"


@pytest.mark.parametrize("bad", [200, 302, 600])
def test_non_error_status_is_refused(bad: int) -> None:
    with pytest.raises(ValueError):
        VpqError("x", "y", bad)


def test_overloaded_is_429_or_503_only() -> None:
    with pytest.raises(ValueError):
        Overloaded(status=500)
    with pytest.raises(ValueError):
        Overloaded(retry_after=-1)


def test_code_and_message_cannot_be_details() -> None:
    with pytest.raises(TypeError):
        BadRequest("a", "b", code="c")  # type: ignore[misc]
