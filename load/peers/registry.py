"""Build benchmark systems by name, or from another process's ``attach_spec``.

Names: ``vpq``, ``redis``, ``nats``, ``rabbitmq`` (what ``--systems`` accepts), plus
``nats-subjects`` (NATS with every queue a subject of one stream; scenario 3 only).
The NATS and RabbitMQ drivers need the ``peers`` extra (nats-py, aio-pika); they are
imported only when asked for, and their absence makes that system unavailable
(:class:`load.system.SystemUnavailable`), not the harness.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vpq.load.peers.redis_streams import RedisStreams
from vpq.load.peers.vpq import Vpq
from vpq.load.system import System, SystemUnavailable

NATS_URL = "nats://127.0.0.1:4222"
RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672/"

SYSTEM_NAMES: tuple[str, ...] = ("vpq", "redis", "nats", "rabbitmq")
EXTRA_NAMES: tuple[str, ...] = ("nats-subjects",)


@dataclass(frozen=True)
class Endpoints:
    """Where the systems are (loopback defaults) and where owned servers keep data."""

    data_dir: Path
    vpq_url: str = "http://127.0.0.1:8080"
    start_vpq: bool = True
    vpq_gateway_workers: int = 1
    nats_url: str = NATS_URL
    rabbitmq_url: str = RABBITMQ_URL
    tag: str = "run"


def parse_systems(
    text: str, choices: Sequence[str] = SYSTEM_NAMES + EXTRA_NAMES, shown: Sequence[str] = SYSTEM_NAMES
) -> list[str]:
    """``"vpq,redis"`` -> ``["vpq", "redis"]`` (lower case, duplicates dropped);
    ``ValueError`` naming an unknown system (one not in ``choices``; the message lists
    ``shown``) or when none is chosen."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in choices]
    if unknown:
        raise ValueError(f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(shown)}")
    if not names:
        raise ValueError("no system chosen")
    return list(dict.fromkeys(names))


def work_dir(name: str, endpoints: Endpoints) -> Path:
    """Where a server the harness starts for ``name`` keeps its data during this run."""
    return endpoints.data_dir / "work" / f"{name}-{endpoints.tag}"


def _nats(url: str, layout: str, tag: str) -> System:
    try:
        from vpq.load.peers.nats_js import NatsJetStream
    except ImportError as exc:
        raise SystemUnavailable(f"nats: the nats-py client is not installed (pip install '.[peers]'): {exc}") from exc
    return NatsJetStream(url, layout=layout, tag=tag)


def _rabbitmq(url: str, tag: str) -> System:
    try:
        from vpq.load.peers.rabbitmq import RabbitMQ
    except ImportError as exc:
        raise SystemUnavailable(f"rabbitmq: the aio-pika client is not installed (pip install '.[peers]'): {exc}") from exc
    return RabbitMQ(url, tag=tag)


def make_system(name: str, endpoints: Endpoints) -> System:
    """A not-yet-started system called ``name``; servers it starts keep their data under
    :func:`work_dir`. ``SystemUnavailable`` when its client library is missing."""
    if name == "vpq":
        return Vpq(
            endpoints.vpq_url,
            start_if_missing=endpoints.start_vpq,
            data_dir=work_dir(name, endpoints),
            physical_partitions=8,
            tag=endpoints.tag,
            gateway_workers=endpoints.vpq_gateway_workers,
        )
    if name == "redis":
        return RedisStreams(data_dir=work_dir(name, endpoints))
    if name == "nats":
        return _nats(endpoints.nats_url, "streams", endpoints.tag)
    if name == "nats-subjects":
        return _nats(endpoints.nats_url, "subjects", endpoints.tag + "s")
    if name == "rabbitmq":
        return _rabbitmq(endpoints.rabbitmq_url, endpoints.tag)
    raise ValueError(f"unknown system {name!r}")


def from_spec(spec: dict[str, Any]) -> System:
    """A system that attaches to the servers and names another instance set up
    (``System.attach_spec()``), owning nothing: stopping it only disconnects."""
    kind = spec["kind"]
    if kind == "vpq":
        return Vpq(spec["url"], start_if_missing=False, tag=spec["tag"])
    if kind == "redis":
        return RedisStreams(url=spec["url"])
    if kind == "nats":
        return _nats(spec["url"], spec["layout"], spec["tag"])
    if kind == "rabbitmq":
        return _rabbitmq(spec["url"], spec["tag"])
    raise ValueError(f"unknown system kind {kind!r}")
