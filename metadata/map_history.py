"""The history of the placement map: one entry per published epoch, newest first.

Every script that publishes a map (``maps.MapStore.publish``, ``fences.FenceStore``'s
``publish_fenced``/``publish_unfenced``) records the new epoch in the same Lua call
(``HISTORY_LUA``), so an epoch is in the history exactly when it was published, with the
Redis clock's time. A retried publish that had already taken effect records nothing
again. The list ``Keys.map_history()`` (``p:maps:history``) keeps the newest ``HISTORY_MAX`` entries.

Each entry is ``{"epoch": n, "time_ms": t, "note": {...}}``; the note is what the
publisher says about the change (pure builders below, all JSON):

- ``queues_note(changes)``: the queue admin's commit: ``kind: "queues"`` and ``queues``,
  one ``{"queue", "change": "created"|"grown"|"deleted", "virtual_partitions"}`` each;
- ``remap_note(stage, ...)``: a remap's epochs: ``kind: "remap"``, ``stage`` (``split``,
  ``fence``, ``final`` or ``recovery``), ``moves`` (``{"queue", "vp", "from_pp",
  "to_pp"}``, at most ``MAX_LISTED`` listed, ``moves_total`` counts them all), ``splits``
  (``{"queue", "from_vps", "to_vps"}``), ``imbalance_before``/``imbalance_after`` (the
  plan's combined max/mean load, on the epoch that ends the remap), ``rolled_back`` (moves
  given up) and ``fenced`` (vps the fence epoch fenced);
- no note: ``kind: "update"``.

``entries(raw)`` flattens what ``LRANGE`` gives into the ``GET /v1/maps/history`` shape:
``{"epoch", "time_ms", "kind", "stage", "queues", "moves", "moves_total", "splits",
"imbalance_before", "imbalance_after", "rolled_back", "fenced"}`` (absent parts empty,
0 or null).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

HISTORY_MAX = 1000
"""Entries kept in ``p:maps:history``."""

MAX_LISTED = 500
"""Moves listed in one entry (``moves_total`` counts them all)."""

HISTORY_LUA = """
local function vpq_record_epoch(history_key, epoch, note)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if note == nil or note == '' then note = '{"kind":"update"}' end
  redis.call('LPUSH', history_key, '{"epoch":' .. epoch .. ',"time_ms":' .. string.format('%%d', now) .. ',"note":' .. note .. '}')
  redis.call('LTRIM', history_key, 0, %d)
end
""" % (HISTORY_MAX - 1)
"""Lua prelude defining ``vpq_record_epoch(history_key, epoch_string, note_json)``; call it
right after the map is stored."""


def encode_note(note: Mapping[str, Any] | None) -> str:
    """The note as the JSON the scripts store ("" for none)."""
    return orjson.dumps(dict(note)).decode() if note else ""


def _move(m: Any) -> dict[str, Any]:
    if isinstance(m, Mapping):
        return {"queue": m["queue"], "vp": int(m["vp"]), "from_pp": int(m["from_pp"]), "to_pp": int(m["to_pp"])}
    return {"queue": m.queue, "vp": int(m.vp), "from_pp": int(m.from_pp), "to_pp": int(m.to_pp)}


def queues_note(changes: Iterable[tuple[str, str, int]]) -> dict[str, Any]:
    """The note of a queue-admin commit: ``(queue, change, virtual_partitions)`` each."""
    return {
        "kind": "queues",
        "queues": [{"queue": q, "change": c, "virtual_partitions": int(v)} for q, c, v in changes],
    }


def queue_changes(
    before: Mapping[str, Any], after: Mapping[str, Any], names: Iterable[str] | None = None
) -> list[tuple[str, str, int]]:
    """``(queue, change, virtual_partitions)`` between two maps' ``queues``, sorted by queue:
    ``created`` (absent before), ``grown`` (more vps), ``deleted`` (absent after). Only
    ``names`` are compared when given (the queues a commit edited)."""
    out: list[tuple[str, str, int]] = []
    for name in sorted(set(names) if names is not None else set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old is None and new is not None:
            out.append((name, "created", int(new["virtual_partitions"])))
        elif new is None and old is not None:
            out.append((name, "deleted", int(old["virtual_partitions"])))
        elif old is not None and new is not None and new["virtual_partitions"] != old["virtual_partitions"]:
            out.append((name, "grown", int(new["virtual_partitions"])))
    return out


def remap_note(
    stage: str,
    *,
    moves: Sequence[Any] = (),
    splits: Iterable[tuple[str, int, int]] = (),
    imbalance: tuple[float, float] | None = None,
    rolled_back: int = 0,
    fenced: int = 0,
) -> dict[str, Any]:
    """The note of one epoch of a remap; ``moves`` are ``VpMove``s or move dicts (the vps
    this epoch moved), ``splits`` ``(queue, from_vps, to_vps)``, ``imbalance`` (before,
    after), ``fenced`` how many vps the fence epoch fenced for moving."""
    note: dict[str, Any] = {
        "kind": "remap",
        "stage": stage,
        "moves": [_move(m) for m in list(moves)[:MAX_LISTED]],
        "moves_total": len(moves),
        "splits": [{"queue": q, "from_vps": int(a), "to_vps": int(b)} for q, a, b in splits],
    }
    if imbalance is not None:
        note["imbalance_before"] = round(float(imbalance[0]), 4)
        note["imbalance_after"] = round(float(imbalance[1]), 4)
    if rolled_back:
        note["rolled_back"] = int(rolled_back)
    if fenced:
        note["fenced"] = int(fenced)
    return note


def entry(raw: str | bytes) -> dict[str, Any]:
    """One stored entry in the public shape (see the module docstring)."""
    stored = orjson.loads(raw)
    note = stored.get("note") or {}
    moves = list(note.get("moves") or [])
    return {
        "epoch": int(stored["epoch"]),
        "time_ms": int(stored["time_ms"]),
        "kind": str(note.get("kind", "update")),
        "stage": note.get("stage"),
        "queues": list(note.get("queues") or []),
        "moves": moves,
        "moves_total": int(note.get("moves_total", len(moves))),
        "splits": list(note.get("splits") or []),
        "imbalance_before": note.get("imbalance_before"),
        "imbalance_after": note.get("imbalance_after"),
        "rolled_back": int(note.get("rolled_back", 0)),
        "fenced": int(note.get("fenced", 0)),
    }


def entries(raw: Iterable[str | bytes]) -> list[dict[str, Any]]:
    """``entry`` of each stored entry, skipping any that cannot be read."""
    out = []
    for r in raw:
        try:
            out.append(entry(r))
        except (ValueError, KeyError, TypeError):
            continue
    return out
