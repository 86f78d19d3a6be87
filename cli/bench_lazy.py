"""``vpq bench``, loaded when used: the benchmark commands (``cli/bench.py`` and the
``cli/bench_*.py`` modules) import the load harness, the write-node log, psutil and more,
none of which a client install has. ``bench_app`` is the group ``vpq.cli.main`` registers:
it imports ``cli/bench.py`` only when ``vpq bench ...`` runs (its help included), after
checking the bench extra (``vpq bench rebalance``: the spark extra as well); without it
the command prints which extra to install and exits 1.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from vpq.cli.extras import missing_modules_exit, require_extra

HELP = "Benchmarks: print figures and ratios; the last line is JSON."
# bench commands that need another extra besides bench
COMMAND_EXTRAS = {"rebalance": "spark"}


class LazyBenchGroup(TyperGroup):
    """A click group (typer ships click) whose commands come from ``cli/bench.py``, imported on first use."""

    _loaded: Any = None  # the real group (typer's click Group)

    def _real(self) -> Any:
        if self._loaded is None:
            require_extra("vpq bench", "bench")
            with missing_modules_exit("vpq bench", "bench"):
                from vpq.cli.bench import bench_app
            self._loaded = typer.main.get_group(bench_app)
        return self._loaded

    def list_commands(self, ctx: Any) -> list[str]:
        return self._real().list_commands(ctx)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        extra = COMMAND_EXTRAS.get(cmd_name)
        if extra is not None and not ctx.resilient_parsing:
            require_extra(f"vpq bench {cmd_name}", extra)
        return self._real().get_command(ctx, cmd_name)


bench_app = typer.Typer(cls=LazyBenchGroup, help=HELP, no_args_is_help=True)
