"""Native load generators (wrk, redis-benchmark, nats) for ``vpq bench capacity``:
finding them, the argument lists, and reading their output. Pure but for ``find`` and
``install``.

* ``wrk`` drives vpq's gateway: a Lua script (``wrk_script``) POSTs one fixed produce
  body of ``batch`` messages and prints, when wrk is done, one JSON line with the counts
  wrk's own summary does not separate (2xx answers, other statuses, socket errors) and
  the latency percentiles. Only 2xx answers count as delivered messages.
* ``redis-benchmark`` drives Redis Streams: ``XADD`` of one field holding ``value_bytes``
  bytes, ``clients`` connections, ``pipeline`` commands in flight per connection, its
  ``--csv`` output read by ``parse_redis_benchmark_csv``.
* ``nats bench`` (the natscli tool) drives NATS JetStream when it is on PATH.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
from typing import Any

import orjson

WRK_DONE_MARK = "VPQ_WRK_DONE "


def find(tool: str) -> str | None:
    return shutil.which(tool)


def install(package: str) -> tuple[bool, str]:
    """``apt-get install -y PACKAGE`` (after ``apt-get update`` if the first try fails);
    ``(installed, what happened)``. Only meaningful as root on a Debian-like system."""
    if shutil.which("apt-get") is None:
        return False, "no apt-get on this machine"
    for cmd in (["apt-get", "install", "-y", "-qq", package], ["sh", "-c", f"apt-get update -qq && apt-get install -y -qq {package}"]):
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"{' '.join(cmd)}: {exc}"
        if done.returncode == 0:
            return True, f"installed {package} with apt-get"
    return False, f"apt-get install {package} failed: {done.stderr.strip()[-300:]}"


def produce_body(batch: int, value_bytes: int, keys: int = 16) -> bytes:
    """A produce request of ``batch`` JSON string values of ``value_bytes`` characters,
    keys spread over ``keys`` names (so every virtual partition gets traffic)."""
    value = "x" * value_bytes
    return orjson.dumps({"messages": [{"key": f"k{i % keys}", "value": value} for i in range(batch)]})


def _lua_string(data: bytes) -> str:
    """A Lua long bracket string holding ``data`` exactly (no escapes are read inside)."""
    text = data.decode("utf-8")
    level = 0
    while f"]{'=' * level}]" in text:
        level += 1
    return f"[{'=' * level}[{text}]{'=' * level}]"


def wrk_script(body: bytes) -> str:
    """The Lua script wrk runs: the same POST every time; at the end one line
    ``VPQ_WRK_DONE {json}`` with requests, 2xx answers, other statuses, errors and the
    latency percentiles in microseconds."""
    return f"""
wrk.method = "POST"
wrk.body = {_lua_string(body)}
wrk.headers["Content-Type"] = "application/json"

local threads = {{}}
function setup(thread)
  table.insert(threads, thread)
end
function init(args)
  ok = 0
  bad = 0
end
function response(status, headers, body)
  if status >= 200 and status < 300 then ok = ok + 1 else bad = bad + 1 end
end
function done(summary, latency, requests)
  local ok_total, bad_total = 0, 0
  for _, t in ipairs(threads) do
    ok_total = ok_total + t:get("ok")
    bad_total = bad_total + t:get("bad")
  end
  local e = summary.errors
  io.write(string.format(
    '{WRK_DONE_MARK}{{"requests": %d, "ok": %d, "bad_status": %d, "socket_errors": %d, "duration_us": %d, '
    .. '"p50_us": %d, "p99_us": %d, "max_us": %d}}\\n',
    summary.requests, ok_total, bad_total, e.connect + e.read + e.write + e.timeout, summary.duration,
    latency:percentile(50), latency:percentile(99), latency.max))
end
"""


def wrk_command(wrk: str, url: str, script_path: str, connections: int, threads: int, seconds: float) -> list[str]:
    return [
        wrk, "-c", str(connections), "-t", str(threads), "-d", f"{max(1, round(seconds))}s",
        "--timeout", "10s", "-s", script_path, url,
    ]  # fmt: skip


def parse_wrk(output: str) -> dict[str, Any]:
    """The JSON line the script prints (see ``wrk_script``); ValueError when absent."""
    for line in output.splitlines():
        if line.startswith(WRK_DONE_MARK):
            return json.loads(line[len(WRK_DONE_MARK) :])
    raise ValueError(f"wrk printed no summary line: {output.strip()[-300:]!r}")


def redis_benchmark_command(
    tool: str, port: int, clients: int, pipeline: int, requests: int, value_bytes: int, stream: str = "capacity"
) -> list[str]:
    return [
        tool, "-h", "127.0.0.1", "-p", str(port), "-c", str(clients), "-P", str(pipeline), "-n", str(requests),
        "--csv", "XADD", stream, "*", "f", "x" * value_bytes,
    ]  # fmt: skip


def parse_redis_benchmark_csv(output: str) -> float:
    """Requests per second from ``redis-benchmark --csv`` (header row, then one row per
    test: ``"test","rps",...``); ValueError when there is none."""
    rows = [r for r in csv.reader(io.StringIO(output)) if r]
    for row in rows:
        if len(row) >= 2 and row[0] != "test":
            try:
                return float(row[1])
            except ValueError:
                continue
    raise ValueError(f"redis-benchmark printed no rate: {output.strip()[-300:]!r}")
