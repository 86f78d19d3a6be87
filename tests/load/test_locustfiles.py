"""The locust files, run headless for a few seconds against the real gateway (a live
platform, through the SDK tests' recording proxy)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.live_platform import platform_settings, running
from tests.recording_proxy import RecordingProxy
from tests.sdk.conftest import ThreadedGateway

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[ThreadedGateway]:
    with running(platform_settings(tmp_path / "platform")) as live:
        proxy = RecordingProxy(live.url)
        yield ThreadedGateway(live.serve(proxy.app()), proxy, live)


def test_produce_and_consume_users_run_without_failures(gateway: ThreadedGateway) -> None:
    cmd = [
        sys.executable, "-m", "locust", "-f", "load/locustfile_produce.py,load/locustfile_consume.py", "--headless",
        "-u", "4", "-r", "4", "-t", "6s", "--host", gateway.url, "--only-summary",
        "--vpq-queues", "2", "--vpq-batch", "3", "--vpq-lanes", ",feat-a", "--vpq-envs", "test",
        "--vpq-work-ms", "1", "--vpq-wait-ms", "100",
    ]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    proxy = gateway.proxy
    produced = proxy.requests_to("POST", "/messages")
    assert produced and all(len(r.body["messages"]) == 3 for r in produced)
    assert {r.headers.get("X-Lane") for r in produced} <= {"", "feat-a"}
    assert {r.headers.get("X-Env") for r in produced} == {"test"}
    queues = requests.get(gateway.platform.url + "/v1/queues", timeout=10).json()["queues"]
    assert {q["name"] for q in queues if not q["name"].endswith(".dlq")} == {"load-0", "load-1"}
    assert proxy.requests_to("POST", "/consumers")  # joined
    assert proxy.requests_to("POST", "/ack")
    assert proxy.requests_to("DELETE", "")  # left when the test stopped
