"""``GatewayServer``: serve a gateway app on a host and port, with start()/stop().

With ``GatewaySettings.produce_lane`` (the default) plain produce requests are answered
by the fast lane of ``gateway.produce_lane``, everything else by the app. With
``GatewaySettings.workers`` > 1 it listens with ``SO_REUSEPORT``, beside the other workers.

For ``vpq up`` and integration tests; port 0 picks a free port (read ``port`` after
``start()``).
"""

from __future__ import annotations

from aiohttp import web

from vpq.common.burst_accept import BurstSite
from vpq.common.http_lane import LaneSite
from vpq.config.settings import GatewaySettings
from vpq.gateway.produce_lane import ProduceLane


class GatewayServer:
    """Runs ``app`` (from ``create_app``) on ``settings.host``/``settings.port``."""

    def __init__(self, app: web.Application, settings: GatewaySettings, shutdown_timeout_s: float = 5.0) -> None:
        self.app = app
        self.settings = settings
        self.shutdown_timeout_s = shutdown_timeout_s
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    @property
    def url(self) -> str:
        """``http://host:port`` once started."""
        if self.port is None:
            raise RuntimeError("the gateway server is not started")
        return f"http://{self.settings.host}:{self.port}"

    async def start(self) -> None:
        """Run the app's startup (including the backend when it manages it) and listen."""
        if self._runner is not None:
            raise RuntimeError("already started")
        runner = web.AppRunner(self.app, access_log=None, shutdown_timeout=self.shutdown_timeout_s)
        await runner.setup()
        shared = self.settings.workers > 1  # the other workers listen on the same port
        try:
            site: web.BaseSite
            if self.settings.produce_lane:
                site = LaneSite(
                    runner,
                    ProduceLane(self.app),
                    host=self.settings.host,
                    port=self.settings.port,
                    shutdown_timeout_s=self.shutdown_timeout_s,
                    reuse_port=shared,
                )
            else:
                site = BurstSite(runner, self.settings.host, self.settings.port, reuse_port=shared)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        addresses = runner.addresses
        self.port = int(addresses[0][1]) if addresses else self.settings.port

    async def stop(self) -> None:
        """Stop listening, finish in-flight requests (up to the timeout), run cleanups."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        self.port = None
