"""Stand-ins for vpq's gateway and write node that do no work: the transport floor.

``vpq bench ceiling`` (:mod:`load.ceiling`) drives them with the same client as
scenario 1, to measure what vpq's shape costs on a machine before vpq does anything:
the HTTP request into a gateway, and the gateway's request to a write node.

* :func:`create_node_app`: ``POST /append`` reads the whole body and answers a small
  JSON, as a write node answers an append, without decoding, writing or syncing.
* :func:`create_gateway_app`: ``POST /v1/queues/{queue}/messages`` reads the whole body
  and answers a produce answer of ``batch`` results, built once, without decoding the
  request. With a ``forward`` URL it first hands the body on to a node the way vpq's
  gateway does (``produce_path.append_accumulator``): one node request in flight, and the
  bodies that arrive meanwhile go together in the next one; the answer waits for the
  node's. Without one it answers at once (one hop).

Run as ``python -m load.null_servers node --port P`` or
``python -m load.null_servers gateway --port P [--forward URL] [--batch N]``.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator

import aiohttp
import orjson
from aiohttp import web

NODE_PATH = "/append"
PRODUCE_PATH = "/v1/queues/{queue}/messages"
MAX_BODY = 64 << 20
NODE_ANSWER = b'{"appended":true}'


def produce_answer(batch: int) -> bytes:
    """A produce answer of ``batch`` results shaped like vpq's (API.md "Produce")."""
    results = [{"id": f"{i:016x}", "partition": 3, "offset": 1_000_000 + i, "virtual_partition": 7} for i in range(batch)]
    return orjson.dumps({"results": results})


class Forwarder:
    """Bodies to one node, one request in flight; bodies that arrive while it is out are
    joined into the next request. ``send`` returns once the node has answered the request
    that carried the body; a node error reaches every waiter of that request."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self._session = session
        self._url = url
        self._pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None

    async def send(self, body: bytes) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((body, future))
        if self._task is None:
            self._task = asyncio.create_task(self._drain())
        await future

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    async with self._session.post(self._url, data=b"".join(b for b, _ in batch)) as resp:
                        await resp.read()
                        resp.raise_for_status()
                except Exception as exc:  # noqa: BLE001 - handed to every waiter
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc)
                    continue
                for _, fut in batch:
                    if not fut.done():
                        fut.set_result(None)
        finally:
            self._task = None


FORWARDER = web.AppKey("forwarder", Forwarder)


def create_node_app() -> web.Application:
    async def append(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=NODE_ANSWER, content_type="application/json")

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post(NODE_PATH, append)
    return app


def create_gateway_app(forward: str | None = None, batch: int = 100) -> web.Application:
    answer = produce_answer(batch)

    async def produce(request: web.Request) -> web.Response:
        body = await request.read()
        if forward is not None:
            await request.app[FORWARDER].send(body)
        return web.Response(body=answer, content_type="application/json")

    async def session_ctx(app: web.Application) -> AsyncIterator[None]:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=8))
        assert forward is not None
        app[FORWARDER] = Forwarder(session, forward)
        yield
        await session.close()

    app = web.Application(client_max_size=MAX_BODY)
    if forward is not None:
        app.cleanup_ctx.append(session_ctx)
    app.router.add_post(PRODUCE_PATH, produce)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m load.null_servers", description=__doc__.split("\n")[0])
    parser.add_argument("role", choices=("node", "gateway"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--forward", default=None, help="gateway: the node's append URL (omit for one hop)")
    parser.add_argument("--batch", type=int, default=100, help="gateway: results in each answer")
    args = parser.parse_args(argv)
    app = create_node_app() if args.role == "node" else create_gateway_app(args.forward, args.batch)
    try:
        import uvloop

        loop: asyncio.AbstractEventLoop | None = uvloop.new_event_loop()
    except ImportError:
        loop = None
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None, loop=loop)


if __name__ == "__main__":
    main()
