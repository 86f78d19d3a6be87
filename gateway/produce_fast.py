"""The common produce body, validated without building pydantic models. Pure, no I/O.

``ProduceRequest.model_validate`` plus the ``is_json`` lookups cost about 1.4 us per
message (140 us for a batch of 100: a tenth of the gateway's CPU at batch 100), most of
it the per-message model and its after-validator. ``plain_messages`` accepts only the
plain shape, which pydantic would accept as it is and turn into the same values:

    {"messages": [{"value": <any JSON>, "key": <str or null, optional>,
                   "headers": <object of strings, optional>}, ...]}   # 1..MAX_BATCH_MESSAGES

and answers ``None`` for anything else (``value_b64``, isolation fields, a missing or
extra field, a wrong type, a bad length), which then goes through the pydantic models,
so every error and every unusual message is handled in one place, the models. The
property test in ``tests/gateway/test_produce_fast.py`` holds the two paths to the same
result.
"""

from __future__ import annotations

from typing import Any

from gateway.models import MAX_BATCH_MESSAGES

PLAIN_FIELDS = frozenset({"key", "value", "headers"})

PlainMessage = tuple[str | None, Any, dict[str, str]]
"""(key, JSON value, headers)"""


def plain_messages(body: dict[str, Any]) -> list[PlainMessage] | None:
    """The messages of a plain produce body, or ``None`` (see the module docstring)."""
    messages = body.get("messages")
    if len(body) != 1 or type(messages) is not list or not 1 <= len(messages) <= MAX_BATCH_MESSAGES:
        return None
    out: list[PlainMessage] = []
    append = out.append
    plain = PLAIN_FIELDS
    for m in messages:
        if type(m) is not dict or "value" not in m or not m.keys() <= plain:
            return None
        key = m.get("key")
        if key is not None and type(key) is not str:
            return None
        headers = m.get("headers")
        if headers is None:
            if "headers" in m:
                return None  # null headers: the model refuses it
            headers = {}
        elif type(headers) is not dict or not all(type(v) is str for v in headers.values()):
            return None
        append((key, m["value"], headers))
    return out
