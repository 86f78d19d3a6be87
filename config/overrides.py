"""``--set KEY=VALUE`` assignments: any setting, named by its dotted key, from the command line.

``parse_assignments(["read_nodes.max_unacked=5000", "log.fsync_policy=interval"])``
returns ``{"read_nodes.max_unacked": 5000, "log.fsync_policy": "interval"}``, ready
for ``load_settings(overrides=...)`` (or ``apply_overrides`` on settings already
built). The value of a text setting (a string, path or choice such as
``log.fsync_policy``) is taken as written (JSON quotes, if any, are removed); any
other value is read as JSON when it parses as JSON (numbers, ``true``/``false``,
lists, objects), else passed on as text for pydantic to judge; ``null`` is refused
(leave the key out to keep the value of the lower sources).

A mapping setting (``rebalance.spark_conf``) takes a JSON object as a whole, or one
entry per assignment: ``rebalance.spark_conf.spark.executor.memory=2g`` sets the entry
``spark.executor.memory`` (everything after the setting's key, dots included, names
the entry; its value is taken as text) and keeps the other entries.

Keys are checked against the ``Settings`` schema: an unknown key, a key naming a
whole section, or a malformed assignment raises ``SettingsKeyError`` (a
``ValueError``) whose message names the key; values are checked by pydantic when the
settings are built (its ``ValidationError`` names the key too).
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from vpq.config.settings import Settings


class SettingsKeyError(ValueError):
    """A ``--set`` assignment that names no setting or is malformed."""


def _section_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def check_key(key: str, model: type[BaseModel] = Settings) -> FieldInfo:
    """The field ``key`` (dotted) names in ``model``; ``SettingsKeyError`` unless it names
    one setting (not a section)."""
    parts = key.split(".")
    current: type[BaseModel] | None = model
    field: FieldInfo | None = None
    for i, part in enumerate(parts):
        where = ".".join(parts[:i]) or "the top level"
        if current is None:
            raise SettingsKeyError(f"unknown setting {key!r}: {'.'.join(parts[:i])} is a value, not a section")
        field = current.model_fields.get(part)
        if field is None:
            known = ", ".join(sorted(current.model_fields))
            raise SettingsKeyError(f"unknown setting {key!r}: no {part!r} in {where} (known: {known})")
        current = _section_model(field.annotation)
    if current is not None:
        known = ", ".join(sorted(current.model_fields))
        raise SettingsKeyError(f"setting {key!r} is a section: name one of its keys ({known})")
    assert field is not None
    return field


def map_entry(key: str, model: type[BaseModel] = Settings) -> tuple[str, str] | None:
    """``(the mapping setting's dotted key, the entry's key)`` when ``key`` names one entry
    of a mapping setting (``rebalance.spark_conf.spark.driver.host`` ->
    ``("rebalance.spark_conf", "spark.driver.host")``), else None."""
    parts = key.split(".")
    current: type[BaseModel] | None = model
    for i, part in enumerate(parts):
        field = current.model_fields.get(part) if current is not None else None
        if field is None:
            return None
        if get_origin(field.annotation) is dict:
            entry = ".".join(parts[i + 1 :])
            return (".".join(parts[: i + 1]), entry) if entry else None
        current = _section_model(field.annotation)
    return None


def _is_text(annotation: Any) -> bool:
    """True when every value ``annotation`` admits (None aside) is written as text."""
    if isinstance(annotation, type):
        return issubclass(annotation, (str, Path))
    origin = get_origin(annotation)
    if origin is Literal:
        return all(isinstance(a, str) for a in get_args(annotation))
    if origin is Union or origin is types.UnionType:
        args = [a for a in get_args(annotation) if a is not type(None)]
        return bool(args) and all(_is_text(a) for a in args)
    return False


def parse_value(text: str, as_text: bool = False) -> Any:
    """``text`` as JSON when it parses as JSON, else the string itself; with ``as_text``
    the string itself, unquoted when it is a JSON string."""
    if as_text and not text.startswith('"'):
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if as_text and not isinstance(value, str):
        return text
    return value


def parse_assignments(items: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings as a dotted-key dict (a later assignment of a key wins)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SettingsKeyError(f"--set expects KEY=VALUE (e.g. read_nodes.max_unacked=5000), got {item!r}")
        entry = map_entry(key)
        if entry is not None:
            mapping, name = entry
            previous = out.get(mapping)
            out[mapping] = {**(previous if isinstance(previous, dict) else {}), name: parse_value(text, as_text=True)}
            continue
        field = check_key(key)
        value = None if text.strip() == "null" else parse_value(text, as_text=_is_text(field.annotation))
        if value is None:
            raise SettingsKeyError(f"setting {key!r}: null is not a value (leave the key out to keep its default)")
        out[key] = value
    return out


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    nested: dict[str, Any] = {}
    for dotted, value in flat.items():
        target = nested
        *path, last = dotted.split(".")
        for part in path:
            target = target.setdefault(part, {})
        target[last] = value
    return nested


def _merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def apply_overrides(settings: Settings, overrides: dict[str, Any]) -> Settings:
    """``settings`` with the dotted-key ``overrides`` applied and everything validated
    again (``None`` values are ignored, as in ``load_settings``)."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if not given:
        return settings
    for key in given:
        check_key(key)
    return Settings.model_validate(_merge(settings.model_dump(), _nest(given)))


def describe_error(exc: Exception) -> str:
    """A one-line-per-problem message for a settings error, each line naming its key."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    lines = []
    for e in errors():
        key = ".".join(str(p) for p in e.get("loc", ())) or "settings"
        lines.append(f"setting {key!r}: {e.get('msg', 'invalid')} (got {e.get('input')!r})")
    return "\n".join(lines) or str(exc)
