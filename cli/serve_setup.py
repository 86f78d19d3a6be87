"""What ``vpq serve`` settles before a role starts: addresses, settings, the cluster's
shape and a write node's index.

- ``parse_bind("HOST[:PORT]", default_port)`` and ``parse_advertise("HOST:PORT")``
  (``[v6]:port`` accepted) raise ``ServeError`` on a malformed value; an advertised host
  may not be a wildcard (``0.0.0.0``, ``::``) nor its port 0: other nodes dial exactly
  the advertised address. ``advertised(bind, advertise)`` is what the node registers
  (``advertise``, else None: the bound address), refusing a wildcard bind without one.
- ``build_settings(config, assignments, flags, held)``: the settings, from ``--config``,
  ``VPQ_`` variables, ``--set`` and the flags (highest), as ``vpq up`` builds them;
  ``ServeError`` (exit 2) on a bad key or value. A write node holds its ``--set``
  shape values apart (``held``) so that they are compared with the stored shape.
- ``settle_write_node``: reads the cluster's shape from Redis, storing one when there is
  none (the explicit values, else the settings' defaults); refuses (``ServeError``) when
  a value given explicitly (flag, ``--set``, TOML or ``VPQ_`` variable) differs from the
  stored one, naming both; then claims the node id's write-node index
  (``metadata.cluster_shape``). ``settle_reader`` (read nodes, gateways) waits until a
  write node created the cluster and adopts its shape. Both give back the settings with
  the stored shape in ``cluster``.

``ServeError`` carries the exit status: 2 for bad input or a refused shape, 1 when Redis
does not answer.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from vpq.config.overrides import describe_error, parse_assignments
from vpq.config.settings import ClusterSettings, Settings, load_settings
from vpq.metadata.cluster_shape import FIELDS, ClusterShape, SlotError, mismatches
from vpq.metadata.errors import MetadataUnavailable
from vpq.metadata.store import MetadataStore

WILDCARDS = ("0.0.0.0", "::", "")


class ServeError(Exception):
    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


def _split(text: str, what: str) -> tuple[str, str | None]:
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ServeError(f"{what} {text!r} is not HOST[:PORT]")
        return host, rest[1:] if rest else None
    if text.count(":") > 1:  # a bare IPv6 address
        return text, None
    host, sep, port = text.partition(":")
    return host, port if sep else None


def _port(text: str, what: str, whole: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise ServeError(f"{what} {whole!r}: port {text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ServeError(f"{what} {whole!r}: port {port} is outside 0..65535")
    return port


def parse_bind(text: str, default_port: int) -> tuple[str, int]:
    """``HOST[:PORT]`` -> (host, port), ``default_port`` when none is given."""
    host, port = _split(text, "--bind")
    if not host:
        raise ServeError(f"--bind {text!r} names no host (use 0.0.0.0 for every interface)")
    return host, default_port if port is None else _port(port, "--bind", text)


def _wildcard(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return host in WILDCARDS


def parse_advertise(text: str) -> str:
    """``HOST:PORT`` as other nodes dial it (module doc)."""
    host, port = _split(text, "--advertise")
    if port is None or not host:
        raise ServeError(f"--advertise {text!r} is not HOST:PORT")
    if _wildcard(host):
        raise ServeError(
            f"--advertise {text!r}: {host} is not an address other hosts can reach; advertise this "
            "host's own name or IP address"
        )
    number = _port(port, "--advertise", text)
    if number == 0:
        raise ServeError(f"--advertise {text!r}: port 0 cannot be dialled; bind a fixed port and advertise it")
    return f"[{host}]:{number}" if ":" in host else f"{host}:{number}"


def advertised(bind_host: str, advertise: str | None) -> str | None:
    """The address to register (None: the bound one); a wildcard bind needs ``--advertise``."""
    if advertise is not None:
        return parse_advertise(advertise)
    if _wildcard(bind_host):
        raise ServeError(
            f"--bind {bind_host} listens on every interface, so other nodes need to be told where to "
            "reach this one: add --advertise HOST:PORT"
        )
    return None


SHAPE_KEYS = tuple(f"cluster.{name}" for name in FIELDS)


def build_settings(
    config: Path | None, assignments: list[str] | None, flags: Mapping[str, Any], held: tuple[str, ...] = ()
) -> tuple[Settings, dict[str, Any]]:
    """The settings from every source (module doc), data directory made absolute, and the
    ``--set`` values of the ``held`` keys, kept out of the settings (a write node's shape
    values are checked against the stored shape, not against the defaults)."""
    try:
        overrides = parse_assignments(assignments or ())
        kept = {key: overrides.pop(key) for key in held if key in overrides}
        overrides.update((k, v) for k, v in flags.items() if v is not None)
        settings = load_settings(config, overrides)
    except (FileNotFoundError, ValueError) as exc:
        raise ServeError(describe_error(exc)) from exc
    return settings.model_copy(update={"data_dir": settings.data_dir.resolve()}), kept


def with_shape(settings: Settings, shape: ClusterShape) -> Settings:
    """``settings`` with the cluster's stored shape (``ServeError`` when the rest disagrees)."""
    values = {**settings.cluster.model_dump(), **{name: getattr(shape, name) for name in FIELDS}}
    try:
        cluster = ClusterSettings.model_validate(values)
    except ValueError as exc:
        raise ServeError(describe_error(exc)) from exc
    return settings.model_copy(update={"cluster": cluster})


