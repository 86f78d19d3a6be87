"""The vpq driver through the SDK against the real platform: in-process roles
(``tests/live_platform.py``) for the driver's calls, a real ``vpq up`` child for its
process management, and stand-in binaries for the ways ``vpq up`` can fail."""

from __future__ import annotations

import asyncio
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live_platform import LivePlatform, platform_settings, running
from tests.needs import missing
from tests.sdk.conftest import read_back
from vpq.common.redis_server import find_redis_server
from vpq.load.checks import DeliveryChecker
from vpq.load.payload import make_payload, parse_payload
from vpq.load.peers.vpq import Vpq
from vpq.load.peers.vpq_process import VpqProcess, VpqProcessError, crash_looping
from vpq.load.system import SystemUnavailable
from vpq.sdk.client import AsyncClient

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LivePlatform]:
    with running(platform_settings(tmp_path_factory.mktemp("driver-platform"))) as live:
        yield live


async def queue_names(url: str) -> dict[str, dict[str, object]]:
    async with AsyncClient(url) as c:
        return {q["name"]: q for q in await c.list_queues()}


async def test_round_trip_through_the_sdk(platform: LivePlatform) -> None:
    url = platform.url
    vpq = Vpq(url, start_if_missing=False, tag="t1")
    await vpq.start()
    try:
        assert vpq.describe()["physical_partitions"] == 4 and not vpq.describe()["started_by_harness"]
        await vpq.setup(["q"], ordered=True)
        assert (await queue_names(url))["vpqb-t1-q"]["ordering"] == "key"
        await vpq.setup(["u"], ordered=False)
        assert (await queue_names(url))["vpqb-t1-u"]["ordering"] == "none"
        batch = [(f"k{i % 5}", make_payload(f"k{i % 5}", i // 5)) for i in range(40)]
        await vpq.produce("q", batch[:20], lanes=4)
        await vpq.produce("q", batch[20:], lanes=4)  # per-key order holds within one (key, lane)
        assert await vpq.count("q") == 40
        stored = await read_back(url, "vpqb-t1-q", 40)  # lane messages fall back to this backbone reader
        lane_of: dict[str, set[str]] = {}
        for m in stored:
            lane_of.setdefault(m.key or "", set()).add(m.lane)
        assert set(lane_of) == {f"k{i}" for i in range(5)} and all(len(v) == 1 for v in lane_of.values())  # by key
        lanes = set().union(*lane_of.values())
        assert lanes <= {"", "lane-1", "lane-2", "lane-3"} and len(lanes) > 1
        assert all(isinstance(m.value, str) and len(m.value) == 1024 for m in stored)  # 1 KiB JSON string values

        checker = DeliveryChecker()
        for k, p in batch:
            stamp = parse_payload(p)
            checker.expect(stamp.key, stamp.seq)

        async def handler(key: str, payload: bytes) -> None:
            stamp = parse_payload(payload)
            assert stamp.key == key
            checker.observe(stamp.key, stamp.seq)

        member = await vpq.consume("q", handler, ordered=True, batch=7)
        for _ in range(300):
            if checker.expected_seen == 40:
                break
            await asyncio.sleep(0.01)
        await member.stop()
        assert checker.report().ok and checker.report().distinct == 40
        await vpq.delete(["q"])
        assert "vpqb-t1-q" not in await queue_names(url)
        await vpq.teardown()
        assert "vpqb-t1-u" not in await queue_names(url)
    finally:
        await vpq.stop()


async def test_unreachable_platform_is_unavailable(tmp_path: Path) -> None:
    vpq = Vpq("http://127.0.0.1:9", start_if_missing=False)
    with pytest.raises(SystemUnavailable, match="no ready platform"):
        await vpq.start()


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!{sys.executable}\n{body}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


async def test_the_driver_starts_and_stops_its_own_platform(tmp_path: Path) -> None:
    if find_redis_server() is None:
        missing("needs the redis-server binary")
    vpq = Vpq("http://127.0.0.1:9", start_if_missing=True, data_dir=tmp_path / "platform", tag="t2")  # the real vpq up
    await vpq.start()
    process = vpq._process
    assert process is not None and process.proc is not None
    pid = process.proc.pid
    try:
        assert vpq.describe()["started_by_harness"]
        await vpq.setup(["q"])
        await vpq.produce("q", [("a", make_payload("a", 0))])
        assert await vpq.count("q") == 1
        assert (await vpq.server_memory())["rss_bytes"] > 0
    finally:
        await vpq.stop()
    assert not Path(f"/proc/{pid}").exists()  # stopped and reaped


async def test_a_failing_vpq_up_is_reported(tmp_path: Path) -> None:
    exits = VpqProcess(tmp_path / "a", binary=_script(tmp_path / "fails", "print('boom'); raise SystemExit(3)"))
    with pytest.raises(VpqProcessError, match="exited with 3"):
        await exits.start(timeout_s=20)
    looping = VpqProcess(
        tmp_path / "b",
        binary=_script(
            tmp_path / "loops",
            "import time\nfor i in range(10):\n    print(f'vpq: read-0 exited with 1', flush=True)\ntime.sleep(60)\n",
        ),
    )
    with pytest.raises(VpqProcessError, match="keeps restarting"):
        await looping.start(timeout_s=20)
    assert looping.proc is None
    missing = VpqProcess(tmp_path / "c", binary=tmp_path / "nowhere")
    with pytest.raises(VpqProcessError, match="not found"):
        await missing.start()


def test_crash_loop_detection() -> None:
    assert not crash_looping("vpq: started gateway\nvpq: gateway exited with 1\n")
    assert crash_looping("vpq: x exited with 1\n" * 6)
