"""``load.native_tools`` and ``load.capacity``: the wrk script really drives an HTTP
server and counts only 2xx answers; redis-benchmark's CSV is read; the summary's ratio."""

from __future__ import annotations

import asyncio
import subprocess
import threading
from pathlib import Path

import orjson
import pytest
from aiohttp import web

from tests.needs import missing
from vpq.common.redis_server import free_port
from vpq.load import native_tools
from vpq.load.capacity import GOAL_RATIO, Run, report_lines, summarise


def test_produce_body_and_lua_string_round_trip() -> None:
    body = native_tools.produce_body(3, 5, keys=2)
    assert orjson.loads(body) == {"messages": [{"key": "k0", "value": "xxxxx"}, {"key": "k1", "value": "xxxxx"}, {"key": "k0", "value": "xxxxx"}]}
    assert native_tools._lua_string(b"a]]b") == "[=[a]]b]=]"


def test_parse_redis_benchmark_csv() -> None:
    out = '"test","rps","avg_latency_ms"\n"XADD capacity * f xxx","24942.61","5.1"\n'
    assert native_tools.parse_redis_benchmark_csv(out) == pytest.approx(24942.61)
    with pytest.raises(ValueError):
        native_tools.parse_redis_benchmark_csv('"test","rps"\n')


def test_summary_ratio_against_the_goal() -> None:
    runs = [Run("vpq", 1, 300.0, 1), Run("vpq", 2, 100.0, 1), Run("vpq", 3, 200.0, 1), Run("redis", 1, 100.0, 1)]
    s = summarise(runs, {"nats": "missing"})
    assert s["msgs_per_s"] == {"vpq": 200, "redis": 100}
    assert s["vpq_over_redis"] == 2.0 and s["goal_met_redis"] is (2.0 >= GOAL_RATIO)
    assert any("skipped nats: missing" in line for line in report_lines(s))
    s["gateway_workers"] = 2
    assert report_lines(s)[0] == "vpq gateway workers: 2"


def test_wrk_script_counts_only_2xx_answers(tmp_path: Path) -> None:
    wrk = native_tools.find("wrk")
    if wrk is None:
        missing("wrk (apt-get install wrk)")
    seen: list[bytes] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(await request.read())
        return web.json_response({}, status=200 if len(seen) % 2 else 503)

    port = free_port()
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/p", handler)
    runner = web.AppRunner(app)
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        body = native_tools.produce_body(2, 3)
        script = tmp_path / "s.lua"
        script.write_text(native_tools.wrk_script(body))
        out = subprocess.run(
            native_tools.wrk_command(wrk, f"http://127.0.0.1:{port}/p", str(script), 2, 1, 1),
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
    stats = native_tools.parse_wrk(out)
    assert seen and all(b == body for b in seen)
    answered = stats["ok"] + stats["bad_status"]
    assert len(seen) >= 2 and len(seen) - 2 <= answered <= len(seen)  # wrk stops with <= 2 in flight
    assert abs(stats["ok"] - stats["bad_status"]) <= 2  # every other answer was a 503
