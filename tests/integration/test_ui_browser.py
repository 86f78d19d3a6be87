"""The ``/ui`` dashboard in a real browser: headless Chromium against ``vpq up``.

A platform (4 physical partitions) gets two queues, keyed traffic of which a share is
tagged with lane ``feat-a``, and a group whose consumer joined with that lane. Chromium
then loads ``/ui`` and the test reads the DOM it rendered (``--dump-dom``, after the
page's scripts ran and its API calls answered) for what a person would see: the queues
by name, the group with its member and its lane's lag (the number the API gives), the
heat-map's SVG cells (one per virtual partition, on the physical partition the map
says, coloured by traffic) and the map history. It also takes a 1400x1000 screenshot;
``VPQ_UI_SCREENSHOT=PATH`` copies it to PATH (how ``docs/img/dashboard.png`` is made).

With auth enabled, a second test drives the page over the DevTools protocol: it asks for a
token before calling the API, asks again when the token is refused, and keeps a good one
for the tab (a reload goes straight to the dashboard).

Without a Chromium binary the tests are skipped (failed under ``VPQ_TEST_STRICT=1``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import struct
import subprocess
import time
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.api import Api
from tests.integration.platform import Platform
from tests.needs import missing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
LANE = "feat-a"


class Node:
    """An element of the rendered DOM: tag, attributes, children, text."""

    def __init__(self, tag: str, attrs: dict[str, str], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node] = []
        self.texts: list[str] = []

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def text(self) -> str:
        return "".join(self.texts) + "".join(c.text() for c in self.children)

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> list[Node]:
        out = []
        for c in self.children:
            if (tag is None or c.tag == tag) and (cls is None or cls in c.classes) and all(
                c.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items()
            ):
                out.append(c)
            out += c.find_all(tag, cls, **attrs)
        return out

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Node:
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag} class={cls} {attrs}> in the rendered page"
        return found[0]


class DomParser(HTMLParser):
    VOID = {"meta", "link", "input", "br", "img", "hr", "line", "path", "circle"}

    def __init__(self) -> None:
        super().__init__()
        self.root = Node("#root", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs}, self.cur)
        self.cur.children.append(node)
        if tag not in self.VOID:
            self.cur = node

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.cur.children.append(Node(tag, {k: v or "" for k, v in attrs}, self.cur))

    def handle_endtag(self, tag: str) -> None:
        node: Node | None = self.cur
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:
            self.cur = node.parent

    def handle_data(self, data: str) -> None:
        if self.cur.tag not in ("script", "style"):
            self.cur.texts.append(data)


def browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    missing("needs Chromium for the browser test (apt-get install chromium)")


def run_browser(exe: str, profile: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    argv = [
        exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
        "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}", "--virtual-time-budget=5000", *args,
    ]
    done = subprocess.run(argv, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-2000:]
    return done


def human(n: int) -> str:
    """The dashboard's number format (app.js ``num``) for a count below 10,000."""
    return str(n) if n < 1000 else f"{n / 1000:.1f}k"


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def platform(tmp_path: Path):
    yield from Platform(tmp_path / "vpq", physical_partitions=4).running()


def test_the_dashboard_shows_queues_groups_lane_lag_heatmap_and_history(platform: Platform, tmp_path: Path) -> None:
    exe = browser()
    api = Api(platform.url)
    api.put_queue("orders", virtual_partitions=16)
    api.put_queue("payments", virtual_partitions=4)
    for round_ in range(3):
        api.produce("orders", [
            {"key": f"order-{i % 40}", "value": {"n": i, "round": round_}, "lane": LANE if i % 4 == 0 else ""}
            for i in range(120)
        ])
    api.produce("payments", [{"key": f"pay-{i}", "value": i} for i in range(30)])
    cid = api.join("orders", "billing", lane=LANE)
    deadline = time.monotonic() + 15
    while api.group("orders", "billing")["lag"]["total"] < 360 and time.monotonic() < deadline:
        time.sleep(0.2)  # the read node counts the lag as it reads the partitions
    api.poll("orders", "billing", cid, max_messages=1)  # a heartbeat, and one message in flight
    lag = api.group("orders", "billing")["lag"]
    expected = lag["by_lane"][LANE]
    assert lag["total"] == 360 and 0 < expected < 1000, lag
    orders = api.call("GET", "/v1/queues/orders").json()

    done = run_browser(exe, tmp_path / "profile", "--dump-dom", platform.url + "/ui")
    parser = DomParser()
    parser.feed(done.stdout.decode())
    dom = parser.root

    status = dom.find(id="status").text()
    assert status.startswith("updated") and "failed" not in status, status
    # the queues, by name, with their traffic
    names = [td.text() for td in dom.find(id="queue-table").find_all("td", cls="queue-name")]
    assert sorted(names) == ["orders", "payments"], names
    assert dom.find(id="queue-table").find("tr", data_queue="orders").text().count("billing") == 1
    # the group, its lane consumer and its lane's lag
    card = dom.find("div", cls="group-card", data_queue="orders", data_group="billing")
    assert "orders / billing" in card.text()
    member = card.find("tr", cls="member", data_consumer=cid)
    assert LANE in member.text()
    lane_row = card.find("tr", cls="lag-lane", data_lane=LANE)
    assert lane_row.find_all("td")[-1].text() == human(expected), lane_row.text()
    assert card.find_all("rect", cls="vp-bar"), "no lag-by-vp bars"
    # the heat-map: one SVG cell per vp, on the pp the map places it, coloured by traffic
    heat = dom.find("svg", cls="heatmap", data_queue="orders")
    cells = heat.find_all("rect", cls="hm-cell")
    assert sorted(int(c.attrs["data-vp"]) for c in cells) == list(range(16))
    assert all(int(c.attrs["data-pp"]) == orders["placement"][int(c.attrs["data-vp"])] for c in cells)
    assert sum(int(c.attrs["data-messages"]) for c in cells) == 360
    assert len({c.attrs["fill"] for c in cells}) > 1, "every cell has the same colour"
    assert len(dom.find("svg", cls="heatmap", data_queue="payments").find_all("rect", cls="hm-cell")) == 4
    # the map history: the epochs that created the queues
    history = dom.find(id="history-table")
    assert "orders created (16 vps)" in history.text() and "payments created (4 vps)" in history.text()
    assert " free of " in dom.find(id="write-nodes").find("tr", data_node="w0").text()  # its disk

    shot = tmp_path / "dashboard.png"
    run_browser(exe, tmp_path / "profile", "--window-size=1400,1000", f"--screenshot={shot}", platform.url + "/ui")
    data = shot.read_bytes()
    assert png_size(data) == (1400, 1000) and len(data) > 20_000
    if os.environ.get("VPQ_UI_SCREENSHOT"):
        Path(os.environ["VPQ_UI_SCREENSHOT"]).write_bytes(data)


