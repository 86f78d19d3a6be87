"""A TCP proxy that can cut one local process off from the server behind it.

``CuttingProxy(target_host, target_port)``: ``start()`` listens on 127.0.0.1 (``port``)
and relays every connection to the target. ``block(pid)`` closes every relayed
connection whose client is process ``pid`` (found from the kernel's socket table,
``psutil.net_connections``) and refuses its new ones until ``unblock(pid)``: the
process sees its server vanish while every other client keeps working.
"""

from __future__ import annotations

import asyncio
import contextlib

import psutil


class CuttingProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._server: asyncio.base_events.Server | None = None
        self._conns: dict[asyncio.StreamWriter, int | None] = {}
        self._blocked: set[int] = set()
        self.port = 0
        self.refused = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._conns):
                w.close()
            await self._server.wait_closed()
            self._server = None

    def block(self, pid: int) -> int:
        """Cut ``pid`` off; answers how many of its connections were closed."""
        self._blocked.add(pid)
        cut = 0
        for w, owner in list(self._conns.items()):
            if owner == pid:
                w.close()
                cut += 1
        return cut

    def unblock(self, pid: int) -> None:
        self._blocked.discard(pid)

    def _owner(self, client_port: int) -> int | None:
        for c in psutil.net_connections(kind="tcp"):
            if c.laddr and c.raddr and c.laddr.port == client_port and c.raddr.port == self.port:
                return c.pid
        return None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        owner = self._owner(peer[1]) if peer else None
        if owner in self._blocked:
            self.refused += 1
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._conns[writer] = owner
        self._conns[up_writer] = owner

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, OSError, asyncio.CancelledError):
                while True:
                    data = await src.read(65536)
                    if not data or dst.is_closing():
                        break
                    dst.write(data)
                    await dst.drain()
            dst.close()

        try:
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        except asyncio.CancelledError:
            pass  # the proxy is stopping: the task ends quietly
        finally:
            self._conns.pop(writer, None)
            self._conns.pop(up_writer, None)
            writer.close()
            up_writer.close()
