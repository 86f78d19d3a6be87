"""What of the public contract (API.md) is known not to be served yet.

Each entry names the issue that builds it; the contract tests check everything else
both ways, and fail once an entry is served (so the list only shrinks)."""

from __future__ import annotations

NOT_BUILT_YET: dict[tuple[str, str], str] = {
    ("DELETE", "/v1/queues/{queue}/groups/{group}"): "issue 22 (data lifecycle)",
    ("POST", "/v1/queues/{queue}/groups/{group}/dlq/redrive"): "issue 22 (data lifecycle)",
    ("GET", "/v1/maps/history"): "issue 23 (operator experience)",
    ("GET", "/ui"): "issue 23 (operator experience)",
}