def explicit_shape(settings: Settings, held: Mapping[str, Any], flags: Mapping[str, int | None]) -> dict[str, int]:
    """The shape values asked for explicitly: the flags, else ``--set`` (``held``), else any
    source that set them; ``ServeError`` for a value that is not a positive integer."""
    given = settings.cluster.model_fields_set
    out = {name: getattr(settings.cluster, name) for name in FIELDS if name in given}
    out.update((key.split(".", 1)[1], value) for key, value in held.items())
    out.update((name, value) for name, value in flags.items() if value is not None)
    for name, value in out.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ServeError(f"cluster.{name} must be a positive integer, got {value!r}")
    return out


async def _connected(settings: Settings, redis_url: str) -> MetadataStore:
    md = MetadataStore(settings.redis, url=redis_url, queue_defaults=settings.queues)
    try:
        await md.start()
    except MetadataUnavailable as exc:
        await md.stop()
        raise ServeError(f"Redis at {redis_url} does not answer: {exc}", code=1) from exc
    return md


async def settle_write_node(
    settings: Settings, redis_url: str, node_id: str, explicit: Mapping[str, int], index: int | None
) -> tuple[Settings, int, bool]:
    """(settings with the cluster's shape, this node's index, whether this node created the cluster)."""
    want = ClusterShape(**{name: explicit.get(name, getattr(settings.cluster, name)) for name in FIELDS})
    with_shape(settings, want)  # an impossible shape is refused before it is stored
    md = await _connected(settings, redis_url)
    try:
        before = await md.read_shape()
        stored = before or await md.get_or_create_shape(want)
        wrong = mismatches(stored, dict(explicit))
        if wrong:
            raise ServeError(
                "this write node asks for " + ", ".join(wrong) + "; the shape of a cluster is fixed when its "
                "first write node starts (start without those flags to adopt it)"
            )
        node_index = await md.claim_write_slot(node_id, stored.write_nodes, index)
    except SlotError as exc:
        raise ServeError(f"write node {node_id} cannot join: {exc}") from exc
    except MetadataUnavailable as exc:
        raise ServeError(f"Redis at {redis_url} failed: {exc}", code=1) from exc
    finally:
        await md.stop()
    return with_shape(settings, stored), node_index, before is None and stored == want


async def settle_reader(
    settings: Settings, redis_url: str, say: Callable[[str], None], poll_s: float = 0.5
) -> Settings:
    """Settings with the cluster's shape, once a write node has created it."""
    md = await _connected(settings, redis_url)
    told = False
    try:
        while True:
            shape = await md.read_shape()
            if shape is not None:
                return with_shape(settings, shape)
            count = await md.read_partition_count()  # a cluster created by `vpq up`
            if count is not None:
                values = settings.cluster.model_dump() | {"physical_partitions": count}
                return settings.model_copy(update={"cluster": ClusterSettings.model_validate(values)})
            if not told:
                say(f"waiting for the first write node to create the cluster in {redis_url}")
                told = True
            await asyncio.sleep(poll_s)
    except MetadataUnavailable as exc:
        raise ServeError(f"Redis at {redis_url} failed: {exc}", code=1) from exc
    finally:
        await md.stop()


async def record_composed_cluster(settings: Settings, redis_url: str) -> str | None:
    """What ``vpq up`` stores so that roles started later with ``vpq serve`` join its
    cluster as it is: the shape (create-if-absent; a stored one is kept, as ``vpq up``
    keeps a stored partition count) and the slots ``w<i>`` -> ``i`` of its write nodes.
    Returns a note when the stored shape differs or a slot is taken (``vpq up`` runs on
    as before), None otherwise."""
    c = settings.cluster
    want = ClusterShape(c.physical_partitions, c.replication_factor, c.write_nodes)
    md = MetadataStore(settings.redis, url=redis_url, queue_defaults=settings.queues)
    notes: list[str] = []
    try:
        await md.start()
        stored = await md.get_or_create_shape(want)
        if stored != want:
            wrong = mismatches(stored, {name: getattr(want, name) for name in FIELDS})
            notes.append("the cluster in Redis keeps its shape; asked for " + ", ".join(wrong))
        for i in range(c.write_nodes):
            try:
                await md.claim_write_slot(f"w{i}", stored.write_nodes, i)
            except SlotError as exc:
                notes.append(f"write node w{i}: {exc}")
    except MetadataUnavailable as exc:
        notes.append(f"could not record the cluster's shape: {exc}")
    finally:
        await md.stop()
    return "; ".join(notes) or None
