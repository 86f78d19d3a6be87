"""Validation of the names that end up inside Redis keys. Pure logic.

Queue and group names match ``[A-Za-z0-9._-]{1,128}`` and are not ``.`` or ``..``
(the public API's rule: those two are dot-segments of every URL they would appear in);
consumer and node ids ``[A-Za-z0-9._:-]{1,128}``, not ``.`` or ``..`` either; none of them can contain a
character that would make two key names collide.
"""

from __future__ import annotations

import re

NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")
ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
DOT_SEGMENTS = (".", "..")


def check_name(kind: str, value: object) -> str:
    """``value`` when it is a valid queue/group name, else ValueError naming ``kind``."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value) or value in DOT_SEGMENTS:
        raise ValueError(f"invalid {kind} name {value!r}: must match [A-Za-z0-9._-]{{1,128}}, not '.' or '..'")
    return value


def check_id(kind: str, value: object) -> str:
    """``value`` when it is a valid consumer/node id or resource name, else ValueError."""
    if not isinstance(value, str) or not ID_RE.fullmatch(value) or value in DOT_SEGMENTS:
        raise ValueError(f"invalid {kind} {value!r}: must match [A-Za-z0-9._:-]{{1,128}}, not '.' or '..'")
    return value
