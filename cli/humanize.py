"""Human units for the CLI's tables. Pure functions: no I/O, no clock (callers pass
``now_ms``), no rich.

- ``count(1234)`` -> ``"1.2k"``; ``rate(1234.5, "msg/s")`` -> ``"1.2k msg/s"``
- ``size(3_565_158)`` -> ``"3.4 MiB"`` (binary units); ``byte_rate`` -> ``"3.4 MiB/s"``
- ``duration_ms(1500)`` -> ``"1.5 s"``; ``-1`` or ``None`` as "forever"/"-" where said
- ``age(then_ms, now_ms)`` -> ``"3 min ago"`` (``"just now"`` under a second,
  ``"in 5 s"`` for a time in the future)

Every function returns ``"-"`` for ``None`` and leaves non-numbers as ``str(value)``,
so a field whose type changes on the server still prints.
"""

from __future__ import annotations

from typing import Any

DASH = "-"
_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BINARY = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))
_DURATIONS = ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s"))


def is_number(value: Any) -> bool:
    """An int or float, not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _short(x: float) -> str:
    """One decimal under 100 (``1.2``, ``12.3``), none from 100 (``123``)."""
    if abs(x) < 99.95:
        text = f"{x:.1f}"
        return text[:-2] if text.endswith(".0") else text
    return f"{x:.0f}"


def count(value: Any) -> str:
    """``999`` -> ``"999"``, ``1234`` -> ``"1.2k"``, ``5_600_000`` -> ``"5.6M"``;
    fractions under 1000 keep one decimal when they have one (``5.5``)."""
    if value is None:
        return DASH
    if not is_number(value):
        return str(value)
    for scale, suffix in _SI:
        if abs(value) >= scale * 0.9995:
            return _short(value / scale) + suffix
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return _short(value) if abs(value) >= 0.05 else ("0" if value == 0 else f"{value:.2g}")


def rate(value: Any, unit: str = "msg/s") -> str:
    """``count`` followed by ``unit``: ``"1.2k msg/s"``."""
    text = count(value)
    return text if text == DASH or not is_number(value) else f"{text} {unit}"


def size(value: Any) -> str:
    """Bytes in binary units: ``"95 B"``, ``"1.0 KiB"``, ``"3.4 MiB"``; ``-1`` -> ``"unlimited"``."""
    if value is None:
        return DASH
    if not is_number(value):
        return str(value)
    if value < 0:
        return "unlimited"
    for scale, suffix in _BINARY:
        if value >= scale * 0.9995:
            return f"{value / scale:.1f} {suffix}" if value / scale < 9.95 else f"{value / scale:.0f} {suffix}"
    return f"{value:.0f} B"


def byte_rate(value: Any) -> str:
    """``size`` per second: ``"3.4 MiB/s"``."""
    text = size(value)
    return text if not is_number(value) or value < 0 else text + "/s"


def duration_ms(value: Any, negative: str = "forever") -> str:
    """``850`` -> ``"850 ms"``, ``1500`` -> ``"1.5 s"``, ``90_000`` -> ``"1.5 min"``,
    ``7_200_000`` -> ``"2 h"``; a negative value -> ``negative``."""
    if value is None:
        return DASH
    if not is_number(value):
        return str(value)
    if value < 0:
        return negative
    for scale, suffix in _DURATIONS:
        if value >= scale:
            return f"{_short(value / scale)} {suffix}"
    return f"{value:.0f} ms" if value >= 1 or value == 0 else f"{value:.2g} ms"


def age(then_ms: Any, now_ms: int) -> str:
    """How long ago ``then_ms`` (Unix ms) was: ``"3 min ago"``, ``"just now"``,
    ``"in 5 s"``; ``None`` or ``0`` -> ``"-"``."""
    if then_ms is None or then_ms == 0:
        return DASH
    if not is_number(then_ms):
        return str(then_ms)
    delta = now_ms - then_ms
    if abs(delta) < 1000:
        return "just now"
    for scale, suffix in _DURATIONS:
        if abs(delta) >= scale:
            n = int(abs(delta) // scale)
            return f"{n} {suffix} ago" if delta > 0 else f"in {n} {suffix}"
    return "just now"  # pragma: no cover - |delta| >= 1000 always matches "s"


def truncate(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, the last one an ellipsis when cut."""
    if width <= 0:
        return ""
    return text if len(text) <= width else text[: width - 1] + "…"