TOKEN = "ui-admin-token"
AUTH_ENV = {
    "VPQ_GATEWAY__AUTH_ENABLED": "true",
    "VPQ_GATEWAY__TOKENS": json.dumps([{"token": TOKEN, "scopes": {"admin": ["*"], "consume": ["*"], "produce": ["*"]}}]),
}


class DevTools:
    """A page of a headless Chromium driven over the DevTools protocol (its websocket)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        while True:
            msg = await self.ws.receive_json(timeout=20)
            if msg.get("id") == self.next_id:
                assert "error" not in msg, msg
                return msg["result"]

    async def js(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    async def until(self, expression: str, timeout_s: float = 15.0) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = await self.js(expression)
            if value:
                return value
            await asyncio.sleep(0.1)
        raise AssertionError(f"never true: {expression}")


@contextlib.asynccontextmanager
async def devtools(exe: str, profile: Path, url: str) -> AsyncIterator[DevTools]:
    proc = subprocess.Popen(
        [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--disable-extensions", f"--user-data-dir={profile}", "--remote-debugging-port=0", url],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 20
        while not (port_file.exists() and port_file.read_text().strip()) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        async with aiohttp.ClientSession() as session:
            targets = await (await session.get(f"http://127.0.0.1:{port}/json/list")).json()
            page = next(t for t in targets if t["type"] == "page")
            async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                yield DevTools(ws)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def auth_platform(tmp_path: Path):
    yield from Platform(tmp_path / "vpq-auth", physical_partitions=2, env=dict(AUTH_ENV)).running()


async def test_with_auth_the_dashboard_asks_for_a_token_once(auth_platform: Platform, tmp_path: Path) -> None:
    exe = browser()
    api = Api(auth_platform.url)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    api.call("PUT", "/v1/queues/secret-q", {"virtual_partitions": 2}, headers=bearer, expect=201)
    api.call("GET", "/v1/queues", expect=401)
    async with devtools(exe, tmp_path / "profile", auth_platform.url + "/ui") as page:
        # no token yet: the form is shown, the dashboard is not, nothing was asked of the API
        await page.until("document.readyState === 'complete' && !!document.getElementById('token-form')")
        assert await page.js("document.getElementById('token-form').hidden") is False
        assert await page.js("document.getElementById('dashboard').hidden") is True
        # a wrong token: refused, asked again with a message
        await page.js("document.getElementById('token-input').value = 'wrong';"
                      "document.getElementById('token-form').requestSubmit()")
        await page.until("!document.getElementById('token-error').hidden")
        assert "refused" in await page.js("document.getElementById('token-error').textContent")
        # the right one: the dashboard shows the queue the token may see
        await page.js(f"document.getElementById('token-input').value = {json.dumps(TOKEN)};"
                      "document.getElementById('token-form').requestSubmit()")
        await page.until("document.querySelector('#queue-table td.queue-name')?.textContent === 'secret-q'")
        assert await page.js("sessionStorage.getItem('vpq-token')") == TOKEN
        # asked once: a reload keeps the token (this tab) and goes straight to the dashboard
        await page.call("Page.reload")
        await page.until("document.querySelector('#queue-table td.queue-name')?.textContent === 'secret-q'")
        assert await page.js("document.getElementById('token-form').hidden") is True
        assert (await page.js("document.getElementById('status').textContent")).startswith("updated")
