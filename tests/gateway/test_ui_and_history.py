"""``GET /v1/maps/history`` and ``GET /ui`` through the real gateway over the real cluster
backend (the browser's view of ``/ui`` is ``tests/integration/test_ui_browser.py``)."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

from aiohttp.test_utils import TestClient

from tests.gateway.conftest import MakeClient, error_of
from vpq.config.settings import AuthToken, GatewaySettings
from vpq.gateway.responses import MapHistory, QueueInfo
from vpq.gateway.ui_page import UI_DIR, UI_PARTS


async def test_history_lists_the_queue_admins_epochs_newest_first(client: TestClient) -> None:
    before = (await (await client.get("/v1/cluster")).json())["epoch"]
    assert (await client.put("/v1/queues/hist-a", json={"virtual_partitions": 2})).status == 201
    assert (await client.put("/v1/queues/hist-a", json={"virtual_partitions": 4})).status == 200
    assert (await client.delete("/v1/queues/hist-a")).status == 204
    r = await client.get("/v1/maps/history", params={"limit": "3"})
    assert r.status == 200
    history = MapHistory.model_validate(await r.json())
    assert [e.epoch for e in history.epochs] == [before + 3, before + 2, before + 1]
    changes = [(c.queue, c.change, c.virtual_partitions) for e in history.epochs for c in e.queues]
    assert changes == [("hist-a", "deleted", 4), ("hist-a", "grown", 4), ("hist-a", "created", 2)]
    assert all(e.kind == "queues" and e.imbalance_before is None and e.moves == [] for e in history.epochs)
    assert history.epochs[0].time_ms >= history.epochs[-1].time_ms
    default = (await (await client.get("/v1/maps/history")).json())["epochs"]
    assert default[0]["epoch"] == before + 3 and len(default) <= 20


async def test_history_limit_is_checked(client: TestClient) -> None:
    for bad in ("0", "1001", "-1", "two", "1.5", "", "--5", "²"):
        err = await error_of(await client.get("/v1/maps/history", params={"limit": bad}), 400, "invalid_query")
        assert err["field"] == "limit"
    assert (await client.get("/v1/maps/history", params={"limit": "1000"})).status == 200


async def test_queue_answers_name_their_groups_and_traffic_per_vp(client: TestClient) -> None:
    await client.put("/v1/queues/ui-q", json={"virtual_partitions": 4})
    r = await client.post("/v1/queues/ui-q/messages", json={"messages": [{"key": f"k{i}", "value": i} for i in range(20)]})
    vps = [x["virtual_partition"] for x in (await r.json())["results"]]
    await client.post("/v1/queues/ui-q/groups/g1/consumers", json={})
    info = QueueInfo.model_validate(await (await client.get("/v1/queues/ui-q")).json())
    assert info.groups == ["g1"]
    assert info.traffic.by_virtual_partition == [vps.count(vp) for vp in range(max(vps) + 1)]
    listed = {q["name"]: q for q in (await (await client.get("/v1/queues")).json())["queues"]}
    assert "groups" not in listed["ui-q"]  # the list stays light: one queue's answer names them


async def test_ui_is_one_self_contained_page(client: TestClient) -> None:
    r = await client.get("/ui")
    assert r.status == 200 and r.content_type == "text/html"
    page = await r.text()
    assert 'data-auth="off"' in page and "/*SCRIPT*/" not in page and "/*STYLE*/" not in page
    assert "/v1/maps/history" in page and "/v1/cluster" in page  # the script is inlined
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "nothing from another origin"
    csp = r.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "unsafe-inline" not in csp


async def test_ui_with_auth_is_served_without_a_token_and_asks_for_one(make_client: MakeClient) -> None:
    tokens = [AuthToken(token="adm", scopes={"admin": ["*"], "consume": ["*"]})]
    client = await make_client(GatewaySettings(auth_enabled=True, tokens=tokens))
    r = await client.get("/ui")
    assert r.status == 200 and 'data-auth="on"' in await r.text()
    await error_of(await client.get("/v1/maps/history"), 401)
    ok = await client.get("/v1/maps/history", headers={"Authorization": "Bearer adm"})
    assert ok.status == 200


async def test_cluster_reports_each_write_nodes_disk(client: TestClient) -> None:
    cluster = (await (await client.get("/v1/cluster")).json())
    assert cluster["write_nodes"]
    for node in cluster["write_nodes"]:
        assert node["reachable"] is True
        assert 0 < node["disk"]["free_bytes"] <= node["disk"]["total_bytes"], node


def test_every_file_of_the_page_is_package_data() -> None:
    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["vpq.gateway"]
    files = sorted(p.relative_to(root / "gateway").as_posix() for p in UI_DIR.iterdir())
    assert set(UI_PARTS) <= {f.split("/")[-1] for f in files}
    assert all(any(fnmatch(f, g) for g in globs) for f in files), (files, globs)
