"""Fuzz the real platform through its own OpenAPI document (schemathesis, stateless).

DESIGN.md guarantee 7: bad input gets a 4xx JSON error; a 5xx is a bug. For every
operation of the served ``/openapi.json`` schemathesis generates requests that fit the
schema (positive) and requests that break it (negative) and checks each answer:

* no 5xx (``not_a_server_error``);
* the status, the content type, the headers and the body are the documented ones
  (``status_code_conformance``, ``content_type_conformance``,
  ``response_headers_conformance``, ``response_schema_conformance``);
* every error is JSON ``{"error": {"code", "message", ...}}`` (``error_shape`` below);
* a schema-valid request is never rejected as invalid (``positive_data_acceptance``: only
  2xx, 404 unknown target, 409 conflict, 413 message over the queue's limit) and a
  schema-violating one is never accepted (``negative_data_rejection``).

Positive requests are steered half the time to a live queue, group and consumer (so
produce, poll, ack, nack, leave and the admin calls reach the nodes instead of stopping at
404; ack/nack then carry ids really in flight), with long polls capped at ``WAIT_CAP_MS``. Bounded and deterministic: hypothesis
``derandomize`` with ``MAX_EXAMPLES`` per operation and mode.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import Case, CheckContext, GenerationMode, Response
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.integration.api import Api
from vpq.gateway.openapi import build_openapi
from vpq.gateway.routes import ROUTES

pytestmark = pytest.mark.integration

MAX_EXAMPLES = 50
WAIT_CAP_MS = 100
KNOWN = {"queue": "fuzz-q", "group": "fuzz-g", "consumer_id": "fuzz-c"}

CONFIG = {
    "checks": {
        # 404: the drawn queue/group/consumer does not exist; 409: a valid change the
        # current state forbids (e.g. fewer virtual partitions); 413: a message over the
        # queue's max_message_bytes.
        "positive_data_acceptance": {"expected-statuses": ["2xx", 404, 409, 413]},
    }
}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def error_shape(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """Every 4xx/5xx answer is JSON ``{"error": {"code": str, "message": str, ...}}``."""
    if response.status_code < 400:
        return None
    content_type = ";".join(response.headers.get("content-type", [""])).split(";")[0].strip()
    assert content_type == "application/json", f"error answer {response.status_code} has content type {content_type!r}"
    body = response.json()
    assert isinstance(body, dict) and set(body) == {"error"}, f"error answer is not {{'error': ...}}: {body!r}"
    err = body["error"]
    assert isinstance(err, dict), body
    assert isinstance(err.get("code"), str) and err["code"], body
    assert isinstance(err.get("message"), str) and err["message"], body
    return True


def _operations() -> list[tuple[str, str, bool]]:
    """(METHOD, path, has something to negate) of every documented operation; from the
    route table, so the test ids exist before the platform runs (the served document is
    checked to list exactly these)."""
    doc = build_openapi(ROUTES)
    out = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            out.append((method.upper(), path, bool(op.get("parameters") or op.get("requestBody"))))
    return out


OPERATIONS = _operations()
CASES = [
    pytest.param(method, path, mode, id=f"{mode.value}-{method} {path}")
    for method, path, negatable in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or negatable
]


@pytest.fixture(scope="module")
def served(platform: Any) -> dict[str, Any]:
    r = requests.get(platform.url + "/openapi.json", timeout=10)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    return r.json()


@pytest.fixture(scope="module")
def schema(platform: Any, served: dict[str, Any]) -> Any:
    # from_dict (not from_url, which leaves out the operation serving the schema itself)
    return schemathesis.openapi.from_dict(served, config=schemathesis.Config.from_dict({**CONFIG, "base-url": platform.url}))


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        yield s


@pytest.fixture
def delivered(platform: Any) -> list[str]:
    """Makes the live queue, group and consumer positive requests are steered to (again
    before each operation: fuzzing DELETE removes them); the ids delivered to the consumer."""
    api = Api(platform.url)
    # fuzzed PUTs may have changed its config (max_message_bytes 1, ...): set it back
    api.put_queue(KNOWN["queue"], max_message_bytes=1 << 20, max_deliveries=5, visibility_timeout_ms=30000, retention_ms=-1)
    r = api.call("POST", f"/v1/queues/{KNOWN['queue']}/groups/{KNOWN['group']}/consumers",
                 {"consumer_id": KNOWN["consumer_id"]}, expect=None)
    assert r.status_code in (200, 409), r.text
    fresh = uuid.uuid4().hex[:8]  # new keys: earlier messages still in flight hold theirs back
    api.produce(KNOWN["queue"], [{"key": f"{fresh}-{i % 3}", "value": {"i": i}} for i in range(6)])
    api.produce(KNOWN["queue"], [{"key": fresh, "value_b64": "AAEC"}])
    return [m["id"] for m in api.poll(KNOWN["queue"], KNOWN["group"], KNOWN["consumer_id"], wait_ms=500)]


def _steer(case: Case, data: st.DataObject, delivered: list[str]) -> None:
    """Positive cases only: maybe aim at the live resources (and ack/nack ids really in
    flight); cap long polls; keep a ``deliver_at_ms`` within the next day."""
    if case.path_parameters and data.draw(st.booleans(), label="use live resources"):
        for name in case.path_parameters:
            if name in KNOWN:
                case.path_parameters[name] = KNOWN[name]
        if isinstance(case.body, dict) and isinstance(case.body.get("ids"), list) and delivered:
            case.body["ids"] = data.draw(st.lists(st.sampled_from(delivered), max_size=4), label="delivered ids")
    wait = case.body.get("wait_ms") if isinstance(case.body, dict) else None
    if isinstance(wait, (int, float)) and not isinstance(wait, bool) and wait > WAIT_CAP_MS:
        case.body["wait_ms"] = WAIT_CAP_MS
    messages = case.body.get("messages") if isinstance(case.body, dict) else None
    for m in messages if isinstance(messages, list) else ():
        # "at most 7 days after the request" depends on the clock, which no schema states
        if isinstance(m, dict) and isinstance(m.get("deliver_at_ms"), (int, float)):
            m["deliver_at_ms"] = min(m["deliver_at_ms"], time.time() * 1000 + 86_400_000)


def test_served_document_lists_every_route(schema: Any) -> None:
    loaded = {(op.method.upper(), op.path) for op in (r.ok() for r in schema.get_all_operations())}
    assert loaded == {(m, p) for m, p, _ in OPERATIONS}


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_fuzz_operation(
    schema: Any, session: requests.Session, delivered: list[str], method: str, path: str, mode: GenerationMode
) -> None:
    operation = schema[path][method]
    checks = [*CHECKS, positive_data_acceptance if mode is GenerationMode.POSITIVE else negative_data_rejection]

    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode), data=st.data())
    def run(case: Case, data: st.DataObject) -> None:
        if mode is GenerationMode.POSITIVE:
            _steer(case, data, delivered)
        response = case.call(session=session, timeout=20)
        case.validate_response(response, checks=checks, additional_checks=[error_shape])

    run()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/v1/queues/%2E%2E", {}),
        ("POST", "/v1/queues/%2E/messages", {"messages": [{"value": 1}]}),
        ("POST", "/v1/queues/fuzz-q/groups/%2E%2E/consumers", {}),
        ("POST", "/v1/queues/fuzz-q/groups/fuzz-g/consumers", {"consumer_id": ".."}),
    ],
)
def test_dot_segment_names_are_rejected(platform: Any, delivered: list[str], method: str, path: str, body: dict) -> None:
    """Found by fuzzing: ``.``/``..`` names (sent percent-encoded) created a queue whose
    messages no consumer could reach (internal node URLs resolved the segment away)."""
    r = requests.request(method, platform.url + path, json=body, timeout=10)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] in ("invalid_name", "invalid_request")
    names = {q["name"] for q in requests.get(platform.url + "/v1/queues", timeout=10).json()["queues"]}
    assert not names & {".", ".."}
