"""`vpq up` runs with a cluster secret: its own (created in <data-dir>/run) or a
configured file; the platform works and a raw call to a node without it is refused."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.integration.api import Api
from tests.integration.conftest import FAST
from tests.integration.platform import ROOT, Platform
from vpq.node_rpc.cluster_auth import CLUSTER_SECRET_HEADER

pytestmark = pytest.mark.integration


def _produce_and_consume(api: Api) -> None:
    api.put_queue("s")
    ids = {r["id"] for r in api.produce("s", [{"key": f"k{i}", "value": i} for i in range(20)])}
    cid = api.join("s", "g")
    seen: set[str] = set()
    for _ in range(50):
        batch = api.poll("s", "g", cid, max_messages=100, wait_ms=200)
        if batch:
            api.ack("s", "g", cid, [m["id"] for m in batch])
            seen |= {m["id"] for m in batch}
        if seen == ids:
            break
    assert seen == ids


def _nodes_refuse_without(api: Api, secret: str) -> None:
    cluster = api.cluster()
    addresses = [n["address"] for n in cluster["write_nodes"] + cluster["read_nodes"]]
    assert len(addresses) == 2
    for address in addresses:
        url = f"http://{address}/internal/v1/metrics"
        r = requests.get(url, timeout=10)
        assert r.status_code == 401 and r.json()["error"]["code"] == "cluster_secret_required"
        r = requests.get(url, headers={CLUSTER_SECRET_HEADER: secret[::-1]}, timeout=10)
        assert r.status_code == 401 and r.json()["error"]["code"] == "bad_cluster_secret"
        assert requests.get(url, headers={CLUSTER_SECRET_HEADER: secret}, timeout=10).status_code == 200


def test_up_creates_a_secret_and_the_nodes_require_it(tmp_path: Path) -> None:
    p = Platform(tmp_path / "vpq", physical_partitions=2, env=dict(FAST))
    for _ in p.running():
        path = tmp_path / "vpq" / "run" / "cluster.secret"
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        secret = path.read_text().strip()
        assert len(secret) == 64
        api = Api(p.url)
        _produce_and_consume(api)
        _nodes_refuse_without(api, secret)
    for f in [tmp_path / "vpq" / "up.out", *(tmp_path / "vpq" / "logs").glob("*.log")]:
        assert secret not in f.read_text(errors="replace"), f  # never logged


def test_up_uses_a_configured_secret_file_as_is(tmp_path: Path) -> None:
    path = tmp_path / "my.secret"
    path.write_text("my-own-cluster-secret\n")
    path.chmod(0o600)
    p = Platform(
        tmp_path / "vpq", physical_partitions=2, env=dict(FAST),
        extra_args=["--single-process", "--set", f"cluster.secret_file={path}"],
    )
    for _ in p.running():
        _produce_and_consume(Api(p.url))
        _nodes_refuse_without(Api(p.url), "my-own-cluster-secret")
    assert not (tmp_path / "vpq" / "run" / "cluster.secret").exists()
    assert path.read_text() == "my-own-cluster-secret\n"


def test_up_refuses_a_world_readable_secret_file(tmp_path: Path) -> None:
    path = tmp_path / "open.secret"
    path.write_text("visible-to-all\n")
    path.chmod(0o644)
    argv = [sys.executable, "-m", "vpq.cli.main", "up", "--data-dir", str(tmp_path / "vpq"), "--port", "0",
            "--set", f"cluster.secret_file={path}"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "readable by every user" in done.stderr and "visible-to-all" not in done.stderr
